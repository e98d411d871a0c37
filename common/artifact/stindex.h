/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The index of a sharded safetensors model (Hugging Face's model.safetensors.index.json, as
 * transformers' save_pretrained and huggingface_hub's save_torch_state_dict write it): which
 * shard file holds each tensor.
 *
 *     {"metadata": {"total_size": 16060522496, ...},
 *      "weight_map": {"lm_head.weight": "model-00002-of-00002.safetensors", ...}}
 *
 * The shards themselves are ordinary safetensors files (safetensors.h); whether they exist and
 * hold what the map says is the caller's to check.
 *
 * The input is untrusted. stindex_read() refuses, with -EBADMSG and a message naming the field
 * ("weight_map['x']: shard name '../a' is not a plain file name"):
 *   - a file over STINDEX_FILE_MAX bytes; more than STINDEX_TOKENS_MAX values (counted before
 *     jansson parses, so that its memory is bounded whatever the file);
 *   - text that is not UTF-8 JSON (jansson's message, line and column), holds a duplicate key
 *     in any object (JSON_REJECT_DUPLICATES) or a "\u0000", or is not an object;
 *   - no "weight_map", or one that is not an object, is empty, or has more than
 *     STINDEX_TENSORS_MAX entries;
 *   - a tensor name (a key of weight_map) that is empty, over SAFETENSORS_NAME_MAX bytes, or
 *     "__metadata__" (no safetensors file can hold such a tensor);
 *   - a value that is not a string, or a shard name that is not a plain file name: empty,
 *     "." or "..", holding a '/' or a NUL, or over STINDEX_SHARD_NAME_MAX bytes;
 *   - "metadata" that is not an object; a "metadata.total_size" that is not a non-negative
 *     integer below 2^63 (a JSON number with a fraction or exponent is accepted when it is a
 *     whole number in that range: some writers emit 1.6e10).
 * Other keys of "metadata" are not read, and top-level keys other than "weight_map" and
 * "metadata" are ignored, as transformers' loader ignores them: neither changes which bytes
 * make up the model.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "macro.h"

/*
 * Caps, each an -EBADMSG naming it when hit. Real indexes are far below: ~100k tensors and
 * ~10 MB for the largest mixture-of-experts models (one tensor per expert and projection).
 * Whatever the file, stindex_read() holds the text (at most STINDEX_FILE_MAX), jansson's tree
 * of at most STINDEX_TOKENS_MAX + 1 values with copies of its strings, and the result.
 * Measured peak: 250 MB (2.6 s, x86-64) for a 53 MB index of STINDEX_TENSORS_MAX tensors.
 */
#define STINDEX_FILE_MAX       (64u << 20) /* bytes of the index file: 64 MiB */
#define STINDEX_TENSORS_MAX    (1u << 19)  /* entries of weight_map */
#define STINDEX_TOKENS_MAX     (1u << 21)  /* '{', '[', ',' and ':' outside strings */
#define STINDEX_SHARD_NAME_MAX 255u        /* bytes of a shard's file name: Linux's NAME_MAX */

typedef struct StindexTensor {
        char *name;     /* a key of weight_map: nonempty, no NUL, not "__metadata__" */
        uint32_t shard; /* index into Stindex.shards */
} StindexTensor;

typedef struct Stindex {
        char **shards;          /* the distinct shard file names, sorted by strcmp; each one used */
        size_t n_shards;        /* 1 ..  n_tensors */
        StindexTensor *tensors; /* sorted by name (strcmp), names unique: bsearch, stindex_find() */
        size_t n_tensors;       /* 1 .. STINDEX_TENSORS_MAX */
        bool has_total_size;    /* metadata.total_size was present */
        uint64_t total_size;    /* metadata.total_size (the tensors' bytes over all shards); 0 if absent */
} Stindex;

/*
 * Parse the index file open on @fd (a regular file, read with pread: the descriptor's offset
 * is neither used nor moved). On success *@ret owns a new Stindex (free with stindex_free).
 * Returns -EBADMSG for malformed input, -EINVAL if @fd is not a regular file, -ENOMEM, or the
 * -errno of a failed read; @err (may be NULL) then says what and where, and *@ret is untouched.
 */
_warn_unused_result_ int stindex_read(int fd, Stindex **ret, TpError *err);

/* The same from @len bytes of JSON at @text (which need not be NUL-terminated). */
_warn_unused_result_ int stindex_parse(const char *text, size_t len, Stindex **ret, TpError *err);

/* Accepts NULL; returns NULL. */
Stindex *stindex_free(Stindex *s);
DEFINE_POINTER_CLEANUP(Stindex, stindex_free)

/* The entry of tensor @name, or NULL (binary search). */
const StindexTensor *stindex_find(const Stindex *s, const char *name);

/* The index in s->shards of the shard file @name, or -ENOENT (binary search). */
int stindex_find_shard(const Stindex *s, const char *name);
