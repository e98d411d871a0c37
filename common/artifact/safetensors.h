/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * safetensors reader (Hugging Face's format; one file, not a sharded set): every tensor's
 * dtype, shape and absolute byte range. Tensor data is never read.
 *
 * Layout (https://github.com/huggingface/safetensors, README "Format"):
 *
 *     u64 N (little-endian), then N bytes of UTF-8 JSON (the header), then the data buffer
 *
 * The header is an object: each key a tensor name, each value
 * {"dtype": "F16", "shape": [2, 3], "data_offsets": [BEGIN, END]} with the offsets relative
 * to the data buffer, which starts at 8 + N; the key "__metadata__", when present, is an
 * object of string values. The header may be padded at its end with spaces.
 *
 * The input is untrusted. safetensors_read() refuses, with -EBADMSG and a message naming
 * the field and the tensor:
 *   - a file shorter than 8 bytes, N over SAFETENSORS_HEADER_MAX, 8 + N past the end of the
 *     file, a header that does not start with '{';
 *   - a header that is not UTF-8 JSON (jansson's message, with the line and column), holds a
 *     duplicate key (JSON_REJECT_DUPLICATES) or a "\u0000", or is shaped unlike a header
 *     (an object inside a tensor entry, an array inside an array: checked before parsing,
 *     with the caps, so that jansson's memory is bounded whatever the file);
 *   - a tensor name that is empty or over SAFETENSORS_NAME_MAX bytes; more than
 *     SAFETENSORS_TENSORS_MAX tensors; __metadata__ that is not an object of strings;
 *   - a tensor entry that is not an object, lacks "dtype", "shape" or "data_offsets", an
 *     unknown dtype, a shape that is not a list of at most SAFETENSORS_DIMS_MAX
 *     non-negative integers, data_offsets that are not two non-negative integers
 *     BEGIN <= END, an element count (or bit count) past 2^64, a sub-byte tensor (F4, F6)
 *     whose bits are not a whole number of bytes, END - BEGIN other than the tensor's bytes;
 *   - a tensor that runs past the end of the file; sorted by (BEGIN, END), tensors that do
 *     not tile the buffer [0, END of the last) exactly (a hole, or an overlap); a file that
 *     does not end exactly at 8 + N + that END.
 * Keys of a tensor entry other than the three are ignored, as the reference reader does.
 *
 * Caps. Each one, when hit, is an -EBADMSG naming it. Whatever the file, the reader holds
 * the header (at most SAFETENSORS_HEADER_MAX bytes), jansson's tree of at most
 * SAFETENSORS_TOKENS_MAX values, and the list of tensors. Measured peaks (taskpatch diff, a
 * file against itself): 290 MB for a 99 MB __metadata__ string (the header, jansson's lexer
 * buffer and its copy of the string), 160 MB for 131072 tensors, 90 MB for a header of 2^21
 * tokens.
 */

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "macro.h"

#define SAFETENSORS_HEADER_MAX  100000000u /* bytes of the JSON header: the reference reader's MAX_HEADER_SIZE */
#define SAFETENSORS_TENSORS_MAX 131072u    /* tensors in one file (a 5 GB shard of a MoE model holds a few 1000s) */
#define SAFETENSORS_NAME_MAX    4096u      /* bytes of one tensor name */
#define SAFETENSORS_DIMS_MAX    64u        /* dimensions of one tensor (numpy's NPY_MAXDIMS) */
#define SAFETENSORS_TOKENS_MAX  (1u << 21) /* '{', '[', ',' and ':' of the header, outside strings */

/*
 * The dtypes, each with a stable id: the id is a Site.type (common/artifact/artifact.h),
 * hashed into layout fingerprints that signed manifests carry, so an id never changes and
 * new dtypes take new ids at the end. The names are the format's own, as the header spells
 * them. The list is the reference implementation's `enum Dtype` and its `bitsize()`
 * (huggingface/safetensors, safetensors/src/tensor.rs, as of commit 24b0b28, 2026-05):
 * F4, F6_E2M3, F6_E3M2 and F8_E8M0 came with MXFP4/MXFP6 support (2025-06), C64 with
 * complex64 (2025-10), F8_E4M3FNUZ and F8_E5M2FNUZ with AMD's FP8 variants (2026-04).
 */
typedef enum SafetensorsDtype {
        SAFETENSORS_BOOL = 0,         /*  8 bits */
        SAFETENSORS_U8 = 1,           /*  8 */
        SAFETENSORS_I8 = 2,           /*  8 */
        SAFETENSORS_I16 = 3,          /* 16 */
        SAFETENSORS_U16 = 4,          /* 16 */
        SAFETENSORS_F16 = 5,          /* 16 */
        SAFETENSORS_BF16 = 6,         /* 16 */
        SAFETENSORS_I32 = 7,          /* 32 */
        SAFETENSORS_U32 = 8,          /* 32 */
        SAFETENSORS_F32 = 9,          /* 32 */
        SAFETENSORS_F64 = 10,         /* 64 */
        SAFETENSORS_I64 = 11,         /* 64 */
        SAFETENSORS_U64 = 12,         /* 64 */
        SAFETENSORS_F8_E5M2 = 13,     /*  8 */
        SAFETENSORS_F8_E4M3 = 14,     /*  8 */
        SAFETENSORS_F8_E8M0 = 15,     /*  8: OCP MX scale */
        SAFETENSORS_F4 = 16,          /*  4: MXFP4 (E2M1), two per byte */
        SAFETENSORS_F6_E2M3 = 17,     /*  6: MXFP6, packed */
        SAFETENSORS_F6_E3M2 = 18,     /*  6: MXFP6, packed */
        SAFETENSORS_C64 = 19,         /* 64: two F32 */
        SAFETENSORS_F8_E4M3FNUZ = 20, /*  8 */
        SAFETENSORS_F8_E5M2FNUZ = 21, /*  8 */
        _SAFETENSORS_DTYPE_MAX,
        _SAFETENSORS_DTYPE_INVALID = -EINVAL,
} SafetensorsDtype;

/* "F16", "BF16", ... as the header spells them; NULL when out of range. */
const char *safetensors_dtype_to_string(SafetensorsDtype d);
/* The dtype spelled exactly @s (case-sensitive), or _SAFETENSORS_DTYPE_INVALID. */
SafetensorsDtype safetensors_dtype_from_string(const char *s);
/* Bits of one element (4, 6, 8, 16, 32 or 64); 0 when out of range. */
unsigned safetensors_dtype_bits(SafetensorsDtype d);

typedef struct SafetensorsTensor {
        char *name;             /* NUL-terminated, nonempty, unique, not "__metadata__" */
        SafetensorsDtype dtype;
        uint32_t n_dims;        /* 0 (a scalar) .. SAFETENSORS_DIMS_MAX */
        uint64_t *shape;        /* n_dims entries (NULL when 0) */
        uint64_t n_elements;    /* product of shape (1 for a scalar) */
        uint64_t begin, end;    /* data_offsets, relative to the data buffer */
        uint64_t offset;        /* absolute: data_offset + begin */
        uint64_t length;        /* end - begin: n_elements * bits / 8 */
} SafetensorsTensor;

typedef struct Safetensors {
        uint64_t header_length;      /* N */
        uint64_t data_offset;        /* 8 + N */
        uint64_t file_size;          /* data_offset + the last tensor's end */
        SafetensorsTensor *tensors;  /* sorted by (begin, end), then header order; tiling the buffer */
        size_t n_tensors;
        size_t n_metadata;           /* entries of __metadata__ */
} Safetensors;

/*
 * Does the start of a file of @file_size bytes look like safetensors? @head holds its first
 * @len bytes (at least 9 for a yes): N plausible (8 + N <= @file_size, N <= the cap) and
 * byte 8 '{'. There is no magic: a file that passes is safetensors or broken.
 */
bool safetensors_probe(const uint8_t *head, size_t len, uint64_t file_size);

/*
 * Parse the safetensors file open on @fd (a regular file; read with pread, the descriptor's
 * offset is neither used nor moved). On success *@ret owns a new Safetensors (free with
 * safetensors_free). Returns -EBADMSG for malformed input, -EINVAL if @fd is not a regular
 * file, -ENOMEM, or the -errno of a failed read; @err (may be NULL) then says what and where,
 * and *@ret is untouched.
 */
_warn_unused_result_ int safetensors_read(int fd, Safetensors **ret, TpError *err);

/* Accepts NULL; returns NULL. */
Safetensors *safetensors_free(Safetensors *s);
DEFINE_POINTER_CLEANUP(Safetensors, safetensors_free)
