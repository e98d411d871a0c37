/* SPDX-License-Identifier: MIT */
/*
 * Oracle for kernels/quant*: every quantizer implementation this CPU runs against ggml's own
 * ggml_quantize_chunk (the prebuilt libggml-base.so of the pinned npm package, dlopen()ed),
 * byte for byte, for every supported type over many distributions, row lengths and row counts;
 * and kernels/dequant.c against ggml's dequantize_row_* on ggml's own output, bit for bit (one
 * more check per type and input set); and quantize_rows_weighted() (kernels/quant-weighted.c and
 * the SIMD weighted K-quants) against ggml_quantize_chunk given an importance matrix row (one
 * more check per type, implementation and input set, three kinds of rows).
 *
 * Usage: quant-oracle LIBGGML_BASE_SO_OR_DIR [-v]
 * Prints one line per type, then "quant-oracle: N passed, M failed" (one check = one type,
 * one implementation, one input set); exits 1 on any failure. Each type's line ends with the
 * SHA-256 of ggml's output over all its input sets.
 *
 * Usage: quant-oracle --digest
 * Without ggml (another architecture, e.g. arm64 under qemu): the same input sets through
 * every implementation, one line per type with the SHA-256 of each one's output, to compare
 * with the digests ggml's x86 build gives.
 */

#include <dlfcn.h>
#include <math.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dequant.h"
#include "dispatch.h"
#include "ggml.h"
#include "quant-cases.h"
#include "quant.h"
#include "sha256.h"

/* As ggml/include/ggml.h declares it (llama.cpp of node-llama-cpp 3.21.1), enum ggml_type as int. */
typedef size_t (*ggml_quantize_chunk_fn)(int type, const float *src, void *dst, int64_t start, int64_t nrows,
                                         int64_t n_per_row, const float *imatrix);

static ggml_quantize_chunk_fn ggml_quantize_chunk;

/* ggml's dequantize_row_<type> (ggml-quants.h), per type id; NULL for the float types. */
typedef void (*ggml_dequantize_row_fn)(const void *x, float *y, int64_t k);
static ggml_dequantize_row_fn ggml_dequantize[64];

static int ggml_load(const char *path) {
        char buf[4096];
        struct stat st;
        void *h;

        if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
                int k = snprintf(buf, sizeof buf, "%s/libggml-base.so", path);
                if (k < 0 || (size_t) k >= sizeof buf)
                        return -ENAMETOOLONG;
                path = buf;
        }
        h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
                fprintf(stderr, "quant-oracle: dlopen %s: %s\n", path, dlerror());
                return -ENOENT;
        }
        ggml_quantize_chunk = (ggml_quantize_chunk_fn) dlsym(h, "ggml_quantize_chunk");
        if (!ggml_quantize_chunk) {
                fprintf(stderr, "quant-oracle: %s lacks ggml_quantize_chunk\n", path);
                return -ENOENT;
        }
        static const struct {
                uint32_t type;
                const char *sym;
        } dq[] = {
                { GGML_TYPE_Q8_0, "dequantize_row_q8_0" }, { GGML_TYPE_Q4_0, "dequantize_row_q4_0" },
                { GGML_TYPE_Q4_1, "dequantize_row_q4_1" }, { GGML_TYPE_Q5_0, "dequantize_row_q5_0" },
                { GGML_TYPE_Q5_1, "dequantize_row_q5_1" }, { GGML_TYPE_Q4_K, "dequantize_row_q4_K" },
                { GGML_TYPE_Q5_K, "dequantize_row_q5_K" }, { GGML_TYPE_Q6_K, "dequantize_row_q6_K" },
                { GGML_TYPE_Q2_K, "dequantize_row_q2_K" }, { GGML_TYPE_Q3_K, "dequantize_row_q3_K" },
        };
        for (size_t i = 0; i < sizeof(dq) / sizeof(dq[0]); i++)
                if (!(ggml_dequantize[dq[i].type] = (ggml_dequantize_row_fn) dlsym(h, dq[i].sym))) {
                        fprintf(stderr, "quant-oracle: %s lacks %s\n", path, dq[i].sym);
                        return -ENOENT;
                }
        return 0;
}

