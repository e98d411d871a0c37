/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * ggml dequantization: the block formats GGUF files store back to floats, as ggml's
 * dequantize_row_* (ggml-quants.c) define them. Types: the ones kernels/quant.h writes
 * (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, F32, F16, BF16).
 *
 * THE ARITHMETIC (a device and a producer must agree on every bit; must never change): each
 * value is computed with single-precision operations in the order ggml's C source writes
 * them, each rounded on its own (no fused multiply-add), the fp16 scales converted exactly:
 *   Q8_0  d·q                 Q4_0  d·(q − 8)          Q5_0  d·(q − 16)
 *   Q4_1  d·q + m             Q5_1  d·q + m
 *   Q2_K, Q4_K, Q5_K  (d·sc)·q − (dmin·m)    (d·sc and dmin·m per sub-block, rounded first)
 *   Q3_K  (d·(sc − 32))·q, q in −4..3          Q6_K  (d·sc)·(q − 32)
 * with q the stored level as an integer, converted to float exactly. ggml's x86-64 build of
 * the pinned npm package gives the same bits for every type (tests/oracle/quant-oracle.c); a
 * ggml built with FMA contraction may differ in the last bit where there is an addition.
 * TaskPatch's producer and devices always use this definition.
 *
 * Pure compute: nothing here allocates, performs I/O or fails on a supported type.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Whether dequantize_blocks() reads ggml type id @type. */
bool dequant_supported(uint32_t type);

/*
 * Dequantize @nblocks consecutive blocks of ggml type @type (32 or 256 elements each; one
 * element for F32, F16, BF16) from @src into @dst (nblocks × the block size floats).
 */
void dequantize_blocks(uint32_t type, const void *src, float *dst, size_t nblocks);
