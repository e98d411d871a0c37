/* SPDX-License-Identifier: MIT */
/* taskpatch verify: check a bundle's signature chain, manifest and payload without the base. */

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "bundle.h"
#include "cli.h"
#include "parse.h"
#include "revoke.h"
#include "trust-root.h"
#include "sigset.h"
#include "taskpatch.h"

static void help(void) {
        printf("Usage: taskpatch verify BUNDLE|CHANNEL|REVOCATIONS --ca CA.pem [--crl CRL] [--threshold N]\n"
               "                        [--decrypt-key KEY.pem] [--allow-unsigned] [--json]\n"
               "\n"
               "Check the signature chain against CA.pem (a PEM file or a directory), the\n"
               "manifest, the expiry, and every payload hash that can be checked without the\n"
               "base: each frame decodes to exactly its span's length, raw spans match their\n"
               "SHA-256, and the payload matches its SHA-256 (an encrypted bundle's frames are\n"
               "decrypted and decoded only with --decrypt-key; its payload SHA-256, over the\n"
               "encrypted bytes, is checked either way). For a channel: its signature and\n"
               "expiry, and that every bundle it lists lies beside it with the listed size and\n"
               "SHA-256. For a revocation list (taskpatch revoke): its signature against its\n"
               "root CA. Exit 0 only when all hold.\n"
               "\n"
               "  --ca PATH           trusted CA certificate(s)\n"
               "  --crl PATH          X.509 CRLs (a PEM or DER file, or a directory of *.pem and\n"
               "                      *.crl): a revoked signer or an out-of-date CRL fails\n"
               "  --threshold N       N distinct signers must verify (a file signed by several:\n"
               "                      taskpatch sign), as devices with trust.threshold N ask; default 1\n"
               "  --decrypt-key FILE  a recipient's private key: decrypt an encrypted bundle's frames,\n"
               "                      check each tag, and decode them as for a plain one\n"
               "  --allow-unsigned    accept an unsigned bundle (tests only)\n"
               "  --json              print the result as JSON (bundles only): task, version,\n"
               "                      format, signer, signature_checked, expires, base and\n"
               "                      target {sha256, size}, spans, payload_bytes, ok; a\n"
               "                      failure prints {\"ok\": false, \"error\": MESSAGE}\n");
}

/* What was verified, for --json. */
static json_t *verify_json(const Bundle *b, const BundleTrust *trust, size_t raw_checked) {
        const Manifest *m = b->manifest;
        char base[SHA256_HEX_SIZE], target[SHA256_HEX_SIZE], expires[21];

        sha256_to_hex(m->base.sha256, base);
        sha256_to_hex(m->target.sha256, target);
        format_time_utc(m->expires, expires);
        return json_pack("{s:s, s:s, s:s, s:I, s:I, s:o, s:b, s:o, s:{s:s, s:I}, s:{s:s, s:I}, s:I, s:I, s:I, s:b}",
                         "bundle", b->what, "task", m->task, "model", m->model, "version", (json_int_t) m->version, "format",
                         (json_int_t) b->header.format, "signer",
                         trust->signature_checked ? json_string(trust->signer) : json_null(), "signature_checked",
                         trust->signature_checked, "expires", m->expires ? json_string(expires) : json_null(),
                         "base", "sha256", base, "size", (json_int_t) m->base.size, "target", "sha256", target,
                         "size", (json_int_t) m->target.size, "spans", (json_int_t) m->n_spans,
                         "raw_spans_checked", (json_int_t) raw_checked, "payload_bytes",
                         (json_int_t) m->payload.size, "ok", true);
}

