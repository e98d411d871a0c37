/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The prediction of a `lora` span: a changed tensor rebuilt from the base tensor the device
 * already holds and the LoRA factors the bundle carries,
 *
 *     predicted = quantize(dequantize(base) + f · P · Q)
 *
 * for a tensor of @out rows of @in elements, P = [out][rank] and Q = [rank][in] (llama.cpp's
 * lora_b and lora_a; token_embd's swapped, see common/model/fold.h), f the fold's factor. The
 * bundle then codes only the residual: delta_encode(layout, predicted, target).
 *
 * THE ARITHMETIC (the producer's and every device's; must never change):
 *   - dequantize as kernels/dequant.h defines it;
 *   - per element, acc = +0.0f, then for k = 0, 1, ..., rank - 1: acc = acc + P[o][k] · Q[k][i]
 *     (the product rounded to float, then the sum), then w = x + f · acc (the product
 *     rounded, then the sum): common/model/fold.h's fold, no fused multiply-add; a w that is
 *     NaN or infinite becomes +0.0f (the quantizers take finite floats);
 *   - quantize with kernels/quant.h: ggml's reference quantizers, or, when the span carries
 *     the importance row the target was quantized with (llama-imatrix's values for the tensor,
 *     @in floats), quantize_rows_weighted() with it, row by row as llama-quantize does.
 * Without an importance row every block is predicted on its own (ggml quantizes block by
 * block), so a span may start at any block of the tensor and a device may predict it group by
 * group. With one, Q4_0, Q4_1, Q5_0 and Q5_1 weigh each block by the whole row's mean square:
 * such a span is whole rows, and its groups are whole rows (lora_shape_group_bytes()).
 *
 * The factors are stored in the bundle as the adapter stores them (F32, F16 or BF16), or as
 * I8 (below), and converted to floats exactly. Memory: the factors as floats ((in + out) · rank,
 * at most PREDICT_MAX_FACTOR_FLOATS) and one group's floats.
 *
 * I8 FACTORS: a factor of rank components, each with a step of its own, a power of two. A
 * component is a column of P (its rank-th elements) and a row of Q. The factor's bytes are its
 * rank steps' exponents first (int8, 2^e with -126 <= e <= 127, in component order), then one
 * int8 k per element in the factor's own order; the element is k · 2^e, exact in float. The
 * producer rounds the adapter's factors to it: a quantized tensor's step is far coarser than the
 * rounding, the residual takes the few elements that move, and an int8 costs a quarter of an F32.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "macro.h"

#define PREDICT_MAX_RANK 1024
#define PREDICT_MAX_FACTOR_FLOATS (1u << 22)    /* 16 MiB as floats: a device's cap on one span's factors */

typedef struct LoraShape {
        uint32_t type;          /* the tensor's ggml type, the base's and the target's */
        uint64_t in, out;       /* elements per row (ne0), rows (ne1) */
        uint64_t rank;
        uint32_t a_type, b_type;        /* how lora_a and lora_b are stored: GGML_TYPE_F32, _F16, _BF16, _I8 */
        bool embd;              /* token_embd.weight: lora_a is P (ne [rank, out]), lora_b is Qᵀ (ne [rank, in]) */
        float factor;
        bool importance;        /* the frame carries @in importance values (F32) after the factors */
        bool ac;                /* the residual is range-coded with the prediction's floats (predict-ac.h) */
} LoraShape;

/*
 * Check @s: a type dequant_supported() and quant_supported() both know, @in a whole number of
 * its blocks, 1 ≤ rank ≤ PREDICT_MAX_RANK, float factor types, a finite factor, the factors'
 * floats within PREDICT_MAX_FACTOR_FLOATS; an importance row only for a type whose quantizer
 * takes one (quant_weighted_supported()), and a row no larger than one group of the type's
 * delta layout. 0 or -EBADMSG with a message naming what is wrong.
 */
_warn_unused_result_ int lora_shape_check(const LoraShape *s, TpError *err);

/* What a span's frame carries before its residual: lora_a and lora_b as stored, then the
 * importance row (F32) if any; lora_a's bytes alone. */
uint64_t lora_shape_factor_bytes(const LoraShape *s);
uint64_t lora_shape_a_bytes(const LoraShape *s);
/* Units of lora_b (@b) or lora_a as stored, each its type's size: its elements, and for an I8
 * factor its rank steps ahead of them. */
uint64_t lora_shape_units(const LoraShape *s, bool b);

/* Bytes of one row of the tensor. */
uint64_t lora_shape_row_bytes(const LoraShape *s);
/* The bytes of a group of the span: @group (its delta layout's) when it has no importance row;
 * else the most whole rows that fit @group (at least one: lora_shape_check() saw to that). */
size_t lora_shape_group_bytes(const LoraShape *s, size_t group);

typedef struct LoraFactors {
        LoraShape shape;
        float *p;               /* [out][rank] */
        float *q;               /* [rank][in] */
        float *w;               /* [in], the importance row; NULL without one */
        int8_t steps[2][PREDICT_MAX_RANK];      /* I8 factors: the exponents of lora_a's [0] and lora_b's [1] steps */
} LoraFactors;

/*
 * Factors for a checked shape, filled from their stored bytes in pieces of whole elements
 * (lora_factors_load()), then checked (lora_factors_check()). -ENOMEM.
 */
_warn_unused_result_ int lora_factors_new(const LoraShape *s, LoraFactors **ret);
LoraFactors *lora_factors_free(LoraFactors *f);
DEFINE_POINTER_CLEANUP(LoraFactors, lora_factors_free)
/* Units [@first, @first + @n) of lora_b (@b) or lora_a, stored as the shape says, from @bytes
 * (lora_shape_units(): an I8 factor's steps come first, and must be loaded before its elements). */
void lora_factors_load(LoraFactors *f, bool b, uint64_t first, const uint8_t *bytes, size_t n);
/*
 * In a bundle the factors travel as byte planes (bundle-format.md): of lora_a, byte 0 of every
 * element, then byte 1, ...; then lora_b's likewise. A float's sign and exponent bytes compress
 * well and its low mantissa bytes hardly at all: apart, zstd codes each for what it is (an I8
 * factor has one plane: its bytes). Byte @plane of units [@first, @first + @n) of lora_b (@b)
 * or lora_a, from @bytes (one byte each), go where their floats will be; when every plane of
 * both factors is in, lora_factors_settle() turns the gathered bits into floats. No memory
 * beyond the factors'.
 */
void lora_factors_load_plane(LoraFactors *f, bool b, unsigned plane, uint64_t first, const uint8_t *bytes, size_t n);
void lora_factors_settle(LoraFactors *f);
/* @n elements of @width bytes from @in as byte planes into @out (the producer's side). */
void byte_planes_split(const uint8_t *in, size_t n, size_t width, uint8_t *out);
/* Elements of lora_a and of lora_b as stored. */
uint64_t lora_shape_elems(const LoraShape *s, bool b);
/* The rank component (its column of P, its row of Q) of element @e of lora_b (@b) or lora_a as
 * stored: an I8 factor's step for it. lora_a is ne [in, rank] (Q row by row): e / in; the others
 * are ne [rank, ...]: e % rank. */
uint64_t lora_shape_component(const LoraShape *s, bool b, uint64_t e);
/* Byte @plane (0..3) of the importance values [@first, @first + @n), as the factors' planes;
 * they are settled with the factors. */
void lora_factors_load_importance_plane(LoraFactors *f, unsigned plane, uint64_t first, const uint8_t *bytes, size_t n);
/* -EDOM naming the factor when one holds NaN or infinity or an I8 step out of its range, or the
 * importance row when a value is NaN, infinite or negative (the weighted quantizers take none of those). */
_warn_unused_result_ int lora_factors_check(const LoraFactors *f, TpError *err);

/* Floats of scratch lora_predict() needs for @nblocks blocks. */
size_t lora_predict_scratch(const LoraFactors *f, size_t nblocks);

/*
 * Predict @nblocks blocks of the task tensor, starting at its block @block0 (counted from the
 * tensor's start), from the base's same blocks @base, into @out (the same number of bytes).
 * @scratch holds lora_predict_scratch() floats. The blocks must lie inside the tensor, and be
 * whole rows when the shape has an importance row.
 * Cannot fail: whatever the factors make, the residual and the span's hash take care of it.
 */
void lora_predict(const LoraFactors *f, uint64_t block0, const uint8_t *base, size_t nblocks, float *scratch,
                  uint8_t *out);
