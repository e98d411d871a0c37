/* SPDX-License-Identifier: MIT */
/*
 * Portable K-quantizers (256-element super-blocks): Q2_K, Q3_K, Q4_K, Q5_K, Q6_K as ggml's
 * quantize_row_q{2,3,4,5,6}_K_ref compute them without an importance matrix. The scale
 * searches (make_qkx2_quants for Q2_K/Q4_K/Q5_K, make_q3_quants for Q3_K, make_qx_quants with
 * rmse_type 1 for Q6_K) evaluate every sum in ggml's order; the SIMD files run the same
 * searches for Q4_K/Q5_K/Q6_K in lanes, one sub-block each.
 */

#include <stdbool.h>

#include "quant-impl.h"

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define GROUP_MAX_EPS 1e-15f

float quant_make_qkx(unsigned n, int nmax, const float *x, const float *w, uint8_t *L, float *ret_min,
                       float rmin, float rdelta, int nstep, bool mad) {
        uint8_t Laux[32];
        float min = x[0], max = x[0], sum_w = w[0], sum_x = sum_w * x[0];

        for (unsigned i = 1; i < n; i++) {
                if (x[i] < min)
                        min = x[i];
                if (x[i] > max)
                        max = x[i];
                sum_w += w[i];
                sum_x += w[i] * x[i];
        }
        if (min > 0)
                min = 0;
        if (max == min) {
                memset(L, 0, n);
                *ret_min = -min;
                return 0.0f;
        }

        float iscale = (float) nmax / (max - min), scale = 1 / iscale, best_error = 0;
        for (unsigned i = 0; i < n; i++) {
                int l = quant_nearest_int(iscale * (x[i] - min));
                L[i] = (uint8_t) MAX(0, MIN(nmax, l));
                float diff = scale * L[i] + min - x[i];
                best_error += w[i] * (mad ? fabsf(diff) : diff * diff);
        }

        for (int is = 0; is <= nstep; is++) {
                float sum_l = 0, sum_l2 = 0, sum_xl = 0;

                iscale = (rmin + rdelta * (float) is + (float) nmax) / (max - min);
                for (unsigned i = 0; i < n; i++) {
                        int l = quant_nearest_int(iscale * (x[i] - min));
                        l = MAX(0, MIN(nmax, l));
                        Laux[i] = (uint8_t) l;
                        sum_l += w[i] * (float) l;
                        sum_l2 += w[i] * (float) l * (float) l;
                        sum_xl += w[i] * (float) l * x[i];
                }
                float D = sum_w * sum_l2 - sum_l * sum_l;
                if (!(D > 0))
                        continue;

                float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
                float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
                if (this_min > 0) {
                        this_min = 0;
                        this_scale = sum_xl / sum_l2;
                }
                float cur_error = 0;
                for (unsigned i = 0; i < n; i++) {
                        float diff = this_scale * Laux[i] + this_min - x[i];
                        cur_error += w[i] * (mad ? fabsf(diff) : diff * diff);
                }
                if (cur_error < best_error) {
                        memcpy(L, Laux, n);
                        best_error = cur_error;
                        scale = this_scale;
                        min = this_min;
                }
        }
        *ret_min = -min;
        return scale;
}

/* The 6-bit scales and mins of the 8 sub-blocks, packed into 12 bytes as ggml lays them out. */
static void pack_scales_k4(uint8_t q[12], const uint8_t ls[8], const uint8_t lm[8]) {
        for (unsigned j = 0; j < 8; j++)
                if (j < 4) {
                        q[j] = ls[j];
                        q[j + 4] = lm[j];
                } else {
                        q[j + 4] = (uint8_t) ((ls[j] & 0xf) | ((lm[j] & 0xf) << 4));
                        q[j - 4] |= (uint8_t) ((ls[j] >> 4) << 6);
                        q[j] |= (uint8_t) ((lm[j] >> 4) << 6);
                }
}

/*
 * The part of Q4_K and Q5_K after the sub-block search: quantize the 8 scales and mins to
 * 6 bits against their maxima, store d, dmin and the packed scales at @hdr, and requantize
 * every sub-block whose quantized scale is not zero with it (the others keep @L from the
 * search). Shared with the SIMD files, which do the searches in lanes.
 */
