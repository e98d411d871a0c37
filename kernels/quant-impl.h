/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Internal contract between the quantizer front end (quant.c), the per-ISA implementations
 * (one file each, compiled with their own target flags and -ffp-contract=off) and the
 * dispatcher (dispatch.c). Not installed, not used outside kernels/ and the tests.
 *
 * Bit-exactness with ggml rests on three rules every implementation keeps:
 *   - the same IEEE single-precision operations in the same order for every value that
 *     reaches the output (SIMD runs independent blocks or sub-blocks in its lanes and never
 *     reorders a sum; no fused multiply-add);
 *   - float to integer conversions behave like x86's cvttss2si: truncation, and INT32_MIN for
 *     NaN or out of range (quant_cvtt() below), then the low byte where ggml casts to 8 bits;
 *   - ggml's own rounding helpers: nearest_int()'s 1.5 * 2^23 trick, and its software
 *     FP32 -> FP16 / BF16 conversions (round to nearest even).
 */

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define QK_SMALL 32             /* elements per block: Q4_0 ... Q8_0 */
#define QK_K 256                /* elements per super-block: K-quants */

/* Block sizes in bytes (ggml-common.h's block_* structs). */
#define Q4_0_BYTES 18           /* d, qs[16] */
#define Q4_1_BYTES 20           /* d, m, qs[16] */
#define Q5_0_BYTES 22           /* d, qh[4], qs[16] */
#define Q5_1_BYTES 24           /* d, m, qh[4], qs[16] */
#define Q8_0_BYTES 34           /* d, qs[32] */
#define Q2_K_BYTES 84           /* scales[16], qs[64], d, dmin */
#define Q3_K_BYTES 110          /* hmask[32], qs[64], scales[12], d */
#define Q4_K_BYTES 144          /* d, dmin, scales[12], qs[128] */
#define Q5_K_BYTES 176          /* d, dmin, scales[12], qh[32], qs[128] */
#define Q6_K_BYTES 210          /* ql[128], qh[64], scales[16], d */

/* ggml type ids (common/artifact/ggml.h's GGML_TYPE_*; kernels/ does not include common/). */
enum {
        TYPE_F32 = 0,
        TYPE_F16 = 1,
        TYPE_Q4_0 = 2,
        TYPE_Q4_1 = 3,
        TYPE_Q5_0 = 6,
        TYPE_Q5_1 = 7,
        TYPE_Q8_0 = 8,
        TYPE_Q2_K = 10,
        TYPE_Q3_K = 11,
        TYPE_Q4_K = 12,
        TYPE_Q5_K = 13,
        TYPE_Q6_K = 14,
        TYPE_BF16 = 30,
};

/* Every quantized format an implementation may provide; F32 is a copy in quant.c. */
typedef enum QuantKind {
        QUANT_Q4_0,
        QUANT_Q4_1,
        QUANT_Q5_0,
        QUANT_Q5_1,
        QUANT_Q8_0,
        QUANT_Q2_K,
        QUANT_Q3_K,
        QUANT_Q4_K,
        QUANT_Q5_K,
        QUANT_Q6_K,
        QUANT_F16,
        QUANT_BF16,
        _QUANT_KIND_MAX,
} QuantKind;

/*
 * Quantize @nblocks consecutive blocks (32 or 256 floats each; one float for F16/BF16) from
 * @src into @dst. Blocks of one row and of consecutive rows are laid out the same way, so a
 * whole chunk of rows is one call. @src and @dst need no alignment.
 */
typedef void (*QuantBlocksFn)(const float *src, uint8_t *dst, size_t nblocks);

/* Dequantize @nblocks blocks of one kind from @src into @dst (dequant.h's arithmetic). */
typedef void (*DequantBlocksFn)(const uint8_t *src, float *dst, size_t nblocks);

/*
 * Quantize @nblocks consecutive K-quant blocks of one row from @src into @dst with the
 * importance matrix @qw: QK_K values a block, advancing with @src (quant-weighted.c's
 * arithmetic, as ggml's quantize_row_*_impl).
 */
