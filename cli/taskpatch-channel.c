/* SPDX-License-Identifier: MIT */
/* Channel files in the offline tools: 'taskpatch inspect' and 'taskpatch verify' take them too. */

#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "channel.h"
#include "cli.h"
#include "hashfile.h"
#include "sigset.h"
#include "taskpatch.h"
#include "yaml-doc.h"

bool cli_has_magic(const char *path, const char *magic) {
        char head[8] = {};
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        bool yes = fd >= 0 && read(fd, head, sizeof(head)) == (ssize_t) sizeof(head) &&
                   memcmp(head, magic, sizeof(head)) == 0;
        safe_close(fd);
        return yes;
}

bool cli_is_channel(const char *path) {
        return cli_has_magic(path, CHANNEL_MAGIC);
}

static json_t *sha_json(const uint8_t d[SHA256_DIGEST_SIZE]) {
        char hex[SHA256_HEX_SIZE];
        sha256_to_hex(d, hex);
        return json_string(hex);
}

static json_t *model_to_json(const Channel *c, const ChannelModel *cm) {
        json_t *bundles = json_array();

        for (size_t i = cm->first; i < cm->first + cm->n_bundles; i++) {
                const ChannelBundle *b = &c->bundles[i];
                json_array_append_new(bundles, json_pack("{s:s, s:I, s:s, s:I, s:o, s:s, s:o}", "task", b->task,
                                                         "version", (json_int_t) b->version, "path", b->path, "size",
                                                         (json_int_t) b->size, "sha256", sha_json(b->sha256), "kind",
                                                         artifact_kind_to_string(b->kind), "base_sha256",
                                                         sha_json(b->base_sha256)));
                if (b->role != MANIFEST_ROLE_TASK) {
                        json_t *e = json_array_get(bundles, json_array_size(bundles) - 1);
                        json_object_set_new(e, "role", json_string(manifest_role_to_string(b->role)));
                        json_object_set_new(e, "target_sha256", sha_json(b->target_sha256));
                }
        }
        return json_pack("{s:o, s:o, s:o, s:o}", "base", cm->has_base ? sha_json(cm->base_sha256) : json_null(),
                         "desired", cm->desired[0] ? json_string(cm->desired) : json_null(), "rollout",
                         cm->rollout.set ? json_pack("{s:i, s:I}", "percent", (int) cm->rollout.percent, "seed",
                                                     (json_int_t) cm->rollout.seed) : json_null(),
                         "bundles", bundles);
}

/*
 * Format 1 keeps its shape (desired and bundles at the top, as before); format 2 has
 * "models", an object by model name.
 */
static json_t *trust_file_json(const ChannelTrustFile *f) {
        return !f->set ? json_null() : json_pack("{s:I, s:s, s:I, s:o}", "version", (json_int_t) f->version, "path",
                                                 f->path, "size", (json_int_t) f->size, "sha256", sha_json(f->sha256));
}

json_t *channel_to_json(const Channel *c) {
        char created[21], expires[21];

        format_time_utc(c->created, created);
        format_time_utc(c->expires, expires);
        json_t *o = json_pack("{s:i, s:s, s:I, s:s, s:o}", "format", (int) c->format, "channel", c->name, "serial",
                              (json_int_t) c->serial, "created", created, "expires",
                              c->expires ? json_string(expires) : json_null());
        json_object_set_new(o, "revocations", trust_file_json(&c->revocations));
        json_object_set_new(o, "root", trust_file_json(&c->root));
        if (c->format == CHANNEL_FORMAT_1) {
                json_t *m = model_to_json(c, &c->models[0]);
                json_object_set(o, "desired", json_object_get(m, "desired"));
                json_object_set(o, "bundles", json_object_get(m, "bundles"));
                json_decref(m);
                return o;
        }
        json_t *models = json_object();
        for (size_t i = 0; i < c->n_models; i++)
                json_object_set_new(models, c->models[i].name, model_to_json(c, &c->models[i]));
        json_object_set_new(o, "models", models);
        return o;
}

static void print_model(const Channel *c, const ChannelModel *cm) {
        char hex[SHA256_HEX_SIZE];
        const char *indent = cm->name[0] ? "  " : "";

        if (cm->name[0])
                printf("model     %s\n", cm->name);
        if (cm->has_base) {
                sha256_to_hex(cm->base_sha256, hex);
                printf("%sbase      %s\n", indent, hex);
        }
        printf("%sdesired   %s\n", indent, cm->desired[0] ? cm->desired : "(none)");
        if (cm->rollout.set)
                printf("%srollout   %" PRIu32 "%% (seed %" PRIu64 ")\n", indent, cm->rollout.percent,
                       cm->rollout.seed);
        printf("%sbundles   %zu\n", indent, cm->n_bundles);
        for (size_t i = cm->first; i < cm->first + cm->n_bundles; i++)
                printf("%s  %-20s v%-6" PRIu64 " %-28s %12" PRIu64 " bytes%s\n", indent, c->bundles[i].task,
                       c->bundles[i].version, c->bundles[i].path, c->bundles[i].size,
                       c->bundles[i].role == MANIFEST_ROLE_BASE ? " (base bundle)" : "");
}

json_t *signer_json(const SignatureInfo *info) {
        return json_pack("{s:s, s:s, s:s, s:o}", "subject", info->subject, "issuer", info->issuer, "serial",
                         info->serial, "key_sha256", sha_json(info->key_sha256));
}

void signer_print(const SignatureInfo *info) {
        char hex[SHA256_HEX_SIZE];

        sha256_to_hex(info->key_sha256, hex);
        printf("          key sha256 %s\n          certificate %s of '%s'\n", hex, info->serial, info->issuer);
}

