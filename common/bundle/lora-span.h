/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * A lora span's "lora" key in the manifest (packaging/docs/bundle-format.md): the tensor and
 * its factors, everything a device needs to predict the span (codec/predict.h):
 *
 *   lora: {type: q8_0, in: 2048, out: 2048, rank: 16, first: 0, factor: 3e000000, a: f16, b: f16}
 *
 * type: the tensor's ggml type (the base's and the target's); in, out: elements per row and
 * rows; rank; first: the span's first element in the tensor (a whole block); factor: the
 * fold's factor as the 8 hex digits of its float32 bits (exact); a, b: how lora_a and lora_b
 * are stored (f32, f16, bf16, or i8: int8 with a step per rank component, predict.h); embd: true for token_embd's swapped factors (absent: false);
 * imatrix: true when the target was quantized with an importance matrix and the frame carries
 * the tensor's row of it (absent: false; then the span is whole rows); residual: ac when the
 * residual is range-coded with the prediction's floats (codec/predict-ac.h; the quantized
 * types), planes (or absent) when the layout's planes code it.
 * The span's frame decodes to lora_a's bytes as byte planes (predict.h), lora_b's, the
 * importance row's (F32, byte planes too) when there is one, then the residual.
 */

#include "manifest.h"
#include "yaml-doc.h"
#include "yaml-write.h"

/* Parse @n's "lora" into @s (its length and encoding read): the shape checked, @layout the
 * delta layout of its type, the span whole blocks lying inside the tensor. */
_warn_unused_result_ int lora_span_parse(const YamlNode *n, size_t idx, const char *layout, ManifestSpan *s,
                                         TpError *err);
void lora_span_write(YamlWriter *w, const ManifestSpan *s);

/* Blocks of the tensor the span covers, and its first block. */
uint64_t lora_span_blocks(const ManifestSpan *s);
uint64_t lora_span_first_block(const ManifestSpan *s);
