/* SPDX-License-Identifier: MIT */
/* taskpatch fold: a LoRA adapter folded into a float base model, quantized like the base. */

#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "fold.h"
#include "taskpatch.h"

static void help(void) {
        printf("Usage: taskpatch fold [OPTIONS] BASE.gguf LORA.gguf TASK.gguf TYPE [--scale S]\n"
               "\n"
               "Fold the llama.cpp LoRA adapter LORA.gguf into the F32/F16/BF16 model BASE.gguf and\n"
               "quantize the result to TYPE, exactly as 'taskpatch quantize BASE.gguf ... TYPE' quantizes\n"
               "the base: every tensor the adapter does not touch comes out byte-identical, so\n"
               "'taskpatch create' of the two files is a small, local bundle.\n"
               "\n"
               "For each adapted weight W: W' = W + (scale * alpha / rank) * B * A, in float32, the sum\n"
               "over the rank in order from 0 with every product and sum rounded (no fused\n"
               "multiply-add): the same bytes on every machine. See taskpatch(1).\n"
               "\n"
               "TYPE (as llama-quantize spells it):\n"
               "  ");
        quantize_list_types(stdout);
        printf("\n"
               "  --scale S        the adapter's strength, as llama.cpp's --lora-scaled (default 1)\n"
               "  --imatrix FILE   quantize with this importance matrix, as 'taskpatch quantize --imatrix'\n"
               "  -t, --threads N  quantizer threads (default: the online CPUs); the bytes do not\n"
               "                   depend on it\n"
               "  --json           print the summary as JSON (with --bundle, create's under \"bundle\")\n"
               "  -q, --quiet      no progress on stderr\n"
               "\n"
               "  --bundle OUT.tpb   also write the task's bundle: 'taskpatch create QBASE TASK.gguf -o\n"
               "                     OUT.tpb --lora LORA.gguf --lora-scale S [--imatrix FILE]' against\n"
               "                     QBASE, the quantized base the devices run: --bundle-base FILE,\n"
               "                     else BASE quantized to TYPE now (what 'taskpatch quantize' and\n"
               "                     llama-quantize write, byte for byte). Each adapted tensor travels\n"
               "                     as the adapter's factors and a residual where that is smallest,\n"
               "                     predicted with --imatrix's rows. These create options go with it:\n"
               "                     --task --version --model --key --pkcs11-uri --cert --unsigned\n"
               "                     --expires --level --encrypt-to (see taskpatch create --help)\n"
               "  --bundle-base FILE the quantized base the bundle applies to\n"
               "\n"
               "TASK.gguf is written through a temporary beside it, fsynced and renamed.\n");
}

static int parse_scale(const char *s, float *ret) {
        char *end;
        double v = strtod(s, &end);

        if (end == s || *end || !isfinite(v) || fabs(v) > 1e6) {
                cli_error("--scale: expected a finite number, got '%s'", s);
                return -EINVAL;
        }
        *ret = (float) v;
        return 0;
}

/* The options fold passes on to create with --bundle (their getopt values are their index + OPT_CREATE). */
static const char *const create_options[] = { "task", "version", "model", "key", "pkcs11-uri", "cert", "unsigned",
                                              "expires", "level", "encrypt-to", NULL };
#define OPT_CREATE 0x2000
#define CREATE_ARGS_MAX 64

/* create QBASE TASK -o OUT --lora LORA --lora-scale S [--imatrix FILE] and the passed options: the bundle of the fold. */
static int write_bundle(const char *qbase, const char *task, const char *lora, float scale, const char *imatrix,
                        const char *out, char **passed, int n_passed, json_t **ret_json) {
        char scale_s[32], *args[CREATE_ARGS_MAX + 16];
        int n = 0;

        snprintf(scale_s, sizeof(scale_s), "%.9g", (double) scale);
        args[n++] = (char *) "create";
        args[n++] = (char *) qbase;
        args[n++] = (char *) task;
        args[n++] = (char *) "-o";
        args[n++] = (char *) out;
        args[n++] = (char *) "--lora";
        args[n++] = (char *) lora;
        args[n++] = (char *) "--lora-scale";
        args[n++] = scale_s;
        if (imatrix) {
                args[n++] = (char *) "--imatrix";
                args[n++] = (char *) imatrix;
        }
        for (int i = 0; i < n_passed; i++)
                args[n++] = passed[i];
        if (ret_json)
                args[n++] = (char *) "--json";
        args[n] = NULL;
        optind = 0;     /* getopt again, from the start */
        return create_run(n, args, ret_json);
}

