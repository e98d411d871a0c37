/* SPDX-License-Identifier: MIT */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parse.h"
#include "revoke.h"
#include "signed-file.h"
#include "sigset.h"
#include "yaml-doc.h"
#include "yaml-write.h"

#define W "revocation list"

_Static_assert(REVOCATIONS_MAX_FILE == SIGNED_FILE_HEADER_SIZE + REVOCATIONS_MAX_TEXT + BUNDLE_MAX_SIGNATURE,
               "revoke.h's file cap is the container's");

static const SignedFileKind revocations_kind = {
        .magic = REVOCATIONS_MAGIC, .noun = "revocation list", .format_min = REVOCATIONS_FORMAT,
        .format_max = REVOCATIONS_FORMAT, .max_text = REVOCATIONS_MAX_TEXT,
};

Revocations *revocations_free(Revocations *r) {
        if (!r)
                return NULL;
        free(r->entries);
        free(r->text);
        free(r->signature);
        free(r);
        return NULL;
}

/* A serial number in hex (an odd count of digits is read as if a 0 led), leading zero bytes dropped. */
static int parse_serial(const char *s, uint8_t ret[REVOKED_SERIAL_MAX], size_t *ret_len) {
        size_t n = strlen(s), len = (n + 1) / 2, skip = 0;
        uint8_t buf[REVOKED_SERIAL_MAX] = {};

        if (n == 0 || len > REVOKED_SERIAL_MAX)
                return -EINVAL;
        for (size_t i = 0; i < n; i++) {
                int v = hex_digit(s[i]);
                if (v < 0)
                        return -EINVAL;
                size_t pos = i + (n % 2);       /* the digit's place in an even-length string */
                buf[pos / 2] |= (uint8_t) (pos % 2 ? v : v << 4);
        }
        while (skip + 1 < len && buf[skip] == 0)
                skip++;
        memcpy(ret, buf + skip, len - skip);
        *ret_len = len - skip;
        return 0;
}

static bool text_valid(const char *s) {
        for (; *s; s++)
                if ((unsigned char) *s < 0x20 || *s == 0x7f)
                        return false;
        return true;
}

/* The checks the parser and revocations_add() share; @field names what is wrong. */
static int entry_check(const RevokedEntry *e, const char **field) {
        if (e->kind == REVOKED_CERT && (e->issuer[0] == '\0' || !text_valid(e->issuer)))
                return *field = "issuer", -EINVAL;
        if (e->kind == REVOKED_CERT && e->serial_len == 0)
                return *field = "serial", -EINVAL;
        if (!text_valid(e->subject))
                return *field = "subject", -EINVAL;
        if (!text_valid(e->reason))
                return *field = "reason", -EINVAL;
        return 0;
}

static bool entry_same(const RevokedEntry *a, const RevokedEntry *b) {
        if (a->kind != b->kind)
                return false;
        if (a->kind == REVOKED_KEY)
                return memcmp(a->key_sha256, b->key_sha256, SHA256_DIGEST_SIZE) == 0;
        return strcmp(a->issuer, b->issuer) == 0 && a->serial_len == b->serial_len &&
               memcmp(a->serial, b->serial, a->serial_len) == 0;
}

static int copy_text(const YamlNode *e, const char *key, size_t size, char *buf, TpError *err) {
        const char *s = NULL;
        int r = yaml_get_str(e, key, false, W, &s, err);

        if (r <= 0)
                return r;
        if (strlen(s) >= size)
                return tp_error(err, -EBADMSG, W ": line %u: '%s' is longer than %zu bytes", e->line, key, size - 1);
        snprintf(buf, size, "%s", s);
        return 0;
}

static int parse_entry(const YamlNode *e, RevokedEntry *ret, TpError *err) {
        static const char *const keys[] = { "key_sha256", "issuer", "serial", "subject", "reason", NULL };
        RevokedEntry x = {};
        const char *serial = NULL, *field = NULL;
        int r;

        if (e->kind != YAML_MAPPING)
                return tp_error(err, -EBADMSG, W ": line %u: an entry is not a mapping", e->line);
        if ((r = yaml_check_keys(e, keys, W, err)) < 0)
                return r;
        bool by_key = yaml_map_get(e, "key_sha256"), by_cert = yaml_map_get(e, "issuer") || yaml_map_get(e, "serial");
        if (by_key == by_cert)
                return tp_error(err, -EBADMSG, W ": line %u: an entry names a key (key_sha256) or a certificate "
                                "(issuer and serial), not %s", e->line, by_key ? "both" : "neither");
        if (by_key) {
                x.kind = REVOKED_KEY;
                if ((r = yaml_get_sha256(e, "key_sha256", true, W, x.key_sha256, err)) < 0)
                        return r;
        } else {
                x.kind = REVOKED_CERT;
                if ((r = yaml_get_str(e, "issuer", true, W, &field, err)) < 0 ||
                    (r = yaml_get_str(e, "serial", true, W, &serial, err)) < 0 ||
                    (r = copy_text(e, "issuer", sizeof(x.issuer), x.issuer, err)) < 0)
                        return r;
                if (parse_serial(serial, x.serial, &x.serial_len) < 0)
                        return tp_error(err, -EBADMSG, W ": line %u: 'serial': expected 1 to %d bytes in hex, found "
                                        "'%.60s'", e->line, REVOKED_SERIAL_MAX, serial);
        }
        if ((r = copy_text(e, "subject", sizeof(x.subject), x.subject, err)) < 0 ||
            (r = copy_text(e, "reason", sizeof(x.reason), x.reason, err)) < 0)
                return r;
        if (entry_check(&x, &field) < 0)
                return tp_error(err, -EBADMSG, W ": line %u: '%s' is empty or holds control characters", e->line,
                                field);
        *ret = x;
        return 0;
}

