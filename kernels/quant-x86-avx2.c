/* SPDX-License-Identifier: MIT */
/*
 * Quantizers with AVX2: the 32-element block types one block at a time (four vectors), the
 * float types eight values at a time. Build with -mavx2 -ffp-contract=off. Bit-identical to
 * quant-generic.c: the same IEEE operations per value; maxima and minima are order-free
 * except for which zero (+0 / -0) or which signed extreme comes first, which is looked up;
 * cvttps2dq is the x86 truncation the generic code models; bytes keep the low 8 bits.
 */

#include <immintrin.h>

#include "quant-impl.h"

static inline float hmax(__m256 v) {
        __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
        return _mm_cvtss_f32(m);
}

static inline float hmin(__m256 v) {
        __m128 m = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        m = _mm_min_ps(m, _mm_movehl_ps(m, m));
        m = _mm_min_ss(m, _mm_shuffle_ps(m, m, 1));
        return _mm_cvtss_f32(m);
}

static inline __m256 vabs(__m256 v) {
        return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
}

/* Bit k of the result: lane k % 8 of v[k / 8] compares equal to @t. */
static inline uint32_t find_eq(const __m256 v[4], __m256 t) {
        uint32_t m = 0;

        for (unsigned k = 0; k < 4; k++)
                m |= (uint32_t) _mm256_movemask_ps(_mm256_cmp_ps(v[k], t, _CMP_EQ_OQ)) << (8 * k);
        return m;
}

/* The first value of largest magnitude, with its sign (+0 when all are zero), and that magnitude. */
static inline float signed_absmax(const float *x, const __m256 v[4]) {
        __m256 a = _mm256_max_ps(_mm256_max_ps(vabs(v[0]), vabs(v[1])), _mm256_max_ps(vabs(v[2]), vabs(v[3])));
        float amax = hmax(a);
        __m256 av[4] = { vabs(v[0]), vabs(v[1]), vabs(v[2]), vabs(v[3]) };

        if (amax == 0.0f)
                return 0.0f;
        return x[__builtin_ctz(find_eq(av, _mm256_set1_ps(amax)))];
}

/* Minimum and maximum; a zero result is the first zero of the block, as sequential strict compares pick it. */
static inline void min_max(const float *x, const __m256 v[4], float *ret_min, float *ret_max) {
        float min = hmin(_mm256_min_ps(_mm256_min_ps(v[0], v[1]), _mm256_min_ps(v[2], v[3])));
        float max = hmax(_mm256_max_ps(_mm256_max_ps(v[0], v[1]), _mm256_max_ps(v[2], v[3])));

        if (min == 0.0f || max == 0.0f) {
                float z = x[__builtin_ctz(find_eq(v, _mm256_setzero_ps()))];
                if (min == 0.0f)
                        min = z;
                if (max == 0.0f)
                        max = z;
        }
        *ret_min = min;
        *ret_max = max;
}

static inline void load_block(const float *x, __m256 v[4]) {
        for (unsigned k = 0; k < 4; k++)
                v[k] = _mm256_loadu_ps(x + 8 * k);
}

/* (int8_t) of a cvtt result, widened back to int32. */
static inline __m256i low_i8(__m256i c) {
        return _mm256_srai_epi32(_mm256_slli_epi32(c, 24), 24);
}