typedef void (*QuantWeightedFn)(const float *src, const float *qw, uint8_t *dst, size_t nblocks);

/* product.h's rank_product(). */
typedef void (*RankProductFn)(const float *p, const float *q, size_t stride, size_t rank, float *acc, size_t n);

/*
 * One implementation: a quantizer and a dequantizer per kind, an importance-weighted quantizer
 * per kind, and the rank-r product of lora spans; NULL where the generic one serves (the
 * generic weighted quantizers are quant-weighted.c's, outside any table).
 */
typedef struct QuantKernels {
        QuantBlocksFn fn[_QUANT_KIND_MAX];
        DequantBlocksFn dequant[_QUANT_KIND_MAX];
        QuantWeightedFn weighted[_QUANT_KIND_MAX];
        RankProductFn product;
} QuantKernels;

extern const QuantKernels quant_kernels_generic;
#if defined(__x86_64__)
extern const QuantKernels quant_kernels_avx2;
#elif defined(__aarch64__)
extern const QuantKernels quant_kernels_neon;
#endif

/* The implementation in use (dispatch.c), never NULL. */
const QuantKernels *quant_dispatch(void);

/* The generic kernels, for the SIMD files' tails and fallbacks. */
void quant_q4_0_generic(const float *src, uint8_t *dst, size_t nblocks);
void quant_q4_1_generic(const float *src, uint8_t *dst, size_t nblocks);
void quant_q5_0_generic(const float *src, uint8_t *dst, size_t nblocks);
void quant_q5_1_generic(const float *src, uint8_t *dst, size_t nblocks);
void quant_q8_0_generic(const float *src, uint8_t *dst, size_t nblocks);
void quant_q2_k_generic(const float *src, uint8_t *dst, size_t nblocks);
void quant_q3_k_generic(const float *src, uint8_t *dst, size_t nblocks);
void quant_q4_k_generic(const float *src, uint8_t *dst, size_t nblocks);
void quant_q5_k_generic(const float *src, uint8_t *dst, size_t nblocks);
void quant_q6_k_generic(const float *src, uint8_t *dst, size_t nblocks);
void quant_f16_generic(const float *src, uint8_t *dst, size_t n);
void quant_bf16_generic(const float *src, uint8_t *dst, size_t n);

/*
 * The K-quant steps after the per-sub-block scale searches (quant-generic-k.c), which the
 * SIMD files share: Q4_K/Q5_K quantize the 8 sub-block @scales and @mins to 6 bits, write
 * d, dmin and the packed scales at @hdr and requantize @L (levels 0..@nmax) with the rounded
 * scales; Q6_K does the same for its 16 8-bit scales and also packs the whole block.
 */
void quant_k4_finish(const float *x, const float scales[8], const float mins[8], int nmax, uint8_t *hdr,
                     uint8_t L[QK_K]);
void quant_q6_k_finish(const float *x, const float scales[16], int8_t L[QK_K], uint8_t *dst);

/*
 * The steps the importance-weighted quantizers (quant-weighted.c) share with these: a Q4_K/Q5_K
 * header from its scales d, dmin and 6-bit levels; requantizing a super-block with the scales
 * its header holds (Q4_K/Q5_K levels into @L; Q2_K and Q3_K also pack the levels, and
 * Q3_K's hmask); one Q3_K sub-block's 6-bit scale @l into the 12 scale bytes.
 */
void quant_k4_set_scales(uint8_t *hdr, float d, float dmin, const uint8_t ls[8], const uint8_t lm[8]);
void quant_k4_requantize(const float *x, const uint8_t *hdr, int nmax, uint8_t L[QK_K]);
void quant_q2_k_requantize(const float *x, uint8_t *dst, uint8_t L[QK_K]);
void quant_q3_k_requantize(const float *x, uint8_t *dst, int8_t L[QK_K]);
void quant_q3_k_set_scale(uint8_t sc[12], unsigned j, int l);

