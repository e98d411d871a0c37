/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The rank-r product of a lora span's prediction (common/codec/predict.h): for i < @n,
 *
 *     acc[i] = Σ_k p[k] · q[k · stride + i],   k = 0, 1, ..., rank - 1
 *
 * starting from +0.0f, each product rounded to float and then added, in that order (the
 * fold's arithmetic: no fused multiply-add). Every implementation (generic, AVX2, NEON) gives
 * the same bits: SIMD lanes hold neighbouring elements, never parts of one sum.
 *
 * Pure compute: @acc may not overlap @p or @q; nothing needs alignment.
 */

#include <stddef.h>

void rank_product(const float *p, const float *q, size_t stride, size_t rank, float *acc, size_t n);
