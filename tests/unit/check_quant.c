/* SPDX-License-Identifier: MIT */
/*
 * kernels/quant*: hand-checked blocks, dequantization error bounds, and every implementation
 * this CPU runs against the generic one on random and edge rows of many sizes. ggml's own
 * library is the judge in tests/oracle/quant-oracle.c (make check-oracle).
 */

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "../oracle/quant-cases.h"
#include "check-main.h"
#include "dequant.h"
#include "dispatch.h"
#include "ggml.h"
#include "product.h"
#include "quant.h"

static const uint32_t all_types[] = {
        GGML_TYPE_F32,  GGML_TYPE_F16,  GGML_TYPE_BF16, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1,
        GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K,
        GGML_TYPE_Q6_K,
};
#define N_TYPES (sizeof(all_types) / sizeof(all_types[0]))

static size_t n_impls(void) {
        size_t n = 0;
        while (kernel_impl(KERNEL_QUANT, n, NULL))
                n++;
        return n;
}

/* Force the idx-th quantizer implementation; false when this CPU cannot run it. */
static bool force_impl(int idx, const char **ret_name) {
        bool supported;
        const char *name = kernel_impl(KERNEL_QUANT, (size_t) idx, &supported);

        ck_assert_ptr_nonnull(name);
        *ret_name = name;
        if (!supported) {
                ck_assert_int_eq(kernels_force(name), -ENOTSUP);
                return false;
        }
        ck_assert_int_eq(kernels_force(name), 0);
        ck_assert_str_eq(kernel_active(KERNEL_QUANT), name);
        return true;
}

static size_t row_bytes(uint32_t type, size_t n_per_row) {
        const GgmlType *t = ggml_type(type);
        return n_per_row / t->block_size * t->type_size;
}

static uint16_t le16(const uint8_t *p) {
        return (uint16_t) (p[0] | (p[1] << 8));
}

static size_t quantize_ok(uint32_t type, const float *x, uint8_t *out, size_t nrows, size_t n_per_row) {
        size_t n = quantize_rows(type, x, out, nrows, n_per_row);
        ck_assert_uint_eq(n, nrows * row_bytes(type, n_per_row));
        return n;
}

START_TEST(test_supported) {
        for (size_t t = 0; t < N_TYPES; t++)
                ck_assert_msg(quant_supported(all_types[t]), "type %u", all_types[t]);
        static const uint32_t unsupported[] = { GGML_TYPE_Q8_1, GGML_TYPE_Q8_K, GGML_TYPE_IQ4_NL, GGML_TYPE_I8,
                                                4, 5, 1000 };
        for (size_t i = 0; i < sizeof(unsupported) / sizeof(unsupported[0]); i++)
                ck_assert_msg(!quant_supported(unsupported[i]), "type %u", unsupported[i]);
}
END_TEST

/* Floats whose FP16 / BF16 images are known: exact values, ties to even, overflow, underflow. */
START_TEST(test_float_vectors) {
        static const struct {
                float x;
                uint16_t f16, bf16;
        } v[] = {
                { 1.0f, 0x3c00, 0x3f80 },
                { -2.0f, 0xc000, 0xc000 },
                { 0.0f, 0x0000, 0x0000 },
                { -0.0f, 0x8000, 0x8000 },
                { 65504.0f, 0x7bff, 0x4780 },             /* bf16: 8 mantissa bits round it up */
                { 65520.0f, 0x7c00, 0x4780 },             /* f16: halfway to 65536 rounds to inf */
                { 1.0f + 0x1.0p-11f, 0x3c00, 0x3f80 },    /* f16 tie: to even (down) */
                { 1.0f + 0x3.0p-11f, 0x3c02, 0x3f80 },    /* f16 tie: to even (up) */
                { 1.0f + 0x1.0p-8f, 0x3c04, 0x3f80 },     /* bf16 tie: to even (down) */
                { 1.0f + 0x3.0p-8f, 0x3c0c, 0x3f82 },     /* bf16 tie: to even (up) */
                { 0x1.0p-24f, 0x0001, 0x3380 },           /* smallest f16 subnormal */
                { 0x1.0p-25f, 0x0000, 0x3300 },           /* half of it: tie to even, zero */
                { 0x1.8p-25f, 0x0001, 0x3340 },
                { 0x1.0p-14f, 0x0400, 0x3880 },           /* smallest f16 normal */
                { 1e-40f, 0x0000, 0x0001 },               /* a float denormal */
                { 3.0e38f, 0x7c00, 0x7f62 },
                { -3.4028235e38f, 0xfc00, 0xff80 },       /* -FLT_MAX: bf16 rounds to -inf */
        };
        const char *name;
        uint8_t out[2];

        if (!force_impl(_i, &name))
                return;
        for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
                quantize_ok(GGML_TYPE_F16, &v[i].x, out, 1, 1);
                ck_assert_msg(le16(out) == v[i].f16, "%s f16(%a) = 0x%04x, want 0x%04x", name, (double) v[i].x,
                              le16(out), v[i].f16);
                quantize_ok(GGML_TYPE_BF16, &v[i].x, out, 1, 1);
                ck_assert_msg(le16(out) == v[i].bf16, "%s bf16(%a) = 0x%04x, want 0x%04x", name,
                              (double) v[i].x, le16(out), v[i].bf16);
        }
        float f = -1.5f;
        uint8_t f32[4];
        quantize_ok(GGML_TYPE_F32, &f, f32, 1, 1);
        ck_assert_mem_eq(f32, &f, 4);
}
END_TEST

