/* SPDX-License-Identifier: MIT */
/*
 * Quantizer throughput: quantize_rows() with each implementation this CPU runs against ggml's
 * ggml_quantize_chunk (libggml-base.so of the pinned npm package, dlopen()ed), on the same
 * rows in the same run, interleaved repetitions; MB/s counts floats in (4 bytes each).
 *
 * Usage: bench-quant LIBGGML_BASE_SO_OR_DIR [REPS]
 * Prints one JSON object per type per line:
 *   {"type": "q4_0", "imatrix": false, "floats": N, "reps": R, "ggml_mbps": .., "impls": {"avx2": ..,
 *    "generic": ..}, "best": "avx2", "ratio_best": .., "ratio_generic": .., "same_bytes": true}
 * then the weighted K-quants with an importance row ("q4_K-imatrix": quantize_rows_weighted
 * against ggml_quantize_chunk given the same row). MB/s from the fastest repetition; the
 * ratios are ours over ggml's.
 */

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "../oracle/quant-cases.h"
#include "dispatch.h"
#include "ggml.h"
#include "quant.h"

typedef size_t (*ggml_quantize_chunk_fn)(int type, const float *src, void *dst, int64_t start, int64_t nrows,
                                         int64_t n_per_row, const float *imatrix);

static const uint32_t types[] = {
        GGML_TYPE_F16,  GGML_TYPE_BF16, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1,
        GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q6_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K,
};

/* With an importance row (llama-quantize --imatrix): the types with a SIMD weighted quantizer. */
static const uint32_t weighted_types[] = { GGML_TYPE_Q6_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K };

#define N_PER_ROW 4096
#define MAX_IMPLS 4

static double now(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}

/*
 * One type: ggml and each implementation on the same rows, interleaved repetitions, with the
 * importance row @imatrix (quantize_rows_weighted) or without one (NULL: quantize_rows).
 * Prints its JSON line; -ENOMEM if the rows cannot be allocated.
 */
static int bench_type(ggml_quantize_chunk_fn chunk, uint32_t type, const float *imatrix, const char *const *impls,
                      size_t n_impls, unsigned reps) {
        const GgmlType *gt = ggml_type(type);
        /* About 0.1 s of ggml's work per repetition: the K-quants are slow. */
        size_t nrows = gt->block_size == 256 ? 64 : 256, n = nrows * N_PER_ROW;
        size_t bytes = n / gt->block_size * gt->type_size;
        float *x = malloc(n * sizeof(float));
        uint8_t *want = malloc(bytes), *got = malloc(bytes);
        double best_ggml = 1e30, best[MAX_IMPLS];
        bool same = true;

        if (!x || !want || !got) {
                free(x);
                free(want);
                free(got);
                return -ENOMEM;
        }
        qc_fill(x, nrows, N_PER_ROW, QC_WEIGHTS, 1);
        for (size_t i = 0; i < n_impls; i++)
                best[i] = 1e30;

        for (unsigned r = 0; r < reps; r++) {
                double t0 = now();
                chunk((int) type, x, want, 0, (int64_t) nrows, N_PER_ROW, imatrix);
                double dt = now() - t0;
                if (dt < best_ggml)
                        best_ggml = dt;
                for (size_t i = 0; i < n_impls; i++) {
                        kernels_force(impls[i]);
                        t0 = now();
                        if (imatrix)
                                quantize_rows_weighted(type, x, got, nrows, N_PER_ROW, imatrix);
                        else
                                quantize_rows(type, x, got, nrows, N_PER_ROW);
                        dt = now() - t0;
                        if (dt < best[i])
                                best[i] = dt;
                        same = same && memcmp(got, want, bytes) == 0;
                }
        }

        double mb = (double) n * 4 / 1e6, ggml_mbps = mb / best_ggml;
        size_t bi = 0, gi = 0;
        for (size_t i = 0; i < n_impls; i++) {
                if (best[i] < best[bi])
                        bi = i;
                if (strcmp(impls[i], "generic") == 0)
                        gi = i;
        }
        printf("{\"type\": \"%s%s\", \"imatrix\": %s, \"floats\": %zu, \"reps\": %u, \"ggml_mbps\": %.1f, "
               "\"impls\": {", gt->name, imatrix ? "-imatrix" : "", imatrix ? "true" : "false", n, reps, ggml_mbps);
        for (size_t i = 0; i < n_impls; i++)
                printf("%s\"%s\": %.1f", i ? ", " : "", impls[i], mb / best[i]);
        printf("}, \"best\": \"%s\", \"ratio_best\": %.2f, \"ratio_generic\": %.2f, \"same_bytes\": %s}\n",
               impls[bi], best_ggml / best[bi], best_ggml / best[gi], same ? "true" : "false");
        fflush(stdout);
        free(x);
        free(want);
        free(got);
        return 0;
}

int main(int argc, char *argv[]) {
        char buf[4096];
        struct stat st;
        const char *path;
        unsigned reps;

        if (argc < 2) {
                fprintf(stderr, "usage: bench-quant LIBGGML_BASE_SO_OR_DIR [REPS]\n");
                return 2;
        }
        path = argv[1];
        reps = argc > 2 ? (unsigned) strtoul(argv[2], NULL, 10) : 5;
        if (reps < 1)
                reps = 1;
        if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
                snprintf(buf, sizeof buf, "%s/libggml-base.so", path);
                path = buf;
        }
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        ggml_quantize_chunk_fn chunk = h ? (ggml_quantize_chunk_fn) dlsym(h, "ggml_quantize_chunk") : NULL;
        if (!chunk) {
                fprintf(stderr, "bench-quant: cannot load ggml_quantize_chunk from %s: %s\n", path, dlerror());
                return 1;
        }

        const char *impls[MAX_IMPLS];
        size_t n_impls = 0;
        for (size_t i = 0; n_impls < MAX_IMPLS; i++) {
                bool ok;
                const char *name = kernel_impl(KERNEL_QUANT, i, &ok);
                if (!name)
                        break;
                if (ok)
                        impls[n_impls++] = name;
        }

        for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++)
                if (bench_type(chunk, types[t], NULL, impls, n_impls, reps) < 0)
                        return 2;
        float imatrix[N_PER_ROW];
        qc_fill_importance(imatrix, N_PER_ROW, QC_IMP_SKEWED, 1);
        for (size_t t = 0; t < sizeof(weighted_types) / sizeof(weighted_types[0]); t++)
                if (bench_type(chunk, weighted_types[t], imatrix, impls, n_impls, reps) < 0)
                        return 2;
        return 0;
}
