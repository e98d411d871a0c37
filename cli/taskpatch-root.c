/* SPDX-License-Identifier: MIT */
/* taskpatch root: write a signed trust root (the roles' CAs and thresholds); and trust roots in inspect and verify. */

#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <mbedtls/x509_crt.h>

#include "cli.h"
#include "fileio.h"
#include "parse.h"
#include "sigset.h"
#include "taskpatch.h"
#include "trust-root.h"

static void help(void) {
        printf("Usage: taskpatch root -o OUT.root (--key KEY | --pkcs11-uri URI) --cert CERT [...]\n"
               "                      [--from OLD.root] [--version N] [--valid-days N]\n"
               "                      [--root-ca FILE] [--bundle-ca FILE] [--channel-ca FILE]\n"
               "                      [--root-threshold N] [--bundle-threshold N] [--channel-threshold N]\n"
               "                      [--json]\n"
               "\n"
               "Write a trust root: the CAs each role trusts (root: trust roots and revocation\n"
               "lists; bundle; channel) and how many distinct signers each needs. A device takes\n"
               "version N+1 only when it is signed by a threshold of the root role it holds\n"
               "(version N's, else its trust.root_ca) and by a threshold of the new root role;\n"
               "once taken, the roles replace trust.*_ca and the thresholds of taskpatchd.yaml.\n"
               "Publish it with the channel (taskpatch publish --root OUT) or give it to a device\n"
               "(tpctl trust update OUT). Several --key/--cert pairs sign it with each key;\n"
               "taskpatch sign adds a signature on another machine.\n"
               "\n"
               "  -o, --output FILE        the trust root to write (atomically)\n"
               "  --key FILE, --cert FILE  a root-role key and its certificate chain (PEM)\n"
               "  --pkcs11-uri URI         a key in a PKCS#11 token instead (see taskpatch create)\n"
               "  --from FILE              the trust root this one follows: its roles are kept\n"
               "                           unless given, and the result is checked against it\n"
               "  --version N              default: --from's + 1, else 1\n"
               "  --valid-days N           devices do not take it after N days (default 365)\n"
               "  --ROLE-ca FILE           the role's CA certificates (PEM; several for a\n"
               "                           transition: the old CA and the new); required\n"
               "                           without --from\n"
               "  --ROLE-threshold N       distinct signers the role needs, 1..8 (default: --from's,\n"
               "                           else 1)\n"
               "  --json                   print the summary as JSON\n");
}

static int read_pem(const char *path, char **ret, size_t *ret_len) {
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        struct stat st;

        if (fd < 0 || fstat(fd, &st) < 0) {
                cli_error("%s: %s", path, strerror(errno));
                return -errno;
        }
        if (!S_ISREG(st.st_mode) || st.st_size > TRUST_ROOT_ROLE_PEM_MAX) {
                cli_error("%s: not a regular file of at most %u bytes", path, TRUST_ROOT_ROLE_PEM_MAX);
                return -EINVAL;
        }
        char *buf = malloc((size_t) st.st_size + 1);
        if (!buf)
                return -ENOMEM;
        int r = pread_full(fd, buf, (size_t) st.st_size, 0);
        if (r < 0) {
                free(buf);
                cli_error("%s: %s", path, strerror(-r));
                return r;
        }
        buf[st.st_size] = '\0';
        *ret = buf;
        *ret_len = (size_t) st.st_size;
        return 0;
}

/* The subjects and SHA-256 fingerprints of a role's CAs. */
static json_t *role_json(const TrustRootRole *x) {
        _cleanup_(mbedtls_x509_crt_free) mbedtls_x509_crt crt;
        json_t *cas = json_array();

        mbedtls_x509_crt_init(&crt);
        if (mbedtls_x509_crt_parse(&crt, (const unsigned char *) x->ca_pem, strlen(x->ca_pem) + 1) == 0)
                for (const mbedtls_x509_crt *c = &crt; c && c->version; c = c->next) {
                        char dn[256] = "", hex[SHA256_HEX_SIZE];
                        uint8_t d[SHA256_DIGEST_SIZE];
                        (void) mbedtls_x509_dn_gets(dn, sizeof(dn), &c->subject);
                        sha256_digest(c->raw.p, c->raw.len, d);
                        sha256_to_hex(d, hex);
                        json_array_append_new(cas, json_pack("{s:s, s:s}", "subject", dn, "sha256", hex));
                }
        return json_pack("{s:I, s:o}", "threshold", (json_int_t) x->threshold, "ca", cas);
}

static json_t *root_json(const TrustRoot *t, const char *path) {
        char created[21], expires[21];
        json_t *roles = json_object();

        format_time_utc(t->created, created);
        format_time_utc(t->expires, expires);
        for (TrustRole i = 0; i < TRUST_ROLE_COUNT; i++)
                json_object_set_new(roles, trust_role_name(i), role_json(&t->roles[i]));
        return json_pack("{s:s, s:I, s:s, s:s, s:o}", "path", path, "version", (json_int_t) t->version, "created",
                         created, "expires", expires, "roles", roles);
}

