/* SPDX-License-Identifier: MIT */
/*
 * The lora prediction's dequantizers and rank product with AVX2 (dequant.h, product.h). Build
 * with -mavx2 -ffp-contract=off: no FMA; every lane rounds as the generic C does.
 */

#include <immintrin.h>

#include "quant-impl.h"

/* Eight signed levels at @q as floats. */
static inline __m256 levels8(__m128i q) {
        return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
}

/* y = d·q: 32 int8 levels, four vectors of eight. */
void dequant_q8_0_avx2(const uint8_t *x, float *y, size_t nblocks) {
        for (size_t b = 0; b < nblocks; b++, x += Q8_0_BYTES, y += QK_SMALL) {
                const __m256 d = _mm256_set1_ps(quant_fp16_to_f32(quant_load_le16(x)));
                for (unsigned j = 0; j < QK_SMALL; j += 8)
                        _mm256_storeu_ps(y + j, _mm256_mul_ps(levels8(_mm_loadl_epi64((const __m128i *) (x + 2 + j))), d));
        }
}

/* y = d·(q − 8): the low nibbles are elements 0..15, the high ones 16..31. */
void dequant_q4_0_avx2(const uint8_t *x, float *y, size_t nblocks) {
        const __m128i mask = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8);

        for (size_t b = 0; b < nblocks; b++, x += Q4_0_BYTES, y += QK_SMALL) {
                const __m256 d = _mm256_set1_ps(quant_fp16_to_f32(quant_load_le16(x)));
                const __m128i qs = _mm_loadu_si128((const __m128i *) (x + 2));
                const __m128i lo = _mm_sub_epi8(_mm_and_si128(qs, mask), eight);
                const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(qs, 4), mask), eight);
                _mm256_storeu_ps(y, _mm256_mul_ps(levels8(lo), d));
                _mm256_storeu_ps(y + 8, _mm256_mul_ps(levels8(_mm_srli_si128(lo, 8)), d));
                _mm256_storeu_ps(y + 16, _mm256_mul_ps(levels8(hi), d));
                _mm256_storeu_ps(y + 24, _mm256_mul_ps(levels8(_mm_srli_si128(hi, 8)), d));
        }
}

/*
 * 32 elements at a time, their sums in four registers through all k (q is read once, acc
 * written once); then 8 at a time; the rest by the generic loop.
 */
void rank_product_avx2(const float *p, const float *q, size_t stride, size_t rank, float *acc, size_t n) {
        size_t i = 0;

        for (; i + 32 <= n; i += 32) {
                __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
                for (size_t k = 0; k < rank; k++) {
                        const __m256 pk = _mm256_set1_ps(p[k]);
                        const float *qk = q + k * stride + i;
                        a0 = _mm256_add_ps(a0, _mm256_mul_ps(pk, _mm256_loadu_ps(qk)));
                        a1 = _mm256_add_ps(a1, _mm256_mul_ps(pk, _mm256_loadu_ps(qk + 8)));
                        a2 = _mm256_add_ps(a2, _mm256_mul_ps(pk, _mm256_loadu_ps(qk + 16)));
                        a3 = _mm256_add_ps(a3, _mm256_mul_ps(pk, _mm256_loadu_ps(qk + 24)));
                }
                _mm256_storeu_ps(acc + i, a0);
                _mm256_storeu_ps(acc + i + 8, a1);
                _mm256_storeu_ps(acc + i + 16, a2);
                _mm256_storeu_ps(acc + i + 24, a3);
        }
        for (; i + 8 <= n; i += 8) {
                __m256 a = _mm256_setzero_ps();
                for (size_t k = 0; k < rank; k++)
                        a = _mm256_add_ps(a, _mm256_mul_ps(_mm256_set1_ps(p[k]), _mm256_loadu_ps(q + k * stride + i)));
                _mm256_storeu_ps(acc + i, a);
        }
        rank_product_generic(p, q + i, stride, rank, acc + i, n - i);
}
