/* SPDX-License-Identifier: MIT */
/*
 * Quantizers with an importance matrix: what ggml_quantize_chunk writes when llama-quantize
 * passes it a tensor's imatrix row (quantize_row_*_impl in ggml-quants.c). Each row's values
 * are weighted by importance × sqrt(σ² + x²) (Q6_K: by the importance alone), and the scale
 * searches take those weights: make_qx_quants (Q4_0, Q5_0, Q3_K, Q6_K), make_qkx3_quants
 * (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K: quant_make_qkx), and make_qp_quants for the K-quants' sub-block scales.
 * Every sum in ggml's order. Portable C; Q4_K, Q5_K and Q6_K also have SIMD paths
 * (quant-k-lanes.h: the same searches, a sub-block a lane), dispatched per row.
 */

#include "quant-impl.h"
#include "quant.h"

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define GROUP_MAX_EPS 1e-15f

/* The weight of one level's error: @qw's, or the value's square without one. */
static inline float qx_weight(const float *x, const float *qw, unsigned i) {
        return qw ? qw[i] : x[i] * x[i];
}

static inline int qx_level(float iscale, float x, int nmax) {
        return MAX(-nmax, MIN(nmax - 1, quant_nearest_int(iscale * x)));
}

/* make_qx_quants(n, nmax, x, L, 1, qw): the best of 19 scales around -nmax/max. */
float quant_make_qx(unsigned n, int nmax, const float *x, int8_t *L, const float *qw) {
        float amax = 0, max = 0, sumlx = 0, suml2 = 0;

        for (unsigned i = 0; i < n; i++)
                if (fabsf(x[i]) > amax) {
                        amax = fabsf(x[i]);
                        max = x[i];
                }
        if (amax < GROUP_MAX_EPS) {
                memset(L, 0, n);
                return 0.f;
        }
        float iscale = (float) -nmax / max;
        for (unsigned i = 0; i < n; i++) {
                int l = qx_level(iscale, x[i], nmax);
                float w = qx_weight(x, qw, i);
                L[i] = (int8_t) (l + nmax);
                sumlx += w * x[i] * (float) l;
                suml2 += w * (float) l * (float) l;
        }
        float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f, best = scale * sumlx;
        for (int is = -9; is <= 9; is++) {
                if (is == 0)
                        continue;
                iscale = -((float) nmax + 0.1f * (float) is) / max;
                sumlx = suml2 = 0;
                for (unsigned i = 0; i < n; i++) {
                        int l = qx_level(iscale, x[i], nmax);
                        float w = qx_weight(x, qw, i);
                        sumlx += w * x[i] * (float) l;
                        suml2 += w * (float) l * (float) l;
                }
                if (suml2 > 0 && sumlx * sumlx > best * suml2) {
                        for (unsigned i = 0; i < n; i++)
                                L[i] = (int8_t) (nmax + qx_level(iscale, x[i], nmax));
                        scale = sumlx / suml2;
                        best = scale * sumlx;
                }
        }
        return scale;
}

/*
 * make_qp_quants(n, nmax, x, L, w): a scale for the non-negative @x (sub-block scales or
 * minimums) on levels 0..@nmax: the best of 9 around nmax/max, then up to five passes of
 * single-level moves. ggml keeps levels in uint8_t and sums with the int it rounded: so here.
 */