static void root_print(const TrustRoot *t, const char *path) {
        char created[21], expires[21];
        json_t *j = root_json(t, path);

        format_time_utc(t->created, created);
        format_time_utc(t->expires, expires);
        printf("trust root %s: version %" PRIu64 ", created %s, expires %s\n", path, t->version, created, expires);
        for (TrustRole i = 0; i < TRUST_ROLE_COUNT; i++) {
                json_t *cas = json_object_get(json_object_get(json_object_get(j, "roles"), trust_role_name(i)), "ca");
                printf("  %-8s threshold %u, %zu CA%s\n", trust_role_name(i), t->roles[i].threshold,
                       json_array_size(cas), json_array_size(cas) == 1 ? "" : "s");
                for (size_t k = 0; k < json_array_size(cas); k++) {
                        json_t *ca = json_array_get(cas, k);
                        printf("           %s (sha256 %.16s...)\n", json_string_value(json_object_get(ca, "subject")),
                               json_string_value(json_object_get(ca, "sha256")));
                }
        }
        json_decref(j);
}

typedef struct RoleArgs {
        const char *ca;
        uint64_t threshold;
} RoleArgs;

static int set_roles(TrustRoot *t, const RoleArgs args[TRUST_ROLE_COUNT], bool from) {
        TpError err = {};

        for (TrustRole i = 0; i < TRUST_ROLE_COUNT; i++) {
                _cleanup_free_ char *file = NULL;
                unsigned threshold = args[i].threshold ? (unsigned) args[i].threshold :
                                     t->roles[i].threshold ? t->roles[i].threshold : 1;
                const char *pem = t->roles[i].ca_pem;   /* --from's */
                size_t len = pem ? strlen(pem) : 0;
                int r;

                if (!args[i].ca && !from) {
                        cli_error("--%s-ca: required without --from", trust_role_name(i));
                        return -EINVAL;
                }
                if (args[i].ca) {
                        if (read_pem(args[i].ca, &file, &len) < 0)
                                return -EINVAL;
                        pem = file;
                }
                if ((r = trust_root_set_role(t, i, pem, len, threshold, args[i].ca ? args[i].ca : trust_role_name(i),
                                             &err)) < 0) {
                        cli_error("%s", tp_error_message(&err, r));
                        return r;
                }
        }
        return 0;
}

/* Whether a device holding @old would take @t: a warning, since taskpatch sign may add the signatures missing. */
static void check_against(const TrustRoot *t, const TrustRoot *old, const char *from) {
        SignatureTrust base = { .now = clock_wall() };
        SignatureTrust held = trust_root_role(old, TRUST_ROLE_ROOT, &base);
        TpError err = {};
        int r = trust_root_verify(t, "the new trust root", &held, NULL, &err);

        if (r < 0)
                cli_error("warning: a device holding %s would not take it yet: %s (add signatures with taskpatch "
                          "sign)", from, tp_error_message(&err, r));
}

