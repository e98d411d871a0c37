/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for common/codec/predict-ac.c, a lora span's range-coded residual: the first
 * byte picks a type (and, with its top bit, whether the prediction's floats are raw input bits —
 * NaN, infinities, anything — or the predicted bytes dequantized), the second the group's length
 * (any, a tail included); then come the predicted bytes, the group's coded bytes and the raw
 * floats. Decoding must stay inside its buffers (the sanitizers watch) and be a function of its
 * inputs; what it decoded must encode to a stream that decodes to it again, or not fit.
 */

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dequant.h"
#include "ggml.h"
#include "predict-ac.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The first five as the corpus's first seeds name them; the K types after (a group of one block at most). */
static const uint32_t types[] = { GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q8_0,
                                  GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (size < 2)
                return 0;
        uint32_t type = types[(data[0] & 0x7f) % (sizeof(types) / sizeof(types[0]))];
        bool raw_floats = data[0] & 0x80;
        size_t rest = size - 2, len = data[1] < rest / 2 ? data[1] : rest / 2;
        size_t nblocks = len / ggml_type(type)->type_size, nw = (nblocks + 1) * ggml_type(type)->block_size;
        const uint8_t *pred = data + 2, *delta = data + 2 + len, *floats = data + 2 + 2 * len;
        float *w = calloc(nw, sizeof(float));
        uint8_t *out = malloc(len + 1), *again = malloc(len + 1), *back = malloc(len + 1);
        if (!w || !out || !again || !back)
                abort();
        if (raw_floats)
                memcpy(w, floats, rest - 2 * len < nw * sizeof(float) ? rest - 2 * len : nw * sizeof(float));
        else
                dequantize_blocks(type, pred, w, nblocks);

        predict_ac_decode(type, w, pred, delta, len, out);
        memset(again, 0x5a, len);
        predict_ac_decode(type, w, pred, delta, len, again);
        if (memcmp(out, again, len) != 0)
                abort();
        if (predict_ac_encode(type, w, pred, out, len, again)) {
                predict_ac_decode(type, w, pred, again, len, back);
                if (memcmp(back, out, len) != 0)
                        abort();
        }
        free(w);
        free(out);
        free(again);
        free(back);
        return 0;
}
