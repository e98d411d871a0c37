/* SPDX-License-Identifier: MIT */
/* Quantizer front end: ggml type ids to the dispatched block kernels. */

#include <assert.h>

#include "quant-impl.h"
#include "quant.h"

typedef struct QuantType {
        uint32_t type;
        int kind;               /* QuantKind, or -1 for the F32 copy */
        uint32_t block_size;    /* elements per block */
        uint32_t type_size;     /* bytes per block */
} QuantType;

static const QuantType types[] = {
        { TYPE_F32, -1, 1, 4 },
        { TYPE_F16, QUANT_F16, 1, 2 },
        { TYPE_BF16, QUANT_BF16, 1, 2 },
        { TYPE_Q4_0, QUANT_Q4_0, QK_SMALL, Q4_0_BYTES },
        { TYPE_Q4_1, QUANT_Q4_1, QK_SMALL, Q4_1_BYTES },
        { TYPE_Q5_0, QUANT_Q5_0, QK_SMALL, Q5_0_BYTES },
        { TYPE_Q5_1, QUANT_Q5_1, QK_SMALL, Q5_1_BYTES },
        { TYPE_Q8_0, QUANT_Q8_0, QK_SMALL, Q8_0_BYTES },
        { TYPE_Q2_K, QUANT_Q2_K, QK_K, Q2_K_BYTES },
        { TYPE_Q3_K, QUANT_Q3_K, QK_K, Q3_K_BYTES },
        { TYPE_Q4_K, QUANT_Q4_K, QK_K, Q4_K_BYTES },
        { TYPE_Q5_K, QUANT_Q5_K, QK_K, Q5_K_BYTES },
        { TYPE_Q6_K, QUANT_Q6_K, QK_K, Q6_K_BYTES },
};

static const QuantType *quant_type(uint32_t type) {
        for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
                if (types[i].type == type)
                        return &types[i];
        return NULL;
}

bool quant_supported(uint32_t type) {
        return quant_type(type) != NULL;
}

size_t quantize_rows(uint32_t type, const float *src, void *dst, size_t nrows, size_t n_per_row) {
        const QuantType *t = quant_type(type);
        size_t n = nrows * n_per_row;

        assert(t && n_per_row % t->block_size == 0);
        if (!t || n == 0)
                return 0;

        size_t nblocks = n / t->block_size, bytes = nblocks * t->type_size;
        if (t->kind < 0) {
                memcpy(dst, src, bytes);
                return bytes;
        }

        QuantBlocksFn fn = quant_dispatch()->fn[t->kind];
        if (!fn)
                fn = quant_kernels_generic.fn[t->kind];
        fn(src, dst, nblocks);
        return bytes;
}