int verb_root(int argc, char *argv[]) {
        enum { OPT_FROM = 256, OPT_VERSION, OPT_VALID_DAYS, OPT_JSON, OPT_ROLE_CA, OPT_ROLE_THRESHOLD = OPT_ROLE_CA + 8 };
        static const struct option options[] = {
                { "help", no_argument, NULL, 'h' },
                { "output", required_argument, NULL, 'o' },
                CLI_SIGNER_OPTIONS,
                { "from", required_argument, NULL, OPT_FROM },
                { "version", required_argument, NULL, OPT_VERSION },
                { "valid-days", required_argument, NULL, OPT_VALID_DAYS },
                { "json", no_argument, NULL, OPT_JSON },
                { "root-ca", required_argument, NULL, OPT_ROLE_CA + TRUST_ROLE_ROOT },
                { "bundle-ca", required_argument, NULL, OPT_ROLE_CA + TRUST_ROLE_BUNDLE },
                { "channel-ca", required_argument, NULL, OPT_ROLE_CA + TRUST_ROLE_CHANNEL },
                { "root-threshold", required_argument, NULL, OPT_ROLE_THRESHOLD + TRUST_ROLE_ROOT },
                { "bundle-threshold", required_argument, NULL, OPT_ROLE_THRESHOLD + TRUST_ROLE_BUNDLE },
                { "channel-threshold", required_argument, NULL, OPT_ROLE_THRESHOLD + TRUST_ROLE_CHANNEL },
                {},
        };
        _cleanup_(trust_root_freep) TrustRoot *t = calloc(1, sizeof(TrustRoot));
        _cleanup_(trust_root_freep) TrustRoot *old = NULL;
        _cleanup_(signer_freep) Signer *signer = NULL;
        _cleanup_free_ uint8_t *data = NULL;
        const char *out = NULL, *from = NULL;
        RoleArgs roles[TRUST_ROLE_COUNT] = {};
        CliSigners signers = {};
        uint64_t version = 0;
        int64_t valid = 365 * 86400;
        bool json = false;
        size_t len;
        TpError err = {};
        int opt, r;

        cli_program = "taskpatch root";
        if (!t)
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
                case OPT_VALID_DAYS:
                        if (cli_parse_days("valid-days", optarg, &valid) < 0)
                                return EXIT_USAGE;
                        break;
                case OPT_JSON:
                        json = true;
                        break;
                case OPT_ROLE_CA + TRUST_ROLE_ROOT:
                case OPT_ROLE_CA + TRUST_ROLE_BUNDLE:
                case OPT_ROLE_CA + TRUST_ROLE_CHANNEL:
                        roles[opt - OPT_ROLE_CA].ca = optarg;
                        break;
                case OPT_ROLE_THRESHOLD + TRUST_ROLE_ROOT:
                case OPT_ROLE_THRESHOLD + TRUST_ROLE_BUNDLE:
                case OPT_ROLE_THRESHOLD + TRUST_ROLE_CHANNEL: {
                        uint64_t *v = &roles[opt - OPT_ROLE_THRESHOLD].threshold;
                        if (cli_parse_u64("threshold", optarg, v) < 0 || *v < 1 || *v > SIGNATURE_SET_MAX) {
                                cli_error("--%s-threshold: expected 1..%d", trust_role_name(opt - OPT_ROLE_THRESHOLD),
                                          SIGNATURE_SET_MAX);
                                return EXIT_USAGE;
                        }
                        break;
                }
                default:
                        return EXIT_USAGE;
                }
        if (optind != argc || !out || !cli_signers_valid(&signers)) {
                cli_error("expected -o OUT (--key KEY | --pkcs11-uri URI) --cert CERT (see --help)");
                return EXIT_USAGE;
        }
        if (from) {
                if ((r = trust_root_load(from, &old, &err)) < 0) {
                        cli_error("%s", tp_error_message(&err, r));
                        return EXIT_FAILED;
                }
                if (version && version <= old->version) {
                        cli_error("--version %" PRIu64 ": %s has version %" PRIu64 " already; devices take only a "
                                  "higher one", version, from, old->version);
                        return EXIT_USAGE;
                }
                for (TrustRole i = 0; i < TRUST_ROLE_COUNT; i++) {
                        t->roles[i].ca_pem = strdup(old->roles[i].ca_pem);
                        t->roles[i].threshold = old->roles[i].threshold;
                        if (!t->roles[i].ca_pem)
                                return EXIT_FAILED;
                }
        }
        t->version = version ? version : old ? old->version + 1 : 1;
        t->created = (int64_t) clock_wall();
        t->expires = t->created + valid;
        if (set_roles(t, roles, from) < 0 || cli_load_signers(&signers, &signer) < 0)
                return EXIT_FAILED;
        if ((r = trust_root_write(t, signer, &data, &len, &err)) < 0) {
                cli_error("%s", tp_error_message(&err, r));
                return EXIT_FAILED;
        }
        if (old)
                check_against(t, old, from);
        if ((r = atomic_file_write(out, data, len)) < 0) {
                cli_error("%s: %s", out, strerror(-r));
                return EXIT_FAILED;
        }
        if (json) {
                json_t *j = root_json(t, out);
                json_object_set_new(j, "bytes", json_integer((json_int_t) len));
                json_object_set_new(j, "signers", signers_json(t->signature, t->signature_len));
                return cli_print_json(j) < 0 ? EXIT_FAILED : EXIT_OK;
        }
        root_print(t, out);
        printf("wrote %zu bytes\n", len);
        return EXIT_OK;
}

int trust_root_inspect(const char *path, bool json) {
        _cleanup_(trust_root_freep) TrustRoot *t = NULL;
        TpError err = {};
        int r;

        if ((r = trust_root_load(path, &t, &err)) < 0) {
                cli_error("%s", tp_error_message(&err, r));
                return EXIT_FAILED;
        }
        if (json) {
                json_t *j = root_json(t, path);
                json_object_set_new(j, "signers", signers_json(t->signature, t->signature_len));
                return cli_print_json(j) < 0 ? EXIT_FAILED : EXIT_OK;
        }
        root_print(t, path);
        signers_print(t->signature, t->signature_len);
        return EXIT_OK;
}

int trust_root_verify_file(const char *path, const char *ca_path, unsigned threshold) {
        _cleanup_(trust_root_freep) TrustRoot *t = NULL;
        _cleanup_(trust_root_freep) TrustRoot *held_root = NULL;
        SignatureTrust held = { .ca_path = ca_path, .now = clock_wall(), .threshold = threshold };
        char signers[SIGNATURE_SIGNERS_MAX];
        TpError err = {};
        int r;

        if ((r = trust_root_load(path, &t, &err)) < 0)
                goto fail;
        /* --ca may name the trust root a device holds instead of a CA file. */
        if (cli_has_magic(ca_path, TRUST_ROOT_MAGIC)) {
                if ((r = trust_root_load(ca_path, &held_root, &err)) < 0)
                        goto fail;
                held = trust_root_role(held_root, TRUST_ROLE_ROOT, &held);
        }
        if ((r = trust_root_verify(t, path, &held, signers, &err)) < 0)
                goto fail;
        printf("%s: OK: trust root version %" PRIu64 " signed by %s\n", path, t->version, signers);
        return EXIT_OK;
fail:
        cli_error("%s", tp_error_message(&err, r));
        return EXIT_FAILED;
}
