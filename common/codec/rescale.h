/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The prediction of a `rescale` span: an 8-bit quantized tensor (ONNX INT8 or UINT8: a weight
 * behind DequantizeLinear, QLinearConv, QLinearMatMul, ConvInteger or MatMulInteger) requantized
 * per channel, as a fine-tune that moves a channel's scale, or folds a BatchNorm whose statistics
 * moved, leaves it. The bundle then codes only the residual against the prediction:
 * delta_encode(layout, predicted, target), layout i8 or i8ac.
 *
 * Channels: element e of the tensor (counted from its start, in storage order) belongs to
 * channel (e / inner) % channels: a tensor of dims [d0, .., dk, .., dn] along axis k has
 * channels = dk and inner = the product of the dims after k; one channel for the whole tensor
 * is channels = inner = 1. Each channel c has a ratio R[c] and an offset O[c], signed 32-bit
 * integers in units of 2^-16, which the producer chooses (from the scales and zero points the
 * graph pairs with the tensor, or fitted to the values where they moved otherwise; see
 * create-rescale.c). The device does not need to know which.
 *
 * THE ARITHMETIC (the producer's and every device's; must never change), in 64-bit integers:
 * with v the base element's value (int8: -128..127; uint8: 0..255),
 *
 *     predicted = clamp(floor((R[c] * v + O[c] + 2^15) / 2^16), lo, hi)
 *
 * lo, hi = -128, 127 (int8) or 0, 255 (uint8); stored back as the same byte type. An unchanged
 * channel (R = 2^16, O = 0) predicts its base bytes. No floats: every machine agrees.
 *
 * The residual leans: where the exact prediction (R[c] * v + O[c]) / 2^16 lies below the rounded
 * one ((R[c] * v + O[c] + 2^15) mod 2^16 < 2^15), the target is more likely below it too, and the
 * element is "flipped": its residual byte is coded as predicted - target instead of target -
 * predicted, so that the likely step is +1 either way (as the q-layouts' flip in delta.h). The
 * span's residual is delta_encode(layout, predicted, t'), t'[i] = flipped ? 2 * predicted[i] -
 * target[i] : target[i] (mod 256); rescale_flip() maps target to t' and back.
 *
 * In the bundle the span's frame holds R[0..channels) then O[0..channels), as one array of
 * 2 * channels little-endian int32 in four byte planes (byte 0 of every value, then byte 1, ...:
 * values near 2^16 leave their upper planes nearly constant), then the residual.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "macro.h"

#define RESCALE_ONE (1 << 16)                   /* R for "unchanged" */
#define RESCALE_MAX_CHANNELS (1u << 20)         /* a frame's parameters: at most 8 MiB */
#define RESCALE_MAX_INNER (UINT64_C(1) << 40)

typedef struct RescaleShape {
        bool is_signed;         /* int8 (ONNX INT8) or uint8 (UINT8) */
        uint64_t channels, inner;
} RescaleShape;

/* 1 <= channels <= RESCALE_MAX_CHANNELS, 1 <= inner <= RESCALE_MAX_INNER; else -EBADMSG saying which. */
_warn_unused_result_ int rescale_shape_check(const RescaleShape *s, TpError *err);

/* Bytes of the parameters at the head of a frame: 8 * channels. */
uint64_t rescale_shape_param_bytes(const RescaleShape *s);

typedef struct RescaleParams {
        RescaleShape shape;
        int32_t *ratio, *offset;        /* [channels] each */
} RescaleParams;

_warn_unused_result_ int rescale_params_new(const RescaleShape *s, RescaleParams **ret);
RescaleParams *rescale_params_free(RescaleParams *p);
DEFINE_POINTER_CLEANUP(RescaleParams, rescale_params_free)

/* The parameters as the frame holds them (byte planes, above), into @out (rescale_shape_param_bytes()). */
void rescale_params_store(const RescaleParams *p, uint8_t *out);
/* Byte @plane (0..3) of values [@first, @first + @n) of the frame's array (R then O), from @bytes. */
void rescale_params_load_plane(RescaleParams *p, unsigned plane, uint64_t first, const uint8_t *bytes, size_t n);

/*
 * One element: the prediction of base value @v (int8 or uint8 as @is_signed says) with ratio
 * @ratio and offset @offset, and in *@flip whether it is flipped. The arithmetic above, the one
 * definition of it: the device's rescale_predict() and the producer's choice of parameters both
 * use it.
 */
static inline int64_t rescale_predict_value(int32_t ratio, int32_t offset, int64_t v, bool is_signed, bool *flip) {
        /* |ratio * v + offset + 2^15| < 2^40: shifting the sum up by 2^40 floors it with unsigned arithmetic. */
        uint64_t w = (uint64_t) ((int64_t) ratio * v + offset + (1 << 15)) + (UINT64_C(1) << 40);
        int64_t q = (int64_t) (w >> 16) - (INT64_C(1) << 24), lo = is_signed ? -128 : 0, hi = is_signed ? 127 : 255;

        *flip = (w & 0xffff) < 0x8000;
        return q < lo ? lo : q > hi ? hi : q;
}

/* Predict @n elements starting at the tensor's element @first from their base bytes @base, into
 * @out, and whether each is flipped into @flip (1 or 0, @n bytes). */
void rescale_predict(const RescaleParams *p, uint64_t first, const uint8_t *base, size_t n, uint8_t *out,
                     uint8_t *flip);

/* @bytes[i] = 2 * @predicted[i] - @bytes[i] (mod 256) where @flip[i]: target to t' and t' to target. */
void rescale_flip(const uint8_t *predicted, const uint8_t *flip, uint8_t *bytes, size_t n);