void quant_k4_finish(const float *x, const float scales[8], const float mins[8], int nmax, uint8_t *hdr,
                     uint8_t L[QK_K]) {
        float max_scale = 0, max_min = 0;
        uint8_t ls[8], lm[8];

        for (unsigned j = 0; j < 8; j++) {
                if (scales[j] > max_scale)
                        max_scale = scales[j];
                if (mins[j] > max_min)
                        max_min = mins[j];
        }
        float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
        float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
        for (unsigned j = 0; j < 8; j++) {
                ls[j] = (uint8_t) MIN(63, (uint8_t) quant_nearest_int(inv_scale * scales[j]));
                lm[j] = (uint8_t) MIN(63, (uint8_t) quant_nearest_int(inv_min * mins[j]));
        }
        quant_store_le16(hdr, quant_fp16(max_scale / 63.f));
        quant_store_le16(hdr + 2, quant_fp16(max_min / 63.f));
        pack_scales_k4(hdr + 4, ls, lm);
        quant_k4_requantize(x, hdr, nmax, L);
}

void quant_k4_set_scales(uint8_t *hdr, float d, float dmin, const uint8_t ls[8], const uint8_t lm[8]) {
        quant_store_le16(hdr, quant_fp16(d));
        quant_store_le16(hdr + 2, quant_fp16(dmin));
        pack_scales_k4(hdr + 4, ls, lm);
}

