/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Fold a llama.cpp LoRA adapter into a float base model and quantize the result: the task
 * model, written by the same code as `taskpatch quantize` (common/model/quantize.h), so every
 * tensor the adapter does not touch is byte-identical to the quantized base and only the
 * targeted tensors differ.
 *
 * The adapter is llama.cpp's GGUF LoRA format (convert_lora_to_gguf.py, what
 * llama_adapter_lora_init() loads): general.type = "adapter", adapter.type = "lora",
 * general.architecture as the base's, adapter.lora.alpha (float32), and for each adapted
 * weight W (ne = [in, out]) the pair <W>.lora_a (ne = [in, rank]) and <W>.lora_b
 * (ne = [rank, out]), F32, F16 or BF16; llama.cpp adds scale·(alpha/rank)·B·(A·x). For
 * token_embd.weight, looked up by row, the roles swap: lora_a is ne = [rank, n_vocab] and
 * lora_b ne = [rank, n_embd]. Tensors ending in _norm.weight are ignored, as llama.cpp does.
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
#include "macro.h"
#include "quantize.h"

typedef struct LoraPair {
        char *target;            /* the base tensor's name */
        const GgufTensor *a, *b; /* <target>.lora_a, <target>.lora_b in the adapter */
        uint64_t rank;
        bool embd;               /* token_embd.weight: row lookup, roles swapped */
} LoraPair;

typedef struct Lora {
        Gguf *g;
        int fd;
        char *path;
        char *arch;
        float alpha;             /* 0 when absent */
        LoraPair *pairs;         /* sorted by target name */
        size_t n_pairs;
        size_t n_ignored;        /* *_norm.weight tensors, ignored like llama.cpp */
} Lora;

/*
 * Open and validate the adapter at @path: its keys, every tensor's suffix, type and shape,
 * each lora_a with its lora_b and equal ranks. Errors name the file, the tensor or key,
 * what was expected and what was found (-EBADMSG for a malformed adapter, -EOPNOTSUPP for
 * one that cannot be folded).
 */
_warn_unused_result_ int lora_open(const char *path, Lora **ret, TpError *err);
Lora *lora_free(Lora *l);
DEFINE_POINTER_CLEANUP(Lora, lora_free)

/* The adapter fits @base: same architecture, every target there, 2-D, float, same shape. */
_warn_unused_result_ int lora_check_base(const Lora *l, const Gguf *base, TpError *err);

/*
 * Fold @l into the base @base (open on @base_fd) with the extra factor @scale (finite) and
 * quantize into @out_path with @o (its hooks are the fold's: o->hooks must be NULL).
 * Runs lora_check_base() first.
 */
_warn_unused_result_ int model_fold(int base_fd, const Gguf *base, const Lora *l, float scale, const char *out_path,
                                    const QuantizeOptions *o, QuantizeResult *ret, TpError *err);
