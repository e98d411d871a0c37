/* SPDX-License-Identifier: MIT */
/* taskpatch revoke: write a signed revocation list; and revocation lists in inspect and verify. */

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <mbedtls/x509_crt.h>

#include "cli.h"
#include "fileio.h"
#include "parse.h"
#include "revoke.h"
#include "taskpatch.h"

static void help(void) {
        printf("Usage: taskpatch revoke -o OUT.revocations (--key KEY | --pkcs11-uri URI) --cert CERT\n"
               "                        [--from OLD.revocations]\n"
               "                        [--version N] [--reason TEXT] [--json]\n"
               "                        [--revoke CERT.pem]... [--revoke-cert CERT.pem]... [--revoke-key SHA256]...\n"
               "\n"
               "Write a revocation list: the signers devices must no longer trust, signed by the\n"
               "root role (the key of a certificate under the devices' trust.root_ca). Publish it\n"
               "with the channel (taskpatch publish --revocations OUT) or give it to a device\n"
               "(tpctl trust update OUT). A device refuses every bundle and channel whose chain\n"
               "holds a listed certificate, and replaces an active model one signed.\n"
               "\n"
               "  -o, --output FILE     the list to write (atomically)\n"
               "  --key FILE, --cert FILE  the root role's ECDSA P-256 key and certificate chain (PEM)\n"
               "  --pkcs11-uri URI      the key in a PKCS#11 token instead (see taskpatch create)\n"
               "  --from FILE           start from this list's entries (the previous one)\n"
               "  --version N           the list's version (default: --from's + 1, else 1); devices\n"
               "                        take only a higher version than the one they hold\n"
               "  --revoke CERT.pem     revoke the key of this certificate (every certificate of the\n"
               "                        key, whoever issued it): what a leaked key needs\n"
               "  --revoke-cert CERT.pem  revoke this certificate only (its issuer and serial)\n"
               "  --revoke-key SHA256   revoke a key by the SHA-256 of its SubjectPublicKeyInfo (as\n"
               "                        'taskpatch inspect BUNDLE' shows: key sha256)\n"
               "  --reason TEXT         why, recorded with this run's entries\n"
               "  --json                print the summary as JSON\n");
}

/* The first certificate of @path as the entry that revokes its key (@by_key) or itself. */
static int entry_from_cert(const char *path, bool by_key, RevokedEntry *e) {
        mbedtls_x509_crt crt;
        char dn[256];
        int r;

        mbedtls_x509_crt_init(&crt);
        r = mbedtls_x509_crt_parse_file(&crt, path);
        if (r < 0) {
                mbedtls_x509_crt_free(&crt);
                cli_error("%s: not a certificate file (PEM or DER)", path);
                return -EINVAL;
        }
        if (by_key) {
                e->kind = REVOKED_KEY;
                sha256_digest(crt.pk_raw.p, crt.pk_raw.len, e->key_sha256);
        } else {
                const uint8_t *p = crt.serial.p;
                size_t n = crt.serial.len;
                for (; n > 1 && p[0] == 0; p++, n--)
                        ;
                e->kind = REVOKED_CERT;
                if (n > REVOKED_SERIAL_MAX || mbedtls_x509_dn_gets(e->issuer, sizeof(e->issuer), &crt.issuer) < 0) {
                        mbedtls_x509_crt_free(&crt);
                        cli_error("%s: its serial or issuer name is too long for a revocation list", path);
                        return -EINVAL;
                }
                memcpy(e->serial, p, n);
                e->serial_len = n;
        }
        if (mbedtls_x509_dn_gets(dn, sizeof(dn), &crt.subject) >= 0)
                snprintf(e->subject, sizeof(e->subject), "%.*s", REVOKED_TEXT_MAX - 1, dn);
        mbedtls_x509_crt_free(&crt);
        return 0;
}

typedef struct RevokeArgs {
        const char *path;
        char kind;                      /* 'k' --revoke, 'c' --revoke-cert, 'h' --revoke-key */
} RevokeArgs;

