/* SPDX-License-Identifier: MIT */
/* taskpatch quantize: a float GGUF model to a llama.cpp type mix, byte for byte as llama-quantize. */

#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "quantize.h"
#include "taskpatch.h"

void quantize_list_types(FILE *f) {
        size_t n;
        const QuantFtype *ft = quant_ftypes(&n);

        for (size_t i = 0; i < n; i++)
                fprintf(f, "%s%s", i ? " " : "", ft[i].name);
        fputc('\n', f);
}

int quantize_parse_type(const char *name, const QuantFtype **ret) {
        const QuantFtype *ft = quant_ftype_from_name(name);

        if (!ft) {
                cli_error("unknown or unsupported TYPE '%s'; supported:", name);
                quantize_list_types(stderr);
                return -EINVAL;
        }
        *ret = ft;
        return 0;
}

int quantize_open_model(const char *path, int *ret_fd, Gguf **ret) {
        TpError err = {};
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        int r;

        if (fd < 0) {
                r = negative_errno();
                cli_error("%s: %s", path, strerror(-r));
                return r;
        }
        r = gguf_read(fd, ret, &err);
        if (r < 0) {
                cli_error("%s: %s", path, tp_error_message(&err, r));
                return r;
        }
        *ret_fd = TAKE_FD(fd);
        return 0;
}

int quantize_open_imatrix(const char *path, Imatrix **ret) {
        TpError err = {};
        int r = imatrix_open(path, ret, &err);

        if (r < 0)
                cli_error("--imatrix %s: %s", path, tp_error_message(&err, r));
        return r;
}

/* One line per tensor on a terminal, rewritten in place. */
void quantize_progress(void *userdata, size_t i, size_t n, const GgufTensor *t, uint32_t type) {
        (void) userdata;
        fprintf(stderr, "\r\033[K[%4zu/%4zu] %-40s %6s -> %s", i + 1, n, t->name, ggml_type(t->type)->name,
                ggml_type(type)->name);
        if (i + 1 == n)
                fputc('\n', stderr);
        fflush(stderr);
}

int quantize_parse_threads(const char *s, unsigned *ret) {
        uint64_t v;

        if (cli_parse_u64("threads", s, &v) < 0)
                return -EINVAL;
        if (v < 1 || v > 64) {
                cli_error("--threads: expected 1..64, got '%s'", s);
                return -EINVAL;
        }
        *ret = (unsigned) v;
        return 0;
}

unsigned quantize_default_threads(void) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        return n < 1 ? 1 : n > 64 ? 64 : (unsigned) n;
}

bool quantize_want_progress(bool quiet, bool json) {
        return !quiet && !json && isatty(STDERR_FILENO);
}

double quantize_now(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

json_t *quantize_result_json(const char *in, const char *out, const QuantizeOptions *o, const QuantizeResult *r,
                             double seconds) {
        const QuantFtype *ft = o->ftype;
        json_t *types = json_object(), *imatrix = json_null();

        for (size_t t = 0; t < GGML_TYPE_COUNT; t++)
                if (r->type_count[t])
                        json_object_set_new(types, ggml_type((uint32_t) t)->name, json_integer((json_int_t) r->type_count[t]));
        if (o->imatrix)
                imatrix = json_pack("{s:s, s:I, s:I, s:I}", "file", o->imatrix_name, "entries",
                                    (json_int_t) o->imatrix->n_entries, "tensors", (json_int_t) r->n_imatrix,
                                    "tensors_without", (json_int_t) r->n_imatrix_missing);
        return json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:o, s:o, s:f}", "input", in, "output",
                         out, "type", ft->name, "file_type", (json_int_t) ft->ftype, "tensors",
                         (json_int_t) r->n_tensors, "converted", (json_int_t) r->n_converted, "copied",
                         (json_int_t) r->n_copied, "fallback", (json_int_t) r->n_fallback, "input_bytes",
                         (json_int_t) r->in_bytes, "output_bytes", (json_int_t) r->out_bytes, "types", types,
                         "imatrix", imatrix, "seconds", seconds);
}

void quantize_print_result(const char *out, const QuantizeOptions *o, const QuantizeResult *r, double seconds) {
        const QuantFtype *ft = o->ftype;

        printf("%s: %s (general.file_type %" PRIu32 ")\n", out, ft->name, ft->ftype);
        printf("  tensors         %zu (%zu converted, %zu copied", r->n_tensors, r->n_converted, r->n_copied);
        if (r->n_fallback)
                printf(", %zu with a fallback type", r->n_fallback);
        printf(")\n  types          ");
        for (size_t t = 0; t < GGML_TYPE_COUNT; t++)
                if (r->type_count[t])
                        printf(" %s:%zu", ggml_type((uint32_t) t)->name, r->type_count[t]);
        printf("\n  size            %" PRIu64 " -> %" PRIu64 " bytes (%.3f)\n", r->in_bytes, r->out_bytes,
               r->in_bytes ? (double) r->out_bytes / (double) r->in_bytes : 0.0);
        if (o->imatrix)
                printf("  imatrix         %s: %zu entries; %zu tensors quantized with one, %zu without (no entry)\n",
                       o->imatrix_name, o->imatrix->n_entries, r->n_imatrix, r->n_imatrix_missing);
        printf("  time            %.2f s\n", seconds);
}

