/* SPDX-License-Identifier: MIT */
/* taskpatch apply: rebuild the target from the base and a bundle, proven by SHA-256. */

#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "apply.h"
#include "cli.h"
#include "taskpatch.h"

static void help(void) {
        printf("Usage: taskpatch apply BASE BUNDLE -o OUT [--ca CA.pem] [--allow-unsigned]\n"
               "\n"
               "Rebuild the bundle's target from BASE: every span's base bytes and new bytes\n"
               "are checked against the manifest while streaming, and OUT appears (atomically)\n"
               "only when its full SHA-256 equals the target's. A refused apply leaves no OUT.\n"
               "\n"
               "  -o, --output FILE   the rebuilt model\n"
               "  --ca PATH           check the signature against these CA certificate(s);\n"
               "                      without it every hash is checked but not the signature\n"
               "  --allow-unsigned    accept an unsigned bundle (tests only)\n"
               "  --no-sync           do not fsync OUT (still atomic, not durable): scratch output\n");
}

int verb_apply(int argc, char *argv[]) {
        enum { OPT_CA = 256, OPT_UNSIGNED, OPT_NO_SYNC };
        static const struct option options[] = {
                { "help", no_argument, NULL, 'h' },
                { "output", required_argument, NULL, 'o' },
                { "ca", required_argument, NULL, OPT_CA },
                { "allow-unsigned", no_argument, NULL, OPT_UNSIGNED },
                { "no-sync", no_argument, NULL, OPT_NO_SYNC },
                {},
        };
        _cleanup_(bundle_freep) Bundle *b = NULL;
        _cleanup_close_ int base_fd = -1;
        bool sync = true;
        BundleTrust trust = {};
        ApplyStats st;
        TpError err = {};
        const char *out = NULL;
        int c, r;

        cli_program = "taskpatch apply";
        while ((c = getopt_long(argc, argv, "ho:", options, NULL)) >= 0)
                switch (c) {
                case 'h':
                        help();
                        return EXIT_OK;
                case 'o':
                        out = optarg;
                        break;
                case OPT_CA:
                        trust.ca_path = optarg;
                        break;
                case OPT_UNSIGNED:
                        trust.allow_unsigned = true;
                        break;
                case OPT_NO_SYNC:
                        sync = false;
                        break;
                default:
                        return EXIT_USAGE;
                }
        if (argc - optind != 2 || !out) {
                cli_error("expected BASE BUNDLE -o OUT (see --help)");
                return EXIT_USAGE;
        }
        const char *base_path = argv[optind], *bundle_path = argv[optind + 1];
        trust.now = clock_wall();

        if ((r = bundle_open_verified(bundle_path, &trust, &b, &err)) < 0) {
                cli_error("%s", tp_error_message(&err, r));
                return EXIT_FAILED;
        }
        if (b->signature && !trust.ca_path)
                cli_error("note: no --ca given: every hash is checked, the signature is not");

        base_fd = open(base_path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (base_fd < 0) {
                cli_error("%s: %s", base_path, strerror(errno));
                return EXIT_FAILED;
        }
        r = bundle_apply(b, base_fd, base_path, out, sync, &st, &err);
        if (r < 0) {
                cli_error("%s", tp_error_message(&err, r));
                return EXIT_FAILED;
        }
        char hex[SHA256_HEX_SIZE];
        sha256_to_hex(b->manifest->target.sha256, hex);
        printf("%s: %s version %" PRIu64 " rebuilt, sha256 %s (%" PRIu64 " bytes from %zu spans, %" PRIu64
               " copied)\n", out, b->manifest->task, b->manifest->version, hex, st.span_bytes, b->manifest->n_spans,
               st.copied_bytes);
        return EXIT_OK;
}
