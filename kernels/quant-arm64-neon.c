/* SPDX-License-Identifier: MIT */
/*
 * Quantizers with NEON: the 32-element block types one block at a time (eight vectors), the
 * float types four values at a time. Build with -march=armv8-a -ffp-contract=off.
 * Bit-identical to quant-generic.c, which models x86's conversions: NEON's fcvtzs saturates
 * where cvttss2si gives INT32_MIN, so positive overflow is mapped to a low byte of 0 (the
 * only bits any format keeps); NaN and negative overflow already give 0 there.
 */

#include <arm_neon.h>

#include "quant-impl.h"

/* The low byte of x86's truncating conversion of each lane, as int32 (sign-extended from 8 bits). */
static inline int32x4_t cvtt_low_i8(float32x4_t x) {
        int32x4_t c = vcvtq_s32_f32(x);
        c = vbslq_s32(vcgeq_f32(x, vdupq_n_f32(2147483648.0f)), vdupq_n_s32(0), c);
        return vshrq_n_s32(vshlq_n_s32(c, 24), 24);
}

/* 8 int32 values to 8 bytes, keeping the low 8 bits of each. */
static inline uint8x8_t low_bytes8(int32x4_t a, int32x4_t b) {
        return vreinterpret_u8_s8(vmovn_s16(vcombine_s16(vmovn_s32(a), vmovn_s32(b))));
}

static inline void load_block(const float *x, float32x4_t v[8]) {
        for (unsigned k = 0; k < 8; k++)
                v[k] = vld1q_f32(x + 4 * k);
}

static inline float block_amax(const float32x4_t v[8]) {
        float32x4_t a = vabsq_f32(v[0]);
        for (unsigned k = 1; k < 8; k++)
                a = vmaxq_f32(a, vabsq_f32(v[k]));
        return vmaxvq_f32(a);
}

/* The first value of largest magnitude, with its sign (+0 when all are zero). */
static inline float signed_absmax(const float *x, const float32x4_t v[8]) {
        float amax = block_amax(v);

        if (amax == 0.0f)
                return 0.0f;
        for (unsigned j = 0;; j++)
                if (fabsf(x[j]) == amax)
                        return x[j];
}

/* Minimum and maximum; a zero result is the block's first zero, as sequential strict compares pick it. */
static inline void min_max(const float *x, const float32x4_t v[8], float *ret_min, float *ret_max) {
        float32x4_t mn = v[0], mx = v[0];

        for (unsigned k = 1; k < 8; k++) {
                mn = vminq_f32(mn, v[k]);
                mx = vmaxq_f32(mx, v[k]);
        }
        float min = vminvq_f32(mn), max = vmaxvq_f32(mx);
        if (min == 0.0f || max == 0.0f) {
                unsigned j = 0;
                while (x[j] != 0.0f)
                        j++;
                if (min == 0.0f)
                        min = x[j];
                if (max == 0.0f)
                        max = x[j];
        }
        *ret_min = min;
        *ret_max = max;
}

static void q8_0_neon(const float *src, uint8_t *dst, size_t nblocks) {
        for (size_t b = 0; b < nblocks; b++, src += QK_SMALL, dst += Q8_0_BYTES) {
                float32x4_t v[8];

                load_block(src, v);
                float d = block_amax(v) / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
                quant_store_le16(dst, quant_fp16(d));
                for (unsigned k = 0; k < 8; k += 2) {
                        /* vrndaq: round half away from zero, as roundf() does. */
                        int32x4_t c0 = cvtt_low_i8(vrndaq_f32(vmulq_n_f32(v[k], id)));
                        int32x4_t c1 = cvtt_low_i8(vrndaq_f32(vmulq_n_f32(v[k + 1], id)));
                        vst1_u8(dst + 2 + 4 * k, low_bytes8(c0, c1));
                }
        }
}

