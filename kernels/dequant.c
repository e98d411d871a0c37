/* SPDX-License-Identifier: MIT */
/*
 * Portable dequantizers: ggml's dequantize_row_* step by step (ggml-quants.c), each value's
 * operations in its order, and the dispatch to the SIMD ones (predict-*.c) where there are.
 * Compiled with -ffp-contract=off (see dequant.h).
 */

#include "dequant.h"
#include "quant-impl.h"

static float h2f(const uint8_t *p) {
        return quant_fp16_to_f32(quant_load_le16(p));
}

static void q4_0(const uint8_t *x, float *y, size_t nblocks) {
        for (size_t b = 0; b < nblocks; b++, x += Q4_0_BYTES, y += QK_SMALL) {
                const float d = h2f(x);
                for (unsigned j = 0; j < QK_SMALL / 2; j++) {
                        y[j] = (float) ((x[2 + j] & 0x0f) - 8) * d;
                        y[j + 16] = (float) ((x[2 + j] >> 4) - 8) * d;
                }
        }
}

static void q4_1(const uint8_t *x, float *y, size_t nblocks) {
        for (size_t b = 0; b < nblocks; b++, x += Q4_1_BYTES, y += QK_SMALL) {
                const float d = h2f(x), m = h2f(x + 2);
                for (unsigned j = 0; j < QK_SMALL / 2; j++) {
                        float lo = (float) (x[4 + j] & 0x0f) * d, hi = (float) (x[4 + j] >> 4) * d;
                        y[j] = lo + m;
                        y[j + 16] = hi + m;
                }
        }
}

static uint32_t le32(const uint8_t *p) {
        return (uint32_t) p[0] | (uint32_t) p[1] << 8 | (uint32_t) p[2] << 16 | (uint32_t) p[3] << 24;
}

static void q5_0(const uint8_t *x, float *y, size_t nblocks) {
        for (size_t b = 0; b < nblocks; b++, x += Q5_0_BYTES, y += QK_SMALL) {
                const float d = h2f(x);
                const uint32_t qh = le32(x + 2);
                for (unsigned j = 0; j < QK_SMALL / 2; j++) {
                        int h0 = (int) (((qh >> j) << 4) & 0x10), h1 = (int) ((qh >> (j + 12)) & 0x10);
                        y[j] = (float) (((x[6 + j] & 0x0f) | h0) - 16) * d;
                        y[j + 16] = (float) (((x[6 + j] >> 4) | h1) - 16) * d;
                }
        }
}

static void q5_1(const uint8_t *x, float *y, size_t nblocks) {
        for (size_t b = 0; b < nblocks; b++, x += Q5_1_BYTES, y += QK_SMALL) {
                const float d = h2f(x), m = h2f(x + 2);
                const uint32_t qh = le32(x + 4);
                for (unsigned j = 0; j < QK_SMALL / 2; j++) {
                        int h0 = (int) (((qh >> j) << 4) & 0x10), h1 = (int) ((qh >> (j + 12)) & 0x10);
                        float lo = (float) ((x[8 + j] & 0x0f) | h0) * d, hi = (float) ((x[8 + j] >> 4) | h1) * d;
                        y[j] = lo + m;
                        y[j + 16] = hi + m;
                }
        }
}

static void q8_0(const uint8_t *x, float *y, size_t nblocks) {
        for (size_t b = 0; b < nblocks; b++, x += Q8_0_BYTES, y += QK_SMALL) {
                const float d = h2f(x);
                for (unsigned j = 0; j < QK_SMALL; j++)
                        y[j] = (float) (int8_t) x[2 + j] * d;
        }
}

