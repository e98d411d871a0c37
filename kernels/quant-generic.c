/* SPDX-License-Identifier: MIT */
/*
 * Portable quantizers for the 32-element block types and the float types: the reference
 * every SIMD implementation must match bit for bit. Each follows ggml's quantize_row_*_ref
 * step by step (ggml-quants.c), including where its float evaluation order and its 8-bit
 * casts decide the result.
 */

#include <float.h>

#include "quant-impl.h"

#define MIN(a, b) ((a) < (b) ? (a) : (b))

/* The value of largest magnitude; among equal magnitudes the first one, keeping its sign. */
static float signed_absmax(const float *x, float *ret_amax) {
        float amax = 0.0f, max = 0.0f;

        for (unsigned j = 0; j < QK_SMALL; j++)
                if (amax < fabsf(x[j])) {
                        amax = fabsf(x[j]);
                        max = x[j];
                }
        *ret_amax = amax;
        return max;
}

/* Minimum and maximum as ggml's strict comparisons find them: the first of equal values (+0 / -0). */
static void min_max(const float *x, float *ret_min, float *ret_max) {
        float min = FLT_MAX, max = -FLT_MAX;

        for (unsigned j = 0; j < QK_SMALL; j++) {
                if (x[j] < min)
                        min = x[j];
                if (x[j] > max)
                        max = x[j];
        }
        *ret_min = min;
        *ret_max = max;
}

void quant_q4_0_generic(const float *src, uint8_t *dst, size_t nblocks) {
        for (size_t b = 0; b < nblocks; b++, src += QK_SMALL, dst += Q4_0_BYTES) {
                float amax, max = signed_absmax(src, &amax);
                float d = max / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;

                quant_store_le16(dst, quant_fp16(d));
                for (unsigned j = 0; j < QK_SMALL / 2; j++) {
                        uint8_t lo = (uint8_t) MIN(15, quant_cvtt_i8(src[j] * id + 8.5f));
                        uint8_t hi = (uint8_t) MIN(15, quant_cvtt_i8(src[j + 16] * id + 8.5f));
                        dst[2 + j] = (uint8_t) (lo | (hi << 4));
                }
        }
}

void quant_q4_1_generic(const float *src, uint8_t *dst, size_t nblocks) {
        for (size_t b = 0; b < nblocks; b++, src += QK_SMALL, dst += Q4_1_BYTES) {
                float min, max;

                min_max(src, &min, &max);
                float d = (max - min) / 15.0f, id = d != 0.0f ? 1.0f / d : 0.0f;

                quant_store_le16(dst, quant_fp16(d));
                quant_store_le16(dst + 2, quant_fp16(min));
                for (unsigned j = 0; j < QK_SMALL / 2; j++) {
                        uint8_t lo = (uint8_t) MIN(15, quant_cvtt_i8((src[j] - min) * id + 0.5f));
                        uint8_t hi = (uint8_t) MIN(15, quant_cvtt_i8((src[j + 16] - min) * id + 0.5f));
                        dst[4 + j] = (uint8_t) (lo | (hi << 4));
                }
        }
}

/* Q5 blocks: low nibbles in qs, the fifth bits in a 32-bit little-endian qh. */
static void store_q5(uint8_t *qh_out, uint8_t *qs, const uint8_t q[QK_SMALL]) {
        uint32_t qh = 0;

        for (unsigned j = 0; j < QK_SMALL / 2; j++) {
                qs[j] = (uint8_t) ((q[j] & 0x0f) | ((q[j + 16] & 0x0f) << 4));
                qh |= (uint32_t) ((q[j] & 0x10u) >> 4) << j;
                qh |= (uint32_t) ((q[j + 16] & 0x10u) >> 4) << (j + 16);
        }
        for (unsigned i = 0; i < 4; i++)
                qh_out[i] = (uint8_t) (qh >> (8 * i));
}

void quant_q5_0_generic(const float *src, uint8_t *dst, size_t nblocks) {
        for (size_t b = 0; b < nblocks; b++, src += QK_SMALL, dst += Q5_0_BYTES) {
                float amax, max = signed_absmax(src, &amax);
                float d = max / -16.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
                uint8_t q[QK_SMALL];

                quant_store_le16(dst, quant_fp16(d));
                for (unsigned j = 0; j < QK_SMALL; j++)
                        q[j] = (uint8_t) MIN(31, quant_cvtt_i8(src[j] * id + 16.5f));
                store_q5(dst + 2, dst + 6, q);
        }
}

void quant_q5_1_generic(const float *src, uint8_t *dst, size_t nblocks) {
        for (size_t b = 0; b < nblocks; b++, src += QK_SMALL, dst += Q5_1_BYTES) {
                float min, max;
                uint8_t q[QK_SMALL];

                min_max(src, &min, &max);
                float d = (max - min) / 31.0f, id = d != 0.0f ? 1.0f / d : 0.0f;

                quant_store_le16(dst, quant_fp16(d));
                quant_store_le16(dst + 2, quant_fp16(min));
                for (unsigned j = 0; j < QK_SMALL; j++)
                        q[j] = (uint8_t) quant_cvtt_i8((src[j] - min) * id + 0.5f);
                store_q5(dst + 4, dst + 8, q);
        }
}

void quant_q8_0_generic(const float *src, uint8_t *dst, size_t nblocks) {
        for (size_t b = 0; b < nblocks; b++, src += QK_SMALL, dst += Q8_0_BYTES) {
                float amax = 0.0f;

                for (unsigned j = 0; j < QK_SMALL; j++)
                        if (fabsf(src[j]) > amax)
                                amax = fabsf(src[j]);
                float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;

                quant_store_le16(dst, quant_fp16(d));
                for (unsigned j = 0; j < QK_SMALL; j++)
                        dst[2 + j] = (uint8_t) quant_cvtt_i8(quant_roundf(src[j] * id));
        }
}

void quant_f16_generic(const float *src, uint8_t *dst, size_t n) {
        for (size_t i = 0; i < n; i++)
                quant_store_le16(dst + 2 * i, quant_fp16(src[i]));
}

void quant_bf16_generic(const float *src, uint8_t *dst, size_t n) {
        for (size_t i = 0; i < n; i++)
                quant_store_le16(dst + 2 * i, quant_bf16(src[i]));
}

const QuantKernels quant_kernels_generic = {
        .fn = {
                [QUANT_Q4_0] = quant_q4_0_generic,
                [QUANT_Q4_1] = quant_q4_1_generic,
                [QUANT_Q5_0] = quant_q5_0_generic,
                [QUANT_Q5_1] = quant_q5_1_generic,
                [QUANT_Q8_0] = quant_q8_0_generic,
                [QUANT_Q2_K] = quant_q2_k_generic,
                [QUANT_Q3_K] = quant_q3_k_generic,
                [QUANT_Q4_K] = quant_q4_k_generic,
                [QUANT_Q5_K] = quant_q5_k_generic,
                [QUANT_Q6_K] = quant_q6_k_generic,
                [QUANT_F16] = quant_f16_generic,
                [QUANT_BF16] = quant_bf16_generic,
        },
};
