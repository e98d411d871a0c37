/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Input rows for the quantizer tests (tests/unit/check_quant.c, tests/oracle/quant-oracle.c,
 * tests/bench/bench-quant.c): deterministic distributions that reach the corners of each
 * quantizer — zeros of both signs, constant rows, outliers, huge, tiny and denormal values,
 * rounding ties, one sign only, and random bit patterns over every finite exponent.
 * Header-only: each includer uses what it needs. No libm transcendental functions and no
 * multiply-add patterns a compiler could fuse (build with -ffp-contract=off anyway): the
 * inputs are the same floats on x86-64 and arm64, so outputs can be compared across them.
 */

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

typedef struct QcRng {
        uint64_t s;
} QcRng;

static inline uint64_t qc_next(QcRng *r) {
        uint64_t z = (r->s += UINT64_C(0x9e3779b97f4a7c15));
        z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
        return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
static inline double qc_unit(QcRng *r) {
        return (double) (qc_next(r) >> 11) * 0x1.0p-53;
}

/* Approximately standard normal: the sum of four uniforms (Irwin-Hall), centred and scaled. */
static inline double qc_normal(QcRng *r) {
        double s = qc_unit(r) + qc_unit(r) + qc_unit(r) + qc_unit(r);
        return (s - 2.0) * 1.7320508075688772;
}

/* A finite float with uniformly random bits (any exponent, either sign). */
static inline float qc_bits(QcRng *r) {
        for (;;) {
                uint32_t u = (uint32_t) qc_next(r);
                float f;
                memcpy(&f, &u, sizeof(f));
                if (isfinite(f))
                        return f;
        }
}

typedef enum QcDist {
        QC_NORMAL,              /* N(0, 1) */
        QC_WEIGHTS,             /* N(0, 0.02) with a rare large outlier, like model weights */
        QC_UNIFORM,             /* U(-1, 1) */
        QC_ZERO,                /* all +0 */
        QC_SIGNED_ZERO,         /* +0 and -0 mixed, some blocks with small values */
        QC_CONSTANT,            /* one value per row, positive or negative */
        QC_OUTLIER,             /* small values and one huge value per block */
        QC_NEGATIVE,            /* negative only */
        QC_POSITIVE,            /* positive only */
        QC_HUGE,                /* magnitudes near 1e30 and near FLT_MAX */
        QC_TINY,                /* magnitudes near 1e-30 */
        QC_DENORMAL,            /* denormals and zeros */
        QC_MIXED_SCALE,         /* each block its own scale, 2^-126 to 2^126 */
        QC_TIES,                /* multiples of 1/4 and small integers: rounding ties */
        QC_BITS,                /* random finite bit patterns */
        _QC_DIST_MAX,
} QcDist;

static const char *const qc_dist_names[_QC_DIST_MAX] = {
        [QC_NORMAL] = "normal",         [QC_WEIGHTS] = "weights",     [QC_UNIFORM] = "uniform",
        [QC_ZERO] = "zero",             [QC_SIGNED_ZERO] = "signed-zero", [QC_CONSTANT] = "constant",
        [QC_OUTLIER] = "outlier",       [QC_NEGATIVE] = "negative",   [QC_POSITIVE] = "positive",
        [QC_HUGE] = "huge",             [QC_TINY] = "tiny",           [QC_DENORMAL] = "denormal",
        [QC_MIXED_SCALE] = "mixed-scale", [QC_TIES] = "ties",         [QC_BITS] = "random-bits",
};

/* Fill @nrows rows of @n_per_row floats with distribution @dist from @seed. */
static inline void qc_fill(float *x, size_t nrows, size_t n_per_row, QcDist dist, uint64_t seed) {
        QcRng r = { seed * UINT64_C(0x2545f4914f6cdd1d) + (uint64_t) dist };
        size_t n = nrows * n_per_row;
        float scale = 1.0f;

        for (size_t i = 0; i < n; i++) {
                size_t row = i / n_per_row, col = i % n_per_row;
                float v;

                if (i % 32 == 0)
                        scale = ldexpf(1.0f, (int) (qc_next(&r) % 253) - 126);  /* 2^-126 ... 2^126 */
                switch (dist) {
                case QC_NORMAL:
                        v = (float) qc_normal(&r);
                        break;
                case QC_WEIGHTS:
                        v = (float) (0.02 * qc_normal(&r));
                        if (qc_next(&r) % 997 == 0)
                                v *= 40.0f;
                        break;
                case QC_UNIFORM:
                        v = (float) (2.0 * qc_unit(&r) - 1.0);
                        break;
                case QC_ZERO:
                        v = 0.0f;
                        break;
                case QC_SIGNED_ZERO:
                        v = (qc_next(&r) & 1) ? -0.0f : 0.0f;
                        if ((i / 64) % 3 == 2 && qc_next(&r) % 4 == 0)
                                v = (float) (1e-3 * qc_normal(&r));
                        break;
                case QC_CONSTANT:
                        v = (float) ((row % 2 ? -1.0 : 1.0) * (0.5 + (double) row * 0.37));
                        break;
                case QC_OUTLIER:
                        v = (float) (0.01 * qc_normal(&r));
                        if (col % 32 == (row * 7) % 32)
                                v = (row % 2 ? -1.0f : 1.0f) * 1e4f;
                        break;
                case QC_NEGATIVE:
                        v = (float) -fabs(qc_normal(&r));
                        break;
                case QC_POSITIVE:
                        v = (float) (fabs(qc_normal(&r)) + 0.25);
                        break;
                case QC_HUGE:
                        v = (float) (qc_normal(&r) * (row % 2 ? 1e30 : 1e38));
                        if (!isfinite(v))
                                v = copysignf(FLT_MAX, v);
                        break;
                case QC_TINY:
                        v = (float) (qc_normal(&r) * 1e-30);
                        break;
                case QC_DENORMAL:
                        v = (float) (qc_normal(&r) * 1e-40);
                        if (qc_next(&r) % 5 == 0)
                                v = 0.0f;
                        break;
                case QC_MIXED_SCALE:
                        v = (float) qc_normal(&r) * scale;
                        if (!isfinite(v))
                                v = copysignf(FLT_MAX, v);
                        break;
                case QC_TIES:
                        v = (float) ((int) (qc_next(&r) % 65) - 32) * ((row % 3 == 0) ? 0.25f : 1.0f);
                        break;
                case QC_BITS:
                default:
                        v = qc_bits(&r);
                        break;
                }
                x[i] = v;
        }
}

/* Importance matrix rows (quantize_rows_weighted's @weights): finite, none negative. */
typedef enum QcImportance {
        QC_IMP_UNIFORM,         /* U(0, 1] */
        QC_IMP_SKEWED,          /* u × 2^-8 ... 2^7: mean squared activations */
        QC_IMP_SOME_ZERO,       /* a tenth +0 or -0, the rest u² × 100 */
        QC_IMP_EXTREME,         /* near 1e30, 1e-30, denormals and zeros mixed */
        QC_IMP_ZERO,            /* all +0: every column unimportant */
        QC_IMP_SPARSE,          /* 1e4 on one column in 16, the rest 0 */
        QC_IMP_BITS,            /* random finite non-negative bit patterns */
        _QC_IMP_MAX,
} QcImportance;

static const char *const qc_importance_names[_QC_IMP_MAX] = {
        [QC_IMP_UNIFORM] = "uniform", [QC_IMP_SKEWED] = "skewed", [QC_IMP_SOME_ZERO] = "some-zero",
        [QC_IMP_EXTREME] = "extreme", [QC_IMP_ZERO] = "zero",     [QC_IMP_SPARSE] = "sparse",
        [QC_IMP_BITS] = "random-bits",
};

/* Fill @n importance values of kind @kind from @seed. */
static inline void qc_fill_importance(float *w, size_t n, QcImportance kind, uint64_t seed) {
        QcRng r = { seed * UINT64_C(0x5851f42d4c957f2d) + (uint64_t) kind };

        for (size_t i = 0; i < n; i++) {
                float u = (float) (qc_next(&r) >> 40) * 0x1.0p-24f + 0x1.0p-24f;        /* (0, 1] */
                switch (kind) {
                case QC_IMP_UNIFORM:
                        w[i] = u;
                        break;
                case QC_IMP_SKEWED:
                        w[i] = ldexpf(u, (int) (qc_next(&r) % 16) - 8);
                        break;
                case QC_IMP_SOME_ZERO:
                        w[i] = u < 0.1f ? (qc_next(&r) & 1 ? -0.0f : 0.0f) : u * u * 100.f;
                        break;
                case QC_IMP_EXTREME: {
                        static const float mag[] = { 1e30f, 1e-30f, 1e-40f, 0.0f, 3e38f };
                        w[i] = u * mag[qc_next(&r) % 5];
                        break;
                }
                case QC_IMP_ZERO:
                        w[i] = 0.0f;
                        break;
                case QC_IMP_SPARSE:
                        w[i] = i % 16 == seed % 16 ? 1e4f : 0.0f;
                        break;
                case QC_IMP_BITS:
                default:
                        w[i] = fabsf(qc_bits(&r));
                        break;
                }
        }
}
