/* SPDX-License-Identifier: MIT */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "onnx-quant.h"

struct OnnxQuantOp {
        const char *op_type;
        int data, scale, zero_point;    /* input indexes; -1: none */
        int64_t axis;                   /* fixed by the op, or DequantizeLinear's default */
        bool axis_attribute;            /* the node's "axis" attribute overrides it */
};

static const OnnxQuantOp quant_ops[] = {
        { "DequantizeLinear", 0, 1, 2, 1, true },
        { "QLinearConv", 3, 4, 5, 0, false },
        { "QLinearMatMul", 3, 4, 5, -1, false },
        { "ConvInteger", 1, -1, 3, 0, false },
        { "MatMulInteger", 1, -1, 3, -1, false },
};

const OnnxQuantOp *onnx_quant_op(const char *op_type, const char *domain) {
        if (!op_type || (domain && domain[0] && strcmp(domain, "ai.onnx") != 0 && strcmp(domain, "com.microsoft") != 0))
                return NULL;
        for (size_t i = 0; i < ELEMENTSOF(quant_ops); i++)
                if (strcmp(op_type, quant_ops[i].op_type) == 0)
                        return &quant_ops[i];
        return NULL;
}

/* Input @i, taken out of @inputs (NULL when absent or empty: ONNX's way to leave an input out). */
static char *take(char **inputs, size_t n, int i) {
        if (i < 0 || (size_t) i >= n || !inputs[i] || !inputs[i][0])
                return NULL;
        return TAKE_PTR(inputs[i]);
}

void onnx_quant_attribute(OnnxQuantAttributes *a, const char *name, int64_t i) {
        if (name && strcmp(name, "axis") == 0) {
                a->has_axis = true;
                a->axis = i;
        } else if (name && strcmp(name, "block_size") == 0)
                a->block_size = i;
}

void onnx_quant_use_make(const OnnxQuantOp *op, char **inputs, size_t n, const OnnxQuantAttributes *a,
                         OnnxQuantUse *u) {
        *u = (OnnxQuantUse) { .data = take(inputs, n, op->data), .scale = take(inputs, n, op->scale),
                              .zero_point = take(inputs, n, op->zero_point),
                              .axis = op->axis_attribute && a->has_axis ? a->axis : op->axis,
                              .blocked = op->axis_attribute && a->block_size > 0 };
}

void onnx_quant_use_done(OnnxQuantUse *u) {
        free(u->data);
        free(u->scale);
        free(u->zero_point);
        *u = (OnnxQuantUse) {};
}

void onnx_quant_uses_free(Onnx *o) {
        for (size_t i = 0; i < o->n_uses; i++)
                onnx_quant_use_done(&o->uses[i]);
        free(o->uses);
        o->uses = NULL;
        o->n_uses = 0;
}

size_t onnx_quant_use_name_bytes(const OnnxQuantUse *u) {
        return strlen(u->data) + 1 + (u->scale ? strlen(u->scale) + 1 : 0) +
               (u->zero_point ? strlen(u->zero_point) + 1 : 0);
}

int onnx_quant_uses_append(Onnx *o, size_t *cap, OnnxQuantUse *u) {
        if (o->n_uses == *cap) {
                size_t n = *cap ? *cap * 2 : 16;
                OnnxQuantUse *p = reallocarray(o->uses, n, sizeof(*p));
                if (!p)
                        return -ENOMEM;
                o->uses = p;
                *cap = n;
        }
        o->uses[o->n_uses++] = *u;
        *u = (OnnxQuantUse) {};
        return 0;
}

static int cmp_use(const void *a, const void *b) {
        const OnnxQuantUse *x = a, *y = b;
        return strcmp(x->data, y->data);
}

void onnx_quant_uses_sort(Onnx *o) {
        if (o->n_uses > 1)
                qsort(o->uses, o->n_uses, sizeof(OnnxQuantUse), cmp_use);
}

static bool same_name(const char *a, const char *b) {
        return a == b || (a && b && strcmp(a, b) == 0);
}

/* A node's axis as a dimension of @t: a negative one counts from the last. */
static int64_t axis_in(const OnnxInitializer *t, int64_t axis) {
        return axis < 0 ? axis + (int64_t) t->n_dims : axis;
}

const OnnxQuantUse *onnx_quant_use_of(const Onnx *o, const OnnxInitializer *t) {
        size_t lo = 0, hi = o->n_uses;

        /* o->uses is sorted by data name: find the first use of t->name. */
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (strcmp(o->uses[mid].data, t->name) < 0)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        if (lo == o->n_uses || strcmp(o->uses[lo].data, t->name) != 0)
                return NULL;
        const OnnxQuantUse *u = &o->uses[lo];
        for (size_t i = lo + 1; i < o->n_uses && strcmp(o->uses[i].data, t->name) == 0; i++)
                if (!same_name(u->scale, o->uses[i].scale) || !same_name(u->zero_point, o->uses[i].zero_point) ||
                    axis_in(t, u->axis) != axis_in(t, o->uses[i].axis) || u->blocked != o->uses[i].blocked)
                        return NULL;
        return u->blocked ? NULL : u;
}