/*
 * Blocks whose scale comes out exactly 1 (the extreme is the block's range), so every level is
 * the input rounded the way each format rounds: Q8_0 half away from zero, the others by
 * truncating x + offset + 0.5.
 */
START_TEST(test_block_vectors) {
        const char *name;
        float x[32];
        uint8_t out[64];

        if (!force_impl(_i, &name))
                return;

        /* Q8_0: amax 127 gives d = 1. */
        for (int j = 0; j < 32; j++)
                x[j] = (float) (j - 16) * 2.5f;         /* -37.5 ... 37.5: every other one a tie */
        x[0] = 127.0f;
        quantize_ok(GGML_TYPE_Q8_0, x, out, 1, 32);
        ck_assert_uint_eq(le16(out), 0x3c00);
        ck_assert_int_eq((int8_t) out[2], 127);
        for (int j = 1; j < 32; j++) {
                int k2 = (j - 16) * 5;                  /* twice the value; a .5 rounds away from zero */
                int want = k2 % 2 == 0 ? k2 / 2 : (k2 > 0 ? (k2 + 1) / 2 : (k2 - 1) / 2);
                ck_assert_msg((int8_t) out[2 + j] == want, "%s q8_0[%d] = %d, want %d", name, j,
                              (int8_t) out[2 + j], want);
        }

        /* Q4_0: the signed extreme -8 gives d = -8 / -8 = 1; q = min(15, trunc(x + 8.5)). */
        static const float q40[32] = { -8, -7.6f, -0.5f, 0, 0.49f, 0.5f, 7, 7.4f, 3, -3, 1, 2, 4, 5, 6, -1,
                                       -2, -4, -5, -6, -7, 1.5f, 2.5f, -1.5f, 0.25f, -0.25f, 6.5f, -6.5f, 0, 0, 0, 0 };
        static const uint8_t q40_levels[32] = { 0, 0, 8, 8, 8, 9, 15, 15, 11, 5, 9, 10, 12, 13, 14, 7,
                                                6, 4, 3, 2, 1, 10, 11, 7, 8, 8, 15, 2, 8, 8, 8, 8 };
        quantize_ok(GGML_TYPE_Q4_0, q40, out, 1, 32);
        ck_assert_uint_eq(le16(out), 0x3c00);
        for (int j = 0; j < 16; j++)
                ck_assert_msg(out[2 + j] == (q40_levels[j] | (q40_levels[j + 16] << 4)), "%s q4_0 byte %d = 0x%02x",
                              name, j, out[2 + j]);

        /* Q4_1: range 0..15 gives d = 1, m = 0; q = trunc(x + 0.5). */
        for (int j = 0; j < 32; j++)
                x[j] = (float) (j % 16) + (j >= 16 ? 0.5f : 0.25f);
        x[0] = 0.0f;
        x[15] = 15.0f;
        x[31] = 15.0f;
        quantize_ok(GGML_TYPE_Q4_1, x, out, 1, 32);
        ck_assert_uint_eq(le16(out), 0x3c00);
        ck_assert_uint_eq(le16(out + 2), 0x0000);
        for (int j = 0; j < 16; j++) {
                int lo = j, hi = j == 15 ? 15 : j + 1;  /* x.25 rounds down, x.5 up */
                ck_assert_msg(out[4 + j] == (lo | (hi << 4)), "%s q4_1 byte %d = 0x%02x, want 0x%02x", name, j,
                              out[4 + j], lo | (hi << 4));
        }

        /* Q5_0: the extreme -16 gives d = 1; q = min(31, trunc(x + 16.5)); fifth bits in qh. */
        for (int j = 0; j < 32; j++)
                x[j] = (float) (j - 16);
        quantize_ok(GGML_TYPE_Q5_0, x, out, 1, 32);
        ck_assert_uint_eq(le16(out), 0x3c00);
        ck_assert_uint_eq(out[2] | (out[3] << 8) | (out[4] << 16) | ((uint32_t) out[5] << 24), 0xffff0000u);
        for (int j = 0; j < 16; j++)
                ck_assert_uint_eq(out[6 + j], j | (j << 4));

        /* Q5_1: range -1..30 gives d = 1, m = -1; q = trunc(x + 1 + 0.5). */
        for (int j = 0; j < 32; j++)
                x[j] = (float) (j - 1);
        quantize_ok(GGML_TYPE_Q5_1, x, out, 1, 32);
        ck_assert_uint_eq(le16(out), 0x3c00);
        ck_assert_uint_eq(le16(out + 2), 0xbc00);
        ck_assert_uint_eq(out[4] | (out[5] << 8) | (out[6] << 16) | ((uint32_t) out[7] << 24), 0xffff0000u);
        for (int j = 0; j < 16; j++)
                ck_assert_uint_eq(out[8 + j], j | (j << 4));
}
END_TEST

