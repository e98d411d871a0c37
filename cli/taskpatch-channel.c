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
#include "taskpatch.h"
#include "yaml-doc.h"

bool cli_is_channel(const char *path) {
        char magic[8] = {};
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        bool yes = fd >= 0 && read(fd, magic, sizeof(magic)) == (ssize_t) sizeof(magic) &&
                   memcmp(magic, CHANNEL_MAGIC, sizeof(magic)) == 0;
        safe_close(fd);
        return yes;
}

static json_t *sha_json(const uint8_t d[SHA256_DIGEST_SIZE]) {
        char hex[SHA256_HEX_SIZE];
        sha256_to_hex(d, hex);
        return json_string(hex);
}

json_t *channel_to_json(const Channel *c) {
        json_t *bundles = json_array();
        char created[21], expires[21];

        for (size_t i = 0; i < c->n_bundles; i++) {
                const ChannelBundle *b = &c->bundles[i];
                json_array_append_new(bundles, json_pack("{s:s, s:I, s:s, s:I, s:o, s:s, s:o}", "task", b->task,
                                                         "version", (json_int_t) b->version, "path", b->path, "size",
                                                         (json_int_t) b->size, "sha256", sha_json(b->sha256), "kind",
                                                         artifact_kind_to_string(b->kind), "base_sha256",
                                                         sha_json(b->base_sha256)));
        }
        format_time_utc(c->created, created);
        format_time_utc(c->expires, expires);
        return json_pack("{s:s, s:I, s:s, s:o, s:o, s:o}", "channel", c->name, "serial", (json_int_t) c->serial,
                         "created", created, "expires", c->expires ? json_string(expires) : json_null(), "desired",
                         c->desired[0] ? json_string(c->desired) : json_null(), "bundles", bundles);
}

void channel_print(const Channel *c) {
        char when[21];

        format_time_utc(c->created, when);
        printf("channel   %s serial %" PRIu64 ", created %s", c->name, c->serial, when);
        format_time_utc(c->expires, when);
        printf("%s%s\n", c->expires ? ", expires " : "", c->expires ? when : "");
        printf("desired   %s\n", c->desired[0] ? c->desired : "(none)");
        printf("bundles   %zu\n", c->n_bundles);
        for (size_t i = 0; i < c->n_bundles; i++)
                printf("  %-20s v%-6" PRIu64 " %-28s %12" PRIu64 " bytes\n", c->bundles[i].task, c->bundles[i].version,
                       c->bundles[i].path, c->bundles[i].size);
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
        bool have_signer = signature_parse_info(c->signature, c->signature_len, &info, NULL) >= 0;
        if (json) {
                json_t *j = channel_to_json(c);
                json_object_set_new(j, "signer", have_signer ? json_string(info.subject) : json_null());
                json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
                fputc('\n', stdout);
                json_decref(j);
                return EXIT_OK;
        }
        channel_print(c);
        printf("signer    %s\n", have_signer ? info.subject : "(unreadable)");
        return EXIT_OK;
}

/* The signature and expiry, then every bundle it lists must be beside it with its size and SHA-256. */
int channel_verify_files(const char *path, const char *ca_path) {
        _cleanup_(channel_freep) Channel *c = NULL;
        _cleanup_free_ char *copy = strdup(path);
        char signer[256];
        TpError err = {};
        size_t bad = 0;
        int r;

        if (!copy)
                return EXIT_FAILED;
        if ((r = channel_load(path, &c, &err)) < 0 ||
            (r = channel_verify(c, path, ca_path, clock_wall(), signer, &err)) < 0) {
                cli_error("%s", tp_error_message(&err, r));
                return EXIT_FAILED;
        }
        const char *dir = dirname(copy);
        for (size_t i = 0; i < c->n_bundles; i++) {
                const ChannelBundle *b = &c->bundles[i];
                _cleanup_free_ char *bpath = NULL;
                uint8_t d[SHA256_DIGEST_SIZE];
                uint64_t size;
                if (asprintf(&bpath, "%s/%s", dir, b->path) < 0)
                        return EXIT_FAILED;
                if ((r = hash_file(bpath, d, &size)) < 0) {
                        cli_error("%s: %s", bpath, strerror(-r));
                        bad++;
                } else if (size != b->size || memcmp(d, b->sha256, sizeof(d)) != 0) {
                        cli_error("%s: does not match the channel (size %" PRIu64 ", listed %" PRIu64 ", or its SHA-256)",
                                  bpath, size, b->size);
                        bad++;
                }
        }
        if (bad) {
                cli_error("%s: %zu of %zu listed bundles are missing or differ", path, bad, c->n_bundles);
                return EXIT_FAILED;
        }
        printf("%s: OK: channel %s serial %" PRIu64 " signed by %s; %zu bundles present and matching\n", path, c->name,
               c->serial, signer, c->n_bundles);
        return EXIT_OK;
}
