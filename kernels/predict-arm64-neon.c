/* SPDX-License-Identifier: MIT */
/*
 * The lora prediction's dequantizers and rank product with NEON (dequant.h, product.h). Build
 * with -march=armv8-a -ffp-contract=off: vmulq then vaddq stay two roundings, never an FMLA.
 */

#include <arm_neon.h>

#include "quant-impl.h"

/* y[0..8) = d·q for eight signed levels. */
static inline void store_levels8(float *y, int8x8_t q, float32x4_t d) {
        const int16x8_t w = vmovl_s8(q);
        vst1q_f32(y, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(w))), d));
        vst1q_f32(y + 4, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_high_s16(w))), d));
}

void dequant_q8_0_neon(const uint8_t *x, float *y, size_t nblocks) {
        for (size_t b = 0; b < nblocks; b++, x += Q8_0_BYTES, y += QK_SMALL) {
                const float32x4_t d = vdupq_n_f32(quant_fp16_to_f32(quant_load_le16(x)));
                for (unsigned j = 0; j < QK_SMALL; j += 8)
                        store_levels8(y + j, vld1_s8((const int8_t *) (x + 2 + j)), d);
        }
}

/* y = d·(q − 8): the low nibbles are elements 0..15, the high ones 16..31. */
void dequant_q4_0_neon(const uint8_t *x, float *y, size_t nblocks) {
        const uint8x16_t mask = vdupq_n_u8(0x0f);
        const int8x16_t eight = vdupq_n_s8(8);

        for (size_t b = 0; b < nblocks; b++, x += Q4_0_BYTES, y += QK_SMALL) {
                const float32x4_t d = vdupq_n_f32(quant_fp16_to_f32(quant_load_le16(x)));
                const uint8x16_t qs = vld1q_u8(x + 2);
                const int8x16_t lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(qs, mask)), eight);
                const int8x16_t hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(qs, 4)), eight);
                store_levels8(y, vget_low_s8(lo), d);
                store_levels8(y + 8, vget_high_s8(lo), d);
                store_levels8(y + 16, vget_low_s8(hi), d);
                store_levels8(y + 24, vget_high_s8(hi), d);
        }
}

/* 16 elements at a time, their sums in four registers through all k; then 4; the rest generic. */
void rank_product_neon(const float *p, const float *q, size_t stride, size_t rank, float *acc, size_t n) {
        size_t i = 0;

        for (; i + 16 <= n; i += 16) {
                float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0, a2 = a0, a3 = a0;
                for (size_t k = 0; k < rank; k++) {
                        const float32x4_t pk = vdupq_n_f32(p[k]);
                        const float *qk = q + k * stride + i;
                        a0 = vaddq_f32(a0, vmulq_f32(pk, vld1q_f32(qk)));
                        a1 = vaddq_f32(a1, vmulq_f32(pk, vld1q_f32(qk + 4)));
                        a2 = vaddq_f32(a2, vmulq_f32(pk, vld1q_f32(qk + 8)));
                        a3 = vaddq_f32(a3, vmulq_f32(pk, vld1q_f32(qk + 12)));
                }
                vst1q_f32(acc + i, a0);
                vst1q_f32(acc + i + 4, a1);
                vst1q_f32(acc + i + 8, a2);
                vst1q_f32(acc + i + 12, a3);
        }
        for (; i + 4 <= n; i += 4) {
                float32x4_t a = vdupq_n_f32(0.0f);
                for (size_t k = 0; k < rank; k++)
                        a = vaddq_f32(a, vmulq_f32(vdupq_n_f32(p[k]), vld1q_f32(q + k * stride + i)));
                vst1q_f32(acc + i, a);
        }
        rank_product_generic(p, q + i, stride, rank, acc + i, n - i);
}
