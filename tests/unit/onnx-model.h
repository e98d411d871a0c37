/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * For the ONNX unit tests (check_onnx*.c): a tiny protobuf encoder that builds ModelProtos byte by
 * byte, reading them back through a memfd, and the checks every successful read must pass.
 * Everything aborts the test on failure.
 */

#include <check.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check-main.h"
#include "macro.h"
#include "onnx.h"
#include "test-buf.h"

/* ---- a tiny protobuf encoder -------------------------------------------------------------------- */

static inline void varint(Buf *b, uint64_t v) {
        do {
                uint8_t c = (uint8_t) (v & 0x7f) | (v > 0x7f ? 0x80 : 0);
                put(b, &c, 1);
                v >>= 7;
        } while (v);
}

static inline void tag(Buf *b, uint32_t field, unsigned wire) {
        varint(b, (uint64_t) field << 3 | wire);
}

static inline void f_uint(Buf *b, uint32_t field, uint64_t v) {
        tag(b, field, 0);
        varint(b, v);
}

static inline void f_bytes(Buf *b, uint32_t field, const void *d, size_t n) {
        tag(b, field, 2);
        varint(b, n);
        put(b, d, n);
}

static inline void f_str(Buf *b, uint32_t field, const char *s) {
        f_bytes(b, field, s, strlen(s));
}

/* Append @sub as field @field and free it; returns the offset of its payload within @b. */
static inline size_t f_msg(Buf *b, uint32_t field, Buf *sub) {
        tag(b, field, 2);
        varint(b, sub->n);
        size_t at = b->n;
        put(b, sub->p, sub->n);
        free(sub->p);
        *sub = (Buf) {};
        return at;
}

/* A TensorProto: dims (unpacked, as onnx writes them), data_type, name, raw_data. */
static inline Buf tensor_raw(const char *name, int32_t type, const int64_t *dims, size_t n_dims, const void *d, size_t n) {
        Buf t = {};
        for (size_t i = 0; i < n_dims; i++)
                f_uint(&t, 1, (uint64_t) dims[i]);
        f_uint(&t, 2, (uint64_t) type);
        if (name)
                f_str(&t, 8, name);
        f_bytes(&t, 9, d, n);
        return t;
}

/* An external_data entry (StringStringEntryProto); a NULL key or value is left out. */
typedef struct OnnxEntry {
        const char *key, *value;
} OnnxEntry;

/*
 * A FLOAT TensorProto @name [4] with @n external_data entries and then data_location @location
 * (-1: none). @ret_entry_at (if not NULL) gets where each entry's tag is within the tensor.
 */
static inline Buf tensor_entries(const char *name, const OnnxEntry *e, size_t n, int location, size_t *ret_entry_at) {
        Buf t = {};
        f_uint(&t, 1, 4);
        f_uint(&t, 2, ONNX_TYPE_FLOAT);
        f_str(&t, 8, name);
        for (size_t i = 0; i < n; i++) {
                Buf entry = {};
                if (e[i].key)
                        f_str(&entry, 1, e[i].key);
                if (e[i].value)
                        f_str(&entry, 2, e[i].value);
                if (ret_entry_at)
                        ret_entry_at[i] = t.n;
                f_msg(&t, 13, &entry);
        }
        if (location >= 0)
                f_uint(&t, 14, (uint64_t) location);
        return t;
}

/* A ModelProto holding @graph (freed); *@ret_graph_at (if not NULL): where the graph's payload starts. */
static inline Buf model_at(Buf *graph, size_t *ret_graph_at) {
        Buf m = {}, opset = {};
        f_uint(&m, 1, 8);
        f_str(&m, 2, "check_onnx");
        size_t at = f_msg(&m, 7, graph);
        if (ret_graph_at)
                *ret_graph_at = at;
        f_str(&opset, 1, "");
        f_uint(&opset, 2, 13);
        f_msg(&m, 8, &opset);
        return m;
}

static inline Buf model_of(Buf *graph) {
        return model_at(graph, NULL);
}

/* A node: op_type, outputs, and attributes (already-encoded AttributeProtos, freed). */
static inline Buf node(const char *op_type, const char *name, const char *output, Buf *attrs, size_t n_attrs) {
        Buf nd = {};
        f_str(&nd, 1, "x");
        if (output)
                f_str(&nd, 2, output);
        if (name)
                f_str(&nd, 3, name);
        f_str(&nd, 4, op_type);
        for (size_t i = 0; i < n_attrs; i++)
                f_msg(&nd, 5, &attrs[i]);
        return nd;
}