/* Q2_K and Q3_K's 2-bit level of element @e: of each 128, byte e % 32 at bits 2·(e / 32). */
static unsigned level2(const uint8_t qs[64], unsigned e) {
        return (qs[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3;
}

/* Q2_K: 16 sub-blocks of 16, each a 4-bit scale and minimum. */
static void q2_k(const uint8_t *x, float *y, size_t nblocks) {
        for (size_t b = 0; b < nblocks; b++, x += Q2_K_BYTES, y += QK_K) {
                const float d = h2f(x + 80), dmin = h2f(x + 82);
                for (unsigned j = 0; j < 16; j++) {
                        const float dl = d * (float) (x[j] & 0x0f), ml = dmin * (float) (x[j] >> 4);
                        for (unsigned i = 0; i < 16; i++) {
                                float v = dl * (float) level2(x + 16, 16 * j + i);
                                y[16 * j + i] = v - ml;
                        }
                }
        }
}

/* Q3_K: 16 sub-blocks of 16, each a 6-bit scale − 32; levels −4..3: two bits as Q2_K's, the
 * third (set: no −4) in hmask, element e at byte e % 32, bit e / 32. */
static void q3_k(const uint8_t *x, float *y, size_t nblocks) {
        for (size_t b = 0; b < nblocks; b++, x += Q3_K_BYTES, y += QK_K) {
                const uint8_t *hmask = x, *qs = x + 32, *sc = x + 96;
                const float d = h2f(x + 108);
                for (unsigned j = 0; j < 16; j++) {
                        int s = (j < 8 ? sc[j] & 0x0f : sc[j - 8] >> 4) | (((sc[8 + j % 4] >> (2 * (j / 4))) & 3) << 4);
                        const float dl = d * (float) (s - 32);
                        for (unsigned i = 0, e = 16 * j; i < 16; i++, e++) {
                                int q = (int) level2(qs, e) - (((hmask[e % 32] >> (e / 32)) & 1) ? 0 : 4);
                                y[e] = dl * (float) q;
                        }
                }
        }
}

/* ggml's get_scale_min_k4(): sub-block @j's 6-bit scale and min from the 12 packed bytes. */
static void scale_min_k4(unsigned j, const uint8_t *q, unsigned *sc, unsigned *m) {
        if (j < 4) {
                *sc = q[j] & 63;
                *m = q[j + 4] & 63;
        } else {
                *sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
                *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
        }
}

/* Q4_K (@qh NULL) and Q5_K: the super-block's four pairs of 32-element sub-blocks. */
static void k4_block(const uint8_t *hdr, const uint8_t *qh, const uint8_t *ql, float *y) {
        const float d = h2f(hdr), dmin = h2f(hdr + 2);
        const uint8_t *scales = hdr + 4;
        unsigned sc, m, u1 = 1, u2 = 2;

        for (unsigned j = 0, is = 0; j < QK_K; j += 64, is += 2, ql += 32, u1 <<= 2, u2 <<= 2) {
                scale_min_k4(is, scales, &sc, &m);
                const float d1 = d * (float) sc, m1 = dmin * (float) m;
                scale_min_k4(is + 1, scales, &sc, &m);
                const float d2 = d * (float) sc, m2 = dmin * (float) m;
                for (unsigned l = 0; l < 32; l++) {
                        unsigned q = (ql[l] & 0x0f) + (qh && (qh[l] & u1) ? 16 : 0);
                        float v = d1 * (float) q;
                        *y++ = v - m1;
                }
                for (unsigned l = 0; l < 32; l++) {
                        unsigned q = (ql[l] >> 4) + (qh && (qh[l] & u2) ? 16 : 0);
                        float v = d2 * (float) q;
                        *y++ = v - m2;
                }
        }
}

static void q4_k(const uint8_t *x, float *y, size_t nblocks) {
        for (size_t b = 0; b < nblocks; b++, x += Q4_K_BYTES, y += QK_K)
                k4_block(x, NULL, x + 16, y);
}

static void q5_k(const uint8_t *x, float *y, size_t nblocks) {
        for (size_t b = 0; b < nblocks; b++, x += Q5_K_BYTES, y += QK_K)
                k4_block(x, x + 16, x + 48, y);
}

static void q6_k(const uint8_t *x, float *y, size_t nblocks) {
        for (size_t b = 0; b < nblocks; b++, x += Q6_K_BYTES) {
                const uint8_t *ql = x, *qh = x + 128;
                const int8_t *sc = (const int8_t *) (x + 192);
                const float d = h2f(x + 208);
                for (unsigned n = 0; n < QK_K; n += 128, y += 128, ql += 64, qh += 32, sc += 8)
                        for (unsigned l = 0; l < 32; l++) {
                                unsigned is = l / 16;
                                int q1 = (int) ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
                                int q2 = (int) ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
                                int q3 = (int) ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                                int q4 = (int) ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                                float s1 = d * (float) sc[is], s2 = d * (float) sc[is + 2];
                                float s3 = d * (float) sc[is + 4], s4 = d * (float) sc[is + 6];
                                y[l] = s1 * (float) q1;
                                y[l + 32] = s2 * (float) q2;
                                y[l + 64] = s3 * (float) q3;
                                y[l + 96] = s4 * (float) q4;
                        }
        }
}

bool dequant_supported(uint32_t type) {
        switch (type) {
        case TYPE_F32: case TYPE_F16: case TYPE_BF16: case TYPE_Q4_0: case TYPE_Q4_1: case TYPE_Q5_0:
        case TYPE_Q5_1: case TYPE_Q8_0: case TYPE_Q2_K: case TYPE_Q3_K: case TYPE_Q4_K: case TYPE_Q5_K:
        case TYPE_Q6_K:
                return true;
        default:
                return false;
        }
}

/* The dispatched implementation's dequantizer of @kind, else the generic one above. */
static DequantBlocksFn pick(QuantKind kind, DequantBlocksFn generic) {
        DequantBlocksFn fn = quant_dispatch()->dequant[kind];
        return fn ? fn : generic;
}

void dequantize_blocks(uint32_t type, const void *src, float *dst, size_t nblocks) {
        const uint8_t *x = src;

        switch (type) {
        case TYPE_F32:
                memcpy(dst, src, nblocks * sizeof(float));
                break;
        case TYPE_F16:
                for (size_t i = 0; i < nblocks; i++)
                        dst[i] = h2f(x + 2 * i);
                break;
        case TYPE_BF16:
                for (size_t i = 0; i < nblocks; i++)
                        dst[i] = quant_f32_from_bits((uint32_t) quant_load_le16(x + 2 * i) << 16);
                break;
        case TYPE_Q4_0: pick(QUANT_Q4_0, q4_0)(x, dst, nblocks); break;
        case TYPE_Q4_1: pick(QUANT_Q4_1, q4_1)(x, dst, nblocks); break;
        case TYPE_Q5_0: pick(QUANT_Q5_0, q5_0)(x, dst, nblocks); break;
        case TYPE_Q5_1: pick(QUANT_Q5_1, q5_1)(x, dst, nblocks); break;
        case TYPE_Q8_0: pick(QUANT_Q8_0, q8_0)(x, dst, nblocks); break;
        case TYPE_Q2_K: pick(QUANT_Q2_K, q2_k)(x, dst, nblocks); break;
        case TYPE_Q3_K: pick(QUANT_Q3_K, q3_k)(x, dst, nblocks); break;
        case TYPE_Q4_K: pick(QUANT_Q4_K, q4_k)(x, dst, nblocks); break;
        case TYPE_Q5_K: pick(QUANT_Q5_K, q5_k)(x, dst, nblocks); break;
        case TYPE_Q6_K: pick(QUANT_Q6_K, q6_k)(x, dst, nblocks); break;
        default:
                break;
        }
}
