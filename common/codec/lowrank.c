/* SPDX-License-Identifier: MIT */
/* The low-rank change of a float tensor (lowrank.h). */

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lowrank.h"
#include "macro.h"

#define OVERSAMPLE 8
#define POWER_ITERATIONS 2

/* Orthonormalize the @k columns of @a (@n rows, column j at a + j·n), Gram-Schmidt twice. */
static void orthonormalize(double *a, uint64_t n, unsigned k) {
        for (unsigned j = 0; j < k; j++) {
                double *v = a + (uint64_t) j * n;
                for (int pass = 0; pass < 2; pass++)
                        for (unsigned i = 0; i < j; i++) {
                                const double *u = a + (uint64_t) i * n;
                                double dot = 0;
                                for (uint64_t r = 0; r < n; r++)
                                        dot += u[r] * v[r];
                                for (uint64_t r = 0; r < n; r++)
                                        v[r] -= dot * u[r];
                        }
                double norm = 0;
                for (uint64_t r = 0; r < n; r++)
                        norm += v[r] * v[r];
                norm = sqrt(norm);
                for (uint64_t r = 0; r < n; r++)
                        v[r] = norm > 0 ? v[r] / norm : 0;
        }
}

/* Y (rows × k, by columns) = D · Z (Z: cols × k, by columns), D rows × cols by rows. */
static void mul_d(const double *d, uint64_t rows, uint64_t cols, const double *z, unsigned k, double *y) {
        for (uint64_t r = 0; r < rows; r++) {
                const double *row = d + r * cols;
                for (unsigned j = 0; j < k; j++) {
                        const double *zj = z + (uint64_t) j * cols;
                        double s = 0;
                        for (uint64_t c = 0; c < cols; c++)
                                s += row[c] * zj[c];
                        y[(uint64_t) j * rows + r] = s;
                }
        }
}

/* Z (cols × k, by columns) = Dᵀ · Y (Y: rows × k, by columns). */
static void mul_dt(const double *d, uint64_t rows, uint64_t cols, const double *y, unsigned k, double *z) {
        memset(z, 0, (size_t) (cols * k) * sizeof(double));
        for (uint64_t r = 0; r < rows; r++) {
                const double *row = d + r * cols;
                for (unsigned j = 0; j < k; j++) {
                        const double yj = y[(uint64_t) j * rows + r];
                        double *zj = z + (uint64_t) j * cols;
                        for (uint64_t c = 0; c < cols; c++)
                                zj[c] += yj * row[c];
                }
        }
}

/* Cyclic Jacobi on the symmetric @k × @k @a: eigenvalues on its diagonal, eigenvectors in @v's columns. */
static void jacobi(double *a, double *v, unsigned k) {
        for (unsigned i = 0; i < k; i++)
                for (unsigned j = 0; j < k; j++)
                        v[i * k + j] = i == j;
        for (int sweep = 0; sweep < 60; sweep++) {
                double off = 0;
                for (unsigned i = 0; i < k; i++)
                        for (unsigned j = i + 1; j < k; j++)
                                off += a[i * k + j] * a[i * k + j];
                if (off < 1e-300)
                        break;
                for (unsigned p = 0; p < k; p++)
                        for (unsigned q = p + 1; q < k; q++) {
                                double apq = a[p * k + q];
                                if (fabs(apq) < 1e-300)
                                        continue;
                                double theta = (a[q * k + q] - a[p * k + p]) / (2 * apq);
                                double t = (theta >= 0 ? 1 : -1) / (fabs(theta) + sqrt(theta * theta + 1));
                                double c = 1 / sqrt(t * t + 1), s = t * c;
                                for (unsigned r = 0; r < k; r++) {
                                        double arp = a[r * k + p], arq = a[r * k + q];
                                        a[r * k + p] = c * arp - s * arq;
                                        a[r * k + q] = s * arp + c * arq;
                                }
                                for (unsigned r = 0; r < k; r++) {
                                        double apr = a[p * k + r], aqr = a[q * k + r];
                                        a[p * k + r] = c * apr - s * aqr;
                                        a[q * k + r] = s * apr + c * aqr;
                                }
                                for (unsigned r = 0; r < k; r++) {
                                        double vrp = v[r * k + p], vrq = v[r * k + q];
                                        v[r * k + p] = c * vrp - s * vrq;
                                        v[r * k + q] = s * vrp + c * vrq;
                                }
                        }
        }
}

/* A fixed sketch: ±1 from a xorshift stream (a Rademacher matrix serves a range finder as well as a Gaussian). */
static void sketch(double *z, uint64_t n) {
        uint64_t x = 0x9e3779b97f4a7c15u;
        for (uint64_t i = 0; i < n; i++) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                z[i] = (x >> 63) ? 1.0 : -1.0;
        }
}

