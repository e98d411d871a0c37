/* SPDX-License-Identifier: MIT */
/* taskpatch create: diff a base and a target model and write a signed bundle of the changes. */

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bundle.h"
#include "cli.h"
#include "create.h"
#include "diff.h"
#include "encryption.h"
#include "imatrix.h"
#include "manifest.h"
#include "parse.h"
#include "sign.h"
#include "siteset.h"
#include "taskpatch.h"

static void help(void) {
        printf("Usage: taskpatch create BASE TARGET -o OUT.tpb --task NAME\n"
               "                        ((--key KEY.pem | --pkcs11-uri URI) --cert CERT.pem | --unsigned)\n"
               "                        [OPTIONS]\n"
               "       taskpatch create OLD_BASE NEW_BASE --base-bundle -o OUT.tpb --version N [OPTIONS]\n"
               "       taskpatch create --base-bundle --full NEW_BASE -o OUT.tpb --version N [OPTIONS]\n"
               "\n"
               "Diff TARGET against BASE site by site (tensor / initializer), code each changed\n"
               "site as a block-layout delta against the base bytes (or raw, when smaller), and\n"
               "write a signed bundle a device can apply to BASE to rebuild TARGET byte for byte.\n"
               "BASE and TARGET are model files or model directories (ONNX with external data,\n"
               "sharded safetensors, a split GGUF, plus side files; see taskpatch(1)).\n"
               "An ONNX INT8/UINT8 weight its graph dequantizes (DequantizeLinear, QLinearConv,\n"
               "QLinearMatMul, ConvInteger, MatMulInteger) is predicted from the base's, requantized\n"
               "per channel (a 'rescale' span), when that is smaller than its delta.\n"
               "\n"
               "  -o, --output FILE        the bundle to write (replaced atomically)\n"
               "  --task NAME              task name, [a-z0-9][a-z0-9._-]{0,63}\n"
               "  --base-bundle            a base bundle: TARGET is the base the model runs from now on\n"
               "                           (a new release, a re-quantization), coded against the old\n"
               "                           base; --task names the line of bases (default: base)\n"
               "  --full                   with --base-bundle: the whole new base, needing no old one\n"
               "                           (one model argument); streamed, every span raw\n"
               "  --version N              monotonic task version (default 1)\n"
               "  --model NAME             the device model it is for (taskpatchd.yaml's models:),\n"
               "                           [a-z0-9][a-z0-9._-]{0,63}; default 'default', the model\n"
               "                           of a one-model device (the manifest then names none)\n"
               "  --key FILE, --cert FILE  ECDSA P-256 signing key and certificate chain (PEM)\n"
               "                           (once per signer: the file then carries a signature of each)\n"
               "  --pkcs11-uri URI         sign with a key in a PKCS#11 token instead of --key (an\n"
               "                           RFC 7512 URI: pkcs11:token=..;object=..?module-path=..;\n"
               "                           the PIN from pin-value, pin-source or $TASKPATCH_PKCS11_PIN)\n"
               "  --unsigned               no signature (tests only: devices refuse it)\n"
               "  --lora ADAPTER.gguf      the LoRA adapter the task was folded with (llama.cpp's GGUF\n"
               "                           format): each tensor it adapts may be sent as the adapter's\n"
               "                           factors and a small residual against the device's prediction\n"
               "                           quantize(dequantize(base) + scale*B*A) (a 'lora' span), when\n"
               "                           that is smaller than its delta and its raw bytes\n"
               "  --lora-scale S           the scale the adapter was folded with (default 1)\n"
               "  --imatrix FILE           with --lora: the importance matrix the task model was\n"
               "                           quantized with (llama-imatrix's GGUF or legacy file, as\n"
               "                           given to llama-quantize or taskpatch quantize/fold): a lora\n"
               "                           span carries its tensor's row and the device predicts with\n"
               "                           it, as the quantizer did (a smaller residual)\n"
               "  --lowrank                without an adapter (ONNX, safetensors, float GGUF): find each\n"
               "                           changed float matrix's low-rank change (a folded LoRA's) and\n"
               "                           send it as a lora span of those factors when that is smaller;\n"
               "                           costs a randomized SVD of each changed float tensor\n"
               "  --plain-manifest         write the manifest as plain YAML, not compressed (about 3x its\n"
               "                           size; what daemons older than the compact manifest read)\n"
               "  --encrypt-to FILE        encrypt the payload to this recipient: a certificate or public\n"
               "                           key (EC P-256) of a device or of a fleet, whose private key a\n"
               "                           device names in trust.decrypt_key; repeat for each recipient\n"
               "                           (AES-256-GCM frames, the key wrapped per recipient with ECDH)\n"
               "  --expires DAYS           the bundle expires DAYS days from now\n"
               "  --expect-sites FILE      the sites the task must change: a list of names, one\n"
               "                           per line, or a LoRA adapter GGUF (its *.lora_a tensors);\n"
               "                           a different changed set is an error\n"
               "  --max-changed-share F    warn when more than this share of sites changed\n"
               "                           (default 0.5: the change is not local)\n"
               "  --level N                zstd level (default %d)\n"
               "  --dry-run                print the plan (every span: copy, delta, lora, rescale, raw\n"
               "                           or ref, with its payload bytes and what each candidate\n"
               "                           cost) and the bundle's size; write nothing; -o and a key\n"
               "                           are not needed\n"
               "  --json                   print the summary as JSON\n",
               CREATE_DEFAULT_LEVEL);
}

