/* SPDX-License-Identifier: MIT */
/* Which delta layout (delta.h) a tensor of a ggml or ONNX type is coded in. */

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