static int parse_text(Revocations *rl, uint32_t header_format, TpError *err) {
        static const char *const keys[] = { "format", "version", "created", "revoked", NULL };
        _cleanup_(yaml_node_freep) YamlNode *root = NULL;
        const YamlNode *list;
        uint64_t format;
        int r;

        if ((r = yaml_doc_parse(rl->text, rl->text_len, REVOCATIONS_MAX_TEXT, W, &root, err)) < 0)
                return r;
        if (root->kind != YAML_MAPPING)
                return tp_error(err, -EBADMSG, W ": the text is not a mapping");
        if ((r = yaml_check_keys(root, keys, W, err)) < 0 ||
            (r = yaml_get_u64(root, "format", true, W, &format, err)) < 0)
                return r;
        if (format != header_format)
                return tp_error(err, -EBADMSG, W ": format %" PRIu64 " differs from the header's %" PRIu32, format,
                                header_format);
        if ((r = yaml_get_u64(root, "version", true, W, &rl->version, err)) < 0 ||
            (r = yaml_get_time(root, "created", true, W, &rl->created, err)) < 0 ||
            (r = yaml_get_seq(root, "revoked", true, W, &list, err)) < 0)
                return r;
        if (rl->version == 0)
                return tp_error(err, -EBADMSG, W ": 'version' must be at least 1");
        if (list->n > REVOCATIONS_MAX_ENTRIES)
                return tp_error(err, -E2BIG, W ": line %u: %zu entries exceed the cap of %u", list->line, list->n,
                                REVOCATIONS_MAX_ENTRIES);
        rl->entries = calloc(list->n ? list->n : 1, sizeof(RevokedEntry));
        if (!rl->entries)
                return -ENOMEM;
        for (size_t i = 0; i < list->n; i++) {
                if ((r = parse_entry(list->items[i], &rl->entries[i], err)) < 0)
                        return r;
                for (size_t j = 0; j < i; j++)
                        if (entry_same(&rl->entries[j], &rl->entries[i]))
                                return tp_error(err, -EBADMSG, W ": line %u: the same entry twice",
                                                list->items[i]->line);
                rl->n = i + 1;
        }
        return 0;
}

int revocations_parse(const uint8_t *data, size_t len, const char *what, Revocations **ret, TpError *err) {
        _cleanup_(revocations_freep) Revocations *rl = NULL;
        SignedFile f;
        int r;

        if ((r = signed_file_split(&revocations_kind, data, len, what, &f, err)) < 0)
                return r;
        rl = calloc(1, sizeof(Revocations));
        if (!rl)
                return -ENOMEM;
        if (signed_file_copy(&f, &rl->text, &rl->signature) < 0)
                return -ENOMEM;
        rl->text_len = f.text_len;
        rl->signature_len = f.signature_len;
        if ((r = parse_text(rl, f.format, err)) < 0)
                return tp_error_prefix(err, r, "%s", what);
        *ret = TAKE_PTR(rl);
        return 0;
}

int revocations_load(const char *path, Revocations **ret, TpError *err) {
        _cleanup_free_ uint8_t *buf = NULL;
        size_t len;
        int r = signed_file_read(&revocations_kind, path, &buf, &len, err);

        if (r < 0)
                return r;
        return revocations_parse(buf, len, path, ret, err);
}

int revocations_verify(const Revocations *rl, const char *what, const SignatureTrust *trust, char *ret_signer,
                       TpError *err) {
        char signers[SIGNATURE_SIGNERS_MAX];
        int r = signature_set_verify(rl->signature, rl->signature_len, rl->text, rl->text_len, trust, NULL, signers,
                                     err);

        if (r < 0)
                return tp_error_prefix(err, r, "%s", what);
        if (ret_signer)
                snprintf(ret_signer, 256, "%s", signers);
        return 0;
}