static int add_entries(Revocations *rl, const RevokeArgs *args, size_t n, const char *reason, size_t *ret_added) {
        TpError err = {};

        *ret_added = 0;
        for (size_t i = 0; i < n; i++) {
                RevokedEntry e = {};
                if (args[i].kind == 'h') {
                        e.kind = REVOKED_KEY;
                        if (parse_sha256_hex(args[i].path, e.key_sha256) < 0) {
                                cli_error("--revoke-key '%s': expected 64 hex digits", args[i].path);
                                return -EINVAL;
                        }
                } else if (entry_from_cert(args[i].path, args[i].kind == 'k', &e) < 0)
                        return -EINVAL;
                if (reason)
                        snprintf(e.reason, sizeof(e.reason), "%s", reason);
                int r = revocations_add(rl, &e, &err);
                if (r == -EEXIST) {
                        cli_error("warning: %s is listed already", args[i].path);
                        continue;
                }
                if (r < 0) {
                        cli_error("%s: %s", args[i].path, tp_error_message(&err, r));
                        return r;
                }
                (*ret_added)++;
        }
        return 0;
}

static json_t *entry_json(const RevokedEntry *e) {
        char hex[2 * REVOKED_SERIAL_MAX + 1] = "";
        json_t *j = json_object();

        if (e->kind == REVOKED_KEY) {
                char key[SHA256_HEX_SIZE];
                sha256_to_hex(e->key_sha256, key);
                json_object_set_new(j, "key_sha256", json_string(key));
        } else {
                for (size_t i = 0; i < e->serial_len; i++)
                        snprintf(hex + 2 * i, sizeof(hex) - 2 * i, "%02x", e->serial[i]);
                json_object_set_new(j, "issuer", json_string(e->issuer));
                json_object_set_new(j, "serial", json_string(hex));
        }
        json_object_set_new(j, "subject", e->subject[0] ? json_string(e->subject) : json_null());
        json_object_set_new(j, "reason", e->reason[0] ? json_string(e->reason) : json_null());
        return j;
}

static json_t *list_json(const Revocations *rl, const char *path) {
        char created[21];
        json_t *entries = json_array();

        format_time_utc(rl->created, created);
        for (size_t i = 0; i < rl->n; i++)
                json_array_append_new(entries, entry_json(&rl->entries[i]));
        return json_pack("{s:s, s:I, s:s, s:o}", "path", path, "version", (json_int_t) rl->version, "created", created,
                         "revoked", entries);
}

static void list_print(const Revocations *rl, const char *path) {
        char created[21], what[512];

        format_time_utc(rl->created, created);
        printf("revocations %s: version %" PRIu64 ", created %s, %zu entr%s\n", path, rl->version, created, rl->n,
               rl->n == 1 ? "y" : "ies");
        for (size_t i = 0; i < rl->n; i++)
                printf("  %s%s%s\n", revoked_entry_describe(&rl->entries[i], what, sizeof(what)),
                       rl->entries[i].reason[0] ? ": " : "", rl->entries[i].reason);
}

