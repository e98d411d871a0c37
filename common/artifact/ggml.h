/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * ggml tensor types as GGUF files store them: the type ids, their names,
 * and the block layout (elements per block, bytes per block) that gives a
 * tensor's byte size. Ids of types ggml has removed are invalid.
 */

#include <stdbool.h>
#include <stdint.h>

#include "macro.h"

enum {
        GGML_TYPE_F32 = 0,
        GGML_TYPE_F16 = 1,
        GGML_TYPE_Q4_0 = 2,
        GGML_TYPE_Q4_1 = 3,
        GGML_TYPE_Q5_0 = 6,
        GGML_TYPE_Q5_1 = 7,
        GGML_TYPE_Q8_0 = 8,
        GGML_TYPE_Q8_1 = 9,
        GGML_TYPE_Q2_K = 10,
        GGML_TYPE_Q3_K = 11,
        GGML_TYPE_Q4_K = 12,
        GGML_TYPE_Q5_K = 13,
        GGML_TYPE_Q6_K = 14,
        GGML_TYPE_Q8_K = 15,
        GGML_TYPE_IQ2_XXS = 16,
        GGML_TYPE_IQ2_XS = 17,
        GGML_TYPE_IQ3_XXS = 18,
        GGML_TYPE_IQ1_S = 19,
        GGML_TYPE_IQ4_NL = 20,
        GGML_TYPE_IQ3_S = 21,
        GGML_TYPE_IQ2_S = 22,
        GGML_TYPE_IQ4_XS = 23,
        GGML_TYPE_I8 = 24,
        GGML_TYPE_I16 = 25,
        GGML_TYPE_I32 = 26,
        GGML_TYPE_I64 = 27,
        GGML_TYPE_F64 = 28,
        GGML_TYPE_IQ1_M = 29,
        GGML_TYPE_BF16 = 30,
        GGML_TYPE_TQ1_0 = 34,
        GGML_TYPE_TQ2_0 = 35,
        GGML_TYPE_MXFP4 = 39,
        GGML_TYPE_NVFP4 = 40,
        GGML_TYPE_Q1_0 = 41,
        GGML_TYPE_Q2_0 = 42,
        GGML_TYPE_COUNT = 43,
};

typedef struct GgmlType {
        const char *name;       /* as ggml spells it: "q4_0", "f16", ... */
        uint32_t block_size;    /* elements per block */
        uint32_t type_size;     /* bytes per block */
} GgmlType;

/* The type with id @type, or NULL for an unknown or removed id. */
const GgmlType *ggml_type(uint32_t type);

/* The id whose name is @name (case-insensitive, "Q4_0" or "q4_0"), or -EINVAL. */
int ggml_type_from_name(const char *name);

/*
 * Bytes of a tensor of @n_elements elements of @type: -EINVAL for an
 * unknown type or an element count that is not a whole number of blocks,
 * -EOVERFLOW when the size does not fit in 63 bits.
 */
_warn_unused_result_ int ggml_tensor_bytes(uint32_t type, uint64_t n_elements, uint64_t *ret_bytes);