/* All-zero blocks: what ggml writes for them (Q4_0/Q5_0 store d = 0 / -8 = -0). */
START_TEST(test_zero_blocks) {
        static const struct {
                uint32_t type;
                uint16_t d;
                size_t qs_off, qs_len;
                uint8_t qs;             /* every quant byte */
        } v[] = {
                { GGML_TYPE_Q8_0, 0x0000, 2, 32, 0x00 }, { GGML_TYPE_Q4_0, 0x8000, 2, 16, 0x88 },
                { GGML_TYPE_Q4_1, 0x0000, 2, 18, 0x00 }, /* m and qs */
                { GGML_TYPE_Q5_0, 0x8000, 2, 20, 0x00 }, /* qh all ones, checked below; qs zero */
                { GGML_TYPE_Q5_1, 0x0000, 2, 22, 0x00 }, { GGML_TYPE_Q4_K, 0x0000, 2, 142, 0x00 },
                { GGML_TYPE_Q5_K, 0x0000, 2, 174, 0x00 }, { GGML_TYPE_Q6_K, 0x0000, 0, 210, 0x00 },
                { GGML_TYPE_Q2_K, 0x0000, 0, 84, 0x00 }, /* d and dmin at the end: zero too */
                { GGML_TYPE_Q3_K, 0x0000, 0, 110, 0x00 }, /* levels left 0 by the search: all zero */
        };
        const char *name;
        float x[512];
        uint8_t out[1024];

        if (!force_impl(_i, &name))
                return;
        memset(x, 0, sizeof(x));
        for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
                size_t bytes = row_bytes(v[i].type, 512), block = bytes / (512 / ggml_type(v[i].type)->block_size);

                quantize_ok(v[i].type, x, out, 1, 512);
                for (size_t b = 0; b < bytes; b += block) {
                        const uint8_t *p = out + b;
                        if (v[i].type != GGML_TYPE_Q6_K && v[i].type != GGML_TYPE_Q2_K && v[i].type != GGML_TYPE_Q3_K)
                                ck_assert_msg(le16(p) == v[i].d, "%s %s: d = 0x%04x", name,
                                              ggml_type(v[i].type)->name, le16(p));
                        for (size_t k = 0; k < v[i].qs_len; k++) {
                                uint8_t want = v[i].qs;
                                if (v[i].type == GGML_TYPE_Q5_0 && k < 4)
                                        want = 0xff;
                                ck_assert_msg(p[v[i].qs_off + k] == want, "%s %s: byte %zu = 0x%02x", name,
                                              ggml_type(v[i].type)->name, v[i].qs_off + k, p[v[i].qs_off + k]);
                        }
                }
        }
}
END_TEST