static const uint32_t types[] = {
        GGML_TYPE_F32,  GGML_TYPE_F16,  GGML_TYPE_BF16, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1,
        GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q6_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q2_K,
        GGML_TYPE_Q3_K,
};

/* Row lengths and row counts: every length is a whole number of K-quant super-blocks or of 32. */
static const size_t lengths_small[] = { 32, 64, 96, 160, 544, 4096 };
static const size_t lengths_k[] = { 256, 512, 768, 2304, 8192 };

#define MAX_FLOATS (1u << 16)
#define SEEDS 3

static bool verbose;

typedef struct Tally {
        unsigned passed, failed;
} Tally;

/* One input set through every implementation; counts one check per implementation. */
/* Our dequantizer against ggml's on the same blocks: every float's bits equal. */
static void check_dequant(uint32_t type, const uint8_t *blocks, size_t n, const char *what, Tally *t) {
        static float mine[MAX_FLOATS], theirs[MAX_FLOATS];
        const GgmlType *gt = ggml_type(type);

        ggml_dequantize[type](blocks, theirs, (int64_t) n);
        dequantize_blocks(type, blocks, mine, n / gt->block_size);
        for (size_t i = 0; i < n; i++)
                if (memcmp(&mine[i], &theirs[i], sizeof(float)) != 0) {
                        t->failed++;
                        if (t->failed <= 3 || verbose)
                                fprintf(stderr, "  dequantize %s %s: element %zu: %a, ggml %a\n", gt->name, what, i,
                                        (double) mine[i], (double) theirs[i]);
                        return;
                }
        t->passed++;
}

/*
 * An importance matrix row of @n values for input set @seed: mean squared activations are
 * positive and skewed, some columns never fire (0): uniform (0, 1], log-uniform over e^±4, or
 * a tenth zeros and the rest u² × 100.
 */
static void fill_imatrix(float *w, size_t n, uint64_t seed) {
        uint64_t s = seed * 0x9e3779b97f4a7c15u + 1;

        for (size_t i = 0; i < n; i++) {
                s ^= s << 13, s ^= s >> 7, s ^= s << 17;
                float u = (float) ((s >> 40) + 1) / (float) (1u << 24);
                w[i] = seed % 3 == 0 ? u : seed % 3 == 1 ? expf(8.f * (u - 0.5f)) : u < 0.1f ? 0.f : u * u * 100.f;
        }
}

/* quantize_rows_weighted() with every implementation against ggml_quantize_chunk with the same
 * imatrix row (one check per implementation, tallied in @per_impl); *@changed counts the sets
 * where the imatrix changed ggml's bytes (else this check would prove nothing). */
static void check_weighted(uint32_t type, const float *x, size_t nrows, size_t n_per_row, uint64_t seed,
                           const char *what, uint8_t *want, uint8_t *got, Tally *per_impl, size_t n_impls,
                           unsigned *changed) {
        static float imatrix[MAX_FLOATS];
        size_t bytes = nrows * (n_per_row / ggml_type(type)->block_size * ggml_type(type)->type_size);

        fill_imatrix(imatrix, n_per_row, seed);
        size_t wn = ggml_quantize_chunk((int) type, x, want, 0, (int64_t) nrows, (int64_t) n_per_row, imatrix);
        memset(got, 0xa5, bytes + 64);
        (void) quantize_rows(type, x, got, nrows, n_per_row);
        *changed += memcmp(got, want, bytes) != 0;
        for (size_t i = 0; i < n_impls; i++) {
                const char *impl = kernel_impl(KERNEL_QUANT, i, NULL);
                if (kernels_force(impl) < 0)
                        continue;
                memset(got, 0xa5, bytes + 64);
                size_t gn = quantize_rows_weighted(type, x, got, nrows, n_per_row, imatrix);
                size_t diff = 0;
                while (diff < bytes && want[diff] == got[diff])
                        diff++;
                if (gn == wn && wn == bytes && diff == bytes && got[bytes] == 0xa5) {
                        per_impl[i].passed++;
                        continue;
                }
                per_impl[i].failed++;
                if (per_impl[i].failed <= 3 || verbose)
                        fprintf(stderr, "  %s/%s with an imatrix %s, %zu x %zu: %zu bytes (ggml %zu), first difference "
                                "at byte %zu\n", ggml_type(type)->name, impl, what, nrows, n_per_row, gn, wn, diff);
        }
}

