/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The K-quant scale searches with one sub-block per SIMD lane, written once over a small
 * vector vocabulary that each ISA file defines before including this header (the AVX2 and
 * NEON quantizers), with and without an importance matrix. Each lane runs exactly the
 * portable code's sequence of IEEE operations for its own sub-block (quant-generic-k.c,
 * quant-weighted.c): sums stay sequential within a lane, data-dependent branches become
 * per-lane selects, so the bytes are the portable ones.
 *
 * Required before inclusion:
 *   LANES                                    lanes per vector (a divisor of 8)
 *   vf, vi, vm                               float, int32 and mask vectors
 *   vf_set1(f), vf_loadu(p)                  broadcast, unaligned load
 *   vf_add, vf_sub, vf_mul, vf_div           IEEE single precision, lane by lane
 *   vf_sqrt, vf_abs, vf_neg                  (vf_neg flips the sign bit)
 *   vm_lt, vm_gt, vm_eq, vm_and              comparisons (false for NaN) and mask and
 *   vm_any(m)                                whether any lane is set
 *   vf_sel(m, a, b), vi_sel(m, a, b)         m ? a : b, lane by lane
 *   vf_storeu(p, v), vi_storeu(p, v)         unaligned stores (float *, int32_t *)
 *   vi_nearest(v)                            quant_nearest_int() lane by lane
 *   vi_clamp(v, lo, hi), vi_set1(i), vi_add  int32
 *   vf_from_vi(v)                            int32 to float (exact for levels)
 *   vf_load_transposed(x, n, l, out)         out[k] lane j = x[n * j + l + k], k, j < LANES
 */

#define K_GROUP_MAX_EPS 1e-15f

/* LANES sub-blocks of @n values (a multiple of LANES) at @x + n * j, lane j's value l in @v[l]. */
static inline void k_transpose_load(const float *x, unsigned n, vf *v) {
        for (unsigned l = 0; l < n; l += LANES)
                vf_load_transposed(x, n, l, v + l);
}

/* Back to natural order: L[n * j + l] = lane j of @v. */
static inline void k_transpose_store_u8(uint8_t *L, unsigned n, unsigned l, vi v, int bias) {
        int32_t t[LANES];

        vi_storeu(t, v);
        for (unsigned j = 0; j < LANES; j++)
                L[n * j + l] = (uint8_t) (t[j] + bias);
}

/*
 * quant_make_qkx (quant-generic-k.c) for LANES sub-blocks of 32 values @xv weighted by @wv
 * (lane j: sub-block j, element l in xv[l]). Writes LANES scales, negated minima and 32
 * levels per sub-block (natural order at @L).
 */
static void k4_search_core(const vf xv[32], const vf wv[32], int nmax, float rmin, float rdelta, int nstep,
                           float *ret_scales, float *ret_mins, uint8_t *L) {
        const vf zero = vf_set1(0.0f);
        vi Lv[32], Laux[32];

        vf min = xv[0], max = xv[0], sum_w = wv[0], sum_x = vf_mul(wv[0], xv[0]);
        for (unsigned l = 1; l < 32; l++) {
                min = vf_sel(vm_lt(xv[l], min), xv[l], min);
                max = vf_sel(vm_gt(xv[l], max), xv[l], max);
                sum_w = vf_add(sum_w, wv[l]);
                sum_x = vf_add(sum_x, vf_mul(wv[l], xv[l]));
        }
        min = vf_sel(vm_gt(min, zero), zero, min);
        vm flat = vm_eq(max, min);
        vf min0 = min;

        const vi lo = vi_set1(0), hi = vi_set1(nmax);
        vf iscale = vf_div(vf_set1((float) nmax), vf_sub(max, min));
        vf scale = vf_div(vf_set1(1.0f), iscale), best_error = zero;
        for (unsigned l = 0; l < 32; l++) {
                Lv[l] = vi_clamp(vi_nearest(vf_mul(iscale, vf_sub(xv[l], min))), lo, hi);
                vf diff = vf_sub(vf_add(vf_mul(scale, vf_from_vi(Lv[l])), min), xv[l]);
                best_error = vf_add(best_error, vf_mul(wv[l], vf_mul(diff, diff)));
        }

        for (int is = 0; is <= nstep; is++) {
                vf sum_l = zero, sum_l2 = zero, sum_xl = zero;

                iscale = vf_div(vf_set1(rmin + rdelta * (float) is + (float) nmax), vf_sub(max, min));
                for (unsigned l = 0; l < 32; l++) {
                        Laux[l] = vi_clamp(vi_nearest(vf_mul(iscale, vf_sub(xv[l], min))), lo, hi);
                        vf lf = vf_from_vi(Laux[l]), wl = vf_mul(wv[l], lf);
                        sum_l = vf_add(sum_l, wl);
                        sum_l2 = vf_add(sum_l2, vf_mul(wl, lf));
                        sum_xl = vf_add(sum_xl, vf_mul(wl, xv[l]));
                }
                vf D = vf_sub(vf_mul(sum_w, sum_l2), vf_mul(sum_l, sum_l));
                vm ok = vm_gt(D, zero);
                if (!vm_any(ok))
                        continue;

                vf this_scale = vf_div(vf_sub(vf_mul(sum_w, sum_xl), vf_mul(sum_x, sum_l)), D);
                vf this_min = vf_div(vf_sub(vf_mul(sum_l2, sum_x), vf_mul(sum_l, sum_xl)), D);
                vm pos = vm_gt(this_min, zero);
                this_min = vf_sel(pos, zero, this_min);
                this_scale = vf_sel(pos, vf_div(sum_xl, sum_l2), this_scale);

                vf cur_error = zero;
                for (unsigned l = 0; l < 32; l++) {
                        vf diff = vf_sub(vf_add(vf_mul(this_scale, vf_from_vi(Laux[l])), this_min), xv[l]);
                        cur_error = vf_add(cur_error, vf_mul(wv[l], vf_mul(diff, diff)));
                }
                vm upd = vm_and(ok, vm_lt(cur_error, best_error));
                if (!vm_any(upd))
                        continue;
                for (unsigned l = 0; l < 32; l++)
                        Lv[l] = vi_sel(upd, Laux[l], Lv[l]);
                best_error = vf_sel(upd, cur_error, best_error);
                scale = vf_sel(upd, this_scale, scale);
                min = vf_sel(upd, this_min, min);
        }

        /* A flat sub-block (max == min): levels 0, scale 0, its minimum as found. */
        scale = vf_sel(flat, zero, scale);
        min = vf_sel(flat, min0, min);
        vf_storeu(ret_scales, scale);
        vf_storeu(ret_mins, vf_neg(min));
        for (unsigned l = 0; l < 32; l++)
                k_transpose_store_u8(L, 32, l, vi_sel(flat, lo, Lv[l]), 0);
}

