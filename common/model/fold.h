/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Fold a llama.cpp LoRA adapter into a float base model and quantize the result: the task
 * model, written by the same code as `taskpatch quantize` (common/model/quantize.h), so every
 * tensor the adapter does not touch is byte-identical to the quantized base and only the
 * targeted tensors differ.
 *
 * The adapter: common/artifact/lora.h.
 *
 * The fold, per adapted tensor, in float32 (W from F32/F16/BF16 exactly):
 *
 *     W'[o][i] = W[o][i] + f · acc[o][i],   acc[o][i] = Σ_{k=0}^{rank-1} P[o][k] · Q[k][i]
 *
 * with P = lora_b, Q = lora_a (token_embd: P = lora_a, Q = lora_bᵀ) and
 * f = (scale · alpha) / rank rounded to float32 as llama.cpp computes it (alpha 0 or absent:
 * f = scale). The sum runs from k = 0 upwards, starting from +0.0f; every product and every
 * sum is rounded to float32 on its own (no fused multiply-add, no reassociation), then
 * f · acc is rounded, then added to W. The result is therefore the same on every machine
 * and compiler; it is not claimed to equal llama-export-lora's bytes (ggml computes B·A in
 * its own order), only to be llama.cpp's arithmetic definition of the merged weight.
 *
 * Memory: the adapter factors of one tensor (P and Q, (out + in) · rank floats) plus the
 * row chunks of common/model/quantize.h.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "gguf.h"
#include "lora.h"
#include "macro.h"
#include "quantize.h"

/* The adapter fits @base: same architecture, every target there, 2-D, float, same shape. */
_warn_unused_result_ int lora_check_base(const Lora *l, const Gguf *base, TpError *err);

/*
 * Fold @l into the base @base (open on @base_fd) with the extra factor @scale (finite) and
 * quantize into @out_path with @o (its hooks are the fold's: o->hooks must be NULL).
 * Runs lora_check_base() first.
 */
_warn_unused_result_ int model_fold(int base_fd, const Gguf *base, const Lora *l, float scale, const char *out_path,
                                    const QuantizeOptions *o, QuantizeResult *ret, TpError *err);