/* ---- dequantization: the bytes mean what ggml's dequantizers read ---------------------- */

static float f16(const uint8_t *p) {
        uint16_t h = le16(p);
        int e = (h >> 10) & 31, m = h & 1023;
        float v = e == 0 ? ldexpf((float) m, -24) : ldexpf((float) (m | 1024), e - 25);
        return (h & 0x8000) ? -v : v;
}

static void k4_scale(unsigned j, const uint8_t *q, int *ret_sc, int *ret_m) {
        if (j < 4) {
                *ret_sc = q[j] & 63;
                *ret_m = q[j + 4] & 63;
        } else {
                *ret_sc = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
                *ret_m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
        }
}

/* One block of @type at @p to 32 or 256 floats. */
static void dequantize_block(uint32_t type, const uint8_t *p, float *y) {
        switch (type) {
        case GGML_TYPE_Q8_0:
                for (int j = 0; j < 32; j++)
                        y[j] = f16(p) * (float) (int8_t) p[2 + j];
                break;
        case GGML_TYPE_Q4_0:
        case GGML_TYPE_Q4_1:
        case GGML_TYPE_Q5_0:
        case GGML_TYPE_Q5_1: {
                bool has_m = type == GGML_TYPE_Q4_1 || type == GGML_TYPE_Q5_1;
                bool five = type == GGML_TYPE_Q5_0 || type == GGML_TYPE_Q5_1;
                const uint8_t *qs = p + 2 + (has_m ? 2 : 0) + (five ? 4 : 0), *qh = p + 2 + (has_m ? 2 : 0);
                uint32_t h = five ? (uint32_t) qh[0] | qh[1] << 8 | qh[2] << 16 | (uint32_t) qh[3] << 24 : 0;
                for (int j = 0; j < 32; j++) {
                        int q = (j < 16 ? qs[j] & 15 : qs[j - 16] >> 4) | (int) ((h >> j) & 1) << 4;
                        y[j] = has_m ? f16(p) * (float) q + f16(p + 2) : f16(p) * (float) (q - (five ? 16 : 8));
                }
                break;
        }
        case GGML_TYPE_Q4_K:
        case GGML_TYPE_Q5_K: {
                bool five = type == GGML_TYPE_Q5_K;
                const uint8_t *qh = p + 16, *qs = p + 16 + (five ? 32 : 0);
                for (unsigned j = 0; j < 8; j++) {
                        int sc, m;
                        k4_scale(j, p + 4, &sc, &m);
                        for (unsigned i = 0; i < 32; i++) {
                                int q = (j % 2 ? qs[32 * (j / 2) + i] >> 4 : qs[32 * (j / 2) + i] & 15);
                                if (five)
                                        q |= ((qh[i] >> j) & 1) << 4;
                                y[32 * j + i] = f16(p) * (float) sc * (float) q - f16(p + 2) * (float) m;
                        }
                }
                break;
        }
        case GGML_TYPE_Q2_K:
        case GGML_TYPE_Q3_K: {
                /* block_q2_K: scales[16] (scale | min << 4), qs[64], d, dmin;
                 * block_q3_K: hmask[32], qs[64], scales[12] (6-bit, biased by 32), d. */
                bool three = type == GGML_TYPE_Q3_K;
                const uint8_t *qs = p + (three ? 32 : 16);
                float d = f16(p + (three ? 108 : 80));
                for (unsigned e = 0; e < 256; e++) {
                        unsigned j = e / 16, half = e / 128, k = e % 128;
                        int q = (qs[32 * half + k % 32] >> (2 * (k / 32))) & 3;
                        if (three) {
                                const uint8_t *sc = p + 96;
                                int s = (j < 8 ? sc[j] & 15 : sc[j - 8] >> 4) | ((sc[8 + j % 4] >> (2 * (j / 4))) & 3) << 4;
                                q -= (p[e % 32] >> (e / 32)) & 1 ? 0 : 4;
                                y[e] = d * (float) (s - 32) * (float) q;
                        } else {
                                y[e] = d * (float) (p[j] & 15) * (float) q - f16(p + 82) * (float) (p[j] >> 4);
                        }
                }
                break;
        }
        case GGML_TYPE_Q6_K:
                for (unsigned n = 0; n < 2; n++) {
                        const uint8_t *ql = p + 64 * n, *qh = p + 128 + 32 * n;
                        for (unsigned l = 0; l < 32; l++)
                                for (unsigned k = 0; k < 4; k++) {
                                        int q = ((k % 2 ? ql[l + 32] : ql[l]) >> (k / 2 * 4) & 15) |
                                                ((qh[l] >> (2 * k)) & 3) << 4;
                                        unsigned idx = 128 * n + 32 * k + l;
                                        y[idx] = f16(p + 208) * (float) (int8_t) p[192 + idx / 16] * (float) (q - 32);
                                }
                }
                break;
        default:
                ck_abort_msg("no dequantizer for type %u", type);
        }
}