/* k4_search_core with ggml's unweighted Q4_K/Q5_K weights: RMS of the sub-block plus |x|. */
static void k4_search_lanes(const float *x, int nmax, float rmin, float rdelta, int nstep, float *ret_scales,
                            float *ret_mins, uint8_t *L) {
        vf xv[32], wv[32], s = vf_set1(0.0f);

        k_transpose_load(x, 32, xv);
        for (unsigned l = 0; l < 32; l++)
                s = vf_add(s, vf_mul(xv[l], xv[l]));
        vf av = vf_sqrt(vf_div(s, vf_set1(32.0f)));
        for (unsigned l = 0; l < 32; l++)
                wv[l] = vf_add(av, vf_abs(xv[l]));
        k4_search_core(xv, wv, nmax, rmin, rdelta, nstep, ret_scales, ret_mins, L);
}

/*
 * The weighted Q4_K/Q5_K search (quant-weighted.c's block_q45_k) for LANES sub-blocks of 32 at
 * @x: weights @qw × sqrt(@sigma2 + x²), their sums in @ret_sw (from 0, in order), then
 * make_qkx3_quants' 37 candidates.
 */
static void k4_weighted_search_lanes(const float *x, const float *qw, float sigma2, int nmax, float *ret_scales,
                                     float *ret_mins, float *ret_sw, uint8_t *L) {
        const vf s2 = vf_set1(sigma2);
        vf xv[32], wv[32], sw = vf_set1(0.0f);

        k_transpose_load(x, 32, xv);
        k_transpose_load(qw, 32, wv);
        for (unsigned l = 0; l < 32; l++) {
                wv[l] = vf_mul(wv[l], vf_sqrt(vf_add(s2, vf_mul(xv[l], xv[l]))));
                sw = vf_add(sw, wv[l]);
        }
        vf_storeu(ret_sw, sw);
        k4_search_core(xv, wv, nmax, -0.9f, 0.05f, 36, ret_scales, ret_mins, L);
}

/* One rmse_type 1 candidate of quant_make_qx in lanes: the sums weighted by @wv for @iscale. */
static inline void q6_sums_lanes(const vf xv[16], const vf wv[16], vf iscale, vf *ret_sumlx, vf *ret_suml2) {
        const vi lo = vi_set1(-32), hi = vi_set1(31);
        vf sumlx = vf_set1(0.0f), suml2 = vf_set1(0.0f);

        for (unsigned i = 0; i < 16; i++) {
                vf lf = vf_from_vi(vi_clamp(vi_nearest(vf_mul(iscale, xv[i])), lo, hi));
                sumlx = vf_add(sumlx, vf_mul(vf_mul(wv[i], xv[i]), lf));
                suml2 = vf_add(suml2, vf_mul(vf_mul(wv[i], lf), lf));
        }
        *ret_sumlx = sumlx;
        *ret_suml2 = suml2;
}

/*
 * quant_make_qx(16, 32, x, L, qw) (quant-weighted.c) for LANES sub-blocks of 16 at @x: the
 * weights @qw (the same layout as @x), or x² when NULL. LANES scales, and levels 0..63
 * (natural order at @L). The levels are those of the last accepted candidate scale, so only
 * that scale is tracked and the levels are computed once at the end.
 */
