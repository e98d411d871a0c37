/* SPDX-License-Identifier: MIT */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mbedtls/x509_crt.h>

#include "parse.h"
#include "signed-file.h"
#include "sigset.h"
#include "trust-root.h"
#include "yaml-doc.h"
#include "yaml-write.h"

#define W "trust root"

_Static_assert(TRUST_ROOT_MAX_FILE == SIGNED_FILE_HEADER_SIZE + TRUST_ROOT_MAX_TEXT + BUNDLE_MAX_SIGNATURE,
               "trust-root.h's file cap is the container's");

static const SignedFileKind trust_root_kind = {
        .magic = TRUST_ROOT_MAGIC, .noun = "trust root", .format_min = TRUST_ROOT_FORMAT,
        .format_max = TRUST_ROOT_FORMAT, .max_text = TRUST_ROOT_MAX_TEXT,
};

static const char *const role_names[TRUST_ROLE_COUNT] = { "root", "bundle", "channel" };

const char *trust_role_name(TrustRole role) {
        return role < TRUST_ROLE_COUNT ? role_names[role] : "?";
}

TrustRoot *trust_root_free(TrustRoot *t) {
        if (!t)
                return NULL;
        for (size_t i = 0; i < TRUST_ROLE_COUNT; i++)
                free(t->roles[i].ca_pem);
        free(t->text);
        free(t->signature);
        free(t);
        return NULL;
}

/* Every certificate of @pem parses and is a CA; their count. */
static int role_certs_check(const char *pem, size_t len, const char *what, size_t *ret_n, TpError *err) {
        _cleanup_(mbedtls_x509_crt_free) mbedtls_x509_crt crt;
        size_t n = 0;
        int r;

        mbedtls_x509_crt_init(&crt);
        if (len > TRUST_ROOT_ROLE_PEM_MAX)
                return tp_error(err, -E2BIG, "%s: %zu bytes of PEM, more than the cap of %u", what, len,
                                TRUST_ROOT_ROLE_PEM_MAX);
        if (len == 0 || memchr(pem, '\0', len))
                return tp_error(err, -EBADMSG, "%s: no PEM certificates", what);
        r = mbedtls_x509_crt_parse(&crt, (const unsigned char *) pem, len + 1);
        if (r != 0)
                return tp_error(err, -EBADMSG, "%s: %s", what,
                                r > 0 ? "a certificate does not parse" : "not PEM certificates");
        for (const mbedtls_x509_crt *c = &crt; c && c->version; c = c->next) {
                char dn[256];
                if (++n > TRUST_ROOT_ROLE_CERTS)
                        return tp_error(err, -E2BIG, "%s: more than %d certificates", what, TRUST_ROOT_ROLE_CERTS);
                if (!c->ca_istrue) {
                        (void) mbedtls_x509_dn_gets(dn, sizeof(dn), &c->subject);
                        return tp_error(err, -EBADMSG, "%s: certificate '%s' is not a CA (basicConstraints CA:TRUE)",
                                        what, dn);
                }
        }
        *ret_n = n;
        return 0;
}

void trust_root_name_roles(TrustRoot *t) {
        for (size_t i = 0; i < TRUST_ROLE_COUNT; i++)
                snprintf(t->roles[i].name, sizeof(t->roles[i].name), "trust root v%" PRIu64 "'s %s role", t->version,
                         role_names[i]);
}

int trust_root_set_role(TrustRoot *t, TrustRole role, const char *pem, size_t pem_len, unsigned threshold,
                        const char *what, TpError *err) {
        TrustRootRole *x = &t->roles[role];
        size_t n;
        int r;

        if (threshold < 1 || threshold > SIGNATURE_SET_MAX)
                return tp_error(err, -EINVAL, "%s: threshold %u is not 1..%d", what, threshold, SIGNATURE_SET_MAX);
        if ((r = role_certs_check(pem, pem_len, what, &n, err)) < 0)
                return r;
        char *copy = strndup(pem, pem_len);
        if (!copy)
                return -ENOMEM;
        free(x->ca_pem);
        *x = (TrustRootRole) { .ca_pem = copy, .threshold = threshold, .n_certs = n };
        trust_root_name_roles(t);
        return 0;
}