/*
 * The weighted Q4_K/Q5_K (quant-weighted.c) around their sub-block searches, shared with the
 * SIMD files: σ² of the super-block at @x (2 Σx² / QK_K, in order); then, from the 8
 * sub-blocks' @scales, @mins (negated minima) and weight sums @sw, the 6-bit scales by
 * make_qp_quants, the header at @dst, requantized levels @L (0..@nmax: 15 or 31) packed.
 */
float quant_k4_sigma2(const float *x);
void quant_k4_weighted_finish(const float *x, const float scales[8], const float mins[8], const float sw[8],
                              int nmax, uint8_t *dst, uint8_t L[QK_K]);

/*
 * make_qkx2_quants: scale and minimum of one sub-block of @n values for levels 0..@nmax,
 * weighted by @w: a first guess from the range, then @nstep + 1 candidate scales around it,
 * keeping the one with the smallest weighted error (squared, or absolute with @mad). Returns
 * the scale, the negated minimum in @ret_min, the levels in @L. For finite input it is also
 * make_qkx3_quants (which ggml's imatrix quantizers call: same search, same sums).
 */
float quant_make_qkx(unsigned n, int nmax, const float *x, const float *w, uint8_t *L, float *ret_min, float rmin,
                     float rdelta, int nstep, bool mad);

/* make_qx_quants (rmse_type 1): weights @qw, or x² when NULL; @L gets the levels + @nmax. */
float quant_make_qx(unsigned n, int nmax, const float *x, int8_t *L, const float *qw);

/* Q4_K / Q5_K: the levels @L (0..15 / 0..31) into the block's quant bytes. */
void quant_q4_k_pack(const uint8_t L[QK_K], uint8_t *dst);
void quant_q5_k_pack(const uint8_t L[QK_K], uint8_t *dst);

/*
 * The K-quant kernels of the SIMD files (quant-*-k.c), plain and weighted, and their
 * dequantizers and rank products (predict-*.c), for their QuantKernels tables.
 */
#if defined(__x86_64__)
void quant_q4_k_avx2(const float *src, uint8_t *dst, size_t nblocks);
void quant_q5_k_avx2(const float *src, uint8_t *dst, size_t nblocks);
void quant_q6_k_avx2(const float *src, uint8_t *dst, size_t nblocks);
void quant_q4_k_weighted_avx2(const float *src, const float *qw, uint8_t *dst, size_t nblocks);
void quant_q5_k_weighted_avx2(const float *src, const float *qw, uint8_t *dst, size_t nblocks);
void quant_q6_k_weighted_avx2(const float *src, const float *qw, uint8_t *dst, size_t nblocks);
void dequant_q8_0_avx2(const uint8_t *src, float *dst, size_t nblocks);
void dequant_q4_0_avx2(const uint8_t *src, float *dst, size_t nblocks);
void rank_product_avx2(const float *p, const float *q, size_t stride, size_t rank, float *acc, size_t n);
#elif defined(__aarch64__)
void quant_q4_k_neon(const float *src, uint8_t *dst, size_t nblocks);
void quant_q5_k_neon(const float *src, uint8_t *dst, size_t nblocks);
void quant_q6_k_neon(const float *src, uint8_t *dst, size_t nblocks);
void quant_q4_k_weighted_neon(const float *src, const float *qw, uint8_t *dst, size_t nblocks);
void quant_q5_k_weighted_neon(const float *src, const float *qw, uint8_t *dst, size_t nblocks);
void quant_q6_k_weighted_neon(const float *src, const float *qw, uint8_t *dst, size_t nblocks);
void dequant_q8_0_neon(const uint8_t *src, float *dst, size_t nblocks);
void dequant_q4_0_neon(const uint8_t *src, float *dst, size_t nblocks);
void rank_product_neon(const float *p, const float *q, size_t stride, size_t rank, float *acc, size_t n);
#endif

/* The generic rank product, for the SIMD files' tails (product.c). */
void rank_product_generic(const float *p, const float *q, size_t stride, size_t rank, float *acc, size_t n);

/* ---- scalar helpers shared by every implementation ----------------------------------- */