static inline Buf attr_graph(const char *name, Buf *g) {
        Buf a = {};
        f_str(&a, 1, name);
        f_uint(&a, 20, 5);
        f_msg(&a, 6, g);
        return a;
}

static inline Buf attr_tensor(const char *name, Buf *t) {
        Buf a = {};
        f_str(&a, 1, name);
        f_uint(&a, 20, 4);
        f_msg(&a, 5, t);
        return a;
}

/*
 * A node with explicit inputs, as a quantizing node needs them: @inputs (NULL: left out, written as
 * "", ONNX's way), one output "y", op_type, @domain (NULL: none), attributes (freed).
 */
static inline Buf node_in(const char *op_type, const char *domain, const char *const *inputs, size_t n_inputs,
                          Buf *attrs, size_t n_attrs) {
        Buf nd = {};
        for (size_t i = 0; i < n_inputs; i++)
                f_str(&nd, 1, inputs[i] ? inputs[i] : "");
        f_str(&nd, 2, "y");
        f_str(&nd, 4, op_type);
        for (size_t i = 0; i < n_attrs; i++)
                f_msg(&nd, 5, &attrs[i]);
        if (domain)
                f_str(&nd, 7, domain);
        return nd;
}

/* An INT attribute: name(1), i(3) (a negative value is a 10-byte varint), type(20) INT = 2. */
static inline Buf attr_int(const char *name, int64_t i) {
        Buf a = {};
        f_str(&a, 1, name);
        f_uint(&a, 3, (uint64_t) i);
        f_uint(&a, 20, 2);
        return a;
}

/* ---- reading ------------------------------------------------------------------------------------ */

static inline int read_bytes(const uint8_t *d, size_t n, Onnx **ret, TpError *err) {
        int fd = memfd_with(d, n);
        int k = onnx_read(fd, ret, err);
        close(fd);
        return k;
}

static inline Onnx *read_ok(const Buf *b) {
        TpError err = {};
        Onnx *o = NULL;
        int k = read_bytes(b->p, b->n, &o, &err);
        ck_assert_msg(k == 0, "onnx_read: %d %s", k, err.message);
        return o;
}

/* What every successful read must satisfy, whatever the input. */
static inline void check_invariants(const Onnx *o, const uint8_t *d, size_t n) {
        ck_assert_uint_eq(o->file_size, n);
        for (size_t i = 0; i < o->n_inits; i++) {
                const OnnxInitializer *t = &o->inits[i];
                ck_assert_ptr_nonnull(t->name);
                ck_assert_uint_le(t->tensor_offset, n);
                ck_assert_uint_le(t->tensor_length, n - t->tensor_offset);
                ck_assert_uint_ge(t->offset, t->tensor_offset);
                ck_assert_uint_le(t->offset + t->length, t->tensor_offset + t->tensor_length);
                ck_assert(t->external == (t->location != NULL));
                if (t->external) {
                        ck_assert(t->location[0]);
                        ck_assert_uint_le(t->ext_offset, INT64_MAX);
                        ck_assert_uint_le(t->ext_length, INT64_MAX - t->ext_offset);
                        ck_assert(t->ext_has_length || t->ext_length == 0);
                } else
                        ck_assert(!t->ext_offset && !t->ext_length && !t->ext_has_length && !t->ext_has_checksum);
                if (!t->ext_has_checksum)
                        for (size_t j = 0; j < ONNX_SHA1_SIZE; j++)
                                ck_assert_quiet(t->ext_checksum[j] == 0, "'%s': checksum byte %zu set", t->name, j);
                ck_assert_uint_le(t->n_dims, ONNX_MAX_DIMS);
                if (i > 0) {
                        ck_assert_uint_le(o->inits[i - 1].tensor_offset + o->inits[i - 1].tensor_length,
                                          t->tensor_offset);
                        ck_assert_uint_le(o->inits[i - 1].offset + o->inits[i - 1].length, t->offset);
                }
                for (size_t j = 0; j < i; j++)
                        ck_assert_quiet(strcmp(o->inits[j].name, t->name) != 0, "duplicate name '%s'", t->name);
        }
        (void) d;
}

static inline const OnnxInitializer *find(const Onnx *o, const char *name) {
        for (size_t i = 0; i < o->n_inits; i++)
                if (strcmp(o->inits[i].name, name) == 0)
                        return &o->inits[i];
        ck_abort_msg("no tensor '%s' (of %zu)", name, o->n_inits);
        return NULL;
}