/* Normal data round-trips within each format's resolution (RMS error / RMS value). */
START_TEST(test_dequantize) {
        static const struct {
                uint32_t type;
                double max_rel_rms;
        } v[] = {
                { GGML_TYPE_Q8_0, 0.01 }, { GGML_TYPE_Q4_0, 0.15 }, { GGML_TYPE_Q4_1, 0.12 },
                { GGML_TYPE_Q5_0, 0.075 }, { GGML_TYPE_Q5_1, 0.06 }, { GGML_TYPE_Q4_K, 0.12 },
                { GGML_TYPE_Q5_K, 0.06 }, { GGML_TYPE_Q6_K, 0.03 }, { GGML_TYPE_Q3_K, 0.16 },
                { GGML_TYPE_Q2_K, 0.3 },
        };
        enum { N = 4096 };
        const char *name;
        float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float));
        uint8_t *q = malloc(N * 2);

        ck_assert(x && y && q);
        if (!force_impl(_i, &name))
                goto out;
        for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
                const GgmlType *t = ggml_type(v[i].type);
                double err = 0, sum = 0;

                for (QcDist d = QC_NORMAL; d <= QC_UNIFORM; d++) {
                        qc_fill(x, 1, N, d, 5);
                        quantize_ok(v[i].type, x, q, 1, N);
                        for (size_t b = 0; b < N / t->block_size; b++)
                                dequantize_block(v[i].type, q + b * t->type_size, y + b * t->block_size);
                        for (size_t k = 0; k < N; k++) {
                                err += ((double) y[k] - x[k]) * ((double) y[k] - x[k]);
                                sum += (double) x[k] * x[k];
                        }
                }
                double rel = sqrt(err / sum);
                ck_assert_msg(rel < v[i].max_rel_rms, "%s %s: relative RMS error %.4f, want < %.3f", name, t->name,
                              rel, v[i].max_rel_rms);
        }
out:
        free(x);
        free(y);
        free(q);
}
END_TEST

/* ---- every implementation equals the generic one ---------------------------------------- */

START_TEST(test_same_as_generic) {
        static const size_t lengths_small[] = { 32, 64, 96, 288, 1024 }, lengths_k[] = { 256, 512, 1280 };
        static const size_t row_counts[] = { 1, 3, 7 };
        enum { MAXF = 7 * 1280 + 8 };
        const char *name;
        float *x = malloc((MAXF + 1) * sizeof(float));
        uint8_t *want = malloc(MAXF * 4 + 64), *got = malloc(MAXF * 4 + 64);

        ck_assert(x && want && got);
        if (!force_impl(_i, &name))
                goto out;

        for (size_t t = 0; t < N_TYPES; t++) {
                uint32_t type = all_types[t];
                bool k = ggml_type(type)->block_size == 256;
                const size_t *lengths = k ? lengths_k : lengths_small;
                size_t n_lengths = k ? 3 : 5;

                for (QcDist d = 0; d < _QC_DIST_MAX; d++)
                        for (size_t li = 0; li < n_lengths; li++)
                                for (size_t ri = 0; ri < 3; ri++) {
                                        size_t len = lengths[li], nrows = row_counts[ri], bytes = nrows * row_bytes(type, len);
                                        /* Odd offsets: neither input nor output is aligned. */
                                        float *src = x + (ri % 2);
                                        uint8_t *dst = got + 1 + ri;

                                        qc_fill(src, nrows, len, d, li * 3 + ri + 1);
                                        ck_assert_int_eq(kernels_force("generic"), 0);
                                        quantize_ok(type, src, want, nrows, len);
                                        ck_assert_int_eq(kernels_force(name), 0);
                                        memset(got, 0x5a, bytes + 8);
                                        quantize_ok(type, src, dst, nrows, len);
                                        ck_assert_msg(memcmp(dst, want, bytes) == 0, "%s %s %s %zu x %zu differs from generic",
                                                      name, ggml_type(type)->name, qc_dist_names[d], nrows, len);
                                        ck_assert_msg(got[0] == 0x5a && dst[bytes] == 0x5a, "%s %s: wrote outside its rows",
                                                      name, ggml_type(type)->name);
                                }
        }
out:
        free(x);
        free(want);
        free(got);
}
END_TEST