int verb_verify(int argc, char *argv[]) {
        enum { OPT_CA = 256, OPT_CRL, OPT_THRESHOLD, OPT_UNSIGNED, OPT_JSON, OPT_DECRYPT_KEY };
        static const struct option options[] = {
                { "help", no_argument, NULL, 'h' },
                { "ca", required_argument, NULL, OPT_CA },
                { "crl", required_argument, NULL, OPT_CRL },
                { "threshold", required_argument, NULL, OPT_THRESHOLD },
                { "allow-unsigned", no_argument, NULL, OPT_UNSIGNED },
                { "json", no_argument, NULL, OPT_JSON },
                { "decrypt-key", required_argument, NULL, OPT_DECRYPT_KEY },
                {},
        };
        _cleanup_(bundle_freep) Bundle *b = NULL;
        _cleanup_(decrypt_key_freep) DecryptKey *key = NULL;
        const char *key_path = NULL;
        _cleanup_(span_reader_freep) SpanReader *sr = NULL;
        _cleanup_free_ uint8_t *buf = NULL;
        BundleTrust trust = {};
        TpError err = {};
        const ManifestSpan *s;
        bool json = false;
        int c, r;

        cli_program = "taskpatch verify";
        while ((c = getopt_long(argc, argv, "h", options, NULL)) >= 0)
                switch (c) {
                case 'h':
                        help();
                        return EXIT_OK;
                case OPT_CA:
                        trust.ca_path = optarg;
                        break;
                case OPT_CRL:
                        trust.crl_path = optarg;
                        break;
                case OPT_THRESHOLD: {
                        uint64_t n;
                        if (cli_parse_u64("threshold", optarg, &n) < 0 || n == 0 || n > SIGNATURE_SET_MAX) {
                                cli_error("--threshold: expected 1 to %d", SIGNATURE_SET_MAX);
                                return EXIT_USAGE;
                        }
                        trust.threshold = (unsigned) n;
                        break;
                }
                case OPT_UNSIGNED:
                        trust.allow_unsigned = true;
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
        if (argc - optind != 1 || (!trust.ca_path && !trust.allow_unsigned)) {
                cli_error("expected BUNDLE --ca CA.pem (see --help)");
                return EXIT_USAGE;
        }
        trust.now = clock_wall();
        if (cli_is_channel(argv[optind])) {
                if (!trust.ca_path) {
                        cli_error("a channel is always signed: give --ca");
                        return EXIT_USAGE;
                }
                if (json) {
                        cli_error("--json is for bundles; a channel's verification prints text only");
                        return EXIT_USAGE;
                }
                return channel_verify_files(argv[optind], trust.ca_path, trust.threshold);
        }
        if (cli_has_magic(argv[optind], REVOCATIONS_MAGIC)) {
                if (!trust.ca_path || json) {
                        cli_error("a revocation list is always signed: give --ca (its root CA); text output only");
                        return EXIT_USAGE;
                }
                return revocations_verify_file(argv[optind], trust.ca_path, trust.threshold);
        }
        if (cli_has_magic(argv[optind], TRUST_ROOT_MAGIC)) {
                if (!trust.ca_path || json) {
                        cli_error("a trust root is always signed: give --ca (the root CA, or the trust root the "
                                  "device holds); text output only");
                        return EXIT_USAGE;
                }
                return trust_root_verify_file(argv[optind], trust.ca_path, trust.threshold);
        }

        if (key_path && (r = decrypt_key_load(key_path, &key, &err)) < 0)
                return cli_fail(json, "--decrypt-key: %s", tp_error_message(&err, r));
        trust.decrypt_key = key;
        if ((r = bundle_open_verified(argv[optind], &trust, &b, &err)) < 0)
                return cli_fail(json, "%s", tp_error_message(&err, r));
        /* Sealed frames without their key: only what covers them, the payload's hash, is checked. */
        bool sealed = b->manifest->encryption && !b->unlocked;
        if (b->signature && !trust.ca_path)
                return cli_fail(json, "%s: signed, but no --ca given to check it against", b->what);

        buf = malloc(1u << 20);
        if (!buf || (r = span_reader_new(b, &sr, &err)) < 0)
                return cli_fail(json, "%s", tp_error_message(&err, buf ? r : -ENOMEM));
        size_t idx = 0, raw_checked = 0;
        while ((r = span_reader_next(sr, &s, &err)) > 0) {
                Sha256 h;
                uint8_t d[32];
                sha256_init(&h);
                /* A ref frame decodes only against its base bytes: here its bytes count for the payload hash only. */
                bool skip = s->encoding == SPAN_REF || (sealed && s->encoding != SPAN_COPY);
                if (skip && (r = span_reader_skip(sr, &err)) < 0)
                        break;
                /* A lora frame holds the factors before the residual, a rescale frame its parameters: both
                 * decode without the base. */
                uint64_t decoded = s->length + span_frame_prefix_bytes(s);
                for (uint64_t left = skip || s->encoding == SPAN_COPY ? 0 : decoded; left > 0;) {
                        size_t n = left < (1u << 20) ? (size_t) left : (1u << 20);
                        if ((r = span_reader_read(sr, buf, n, &err)) < 0)
                                break;
                        sha256_update(&h, buf, n);
                        left -= n;
                }
                if (r < 0)
                        break;
                sha256_final(&h, d);
                if (s->encoding == SPAN_RAW && !skip) {
                        if (memcmp(d, s->new_sha256, 32) != 0) {
                                r = tp_error(&err, -EBADMSG, "%s: span #%zu (offset %" PRIu64 "): raw bytes do not match their SHA-256",
                                             b->what, idx, s->offset);
                                break;
                        }
                        raw_checked++;
                }
                idx++;
        }
        if (r >= 0)
                r = span_reader_finish(sr, &err);
        if (r < 0)
                return cli_fail(json, "%s", tp_error_message(&err, r));
        if (json) {
                json_t *j = verify_json(b, &trust, raw_checked);
                json_object_set_new(j, "encrypted", json_boolean(b->manifest->encryption != NULL));
                json_object_set_new(j, "frames_decoded", json_boolean(!sealed));
                return cli_print_json(j) < 0 ? EXIT_FAILED : EXIT_OK;
        }
        if (sealed)
                printf("%s: OK: %s; payload SHA-256 matches; encrypted to %zu recipients: the frames were not "
                       "decrypted (give --decrypt-key to decode them too)\n", b->what,
                       trust.signature_checked ? trust.signer : "unsigned (allowed)",
                       b->manifest->encryption->n_recipients);
        else
                printf("%s: OK: %s; %zu spans decode to their lengths%s, %zu raw spans match, payload SHA-256 "
                       "matches\n", b->what, trust.signature_checked ? trust.signer : "unsigned (allowed)",
                       b->manifest->n_spans, b->manifest->encryption ? " (decrypted, every tag checked)" : "",
                       raw_checked);
        return EXIT_OK;
}