static void check_set(uint32_t type, const float *x, size_t nrows, size_t n_per_row, const char *what,
                      uint8_t *want, uint8_t *got, Tally *per_impl, Sha256 *digests, size_t n_impls,
                      Tally *dequant_tally) {
        const GgmlType *t = ggml_type(type);
        size_t row_bytes = n_per_row / t->block_size * t->type_size, bytes = nrows * row_bytes, wn = bytes;

        /* digests[0]: ggml's output; digests[1 + i]: implementation i's. */
        if (ggml_quantize_chunk) {
                wn = ggml_quantize_chunk((int) type, x, want, 0, (int64_t) nrows, (int64_t) n_per_row, NULL);
                sha256_update(&digests[0], want, wn);
                if (ggml_dequantize[type])
                        check_dequant(type, want, nrows * n_per_row, what, dequant_tally);
        }

        for (size_t i = 0; i < n_impls; i++) {
                const char *impl = kernel_impl(KERNEL_QUANT, i, NULL);
                if (kernels_force(impl) < 0)
                        continue;
                memset(got, 0xa5, bytes + 64);
                size_t gn = quantize_rows(type, x, got, nrows, n_per_row);
                sha256_update(&digests[1 + i], got, gn);
                if (!ggml_quantize_chunk) {
                        per_impl[i].passed++;
                        continue;
                }
                size_t diff = bytes;
                for (size_t b = 0; b < bytes; b++)
                        if (want[b] != got[b]) {
                                diff = b;
                                break;
                        }
                bool ok = gn == wn && wn == bytes && diff == bytes && got[bytes] == 0xa5;
                if (ok) {
                        per_impl[i].passed++;
                        continue;
                }
                per_impl[i].failed++;
                if (per_impl[i].failed <= 3 || verbose)
                        fprintf(stderr,
                                "  %s/%s %s, %zu x %zu: %zu bytes (ggml %zu), first difference at byte %zu "
                                "(row %zu, byte %zu of the row): got 0x%02x, ggml 0x%02x\n",
                                ggml_type(type)->name, impl, what, nrows, n_per_row, gn, wn, diff,
                                diff / row_bytes, diff % row_bytes, diff < bytes ? got[diff] : 0,
                                diff < bytes ? want[diff] : 0);
        }
}

static const char *hex_digest(Sha256 *s) {
        static char hex[SHA256_HEX_SIZE];
        uint8_t d[SHA256_DIGEST_SIZE];

        sha256_final(s, d);
        sha256_to_hex(d, hex);
        return hex;
}

