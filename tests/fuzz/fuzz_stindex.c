/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for common/artifact/stindex.c. The input becomes a memfd (stindex_read wants a
 * file descriptor); a failure must be -EBADMSG (or -ENOMEM) with a printable message, a success
 * must keep every promise stindex.h makes: shards sorted, unique, plain file names, each used;
 * tensors sorted by name, unique, each found by stindex_find in a shard that exists. Then the
 * result written back as JSON (jansson) must read back the same.
 */

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz-input.h"
#include "safetensors.h"
#include "stindex.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const Stindex *s) {
        if (s->n_tensors == 0 || s->n_tensors > STINDEX_TENSORS_MAX || s->n_shards == 0 ||
            s->n_shards > s->n_tensors || (!s->has_total_size && s->total_size != 0) ||
            s->total_size > (uint64_t) INT64_MAX)
                abort();
        for (size_t i = 0; i < s->n_shards; i++) {
                const char *n = s->shards[i];
                size_t len = strlen(n);
                if (len == 0 || len > STINDEX_SHARD_NAME_MAX || strchr(n, '/') || !strcmp(n, ".") ||
                    !strcmp(n, "..") || (i > 0 && strcmp(s->shards[i - 1], n) >= 0) ||
                    stindex_find_shard(s, n) != (int) i)
                        abort();
        }
        uint8_t *used = calloc(s->n_shards, 1);
        if (!used)
                abort();
        for (size_t i = 0; i < s->n_tensors; i++) {
                const StindexTensor *t = &s->tensors[i];
                size_t len = strlen(t->name);
                if (len == 0 || len > SAFETENSORS_NAME_MAX || !strcmp(t->name, "__metadata__") ||
                    t->shard >= s->n_shards || (i > 0 && strcmp(s->tensors[i - 1].name, t->name) >= 0) ||
                    stindex_find(s, t->name) != t)
                        abort();
                used[t->shard] = 1;
        }
        for (size_t i = 0; i < s->n_shards; i++)
                if (!used[i])
                        abort();
        free(used);
}

/* The index @s as JSON, read again: the same shards, tensors and total size. */
static void round_trip(const Stindex *s) {
        json_t *root = json_object(), *map = json_object();
        Stindex *t = NULL;
        TpError err = {0};

        if (!root || !map || json_object_set_new(root, "weight_map", map) < 0)
                abort();
        for (size_t i = 0; i < s->n_tensors; i++)
                if (json_object_set_new(map, s->tensors[i].name, json_string(s->shards[s->tensors[i].shard])) < 0)
                        abort();
        if (s->has_total_size &&
            json_object_set_new(root, "metadata",
                                json_pack("{sI}", "total_size", (json_int_t) s->total_size)) < 0)
                abort();
        char *text = json_dumps(root, JSON_COMPACT);
        if (!text || stindex_parse(text, strlen(text), &t, &err) != 0)
                abort();
        if (t->n_tensors != s->n_tensors || t->n_shards != s->n_shards || t->has_total_size != s->has_total_size ||
            t->total_size != s->total_size)
                abort();
        for (size_t i = 0; i < s->n_shards; i++)
                if (strcmp(t->shards[i], s->shards[i]) != 0)
                        abort();
        for (size_t i = 0; i < s->n_tensors; i++)
                if (strcmp(t->tensors[i].name, s->tensors[i].name) != 0 || t->tensors[i].shard != s->tensors[i].shard)
                        abort();
        free(text);
        json_decref(root);
        stindex_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        int fd = fuzz_input_fd(data, size, 0);
        Stindex *s = NULL;
        TpError err = {0};

        int r = stindex_read(fd, &s, &err);
        if (r == 0) {
                check(s);
                round_trip(s);
                stindex_free(s);
                return 0;
        }
        if ((r != -EBADMSG && r != -ENOMEM) || !err.message[0] || err.code != r || s)
                abort();
        for (const char *p = err.message; *p; p++)
                if ((unsigned char) *p < 0x20 || (unsigned char) *p >= 0x7f)
                        abort();
        return 0;
}
