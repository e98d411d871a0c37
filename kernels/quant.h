/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * ggml quantization: float rows to the block formats GGUF files store, byte for byte what
 * ggml's reference quantizer (ggml_quantize_chunk without an importance matrix) writes for
 * the same floats. Types: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, and
 * the float types F32, F16, BF16 (F16 and BF16 round to nearest even, as ggml does).
 *
 * Pure compute: nothing here allocates, performs I/O or fails on supported input. The
 * fastest implementation the CPU supports is chosen once (dispatch.h, family "quant");
 * every implementation gives bit-identical bytes, on every architecture.
 *
 * Where ggml's own bytes depend on the CPU it was compiled for — blocks so tiny (float
 * denormals) or huge that a scale's reciprocal overflows and ggml casts inf/NaN to an 8-bit
 * integer, which C leaves undefined — these functions write what x86-64 ggml writes
 * (cvttss2si: INT32_MIN, low byte 0), on Arm too. Ordinary weights never get there.
 * tests/oracle/quant-oracle.c checks all of it against ggml's x86-64 library.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Whether quantize_rows() can produce ggml type id @type (common/artifact/ggml.h's GGML_TYPE_*). */
bool quant_supported(uint32_t type);

/*
 * Quantize @nrows rows of @n_per_row floats each from @src into @dst, as ggml_quantize_chunk
 * (type, src, dst, 0, nrows, n_per_row, NULL) does. @n_per_row must be a multiple of the
 * type's block size (32, or 256 for K-quants) and @type supported: callers check with
 * quant_supported() and common/artifact/ggml.h's block size. Returns the bytes written:
 * nrows * the row size. Input must be finite (no NaN, no infinity).
 */
size_t quantize_rows(uint32_t type, const float *src, void *dst, size_t nrows, size_t n_per_row);

/* Whether @type has a quantizer that takes an importance matrix (kernels/quant-weighted.c):
 * Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K. ggml ignores it for the others. */
bool quant_weighted_supported(uint32_t type);

/*
 * quantize_rows() with an importance matrix, as ggml_quantize_chunk(type, src, dst, 0, nrows,
 * n_per_row, weights) does: @weights holds @n_per_row values (llama.cpp's imatrix row of the
 * tensor: the mean squared activation of each input column), the same for every row, all
 * finite and none negative. Types quant_weighted_supported() refuses, and @weights NULL, are
 * quantize_rows(). Returns the bytes written.
 */
size_t quantize_rows_weighted(uint32_t type, const float *src, void *dst, size_t nrows, size_t n_per_row,
                              const float *weights);
