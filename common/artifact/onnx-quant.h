/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The quantizing nodes of an ONNX graph, for the ONNX reader (onnx.c) alone: which op_types
 * dequantize one of their inputs, and which inputs are its data, scale and zero point (the
 * table in onnx.h, OnnxQuantUse). onnx_quant_use_of() is onnx.h's.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "macro.h"
#include "onnx.h"

#define ONNX_QUANT_INPUTS 6             /* inputs a quantizing node's use is read from */

typedef struct OnnxQuantOp OnnxQuantOp;

/* The quantizing op of this op_type and domain, or NULL. */
const OnnxQuantOp *onnx_quant_op(const char *op_type, const char *domain);

/* A node's attributes a quantizing op reads. */
typedef struct OnnxQuantAttributes {
        bool has_axis;
        int64_t axis, block_size;
} OnnxQuantAttributes;

/* Record the integer attribute @name (NULL: unnamed) of value @i, when it is one of those. */
void onnx_quant_attribute(OnnxQuantAttributes *a, const char *name, int64_t i);

/*
 * The use a node of @op with @inputs (the first @n of its inputs) and attributes @a makes: the
 * strings it keeps are taken out of @inputs (set to NULL). u->data is NULL when the node names
 * no data input.
 */
void onnx_quant_use_make(const OnnxQuantOp *op, char **inputs, size_t n, const OnnxQuantAttributes *a,
                         OnnxQuantUse *u);
void onnx_quant_use_done(OnnxQuantUse *u);
/* Free o->uses. */
void onnx_quant_uses_free(Onnx *o);
/* Bytes its names take, with their NULs (for the reader's cap on names). */
size_t onnx_quant_use_name_bytes(const OnnxQuantUse *u);
/* Move @u to the end of o->uses (@cap: its allocated length). -ENOMEM, @u left as it was. */
_warn_unused_result_ int onnx_quant_uses_append(Onnx *o, size_t *cap, OnnxQuantUse *u);

/* Sort o->uses by data name, for onnx_quant_use_of(). */
void onnx_quant_uses_sort(Onnx *o);