/* The changed site set (format 2: changed, resized, added, renamed) must equal the expected one. */
static int check_expected(const SiteSet *expect, const Artifact *target, const Diff *d, const Match *match) {
        SiteSet changed = {};
        int bad = 0, r = 0;

        if (match) {
                for (size_t i = 0; r >= 0 && i < target->n_sites; i++)
                        if (match->fate[i] != SITE_SAME && match->fate[i] != SITE_MOVED)
                                r = site_set_add(&changed, target->sites[i].name);
        } else {
                for (size_t i = 0; r >= 0 && i < d->n_regions; i++)
                        if (d->regions[i].site >= 0)
                                r = site_set_add(&changed, target->sites[d->regions[i].site].name);
        }
        if (r < 0) {
                site_set_done(&changed);
                return -ENOMEM;
        }
        for (size_t i = 0; i < changed.n; i++)
                if (!site_set_contains(expect, changed.names[i])) {
                        cli_error("site '%s' changed but is not expected", changed.names[i]);
                        bad++;
                }
        for (size_t i = 0; i < expect->n; i++)
                if (!site_set_contains(&changed, expect->names[i])) {
                        cli_error("site '%s' was expected to change but did not", expect->names[i]);
                        bad++;
                }
        site_set_done(&changed);
        return bad ? -EINVAL : 0;
}

/*
 * A bundle signed by a certificate out of its validity is refused by every device with a clock;
 * one that expires after its certificate does is refused from the certificate's end on.
 */
static int check_signer_dates(const Signer *signer, const char *cert, int64_t expires) {
        time_t now = clock_wall(), not_before, not_after;
        char until[21], when[21];
        TpError err = {};
        int r;

        r = signer_check_dates(signer, now, &err);
        if (r < 0) {
                cli_error("%s: %s: no bundle written", cert, tp_error_message(&err, r));
                return r;
        }
        signer_validity(signer, &not_before, &not_after);
        if (expires > 0 && now > 0 && (int64_t) now + expires > (int64_t) not_after) {
                format_time_utc((int64_t) now + expires, when);
                format_time_utc(not_after, until);
                cli_error("warning: --expires makes the bundle expire on %s, after the signer certificate's "
                          "notAfter %s (%s): devices refuse the bundle from %s on", when, until, cert, until);
        }
        return 0;
}