/* BASE quantized as @fold (its type, threads and imatrix) into a temporary beside @near: the
 * base the devices run. */
static int quantize_base(int fd, const Gguf *base, const QuantizeOptions *fold, const char *near, char **ret_path) {
        _cleanup_free_ char *path = NULL;
        QuantizeOptions o = { .ftype = fold->ftype, .threads = fold->threads, .imatrix = fold->imatrix,
                              .imatrix_name = fold->imatrix_name };
        TpError err = {};
        const char *slash = strrchr(near, '/');
        int r;

        if (asprintf(&path, "%.*s.taskpatch-base.%d.gguf", slash ? (int) (slash - near + 1) : 0, near, (int) getpid()) < 0)
                return -ENOMEM;
        if ((r = model_quantize(fd, base, path, &o, NULL, &err)) < 0) {
                cli_error("--bundle: quantizing the base: %s", tp_error_message(&err, r));
                return r;
        }
        *ret_path = TAKE_PTR(path);
        return 0;
}

int verb_fold(int argc, char *argv[]) {
        enum { OPT_JSON = 256, OPT_SCALE, OPT_BUNDLE, OPT_BUNDLE_BASE, OPT_IMATRIX };
        static const struct option options[] = {
                { "help", no_argument, NULL, 'h' },
                { "imatrix", required_argument, NULL, OPT_IMATRIX },
                { "json", no_argument, NULL, OPT_JSON },
                { "quiet", no_argument, NULL, 'q' },
                { "scale", required_argument, NULL, OPT_SCALE },
                { "threads", required_argument, NULL, 't' },
                { "bundle", required_argument, NULL, OPT_BUNDLE },
                { "bundle-base", required_argument, NULL, OPT_BUNDLE_BASE },
                { "task", required_argument, NULL, OPT_CREATE + 0 },
                { "version", required_argument, NULL, OPT_CREATE + 1 },
                { "model", required_argument, NULL, OPT_CREATE + 2 },
                { "key", required_argument, NULL, OPT_CREATE + 3 },
                { "pkcs11-uri", required_argument, NULL, OPT_CREATE + 4 },
                { "cert", required_argument, NULL, OPT_CREATE + 5 },
                { "unsigned", no_argument, NULL, OPT_CREATE + 6 },
                { "expires", required_argument, NULL, OPT_CREATE + 7 },
                { "level", required_argument, NULL, OPT_CREATE + 8 },
                { "encrypt-to", required_argument, NULL, OPT_CREATE + 9 },
                {},
        };
        const QuantFtype *ft;
        bool json = false, quiet = false;
        unsigned threads = quantize_default_threads();
        float scale = 1.0f;
        const char *bundle = NULL, *bundle_base = NULL, *imatrix_path = NULL;
        char *passed[CREATE_ARGS_MAX], flag[CREATE_ARGS_MAX][24];
        int n_passed = 0, c, r;

        cli_program = "taskpatch fold";
        while ((c = getopt_long(argc, argv, "hqt:", options, NULL)) >= 0)
                switch (c) {
                case OPT_BUNDLE:
                        bundle = optarg;
                        break;
                case OPT_BUNDLE_BASE:
                        bundle_base = optarg;
                        break;
                case OPT_IMATRIX:
                        imatrix_path = optarg;
                        break;
                case 't':
                        if (quantize_parse_threads(optarg, &threads) < 0)
                                return EXIT_USAGE;
                        break;
                case 'h':
                        help();
                        return EXIT_OK;
                case 'q':
                        quiet = true;
                        break;
                case OPT_JSON:
                        json = true;
                        break;
                case OPT_SCALE:
                        if (parse_scale(optarg, &scale) < 0)
                                return EXIT_USAGE;
                        break;
                default:
                        if (c < OPT_CREATE || c >= OPT_CREATE + 10)
                                return EXIT_USAGE;
                        /* A create option, kept for --bundle: "--name" and its value. */
                        if (n_passed + 2 > CREATE_ARGS_MAX) {
                                cli_error("too many options for the bundle");
                                return EXIT_USAGE;
                        }
                        snprintf(flag[n_passed], sizeof(flag[0]), "--%s", create_options[c - OPT_CREATE]);
                        passed[n_passed] = flag[n_passed];
                        n_passed++;
                        if (optarg)
                                passed[n_passed++] = optarg;
                        break;
                }
        if (argc - optind != 4) {
                cli_error("expected BASE.gguf LORA.gguf TASK.gguf TYPE (see --help)");
                return EXIT_USAGE;
        }
        if (!bundle && (n_passed > 0 || bundle_base)) {
                cli_error("--task, --key and the other bundle options go with --bundle OUT.tpb");
                return EXIT_USAGE;
        }
        const char *base_path = argv[optind], *lora_path = argv[optind + 1], *out = argv[optind + 2];
        if (quantize_parse_type(argv[optind + 3], &ft) < 0)
                return EXIT_USAGE;

        _cleanup_(gguf_freep) Gguf *base = NULL;
        _cleanup_(lora_freep) Lora *lora = NULL;
        _cleanup_(imatrix_freep) Imatrix *im = NULL;
        _cleanup_close_ int fd = -1;
        QuantizeOptions o = { .ftype = ft, .threads = threads, .imatrix_name = imatrix_path };
        QuantizeResult res;
        TpError err = {};

        if (quantize_open_model(base_path, &fd, &base) < 0)
                return EXIT_FAILED;
        if (imatrix_path && quantize_open_imatrix(imatrix_path, &im) < 0)
                return EXIT_FAILED;
        o.imatrix = im;
        r = lora_open(lora_path, &lora, &err);
        if (r < 0) {
                cli_error("%s", tp_error_message(&err, r));
                return EXIT_FAILED;
        }
        if (quantize_want_progress(quiet, json))
                o.progress = quantize_progress;
        double t0 = quantize_now();
        r = model_fold(fd, base, lora, scale, out, &o, &res, &err);
        if (r < 0) {
                cli_error("%s", tp_error_message(&err, r));
                return EXIT_FAILED;
        }
        double seconds = quantize_now() - t0;
        json_t *j = NULL;
        if (json) {
                j = quantize_result_json(base_path, out, &o, &res, seconds);
                json_t *targets = json_array();
                for (size_t i = 0; i < lora->n_pairs; i++)
                        json_array_append_new(targets, json_string(lora->pairs[i].target));
                json_object_set_new(j, "adapter", json_string(lora_path));
                json_object_set_new(j, "alpha", json_real(lora->alpha));
                json_object_set_new(j, "scale", json_real(scale));
                json_object_set_new(j, "folded", json_integer((json_int_t) res.n_hooked));
                json_object_set_new(j, "ignored", json_integer((json_int_t) lora->n_ignored));
                json_object_set_new(j, "targets", targets);
        } else {
                quantize_print_result(out, &o, &res, seconds);
                printf("  folded          %zu tensors from %s (alpha %g, scale %g)\n", res.n_hooked, lora_path,
                       (double) lora->alpha, (double) scale);
                if (lora->n_ignored)
                        printf("  ignored         %zu norm tensors of the adapter (llama.cpp ignores them too)\n",
                               lora->n_ignored);
        }
        if (bundle) {
                /* With --json, create's summary goes under "bundle" (null when no bundle was made). */
                _cleanup_free_ char *qbase = NULL;
                json_t *bj = NULL;
                if (!bundle_base && quantize_base(fd, base, &o, out, &qbase) < 0)
                        r = EXIT_FAILED;
                else
                        r = write_bundle(bundle_base ? bundle_base : qbase, out, lora_path, scale, imatrix_path,
                                         bundle, passed, n_passed, json ? &bj : NULL);
                if (qbase)
                        (void) unlink(qbase);
                if (j)
                        json_object_set_new(j, "bundle", bj ? bj : json_null());
        } else
                r = EXIT_OK;
        if (j) {
                json_dumpf(j, stdout, JSON_INDENT(2));
                fputc('\n', stdout);
                json_decref(j);
        }
        return r;
}
