/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Type mixes: which ggml type each tensor of a model gets for a llama.cpp file type
 * ("Q4_K_M", "Q4_0", ...), and the order the tensors are written in — llama.cpp's
 * llama_model_quantize() rules (src/llama-quant.cpp, default parameters: no imatrix, no
 * overrides, output tensor quantized), for the llama architecture. Pure: names, shapes and
 * a few metadata values in, types out.
 *
 * The rules, in order (the man page, taskpatch(1), says the same):
 *  - A tensor is quantized only when it has at least 2 dimensions (ggml_n_dims), its name
 *    ends in "weight" and is none of the small or special ones (*_norm.weight,
 *    ffn_gate_inp, position_embd, token_types, ssm_conv1d, altup, laurel, ...). Every
 *    other tensor keeps its type and bytes (1-D norms stay F32).
 *  - F32, F16, BF16 file types: every quantized tensor gets that type.
 *  - Otherwise the file type's base type (Q4_K for Q4_K_S/M, Q5_K for Q5_K_S/M, ...), then:
 *    output.weight — and token_embd.weight when the model has no output.weight (tied
 *    embeddings) — gets Q6_K, or Q8_0 when the base type is Q8_0 or its row length is not a
 *    multiple of the base type's block;
 *    attn_v (and attn_qkv, attn_kv_b), counted in output order: Q6_K in Q4_K_M and Q5_K_M
 *    for "more bits" layers (i < n/8, i >= 7n/8, or (i - n/8) % 3 == 2, n = the number of
 *    attn_v tensors), Q5_K for the first 4 in Q4_K_S; Q4_K becomes Q5_K in 70B llama models
 *    (80 layers, grouped-query attention); Q8_0 in models with 8 experts;
 *    attn_k: Q8_0 with 8 experts; attn_output: Q5_K in Q4_K_S/Q4_K_M with 8 experts;
 *    ffn_down, counted in output order (or by its blk.N with experts): Q6_K for "more bits"
 *    layers (n = block_count) in Q4_K_M and Q5_K_M, Q5_K for layers below n/8 in Q4_K_S.
 *  - A type whose block does not divide the row length falls back: Q4_K→Q5_0, Q5_K→Q5_1,
 *    Q6_K→Q8_0; still no fit (or a 32-block type) → F16.
 * Tensors are written sorted by layer (blk.N., names without a layer first) and then by
 * name, as llama.cpp's loader orders them; "general.quantization_version" (2) and
 * "general.file_type" move to the end of the metadata, "split.*" keys are dropped.
 */

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "gguf.h"
#include "macro.h"

#define QUANT_VERSION 2u /* general.quantization_version: GGML_QNT_VERSION */

typedef struct QuantFtype {
        const char *name;      /* as llama-quantize spells it: "Q4_K_M" */
        uint32_t ftype;        /* llama_ftype, written as general.file_type */
        uint32_t base_type;    /* ggml type of most tensors */
} QuantFtype;

/* The file type named @name (case-insensitive), or NULL. */
const QuantFtype *quant_ftype_from_name(const char *name);
/* Every supported file type, in llama-quantize's order; *@ret_n entries. */
const QuantFtype *quant_ftypes(size_t *ret_n);

typedef struct QuantPlan {
        size_t n;         /* tensors */
        size_t *order;    /* output order: indices into the model's tensors */
        uint32_t *types;  /* by the model's tensor index: the output type */
        size_t n_fallback; /* tensors whose row length forced a fallback type */
} QuantPlan;

/*
 * The plan for the model @g: every tensor's output type and the output order. Refuses
 * (-EOPNOTSUPP, with a message) architectures other than llama, models without
 * "llama.block_count", and a quantized tensor that would have to change type (no
 * requantizing; only F32, F16 and BF16 are converted). @imatrix: the quantization has an
 * importance matrix (llama.cpp then gives Q4_0 and Q5_0's first eighth of ffn_down Q4_1 / Q5_1);
 * without one, -EINVAL for a file type that needs one (Q2_K_S, quant_needs_imatrix()).
 */
_warn_unused_result_ int quant_plan(const Gguf *g, const QuantFtype *ft, bool imatrix, QuantPlan *ret,
                                    TpError *err);
void quant_plan_done(QuantPlan *p);

/*
 * Whether a tensor @name quantized to @type in a file of @ft needs an importance matrix entry
 * (llama.cpp's tensor_requires_imatrix for the types here: a Q2_K tensor of a Q2_K_S file, but
 * token_embd and output). quant_plan() without an imatrix refuses such a file.
 */
bool quant_needs_imatrix(const QuantFtype *ft, const char *name, uint32_t type);

/* Whether llama.cpp would quantize a tensor of this name and shape at all (rule 1). */
bool quant_tensor_allowed(const char *name, const uint64_t ne[4]);