static void help(void) {
        printf("Usage: taskpatch quantize [OPTIONS] IN.gguf OUT.gguf TYPE\n"
               "\n"
               "Quantize the F32/F16/BF16 GGUF model IN.gguf to TYPE as llama.cpp's llama-quantize\n"
               "does with default options (no imatrix): the same type mix, metadata and layout, byte\n"
               "for byte. Run it on the base model; 'taskpatch fold' gives the task model with the\n"
               "same code, so the two differ only in the tensors a LoRA touched.\n"
               "\n"
               "TYPE (as llama-quantize spells it):\n"
               "  ");
        quantize_list_types(stdout);
        printf("\n"
               "Type mixes (llama architecture): 1-D tensors and norms stay as they are; output.weight\n"
               "(token_embd.weight when there is none) gets Q6_K, or Q8_0 for Q8_0; Q4_K_M and Q5_K_M\n"
               "give Q6_K to attn_v and ffn_down of the first and last eighth of the layers and every\n"
               "third one between; Q4_K_S gives Q5_K to the first 4 attn_v and the first eighth of\n"
               "ffn_down; Q2_K and Q3_K_M/L raise attn_v, attn_output and ffn_down to Q3_K..Q5_K;\n"
               "Q2_K_S raises attn_v (4+ heads per KV head) and the first eighth of ffn_down to Q4_K,\n"
               "and needs --imatrix.\n"
               "See taskpatch(1) for every rule.\n"
               "\n"
               "  --imatrix FILE   an importance matrix (llama-imatrix's GGUF file or legacy .dat), as\n"
               "                   llama-quantize --imatrix uses it: the same bytes\n"
               "  -t, --threads N  quantizer threads (default: the online CPUs); the bytes do not\n"
               "                   depend on it\n"
               "  --json           print the summary as JSON\n"
               "  -q, --quiet      no progress on stderr\n"
               "\n"
               "OUT.gguf is written through a temporary beside it, fsynced and renamed.\n");
}

int verb_quantize(int argc, char *argv[]) {
        enum { OPT_JSON = 256, OPT_IMATRIX };
        static const struct option options[] = {
                { "help", no_argument, NULL, 'h' },
                { "imatrix", required_argument, NULL, OPT_IMATRIX },
                { "json", no_argument, NULL, OPT_JSON },
                { "quiet", no_argument, NULL, 'q' },
                { "threads", required_argument, NULL, 't' },
                {},
        };
        const QuantFtype *ft;
        const char *imatrix_path = NULL;
        bool json = false, quiet = false;
        unsigned threads = quantize_default_threads();
        int c, r;

        cli_program = "taskpatch quantize";
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
                case OPT_IMATRIX:
                        imatrix_path = optarg;
                        break;
                default:
                        return EXIT_USAGE;
                }
        if (argc - optind != 3) {
                cli_error("expected IN.gguf OUT.gguf TYPE (see --help)");
                return EXIT_USAGE;
        }
        const char *in = argv[optind], *out = argv[optind + 1];
        if (quantize_parse_type(argv[optind + 2], &ft) < 0)
                return EXIT_USAGE;

        _cleanup_(gguf_freep) Gguf *g = NULL;
        _cleanup_(imatrix_freep) Imatrix *im = NULL;
        _cleanup_close_ int fd = -1;
        QuantizeOptions o = { .ftype = ft, .threads = threads, .imatrix_name = imatrix_path };
        QuantizeResult res;
        TpError err = {};

        if (quantize_open_model(in, &fd, &g) < 0)
                return EXIT_FAILED;
        if (imatrix_path && quantize_open_imatrix(imatrix_path, &im) < 0)
                return EXIT_FAILED;
        o.imatrix = im;
        if (quantize_want_progress(quiet, json))
                o.progress = quantize_progress;
        double t0 = quantize_now();
        r = model_quantize(fd, g, out, &o, &res, &err);
        if (r < 0) {
                cli_error("%s: %s", in, tp_error_message(&err, r));
                return EXIT_FAILED;
        }
        double seconds = quantize_now() - t0;
        if (json) {
                json_t *j = quantize_result_json(in, out, &o, &res, seconds);
                json_dumpf(j, stdout, JSON_INDENT(2));
                fputc('\n', stdout);
                json_decref(j);
        } else
                quantize_print_result(out, &o, &res, seconds);
        return EXIT_OK;
}
