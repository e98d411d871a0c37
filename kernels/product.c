/* SPDX-License-Identifier: MIT */
/* The rank-r product (product.h): the generic loop and the dispatch. Built with -ffp-contract=off. */

#include "product.h"
#include "quant-impl.h"

void rank_product_generic(const float *p, const float *q, size_t stride, size_t rank, float *acc, size_t n) {
        for (size_t i = 0; i < n; i++)
                acc[i] = 0.0f;
        for (size_t k = 0; k < rank; k++) {
                const float pk = p[k], *qk = q + k * stride;
                for (size_t i = 0; i < n; i++) {
                        float prod = pk * qk[i];
                        acc[i] = acc[i] + prod;
                }
        }
}

void rank_product(const float *p, const float *q, size_t stride, size_t rank, float *acc, size_t n) {
        RankProductFn fn = quant_dispatch()->product;

        (fn ? fn : rank_product_generic)(p, q, stride, rank, acc, n);
}
