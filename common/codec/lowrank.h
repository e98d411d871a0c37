/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Finding the low-rank change of a float tensor, for a producer with no adapter file: a task
 * folded from a LoRA (or any low-rank fine-tune) into an ONNX, safetensors or float GGUF model
 * changes each weight by P·Q of a small rank. Given the base and target values, find P
 * [rows][rank] and Q [rank][cols] with target ≈ base + P·Q, so that a lora span
 * (codec/predict.h, factor 1) carries them and a residual the target's rounding leaves.
 *
 * Method (producer only; nothing here runs on a device): D = target − base in double; a
 * randomized range finder with power iterations (Halko, Martinsson, Tropp) gives an
 * orthonormal basis Y of D's column space of LOWRANK_MAX_RANK + oversampling columns; the
 * eigen-decomposition (Jacobi) of (YᵀD)(YᵀD)ᵀ gives the singular values, so the residual of
 * every rank is known at once; the smallest rank whose residual is within the target's own
 * rounding is taken. Deterministic: a fixed pseudo-random sketch. The factors carry the part of
 * the target's rounding noise that lies in their subspace: a target of few mantissa bits (BF16,
 * F16) rounds its predicted values the other way now and then, which the residual pays for.
 * Memory: D in double (8 bytes an element) and the sketches.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

#define LOWRANK_MAX_RANK 32
#define LOWRANK_MAX_ELEMENTS (64u << 20)       /* 512 MiB of doubles: the largest tensor searched */

/*
 * For a tensor of @rows × @cols values (@base and @target as floats), with @ulp the relative
 * precision of the target's type (2^-23 for F32, 2^-10 for F16, 2^-7 for BF16): 1 and the
 * factors (malloc'd, float) when a rank ≤ @max_rank leaves a residual RMS at most
 * @ulp times the target's RMS, and the factors take fewer floats than the tensor; 0 when no
 * such rank exists (a change that is not low-rank), -ENOMEM, -E2BIG over LOWRANK_MAX_ELEMENTS.
 */
_warn_unused_result_ int lowrank_find(const float *base, const float *target, uint64_t rows, uint64_t cols,
                                      unsigned max_rank, double ulp, float **ret_p, float **ret_q,
                                      unsigned *ret_rank);