bool signers_first(const uint8_t *sig, size_t len, SignatureInfo *ret) {
        SignatureSet set;
        return sig && signature_set_parse(sig, len, &set, NULL) >= 0 &&
               signature_parse_info(set.sigs[0].block, set.sigs[0].len, ret, NULL) >= 0;
}

json_t *signers_json(const uint8_t *sig, size_t len) {
        json_t *a = json_array();
        SignatureInfo info;
        SignatureSet set;

        for (size_t i = 0; sig && signature_set_parse(sig, len, &set, NULL) >= 0 && i < set.n; i++)
                json_array_append_new(a, signature_parse_info(set.sigs[i].block, set.sigs[i].len, &info, NULL) >= 0 ?
                                             signer_json(&info) : json_null());
        return a;
}

void signers_print(const uint8_t *sig, size_t len) {
        SignatureInfo info;
        SignatureSet set;

        if (!sig || signature_set_parse(sig, len, &set, NULL) < 0) {
                printf("signer    %s\n", sig ? "(unreadable)" : "(unsigned)");
                return;
        }
        for (size_t i = 0; i < set.n; i++) {
                bool ok = signature_parse_info(set.sigs[i].block, set.sigs[i].len, &info, NULL) >= 0;
                printf("signer    %s\n", ok ? info.subject : "(unreadable)");
                if (ok)
                        signer_print(&info);
        }
}

void channel_print(const Channel *c) {
        char when[21];

        format_time_utc(c->created, when);
        printf("channel   %s serial %" PRIu64 ", format %" PRIu32 ", created %s", c->name, c->serial, c->format,
               when);
        format_time_utc(c->expires, when);
        printf("%s%s\n", c->expires ? ", expires " : "", c->expires ? when : "");
        if (c->revocations.set)
                printf("revocations version %" PRIu64 ": %s (%" PRIu64 " bytes)\n", c->revocations.version,
                       c->revocations.path, c->revocations.size);
        if (c->root.set)
                printf("trust root version %" PRIu64 ": %s (%" PRIu64 " bytes)\n", c->root.version, c->root.path,
                       c->root.size);
        for (size_t i = 0; i < c->n_models; i++)
                print_model(c, &c->models[i]);
}

int channel_inspect(const char *path, bool json) {
        _cleanup_(channel_freep) Channel *c = NULL;
        SignatureInfo info = {};
        TpError err = {};
        int r;

        if ((r = channel_load(path, &c, &err)) < 0) {
                cli_error("%s", tp_error_message(&err, r));
                return EXIT_FAILED;
        }
        bool have_signer = signers_first(c->signature, c->signature_len, &info);
        if (json) {
                json_t *j = channel_to_json(c);
                json_object_set_new(j, "signer", have_signer ? json_string(info.subject) : json_null());
                if (have_signer)
                        json_object_set_new(j, "signer_certificate", signer_json(&info));
                json_object_set_new(j, "signers", signers_json(c->signature, c->signature_len));
                json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
                fputc('\n', stdout);
                json_decref(j);
                return EXIT_OK;
        }
        channel_print(c);
        signers_print(c->signature, c->signature_len);
        return EXIT_OK;
}

/* DIR/NAME is there with this size and SHA-256 (else an error says how it is not). */
static bool listed_file_matches(const char *dir, const char *name, uint64_t want, const uint8_t sha[SHA256_DIGEST_SIZE]) {
        _cleanup_free_ char *path = NULL;
        uint8_t d[SHA256_DIGEST_SIZE];
        uint64_t size;
        int r;

        if (asprintf(&path, "%s/%s", dir, name) < 0)
                return false;
        if ((r = hash_file(path, d, &size)) < 0) {
                cli_error("%s: %s", path, strerror(-r));
                return false;
        }
        if (size != want || memcmp(d, sha, sizeof(d)) != 0) {
                cli_error("%s: does not match the channel (size %" PRIu64 ", listed %" PRIu64 ", or its SHA-256)", path,
                          size, want);
                return false;
        }
        return true;
}

/* The signature and expiry, then every file it lists must be beside it with its size and SHA-256. */
int channel_verify_files(const char *path, const char *ca_path, unsigned threshold) {
        _cleanup_(channel_freep) Channel *c = NULL;
        _cleanup_free_ char *copy = strdup(path);
        char signer[256];
        TpError err = {};
        size_t bad = 0;
        int r;

        if (!copy)
                return EXIT_FAILED;
        if ((r = channel_load(path, &c, &err)) < 0 ||
            (r = channel_verify(c, path, &(SignatureTrust) { .ca_path = ca_path, .now = clock_wall(),
                                                             .threshold = threshold }, signer, &err)) < 0) {
                cli_error("%s", tp_error_message(&err, r));
                return EXIT_FAILED;
        }
        const char *dir = dirname(copy);
        /* Every bundle, then the revocation list and the trust root it carries. */
        for (size_t i = 0; i < c->n_bundles; i++)
                bad += !listed_file_matches(dir, c->bundles[i].path, c->bundles[i].size, c->bundles[i].sha256);
        const ChannelTrustFile *trust_files[] = { &c->revocations, &c->root };
        for (size_t i = 0; i < ELEMENTSOF(trust_files); i++)
                bad += trust_files[i]->set &&
                       !listed_file_matches(dir, trust_files[i]->path, trust_files[i]->size, trust_files[i]->sha256);
        if (bad) {
                cli_error("%s: %zu of the files it lists are missing or differ", path, bad);
                return EXIT_FAILED;
        }
        printf("%s: OK: channel %s serial %" PRIu64 " signed by %s; %zu bundles present and matching\n", path, c->name,
               c->serial, signer, c->n_bundles);
        return EXIT_OK;
}
