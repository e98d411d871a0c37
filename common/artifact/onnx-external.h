/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * TensorProto.external_data, for the ONNX reader (onnx.c) alone: the entries are gathered
 * while their TensorProto is walked and checked against the rules onnx.h lists once the whole
 * message has been read, since data_location may come after them and only an EXTERNAL
 * tensor's entries count.
 */

#include <stdbool.h>
#include <stdint.h>

#include "macro.h"
#include "onnx.h"
#include "pbwire.h"

enum {
        ONNX_EXTERNAL_LOCATION,
        ONNX_EXTERNAL_OFFSET,
        ONNX_EXTERNAL_LENGTH,
        ONNX_EXTERNAL_CHECKSUM,
        _ONNX_EXTERNAL_KEY_MAX,
};

/* One known key as the entries give it. */
typedef struct OnnxExternalKey {
        bool seen;
        char *value;            /* of the first entry with this key; NULL when it had no value */
        uint64_t at;            /* tag offset of that entry */
        uint64_t again_at;      /* tag offset of a second entry with this key, 0 if none */
} OnnxExternalKey;

typedef struct OnnxExternal {
        OnnxExternalKey keys[_ONNX_EXTERNAL_KEY_MAX];
} OnnxExternal;

/*
 * Walk the StringStringEntryProto in @f, external_data #@index of the TensorProto being walked,
 * into @x: a known key is recorded, any other ignored. Keys and values are capped at
 * ONNX_MAX_NAME bytes and may not hold a NUL byte (-EBADMSG).
 */
_warn_unused_result_ int onnx_external_entry(PbWalker *w, const PbField *f, int64_t index, OnnxExternal *x);

/*
 * Check the entries of an EXTERNAL tensor, with its TensorProto as the walker's current message
 * (errors name it), and set @t's location (taken from @x) and ext_* fields. -EBADMSG with a
 * message naming the key, its value and its entry's offset; @t's fields may then be half set.
 */
_warn_unused_result_ int onnx_external_parse(PbWalker *w, OnnxExternal *x, OnnxInitializer *t);

/* Free what @x holds; it may be used again. */
void onnx_external_done(OnnxExternal *x);