/* Levels min(@max_level, (int8_t) trunc((x - @sub) * id + @add)) & 0xff into q[32]. */
static inline void levels(const float32x4_t v[8], bool sub, float min, float id, float add, int max_level,
                          uint8_t q[32]) {
        for (unsigned k = 0; k < 8; k += 2) {
                int32x4_t c[2];
                for (unsigned h = 0; h < 2; h++) {
                        float32x4_t t = sub ? vsubq_f32(v[k + h], vdupq_n_f32(min)) : v[k + h];
                        t = vaddq_f32(vmulq_n_f32(t, id), vdupq_n_f32(add));
                        c[h] = vminq_s32(cvtt_low_i8(t), vdupq_n_s32(max_level));
                }
                vst1_u8(q + 4 * k, low_bytes8(c[0], c[1]));
        }
}

static inline void store_nibbles(uint8_t *qs, const uint8_t q[32]) {
        uint8x16_t lo = vld1q_u8(q), hi = vld1q_u8(q + 16);
        vst1q_u8(qs, vorrq_u8(lo, vshlq_n_u8(hi, 4)));
}

static inline void store_q5(uint8_t *qh, uint8_t *qs, const uint8_t q[32]) {
        static const uint8_t weights[8] = { 1, 2, 4, 8, 16, 32, 64, 128 };
        uint8x16_t lo = vld1q_u8(q), hi = vld1q_u8(q + 16), nib = vdupq_n_u8(0x0f);
        uint8x8_t w = vld1_u8(weights), one = vdup_n_u8(1);

        vst1q_u8(qs, vorrq_u8(vandq_u8(lo, nib), vshlq_n_u8(vandq_u8(hi, nib), 4)));
        for (unsigned g = 0; g < 4; g++) {
                uint8x8_t bits = vand_u8(vshr_n_u8(vld1_u8(q + 8 * g), 4), one);
                qh[g] = vaddv_u8(vmul_u8(bits, w));
        }
}

static void q4_0_neon(const float *src, uint8_t *dst, size_t nblocks) {
        for (size_t b = 0; b < nblocks; b++, src += QK_SMALL, dst += Q4_0_BYTES) {
                float32x4_t v[8];
                uint8_t q[32];

                load_block(src, v);
                float d = signed_absmax(src, v) / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
                quant_store_le16(dst, quant_fp16(d));
                levels(v, false, 0.0f, id, 8.5f, 15, q);
                store_nibbles(dst + 2, q);
        }
}

static void q5_0_neon(const float *src, uint8_t *dst, size_t nblocks) {
        for (size_t b = 0; b < nblocks; b++, src += QK_SMALL, dst += Q5_0_BYTES) {
                float32x4_t v[8];
                uint8_t q[32];

                load_block(src, v);
                float d = signed_absmax(src, v) / -16.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
                quant_store_le16(dst, quant_fp16(d));
                levels(v, false, 0.0f, id, 16.5f, 31, q);
                store_q5(dst + 2, dst + 6, q);
        }
}

static void q4_1_neon(const float *src, uint8_t *dst, size_t nblocks) {
        for (size_t b = 0; b < nblocks; b++, src += QK_SMALL, dst += Q4_1_BYTES) {
                float32x4_t v[8];
                uint8_t q[32];
                float min, max;

                load_block(src, v);
                min_max(src, v, &min, &max);
                float d = (max - min) / 15.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
                quant_store_le16(dst, quant_fp16(d));
                quant_store_le16(dst + 2, quant_fp16(min));
                levels(v, true, min, id, 0.5f, 15, q);
                store_nibbles(dst + 4, q);
        }
}

static void q5_1_neon(const float *src, uint8_t *dst, size_t nblocks) {
        for (size_t b = 0; b < nblocks; b++, src += QK_SMALL, dst += Q5_1_BYTES) {
                float32x4_t v[8];
                uint8_t q[32];
                float min, max;

                load_block(src, v);
                min_max(src, v, &min, &max);
                float d = (max - min) / 31.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
                quant_store_le16(dst, quant_fp16(d));
                quant_store_le16(dst + 2, quant_fp16(min));
                levels(v, true, min, id, 0.5f, 127, q);  /* no cap: an int8 never exceeds 127 */
                store_q5(dst + 4, dst + 8, q);
        }
}