static float make_qp(unsigned n, int nmax, const float *x, uint8_t *L, const float *w) {
        float max = 0;

        for (unsigned i = 0; i < n; i++)
                max = MAX(max, x[i]);
        if (max < GROUP_MAX_EPS) {
                memset(L, 0, n);
                return 0.f;
        }
        float iscale = (float) nmax / max, scale = 1 / iscale, best_mse = 0;
        for (unsigned i = 0; i < n; i++)
                L[i] = (uint8_t) quant_nearest_int(iscale * x[i]);
        for (unsigned i = 0; i < n; i++) {
                float diff = x[i] - scale * L[i];
                best_mse += w[i] * diff * diff;
        }
        for (int is = -4; is <= 4; is++) {
                if (is == 0)
                        continue;
                float iscale_is = (0.1f * (float) is + (float) nmax) / max, scale_is = 1 / iscale_is, mse = 0;
                for (unsigned i = 0; i < n; i++) {
                        int l = MIN(nmax, quant_nearest_int(iscale_is * x[i]));
                        float diff = x[i] - scale_is * (float) l;
                        mse += w[i] * diff * diff;
                }
                if (mse < best_mse) {
                        best_mse = mse;
                        iscale = iscale_is;
                }
        }
        float sumlx = 0, suml2 = 0;
        for (unsigned i = 0; i < n; i++) {
                int l = MIN(nmax, quant_nearest_int(iscale * x[i]));
                L[i] = (uint8_t) l;
                sumlx += w[i] * x[i] * (float) l;
                suml2 += w[i] * (float) l * (float) l;
        }
        for (int itry = 0; itry < 5; itry++) {
                int n_changed = 0;
                for (unsigned i = 0; i < n; i++) {
                        float slx = sumlx - w[i] * x[i] * L[i], sl2 = suml2 - w[i] * L[i] * L[i];
                        if (!(slx > 0 && sl2 > 0))
                                continue;
                        int new_l = MIN(nmax, quant_nearest_int(x[i] * sl2 / slx));
                        if (new_l == L[i])
                                continue;
                        slx += w[i] * x[i] * (float) new_l;
                        sl2 += w[i] * (float) new_l * (float) new_l;
                        if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                                L[i] = (uint8_t) new_l;
                                sumlx = slx;
                                suml2 = sl2;
                                n_changed++;
                        }
                }
                if (!n_changed)
                        break;
        }
        return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* Σ x² over @n values, in order. */
static float sum_sq(const float *x, size_t n) {
        float s = 0;
        for (size_t i = 0; i < n; i++)
                s += x[i] * x[i];
        return s;
}

/* @w = importance × sqrt(σ² + x²) for @n values. */
static void importance(const float *x, const float *qw, float sigma2, unsigned n, float *w) {
        for (unsigned i = 0; i < n; i++)
                w[i] = qw[i] * sqrtf(sigma2 + x[i] * x[i]);
}

/* The 5th bits of 32 levels 0..31 (qh), the low 4 into qs: Q5_0 and Q5_1's layout. */
static void pack_q5(const uint8_t *L, uint8_t *qh, uint8_t *qs) {
        uint32_t h = 0;
        for (unsigned j = 0; j < 16; j++) {
                qs[j] = (uint8_t) ((L[j] & 0x0f) | ((L[j + 16] & 0x0f) << 4));
                h |= (uint32_t) ((L[j] & 0x10u) >> 4) << j;
                h |= (uint32_t) ((L[j + 16] & 0x10u) >> 4) << (j + 16);
        }
        for (unsigned k = 0; k < 4; k++)
                qh[k] = (uint8_t) (h >> (8 * k));
}

/* Q4_0, Q4_1, Q5_0, Q5_1 of one row: σ² over the whole row, one search per 32-value block.
 * Returns the bytes written. */
static size_t row_small(uint32_t type, const float *x, uint8_t *y, size_t n, const float *qw) {
        const uint8_t *start = y;
        float sigma2 = sum_sq(x, n) / (float) n, w[QK_SMALL], min;
        int8_t L[QK_SMALL];
        uint8_t U[QK_SMALL];

        for (size_t ib = 0; ib < n / QK_SMALL; ib++, x += QK_SMALL, qw += QK_SMALL) {
                importance(x, qw, sigma2, QK_SMALL, w);
                switch (type) {
                case TYPE_Q4_0:
                        quant_store_le16(y, quant_fp16(quant_make_qx(QK_SMALL, 8, x, L, w)));
                        for (unsigned j = 0; j < 16; j++)
                                y[2 + j] = (uint8_t) (L[j] | (L[j + 16] << 4));
                        y += Q4_0_BYTES;
                        break;
                case TYPE_Q5_0:
                        quant_store_le16(y, quant_fp16(quant_make_qx(QK_SMALL, 16, x, L, w)));
                        memcpy(U, L, sizeof(U));
                        pack_q5(U, y + 2, y + 6);
                        y += Q5_0_BYTES;
                        break;
                case TYPE_Q4_1:
                        quant_store_le16(y, quant_fp16(quant_make_qkx(QK_SMALL, 15, x, w, U, &min, -0.9f, 0.05f, 36, false)));
                        quant_store_le16(y + 2, quant_fp16(-min));
                        for (unsigned j = 0; j < 16; j++)
                                y[4 + j] = (uint8_t) (U[j] | (U[j + 16] << 4));
                        y += Q4_1_BYTES;
                        break;
                default: /* TYPE_Q5_1 */
                        quant_store_le16(y, quant_fp16(quant_make_qkx(QK_SMALL, 31, x, w, U, &min, -0.9f, 0.05f, 36, false)));
                        quant_store_le16(y + 2, quant_fp16(-min));
                        pack_q5(U, y + 4, y + 8);
                        y += Q5_1_BYTES;
                        break;
                }
        }
        return (size_t) (y - start);
}