/* --full: the base a full base bundle is made against is nothing (an empty file). */
static int open_empty_base(ModelSet *ret) {
        TpError err = {};
        int fd = memfd_create("taskpatch-empty-base", MFD_CLOEXEC);
        int r;

        if (fd < 0) {
                r = negative_errno();
                cli_error("cannot make an empty base: %s", strerror(-r));
                return r;
        }
        if ((r = model_set_open(fd, "empty", ret, &err)) < 0)
                cli_error("cannot make an empty base: %s", tp_error_message(&err, r));
        return r;
}

/* The rows of @im's single-expert entries (a lora span predicts a 2-D tensor), into @o (they point into @im). */
static int importance_rows(const Imatrix *im, CreateOptions *o, ImportanceRow **ret) {
        _cleanup_free_ ImportanceRow *rows = calloc(im->n_entries, sizeof(*rows));
        size_t n = 0;

        if (!rows) {
                cli_error("--imatrix: out of memory");
                return -ENOMEM;
        }
        for (size_t i = 0; i < im->n_entries; i++)
                if (im->entries[i].n_experts == 1)
                        rows[n++] = (ImportanceRow) { im->entries[i].name, im->entries[i].values, im->entries[i].n_values };
        o->importance = rows;
        o->n_importance = n;
        *ret = TAKE_PTR(rows);
        return 0;
}

/* --dry-run: the per-span plan and the bundle's size; the scratch bundle is removed. */
static int dry_run_report(const char *path, const char *dir, const CreateResult *res, const Artifact *target,
                          bool signed_, bool json) {
        _cleanup_(bundle_freep) Bundle *b = NULL;
        TpError err = {};
        int r = bundle_open(path, &b, &err);

        (void) unlink(path);
        (void) rmdir(dir);
        if (r < 0) {
                cli_error("--dry-run: %s", tp_error_message(&err, r));
                return EXIT_FAILED;
        }
        if (json) {
                json_t *j = json_pack("{s:b, s:I, s:I, s:I, s:I, s:I, s:b, s:o}", "dry_run", true, "format",
                                      (json_int_t) res->format, "bundle_bytes", (json_int_t) res->bundle_bytes,
                                      "payload_bytes", (json_int_t) res->payload_bytes, "manifest_bytes",
                                      (json_int_t) res->manifest_bytes, "changed_bytes", (json_int_t) res->span_bytes,
                                      "signed", signed_, "span_list", span_list_json(b->manifest, res->costs, target));
                json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
                fputc('\n', stdout);
                json_decref(j);
                return EXIT_OK;
        }
        printf("dry run: nothing written\n");
        printf("  format          %u (%s)\n", res->format, res->format == 2 ? "relocating" : "in place");
        printf("  spans           %zu (%zu delta, %zu lora, %zu rescale, %zu raw, %zu ref, %zu copy), coding %" PRIu64
               " bytes\n", res->n_spans, res->n_delta, res->n_lora, res->n_rescale, res->n_raw, res->n_ref, res->n_copy,
               res->span_bytes);
        printf("  bundle          %" PRIu64 " bytes (manifest %" PRIu64 ", payload %" PRIu64 ")%s\n", res->bundle_bytes,
               res->manifest_bytes, res->payload_bytes,
               signed_ ? ", signed" : "; a signature and its certificate chain add about their size");
        span_list_print(b->manifest, res->costs, target);
        return EXIT_OK;
}