int main(int argc, char *argv[]) {
        size_t n_impls = 0;
        unsigned passed = 0, failed = 0;

        if (argc < 2) {
                fprintf(stderr, "usage: quant-oracle LIBGGML_BASE_SO_OR_DIR [-v] | --digest\n");
                return 2;
        }
        bool digest_only = strcmp(argv[1], "--digest") == 0;
        verbose = argc > 2 && strcmp(argv[2], "-v") == 0;
        if (!digest_only && ggml_load(argv[1]) < 0) {
                printf("quant-oracle: 0 passed, 1 failed\n");
                return 1;
        }
        while (kernel_impl(KERNEL_QUANT, n_impls, NULL))
                n_impls++;

        float *x = malloc(MAX_FLOATS * sizeof(float));
        uint8_t *want = malloc(MAX_FLOATS * sizeof(float) + 64), *got = malloc(MAX_FLOATS * sizeof(float) + 64);
        if (!x || !want || !got)
                return 2;

        for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
                uint32_t type = types[t];
                bool k = ggml_type(type)->block_size == 256;
                const size_t *lengths = k ? lengths_k : lengths_small;
                size_t n_lengths = k ? sizeof(lengths_k) / sizeof(lengths_k[0])
                                     : sizeof(lengths_small) / sizeof(lengths_small[0]);
                Tally tally[8] = {}, dq = {}, weighted[8] = {};
                unsigned changed = 0;
                Sha256 digests[9];

                for (size_t i = 0; i < 9; i++)
                        sha256_init(&digests[i]);

                for (QcDist d = 0; d < _QC_DIST_MAX; d++)
                        for (size_t li = 0; li < n_lengths; li++)
                                for (uint64_t seed = 1; seed <= SEEDS; seed++) {
                                        size_t len = lengths[li], nrows = MAX_FLOATS / len;
                                        char what[64];

                                        /* Row counts 1..all; shorter sets for the slow K-quants. */
                                        nrows = 1 + (seed * 7919 + li * 31) % nrows;
                                        if (k && nrows > 8)
                                                nrows = 8;
                                        qc_fill(x, nrows, len, d, seed);
                                        snprintf(what, sizeof what, "%s seed %u", qc_dist_names[d], (unsigned) seed);
                                        check_set(type, x, nrows, len, what, want, got, tally, digests, n_impls,
                                                  &dq);
                                        if (!digest_only)
                                                check_weighted(type, x, nrows, len, seed + 3 * li, what, want, got,
                                                               weighted, n_impls, &changed);
                                }

                printf("%-5s", ggml_type(type)->name);
                for (size_t i = 0; i < n_impls; i++) {
                        bool supported;
                        const char *impl = kernel_impl(KERNEL_QUANT, i, &supported);
                        if (!supported) {
                                printf("  %s: not on this CPU", impl);
                                continue;
                        }
                        if (digest_only) {
                                printf("  %s: %s", impl, hex_digest(&digests[1 + i]));
                                continue;
                        }
                        printf("  %s: %s %u/%u", impl, tally[i].failed ? "FAIL" : "ok", tally[i].passed,
                               tally[i].passed + tally[i].failed);
                        passed += tally[i].passed;
                        failed += tally[i].failed;
                }
                if (!digest_only && (dq.passed || dq.failed)) {
                        printf("  dequantize: %s %u/%u", dq.failed ? "FAIL" : "ok", dq.passed, dq.passed + dq.failed);
                        passed += dq.passed;
                        failed += dq.failed;
                }
                if (!digest_only) {
                        /* Types with an importance-aware quantizer: the imatrix must have mattered somewhere. */
                        if (quant_weighted_supported(type) && changed == 0) {
                                fprintf(stderr, "  %s: the imatrix changed none of ggml's outputs\n", ggml_type(type)->name);
                                failed++;
                        }
                        printf("  imatrix (%u changed)", changed);
                        for (size_t i = 0; i < n_impls; i++) {
                                if (!weighted[i].passed && !weighted[i].failed)
                                        continue;
                                printf(" %s: %s %u/%u", kernel_impl(KERNEL_QUANT, i, NULL),
                                       weighted[i].failed ? "FAIL" : "ok", weighted[i].passed,
                                       weighted[i].passed + weighted[i].failed);
                                passed += weighted[i].passed;
                                failed += weighted[i].failed;
                        }
                        printf("  ggml: %s", hex_digest(&digests[0]));
                }
                printf("\n");
        }

        free(x);
        free(want);
        free(got);
        if (digest_only)
                return 0;
        printf("quant-oracle: %u passed, %u failed\n", passed, failed);
        return failed ? 1 : 0;
}