/* The low bytes of 32 int32 values (each already 0..255), in order. */
static inline __m256i pack_bytes(const __m256i c[4]) {
        __m256i p01 = _mm256_packus_epi32(c[0], c[1]), p23 = _mm256_packus_epi32(c[2], c[3]);
        __m256i b = _mm256_packus_epi16(p01, p23);
        return _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* 16 int32 values (each 0..255) to 16 bytes, in order. */
static inline __m128i pack_bytes16(__m256i a, __m256i b) {
        __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8);
        return _mm_packus_epi16(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
}

/* roundf(): half away from zero; exact (x - trunc(x) is exact), inf and NaN pass through. */
static inline __m256 round_away(__m256 x) {
        const __m256 one = _mm256_set1_ps(1.0f);
        __m256 t = _mm256_round_ps(x, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC), r = _mm256_sub_ps(x, t);
        __m256 up = _mm256_and_ps(_mm256_cmp_ps(r, _mm256_set1_ps(0.5f), _CMP_GE_OQ), one);
        __m256 down = _mm256_and_ps(_mm256_cmp_ps(r, _mm256_set1_ps(-0.5f), _CMP_LE_OQ), one);
        return _mm256_sub_ps(_mm256_add_ps(t, up), down);
}

static void q8_0_avx2(const float *src, uint8_t *dst, size_t nblocks) {
        const __m256i byte = _mm256_set1_epi32(0xff);

        for (size_t b = 0; b < nblocks; b++, src += QK_SMALL, dst += Q8_0_BYTES) {
                __m256 v[4];
                __m256i c[4];

                load_block(src, v);
                float amax = hmax(_mm256_max_ps(_mm256_max_ps(vabs(v[0]), vabs(v[1])),
                                                _mm256_max_ps(vabs(v[2]), vabs(v[3]))));
                float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
                __m256 idv = _mm256_set1_ps(id);

                quant_store_le16(dst, quant_fp16(d));
                for (unsigned k = 0; k < 4; k++)
                        c[k] = _mm256_and_si256(_mm256_cvttps_epi32(round_away(_mm256_mul_ps(v[k], idv))), byte);
                _mm256_storeu_si256((__m256i *) (dst + 2), pack_bytes(c));
        }
}

/* Levels min(@max_level, (int8_t) trunc((x - @sub) * id + @add)) as bytes, for Q4_0 ... Q5_1. */
static inline void levels(const __m256 v[4], float sub, float id, float add, int max_level, __m256i q[4]) {
        const __m256 subv = _mm256_set1_ps(sub), idv = _mm256_set1_ps(id), addv = _mm256_set1_ps(add);
        const __m256i top = _mm256_set1_epi32(max_level), byte = _mm256_set1_epi32(0xff);

        for (unsigned k = 0; k < 4; k++) {
                __m256 t = sub == 0.0f ? _mm256_mul_ps(v[k], idv) : _mm256_mul_ps(_mm256_sub_ps(v[k], subv), idv);
                __m256i c = low_i8(_mm256_cvttps_epi32(_mm256_add_ps(t, addv)));
                q[k] = _mm256_and_si256(_mm256_min_epi32(c, top), byte);
        }
}

/* Two 4-bit levels per byte: element j low, element j + 16 high. */
static inline void store_nibbles(uint8_t *qs, const __m256i q[4]) {
        const __m256i hi_mask = _mm256_set1_epi32(0xf0);
        __m256i b0 = _mm256_or_si256(q[0], _mm256_and_si256(_mm256_slli_epi32(q[2], 4), hi_mask));
        __m256i b1 = _mm256_or_si256(q[1], _mm256_and_si256(_mm256_slli_epi32(q[3], 4), hi_mask));
        _mm_storeu_si128((__m128i *) qs, pack_bytes16(b0, b1));
}

/* Q5: low nibbles in qs (j low, j + 16 high), bit 4 of every level in qh. */
static inline void store_q5(uint8_t *qh, uint8_t *qs, const __m256i q[4]) {
        __m256i all = pack_bytes(q);
        __m128i lo = _mm256_castsi256_si128(all), hi = _mm256_extracti128_si256(all, 1), nib = _mm_set1_epi8(0x0f);
        uint32_t h = (uint32_t) _mm256_movemask_epi8(_mm256_slli_epi16(all, 3));

        _mm_storeu_si128((__m128i *) qs, _mm_or_si128(_mm_and_si128(lo, nib), _mm_slli_epi16(_mm_and_si128(hi, nib), 4)));
        memcpy(qh, &h, 4);      /* little-endian */
}

static void q4_0_avx2(const float *src, uint8_t *dst, size_t nblocks) {
        for (size_t b = 0; b < nblocks; b++, src += QK_SMALL, dst += Q4_0_BYTES) {
                __m256 v[4];
                __m256i q[4];

                load_block(src, v);
                float d = signed_absmax(src, v) / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
                quant_store_le16(dst, quant_fp16(d));
                levels(v, 0.0f, id, 8.5f, 15, q);
                store_nibbles(dst + 2, q);
        }
}

static void q5_0_avx2(const float *src, uint8_t *dst, size_t nblocks) {
        for (size_t b = 0; b < nblocks; b++, src += QK_SMALL, dst += Q5_0_BYTES) {
                __m256 v[4];
                __m256i q[4];

                load_block(src, v);
                float d = signed_absmax(src, v) / -16.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
                quant_store_le16(dst, quant_fp16(d));
                levels(v, 0.0f, id, 16.5f, 31, q);
                store_q5(dst + 2, dst + 6, q);
        }
}

static void q4_1_avx2(const float *src, uint8_t *dst, size_t nblocks) {
        for (size_t b = 0; b < nblocks; b++, src += QK_SMALL, dst += Q4_1_BYTES) {
                __m256 v[4];
                __m256i q[4];
                float min, max;

                load_block(src, v);
                min_max(src, v, &min, &max);
                float d = (max - min) / 15.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
                quant_store_le16(dst, quant_fp16(d));
                quant_store_le16(dst + 2, quant_fp16(min));
                /* sub == 0 skips the subtraction: x - (+-0) == x for every x but -0, which both map to level 0. */
                levels(v, min, id, 0.5f, 15, q);
                store_nibbles(dst + 4, q);
        }
}

static void q5_1_avx2(const float *src, uint8_t *dst, size_t nblocks) {
        for (size_t b = 0; b < nblocks; b++, src += QK_SMALL, dst += Q5_1_BYTES) {
                __m256 v[4];
                __m256i q[4];
                float min, max;

                load_block(src, v);
                min_max(src, v, &min, &max);
                float d = (max - min) / 31.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
                quant_store_le16(dst, quant_fp16(d));
                quant_store_le16(dst + 2, quant_fp16(min));
                /* Q5_1 casts without a min(): levels() with a cap no int8 reaches keeps every byte. */
                levels(v, min, id, 0.5f, 127, q);
                store_q5(dst + 4, dst + 8, q);
        }
}

/* ggml's FP32 -> FP16 (quant_fp16()) on 8 lanes; results in the low 16 bits of each int32. */
static inline __m256i fp16x8(__m256 f) {
        __m256 base = _mm256_mul_ps(_mm256_mul_ps(vabs(f), _mm256_set1_ps(0x1.0p+112f)), _mm256_set1_ps(0x1.0p-110f));
        __m256i w = _mm256_castps_si256(f), shl1 = _mm256_add_epi32(w, w);
        __m256i sign = _mm256_and_si256(w, _mm256_set1_epi32((int) 0x80000000u));
        __m256i bias = _mm256_max_epu32(_mm256_and_si256(shl1, _mm256_set1_epi32((int) 0xff000000u)),
                                        _mm256_set1_epi32(0x71000000));
        __m256i bb = _mm256_add_epi32(_mm256_srli_epi32(bias, 1), _mm256_set1_epi32(0x07800000));
        __m256i bits = _mm256_castps_si256(_mm256_add_ps(_mm256_castsi256_ps(bb), base));
        __m256i nonsign = _mm256_add_epi32(_mm256_and_si256(_mm256_srli_epi32(bits, 13), _mm256_set1_epi32(0x7c00)),
                                           _mm256_and_si256(bits, _mm256_set1_epi32(0x0fff)));
        /* shl1 > 0xff000000 unsigned: a NaN. */
        __m256i nan = _mm256_cmpgt_epi32(_mm256_xor_si256(shl1, _mm256_set1_epi32((int) 0x80000000u)),
                                         _mm256_set1_epi32(0x7f000000));
        __m256i r = _mm256_blendv_epi8(nonsign, _mm256_set1_epi32(0x7e00), nan);
        return _mm256_or_si256(_mm256_srli_epi32(sign, 16), r);
}

/* ggml's FP32 -> BF16 (quant_bf16()) on 8 lanes. */
static inline __m256i bf16x8(__m256 f) {
        __m256i u = _mm256_castps_si256(f);
        __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
        __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), odd)), 16);
        __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                         _mm256_set1_epi32(0x7f800000));
        __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(64));
        return _mm256_blendv_epi8(r, q, nan);
}

