/* SPDX-License-Identifier: MIT */
/* Which delta layout (delta.h) a tensor of a ggml or ONNX type is coded in; the layouts' names, sizes and blocks. */

#include <string.h>

#include "delta-impl.h"
#include "delta.h"
#include "ggml.h"

DeltaLayout delta_layout_for_ggml(uint32_t ggml_type) {
        static const struct {
                uint32_t type;
                DeltaLayout layout;
        } map[] = {
                { GGML_TYPE_F32, DELTA_F32 },   { GGML_TYPE_F16, DELTA_F16 },   { GGML_TYPE_BF16, DELTA_BF16 },
                { GGML_TYPE_Q4_0, DELTA_Q4_0 }, { GGML_TYPE_Q4_1, DELTA_Q4_1 }, { GGML_TYPE_Q5_0, DELTA_Q5_0 },
                { GGML_TYPE_Q5_1, DELTA_Q5_1 }, { GGML_TYPE_Q8_0, DELTA_Q8_0 }, { GGML_TYPE_Q2_K, DELTA_Q2_K },
                { GGML_TYPE_Q3_K, DELTA_Q3_K }, { GGML_TYPE_Q4_K, DELTA_Q4_K }, { GGML_TYPE_Q5_K, DELTA_Q5_K },
                { GGML_TYPE_Q6_K, DELTA_Q6_K },
        };
        for (size_t i = 0; i < ELEMENTSOF(map); i++)
                if (map[i].type == ggml_type)
                        return map[i].layout;
        return DELTA_BYTES;
}

DeltaLayout delta_layout_for_onnx(int32_t onnx_data_type) {
        /* TensorProto.DataType: FLOAT = 1, FLOAT16 = 10, BFLOAT16 = 16. */
        return onnx_data_type == 1 ? DELTA_F32 : onnx_data_type == 10 ? DELTA_F16
                                              : onnx_data_type == 16 ? DELTA_BF16 : DELTA_BYTES;
}

const char *delta_layout_to_string(DeltaLayout l) {
        const Layout *L = delta_layout_get(l);
        return L ? L->name : NULL;
}

DeltaLayout delta_layout_from_string(const char *s) {
        if (!s)
                return _DELTA_LAYOUT_INVALID;
        for (int l = 0; l < _DELTA_LAYOUT_MAX; l++)
                if (strcmp(delta_layout_get((DeltaLayout) l)->name, s) == 0)
                        return (DeltaLayout) l;
        return _DELTA_LAYOUT_INVALID;
}

size_t delta_unit(DeltaLayout l) {
        const Layout *L = delta_layout_get(l);
        return L ? L->unit : 0;
}

size_t delta_group_bytes(DeltaLayout l) {
        const Layout *L = delta_layout_get(l);
        return L ? DELTA_GROUP_TARGET / L->unit * L->unit : 0;
}

bool delta_blocks(DeltaLayout l, DeltaBlocks *ret) {
        const Layout *L = delta_layout_get(l);
        if (!L || L->n_q == 0)
                return false;
        *ret = (DeltaBlocks) { L->unit, L->n_words, { L->word_off[0], L->word_off[1] }, L->n_q, L->q_bits, L->q_sub,
                               L->q_zero, L->n_s, L->s_bits, L->s_zero };
        return true;
}

void delta_blocks_unpack(DeltaLayout l, const uint8_t *blk, uint8_t *q, uint8_t *s) {
        const Layout *L = delta_layout_get(l);
        L->unpack_q(blk, q);
        if (L->n_s)
                L->unpack_s(blk, s);
}

void delta_blocks_pack(DeltaLayout l, const uint8_t *q, const uint8_t *s, uint8_t *blk) {
        const Layout *L = delta_layout_get(l);
        L->pack_q(q, blk);
        if (L->n_s)
                L->pack_s(s, blk);
}
