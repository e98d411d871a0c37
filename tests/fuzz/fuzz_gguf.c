/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for common/artifact/gguf.c. The input becomes a memfd (gguf_read
 * wants a file descriptor); a failure must be -EBADMSG with a message, a
 * success must keep every promise gguf.h makes, the split keys included. The
 * same bytes, up to a NUL, go through gguf_split_name_parse(), which must
 * refuse them or give back what formats to them. Anything else aborts.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ggml.h"
#include "fuzz-input.h"
#include "gguf-split.h"
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

/* Gguf.split: the three keys as the file holds them, or none of them; a name that parses back. */
static void check_split(const Gguf *g) {
        const GgufKv *no = gguf_find(g, GGUF_KEY_SPLIT_NO), *count = gguf_find(g, GGUF_KEY_SPLIT_COUNT),
                     *total = gguf_find(g, GGUF_KEY_SPLIT_TENSORS_COUNT);
        char *name = NULL;
        uint16_t n, k;

        if (!g->split.present) {
                if (no || count || total || g->split.no || g->split.count || g->split.tensors_count)
                        abort();
                return;
        }
        if (!no || !count || !total || no->type != GGUF_TYPE_UINT16 || count->type != GGUF_TYPE_UINT16 ||
            total->type != GGUF_TYPE_INT32 || no->v.u != g->split.no || count->v.u != g->split.count ||
            total->v.i != g->split.tensors_count)
                abort();
        if (g->split.count == 0 || g->split.no >= g->split.count || g->split.tensors_count < 0 ||
            (uint64_t) g->split.tensors_count < g->n_tensors)
                abort();
        if (gguf_split_name_format("m", g->split.no, g->split.count, &name, NULL) != 0 ||
            gguf_split_name_parse(name, NULL, &n, &k, NULL) != 0 || n != g->split.no || k != g->split.count)
                abort();
        free(name);
}

/* The input's bytes up to its first NUL as a shard name: a name that parses formats back to itself. */
static void check_name(const uint8_t *data, size_t size) {
        char buf[GGUF_SPLIT_NAME_MAX + 2], *again = NULL;
        size_t n = 0, len = 0;
        uint16_t no = 0, count = 0;
        TpError err = {0};

        while (n < size && n < sizeof(buf) - 1 && data[n])
                n++;
        memcpy(buf, data, n);
        buf[n] = '\0';
        int r = gguf_split_name_parse(buf, &len, &no, &count, &err);
        if (r != 0) {
                if (r != -EINVAL || !err.message[0])
                        abort();
                return;
        }
        if (len == 0 || len + GGUF_SPLIT_SUFFIX_LEN != n || count == 0 || no >= count)
                abort();
        buf[len] = '\0';
        if (gguf_split_name_format(buf, no, count, &again, NULL) != 0 || memcmp(again, data, n) != 0 ||
            again[n] != '\0')
                abort();
        free(again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        int fd = fuzz_input_fd(data, size, 0);
        Gguf *g = NULL;
        TpError err = {0};

        int r = gguf_read(fd, &g, &err);
        check_name(data, size);
        if (r == 0) {
                check(g, size);
                check_split(g);
                gguf_free(g);
        } else if ((r != -EBADMSG && r != -ENOMEM) || !err.message[0] || err.code != r || g)
                abort();
        return 0;
}
