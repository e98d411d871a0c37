/* SPDX-License-Identifier: MIT */
/* taskpatch fold: a LoRA adapter folded into a float base model, quantized like the base. */

#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

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
               "  -t, --threads N  quantizer threads (default: the online CPUs); the bytes do not\n"
               "                   depend on it\n"
               "  --json           print the summary as JSON\n"
               "  -q, --quiet      no progress on stderr\n"
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

int verb_fold(int argc, char *argv[]) {
        enum { OPT_JSON = 256, OPT_SCALE };
        static const struct option options[] = {
                { "help", no_argument, NULL, 'h' },
                { "json", no_argument, NULL, OPT_JSON },
                { "quiet", no_argument, NULL, 'q' },
                { "scale", required_argument, NULL, OPT_SCALE },
                { "threads", required_argument, NULL, 't' },
                {},
        };
        const QuantFtype *ft;
        bool json = false, quiet = false;
        unsigned threads = quantize_default_threads();
        float scale = 1.0f;
        int c, r;

        cli_program = "taskpatch fold";
        while ((c = getopt_long(argc, argv, "hqt:", options, NULL)) >= 0)
                switch (c) {
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
                        return EXIT_USAGE;
                }
        if (argc - optind != 4) {
                cli_error("expected BASE.gguf LORA.gguf TASK.gguf TYPE (see --help)");
                return EXIT_USAGE;
        }
        const char *base_path = argv[optind], *lora_path = argv[optind + 1], *out = argv[optind + 2];
        if (quantize_parse_type(argv[optind + 3], &ft) < 0)
                return EXIT_USAGE;

        _cleanup_(gguf_freep) Gguf *base = NULL;
        _cleanup_(lora_freep) Lora *lora = NULL;
        _cleanup_close_ int fd = -1;
        QuantizeOptions o = { .ftype = ft, .threads = threads };
        QuantizeResult res;
        TpError err = {};

        if (quantize_open_model(base_path, &fd, &base) < 0)
                return EXIT_FAILED;
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
        if (json) {
                json_t *j = quantize_result_json(base_path, out, ft, &res, seconds);
                json_t *targets = json_array();
                for (size_t i = 0; i < lora->n_pairs; i++)
                        json_array_append_new(targets, json_string(lora->pairs[i].target));
                json_object_set_new(j, "adapter", json_string(lora_path));
                json_object_set_new(j, "alpha", json_real(lora->alpha));
                json_object_set_new(j, "scale", json_real(scale));
                json_object_set_new(j, "folded", json_integer((json_int_t) res.n_hooked));
                json_object_set_new(j, "ignored", json_integer((json_int_t) lora->n_ignored));
                json_object_set_new(j, "targets", targets);
                json_dumpf(j, stdout, JSON_INDENT(2));
                fputc('\n', stdout);
                json_decref(j);
        } else {
                quantize_print_result(out, ft, &res, seconds);
                printf("  folded          %zu tensors from %s (alpha %g, scale %g)\n", res.n_hooked, lora_path,
                       (double) lora->alpha, (double) scale);
                if (lora->n_ignored)
                        printf("  ignored         %zu norm tensors of the adapter (llama.cpp ignores them too)\n",
                               lora->n_ignored);
        }
        return EXIT_OK;
}