/* Q2_K: 16 sub-blocks on levels 0..3, their scales and minimums on 4 bits by make_qp. */
static void block_q2_k(const float *x, uint8_t *y, const float *qw) {
        float sigma2 = sum_sq(x, QK_K) / QK_K, w[16], sw[16], scales[16], mins[16];
        uint8_t L[QK_K], Ls[16], Lm[16];

        for (unsigned j = 0; j < 16; j++) {
                importance(x + 16 * j, qw + 16 * j, sigma2, 16, w);
                sw[j] = 0;
                for (unsigned l = 0; l < 16; l++)
                        sw[j] += w[l];
                scales[j] = quant_make_qkx(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], -0.9f, 0.05f, 36, false);
        }
        float dm = make_qp(16, 15, scales, Ls, sw), mm = make_qp(16, 15, mins, Lm, sw);
        quant_store_le16(y + 80, quant_fp16(dm));
        quant_store_le16(y + 82, quant_fp16(mm));
        for (unsigned j = 0; j < 16; j++)
                y[j] = (uint8_t) (Ls[j] | (Lm[j] << 4));
        quant_q2_k_requantize(x, y, L);
}

/* Q3_K: 16 sub-blocks on levels -4..3 (make_qx), their scales on 6 bits (make_qx again). */
static void block_q3_k(const float *x, uint8_t *y, const float *qw) {
        float sigma2 = 2 * sum_sq(x, QK_K) / QK_K, w[16], sw[16], scales[16];
        int8_t L[QK_K], Ls[16];

        for (unsigned j = 0; j < 16; j++) {
                importance(x + 16 * j, qw + 16 * j, sigma2, 16, w);
                sw[j] = 0;
                for (unsigned l = 0; l < 16; l++)
                        sw[j] += w[l];
                scales[j] = quant_make_qx(16, 4, x + 16 * j, L + 16 * j, w);
        }
        memset(y + 96, 0, 12);
        float d = quant_make_qx(16, 32, scales, Ls, sw);
        for (unsigned j = 0; j < 16; j++)
                quant_q3_k_set_scale(y + 96, j, Ls[j]);
        quant_store_le16(y + 108, quant_fp16(d));
        quant_q3_k_requantize(x, y, L);
}

float quant_k4_sigma2(const float *x) {
        return 2 * sum_sq(x, QK_K) / QK_K;
}

void quant_k4_weighted_finish(const float *x, const float scales[8], const float mins[8], const float sw[8],
                              int nmax, uint8_t *dst, uint8_t L[QK_K]) {
        uint8_t Ls[8], Lm[8];
        float d = make_qp(8, 63, scales, Ls, sw), m = make_qp(8, 63, mins, Lm, sw);

        for (unsigned j = 0; nmax == 31 && j < 8; j++) {
                /* Q5_K clamps levels that wrapped (a negative scale); Q4_K stores them as they are. */
                Ls[j] = MIN(63, Ls[j]);
                Lm[j] = MIN(63, Lm[j]);
        }
        quant_k4_set_scales(dst, d, m, Ls, Lm);
        quant_k4_requantize(x, dst, nmax, L);
        if (nmax == 15)
                quant_q4_k_pack(L, dst);
        else
                quant_q5_k_pack(L, dst);
}