static int parse_role(TrustRoot *t, const YamlNode *roles, TrustRole role, TpError *err) {
        static const char *const keys[] = { "threshold", "ca", NULL };
        const YamlNode *node;
        const char *pem;
        uint64_t threshold;
        char what[96];
        int r;

        snprintf(what, sizeof(what), W ": role '%s'", role_names[role]);
        if ((r = yaml_get_map(roles, role_names[role], true, W, &node, err)) < 0 ||
            (r = yaml_check_keys(node, keys, W, err)) < 0 ||
            (r = yaml_get_u64(node, "threshold", true, W, &threshold, err)) < 0 ||
            (r = yaml_get_str(node, "ca", true, W, &pem, err)) < 0)
                return r;
        if (threshold < 1 || threshold > SIGNATURE_SET_MAX)
                return tp_error(err, -EBADMSG, "%s: line %u: threshold %" PRIu64 " is not 1..%d", what, node->line,
                                threshold, SIGNATURE_SET_MAX);
        r = trust_root_set_role(t, role, pem, strlen(pem), (unsigned) threshold, what, err);
        return r == -EINVAL ? -EBADMSG : r;
}

static int parse_text(TrustRoot *t, uint32_t header_format, TpError *err) {
        static const char *const keys[] = { "format", "version", "created", "expires", "roles", NULL };
        static const char *const role_keys[] = { "root", "bundle", "channel", NULL };
        _cleanup_(yaml_node_freep) YamlNode *root = NULL;
        const YamlNode *roles;
        uint64_t format;
        int r;

        if ((r = yaml_doc_parse(t->text, t->text_len, TRUST_ROOT_MAX_TEXT, W, &root, err)) < 0)
                return r;
        if (root->kind != YAML_MAPPING)
                return tp_error(err, -EBADMSG, W ": the text is not a mapping");
        if ((r = yaml_check_keys(root, keys, W, err)) < 0 ||
            (r = yaml_get_u64(root, "format", true, W, &format, err)) < 0)
                return r;
        if (format != header_format)
                return tp_error(err, -EBADMSG, W ": format %" PRIu64 " differs from the header's %" PRIu32, format,
                                header_format);
        if ((r = yaml_get_u64(root, "version", true, W, &t->version, err)) < 0 ||
            (r = yaml_get_time(root, "created", true, W, &t->created, err)) < 0 ||
            (r = yaml_get_time(root, "expires", true, W, &t->expires, err)) < 0 ||
            (r = yaml_get_map(root, "roles", true, W, &roles, err)) < 0 ||
            (r = yaml_check_keys(roles, role_keys, W, err)) < 0)
                return r;
        if (t->version == 0)
                return tp_error(err, -EBADMSG, W ": 'version' must be at least 1");
        if (t->expires <= t->created)
                return tp_error(err, -EBADMSG, W ": 'expires' is not after 'created'");
        for (TrustRole i = 0; i < TRUST_ROLE_COUNT; i++)
                if ((r = parse_role(t, roles, i, err)) < 0)
                        return r;
        trust_root_name_roles(t);
        return 0;
}

int trust_root_parse(const uint8_t *data, size_t len, const char *what, TrustRoot **ret, TpError *err) {
        _cleanup_(trust_root_freep) TrustRoot *t = NULL;
        SignedFile f;
        int r;

        if ((r = signed_file_split(&trust_root_kind, data, len, what, &f, err)) < 0)
                return r;
        t = calloc(1, sizeof(TrustRoot));
        if (!t)
                return -ENOMEM;
        if (signed_file_copy(&f, &t->text, &t->signature) < 0)
                return -ENOMEM;
        t->text_len = f.text_len;
        t->signature_len = f.signature_len;
        if ((r = parse_text(t, f.format, err)) < 0)
                return tp_error_prefix(err, r, "%s", what);
        *ret = TAKE_PTR(t);
        return 0;
}