/* ggml's FP32 -> FP16 (quant_fp16()) on 4 lanes. */
static inline uint16x4_t fp16x4(float32x4_t f) {
        float32x4_t base = vmulq_f32(vmulq_f32(vabsq_f32(f), vdupq_n_f32(0x1.0p+112f)), vdupq_n_f32(0x1.0p-110f));
        uint32x4_t w = vreinterpretq_u32_f32(f), shl1 = vaddq_u32(w, w);
        uint32x4_t sign = vandq_u32(w, vdupq_n_u32(0x80000000u));
        uint32x4_t bias = vmaxq_u32(vandq_u32(shl1, vdupq_n_u32(0xff000000u)), vdupq_n_u32(0x71000000u));
        uint32x4_t bb = vaddq_u32(vshrq_n_u32(bias, 1), vdupq_n_u32(0x07800000u));
        uint32x4_t bits = vreinterpretq_u32_f32(vaddq_f32(vreinterpretq_f32_u32(bb), base));
        uint32x4_t nonsign = vaddq_u32(vandq_u32(vshrq_n_u32(bits, 13), vdupq_n_u32(0x7c00)),
                                       vandq_u32(bits, vdupq_n_u32(0x0fff)));
        uint32x4_t r = vbslq_u32(vcgtq_u32(shl1, vdupq_n_u32(0xff000000u)), vdupq_n_u32(0x7e00), nonsign);
        return vmovn_u32(vorrq_u32(vshrq_n_u32(sign, 16), r));
}

/* ggml's FP32 -> BF16 (quant_bf16()) on 4 lanes. */
static inline uint16x4_t bf16x4(float32x4_t f) {
        uint32x4_t u = vreinterpretq_u32_f32(f);
        uint32x4_t odd = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
        uint32x4_t r = vshrq_n_u32(vaddq_u32(u, vaddq_u32(vdupq_n_u32(0x7fff), odd)), 16);
        uint32x4_t nan = vcgtq_u32(vandq_u32(u, vdupq_n_u32(0x7fffffffu)), vdupq_n_u32(0x7f800000u));
        uint32x4_t q = vorrq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(64));
        return vmovn_u32(vbslq_u32(nan, q, r));
}

/* Little-endian uint16 stores: aarch64 Linux is little-endian. */
static void f16_neon(const float *src, uint8_t *dst, size_t n) {
        size_t i = 0;

        for (; i + 8 <= n; i += 8)
                vst1q_u8(dst + 2 * i, vreinterpretq_u8_u16(vcombine_u16(fp16x4(vld1q_f32(src + i)),
                                                                        fp16x4(vld1q_f32(src + i + 4)))));
        quant_f16_generic(src + i, dst + 2 * i, n - i);
}

static void bf16_neon(const float *src, uint8_t *dst, size_t n) {
        size_t i = 0;

        for (; i + 8 <= n; i += 8)
                vst1q_u8(dst + 2 * i, vreinterpretq_u8_u16(vcombine_u16(bf16x4(vld1q_f32(src + i)),
                                                                        bf16x4(vld1q_f32(src + i + 4)))));
        quant_bf16_generic(src + i, dst + 2 * i, n - i);
}

const QuantKernels quant_kernels_neon = {
        .fn = {
                [QUANT_Q4_0] = q4_0_neon,
                [QUANT_Q4_1] = q4_1_neon,
                [QUANT_Q5_0] = q5_0_neon,
                [QUANT_Q5_1] = q5_1_neon,
                [QUANT_Q8_0] = q8_0_neon,
                [QUANT_Q4_K] = quant_q4_k_neon,
                [QUANT_Q5_K] = quant_q5_k_neon,
                [QUANT_Q6_K] = quant_q6_k_neon,
                [QUANT_F16] = f16_neon,
                [QUANT_BF16] = bf16_neon,
        },
        .dequant = {
                [QUANT_Q4_0] = dequant_q4_0_neon,
                [QUANT_Q8_0] = dequant_q8_0_neon,
        },
        .weighted = {
                [QUANT_Q4_K] = quant_q4_k_weighted_neon,
                [QUANT_Q5_K] = quant_q5_k_weighted_neon,
                [QUANT_Q6_K] = quant_q6_k_weighted_neon,
        },
        .product = rank_product_neon,
};
