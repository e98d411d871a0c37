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

/* An 8 x 8 transpose: out[k] lane j = x[n * j + l + k]. */
static inline void vf_load_transposed(const float *x, unsigned n, unsigned l, vf out[8]) {
        vf r[8], t[8], u[8];

        for (unsigned j = 0; j < 8; j++)
                r[j] = _mm256_loadu_ps(x + n * j + l);
        for (unsigned j = 0; j < 8; j += 2) {
                t[j] = _mm256_unpacklo_ps(r[j], r[j + 1]);      /* r0[0] r1[0] r0[1] r1[1] | [4] [5] */
                t[j + 1] = _mm256_unpackhi_ps(r[j], r[j + 1]);  /* r0[2] r1[2] r0[3] r1[3] | [6] [7] */
        }
        for (unsigned j = 0; j < 8; j += 4) {
                u[j] = _mm256_shuffle_ps(t[j], t[j + 2], 0x44);         /* rows j..j+3 [0] | [4] */
                u[j + 1] = _mm256_shuffle_ps(t[j], t[j + 2], 0xee);     /* [1] | [5] */
                u[j + 2] = _mm256_shuffle_ps(t[j + 1], t[j + 3], 0x44); /* [2] | [6] */
                u[j + 3] = _mm256_shuffle_ps(t[j + 1], t[j + 3], 0xee); /* [3] | [7] */
        }
        for (unsigned k = 0; k < 4; k++) {
                out[k] = _mm256_permute2f128_ps(u[k], u[k + 4], 0x20);
                out[k + 4] = _mm256_permute2f128_ps(u[k], u[k + 4], 0x31);
        }
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