int create_run(int argc, char *argv[], json_t **ret_json) {
        enum { OPT_TASK = 256, OPT_MODEL, OPT_VERSION, OPT_UNSIGNED, OPT_EXPIRES, OPT_EXPECT, OPT_SHARE,
               OPT_LEVEL, OPT_JSON, OPT_DRY_RUN, OPT_BASE_BUNDLE, OPT_FULL, OPT_ENCRYPT_TO, OPT_LORA,
               OPT_LORA_SCALE, OPT_LOWRANK, OPT_PLAIN_MANIFEST, OPT_IMATRIX };
        static const struct option options[] = {
                { "help", no_argument, NULL, 'h' },
                { "output", required_argument, NULL, 'o' },
                { "task", required_argument, NULL, OPT_TASK },
                { "model", required_argument, NULL, OPT_MODEL },
                { "version", required_argument, NULL, OPT_VERSION },
                CLI_SIGNER_OPTIONS,
                { "unsigned", no_argument, NULL, OPT_UNSIGNED },
                { "expires", required_argument, NULL, OPT_EXPIRES },
                { "expect-sites", required_argument, NULL, OPT_EXPECT },
                { "max-changed-share", required_argument, NULL, OPT_SHARE },
                { "level", required_argument, NULL, OPT_LEVEL },
                { "json", no_argument, NULL, OPT_JSON },
                { "dry-run", no_argument, NULL, OPT_DRY_RUN },
                { "base-bundle", no_argument, NULL, OPT_BASE_BUNDLE },
                { "full", no_argument, NULL, OPT_FULL },
                { "encrypt-to", required_argument, NULL, OPT_ENCRYPT_TO },
                { "lora", required_argument, NULL, OPT_LORA },
                { "lora-scale", required_argument, NULL, OPT_LORA_SCALE },
                { "imatrix", required_argument, NULL, OPT_IMATRIX },
                { "lowrank", no_argument, NULL, OPT_LOWRANK },
                { "plain-manifest", no_argument, NULL, OPT_PLAIN_MANIFEST },
                {},
        };
        const char *out = NULL, *expect_path = NULL, *lora_path = NULL, *imatrix_path = NULL, *recipient_paths[ENCRYPTION_MAX_RECIPIENTS];
        size_t n_recipients = 0;
        CliSigners signers = {};
        CreateOptions o = { .version = 1, .level = CREATE_DEFAULT_LEVEL, .chunk_size = CREATE_DEFAULT_CHUNK,
                            .lora_scale = 1.0f };
        bool unsigned_ = false, json = false, dry_run = false, full = false;
        char scratch[] = "/tmp/taskpatch-plan.XXXXXX", plan_path[sizeof(scratch) + 16];
        double max_share = 0.5;
        uint64_t v;
        int c, r;

        cli_program = "taskpatch create";
        while ((c = getopt_long(argc, argv, "ho:", options, NULL)) >= 0)
                switch (c) {
                case 'h':
                        help();
                        return EXIT_OK;
                case 'o':
                        out = optarg;
                        break;
                case OPT_TASK:
                        o.task = optarg;
                        break;
                case OPT_MODEL:
                        if (!task_name_valid(optarg)) {
                                cli_error("--model '%s': expected [a-z0-9][a-z0-9._-]{0,63}", optarg);
                                return EXIT_USAGE;
                        }
                        o.model = optarg;
                        break;
                case OPT_VERSION:
                        if (cli_parse_u64("version", optarg, &o.version) < 0)
                                return EXIT_USAGE;
                        break;
                case CLI_OPT_KEY:
                case CLI_OPT_PKCS11_URI:
                case CLI_OPT_CERT:
                        cli_signers_option(&signers, c, optarg);
                        break;
                case OPT_UNSIGNED:
                        unsigned_ = true;
                        break;
                case OPT_EXPIRES:
                        if (cli_parse_days("expires", optarg, &o.expires) < 0)
                                return EXIT_USAGE;
                        break;
                case OPT_EXPECT:
                        expect_path = optarg;
                        break;
                case OPT_SHARE: {
                        char *end;
                        max_share = strtod(optarg, &end);
                        if (*end || max_share < 0 || max_share > 1) {
                                cli_error("--max-changed-share: expected a number between 0 and 1");
                                return EXIT_USAGE;
                        }
                        break;
                }
                case OPT_LEVEL:
                        if (cli_parse_u64("level", optarg, &v) < 0 || v < 1 || v > 22) {
                                cli_error("--level: expected 1..22");
                                return EXIT_USAGE;
                        }
                        o.level = (int) v;
                        break;
                case OPT_JSON:
                        json = true;
                        break;
                case OPT_DRY_RUN:
                        dry_run = true;
                        break;
                case OPT_BASE_BUNDLE:
                        o.role = MANIFEST_ROLE_BASE;
                        break;
                case OPT_FULL:
                        full = true;
                        break;
                case OPT_LORA:
                        lora_path = optarg;
                        break;
                case OPT_LORA_SCALE: {
                        char *end;
                        double scale = strtod(optarg, &end);
                        if (*end || end == optarg || !isfinite(scale) || fabs(scale) > 1e30) {
                                cli_error("--lora-scale: expected a finite number, got '%s'", optarg);
                                return EXIT_USAGE;
                        }
                        o.lora_scale = (float) scale;
                        break;
                }
                case OPT_IMATRIX:
                        imatrix_path = optarg;
                        break;
                case OPT_LOWRANK:
                        o.lowrank = true;
                        break;
                case OPT_PLAIN_MANIFEST:
                        o.plain_manifest = true;
                        break;
                case OPT_ENCRYPT_TO:
                        if (n_recipients == ENCRYPTION_MAX_RECIPIENTS) {
                                cli_error("--encrypt-to: at most %d recipients", ENCRYPTION_MAX_RECIPIENTS);
                                return EXIT_USAGE;
                        }
                        recipient_paths[n_recipients++] = optarg;
                        break;
                default:
                        return EXIT_USAGE;
                }
        if (full && o.role != MANIFEST_ROLE_BASE) {
                cli_error("--full makes a base bundle: give --base-bundle too");
                return EXIT_USAGE;
        }
        if (o.role == MANIFEST_ROLE_BASE && !o.task)
                o.task = "base";        /* the line of bases */
        if (argc - optind != (full ? 1 : 2) || (!out && !dry_run) || !o.task) {
                cli_error(full ? "expected --base-bundle --full NEW_BASE -o OUT.tpb (see --help)"
                               : "expected BASE TARGET -o OUT.tpb --task NAME (see --help)");
                return EXIT_USAGE;
        }
        if (dry_run && !cli_signers_any(&signers))
                unsigned_ = true;               /* the plan needs no key */
        if (!task_name_valid(o.task)) {
                cli_error("--task '%s': expected [a-z0-9][a-z0-9._-]{0,63}", o.task);
                return EXIT_USAGE;
        }
        if (unsigned_ == cli_signers_any(&signers) || (!unsigned_ && !cli_signers_valid(&signers))) {
                cli_error("give either --key (or --pkcs11-uri) and --cert, once per signer (at most %d), or "
                          "--unsigned", CLI_SIGNERS_MAX);
                return EXIT_USAGE;
        }

        const char *base_path = full ? NULL : argv[optind], *target_path = argv[optind + !full];
        _cleanup_(model_set_done) ModelSet bm = MODEL_SET_NULL, tm = MODEL_SET_NULL;
        _cleanup_(diff_freep) Diff *d = NULL;
        _cleanup_(match_freep) Match *match = NULL;
        _cleanup_(signer_freep) Signer *signer = NULL;
        _cleanup_(recipient_keys_freep) RecipientKeys recipients = { NULL, 0 };
        _cleanup_(lora_freep) Lora *lora = NULL;
        _cleanup_(imatrix_freep) Imatrix *im = NULL;
        _cleanup_free_ ImportanceRow *rows = NULL;
        SiteSet expect = {};
        _cleanup_(create_result_done) CreateResult res = {};
        TpError err = {};

        if ((full ? open_empty_base(&bm) : cli_open_model(base_path, &bm)) < 0 || cli_open_model(target_path, &tm) < 0)
                return EXIT_FAILED;
        if (full)
                bm.artifact->kind = tm.artifact->kind;  /* nothing, of the target's kind */
        const Artifact *base = bm.artifact, *target = tm.artifact;
        if (!unsigned_ && cli_load_signers(&signers, &signer) < 0)
                return EXIT_FAILED;
        if (cli_load_recipients(recipient_paths, n_recipients, &recipients) < 0)
                return EXIT_FAILED;
        if (lora_path && (r = lora_open(lora_path, &lora, &err)) < 0) {
                cli_error("--lora: %s", tp_error_message(&err, r));
                return EXIT_FAILED;
        }
        if (lora && strcmp(artifact_kind_to_string(target->kind), "gguf") != 0) {
                cli_error("--lora: %s is not a GGUF model: a llama.cpp adapter adapts GGUF tensors", target_path);
                return EXIT_FAILED;
        }
        if (lora && (r = create_check_lora(lora, target, &err)) < 0) {
                cli_error("--lora: %s", tp_error_message(&err, r));
                return EXIT_FAILED;
        }
        o.lora = lora;
        if (imatrix_path && !lora) {
                cli_error("--imatrix is for the prediction of lora spans: give --lora too");
                return EXIT_USAGE;
        }
        if (imatrix_path && (quantize_open_imatrix(imatrix_path, &im) < 0 ||
                             importance_rows(im, &o, &rows) < 0))
                return EXIT_FAILED;
        size_t i = 0;
        for (const Signer *s = signer; s; s = signer_next(s), i++)
                if (check_signer_dates(s, signers.certs[i], o.expires) < 0)
                        return EXIT_FAILED;
        CreateMatchContext mc = { &o, &bm.files, &tm.files, base, target };
        MatchOptions mo = create_match_options(&mc);
        /* A full base bundle has nothing to compare with: every site is new (matched against nothing). */
        r = full ? ((d = calloc(1, sizeof(Diff))) ? 0 : -ENOMEM)
                 : diff_compute(&bm.files, base, &tm.files, target, &d, &err);
        if (r < 0) {
                cli_error("%s", tp_error_message(&err, r));
                return EXIT_FAILED;
        }
        /* A layout that moved: the sites matched by name, for the checks below and the bundle. */
        if (d->layout_changed && (r = match_compute(&bm.files, base, &tm.files, target, &mo, &match, &err)) < 0) {
                cli_error("%s", tp_error_message(&err, r));
                return EXIT_FAILED;
        }
        if (full) {
                d->layout_changed = true;       /* nothing to patch in place */
                d->sites_total = target->n_sites;
                d->sites_changed = target->n_sites;
        }
        if (d->layout_changed && !match && (r = match_compute(&bm.files, base, &tm.files, target, &mo, &match, &err)) < 0) {
                cli_error("%s", tp_error_message(&err, r));
                return EXIT_FAILED;
        }
        if (!full && !d->layout_changed && d->sites_total > 0 &&
            (double) d->sites_changed > max_share * (double) d->sites_total)
                cli_error("warning: %zu of %zu sites changed: the change is not local (was the task quantized "
                          "with its own calibration/imatrix?), so the bundle is close to a full model",
                          d->sites_changed, d->sites_total);
        if (expect_path) {
                r = site_set_load(expect_path, &expect, &err);
                if (r < 0) {
                        cli_error("--expect-sites: %s", tp_error_message(&err, r));
                        return EXIT_FAILED;
                }
                r = check_expected(&expect, target, d, match);
                site_set_done(&expect);
                if (r < 0) {
                        cli_error("the changed sites differ from --expect-sites %s: no bundle written", expect_path);
                        return EXIT_FAILED;
                }
        }

        o.signer = signer;
        o.match = match;
        o.recipients = recipients.keys;
        o.n_recipients = recipients.n;
        /* SOURCE_DATE_EPOCH (reproducible-builds.org): the same inputs make the same bundle, byte for byte. */
        const char *epoch = getenv("SOURCE_DATE_EPOCH");
        uint64_t e;
        if (epoch && (parse_u64(epoch, &e) < 0 || e > INT64_MAX / 2)) {
                cli_error("SOURCE_DATE_EPOCH=%s is not a number of seconds since the epoch", epoch);
                return EXIT_USAGE;
        }
        o.created = epoch ? (int64_t) e : (int64_t) clock_wall();
        if (o.expires)
                o.expires += o.created;
        if (dry_run) {
                /* The plan is the bundle itself, written to a scratch directory, shown, then removed. */
                if (!mkdtemp(scratch)) {
                        cli_error("--dry-run: cannot make a scratch directory: %s", strerror(errno));
                        return EXIT_FAILED;
                }
                snprintf(plan_path, sizeof(plan_path), "%s/plan.tpb", scratch);
                out = plan_path;
        }
        r = bundle_create(&bm.files, base, &tm.files, target, d, &o, out, &res, &err);
        if (r < 0) {
                if (dry_run)
                        (void) rmdir(scratch);
                cli_error("%s", tp_error_message(&err, r));
                return EXIT_FAILED;
        }
        if (dry_run)
                return dry_run_report(plan_path, scratch, &res, target, signer != NULL, json);
        if (lora && res.n_lora == 0)
                cli_error("warning: --lora %s: no span came out smaller as a lora span (see --dry-run)", lora_path);
        else if (im && res.n_lora_imatrix == 0) {
                bool tried = false;
                for (size_t k = 0; k < res.n_costs; k++)
                        tried = tried || res.costs[k].lora_imatrix != UINT64_MAX;
                if (tried)
                        cli_error("warning: --imatrix %s: no lora span came out smaller predicted with its rows (see "
                                  "--dry-run)", imatrix_path);
                else
                        cli_error("warning: --imatrix %s: no lora span could carry a row of it (no entry of a "
                                  "tensor's name and length, a type whose quantizer takes none, or the span is not "
                                  "whole rows)", imatrix_path);
        }

        if (res.whole_file && !full)
                cli_error("warning: no site of the target matches the base (a different model?): the bundle "
                          "carries the whole file (%" PRIu64 " bytes)", target->size);
        else if (!full && res.format == MANIFEST_FORMAT_RELOCATING && target->n_sites > 0 &&
                 (double) (res.fates[SITE_CHANGED] + res.fates[SITE_RESIZED] + res.fates[SITE_ADDED]) >
                         max_share * (double) target->n_sites)
                cli_error("warning: %zu of %zu sites changed, resized or added: the change is not local (was the task "
                          "quantized with its own calibration/imatrix?)",
                          res.fates[SITE_CHANGED] + res.fates[SITE_RESIZED] + res.fates[SITE_ADDED], target->n_sites);

        size_t changed = match ? target->n_sites - res.fates[SITE_SAME] - res.fates[SITE_MOVED] : d->sites_changed;
        char hex[SHA256_HEX_SIZE];
        sha256_to_hex(res.target_sha256, hex);
        if (json) {
                json_t *j = json_pack("{s:s, s:s, s:I, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:{s:I, s:I}, s:b, s:s}",
                                      "bundle", out, "task", o.task, "version", (json_int_t) o.version, "kind",
                                      artifact_kind_to_string(target->kind), "sites_changed",
                                      (json_int_t) changed, "sites_total", (json_int_t) d->sites_total,
                                      "changed_bytes", (json_int_t) res.span_bytes, "span_bytes",
                                      (json_int_t) res.span_bytes, "payload_bytes", (json_int_t) res.payload_bytes,
                                      "bundle_bytes", (json_int_t) res.bundle_bytes, "encodings", "raw",
                                      (json_int_t) res.n_raw, "delta", (json_int_t) res.n_delta, "layout_changed",
                                      d->layout_changed, "target_sha256", hex);
                json_t *enc = json_object_get(j, "encodings");
                json_object_set_new(enc, "copy", json_integer((json_int_t) res.n_copy));
                json_object_set_new(enc, "ref", json_integer((json_int_t) res.n_ref));
                json_object_set_new(enc, "lora", json_integer((json_int_t) res.n_lora));
                json_object_set_new(enc, "lora_imatrix", json_integer((json_int_t) res.n_lora_imatrix));
                json_object_set_new(enc, "rescale", json_integer((json_int_t) res.n_rescale));
                json_object_set_new(j, "format", json_integer(res.format));
                json_object_set_new(j, "model", json_string(o.model ? o.model : MANIFEST_DEFAULT_MODEL));
                json_object_set_new(j, "role", json_string(manifest_role_to_string(o.role)));
                json_object_set_new(j, "full", json_boolean(full));
                json_object_set_new(j, "manifest_bytes", json_integer((json_int_t) res.manifest_bytes));
                json_object_set_new(j, "copied_bytes", json_integer((json_int_t) res.copied_bytes));
                json_object_set_new(j, "whole_file", json_boolean(res.whole_file));
                json_object_set_new(j, "recipients", json_integer((json_int_t) recipients.n));
                if (res.format == MANIFEST_FORMAT_RELOCATING) {
                        json_t *f = json_object();
                        for (SiteFate k = 0; k < _SITE_FATE_MAX; k++)
                                json_object_set_new(f, site_fate_to_string(k), json_integer((json_int_t) res.fates[k]));
                        json_object_set_new(f, "removed", json_integer((json_int_t) res.sites_removed));
                        json_object_set_new(j, "sites", f);
                }
                if (ret_json) {
                        *ret_json = j;
                        return EXIT_OK;
                }
                json_dumpf(j, stdout, JSON_INDENT(2));
                fputc('\n', stdout);
                json_decref(j);
        } else {
                printf("%s: %s %s version %" PRIu64 " (%s)\n", out,
                       o.role == MANIFEST_ROLE_BASE ? full ? "full base bundle, line" : "base bundle, line" : "task",
                       o.task, o.version, signer ? "signed" : "UNSIGNED");
                printf("  sites changed   %zu of %zu\n", changed, d->sites_total);
                printf("  changed bytes   %" PRIu64 " (the spans code them; the rest is the base's bytes)\n",
                       res.span_bytes);
                if (res.format == MANIFEST_FORMAT_RELOCATING) {
                        printf("  layout          %s: a relocating bundle (format 2)\n",
                               d->layout_changed ? "moved" : "kept, but its 8-bit tensors code better in");
                        printf("  sites           %zu same, %zu moved, %zu renamed, %zu changed, %zu resized, %zu added, "
                               "%zu removed\n", res.fates[SITE_SAME], res.fates[SITE_MOVED], res.fates[SITE_RENAMED],
                               res.fates[SITE_CHANGED], res.fates[SITE_RESIZED], res.fates[SITE_ADDED],
                               res.sites_removed);
                        printf("  copied bytes    %" PRIu64 "\n", res.copied_bytes);
                }
                printf("  spans           %zu (%zu delta, %zu lora, %zu rescale, %zu raw, %zu ref, %zu copy)\n",
                       res.n_spans, res.n_delta, res.n_lora, res.n_rescale, res.n_raw, res.n_ref, res.n_copy);
                if (im)
                        printf("  imatrix         %s: %zu of %zu lora spans predicted with its rows\n", imatrix_path,
                               res.n_lora_imatrix, res.n_lora);
                printf("  payload         %" PRIu64 " bytes%s\n", res.payload_bytes,
                       recipients.n ? ", encrypted (AES-256-GCM)" : "");
                if (recipients.n)
                        printf("  recipients      %zu (taskpatch inspect lists them)\n", recipients.n);
                printf("  bundle          %" PRIu64 " bytes = %.4f of the target (%" PRIu64 " bytes)\n",
                       res.bundle_bytes, target->size ? (double) res.bundle_bytes / (double) target->size : 0.0,
                       target->size);
                printf("  target sha256   %s\n", hex);
        }
        return EXIT_OK;
}

int verb_create(int argc, char *argv[]) {
        return create_run(argc, argv, NULL);
}