int verb_revoke(int argc, char *argv[]) {
        enum { OPT_FROM = 256, OPT_VERSION, OPT_REASON, OPT_JSON, OPT_REVOKE, OPT_REVOKE_CERT,
               OPT_REVOKE_KEY };
        static const struct option options[] = {
                { "help", no_argument, NULL, 'h' },
                { "output", required_argument, NULL, 'o' },
                CLI_SIGNER_OPTIONS,
                { "from", required_argument, NULL, OPT_FROM },
                { "version", required_argument, NULL, OPT_VERSION },
                { "reason", required_argument, NULL, OPT_REASON },
                { "json", no_argument, NULL, OPT_JSON },
                { "revoke", required_argument, NULL, OPT_REVOKE },
                { "revoke-cert", required_argument, NULL, OPT_REVOKE_CERT },
                { "revoke-key", required_argument, NULL, OPT_REVOKE_KEY },
                {},
        };
        _cleanup_(revocations_freep) Revocations *rl = calloc(1, sizeof(Revocations));
        _cleanup_(signer_freep) Signer *signer = NULL;
        _cleanup_free_ RevokeArgs *args = calloc((size_t) argc, sizeof(RevokeArgs));
        _cleanup_free_ uint8_t *data = NULL;
        const char *out = NULL, *from = NULL, *reason = NULL;
        CliSigners signers = {};
        uint64_t version = 0;
        bool json = false;
        size_t n_args = 0, added, len;
        TpError err = {};
        int opt, r;

        cli_program = "taskpatch revoke";
        if (!rl || !args)
                return EXIT_FAILED;
        while ((opt = getopt_long(argc, argv, "ho:", options, NULL)) >= 0)
                switch (opt) {
                case 'h':
                        help();
                        return EXIT_OK;
                case 'o':
                        out = optarg;
                        break;
                case CLI_OPT_KEY:
                case CLI_OPT_PKCS11_URI:
                case CLI_OPT_CERT:
                        cli_signers_option(&signers, opt, optarg);
                        break;
                case OPT_FROM:
                        from = optarg;
                        break;
                case OPT_VERSION:
                        if (cli_parse_u64("version", optarg, &version) < 0 || version == 0) {
                                cli_error("--version: expected a number from 1");
                                return EXIT_USAGE;
                        }
                        break;
                case OPT_REASON:
                        if (strlen(optarg) >= REVOKED_TEXT_MAX) {
                                cli_error("--reason: at most %d bytes", REVOKED_TEXT_MAX - 1);
                                return EXIT_USAGE;
                        }
                        reason = optarg;
                        break;
                case OPT_JSON:
                        json = true;
                        break;
                case OPT_REVOKE:
                case OPT_REVOKE_CERT:
                case OPT_REVOKE_KEY:
                        args[n_args++] = (RevokeArgs) { optarg, opt == OPT_REVOKE ? 'k' : opt == OPT_REVOKE_CERT ? 'c' :
                                                        'h' };
                        break;
                default:
                        return EXIT_USAGE;
                }
        if (optind != argc || !out || !cli_signers_valid(&signers)) {
                cli_error("expected -o OUT (--key KEY | --pkcs11-uri URI) --cert CERT (see --help)");
                return EXIT_USAGE;
        }
        if (from) {
                Revocations *old = NULL;
                if ((r = revocations_load(from, &old, &err)) < 0) {
                        cli_error("%s", tp_error_message(&err, r));
                        return EXIT_FAILED;
                }
                revocations_free(rl);
                rl = old;
        }
        if (version && from && version <= rl->version) {
                cli_error("--version %" PRIu64 ": %s has version %" PRIu64 " already; devices take only a higher "
                          "one", version, from, rl->version);
                return EXIT_USAGE;
        }
        rl->version = version ? version : rl->version + 1;
        rl->created = (int64_t) clock_wall();
        if (add_entries(rl, args, n_args, reason, &added) < 0)
                return EXIT_FAILED;
        if (cli_load_signers(&signers, &signer) < 0)
                return EXIT_FAILED;
        if ((r = revocations_write(rl, signer, &data, &len, &err)) < 0) {
                cli_error("%s", tp_error_message(&err, r));
                return EXIT_FAILED;
        }
        if ((r = atomic_file_write(out, data, len)) < 0) {
                cli_error("%s: %s", out, strerror(-r));
                return EXIT_FAILED;
        }
        if (json) {
                json_t *j = list_json(rl, out);
                json_object_set_new(j, "added", json_integer((json_int_t) added));
                json_object_set_new(j, "bytes", json_integer((json_int_t) len));
                return cli_print_json(j) < 0 ? EXIT_FAILED : EXIT_OK;
        }
        list_print(rl, out);
        printf("wrote %zu bytes (%zu new entr%s)\n", len, added, added == 1 ? "y" : "ies");
        return EXIT_OK;
}

int revocations_inspect(const char *path, bool json) {
        _cleanup_(revocations_freep) Revocations *rl = NULL;
        SignatureInfo info = {};
        TpError err = {};
        int r;

        if ((r = revocations_load(path, &rl, &err)) < 0) {
                cli_error("%s", tp_error_message(&err, r));
                return EXIT_FAILED;
        }
        bool have_signer = signers_first(rl->signature, rl->signature_len, &info);
        if (json) {
                json_t *j = list_json(rl, path);
                json_object_set_new(j, "signer", have_signer ? json_string(info.subject) : json_null());
                json_object_set_new(j, "signers", signers_json(rl->signature, rl->signature_len));
                return cli_print_json(j) < 0 ? EXIT_FAILED : EXIT_OK;
        }
        list_print(rl, path);
        signers_print(rl->signature, rl->signature_len);
        return EXIT_OK;
}

int revocations_verify_file(const char *path, const char *ca_path, unsigned threshold) {
        _cleanup_(revocations_freep) Revocations *rl = NULL;
        SignatureTrust trust = { .ca_path = ca_path, .now = clock_wall(), .threshold = threshold };
        char signer[256];
        TpError err = {};
        int r;

        if ((r = revocations_load(path, &rl, &err)) < 0 || (r = revocations_verify(rl, path, &trust, signer, &err)) < 0) {
                cli_error("%s", tp_error_message(&err, r));
                return EXIT_FAILED;
        }
        printf("%s: OK: revocation list version %" PRIu64 " (%zu entries) signed by %s\n", path, rl->version, rl->n,
               signer);
        return EXIT_OK;
}
