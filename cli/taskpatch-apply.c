/* SPDX-License-Identifier: MIT */
/* taskpatch apply: rebuild the target from the base and a bundle, proven by SHA-256. */

#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "apply.h"
#include "cli.h"
#include "taskpatch.h"

static void help(void) {
        printf("Usage: taskpatch apply BASE BUNDLE -o OUT [--ca CA.pem] [--decrypt-key KEY.pem]\n"
               "                       [--allow-unsigned] [--json]\n"
               "       taskpatch apply FULL-BASE-BUNDLE -o OUT [...]   (a full base bundle needs no BASE)\n"
               "\n"
               "Rebuild the bundle's target from BASE: every span's base bytes and new bytes\n"
               "are checked against the manifest while streaming, and OUT appears (atomically)\n"
               "only when its full SHA-256 equals the target's. A refused apply leaves no OUT.\n"
               "A bundle of a model directory takes BASE as a directory and writes OUT as one\n"
               "(a temporary directory beside it, fsynced, renamed or swapped into place).\n"
               "\n"
               "  -o, --output FILE   the rebuilt model\n"
               "  --ca PATH           check the signature against these CA certificate(s);\n"
               "                      without it every hash is checked but not the signature\n"
               "  --decrypt-key FILE  the private key (EC P-256, PEM) of a recipient of an\n"
               "                      encrypted bundle (taskpatch create --encrypt-to)\n"
               "  --allow-unsigned    accept an unsigned bundle (tests only)\n"
               "  --no-sync           do not fsync OUT (still atomic, not durable): scratch output\n"
               "  --json              print the result as JSON: output, task, version,\n"
               "                      target_sha256, span_bytes, copied_bytes, spans,\n"
               "                      signature_checked, seconds, ok; a failure prints\n"
               "                      {\"ok\": false, \"error\": MESSAGE}\n");
}

int verb_apply(int argc, char *argv[]) {
        enum { OPT_CA = 256, OPT_UNSIGNED, OPT_NO_SYNC, OPT_JSON, OPT_DECRYPT_KEY };
        static const struct option options[] = {
                { "help", no_argument, NULL, 'h' },
                { "output", required_argument, NULL, 'o' },
                { "ca", required_argument, NULL, OPT_CA },
                { "allow-unsigned", no_argument, NULL, OPT_UNSIGNED },
                { "no-sync", no_argument, NULL, OPT_NO_SYNC },
                { "json", no_argument, NULL, OPT_JSON },
                { "decrypt-key", required_argument, NULL, OPT_DECRYPT_KEY },
                {},
        };
        _cleanup_(bundle_freep) Bundle *b = NULL;
        _cleanup_(decrypt_key_freep) DecryptKey *key = NULL;
        _cleanup_(fileset_done) FileSet base = FILESET_NULL;
        bool sync = true, json = false;
        BundleTrust trust = {};
        ApplyStats st;
        TpError err = {};
        const char *out = NULL, *key_path = NULL;
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
                case OPT_JSON:
                        json = true;
                        break;
                case OPT_DECRYPT_KEY:
                        key_path = optarg;
                        break;
                default:
                        return EXIT_USAGE;
                }
        if (argc - optind < 1 || argc - optind > 2 || !out) {
                cli_error("expected BASE BUNDLE -o OUT (see --help)");
                return EXIT_USAGE;
        }
        bool no_base = argc - optind == 1;
        const char *base_path = no_base ? "(no base)" : argv[optind], *bundle_path = argv[optind + !no_base];
        trust.now = clock_wall();
        double t0 = quantize_now();

        if (key_path && (r = decrypt_key_load(key_path, &key, &err)) < 0)
                return cli_fail(json, "--decrypt-key: %s", tp_error_message(&err, r));
        trust.decrypt_key = key;
        if ((r = bundle_open_verified(bundle_path, &trust, &b, &err)) < 0)
                return cli_fail(json, "%s", tp_error_message(&err, r));
        if (b->manifest->encryption && !b->unlocked)
                return cli_fail(json, "%s: the payload is encrypted (to %zu recipients): give --decrypt-key", b->what,
                                b->manifest->encryption->n_recipients);
        if (b->signature && !trust.ca_path)
                cli_error("note: no --ca given: every hash is checked, the signature is not");

        if (no_base && (b->manifest->role != MANIFEST_ROLE_BASE || b->manifest->base.size != 0))
                return cli_fail(json, "%s: not a full base bundle: give the BASE it applies to", bundle_path);
        /* A full base bundle is applied to nothing: an empty file. */
        int fd = no_base ? memfd_create("taskpatch-empty-base", MFD_CLOEXEC)
                         : open(base_path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return cli_fail(json, "%s: %s", base_path, strerror(errno));
        if ((r = fileset_open(fd, base_path, &base, &err)) < 0)
                return cli_fail(json, "%s: %s", base_path, tp_error_message(&err, r));
        r = bundle_apply(b, &base, base_path, out, sync, &st, &err);
        if (r < 0)
                return cli_fail(json, "%s", tp_error_message(&err, r));
        double seconds = quantize_now() - t0;
        char hex[SHA256_HEX_SIZE];
        sha256_to_hex(b->manifest->target.sha256, hex);
        if (json) {
                json_t *j = json_pack("{s:s, s:s, s:I, s:s, s:I, s:I, s:I, s:b, s:f, s:b}", "output", out, "task",
                                      b->manifest->task, "version", (json_int_t) b->manifest->version,
                                      "target_sha256", hex, "span_bytes", (json_int_t) st.span_bytes,
                                      "copied_bytes", (json_int_t) st.copied_bytes, "spans",
                                      (json_int_t) b->manifest->n_spans, "signature_checked",
                                      trust.signature_checked, "seconds", seconds, "ok", true);
                return cli_print_json(j) < 0 ? EXIT_FAILED : EXIT_OK;
        }
        printf("%s: %s version %" PRIu64 " rebuilt, sha256 %s (%" PRIu64 " bytes from %zu spans, %" PRIu64
               " copied)\n", out, b->manifest->task, b->manifest->version, hex, st.span_bytes, b->manifest->n_spans,
               st.copied_bytes);
        return EXIT_OK;
}
