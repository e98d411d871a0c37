/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * A lora span's residual range-coded with the prediction's floats as context (`residual: ac` in the
 * manifest; packaging/docs/bundle-format.md). For the quantized types of the delta layouts (delta.h):
 * Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K and Q6_K.
 *
 * Why. The device predicts each element as quantize(w), w = dequantize(base) + f·P·Q. The task was
 * quantized from the float base, which the device never sees: the target's step differs from the
 * prediction's where the base's own rounding error pushes the true value across a rounding
 * boundary. How likely that is depends on where w falls between two steps: near a boundary, about
 * even odds; in the middle of a step, almost never. The plane layouts (delta.h) do not know w, and
 * code a residual of ±1 in about 1.1 bits; this coder, told w, codes it in about 0.7.
 *
 * THE WIRE FORMAT (signed bundles: must never change). A group of @len bytes is n = len / u
 * blocks of u bytes (the type's) and a tail of len % u bytes. Its coded form is: the stream's
 * length L (4 bytes, little-endian), the stream (rangecoder.h), then len - 4 - L zero bytes. A
 * group whose stream does not fit is not coded this way: the producer codes the span with the
 * plane layout. A decoder reads at most len - 4 bytes of stream, whatever L says (bytes past it
 * read as 0). The model starts afresh in every group; for each block, in order:
 *
 *  1. Its fp16 words (d; then m for q4_1 and q5_1, dmin for q2_K, q4_K and q5_K; where the
 *     block has them: delta.c's layouts), each as v = (target word - predicted word) read as
 *     int16: is v nonzero (a context per field); its sign (one per field); with b the bit
 *     length of |v|, b - 1 in unary (is b > 1, > 2, ..., > 15: one context per field and step);
 *     then the b - 1 bits of |v| below its top bit, most significant first, each with a fresh
 *     even probability. The fields: d, m (or dmin), a sub-scale, a sub-block's min.
 *  2. The K types only: its sub-scales (delta.c's order: the scales, then the mins; q6_K's int8
 *     scales + 128), each as v = target - predicted (as integers), coded as a word is, with the
 *     scale's or the min's contexts; the decoded value is taken modulo 2^(its bits).
 *  3. Its elements, in ggml's order, as the unsigned step q (q4_0: the stored nibble, 0 .. 15;
 *     q5_0: 0 .. 31 with the fifth bit from qh; q8_0: the int8 + 128; the others: as delta.c's
 *     layouts unpack them). With D and M its sub-block's scale and offset as floats, z the
 *     type's zero (q4_0 8, q5_0 16, q8_0 128, q3_K 4, q6_K 32, else 0) and w the element's
 *     predicted float, all in single precision with round-to-nearest, no fused multiply-add:
 *         i = 1 / D;  y = (w - M) · i + z;  f = floor(y + 1/2)
 *     The legacy types have one sub-block: D = d, and M = m (q4_1, q5_1) or 0. The K types'
 *     sub-block j (of 16 or 32 elements): D = d · (float) (s_j - the type's scale zero: q3_K
 *     32, q6_K 128, else 0), and M = -(dmin · (float) min_j) where the type has mins, else 0;
 *     the words and sub-scales are the target block's, just decoded.
 *     When D is 0 or not finite, y is not finite or |y| > 2^20, or f lies outside [0, 2^bits - 1]:
 *     the element's context is EDGE (32) and its guess g is the predicted block's step (clamped
 *     f when f is finite and in range of 2^20). Else g = f and the context is
 *     min(31, floor((y + 1/2 - f) · 32)): where y falls within its step, from its lower boundary.
 *     Then r = q - g (the steps as integers): is r nonzero (context: the element's); is it
 *     negative (the element's); is |r| > 1 (the element's); then |r| = 2 .. 9 in unary (one
 *     context per step, shared), and 10 and up as 8 bits of |r| - 10 with even probabilities.
 *  4. The tail: each byte's difference from the predicted byte (mod 256) as 8 bits with even
 *     probabilities.
 *
 * A residual no encoder writes (one that takes a step beyond the type's range) decodes to the step
 * masked to the type's bits: every group decodes to some bytes, and the span's digest judges them.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Whether ggml type @type has this coder (the quantized types above). */
bool predict_ac_supported(uint32_t type);

/*
 * Code @len bytes of @target (whole blocks of @type, a supported type) against @pred, the
 * prediction quantized, and @w, its floats (as many a block as the type's block size), into @len
 * bytes of @out. False when the stream does not fit.
 */
bool predict_ac_encode(uint32_t type, const float *w, const uint8_t *pred, const uint8_t *target, size_t len,
                       uint8_t *out);

/* The inverse: @len bytes of @delta into the target bytes @out (not overlapping the inputs). */
void predict_ac_decode(uint32_t type, const float *w, const uint8_t *pred, const uint8_t *delta, size_t len,
                       uint8_t *out);