/* Float bits, so that NaN and -0.0 compare too. */
static bool same_bits(const float *a, const float *b, size_t n) {
        return memcmp(a, b, n * sizeof(float)) == 0;
}

/* Every dequantizer equals the generic one on random bytes (any scale, NaN and infinity too). */
START_TEST(test_dequantize_same_as_generic) {
        enum { NBLOCKS = 37 };
        const char *name;
        uint8_t *q = malloc(NBLOCKS * 256 + 1);
        float *want = malloc(NBLOCKS * 256 * sizeof(float)), *got = malloc((NBLOCKS * 256 + 2) * sizeof(float));

        ck_assert(q && want && got);
        if (!force_impl(_i, &name))
                goto out;
        for (size_t t = 0; t < N_TYPES; t++) {
                const GgmlType *gt = ggml_type(all_types[t]);
                for (unsigned seed = 1; seed <= 4; seed++) {
                        QcRng r = { seed * UINT64_C(0x9e3779b97f4a7c15) + t };
                        size_t n = NBLOCKS * gt->block_size;
                        uint8_t *src = q + (seed % 2);          /* unaligned half the time */
                        for (size_t i = 0; i < NBLOCKS * gt->type_size; i++)
                                src[i] = (uint8_t) qc_next(&r);
                        ck_assert_int_eq(kernels_force("generic"), 0);
                        dequantize_blocks(all_types[t], src, want, NBLOCKS);
                        ck_assert_int_eq(kernels_force(name), 0);
                        got[n + 1] = 12345.0f;
                        dequantize_blocks(all_types[t], src, got + 1, NBLOCKS);
                        ck_assert_msg(same_bits(got + 1, want, n), "%s: dequantized %s differs from generic", name,
                                      gt->name);
                        ck_assert(got[n + 1] == 12345.0f);
                }
        }
out:
        free(q);
        free(want);
        free(got);
}
END_TEST