static inline uint32_t quant_f32_bits(float f) {
        uint32_t u;
        memcpy(&u, &f, sizeof(u));
        return u;
}

static inline float quant_f32_from_bits(uint32_t u) {
        float f;
        memcpy(&f, &u, sizeof(f));
        return f;
}

/* ggml's FP32 -> FP16: round to nearest even through a float addition, overflow to inf. */
static inline uint16_t quant_fp16(float f) {
        float base = (fabsf(f) * 0x1.0p+112f) * 0x1.0p-110f;
        uint32_t w = quant_f32_bits(f), shl1_w = w + w, sign = w & UINT32_C(0x80000000);
        uint32_t bias = shl1_w & UINT32_C(0xff000000);

        if (bias < UINT32_C(0x71000000))
                bias = UINT32_C(0x71000000);
        base = quant_f32_from_bits((bias >> 1) + UINT32_C(0x07800000)) + base;
        uint32_t bits = quant_f32_bits(base);
        uint32_t nonsign = ((bits >> 13) & UINT32_C(0x7c00)) + (bits & UINT32_C(0x0fff));
        return (uint16_t) ((sign >> 16) | (shl1_w > UINT32_C(0xff000000) ? UINT32_C(0x7e00) : nonsign));
}

/* FP16 -> FP32, exact. */
static inline float quant_fp16_to_f32(uint16_t h) {
        uint32_t w = (uint32_t) h << 16, sign = w & UINT32_C(0x80000000), two_w = w + w;
        float normalized = quant_f32_from_bits((two_w >> 4) + (UINT32_C(0xe0) << 23)) * 0x1.0p-112f;
        float denormalized = quant_f32_from_bits((two_w >> 17) | (UINT32_C(126) << 23)) - 0.5f;

        return quant_f32_from_bits(sign | quant_f32_bits(two_w < (UINT32_C(1) << 27) ? denormalized : normalized));
}

/* ggml's FP32 -> BF16: round to nearest even; a NaN stays a (quiet) NaN. */
static inline uint16_t quant_bf16(float f) {
        uint32_t u = quant_f32_bits(f);

        if ((u & UINT32_C(0x7fffffff)) > UINT32_C(0x7f800000))
                return (uint16_t) ((u >> 16) | 64);
        return (uint16_t) ((u + (UINT32_C(0x7fff) + ((u >> 16) & 1))) >> 16);
}

/* Round to nearest, ties to even, as ggml's nearest_int(): exact for |f| <= 2^22; beyond
 * that the same (meaningless but deterministic) bits ggml computes. */
static inline int quant_nearest_int(float f) {
        return (int) (quant_f32_bits(f + 12582912.f) & UINT32_C(0x007fffff)) - 0x00400000;
}

/* A C float-to-integer cast as x86-64 executes it (cvttss2si): truncation toward zero,
 * INT32_MIN for NaN and out of range. */
static inline int32_t quant_cvtt(float f) {
        if (f >= -2147483648.0f && f < 2147483648.0f)
                return (int32_t) f;
        return INT32_MIN;
}

/* C's roundf() (half away from zero) without libm: exact, since x - trunc(x) is exact. */
static inline float quant_roundf(float x) {
        if (!(fabsf(x) < 0x1.0p23f))
                return x;               /* already an integer (or inf / NaN) */
        float t = (float) (int32_t) x, r = x - t;
        if (r >= 0.5f)
                t += 1.0f;
        else if (r <= -0.5f)
                t -= 1.0f;
        return t;
}

/* The low byte of that, as a cast to int8_t / uint8_t keeps it. */
static inline int quant_cvtt_i8(float f) {
        return (int8_t) (uint8_t) (uint32_t) quant_cvtt(f);
}

static inline void quant_store_le16(uint8_t *p, uint16_t v) {
        p[0] = (uint8_t) v;
        p[1] = (uint8_t) (v >> 8);
}

static inline uint16_t quant_load_le16(const uint8_t *p) {
        return (uint16_t) (p[0] | (p[1] << 8));
}