/* Q4_K and Q5_K: 8 sub-blocks of 32 (quant_make_qkx), their scales and minimums on 6 bits by make_qp. */
static void block_q45_k(const float *x, uint8_t *y, const float *qw, int nmax) {
        float sigma2 = quant_k4_sigma2(x), w[32], sw[8], scales[8], mins[8];
        uint8_t L[QK_K];

        for (unsigned j = 0; j < 8; j++) {
                importance(x + 32 * j, qw + 32 * j, sigma2, 32, w);
                float sumw = 0;
                for (unsigned l = 0; l < 32; l++)
                        sumw += w[l];
                sw[j] = sumw;
                scales[j] = quant_make_qkx(32, nmax, x + 32 * j, w, L + 32 * j, &mins[j], -0.9f, 0.05f, 36, false);
        }
        quant_k4_weighted_finish(x, scales, mins, sw, nmax, y, L);
}

/* Q6_K: the importance alone weighs each of the 16 sub-block searches. */
static void block_q6_k(const float *x, uint8_t *y, const float *qw) {
        float scales[16];
        int8_t L[QK_K];

        for (unsigned ib = 0; ib < 16; ib++)
                scales[ib] = quant_make_qx(16, 32, x + 16 * ib, L + 16 * ib, qw + 16 * ib);
        quant_q6_k_finish(x, scales, L, y);
}

/* The dispatched SIMD quantizer for a K-quant @type, or NULL where only the portable one exists. */
static QuantWeightedFn weighted_kernel(uint32_t type) {
        const QuantKernels *k = quant_dispatch();

        switch (type) {
        case TYPE_Q4_K: return k->weighted[QUANT_Q4_K];
        case TYPE_Q5_K: return k->weighted[QUANT_Q5_K];
        case TYPE_Q6_K: return k->weighted[QUANT_Q6_K];
        default: return NULL;
        }
}

size_t quantize_rows_weighted(uint32_t type, const float *src, void *dst, size_t nrows, size_t n_per_row,
                              const float *weights) {
        if (!weights || !quant_weighted_supported(type))
                return quantize_rows(type, src, dst, nrows, n_per_row);

        QuantWeightedFn fn = weighted_kernel(type);
        uint8_t *y = dst;
        for (size_t r = 0; r < nrows; r++, src += n_per_row) {
                if (type == TYPE_Q4_0 || type == TYPE_Q4_1 || type == TYPE_Q5_0 || type == TYPE_Q5_1) {
                        y += row_small(type, src, y, n_per_row, weights);
                        continue;
                }
                if (fn) {
                        size_t nblocks = n_per_row / QK_K;
                        fn(src, weights, y, nblocks);
                        y += nblocks * (type == TYPE_Q4_K ? Q4_K_BYTES : type == TYPE_Q5_K ? Q5_K_BYTES : Q6_K_BYTES);
                        continue;
                }
                for (size_t b = 0; b < n_per_row / QK_K; b++) {
                        const float *x = src + QK_K * b, *qw = weights + QK_K * b;
                        switch (type) {
                        case TYPE_Q2_K: block_q2_k(x, y, qw); y += Q2_K_BYTES; break;
                        case TYPE_Q3_K: block_q3_k(x, y, qw); y += Q3_K_BYTES; break;
                        case TYPE_Q4_K: block_q45_k(x, y, qw, 15); y += Q4_K_BYTES; break;
                        case TYPE_Q5_K: block_q45_k(x, y, qw, 31); y += Q5_K_BYTES; break;
                        default: block_q6_k(x, y, qw); y += Q6_K_BYTES; break;
                        }
                }
        }
        return (size_t) (y - (uint8_t *) dst);
}

bool quant_weighted_supported(uint32_t type) {
        switch (type) {
        case TYPE_Q4_0: case TYPE_Q4_1: case TYPE_Q5_0: case TYPE_Q5_1: case TYPE_Q2_K: case TYPE_Q3_K:
        case TYPE_Q4_K: case TYPE_Q5_K: case TYPE_Q6_K:
                return true;
        default:
                return false;
        }
}
