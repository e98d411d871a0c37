/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for common/artifact/gguf.c. The input becomes a memfd (gguf_read
 * wants a file descriptor); a failure must be -EBADMSG with a message, a
 * success must keep every promise gguf.h makes. Anything else aborts.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ggml.h"
#include "fuzz-input.h"
#include "gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const Gguf *g, size_t size) {
        if ((g->version != 2 && g->version != 3) || g->file_size != size)
                abort();
        if (!g->alignment || (g->alignment & (g->alignment - 1)) || g->data_offset > g->file_size)
                abort();
        if (g->n_kv > GGUF_KV_MAX || g->n_tensors > GGUF_TENSORS_MAX)
                abort();
        for (uint64_t i = 0; i < g->n_kv; i++) {
                const GgufKv *kv = &g->kv[i];
                if (!kv->key || !kv->key[0] || kv->type >= _GGUF_TYPE_MAX || kv->offset >= size)
                        abort();
                if (kv->type == GGUF_TYPE_STRING && (!kv->str || kv->str_len > GGUF_STRING_LEN_MAX))
                        abort();
                if (kv->type == GGUF_TYPE_ARRAY && kv->array_offset > size)
                        abort();
                if (gguf_find(g, kv->key) != kv)
                        abort();
        }
        for (uint64_t i = 0; i < g->n_tensors; i++) {
                const GgufTensor *t = &g->tensors[i];
                uint64_t n = 1, bytes;
                if (!t->name || strlen(t->name) > GGUF_TENSOR_NAME_LEN_MAX || t->n_dims < 1 || t->n_dims > 4)
                        abort();
                for (unsigned j = 0; j < 4; j++)
                        if ((j >= t->n_dims && t->ne[j] != 1) || __builtin_mul_overflow(n, t->ne[j], &n))
                                abort();
                if (ggml_tensor_bytes(t->type, n, &bytes) < 0 || bytes != t->size)
                        abort();
                if (t->rel_offset % g->alignment || t->offset != g->data_offset + t->rel_offset || t->offset > size ||
                    t->size > size - t->offset)
                        abort();
                if (gguf_find_tensor(g, t->name) != t)
                        abort();
                for (uint64_t j = 0; j < i && g->n_tensors <= 512; j++) {
                        const GgufTensor *u = &g->tensors[j];
                        if (t->size && u->size && t->offset < u->offset + u->size && u->offset < t->offset + t->size)
                                abort();
                }
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        int fd = fuzz_input_fd(data, size, 0);
        Gguf *g = NULL;
        TpError err = {0};

        int r = gguf_read(fd, &g, &err);
        if (r == 0) {
                check(g, size);
                gguf_free(g);
        } else if ((r != -EBADMSG && r != -ENOMEM) || !err.message[0] || err.code != r || g)
                abort();
        return 0;
}
