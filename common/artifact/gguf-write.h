/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * GGUF writer: builds a header (key/values and tensor infos) in memory, then streams the
 * file — the header first, then every tensor's bytes in table order — into a temporary
 * beside the destination, which commit fsyncs and renames into place (common/base/fileio.h).
 * Memory is the header's records; tensor data and arrays copied from another file stream.
 *
 * The layout is llama.cpp's (ggml/src/gguf.cpp, gguf_write_to_file), so a file written
 * from the same records is byte-identical to one llama.cpp writes:
 *
 *     "GGUF", u32 version 3, u64 n_tensors, u64 n_kv
 *     the key/values in the order they were set (a key set again moves to the end, as
 *         gguf_set_val_* does); a bool is written as one byte 0 or 1
 *     the tensor infos in the order they were added: name, u32 n_dims, u64 ne[n_dims],
 *         u32 type, u64 offset; n_dims is ggml_n_dims() — trailing dimensions of 1 are
 *         dropped, at least 1 — whatever the caller passed (one deliberate difference:
 *         ggml drops a trailing 0 too, which misdescribes an empty tensor; it is kept here)
 *     zero bytes up to the alignment; then each tensor's bytes followed by zero bytes up
 *         to the alignment (after the last tensor too). Tensor i's offset, relative to
 *         the data section, is the sum of the padded sizes of the tensors before it.
 *
 * The alignment is the value of a UINT32 "general.alignment" key when one is set at
 * gguf_writer_begin() (a nonzero power of two), else 32.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "gguf.h"
#include "macro.h"

#define GGUF_WRITE_VERSION 3u

typedef struct GgufWriter GgufWriter;

_warn_unused_result_ int gguf_writer_new(GgufWriter **ret);
/* Accepts NULL; removes the temporary of an uncommitted file. Returns NULL. */
GgufWriter *gguf_writer_free(GgufWriter *w);
DEFINE_POINTER_CLEANUP(GgufWriter, gguf_writer_free)

/*
 * Key/values. Each setter first removes @key when present (returns -EINVAL for an empty
 * key or one holding a NUL, -EBUSY once gguf_writer_begin() ran). Scalars: @bits holds the
 * value's little-endian bits, widened (a float32 as its 32 bits, an int8 sign- or
 * zero-extended: only the low bytes are written); bool is written as bits != 0.
 */
_warn_unused_result_ int gguf_writer_set_scalar(GgufWriter *w, const char *key, GgufValueType type, uint64_t bits);
_warn_unused_result_ int gguf_writer_set_u32(GgufWriter *w, const char *key, uint32_t v);
_warn_unused_result_ int gguf_writer_set_f32(GgufWriter *w, const char *key, float v);
/* A string of @len bytes (may hold NULs). */
_warn_unused_result_ int gguf_writer_set_string(GgufWriter *w, const char *key, const char *s, size_t len);
/* An array of @count scalars of @type (not STRING, not ARRAY) from @data (@count × the type's size bytes). */
_warn_unused_result_ int gguf_writer_set_array(GgufWriter *w, const char *key, GgufValueType type, const void *data,
                                               uint64_t count);
/* An array of @count NUL-terminated strings. */
_warn_unused_result_ int gguf_writer_set_string_array(GgufWriter *w, const char *key, const char *const *strs,
                                                      uint64_t count);
/*
 * The key/value @kv of the file @g open on @fd, as gguf_set_kv copies it: scalars and strings
 * from memory; arrays stay on disk and are copied from @fd when the header is written (so
 * @fd must stay open until gguf_writer_begin() returns). Arrays of arrays are refused
 * (-EOPNOTSUPP: llama.cpp cannot hold them); bool array elements are written as 0 or 1.
 */
_warn_unused_result_ int gguf_writer_copy_kv(GgufWriter *w, int fd, const GgufKv *kv, TpError *err);
/* Remove @key: 1 when it was there, 0 when not, -EBUSY once begun. */
int gguf_writer_remove(GgufWriter *w, const char *key);

/*
 * Add a tensor of shape @ne[0..@n_dims) (1..4 dimensions) and ggml type @type. Returns its
 * index, -EEXIST for a duplicate name, -EINVAL for a bad name, shape or type (ne[0] not a
 * multiple of the type's block), -EOVERFLOW, or -EBUSY once begun.
 */
_warn_unused_result_ int gguf_writer_add_tensor(GgufWriter *w, const char *name, uint32_t n_dims,
                                                const uint64_t *ne, uint32_t type);

size_t gguf_writer_n_tensors(const GgufWriter *w);
/* Bytes of tensor @i (not padded). */
uint64_t gguf_writer_tensor_size(const GgufWriter *w, size_t i);
/* Valid after gguf_writer_begin(): tensor @i's offset relative to the data section; the data section's start; the file's size. */
uint64_t gguf_writer_tensor_offset(const GgufWriter *w, size_t i);
uint64_t gguf_writer_data_offset(const GgufWriter *w);
uint64_t gguf_writer_file_size(const GgufWriter *w);

/*
 * Create the temporary for @path and write the header. With @no_sync the commit skips the
 * fsyncs (scratch output: atomic, not durable). After this, no key or tensor may change.
 */
_warn_unused_result_ int gguf_writer_begin(GgufWriter *w, const char *path, bool no_sync, TpError *err);
/*
 * The next @n bytes of tensor data, in table order; may cross tensor boundaries (the
 * padding is written between them). Writing more than the tensors hold is -EINVAL.
 */
_warn_unused_result_ int gguf_writer_write(GgufWriter *w, const void *data, size_t n, TpError *err);
/* Check that every tensor byte was written, then fsync and rename onto the path. */
_warn_unused_result_ int gguf_writer_commit(GgufWriter *w, TpError *err);
