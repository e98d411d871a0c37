/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * GGUF reader (llama.cpp model files, versions 2 and 3): the metadata
 * key/values and the tensor-info table, with every tensor's absolute byte
 * range. Tensor data is never read; array values are validated while
 * parsing but not kept (a 150k-token vocabulary stays on disk: see
 * array_offset). Memory is bounded by the caps below, whatever the file.
 *
 * Layout (all little-endian):
 *
 *     "GGUF" u32 version, u64 n_tensors, u64 n_kv
 *     n_kv x      { string key, u32 type, value }
 *     n_tensors x { string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 rel_offset }
 *     padding to general.alignment, then the data section
 *
 * where string = u64 length + bytes, and an array value = u32 element
 * type, u64 count, elements (which may be strings or arrays themselves).
 *
 * The input is untrusted. gguf_read() refuses, with -EBADMSG and a message
 * naming the record, its offset and what was wrong:
 *   - a bad magic ("not a GGUF file"), version 1 (32-bit counts), a
 *     byte-swapped (big-endian) version, any version other than 2 and 3;
 *   - any count, length or array nesting over the caps below, or larger
 *     than what the rest of the file could hold; a truncated record;
 *   - unknown value types, empty or duplicate keys, keys and tensor names
 *     holding a NUL byte;
 *   - general.alignment that is not a UINT32 scalar or not a nonzero
 *     power of two;
 *   - split keys (Gguf.split) that are not all three present or all three
 *     absent, of another type than theirs, split.count 0, split.no not
 *     below split.count, split.tensors.count negative or below this file's
 *     own tensor count;
 *   - tensors with n_dims outside 1..4, a dimension or element count
 *     beyond int64, an unknown/removed ggml type, ne[0] not a multiple of
 *     the type's block size, a rel_offset that is not a multiple of the
 *     alignment, data running past the end of the file, data overlapping
 *     another tensor's (an empty tensor inside another's bytes counts),
 *     duplicate names.
 *
 * Like llama.cpp (ggml/src/gguf.cpp) it accepts zero-element tensors
 * (size 0), any bool byte (nonzero = true), padding bytes of any value,
 * and bytes after the last tensor. Unlike it, it accepts arrays of arrays
 * (the GGUF spec allows them) and tensors not packed in table order
 * (llama.cpp wants each rel_offset == the padded sizes before it): both
 * are harmless for a reader that only locates bytes. It is stricter on
 * n_dims 0 (refused; llama.cpp's writer never emits it) and checks every
 * tensor's bytes against the file size at once.
 */

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

#include "error.h"
#include "macro.h"

#define GGUF_MAGIC             "GGUF" /* the first 4 bytes of every GGUF file */
#define GGUF_DEFAULT_ALIGNMENT 32u
#define GGUF_KEY_ALIGNMENT     "general.alignment"

/* The keys of a split GGUF's shard (llama.cpp's LLM_KV_SPLIT_*): see Gguf.split. */
#define GGUF_KEY_SPLIT_NO            "split.no"            /* uint16, 0-based */
#define GGUF_KEY_SPLIT_COUNT         "split.count"         /* uint16 */
#define GGUF_KEY_SPLIT_TENSORS_COUNT "split.tensors.count" /* int32, over all shards */

/*
 * Caps. Each one, when hit, is an -EBADMSG naming it. Real models are far
 * below: ~1100 tensors for a 405B model (~30k for MoE files with one tensor
 * per expert), ~50 keys, chat templates of tens of KiB. The caps stop a
 * hostile header from making us allocate or loop without bound: whatever
 * the file, gguf_read() holds at most about 13 MiB (65536 tensor records,
 * 16384 key records, 4 MiB of names and strings, one 64 KiB read buffer),
 * and its time is linear in the size of the header and metadata.
 */
#define GGUF_TENSORS_MAX         65536u     /* tensor-info records */
#define GGUF_KV_MAX              16384u     /* key/value records */
#define GGUF_KEY_LEN_MAX         65536u     /* bytes of one key */
#define GGUF_TENSOR_NAME_LEN_MAX 63u        /* bytes of one tensor name: ggml's GGML_MAX_NAME - 1, as llama.cpp */
#define GGUF_STRING_LEN_MAX      (1u << 20) /* bytes of one string value, scalar or array element */
#define GGUF_ARRAY_COUNT_MAX     (1u << 30) /* elements of one array (llama.cpp's limit) */
#define GGUF_ARRAY_DEPTH_MAX     8u         /* nesting levels of arrays of arrays; a plain array is 1 */
#define GGUF_KEPT_BYTES_MAX      (4u << 20) /* keys + tensor names + scalar strings in memory, one NUL each */

typedef enum GgufValueType {
        GGUF_TYPE_UINT8 = 0,
        GGUF_TYPE_INT8 = 1,
        GGUF_TYPE_UINT16 = 2,
        GGUF_TYPE_INT16 = 3,
        GGUF_TYPE_UINT32 = 4,
        GGUF_TYPE_INT32 = 5,
        GGUF_TYPE_FLOAT32 = 6,
        GGUF_TYPE_BOOL = 7,
        GGUF_TYPE_STRING = 8,
        GGUF_TYPE_ARRAY = 9,
        GGUF_TYPE_UINT64 = 10,
        GGUF_TYPE_INT64 = 11,
        GGUF_TYPE_FLOAT64 = 12,
        _GGUF_TYPE_MAX,
        _GGUF_TYPE_INVALID = -EINVAL,
} GgufValueType;

typedef struct GgufKv {
        char *key;     /* NUL-terminated, nonempty, no NUL inside */
        uint32_t type; /* GgufValueType */
        /* Scalars, widened: UINT* in u, INT* in i (sign-extended), FLOAT32/FLOAT64 in f, BOOL in b. */
        union {
                uint64_t u;
                int64_t i;
                double f;
                bool b;
        } v;
        char *str;        /* GGUF_TYPE_STRING: the bytes plus a NUL (may hold NULs: see str_len) */
        uint64_t str_len; /* GGUF_TYPE_STRING: bytes, without the added NUL */
        /*
         * GGUF_TYPE_ARRAY: element type, count, and the absolute file offset
         * of the first element. The elements were validated while parsing
         * but are not kept in memory. Arrays of arrays: array_type is
         * GGUF_TYPE_ARRAY and each element starts with its own type and count.
         */
        uint32_t array_type;
        uint64_t array_count;
        uint64_t array_offset;
        uint64_t offset; /* absolute file offset of this key/value record */
} GgufKv;

typedef struct GgufTensor {
        char *name;           /* NUL-terminated, no NUL inside, unique (may be empty) */
        uint32_t n_dims;      /* 1..4 */
        uint64_t ne[4];       /* elements per dimension (unused dims = 1); product <= INT64_MAX */
        uint32_t type;        /* ggml type id, known to ggml_type() */
        uint64_t rel_offset;  /* as stored: relative to the data section, a multiple of alignment */
        uint64_t offset;      /* absolute file offset of the tensor's bytes */
        uint64_t size;        /* bytes (ggml_tensor_bytes); offset + size <= file_size */
        uint64_t info_offset; /* absolute file offset of its tensor-info record */
} GgufTensor;

typedef struct Gguf {
        uint32_t version; /* 2 or 3 */
        uint64_t n_kv, n_tensors;
        GgufKv *kv;          /* in file order */
        GgufTensor *tensors; /* in file order of the tensor-info table; byte ranges never overlap */
        uint32_t alignment;  /* general.alignment, default 32; a power of two */
        /*
         * Absolute start of the data section: the end of the tensor-info
         * table rounded up to the alignment. A file without tensors may end
         * before that padding (llama.cpp accepts it); then it is file_size.
         */
        uint64_t data_offset;
        uint64_t file_size;
        /*
         * One shard of a split GGUF, as llama.cpp's llama-gguf-split writes them: each shard
         * a complete GGUF holding its own tensors (data section, alignment and offsets of
         * its own), the first (no 0) also every key of the model, the others only the three
         * split keys. present: the file holds split.no, split.count and
         * split.tensors.count (checked: all three or none, each of its type). A split of
         * one (count 1) is a split too. Whether the shards of a set agree with each other
         * and with their file names (gguf-split.h) is the caller's to check.
         */
        struct {
                bool present;
                uint16_t no;           /* split.no: 0-based, < count */
                uint16_t count;        /* split.count: shards in the set, >= 1 */
                int32_t tensors_count; /* split.tensors.count: tensors of all shards, >= n_tensors */
        } split;
} Gguf;

/*
 * Parse the GGUF file open on @fd (a regular file; read with pread, so the
 * descriptor's offset is neither used nor moved; the caller keeps @fd).
 * Streams the header and tables with a fixed buffer; never reads tensor
 * data. On success *@ret owns a new Gguf (free with gguf_free). Returns
 * -EBADMSG for malformed input, -EINVAL if @fd is not a regular file,
 * -ENOMEM, or the -errno of a failed read; @err (may be NULL) then says
 * what and where, and *@ret is untouched.
 */
_warn_unused_result_ int gguf_read(int fd, Gguf **ret, TpError *err);

/* Accepts NULL; returns NULL. */
Gguf *gguf_free(Gguf *g);
DEFINE_POINTER_CLEANUP(Gguf, gguf_free)

/* The key/value named @key, or NULL. */
const GgufKv *gguf_find(const Gguf *g, const char *key);
/* The string value of @key, or NULL when absent or of another type. */
const char *gguf_find_string(const Gguf *g, const char *key);

/* The tensor named @name, or NULL. */
const GgufTensor *gguf_find_tensor(const Gguf *g, const char *name);

/* "uint8", "int8", ..., "float64" (the GGUF spec's names), or NULL when out of range. */
const char *gguf_value_type_to_string(GgufValueType t);

/* Bytes of one scalar of value type @t; 0 for strings, arrays and unknown types. */
unsigned gguf_value_type_size(uint32_t t);
GgufValueType gguf_value_type_from_string(const char *s);