void quant_k4_requantize(const float *x, const uint8_t *hdr, int nmax, uint8_t L[QK_K]) {
        float dd = quant_fp16_to_f32(quant_load_le16(hdr)), dmin = quant_fp16_to_f32(quant_load_le16(hdr + 2));

        for (unsigned j = 0; j < 8; j++) {
                /* The scales as a reader unpacks them from the 12 bytes (ggml's get_scale_min_k4). */
                const uint8_t *q = hdr + 4;
                int sc = j < 4 ? q[j] & 63 : (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
                int m = j < 4 ? q[j + 4] & 63 : (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
                float d = dd * (float) sc;
                if (d == 0.0f)
                        continue;
                float dm = dmin * (float) m;
                for (unsigned i = 0; i < 32; i++) {
                        int l = quant_nearest_int((x[32 * j + i] + dm) / d);
                        L[32 * j + i] = (uint8_t) MAX(0, MIN(nmax, l));
                }
        }
}

void quant_q4_k_pack(const uint8_t L[QK_K], uint8_t *dst) {
        uint8_t *q = dst + 16;

        for (unsigned j = 0; j < QK_K; j += 64, q += 32)
                for (unsigned l = 0; l < 32; l++)
                        q[l] = (uint8_t) (L[j + l] | (L[j + l + 32] << 4));
}

void quant_q5_k_pack(const uint8_t L[QK_K], uint8_t *dst) {
        uint8_t *qh = dst + 16, *ql = dst + 48;
        uint8_t m1 = 1, m2 = 2;

        memset(qh, 0, 32);
        for (unsigned n = 0; n < QK_K; n += 64, ql += 32) {
                for (unsigned j = 0; j < 32; j++) {
                        int l1 = L[n + j], l2 = L[n + j + 32];
                        if (l1 > 15) {
                                l1 -= 16;
                                qh[j] |= m1;
                        }
                        if (l2 > 15) {
                                l2 -= 16;
                                qh[j] |= m2;
                        }
                        ql[j] = (uint8_t) (l1 | (l2 << 4));
                }
                m1 = (uint8_t) (m1 << 2);
                m2 = (uint8_t) (m2 << 2);
        }
}

/* Per sub-block weights: the row's RMS plus each value's magnitude. */
static void k4_weights(const float *x, float w[32]) {
        float sum_x2 = 0;

        for (unsigned l = 0; l < 32; l++)
                sum_x2 += x[l] * x[l];
        float av_x = sqrtf(sum_x2 / 32);
        for (unsigned l = 0; l < 32; l++)
                w[l] = av_x + fabsf(x[l]);
}

void quant_q4_k_generic(const float *src, uint8_t *dst, size_t nblocks) {
        for (size_t b = 0; b < nblocks; b++, src += QK_K, dst += Q4_K_BYTES) {
                float scales[8], mins[8], w[32];
                uint8_t L[QK_K];

                for (unsigned j = 0; j < 8; j++) {
                        k4_weights(src + 32 * j, w);
                        scales[j] = quant_make_qkx(32, 15, src + 32 * j, w, L + 32 * j, &mins[j], -1.f, 0.1f, 20, false);
                }
                quant_k4_finish(src, scales, mins, 15, dst, L);
                quant_q4_k_pack(L, dst);
        }
}

void quant_q5_k_generic(const float *src, uint8_t *dst, size_t nblocks) {
        for (size_t b = 0; b < nblocks; b++, src += QK_K, dst += Q5_K_BYTES) {
                float scales[8], mins[8], w[32];
                uint8_t L[QK_K];

                for (unsigned j = 0; j < 8; j++) {
                        k4_weights(src + 32 * j, w);
                        scales[j] = quant_make_qkx(32, 31, src + 32 * j, w, L + 32 * j, &mins[j], -0.5f, 0.1f, 15, false);
                }
                quant_k4_finish(src, scales, mins, 31, dst, L);
                quant_q5_k_pack(L, dst);
        }
}

/*
 * The part of Q6_K after the 16 sub-block searches: 8-bit scales against the largest,
 * d, requantization with the rounded scales, packing. Shared with the SIMD files.
 */
void quant_q6_k_finish(const float *x, const float scales[16], int8_t L[QK_K], uint8_t *dst) {
        float max_scale = 0, max_abs_scale = 0;
        uint8_t *ql = dst, *qh = dst + 128;
        int8_t *sc = (int8_t *) (dst + 192);

        for (unsigned ib = 0; ib < 16; ib++)
                if (fabsf(scales[ib]) > max_abs_scale) {
                        max_abs_scale = fabsf(scales[ib]);
                        max_scale = scales[ib];
                }
        if (max_abs_scale < GROUP_MAX_EPS) {
                memset(dst, 0, Q6_K_BYTES);     /* d = fp16(0) is 0 too */
                return;
        }

        float iscale = -128.f / max_scale;
        uint16_t d16 = quant_fp16(1 / iscale);
        quant_store_le16(dst + 208, d16);
        for (unsigned ib = 0; ib < 16; ib++)
                sc[ib] = (int8_t) MIN(127, quant_nearest_int(iscale * scales[ib]));

        float dd = quant_fp16_to_f32(d16);
        for (unsigned j = 0; j < 16; j++) {
                float d = dd * (float) sc[j];
                if (d == 0.0f)
                        continue;
                for (unsigned i = 0; i < 16; i++) {
                        int l = quant_nearest_int(x[16 * j + i] / d);
                        L[16 * j + i] = (int8_t) (MAX(-32, MIN(31, l)) + 32);
                }
        }

        for (unsigned j = 0; j < QK_K; j += 128, ql += 64, qh += 32)
                for (unsigned l = 0; l < 32; l++) {
                        uint8_t q1 = L[j + l] & 0xf, q2 = L[j + l + 32] & 0xf;
                        uint8_t q3 = L[j + l + 64] & 0xf, q4 = L[j + l + 96] & 0xf;
                        ql[l] = (uint8_t) (q1 | (q3 << 4));
                        ql[l + 32] = (uint8_t) (q2 | (q4 << 4));
                        qh[l] = (uint8_t) ((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                                           ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
                }
}

void quant_q6_k_generic(const float *src, uint8_t *dst, size_t nblocks) {
        for (size_t b = 0; b < nblocks; b++, src += QK_K, dst += Q6_K_BYTES) {
                float scales[16];
                int8_t L[QK_K];

                for (unsigned ib = 0; ib < 16; ib++)
                        scales[ib] = quant_make_qx(16, 32, src + 16 * ib, L + 16 * ib, NULL);
                quant_q6_k_finish(src, scales, L, dst);
        }
}

/* Q2_K and Q3_K: four 2-bit levels a byte, element e of each 128 in byte e % 32, bits 2·(e / 32). */
static void pack_2bit(const uint8_t L[QK_K], uint8_t qs[64]) {
        for (unsigned j = 0; j < QK_K; j += 128)
                for (unsigned l = 0; l < 32; l++)
                        qs[j / 4 + l] = (uint8_t) (L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) |
                                                   (L[j + l + 96] << 6));
}

/*
 * Q2_K: 16 sub-blocks of 16, each a scale and a minimum (quant_make_qkx on levels 0..3, weighted
 * by |x|, absolute error), both quantized to 4 bits against their maxima.
 */
void quant_q2_k_generic(const float *src, uint8_t *dst, size_t nblocks) {
        for (size_t b = 0; b < nblocks; b++, src += QK_K, dst += Q2_K_BYTES) {
                float scales[16], mins[16], w[16], max_scale = 0, max_min = 0;
                uint8_t L[QK_K], *sc = dst;

                for (unsigned j = 0; j < 16; j++) {
                        for (unsigned l = 0; l < 16; l++)
                                w[l] = fabsf(src[16 * j + l]);
                        scales[j] = quant_make_qkx(16, 3, src + 16 * j, w, L + 16 * j, &mins[j], -0.5f, 0.1f, 15, true);
                        if (scales[j] > max_scale)
                                max_scale = scales[j];
                        if (mins[j] > max_min)
                                max_min = mins[j];
                }
                memset(sc, 0, 16);
                if (max_scale > 0) {
                        float iscale = 15.f / max_scale;
                        for (unsigned j = 0; j < 16; j++)
                                sc[j] = (uint8_t) quant_nearest_int(iscale * scales[j]);
                }
                quant_store_le16(dst + 80, quant_fp16(max_scale > 0 ? max_scale / 15.f : 0.f));
                if (max_min > 0) {
                        float iscale = 15.f / max_min;
                        for (unsigned j = 0; j < 16; j++)
                                /* Unsigned: the low bits of ggml's int shift, without its undefined
                                 * behaviour for the negative levels of absurd input. */
                                sc[j] |= (uint8_t) ((unsigned) quant_nearest_int(iscale * mins[j]) << 4);
                }
                quant_store_le16(dst + 82, quant_fp16(max_min > 0 ? max_min / 15.f : 0.f));
                quant_q2_k_requantize(src, dst, L);
        }
}

void quant_q2_k_requantize(const float *x, uint8_t *dst, uint8_t L[QK_K]) {
        const uint8_t *sc = dst;
        float d = quant_fp16_to_f32(quant_load_le16(dst + 80)), dmin = quant_fp16_to_f32(quant_load_le16(dst + 82));

        for (unsigned j = 0; j < 16; j++) {
                float dj = d * (float) (sc[j] & 0xf);
                if (dj == 0.0f)
                        continue;
                float mj = dmin * (float) (sc[j] >> 4);
                for (unsigned i = 0; i < 16; i++) {
                        int l = quant_nearest_int((x[16 * j + i] + mj) / dj);
                        L[16 * j + i] = (uint8_t) MAX(0, MIN(3, l));
                }
        }
        pack_2bit(L, dst + 16);
}

/*
 * make_q3_quants(16, 4, x, L, do_rmse): a scale for levels -4..3 from the largest magnitude,
 * then up to five passes that move single levels while that raises sumlx² / suml2 (weights
 * x²). Returns the scale; @L holds the levels + 4.
 */
static float make_q3(const float *x, int8_t L[16]) {
        float amax = 0, max = 0, sumlx = 0, suml2 = 0;

        for (unsigned i = 0; i < 16; i++)
                if (fabsf(x[i]) > amax) {
                        amax = fabsf(x[i]);
                        max = x[i];
                }
        if (amax < GROUP_MAX_EPS) {
                memset(L, 0, 16);
                return 0.f;
        }
        float iscale = -4.f / max;
        for (unsigned i = 0; i < 16; i++) {
                int l = MAX(-4, MIN(3, quant_nearest_int(iscale * x[i])));
                float w = x[i] * x[i];
                L[i] = (int8_t) l;
                sumlx += w * x[i] * (float) l;
                suml2 += w * (float) l * (float) l;
        }
        for (int itry = 0; itry < 5; itry++) {
                int n_changed = 0;
                for (unsigned i = 0; i < 16; i++) {
                        float w = x[i] * x[i], slx = sumlx - w * x[i] * (float) L[i];
                        if (!(slx > 0))
                                continue;
                        float sl2 = suml2 - w * (float) L[i] * (float) L[i];
                        int new_l = MAX(-4, MIN(3, quant_nearest_int(x[i] * sl2 / slx)));
                        if (new_l == L[i])
                                continue;
                        slx += w * x[i] * (float) new_l;
                        sl2 += w * (float) new_l * (float) new_l;
                        if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                                L[i] = (int8_t) new_l;
                                sumlx = slx;
                                suml2 = sl2;
                                n_changed++;
                        }
                }
                if (!n_changed)
                        break;
        }
        for (unsigned i = 0; i < 16; i++)
                L[i] = (int8_t) (L[i] + 4);
        return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* Q3_K's 6-bit scale of sub-block @j: its low 4 bits, then 2 high bits, from the 12 bytes. */
static int q3_k_scale(const uint8_t sc[12], unsigned j) {
        int lo = j < 8 ? sc[j] & 0xf : sc[j - 8] >> 4;
        return (lo | (((sc[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
}

/*
 * Q3_K: 16 sub-blocks of 16 on levels -4..3 (make_q3), their scales quantized to 6 bits
 * against the one of largest magnitude; the levels' high bit in hmask, the low two in qs.
 */
void quant_q3_k_generic(const float *src, uint8_t *dst, size_t nblocks) {
        for (size_t b = 0; b < nblocks; b++, src += QK_K, dst += Q3_K_BYTES) {
                float scales[16], amax = 0, max_scale = 0;
                uint8_t *sc = dst + 96;
                int8_t L[QK_K];

                for (unsigned j = 0; j < 16; j++) {
                        scales[j] = make_q3(src + 16 * j, L + 16 * j);
                        if (fabsf(scales[j]) > amax) {
                                amax = fabsf(scales[j]);
                                max_scale = scales[j];
                        }
                }
                memset(sc, 0, 12);
                if (max_scale != 0.0f) {
                        float iscale = -32.f / max_scale;
                        for (unsigned j = 0; j < 16; j++) {
                                /* ggml stores nearest_int() into an int8_t first. */
                                int8_t s = (int8_t) (uint8_t) quant_nearest_int(iscale * scales[j]);
                                quant_q3_k_set_scale(sc, j, MAX(-32, MIN(31, s)) + 32);
                        }
                        quant_store_le16(dst + 108, quant_fp16(1 / iscale));
                } else {
                        quant_store_le16(dst + 108, quant_fp16(0.f));
                }
                quant_q3_k_requantize(src, dst, L);
        }
}

void quant_q3_k_set_scale(uint8_t sc[12], unsigned j, int l) {
        if (j < 8)
                sc[j] = (uint8_t) (l & 0xf);
        else
                sc[j - 8] |= (uint8_t) ((l & 0xf) << 4);
        sc[8 + j % 4] |= (uint8_t) ((l >> 4) << (2 * (j / 4)));
}

void quant_q3_k_requantize(const float *x, uint8_t *dst, int8_t L[QK_K]) {
        uint8_t *hmask = dst, U[QK_K];
        float d_all = quant_fp16_to_f32(quant_load_le16(dst + 108));

        for (unsigned j = 0; j < 16; j++) {
                float d = d_all * (float) q3_k_scale(dst + 96, j);
                if (d == 0.0f)
                        continue;
                for (unsigned i = 0; i < 16; i++) {
                        int l = quant_nearest_int(x[16 * j + i] / d);
                        L[16 * j + i] = (int8_t) (MAX(-4, MIN(3, l)) + 4);
                }
        }
        memset(hmask, 0, 32);
        for (unsigned j = 0; j < QK_K; j++) {
                U[j] = (uint8_t) L[j];
                if (U[j] > 3) {
                        hmask[j % 32] |= (uint8_t) (1u << (j / 32));
                        U[j] -= 4;
                }
        }
        pack_2bit(U, dst + 32);
}
