/* SPDX-License-Identifier: MIT */
/*
 * K-quant scale searches with AVX2, one sub-block per lane (quant-k-lanes.h): 8 lanes, so a
 * Q4_K/Q5_K super-block is one pass and Q6_K two. Build with -mavx2 -ffp-contract=off; no
 * FMA, every operation rounds as the generic C does.
 */

#include <immintrin.h>

#include "quant-impl.h"

#define LANES 8
typedef __m256 vf;
typedef __m256i vi;
typedef __m256 vm;

#define vf_set1(f) _mm256_set1_ps(f)
#define vf_loadu(p) _mm256_loadu_ps(p)
#define vf_storeu(p, v) _mm256_storeu_ps((p), (v))
#define vf_add(a, b) _mm256_add_ps((a), (b))
#define vf_sub(a, b) _mm256_sub_ps((a), (b))
#define vf_mul(a, b) _mm256_mul_ps((a), (b))
#define vf_div(a, b) _mm256_div_ps((a), (b))
#define vf_sqrt(a) _mm256_sqrt_ps(a)
#define vf_abs(a) _mm256_andnot_ps(_mm256_set1_ps(-0.0f), (a))
#define vf_neg(a) _mm256_xor_ps(_mm256_set1_ps(-0.0f), (a))
#define vm_lt(a, b) _mm256_cmp_ps((a), (b), _CMP_LT_OQ)
#define vm_gt(a, b) _mm256_cmp_ps((a), (b), _CMP_GT_OQ)
#define vm_eq(a, b) _mm256_cmp_ps((a), (b), _CMP_EQ_OQ)
#define vm_and(a, b) _mm256_and_ps((a), (b))
#define vm_any(m) (_mm256_movemask_ps(m) != 0)
#define vf_sel(m, a, b) _mm256_blendv_ps((b), (a), (m))
#define vi_sel(m, a, b) _mm256_blendv_epi8((b), (a), _mm256_castps_si256(m))
#define vi_storeu(p, v) _mm256_storeu_si256((__m256i *) (p), (v))
#define vi_set1(i) _mm256_set1_epi32(i)
#define vi_add(a, b) _mm256_add_epi32((a), (b))
#define vi_clamp(v, lo, hi) _mm256_min_epi32(_mm256_max_epi32((v), (lo)), (hi))
#define vf_from_vi(v) _mm256_cvtepi32_ps(v)

static inline vi vi_nearest(vf v) {
        vi b = _mm256_castps_si256(_mm256_add_ps(v, _mm256_set1_ps(12582912.f)));
        return _mm256_sub_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x007fffff)), _mm256_set1_epi32(0x00400000));
}

#include "quant-k-lanes.h"

void quant_q4_k_avx2(const float *src, uint8_t *dst, size_t nblocks) {
        q4_k_lanes(src, dst, nblocks);
}

void quant_q5_k_avx2(const float *src, uint8_t *dst, size_t nblocks) {
        q5_k_lanes(src, dst, nblocks);
}

void quant_q6_k_avx2(const float *src, uint8_t *dst, size_t nblocks) {
        q6_k_lanes(src, NULL, dst, nblocks);
}

void quant_q4_k_weighted_avx2(const float *src, const float *qw, uint8_t *dst, size_t nblocks) {
        q45_k_weighted_lanes(src, qw, dst, nblocks, 15);
}

void quant_q5_k_weighted_avx2(const float *src, const float *qw, uint8_t *dst, size_t nblocks) {
        q45_k_weighted_lanes(src, qw, dst, nblocks, 31);
}

void quant_q6_k_weighted_avx2(const float *src, const float *qw, uint8_t *dst, size_t nblocks) {
        q6_k_lanes(src, qw, dst, nblocks);
}
