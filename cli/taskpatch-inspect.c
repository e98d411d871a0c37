/* SPDX-License-Identifier: MIT */
/* taskpatch inspect: what a bundle holds, without trusting or applying it. */

#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "bundle.h"
#include "cli.h"
#include "sign.h"
#include "yaml-doc.h"
#include "taskpatch.h"

static void help(void) {
        printf("Usage: taskpatch inspect BUNDLE|CHANNEL [--json]\n"
               "\n"
               "Show a bundle's manifest: task, version, base and target, the sites it changes,\n"
               "its spans and encodings, sizes and signer; or a channel's serial, dates, desired\n"
               "task and bundles. Nothing is verified here: use 'taskpatch verify' for that.\n");
}

static json_t *sha_json(const uint8_t d[32]) {
        char hex[SHA256_HEX_SIZE];
        sha256_to_hex(d, hex);
        return json_string(hex);
}

int verb_inspect(int argc, char *argv[]) {
        static const struct option options[] = {
                { "help", no_argument, NULL, 'h' },
                { "json", no_argument, NULL, 'j' },
                {},
        };
        _cleanup_(bundle_freep) Bundle *b = NULL;
        TpError err = {};
        bool json = false;
        int c, r;

        cli_program = "taskpatch inspect";
        while ((c = getopt_long(argc, argv, "h", options, NULL)) >= 0)
                switch (c) {
                case 'h':
                        help();
                        return EXIT_OK;
                case 'j':
                        json = true;
                        break;
                default:
                        return EXIT_USAGE;
                }
        if (argc - optind != 1) {
                cli_error("expected one BUNDLE (see --help)");
                return EXIT_USAGE;
        }
        if (cli_is_channel(argv[optind]))
                return channel_inspect(argv[optind], json);
        r = bundle_open(argv[optind], &b, &err);
        if (r < 0) {
                cli_error("%s", tp_error_message(&err, r));
                return EXIT_FAILED;
        }

        const Manifest *m = b->manifest;
        SignatureInfo info = {};
        bool have_signer = b->signature && signature_parse_info(b->signature, b->signature_len, &info, NULL) >= 0;
        uint64_t n_raw = 0, n_delta = 0, span_bytes = 0;
        for (size_t i = 0; i < m->n_spans; i++) {
                span_bytes += m->spans[i].length;
                if (m->spans[i].encoding == SPAN_DELTA)
                        n_delta++;
                else
                        n_raw++;
        }
        char created[21], expires[21];
        format_time_utc(m->created, created);
        format_time_utc(m->expires, expires);

        if (json) {
                json_t *sites = json_array();
                for (size_t i = 0; i < m->n_sites; i++)
                        json_array_append_new(sites, json_string(m->sites[i]));
                json_t *j = json_pack("{s:s, s:I, s:s, s:s, s:o, s:{s:o, s:I, s:o}, s:{s:o, s:I, s:I, s:o}, s:o, "
                                      "s:I, s:{s:I, s:I}, s:I, s:I, s:I, s:b, s:o}",
                                      "task", m->task, "version", (json_int_t) m->version, "kind",
                                      artifact_kind_to_string(m->kind), "created", created, "expires",
                                      m->expires ? json_string(expires) : json_null(), "base", "sha256",
                                      sha_json(m->base.sha256), "size", (json_int_t) m->base.size, "layout",
                                      sha_json(m->base.layout), "target", "sha256", sha_json(m->target.sha256), "size",
                                      (json_int_t) m->target.size, "chunk_size", (json_int_t) m->target.chunk_size,
                                      "chunk_root", sha_json(m->target.chunk_root), "sites", sites, "spans",
                                      (json_int_t) m->n_spans, "encodings", "raw", (json_int_t) n_raw, "delta",
                                      (json_int_t) n_delta, "changed_bytes", (json_int_t) span_bytes,
                                      "payload_bytes", (json_int_t) m->payload.size, "bundle_bytes",
                                      (json_int_t) b->file_size, "signed", b->signature != NULL, "signer",
                                      have_signer ? json_string(info.subject) : json_null());
                json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
                fputc('\n', stdout);
                json_decref(j);
                return EXIT_OK;
        }

        char hex[SHA256_HEX_SIZE];
        printf("bundle    %s (%" PRIu64 " bytes)\n", b->what, b->file_size);
        printf("task      %s version %" PRIu64 "\n", m->task, m->version);
        printf("kind      %s\n", artifact_kind_to_string(m->kind));
        printf("created   %s%s%s\n", created, m->expires ? ", expires " : "", m->expires ? expires : "");
        sha256_to_hex(m->base.sha256, hex);
        printf("base      %s  %" PRIu64 " bytes\n", hex, m->base.size);
        sha256_to_hex(m->target.sha256, hex);
        printf("target    %s  %" PRIu64 " bytes\n", hex, m->target.size);
        printf("signer    %s\n", !b->signature ? "(unsigned)" : have_signer ? info.subject : "(unreadable)");
        printf("spans     %zu (%" PRIu64 " delta, %" PRIu64 " raw), writing %" PRIu64 " bytes\n", m->n_spans,
               n_delta, n_raw, span_bytes);
        printf("payload   %" PRIu64 " bytes\n", m->payload.size);
        printf("sites     %zu:\n", m->n_sites);
        for (size_t i = 0; i < m->n_sites; i++)
                printf("  %s\n", m->sites[i]);
        return EXIT_OK;
}