/* The rank product equals the generic one for every length, rank and distribution. */
START_TEST(test_product_same_as_generic) {
        static const size_t lengths[] = { 1, 3, 4, 7, 8, 15, 16, 31, 32, 33, 100, 2048 };
        static const size_t ranks[] = { 1, 2, 16, 33 };
        enum { MAXN = 2048 + 3, MAXR = 33 };
        const char *name;
        float *p = malloc((MAXR + 1) * sizeof(float)), *q = malloc((MAXR * MAXN + 1) * sizeof(float));
        float *want = malloc(MAXN * sizeof(float)), *got = malloc((MAXN + 2) * sizeof(float));

        ck_assert(p && q && want && got);
        if (!force_impl(_i, &name))
                goto out;
        for (QcDist d = 0; d < _QC_DIST_MAX; d++)
                for (size_t li = 0; li < sizeof(lengths) / sizeof(lengths[0]); li++)
                        for (size_t ri = 0; ri < sizeof(ranks) / sizeof(ranks[0]); ri++) {
                                size_t n = lengths[li], rank = ranks[ri], stride = n + (ri % 3);
                                const float *pp = p + (li % 2), *qq = q + (ri % 2);
                                qc_fill(p, 1, MAXR + 1, (d + 1) % _QC_DIST_MAX, li * 7 + ri + 1);
                                qc_fill(q, 1, MAXR * MAXN + 1, d, li * 5 + ri + 2);
                                ck_assert_int_eq(kernels_force("generic"), 0);
                                rank_product(pp, qq, stride, rank, want, n);
                                ck_assert_int_eq(kernels_force(name), 0);
                                got[n + 1] = 12345.0f;
                                rank_product(pp, qq, stride, rank, got + 1, n);
                                ck_assert_msg(same_bits(got + 1, want, n), "%s: rank product, %s, %zu elements, rank %zu, "
                                              "differs from generic", name, qc_dist_names[d], n, rank);
                                ck_assert(got[n + 1] == 12345.0f);
                        }
        /*
         * The definition, 32 equal columns (the SIMD paths' width): the sums in k order, so
         * 1 + 2^-24 rounds back to 1 four times (2^-22 first would not); each product rounded
         * before its sum, so -1 + (1 + 2^-12)² is 2^-11 (a fused multiply-add keeps 2^-24 more).
         */
        static const struct {
                size_t rank;
                float p[5], q[5], want;
        } defs[] = {
                { 5, { 1.0f, 0x1p-24f, 0x1p-24f, 0x1p-24f, 0x1p-24f }, { 1.0f, 1.0f, 1.0f, 1.0f, 1.0f }, 1.0f },
                { 2, { -1.0f, 1.0f + 0x1p-12f }, { 1.0f, 1.0f + 0x1p-12f }, 0x1p-11f },
        };
        for (size_t c = 0; c < sizeof(defs) / sizeof(defs[0]); c++) {
                for (size_t k = 0; k < defs[c].rank; k++)
                        for (size_t i = 0; i < 32; i++)
                                q[k * 32 + i] = defs[c].q[k];
                rank_product(defs[c].p, q, 32, defs[c].rank, got, 32);
                for (size_t i = 0; i < 32; i++)
                        ck_assert_msg(got[i] == defs[c].want, "%s: rank product case %zu element %zu: %a, want %a", name,
                                      c, i, (double) got[i], (double) defs[c].want);
        }
out:
        free(p);
        free(q);
        free(want);
        free(got);
}
END_TEST

/*
 * An importance matrix does what it is for: with 1/8 of the columns 10,000 times as important,
 * the importance-weighted squared error of quantize_rows_weighted() is below quantize_rows()'s,
 * for every type that takes one; the others, and no imatrix at all, give quantize_rows()'s bytes.
 */
START_TEST(test_weighted) {
        enum { ROWS = 8, N = 1024 };
        float *x = malloc(ROWS * N * sizeof(float)), *y = malloc(N * sizeof(float)), w[N];
        uint8_t *plain = malloc(ROWS * N * 4), *weighted = malloc(ROWS * N * 4);

        ck_assert(x && y && plain && weighted);
        qc_fill(x, ROWS, N, QC_WEIGHTS, 9);
        for (size_t i = 0; i < N; i++)
                w[i] = i % 8 == 3 ? 100.f : 0.01f;
        for (size_t t = 0; t < N_TYPES; t++) {
                uint32_t type = all_types[t];
                const GgmlType *gt = ggml_type(type);
                size_t bytes = quantize_ok(type, x, plain, ROWS, N);

                ck_assert_uint_eq(quantize_rows_weighted(type, x, weighted, ROWS, N, w), bytes);
                if (!quant_weighted_supported(type)) {
                        ck_assert_msg(memcmp(plain, weighted, bytes) == 0, "%s: an imatrix changed the bytes", gt->name);
                        continue;
                }
                ck_assert_uint_eq(quantize_rows_weighted(type, x, weighted, ROWS, N, NULL), bytes);
                ck_assert_msg(memcmp(plain, weighted, bytes) == 0, "%s: no imatrix, other bytes", gt->name);
                (void) quantize_rows_weighted(type, x, weighted, ROWS, N, w);
                double err_plain = 0, err_weighted = 0;
                for (size_t r = 0; r < ROWS; r++)
                        for (int k = 0; k < 2; k++) {
                                const uint8_t *q = (k ? weighted : plain) + r * (bytes / ROWS);
                                for (size_t b = 0; b < N / gt->block_size; b++)
                                        dequantize_block(type, q + b * gt->type_size, y + b * gt->block_size);
                                for (size_t i = 0; i < N; i++) {
                                        double d = (double) y[i] - x[r * N + i];
                                        *(k ? &err_weighted : &err_plain) += w[i] * d * d;
                                }
                        }
                ck_assert_msg(err_weighted < err_plain, "%s: weighted error %g with the imatrix, %g without", gt->name,
                              err_weighted, err_plain);
        }
        free(x);
        free(y);
        free(plain);
        free(weighted);
}
END_TEST

