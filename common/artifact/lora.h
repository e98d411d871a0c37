/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * A LoRA adapter as llama.cpp stores it, read for the fold (common/model/fold.h) and for lora
 * spans (taskpatch create --lora, common/codec/predict.h).
 *
 * The adapter is llama.cpp's GGUF LoRA format (convert_lora_to_gguf.py, what
 * llama_adapter_lora_init() loads): general.type = "adapter", adapter.type = "lora",
 * general.architecture as the base's, adapter.lora.alpha (float32), and for each adapted
 * weight W (ne = [in, out]) the pair <W>.lora_a (ne = [in, rank]) and <W>.lora_b
 * (ne = [rank, out]), F32, F16 or BF16; llama.cpp adds scale·(alpha/rank)·B·(A·x). For
 * token_embd.weight, looked up by row, the roles swap: lora_a is ne = [rank, n_vocab] and
 * lora_b ne = [rank, n_embd]. Tensors ending in _norm.weight are ignored, as llama.cpp does.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "gguf.h"
#include "macro.h"

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

/* The pair adapting the base tensor @target, or NULL. */
const LoraPair *lora_find(const Lora *l, const char *target);

/* Whether ggml type @type is one a factor may have: F32, F16, BF16. */
bool lora_factor_type(uint32_t type);

/* llama.cpp's factor for a pair of @rank: (@scale · alpha) / rank in float, or @scale when alpha is 0. */
float lora_factor(const Lora *l, float scale, uint64_t rank);