int trust_root_load(const char *path, TrustRoot **ret, TpError *err) {
        _cleanup_free_ uint8_t *buf = NULL;
        size_t len;
        int r = signed_file_read(&trust_root_kind, path, &buf, &len, err);

        if (r < 0)
                return r;
        return trust_root_parse(buf, len, path, ret, err);
}

SignatureTrust trust_root_role(const TrustRoot *t, TrustRole role, const SignatureTrust *base) {
        SignatureTrust s = *base;

        s.ca_path = t->roles[role].name;
        s.ca_pem = t->roles[role].ca_pem;
        s.threshold = t->roles[role].threshold;
        return s;
}

int trust_root_verify(const TrustRoot *next, const char *what, const SignatureTrust *held, char *ret_signers,
                      TpError *err) {
        SignatureTrust own = trust_root_role(next, TRUST_ROLE_ROOT, held);
        char t1[21], t2[21];
        int r;

        r = signature_set_verify(next->signature, next->signature_len, next->text, next->text_len, held, NULL,
                                 ret_signers, err);
        if (r < 0)
                return tp_error_prefix(err, r, "%s: trust root version %" PRIu64 " is not signed as the root role "
                                       "this device holds (%s) requires", what, next->version, held->ca_path);
        r = signature_set_verify(next->signature, next->signature_len, next->text, next->text_len, &own, NULL, NULL,
                                 err);
        if (r < 0)
                return tp_error_prefix(err, r, "%s: trust root version %" PRIu64 " is not signed by its own root "
                                       "role", what, next->version);
        if (held->now > 0 && next->expires < (int64_t) held->now) {
                format_time_utc(next->expires, t1);
                format_time_utc((int64_t) held->now, t2);
                return tp_error(err, -EKEYEXPIRED, "%s: trust root version %" PRIu64 " expired on %s (now %s)", what,
                                next->version, t1, t2);
        }
        return 0;
}

static void write_text(YamlWriter *w, const TrustRoot *t) {
        yaml_writer_map_start(w, false);
        yaml_writer_kv_u64(w, "format", TRUST_ROOT_FORMAT);
        yaml_writer_kv_u64(w, "version", t->version);
        yaml_writer_kv_time(w, "created", t->created);
        yaml_writer_kv_time(w, "expires", t->expires);
        yaml_writer_str(w, "roles");
        yaml_writer_map_start(w, false);
        for (size_t i = 0; i < TRUST_ROLE_COUNT; i++) {
                yaml_writer_str(w, role_names[i]);
                yaml_writer_map_start(w, false);
                yaml_writer_kv_u64(w, "threshold", t->roles[i].threshold);
                yaml_writer_kv_literal(w, "ca", t->roles[i].ca_pem);
                yaml_writer_map_end(w);
        }
        yaml_writer_map_end(w);
        yaml_writer_map_end(w);
}

int trust_root_pack(const char *text, size_t text_len, const uint8_t *sig, size_t sig_len, uint8_t **ret_data,
                    size_t *ret_len) {
        return signed_file_pack(&trust_root_kind, TRUST_ROOT_FORMAT, text, text_len, sig, sig_len, ret_data, ret_len);
}

int trust_root_text(const TrustRoot *t, char **ret_text, size_t *ret_len, TpError *err) {
        if (t->version == 0 || t->expires <= t->created)
                return tp_error(err, -EINVAL, "a trust root needs a version from 1 and an expiry after its creation");
        for (size_t i = 0; i < TRUST_ROLE_COUNT; i++)
                if (!t->roles[i].ca_pem)
                        return tp_error(err, -EINVAL, "a trust root needs the %s role's CAs", role_names[i]);
        YamlWriter *w = yaml_writer_new(TRUST_ROOT_MAX_TEXT);
        if (!w)
                return -ENOMEM;
        write_text(w, t);
        return yaml_writer_finish(w, W, ret_text, ret_len, err);
}