int lowrank_find(const float *base, const float *target, uint64_t rows, uint64_t cols, unsigned max_rank, double ulp,
                 float **ret_p, float **ret_q, unsigned *ret_rank) {
        uint64_t n = rows * cols;
        unsigned k;

        if (rows == 0 || cols == 0 || max_rank == 0)
                return 0;
        if (rows > LOWRANK_MAX_ELEMENTS || cols > LOWRANK_MAX_ELEMENTS || n > LOWRANK_MAX_ELEMENTS)
                return -E2BIG;
        if (max_rank > LOWRANK_MAX_RANK)
                max_rank = LOWRANK_MAX_RANK;
        k = max_rank + OVERSAMPLE;
        if (k > rows)
                k = (unsigned) rows;
        if (k > cols)
                k = (unsigned) cols;

        _cleanup_free_ double *d = malloc((size_t) n * sizeof(double));
        _cleanup_free_ double *y = malloc((size_t) (rows * k) * sizeof(double));
        _cleanup_free_ double *z = malloc((size_t) (cols * k) * sizeof(double));
        _cleanup_free_ double *g = malloc((size_t) k * k * sizeof(double)), *v = malloc((size_t) k * k * sizeof(double));
        if (!d || !y || !z || !g || !v)
                return -ENOMEM;

        double total = 0, tsq = 0;
        for (uint64_t i = 0; i < n; i++) {
                d[i] = (double) target[i] - (double) base[i];
                total += d[i] * d[i];
                tsq += (double) target[i] * (double) target[i];
        }
        if (total == 0)
                return 0;
        /* The residual a rank may leave: what the target's rounding loses anyway. */
        double allowed = ulp * sqrt(tsq / (double) n);
        allowed = allowed * allowed * (double) n;

        sketch(z, cols * k);
        mul_d(d, rows, cols, z, k, y);
        orthonormalize(y, rows, k);
        for (int it = 0; it < POWER_ITERATIONS; it++) {
                mul_dt(d, rows, cols, y, k, z);
                orthonormalize(z, cols, k);
                mul_d(d, rows, cols, z, k, y);
                orthonormalize(y, rows, k);
        }
        /* B = Yᵀ D (k × cols, rows of z's columns): its Gram matrix's eigenpairs are the singular values. */
        mul_dt(d, rows, cols, y, k, z);         /* z's column j = (Yᵀ D)'s row j */
        for (unsigned i = 0; i < k; i++)
                for (unsigned j = 0; j < k; j++) {
                        double s = 0;
                        for (uint64_t c = 0; c < cols; c++)
                                s += z[(uint64_t) i * cols + c] * z[(uint64_t) j * cols + c];
                        g[i * k + j] = s;
                }
        jacobi(g, v, k);
        /* Eigenvalues, largest first (indices into v's columns). */
        unsigned order[LOWRANK_MAX_RANK + OVERSAMPLE];
        for (unsigned i = 0; i < k; i++)
                order[i] = i;
        for (unsigned i = 0; i < k; i++)
                for (unsigned j = i + 1; j < k; j++)
                        if (g[order[j] * k + order[j]] > g[order[i] * k + order[i]]) {
                                unsigned t = order[i];
                                order[i] = order[j];
                                order[j] = t;
                        }
        /* The smallest rank whose residual is within the target's own rounding. */
        double kept = 0;
        unsigned rank = 0;
        for (unsigned r = 1; r <= max_rank && r <= k; r++) {
                kept += g[order[r - 1] * k + order[r - 1]];
                if (total - kept <= allowed) {
                        rank = r;
                        break;
                }
        }
        if (rank == 0 || (rows + cols) * rank >= n)
                return 0;

        /* P = Y · U_r (rows × rank), Q = U_rᵀ · B (rank × cols). */
        _cleanup_free_ float *p = malloc((size_t) (rows * rank) * sizeof(float));
        _cleanup_free_ float *q = malloc((size_t) (rank * cols) * sizeof(float));
        if (!p || !q)
                return -ENOMEM;
        for (uint64_t r = 0; r < rows; r++)
                for (unsigned j = 0; j < rank; j++) {
                        double s = 0;
                        for (unsigned i = 0; i < k; i++)
                                s += y[(uint64_t) i * rows + r] * v[i * k + order[j]];
                        p[r * rank + j] = (float) s;
                }
        for (unsigned j = 0; j < rank; j++)
                for (uint64_t c = 0; c < cols; c++) {
                        double s = 0;
                        for (unsigned i = 0; i < k; i++)
                                s += v[i * k + order[j]] * z[(uint64_t) i * cols + c];
                        q[(uint64_t) j * cols + c] = (float) s;
                }
        *ret_p = TAKE_PTR(p);
        *ret_q = TAKE_PTR(q);
        *ret_rank = rank;
        return 1;
}