/*
 * Every implementation's importance-weighted K-quants (SIMD for Q4_K, Q5_K, Q6_K) equal the
 * portable ones (the generic implementation) on every row distribution, with every kind of
 * importance row, for rows of 1 to 5 super-blocks and 1 to 7 rows, nothing aligned.
 */
START_TEST(test_weighted_same_as_generic) {
        static const uint32_t types[] = { GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K };
        static const size_t lengths[] = { 256, 512, 1280 }, row_counts[] = { 1, 3, 7 };
        enum { MAXF = 7 * 1280 + 8 };
        const char *name;
        float *x = malloc((MAXF + 1) * sizeof(float)), *w = malloc((1280 + 1) * sizeof(float));
        uint8_t *want = malloc(MAXF + 64), *got = malloc(MAXF + 64);

        ck_assert(x && w && want && got);
        if (!force_impl(_i, &name))
                goto out;
        for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++)
                for (QcDist d = 0; d < _QC_DIST_MAX; d++)
                        for (QcImportance k = 0; k < _QC_IMP_MAX; k++)
                                for (size_t li = 0; li < 3; li++) {
                                        size_t len = lengths[li], nrows = row_counts[(d + k + li) % 3];
                                        size_t bytes = nrows * row_bytes(types[t], len);
                                        float *src = x + (li % 2), *imp = w + (k % 2);
                                        uint8_t *dst = got + 1 + li;

                                        qc_fill(src, nrows, len, d, 7 * li + k + 1);
                                        qc_fill_importance(imp, len, k, 5 * li + d + 1);
                                        ck_assert_int_eq(kernels_force("generic"), 0);
                                        ck_assert_uint_eq(quantize_rows_weighted(types[t], src, want, nrows, len, imp),
                                                          bytes);
                                        ck_assert_int_eq(kernels_force(name), 0);
                                        memset(got, 0x5a, bytes + 8);
                                        ck_assert_uint_eq(quantize_rows_weighted(types[t], src, dst, nrows, len, imp),
                                                          bytes);
                                        ck_assert_msg(memcmp(dst, want, bytes) == 0,
                                                      "%s %s with an imatrix: %s rows, %s importance, %zu x %zu "
                                                      "differ from generic", name, ggml_type(types[t])->name,
                                                      qc_dist_names[d], qc_importance_names[k], nrows, len);
                                        ck_assert_msg(got[0] == 0x5a && dst[bytes] == 0x5a, "%s %s: wrote outside "
                                                      "its rows", name, ggml_type(types[t])->name);
                                }
out:
        free(x);
        free(w);
        free(want);
        free(got);
}
END_TEST

/* nrows * n_per_row == 0 writes nothing. */
START_TEST(test_empty) {
        uint8_t out[4] = { 0x5a, 0x5a, 0x5a, 0x5a };
        float x = 1.0f;

        for (size_t t = 0; t < N_TYPES; t++) {
                ck_assert_uint_eq(quantize_rows(all_types[t], &x, out, 0, ggml_type(all_types[t])->block_size), 0);
                ck_assert_uint_eq(quantize_rows(all_types[t], &x, out, 3, 0), 0);
        }
        ck_assert_uint_eq(out[0], 0x5a);
}
END_TEST

static Suite *quant_suite(void) {
        Suite *s = suite_create("quant");
        TCase *tc = tcase_create("kernels");
        int n = (int) n_impls();

        tcase_set_timeout(tc, 300);     /* the generic K-quants under qemu-user are slow */
        tcase_add_test(tc, test_supported);
        tcase_add_loop_test(tc, test_float_vectors, 0, n);
        tcase_add_loop_test(tc, test_block_vectors, 0, n);
        tcase_add_loop_test(tc, test_zero_blocks, 0, n);
        tcase_add_loop_test(tc, test_dequantize, 0, n);
        tcase_add_loop_test(tc, test_same_as_generic, 0, n);
        tcase_add_loop_test(tc, test_dequantize_same_as_generic, 0, n);
        tcase_add_loop_test(tc, test_product_same_as_generic, 0, n);
        tcase_add_test(tc, test_weighted);
        tcase_add_loop_test(tc, test_weighted_same_as_generic, 0, n);
        tcase_add_test(tc, test_empty);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(quant_suite)
