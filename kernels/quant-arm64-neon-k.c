/* SPDX-License-Identifier: MIT */
/*
 * K-quant scale searches with NEON, one sub-block per lane (quant-k-lanes.h): 4 lanes, two
 * passes per Q4_K/Q5_K super-block, four per Q6_K. Build with -march=armv8-a
 * -ffp-contract=off: GCC would otherwise fuse the multiply-adds, which rounds differently.
 */

#include <arm_neon.h>

#include "quant-impl.h"

#define LANES 4
typedef float32x4_t vf;
typedef int32x4_t vi;
typedef uint32x4_t vm;

#define vf_set1(f) vdupq_n_f32(f)
#define vf_loadu(p) vld1q_f32(p)
#define vf_storeu(p, v) vst1q_f32((p), (v))
#define vf_add(a, b) vaddq_f32((a), (b))
#define vf_sub(a, b) vsubq_f32((a), (b))
#define vf_mul(a, b) vmulq_f32((a), (b))
#define vf_div(a, b) vdivq_f32((a), (b))
#define vf_sqrt(a) vsqrtq_f32(a)
#define vf_abs(a) vabsq_f32(a)
#define vf_neg(a) vnegq_f32(a)
#define vm_lt(a, b) vcltq_f32((a), (b))
#define vm_gt(a, b) vcgtq_f32((a), (b))
#define vm_eq(a, b) vceqq_f32((a), (b))
#define vm_and(a, b) vandq_u32((a), (b))
#define vm_any(m) (vmaxvq_u32(m) != 0)
#define vf_sel(m, a, b) vbslq_f32((m), (a), (b))
#define vi_sel(m, a, b) vbslq_s32((m), (a), (b))
#define vi_storeu(p, v) vst1q_s32((p), (v))
#define vi_set1(i) vdupq_n_s32(i)
#define vi_add(a, b) vaddq_s32((a), (b))
#define vi_clamp(v, lo, hi) vminq_s32(vmaxq_s32((v), (lo)), (hi))
#define vf_from_vi(v) vcvtq_f32_s32(v)

static inline vi vi_nearest(vf v) {
        vi b = vreinterpretq_s32_f32(vaddq_f32(v, vdupq_n_f32(12582912.f)));
        return vsubq_s32(vandq_s32(b, vdupq_n_s32(0x007fffff)), vdupq_n_s32(0x00400000));
}

/* A 4 x 4 transpose: out[k] lane j = x[n * j + l + k]. */
static inline void vf_load_transposed(const float *x, unsigned n, unsigned l, vf out[4]) {
        vf r0 = vld1q_f32(x + l), r1 = vld1q_f32(x + n + l), r2 = vld1q_f32(x + 2 * n + l);
        vf r3 = vld1q_f32(x + 3 * n + l);
        float64x2_t t0 = vreinterpretq_f64_f32(vtrn1q_f32(r0, r1)); /* r0[0] r1[0] r0[2] r1[2] */
        float64x2_t t1 = vreinterpretq_f64_f32(vtrn2q_f32(r0, r1)); /* r0[1] r1[1] r0[3] r1[3] */
        float64x2_t t2 = vreinterpretq_f64_f32(vtrn1q_f32(r2, r3));
        float64x2_t t3 = vreinterpretq_f64_f32(vtrn2q_f32(r2, r3));

        out[0] = vreinterpretq_f32_f64(vtrn1q_f64(t0, t2));
        out[1] = vreinterpretq_f32_f64(vtrn1q_f64(t1, t3));
        out[2] = vreinterpretq_f32_f64(vtrn2q_f64(t0, t2));
        out[3] = vreinterpretq_f32_f64(vtrn2q_f64(t1, t3));
}

#include "quant-k-lanes.h"

void quant_q4_k_neon(const float *src, uint8_t *dst, size_t nblocks) {
        q4_k_lanes(src, dst, nblocks);
}

void quant_q5_k_neon(const float *src, uint8_t *dst, size_t nblocks) {
        q5_k_lanes(src, dst, nblocks);
}

void quant_q6_k_neon(const float *src, uint8_t *dst, size_t nblocks) {
        q6_k_lanes(src, NULL, dst, nblocks);
}

void quant_q4_k_weighted_neon(const float *src, const float *qw, uint8_t *dst, size_t nblocks) {
        q45_k_weighted_lanes(src, qw, dst, nblocks, 15);
}

void quant_q5_k_weighted_neon(const float *src, const float *qw, uint8_t *dst, size_t nblocks) {
        q45_k_weighted_lanes(src, qw, dst, nblocks, 31);
}

void quant_q6_k_weighted_neon(const float *src, const float *qw, uint8_t *dst, size_t nblocks) {
        q6_k_lanes(src, qw, dst, nblocks);
}
