/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Block-layout-aware delta transform for a changed site (one tensor).
 *
 * A span whose new bytes T differ from the base bytes B at the same offset
 * is stored as zstd(delta_encode(B, T)) when that is smaller than zstd(T);
 * the device decodes it against the B it already holds. The transform
 * itself compresses nothing: it is a bijection on byte strings of one
 * length (for each base B, target -> delta is one-to-one and onto), so
 * decode(B, encode(B, T)) == T for every B and T, valid ggml data or not
 * (NaN scales, garbage, anything). It only rearranges and predicts, so that
 * zstd sees long runs of zeros where the target keeps the base's values.
 *
 * Streaming: a span is cut into *groups* of delta_group_bytes(layout) bytes
 * (whole units, about 64 KiB; the last group of a span may be shorter) and
 * each group is transformed on its own, so both sides need one group of
 * base, target and delta in memory. The delta stream of a span is the
 * concatenation of its groups' deltas, in order; its length is the span's.
 *
 * THE WIRE FORMAT. What follows goes into signed bundles (the layout's name
 * is in the manifest): it must never change. A new transform gets a new
 * layout name. tests/unit/check_delta.c pins it with golden digests.
 *
 * Notation. A group of `len` bytes of layout L with unit u holds
 * n = len / u whole units ("blocks") and a tail of len % u bytes. The tail
 * is empty for every span TaskPatch writes; it is still defined (step 4)
 * so that every length round-trips. Multi-byte values are little-endian.
 * zz_w(x) is the w-bit zigzag code of x mod 2^w read as a signed w-bit
 * value v: 2v for v >= 0, -2v - 1 for v < 0 (0, +1, -1, +2 -> 0, 2, 1, 4).
 * "/" truncates toward zero; bitlen(x) is the number of significant bits
 * of x >= 0 (bitlen(0) = 0).
 *
 * The delta of a group is, in this order:
 *
 *  1. Word planes. Each block has W words of w bytes at fixed offsets (the
 *     "words" column). For each word in the order listed, with
 *     z_i = zz_{8w}(target word of block i - base word of block i): the n
 *     low bytes of z_0 .. z_{n-1}, then the n next bytes, up to the top
 *     byte. (Measured on ggml's own quantizer output, fp16 scales and f16,
 *     bf16, f32 tensors: zigzag differences in byte planes compress about
 *     10-20% better than XOR or plain differences in byte planes, and far
 *     better than either left interleaved.)
 *
 *  2. Sub-scale planes (K-quants). Each block has S sub-scales s_j of b_s
 *     bits (below). Block i's S codes (Coding, below) form slice i.
 *
 *  3. Element planes. Each block has E elements q_e of b_q bits in ggml's
 *     logical order (element e is the e-th weight the block dequantizes
 *     to), in sub-blocks of E_s consecutive elements. Each sub-block's E_s
 *     codes form one slice. Slices go out in block order (slot i * E / E_s
 *     + j for sub-block j of block i), except in "ordered" layouts: there
 *     the group's sub-blocks are sorted, stably, by their bucket (below),
 *     so that sub-blocks whose values moved alike sit together.
 *
 *  4. Tail: zz_8(target byte - base byte) for each tail byte.
 *
 * Planes. Codes of b bits are laid out in bit planes of widths p_0, p_1, ...
 * (from the low bits up, summing to b). Plane k carries bits
 * [p_0 + .. + p_{k-1}, + p_k) of every code; it is the concatenation of
 * the slices in slot order, a slice of c codes taking c * p_k / 8 bytes,
 * 8 / p_k codes per byte, the first in the least significant bits. The
 * sub-scale planes of all blocks come first, then the element planes.
 *
 * Values and models. A value q (element or sub-scale) of sub-block j stands
 * for a_j * q + c_j, integers computed from the block's words and
 * sub-scales, each fp16 word h taken as the exact integer
 * F(h) = +-(e ? (1024 + m) << (e - 1) : m) (its value times 2^24; e = the
 * 5-bit exponent field, m = the 10-bit mantissa, sign from bit 15, e = 31
 * not special). Sub-scales that are scales stand for d * (s - s_zero)
 * (c = -s_zero * d), those that are mins for dmin * s (c = 0).
 *
 * Coding. With (a, c) of the base block and (a', c') of the target (the
 * target's words and sub-scales are decoded before anything that uses
 * them), 64-bit signed:
 *
 *     A = a, T = a', D = c - c'; k = bitlen(|A| | |T| | |D|)
 *     if k > 46: A /= 2^(k-46), T /= 2^(k-46), D /= 2^(k-46)
 *     R = T ? clamp(A * 2^16 / T, +-2^22) : 2^16
 *     O = T ? clamp(D * 2^16 / T, +-2^28) : 0
 *     u = R * q + O + 2^31 + 2^15       (exactly, then mod 2^32; it lies in [0, 2^32))
 *     pred = clamp(floor(u / 2^16) - 2^15, 0, 2^b - 1)
 *     flip = layout flips and (u mod 2^16) < 2^15
 *     code = zz_b(flip ? pred - target : target - pred)
 *
 * The exact prediction lies below pred when u mod 2^16 < 2^15, so the
 * target is likely below it too: flipping makes the likely residual +1.
 * An unchanged model gives R = 2^16, O = 0, pred = q: unchanged blocks code
 * to zeros. Bucket of a sub-block: 7 if T = 0; else with
 * m = max(|D|, |(A - T) * (2^b - 1) + D|): 0 if m = 0, otherwise
 * clamp(bitlen(m) - bitlen(|T|) + 8, 1, 7) (a log scale of how far the
 * sub-block's values move, from "not at all" to "half a step or more").
 *
 * Layouts (unit = bytes per block; words are fp16 unless said; E x b_q
 * elements in sub-blocks of E_s; S x b_s sub-scales; planes from the low
 * bits up):
 *
 *   name  unit words        elements and model                          flip  q planes  s planes
 *   bytes    1 1 byte       -
 *   f16      2 1 u16        -
 *   bf16     2 1 u16        -
 *   f32      4 1 u32        -
 *   i8       1 -            (below; bundle format 2 only)
 *   q4_0    18 d            32 x 4, E_s 32: a = d, c = -8a              yes   1,1,2
 *   q4_1    20 d, m         32 x 4, E_s 32: a = d, c = m                yes   1,1,2
 *   q5_0    22 d            32 x 5, E_s 32: a = d, c = -16a             yes   2,1,1,1
 *   q5_1    24 d, m         32 x 5, E_s 32: a = d, c = m                yes   2,1,1,1
 *   q8_0    34 d            32 x 8, E_s 32: a = d, c = -128a            no    2,2,2,2
 *   q2_K    84 d@80, dmin@82  256 x 2, E_s 16: a = d sc_j, c = -dmin m_j  yes  1,1   2,2
 *                           S: 16 scales sc_j, 16 mins m_j, 4 bits, s_zero 0
 *   q3_K   110 d@108        256 x 3, E_s 16: a = d (sc_j - 32), c = -4a  yes  1,1,1  4,2
 *                           S: 16 scales, 6 bits, s_zero 32
 *   q4_K   144 d@0, dmin@2  256 x 4, E_s 32: a = d sc_j, c = -dmin m_j  yes   1,1,2   4,2
 *                           S: 8 scales, 8 mins, 6 bits, s_zero 0
 *   q5_K   176 d@0, dmin@2  as q4_K, 256 x 5                           yes   2,1,1,1 4,2
 *   q6_K   210 d@208        256 x 6, E_s 16: a = d (sc_j - 128), c = -32a yes 2,2,2   4,4
 *                           S: 16 scales (the int8 scales + 128), 8 bits, s_zero 128
 *
 * i8 (int8 and uint8 tensors, unit 1): z_i = zz_8(target byte i - base
 * byte i) for each byte of the group; with m = 4 * floor(len / 4), the
 * codes z_0 .. z_{m-1} go out in four planes of 2 bits (plane k carries
 * bits 2k, 2k + 1 of every code, m / 4 bytes, four codes a byte, the first
 * in the least significant bits), then z_m .. z_{len-1} as bytes. These
 * are q8_0's element planes without its scale: a fine-tune that moves
 * values by a step or two leaves the upper planes zero and the lowest one
 * sparse, which zstd codes in about 0.8 bits a value against 1 with bytes.
 * Format-1 bundles never use it (readers shipped before it refuse names
 * they do not know), and a reader refuses it there.
 *
 * i8ac (the same tensors, unit 1; bundle format 2 only, as i8): the same
 * differences, range-coded. Planes and zstd code a value in no less than
 * about 0.8 bits, because zstd's Huffman stage gives each byte of four
 * codes a whole number of bits; a fine-tune requantized with per-channel
 * scales moves a third of the values by one step at random, which is worth
 * less than that. A group of len >= 64 bytes is: the coded stream's length
 * L (4 bytes), the stream (rangecoder.h), then len - 4 - L zero bytes (zstd
 * takes them for nearly nothing); a shorter group is coded as i8. The
 * model (delta-i8ac.c, the definition) starts afresh in every group; for
 * each element, with v the base byte read as int8 and r = target - base
 * read as int8: is r nonzero (context: how many of the last 64 were,
 * halved, at most 12); if so, is it negative (context: v's sign, v's
 * magnitude in five steps, and whether the recent differences of elements
 * with |v| >= 16 leaned with v's sign or against it); is |r| > 1 (context:
 * the last 64's activity in four steps); then |r| = 2 .. 9 in unary, and
 * 10 and up as 7 plain bits of |r| - 10. These contexts are where a
 * per-channel requantization's steps go: moved channels move their large
 * values, all one way. When the coded stream does not fit the group (data
 * with nothing to predict), the producer codes the span as i8.
 *
 * i8acp (unit 1; bundle format 2 only): i8ac for a group that also holds
 * float32 values (an ONNX graph's scales among its int8 weights), with
 * rules that predict some floats from floats before them. A group of
 * len >= 64 bytes is: the coded stream's length L (4 bytes), the rule count
 * R (1 byte, at most DELTA_I8ACP_RULES_MAX), R rules of 16 bytes {dst, n,
 * src, c} (four little-endian 32-bit words; c is a float32's bits), the
 * stream, then zeros; a shorter group is coded as i8. The rules are valid
 * when n >= 1, src + 4n <= dst, dst + 4n <= len, and each dst is at or
 * after the end of the rule before; a group whose rules are not valid
 * decodes to its base bytes (the span's digest refuses it). The stream is
 * i8ac's, element by element, with one change: element i's "base byte",
 * from which its difference is taken and its contexts are read, is the
 * prediction where a rule covers i: for float k of a rule, the four bytes
 * of float32(c * x) with x the float at src + 4k of the group's target
 * bytes (decoded already: the source lies before), computed in single
 * precision with round-to-nearest, little-endian; where that product is a
 * NaN, the base bytes. delta_encode() writes no rules; delta_encode_floats()
 * looks for them among the float runs it is told of: for each run, the
 * earlier run of the same count that predicts most of its floats exactly
 * (at least half, and 8), the constant taken from the first pair of
 * finite nonzero floats (their quotient and its nearest floats).
 *
 * The K-quants are ordered, the others are not. Words of q4_0 .. q8_0 are
 * at offset 0 (m at 2). Elements and sub-scales are where ggml's
 * dequantize_row_* reads them (ggml/src/ggml-common.h, ggml-quants.c):
 * q8_0 elements are the int8 values + 128; q5_0/q5_1 take bit 4 of element
 * e from bit e of qh; q3_K elements are (2 low bits) | (hmask bit) << 2 and
 * q5_K ones (nibble) | (qh bit) << 4, bit e / 32 of byte e % 32; the packed
 * 6-bit scales of q3_K and of q4_K/q5_K unpack as ggml unpacks them. The
 * models only predict: any bytes round-trip, ggml data just predicts well.
 */

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "macro.h"

typedef enum DeltaLayout {
        DELTA_BYTES,
        DELTA_Q4_0,
        DELTA_Q4_1,
        DELTA_Q5_0,
        DELTA_Q5_1,
        DELTA_Q8_0,
        DELTA_Q2_K,
        DELTA_Q3_K,
        DELTA_Q4_K,
        DELTA_Q5_K,
        DELTA_Q6_K,
        DELTA_F16,
        DELTA_BF16,
        DELTA_F32,
        DELTA_I8,               /* bundle format 2 only: format-1 readers do not know it */
        DELTA_I8AC,             /* bundle format 2 only */
        DELTA_I8ACP,            /* bundle format 2 only */
        _DELTA_LAYOUT_MAX,
        _DELTA_LAYOUT_INVALID = -EINVAL,
} DeltaLayout;

/* Target size of a group; delta_group_bytes() rounds it down to whole units. */
#define DELTA_GROUP_TARGET 65536u

/* The stable name of @l ("bytes", "q4_0", "q4_K", "f16", ...), or NULL when @l is out of range. */
const char *delta_layout_to_string(DeltaLayout l);

/* The layout named @s (exact, case-sensitive: names are wire format), or _DELTA_LAYOUT_INVALID. */
DeltaLayout delta_layout_from_string(const char *s);

/* The layout for a tensor of ggml type @ggml_type: its own for the types above, DELTA_BYTES for every other id. */
DeltaLayout delta_layout_for_ggml(uint32_t ggml_type);

/*
 * The layout for an ONNX tensor of TensorProto.DataType @onnx_data_type:
 * FLOAT -> f32, FLOAT16 -> f16, BFLOAT16 -> bf16, everything else
 * (int8, uint8, other integers, unknown ids) -> bytes.
 */
DeltaLayout delta_layout_for_onnx(int32_t onnx_data_type);

/* Bytes per block of @l; a span coded with @l must be a whole number of units. 0 when @l is out of range. */
size_t delta_unit(DeltaLayout l);

/* Bytes per independently coded group of @l: the most whole units that fit DELTA_GROUP_TARGET. 0 when out of range. */
size_t delta_group_bytes(DeltaLayout l);

/*
 * A quantized layout's blocks, as other coders see them (predict-ac.c): @n_words fp16 words at
 * @word_off (d, then m or dmin); @n_q elements, each a step of @q_bits (an element stands for
 * d · (step - @q_zero), less its sub-block's min, or plus the word m); sub-blocks of @q_sub
 * elements, with @n_s sub-scales of @s_bits: n_q / q_sub scales (standing for s - @s_zero),
 * then as many mins when n_s says so.
 */
typedef struct DeltaBlocks {
        uint16_t unit;
        uint8_t n_words, word_off[2];
        uint16_t n_q;
        uint8_t q_bits, q_sub, q_zero;
        uint8_t n_s, s_bits, s_zero;
} DeltaBlocks;

/* @l's blocks into @ret; false when @l is not a quantized layout (q4_0 .. q8_0, q2_K .. q6_K). */
bool delta_blocks(DeltaLayout l, DeltaBlocks *ret);

/* A block's element steps into @q (n_q bytes, in ggml's element order) and its sub-scales into
 * @s (n_s bytes), and back: packing writes those fields only, the words stay. @l quantized. */
void delta_blocks_unpack(DeltaLayout l, const uint8_t *blk, uint8_t *q, uint8_t *s);
void delta_blocks_pack(DeltaLayout l, const uint8_t *q, const uint8_t *s, uint8_t *blk);

/*
 * Transform one group: @len bytes of @base and @target into @len bytes of
 * @out. @len should be at most delta_group_bytes(l) and a whole number of
 * units (every span TaskPatch writes is cut that way); other lengths are
 * still defined (see the tail above) and round-trip. @out must not overlap
 * @base or @target. An out-of-range @l is treated as DELTA_BYTES. Returns
 * false only for i8ac and i8acp, when the group's coded form does not fit @len
 * bytes (incompressible differences): the producer codes that span as i8 instead.
 */
bool delta_encode(DeltaLayout l, const uint8_t *base, const uint8_t *target, size_t len, uint8_t *out);

/* i8acp: the most rules at the head of a group. */
#define DELTA_I8ACP_RULES_MAX 16u

/* float32 values in a group: @count of them from byte @offset (the group's), little-endian. */
typedef struct DeltaFloatRun {
        uint32_t offset, count;
} DeltaFloatRun;

/*
 * delta_encode(), told where the group holds float32 values (@runs, by offset, not overlapping):
 * i8acp then looks for rules among them (above). Every other layout ignores @runs.
 */
bool delta_encode_floats(DeltaLayout l, const uint8_t *base, const uint8_t *target, size_t len,
                         const DeltaFloatRun *runs, size_t n_runs, uint8_t *out);

/* The inverse: from @base and a group's @delta, the target bytes into @out (not overlapping either input). */
void delta_decode(DeltaLayout l, const uint8_t *base, const uint8_t *delta, size_t len, uint8_t *out);