/* 16 values (low 16 bits of each int32) to 16 little-endian uint16s. */
static inline void store_u16x16(uint8_t *dst, __m256i a, __m256i b) {
        __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8);
        _mm256_storeu_si256((__m256i *) dst, p);
}

static void f16_avx2(const float *src, uint8_t *dst, size_t n) {
        size_t i = 0;

        for (; i + 16 <= n; i += 16)
                store_u16x16(dst + 2 * i, fp16x8(_mm256_loadu_ps(src + i)), fp16x8(_mm256_loadu_ps(src + i + 8)));
        quant_f16_generic(src + i, dst + 2 * i, n - i);
}

static void bf16_avx2(const float *src, uint8_t *dst, size_t n) {
        size_t i = 0;

        for (; i + 16 <= n; i += 16)
                store_u16x16(dst + 2 * i, bf16x8(_mm256_loadu_ps(src + i)), bf16x8(_mm256_loadu_ps(src + i + 8)));
        quant_bf16_generic(src + i, dst + 2 * i, n - i);
}

const QuantKernels quant_kernels_avx2 = {
        .fn = {
                [QUANT_Q4_0] = q4_0_avx2,
                [QUANT_Q4_1] = q4_1_avx2,
                [QUANT_Q5_0] = q5_0_avx2,
                [QUANT_Q5_1] = q5_1_avx2,
                [QUANT_Q8_0] = q8_0_avx2,
                [QUANT_Q4_K] = quant_q4_k_avx2,
                [QUANT_Q5_K] = quant_q5_k_avx2,
                [QUANT_Q6_K] = quant_q6_k_avx2,
                [QUANT_F16] = f16_avx2,
                [QUANT_BF16] = bf16_avx2,
        },
        .dequant = {
                [QUANT_Q4_0] = dequant_q4_0_avx2,
                [QUANT_Q8_0] = dequant_q8_0_avx2,
        },
        .weighted = {
                [QUANT_Q4_K] = quant_q4_k_weighted_avx2,
                [QUANT_Q5_K] = quant_q5_k_weighted_avx2,
                [QUANT_Q6_K] = quant_q6_k_weighted_avx2,
        },
        .product = rank_product_avx2,
};