static void q6_search_lanes(const float *x, const float *qw, float *ret_scales, int8_t *L) {
        const vf zero = vf_set1(0.0f);
        vf xv[16], wv[16], sumlx, suml2;

        vf amax = zero, max = zero;
        k_transpose_load(x, 16, xv);
        if (qw)
                k_transpose_load(qw, 16, wv);
        for (unsigned i = 0; i < 16; i++) {
                if (!qw)
                        wv[i] = vf_mul(xv[i], xv[i]);
                vf ax = vf_abs(xv[i]);
                vm m = vm_gt(ax, amax);
                amax = vf_sel(m, ax, amax);
                max = vf_sel(m, xv[i], max);
        }
        vm tiny = vm_lt(amax, vf_set1(K_GROUP_MAX_EPS));

        vf iscale = vf_div(vf_set1(-32.0f), max), best_iscale = iscale;
        q6_sums_lanes(xv, wv, iscale, &sumlx, &suml2);
        vf scale = vf_sel(vm_eq(suml2, zero), zero, vf_div(sumlx, suml2));
        vf best = vf_mul(scale, sumlx);
        for (int is = -9; is <= 9; is++) {
                if (is == 0)
                        continue;
                iscale = vf_div(vf_set1(-(32.0f + 0.1f * (float) is)), max);
                q6_sums_lanes(xv, wv, iscale, &sumlx, &suml2);
                vm upd = vm_and(vm_gt(suml2, zero), vm_gt(vf_mul(sumlx, sumlx), vf_mul(best, suml2)));
                if (!vm_any(upd))
                        continue;
                vf new_scale = vf_div(sumlx, suml2);
                best_iscale = vf_sel(upd, iscale, best_iscale);
                scale = vf_sel(upd, new_scale, scale);
                best = vf_sel(upd, vf_mul(new_scale, sumlx), best);
        }
        vf_storeu(ret_scales, vf_sel(tiny, zero, scale));

        const vi lo = vi_set1(-32), hi = vi_set1(31), bias = vi_set1(32);
        for (unsigned i = 0; i < 16; i++) {
                vi l = vi_add(vi_clamp(vi_nearest(vf_mul(best_iscale, xv[i])), lo, hi), bias);
                k_transpose_store_u8((uint8_t *) L, 16, i, vi_sel(tiny, vi_set1(0), l), 0);
        }
}

static void q4_k_lanes(const float *src, uint8_t *dst, size_t nblocks) {
        for (size_t b = 0; b < nblocks; b++, src += QK_K, dst += Q4_K_BYTES) {
                float scales[8], mins[8];
                uint8_t L[QK_K];

                for (unsigned g = 0; g < 8; g += LANES)
                        k4_search_lanes(src + 32 * g, 15, -1.f, 0.1f, 20, scales + g, mins + g, L + 32 * g);
                quant_k4_finish(src, scales, mins, 15, dst, L);
                quant_q4_k_pack(L, dst);
        }
}

static void q5_k_lanes(const float *src, uint8_t *dst, size_t nblocks) {
        for (size_t b = 0; b < nblocks; b++, src += QK_K, dst += Q5_K_BYTES) {
                float scales[8], mins[8];
                uint8_t L[QK_K];

                for (unsigned g = 0; g < 8; g += LANES)
                        k4_search_lanes(src + 32 * g, 31, -0.5f, 0.1f, 15, scales + g, mins + g, L + 32 * g);
                quant_k4_finish(src, scales, mins, 31, dst, L);
                quant_q5_k_pack(L, dst);
        }
}

/* Q6_K, weighted by @qw (QK_K values a block, advancing with @src) or, when NULL, by x². */
static void q6_k_lanes(const float *src, const float *qw, uint8_t *dst, size_t nblocks) {
        for (size_t b = 0; b < nblocks; b++, src += QK_K, dst += Q6_K_BYTES) {
                float scales[16];
                int8_t L[QK_K];

                for (unsigned g = 0; g < 16; g += LANES)
                        q6_search_lanes(src + 16 * g, qw ? qw + 16 * g : NULL, scales + g, L + 16 * g);
                quant_q6_k_finish(src, scales, L, dst);
                if (qw)
                        qw += QK_K;
        }
}

/* Q4_K (@nmax 15) or Q5_K (31) with the importance @qw: quant-weighted.c's block_q45_k. */
static void q45_k_weighted_lanes(const float *src, const float *qw, uint8_t *dst, size_t nblocks, int nmax) {
        size_t size = nmax == 15 ? Q4_K_BYTES : Q5_K_BYTES;

        for (size_t b = 0; b < nblocks; b++, src += QK_K, qw += QK_K, dst += size) {
                float scales[8], mins[8], sw[8], sigma2 = quant_k4_sigma2(src);
                uint8_t L[QK_K];

                for (unsigned g = 0; g < 8; g += LANES)
                        k4_weighted_search_lanes(src + 32 * g, qw + 32 * g, sigma2, nmax, scales + g, mins + g,
                                                 sw + g, L + 32 * g);
                quant_k4_weighted_finish(src, scales, mins, sw, nmax, dst, L);
        }
}