/* The data range of @name holds exactly @d[0..n). */
static inline void check_data(const Onnx *o, const Buf *file, const char *name, const void *d, size_t n) {
        const OnnxInitializer *t = find(o, name);
        ck_assert_msg(t->length == n, "'%s': length %" PRIu64 ", want %zu", name, t->length, n);
        ck_assert_msg(memcmp(file->p + t->offset, d, n) == 0, "'%s': bytes at %" PRIu64 " differ", name, t->offset);
}


static const int64_t dims23[] = { 2, 3 };
static const uint8_t blob_a[24] = "ABCDEFGHIJKLMNOPQRSTUVWX";
static const uint8_t blob_b[4] = { 0xff, 0x01, 0x80, 0x7f };

/*
 * Main graph: "w", an If node (then: "t1" and a Constant "c_then"; else: "e1"), a Loop-like node
 * with a graphs(11) list, a Constant with its output after the attribute, a non-Constant node's
 * tensor attribute and tensors list, a Constant sparse_value, a Constant of another domain.
 */
static inline Buf nested_model(void) {
        Buf g = {}, sub = {}, t, a[2], n;

        t = tensor_raw("w", 1, dims23, 2, blob_a, sizeof(blob_a));
        f_msg(&g, 5, &t);

        t = tensor_raw("ignored", 3, NULL, 0, "CT", 2);
        a[0] = attr_tensor("value", &t);
        n = node("Constant", NULL, "c_then", a, 1);
        f_msg(&sub, 1, &n);
        t = tensor_raw("t1", 3, NULL, 0, "T1", 2);
        f_msg(&sub, 5, &t);
        a[0] = attr_graph("then_branch", &sub);
        t = tensor_raw("e1", 3, NULL, 0, "E1", 2);
        f_msg(&sub, 5, &t);
        a[1] = attr_graph("else_branch", &sub);
        n = node("If", "if0", "y", a, 2);
        f_msg(&g, 1, &n);

        a[0] = (Buf) {};
        f_str(&a[0], 1, "branches");
        for (int i = 0; i < 2; i++) {
                t = tensor_raw(i ? "g1" : "g0", 3, NULL, 0, i ? "G1" : "G0", 2);
                f_msg(&sub, 5, &t);
                f_msg(&a[0], 11, &sub);
        }
        n = node("Switch", "sw", "z", a, 1);
        f_msg(&g, 1, &n);

        /* Constant, attribute first and output last: named after the output all the same. */
        t = tensor_raw(NULL, 1, NULL, 0, "LATE", 4);
        a[0] = attr_tensor("value", &t);
        n = (Buf) {};
        f_str(&n, 4, "Constant");
        f_msg(&n, 5, &a[0]);
        f_str(&n, 2, "late_out");
        f_msg(&g, 1, &n);

        t = tensor_raw(NULL, 1, NULL, 0, "NV", 2);
        a[0] = attr_tensor("value", &t);
        a[1] = (Buf) {};
        f_str(&a[1], 1, "vals");
        for (int i = 0; i < 2; i++) {
                t = tensor_raw(NULL, 1, NULL, 0, i ? "V1" : "V0", 2);
                f_msg(&a[1], 10, &t);
        }
        n = node("ConstantOfShape", "n1", "o1", a, 2);
        f_msg(&g, 1, &n);

        Buf sp = {};
        t = tensor_raw(NULL, 1, NULL, 0, "SV", 2);
        f_msg(&sp, 1, &t);
        t = tensor_raw(NULL, 7, NULL, 0, "SI", 2);
        f_msg(&sp, 2, &t);
        a[0] = (Buf) {};
        f_str(&a[0], 1, "sparse_value");
        f_msg(&a[0], 22, &sp);
        n = node("Constant", NULL, "sp_out", a, 1);
        f_msg(&g, 1, &n);

        t = tensor_raw(NULL, 1, NULL, 0, "OD", 2);
        a[0] = attr_tensor("value", &t);
        n = node("Constant", "custom", "cu_out", a, 1);
        f_str(&n, 7, "com.example");
        f_msg(&g, 1, &n);
        return model_of(&g);
}

static const struct {
        const char *name;
        const char *data;
} nested_want[] = {
        { "w", NULL },           { "c_then", "CT" },       { "t1", "T1" },          { "e1", "E1" },
        { "g0", "G0" },          { "g1", "G1" },           { "late_out", "LATE" },  { "n1.value", "NV" },
        { "n1.vals.0", "V0" },   { "n1.vals.1", "V1" },    { "sp_out.values", "SV" }, { "sp_out.indices", "SI" },
        { "custom.value", "OD" },
};