const RevokedEntry *revocations_match(const Revocations *rl, const uint8_t key_sha256[SHA256_DIGEST_SIZE],
                                      const char *issuer, const uint8_t *serial, size_t serial_len) {
        while (serial_len > 1 && serial[0] == 0) {
                serial++;
                serial_len--;
        }
        for (size_t i = 0; rl && i < rl->n; i++) {
                const RevokedEntry *e = &rl->entries[i];
                if (e->kind == REVOKED_KEY ? memcmp(e->key_sha256, key_sha256, SHA256_DIGEST_SIZE) == 0 :
                    strcmp(e->issuer, issuer) == 0 && e->serial_len == serial_len &&
                    memcmp(e->serial, serial, serial_len) == 0)
                        return e;
        }
        return NULL;
}

int revocations_add(Revocations *rl, const RevokedEntry *e, TpError *err) {
        const char *field = NULL;

        if (entry_check(e, &field) < 0)
                return tp_error(err, -EINVAL, "a revocation's %s is empty or holds control characters", field);
        for (size_t i = 0; i < rl->n; i++)
                if (entry_same(&rl->entries[i], e))
                        return -EEXIST;
        if (rl->n >= REVOCATIONS_MAX_ENTRIES)
                return tp_error(err, -E2BIG, "a revocation list holds at most %u entries", REVOCATIONS_MAX_ENTRIES);
        RevokedEntry *p = realloc(rl->entries, (rl->n + 1) * sizeof(RevokedEntry));
        if (!p)
                return -ENOMEM;
        rl->entries = p;
        rl->entries[rl->n++] = *e;
        return 0;
}

static void serial_hex(const uint8_t *serial, size_t len, char *buf, size_t size) {
        buf[0] = '\0';
        for (size_t i = 0, n = 0; i < len && n + 3 <= size; i++, n += 2)
                snprintf(buf + n, size - n, "%02x", serial[i]);
}

static void write_text(YamlWriter *w, const Revocations *rl) {
        char hex[2 * REVOKED_SERIAL_MAX + 1];

        yaml_writer_map_start(w, false);
        yaml_writer_kv_u64(w, "format", REVOCATIONS_FORMAT);
        yaml_writer_kv_u64(w, "version", rl->version);
        yaml_writer_kv_time(w, "created", rl->created);
        yaml_writer_str(w, "revoked");
        yaml_writer_seq_start(w, false);
        for (size_t i = 0; i < rl->n; i++) {
                const RevokedEntry *e = &rl->entries[i];
                yaml_writer_map_start(w, true);
                if (e->kind == REVOKED_KEY)
                        yaml_writer_kv_sha(w, "key_sha256", e->key_sha256);
                else {
                        serial_hex(e->serial, e->serial_len, hex, sizeof(hex));
                        yaml_writer_kv(w, "issuer", e->issuer);
                        yaml_writer_kv(w, "serial", hex);
                }
                if (e->subject[0])
                        yaml_writer_kv(w, "subject", e->subject);
                if (e->reason[0])
                        yaml_writer_kv(w, "reason", e->reason);
                yaml_writer_map_end(w);
        }
        yaml_writer_seq_end(w);
        yaml_writer_map_end(w);
}

int revocations_text(const Revocations *rl, char **ret_text, size_t *ret_len, TpError *err) {
        if (rl->version == 0)
                return tp_error(err, -EINVAL, "a revocation list's version is at least 1");
        YamlWriter *w = yaml_writer_new(REVOCATIONS_MAX_TEXT);
        if (!w)
                return -ENOMEM;
        write_text(w, rl);
        return yaml_writer_finish(w, W, ret_text, ret_len, err);
}

int revocations_pack(const char *text, size_t text_len, const uint8_t *sig, size_t sig_len, uint8_t **ret_data,
                     size_t *ret_len) {
        return signed_file_pack(&revocations_kind, REVOCATIONS_FORMAT, text, text_len, sig, sig_len, ret_data,
                                ret_len);
}

const char *revoked_entry_describe(const RevokedEntry *e, char *buf, size_t size) {
        char hex[2 * REVOKED_SERIAL_MAX + 1], key[SHA256_HEX_SIZE];

        if (e->kind == REVOKED_KEY) {
                sha256_to_hex(e->key_sha256, key);
                snprintf(buf, size, "key %.16s...%s%s%s", key, e->subject[0] ? " ('" : "", e->subject,
                         e->subject[0] ? "')" : "");
        } else {
                serial_hex(e->serial, e->serial_len, hex, sizeof(hex));
                snprintf(buf, size, "certificate %s of '%s'", hex, e->issuer);
        }
        return buf;
}
