/* SPDX-License-Identifier: MIT */
/*
 * common/artifact/onnx.c on well-formed models: ModelProtos built here byte by byte (tests/unit/onnx-model.h),
 * every range checked against the bytes that were encoded; and the fixtures of
 * tests/tools/make-onnx.py (base vs task differ exactly in the changed layers' sites).
 * Malformed input: check_onnx_malformed.c; the quantizing nodes (OnnxQuantUse, ArtifactQuant): check_onnx_quant.c.
 */

#include <check.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "check-main.h"
#include "onnx-model.h"
#include "onnx.h"

/* ---- well-formed models ------------------------------------------------------------------------- */

START_TEST(test_raw_data) {
        Buf g = {}, t;
        size_t at[3];

        t = tensor_raw("a", ONNX_TYPE_FLOAT, dims23, 2, blob_a, sizeof(blob_a));
        Buf ta = { .p = malloc(t.n), .n = t.n };
        memcpy(ta.p, t.p, t.n);
        at[0] = f_msg(&g, 5, &t);
        t = tensor_raw("b", ONNX_TYPE_INT8, (int64_t[]) { 4 }, 1, blob_b, sizeof(blob_b));
        at[1] = f_msg(&g, 5, &t);
        t = tensor_raw("empty", ONNX_TYPE_FLOAT, (int64_t[]) { 0 }, 1, "", 0);
        at[2] = f_msg(&g, 5, &t);
        size_t graph_at;
        Buf m = model_at(&g, &graph_at);

        Onnx *o = read_ok(&m);
        check_invariants(o, m.p, m.n);
        ck_assert_int_eq(o->ir_version, 8);
        ck_assert(!o->has_external);
        ck_assert_uint_eq(o->n_inits, 3);
        ck_assert_str_eq(o->inits[0].name, "a");
        ck_assert_str_eq(o->inits[1].name, "b");
        ck_assert_str_eq(o->inits[2].name, "empty");
        ck_assert_int_eq(o->inits[0].data_type, ONNX_TYPE_FLOAT);
        ck_assert_int_eq(o->inits[1].data_type, ONNX_TYPE_INT8);
        ck_assert_uint_eq(o->inits[0].n_dims, 2);
        ck_assert_int_eq(o->inits[0].dims[0], 2);
        ck_assert_int_eq(o->inits[0].dims[1], 3);
        ck_assert_uint_eq(o->inits[1].n_dims, 1);
        ck_assert_int_eq(o->inits[1].dims[0], 4);
        check_data(o, &m, "a", blob_a, sizeof(blob_a));
        check_data(o, &m, "b", blob_b, sizeof(blob_b));
        ck_assert_uint_eq(o->inits[2].length, 0);
        for (size_t i = 0; i < 3; i++)
                ck_assert_uint_eq(o->inits[i].tensor_offset, graph_at + at[i]);
        ck_assert_uint_eq(o->inits[0].tensor_length, ta.n);
        ck_assert(memcmp(m.p + o->inits[0].tensor_offset, ta.p, ta.n) == 0);
        onnx_free(o);
        free(ta.p);
        free(m.p);
}
END_TEST

/* A graph with no tensors at all (and an empty one): no sites, no list. */
START_TEST(test_no_initializers) {
        for (int empty = 0; empty < 2; empty++) {
                Buf g = {};
                if (!empty)
                        f_str(&g, 2, "no tensors here");
                Buf m = model_of(&g);
                Onnx *o = read_ok(&m);
                ck_assert_uint_eq(o->n_inits, 0);
                ck_assert_ptr_null(o->inits);
                ck_assert(!o->has_external);
                onnx_free(o);
                free(m.p);
        }
}
END_TEST

/* Typed data fields: one packed payload is the range; anything else is the whole TensorProto. */
enum { PACKED, UNPACKED, SPLIT, WITH_RAW, NO_DATA };
static const struct {
        const char *label;
        uint32_t field;         /* 4 float, 5 int32, 6 string, 7 int64, 10 double, 11 uint64 */
        int mode;
        bool payload;           /* the range is the packed payload (else the whole tensor) */
} typed[] = {
        { "float packed", 4, PACKED, true },      { "float unpacked", 4, UNPACKED, false },
        { "int32 packed", 5, PACKED, true },      { "int32 unpacked", 5, UNPACKED, false },
        { "int64 packed", 7, PACKED, true },      { "int64 unpacked", 7, UNPACKED, false },
        { "double packed", 10, PACKED, true },    { "double unpacked", 10, UNPACKED, false },
        { "uint64 packed", 11, PACKED, true },    { "uint64 unpacked", 11, UNPACKED, false },
        { "string", 6, UNPACKED, false },         { "float split in two chunks", 4, SPLIT, false },
        { "raw_data and float_data", 4, WITH_RAW, false }, { "no data", 4, NO_DATA, false },
};

static void encode_elems(Buf *b, uint32_t field, unsigned n, unsigned first) {
        for (unsigned i = first; i < first + n; i++) {
                uint64_t v = 0x0101010101010101ull * (i + 1);
                if (field == 4)
                        put(b, &v, 4);
                else if (field == 10)
                        put(b, &v, 8);
                else if (field == 6)
                        f_str(b, 6, "str");
                else
                        varint(b, field == 5 ? i * 300 : v);
        }
}

START_TEST(test_typed) {
        unsigned wire = typed[_i].field == 4 ? 5 : typed[_i].field == 10 ? 1 : 0;
        Buf t = {}, g = {}, payload = {};

        f_uint(&t, 1, 3);
        f_uint(&t, 2, ONNX_TYPE_FLOAT);
        f_str(&t, 8, "x");
        switch (typed[_i].mode) {
        case WITH_RAW:
                f_bytes(&t, 9, blob_b, sizeof(blob_b));
                /* fall through */
        case PACKED:
                encode_elems(&payload, typed[_i].field, 3, 0);
                f_bytes(&t, typed[_i].field, payload.p, payload.n);
                break;
        case SPLIT:
                encode_elems(&payload, typed[_i].field, 2, 0);
                f_bytes(&t, typed[_i].field, payload.p, payload.n);
                free(payload.p);
                payload = (Buf) {};
                encode_elems(&payload, typed[_i].field, 1, 2);
                f_bytes(&t, typed[_i].field, payload.p, payload.n);
                break;
        case UNPACKED:
                for (unsigned i = 0; i < 3; i++) {
                        if (typed[_i].field != 6)
                                tag(&t, typed[_i].field, wire);
                        encode_elems(&t, typed[_i].field, 1, i);
                }
                break;
        }
        /* Fields after the data, as a typed tensor written by onnx has them (name is 8). */
        f_str(&t, 12, "doc");
        Buf copy = { .p = malloc(t.n), .n = t.n };
        memcpy(copy.p, t.p, t.n);
        f_msg(&g, 5, &t);
        Buf m = model_of(&g);

        Onnx *o = read_ok(&m);
        check_invariants(o, m.p, m.n);
        ck_assert_uint_eq(o->n_inits, 1);
        const OnnxInitializer *x = &o->inits[0];
        ck_assert_uint_eq(x->tensor_length, copy.n);
        ck_assert(memcmp(m.p + x->tensor_offset, copy.p, copy.n) == 0);
        if (typed[_i].payload)
                check_data(o, &m, "x", payload.p, payload.n);
        else {
                ck_assert_uint_eq(x->offset, x->tensor_offset);
                ck_assert_uint_eq(x->length, x->tensor_length);
        }
        ck_assert_uint_eq(x->n_dims, 1);
        ck_assert_int_eq(x->dims[0], 3);
        onnx_free(o);
        free(copy.p);
        free(payload.p);
        free(m.p);
}
END_TEST

/* Packed dims, negative dims, data_type as a negative int32 (10-byte varint). */
START_TEST(test_dims) {
        Buf t = {}, g = {}, d = {};
        varint(&d, 7);
        varint(&d, (uint64_t) -1);
        varint(&d, 300);
        f_bytes(&t, 1, d.p, d.n);
        f_uint(&t, 1, 5);
        f_uint(&t, 2, (uint64_t) (int64_t) -2);
        f_str(&t, 8, "d");
        f_msg(&g, 5, &t);
        Buf m = model_of(&g);
        Onnx *o = read_ok(&m);
        ck_assert_uint_eq(o->inits[0].n_dims, 4);
        ck_assert_int_eq(o->inits[0].dims[0], 7);
        ck_assert_int_eq(o->inits[0].dims[1], -1);
        ck_assert_int_eq(o->inits[0].dims[2], 300);
        ck_assert_int_eq(o->inits[0].dims[3], 5);
        ck_assert_int_eq(o->inits[0].data_type, -2);
        onnx_free(o);
        free(d.p);
        free(m.p);
}
END_TEST

START_TEST(test_nested) {
        Buf m = nested_model();
        Onnx *o = read_ok(&m);

        check_invariants(o, m.p, m.n);
        ck_assert_uint_eq(o->n_inits, ELEMENTSOF(nested_want));
        for (size_t i = 0; i < ELEMENTSOF(nested_want); i++) {
                ck_assert_str_eq(o->inits[i].name, nested_want[i].name);
                if (nested_want[i].data)
                        check_data(o, &m, nested_want[i].name, nested_want[i].data, strlen(nested_want[i].data));
        }
        check_data(o, &m, "w", blob_a, sizeof(blob_a));
        onnx_free(o);
        free(m.p);
}
END_TEST

/* Sparse initializers, indices before values too; named "<values.name>.values" / ".indices". */
START_TEST(test_sparse) {
        Buf g = {}, sp = {}, t;

        t = tensor_raw("s", 1, NULL, 0, "VAL", 3);
        f_msg(&sp, 1, &t);
        t = tensor_raw(NULL, 7, NULL, 0, "IDX", 3);
        f_msg(&sp, 2, &t);
        f_uint(&sp, 3, 10);
        f_msg(&g, 15, &sp);
        t = tensor_raw(NULL, 7, NULL, 0, "ID2", 3);
        f_msg(&sp, 2, &t);
        t = tensor_raw("r", 1, NULL, 0, "VA2", 3);
        f_msg(&sp, 1, &t);
        f_msg(&g, 15, &sp);
        Buf m = model_of(&g);

        Onnx *o = read_ok(&m);
        check_invariants(o, m.p, m.n);
        ck_assert_uint_eq(o->n_inits, 4);
        ck_assert_str_eq(o->inits[0].name, "s.values");
        ck_assert_str_eq(o->inits[1].name, "s.indices");
        ck_assert_str_eq(o->inits[2].name, "r.indices");
        ck_assert_str_eq(o->inits[3].name, "r.values");
        check_data(o, &m, "s.values", "VAL", 3);
        check_data(o, &m, "r.indices", "ID2", 3);
        onnx_free(o);
        free(m.p);
}
END_TEST

#define SHA1_HEX "0123456789abcdef0123456789ABCDEF01234567"
static const uint8_t sha1_bytes[ONNX_SHA1_SIZE] = { 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x01, 0x23,
                                                    0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x01, 0x23, 0x45, 0x67 };
#define E(...) ((const OnnxEntry[]) { __VA_ARGS__ }), ELEMENTSOF(((const OnnxEntry[]) { __VA_ARGS__ }))

/* external_data an EXTERNAL tensor may hold, and what the reader makes of it. */
static const struct {
        const char *label;
        const OnnxEntry *e;
        size_t n;
        const char *location;
        uint64_t offset, length;
        bool has_length, has_checksum;
} ext_good[] = {
        { "location only: offset 0, to the end of the file", E({ "location", "w.bin" }), "w.bin", 0, 0, false, false },
        { "as onnx writes it", E({ "location", "model.onnx.data" }, { "offset", "4096" }, { "length", "16" }),
          "model.onnx.data", 4096, 16, true, false },
        { "zeros", E({ "offset", "0" }, { "length", "0" }, { "location", "d/w" }), "d/w", 0, 0, true, false },
        { "location taken as it is", E({ "location", "../../etc/passwd" }), "../../etc/passwd", 0, 0, false, false },
        { "checksum, either case", E({ "location", "w" }, { "checksum", SHA1_HEX }), "w", 0, 0, false, true },
        { "largest offset, no length", E({ "location", "w" }, { "offset", "9223372036854775807" }), "w",
          INT64_MAX, 0, false, false },
        { "offset + length at the largest file offset",
          E({ "location", "w" }, { "offset", "9223372036854775800" }, { "length", "7" }), "w", INT64_MAX - 7, 7, true,
          false },
        { "unknown keys ignored, twice too; entries without a key or value",
          E({ "basepath", "/x" }, { "basepath", "/y" }, { "prepacked_1", "k|0;4;0" }, { NULL, "12x" }, { "Offset", "-1" },
            { "size", NULL }, { "location", "w" }),
          "w", 0, 0, false, false },
};

START_TEST(test_external_good) {
        Buf g = {}, t;

        t = tensor_raw("inline", ONNX_TYPE_FLOAT, NULL, 0, "INL", 3);
        f_msg(&g, 5, &t);
        t = tensor_entries("ext", ext_good[_i].e, ext_good[_i].n, 1, NULL);
        f_msg(&g, 5, &t);
        Buf m = model_of(&g);
        Onnx *o = read_ok(&m);
        check_invariants(o, m.p, m.n);
        ck_assert(o->has_external);
        const OnnxInitializer *in = find(o, "inline"), *x = find(o, "ext");
        ck_assert(!in->external);
        ck_assert_ptr_null(in->location);
        ck_assert(x->external);
        ck_assert_str_eq(x->location, ext_good[_i].location);
        ck_assert_uint_eq(x->ext_offset, ext_good[_i].offset);
        ck_assert_uint_eq(x->ext_length, ext_good[_i].length);
        ck_assert(x->ext_has_length == ext_good[_i].has_length);
        ck_assert(x->ext_has_checksum == ext_good[_i].has_checksum);
        if (x->ext_has_checksum)
                ck_assert(memcmp(x->ext_checksum, sha1_bytes, ONNX_SHA1_SIZE) == 0);
        /* The range of an external tensor is its whole TensorProto. */
        ck_assert_uint_eq(x->offset, x->tensor_offset);
        ck_assert_uint_eq(x->length, x->tensor_length);
        onnx_free(o);
        free(m.p);
}
END_TEST

/* data_location after the entries or before them; a DEFAULT tensor's entries are not looked at. */
START_TEST(test_external_order) {
        Buf g = {}, t = {}, e = {};

        f_uint(&t, 14, 1);
        f_str(&e, 1, "length");
        f_str(&e, 2, "8");
        f_msg(&t, 13, &e);
        f_str(&e, 1, "location");
        f_str(&e, 2, "late.bin");
        f_msg(&t, 13, &e);
        f_str(&t, 8, "first");
        f_msg(&g, 5, &t);
        t = tensor_entries("default", E({ "location", "a" }, { "location", "" }, { "offset", "12x" }, { "checksum", "" }),
                           0, NULL);
        f_msg(&g, 5, &t);
        t = tensor_entries("absent", E({ "offset", "-1" }), -1, NULL);
        f_msg(&g, 5, &t);
        Buf m = model_of(&g);

        Onnx *o = read_ok(&m);
        check_invariants(o, m.p, m.n);
        const OnnxInitializer *x = find(o, "first");
        ck_assert(x->external);
        ck_assert_str_eq(x->location, "late.bin");
        ck_assert(x->ext_has_length);
        ck_assert_uint_eq(x->ext_length, 8);
        for (int i = 0; i < 2; i++) {
                x = find(o, i ? "absent" : "default");
                ck_assert(!x->external);
                ck_assert_ptr_null(x->location);
                ck_assert(!x->ext_has_length && !x->ext_has_checksum && x->ext_offset == 0);
        }
        onnx_free(o);
        free(m.p);
}
END_TEST

/* onnx_initializer_bytes: every fixed-size type, packing, scalars, empty tensors, bad dims, overflow. */
static const struct {
        int32_t type;
        uint32_t n_dims;
        int64_t dims[3];
        int want;               /* 0 or the error */
        uint64_t bytes;
} sizes[] = {
        { ONNX_TYPE_FLOAT, 2, { 2, 3 }, 0, 24 },
        { ONNX_TYPE_FLOAT, 0, {}, 0, 4 },                       /* a scalar */
        { ONNX_TYPE_UINT8, 1, { 5 }, 0, 5 },
        { ONNX_TYPE_INT8, 1, { 5 }, 0, 5 },
        { ONNX_TYPE_UINT16, 1, { 5 }, 0, 10 },
        { ONNX_TYPE_INT16, 1, { 5 }, 0, 10 },
        { ONNX_TYPE_INT32, 1, { 5 }, 0, 20 },
        { ONNX_TYPE_INT64, 1, { 5 }, 0, 40 },
        { ONNX_TYPE_BOOL, 1, { 5 }, 0, 5 },
        { ONNX_TYPE_FLOAT16, 1, { 5 }, 0, 10 },
        { ONNX_TYPE_DOUBLE, 1, { 5 }, 0, 40 },
        { ONNX_TYPE_UINT32, 1, { 5 }, 0, 20 },
        { ONNX_TYPE_UINT64, 1, { 5 }, 0, 40 },
        { ONNX_TYPE_COMPLEX64, 1, { 5 }, 0, 40 },
        { ONNX_TYPE_COMPLEX128, 1, { 5 }, 0, 80 },
        { ONNX_TYPE_BFLOAT16, 1, { 5 }, 0, 10 },
        { ONNX_TYPE_FLOAT8E4M3FN, 1, { 5 }, 0, 5 },
        { ONNX_TYPE_FLOAT8E4M3FNUZ, 1, { 5 }, 0, 5 },
        { ONNX_TYPE_FLOAT8E5M2, 1, { 5 }, 0, 5 },
        { ONNX_TYPE_FLOAT8E5M2FNUZ, 1, { 5 }, 0, 5 },
        { ONNX_TYPE_FLOAT8E8M0, 1, { 5 }, 0, 5 },
        { ONNX_TYPE_UINT4, 1, { 5 }, 0, 3 },                    /* two to a byte, rounded up */
        { ONNX_TYPE_INT4, 2, { 2, 2 }, 0, 2 },
        { ONNX_TYPE_INT4, 0, {}, 0, 1 },
        { ONNX_TYPE_FLOAT4E2M1, 3, { 3, 1, 1 }, 0, 2 },
        { ONNX_TYPE_UINT2, 1, { 5 }, 0, 2 },                    /* four to a byte */
        { ONNX_TYPE_INT2, 1, { 8 }, 0, 2 },
        { ONNX_TYPE_INT2, 1, { 9 }, 0, 3 },
        { ONNX_TYPE_FLOAT, 2, { 0, INT64_MAX }, 0, 0 },         /* empty, however large the rest */
        { ONNX_TYPE_FLOAT, 3, { INT64_MAX, INT64_MAX, 0 }, 0, 0 },
        { ONNX_TYPE_INT8, 1, { INT64_MAX }, 0, INT64_MAX },
        { ONNX_TYPE_INT4, 1, { INT64_MAX }, 0, (uint64_t) INT64_MAX / 2 + 1 },
        { ONNX_TYPE_FLOAT, 1, { INT64_MAX / 4 }, 0, (uint64_t) INT64_MAX / 4 * 4 },
        { ONNX_TYPE_FLOAT, 1, { INT64_MAX / 4 + 1 }, -EOVERFLOW, 0 },
        { ONNX_TYPE_COMPLEX128, 1, { INT64_MAX / 16 + 1 }, -EOVERFLOW, 0 },
        { ONNX_TYPE_INT8, 2, { 1ll << 32, 1ll << 31 }, -EOVERFLOW, 0 },
        { ONNX_TYPE_INT8, 3, { 1ll << 32, 1ll << 32, 0 }, 0, 0 },
        { ONNX_TYPE_FLOAT, 2, { 2, -1 }, -EINVAL, 0 },
        { ONNX_TYPE_FLOAT, 2, { 0, -1 }, -EINVAL, 0 },
        { ONNX_TYPE_STRING, 1, { 5 }, -EOPNOTSUPP, 0 },
        { ONNX_TYPE_UNDEFINED, 1, { 5 }, -EOPNOTSUPP, 0 },
        { 27, 1, { 5 }, -EOPNOTSUPP, 0 },
        { -1, 1, { 5 }, -EOPNOTSUPP, 0 },
        { INT32_MAX, 0, {}, -EOPNOTSUPP, 0 },
};

START_TEST(test_bytes) {
        OnnxInitializer t = { .data_type = sizes[_i].type, .n_dims = sizes[_i].n_dims };
        uint64_t got = 12345;

        memcpy(t.dims, sizes[_i].dims, sizeof(sizes[_i].dims));
        int k = onnx_initializer_bytes(&t, &got);
        ck_assert_msg(k == sizes[_i].want, "#%d (type %d): %d, want %d", _i, sizes[_i].type, k, sizes[_i].want);
        ck_assert_uint_eq(got, k == 0 ? sizes[_i].bytes : 12345);     /* untouched on failure */
}
END_TEST

/* Duplicates across subgraphs get "@k" in file order, skipping the names the file holds ("w@2"). */
START_TEST(test_duplicates) {
        Buf g = {}, sub = {}, t, a;

        t = tensor_raw("w", 1, NULL, 0, "W1", 2);
        f_msg(&g, 5, &t);
        for (int i = 0; i < 2; i++) {
                t = tensor_raw("w", 1, NULL, 0, i ? "W3" : "W2", 2);
                f_msg(&sub, 5, &t);
                a = attr_graph("body", &sub);
                Buf n = node("Loop", NULL, "y", &a, 1);
                f_msg(&g, 1, &n);
        }
        t = tensor_raw("w@2", 1, NULL, 0, "W4", 2);
        f_msg(&g, 5, &t);
        t = tensor_raw("", 1, NULL, 0, "W5", 2);
        f_msg(&g, 5, &t);
        Buf m = model_of(&g);

        Onnx *o = read_ok(&m);
        check_invariants(o, m.p, m.n);
        ck_assert_uint_eq(o->n_inits, 5);
        check_data(o, &m, "w", "W1", 2);
        check_data(o, &m, "w@3", "W2", 2);
        check_data(o, &m, "w@4", "W3", 2);
        check_data(o, &m, "w@2", "W4", 2);
        check_data(o, &m, "graph.initializer #2", "W5", 2);
        onnx_free(o);
        free(m.p);

        /* Many of one name, and the name some of them would get. */
        g = (Buf) {};
        for (int i = 0; i < 3000; i++) {
                t = tensor_raw("a", 1, NULL, 0, "", 0);
                f_msg(&g, 5, &t);
        }
        t = tensor_raw("a@5", 1, NULL, 0, "", 0);
        f_msg(&g, 5, &t);
        m = model_of(&g);
        o = read_ok(&m);
        check_invariants(o, m.p, m.n);
        ck_assert_str_eq(o->inits[0].name, "a");
        ck_assert_str_eq(o->inits[3].name, "a@4");
        ck_assert_str_eq(o->inits[4].name, "a@6");
        ck_assert_str_eq(o->inits[2999].name, "a@3001");
        ck_assert_str_eq(o->inits[3000].name, "a@5");
        onnx_free(o);
        free(m.p);
}
END_TEST

/* ModelProto.functions (Constant node, attribute default) and training_info graphs. */
START_TEST(test_functions_training) {
        Buf g = {}, f = {}, tr = {}, t, a;
        t = tensor_raw("main", 1, NULL, 0, "MN", 2);
        f_msg(&g, 5, &t);
        Buf m = model_of(&g);

        f_str(&f, 1, "myfunc");
        t = tensor_raw(NULL, 1, NULL, 0, "FC", 2);
        a = attr_tensor("value", &t);
        Buf n = node("Constant", NULL, "fc", &a, 1);
        f_msg(&f, 7, &n);
        t = tensor_raw(NULL, 1, NULL, 0, "FD", 2);
        a = attr_tensor("alpha", &t);
        f_msg(&f, 11, &a);
        f_msg(&m, 25, &f);
        f_str(&f, 1, "");       /* an empty name: named after where it is */
        t = tensor_raw(NULL, 1, NULL, 0, "FE", 2);
        a = attr_tensor("beta", &t);
        f_msg(&f, 11, &a);
        f_msg(&m, 25, &f);

        t = tensor_raw("ti", 1, NULL, 0, "TI", 2);
        f_msg(&g, 5, &t);
        f_msg(&tr, 1, &g);
        f_msg(&m, 20, &tr);

        Onnx *o = read_ok(&m);
        check_invariants(o, m.p, m.n);
        ck_assert_uint_eq(o->n_inits, 5);
        check_data(o, &m, "main", "MN", 2);
        check_data(o, &m, "functions #1.beta", "FE", 2);
        check_data(o, &m, "fc", "FC", 2);
        check_data(o, &m, "myfunc.alpha", "FD", 2);
        check_data(o, &m, "ti", "TI", 2);
        onnx_free(o);
        free(m.p);
}
END_TEST

/*
 * Every prefix of a valid model either fails with -EBADMSG or — only when the cut falls on a
 * top-level field boundary after the graph — is read as that shorter ModelProto, with every range
 * inside the prefix.
 */
/* ---- the fixtures of tests/tools/make-onnx.py --------------------------------------------------- */

static int run_generator(const char *dir, const char *const *extra) {
        const char *argv[32] = { "python3", "tests/tools/make-onnx.py", "--seed", "7", "--layers", "64",
                                 "--channels", "8", "--height", "4", "--width", "4" };
        size_t n = 12;
        char base[300];

        snprintf(base, sizeof(base), "%s/base.onnx", dir);
        argv[n++] = "-o";
        argv[n++] = base;
        for (size_t i = 0; extra && extra[i]; i++)
                argv[n++] = extra[i];
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                execvp("python3", (char **) argv);
                _exit(127);
        }
        int status;
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static Onnx *read_path(const char *dir, const char *file, Buf *ret_bytes) {
        char path[300];
        struct stat st;
        snprintf(path, sizeof(path), "%s/%s", dir, file);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        ck_assert_msg(fd >= 0, "%s: %m", path);
        TpError err = {};
        Onnx *o = NULL;
        ck_assert_msg(onnx_read(fd, &o, &err) == 0, "%s: %s", path, err.message);
        ck_assert_int_eq(fstat(fd, &st), 0);
        ret_bytes->n = (size_t) st.st_size;
        ret_bytes->p = malloc(ret_bytes->n);
        ck_assert_int_eq(pread(fd, ret_bytes->p, ret_bytes->n, 0), (ssize_t) ret_bytes->n);
        close(fd);
        check_invariants(o, ret_bytes->p, ret_bytes->n);
        return o;
}

START_TEST(test_fixtures) {
        char dir[] = "/tmp/check_onnx.XXXXXX", cmd[300], task[300], ext[300];
        static const char *const suffixes[] = { "weight", "w_scale", "w_zero_point", "bias" };
        Buf bb = {}, tb = {};

        if (access("tests/tools/make-onnx.py", R_OK) < 0)
                ck_abort_msg("run from the source tree: tests/tools/make-onnx.py not found");
        ck_assert_ptr_nonnull(mkdtemp(dir));
        snprintf(task, sizeof(task), "%s/task.onnx", dir);
        snprintf(ext, sizeof(ext), "%s/ext", dir);
        ck_assert_int_eq(run_generator(dir, (const char *const[]) { "--task-out", task, "--change-layers", "10",
                                                                      "--external", "one", "--external-dir", ext,
                                                                      NULL }), 0);

        Onnx *base = read_path(dir, "base.onnx", &bb), *t = read_path(dir, "task.onnx", &tb);
        ck_assert_int_eq(base->ir_version, 8);
        ck_assert(!base->has_external);
        ck_assert_uint_eq(base->n_inits, 64 * 6 + 2);      /* + y_scale, y_zero_point per layer; the input's */
        ck_assert_uint_eq(base->n_inits, t->n_inits);
        for (int l = 0; l < 64; l++)
                for (size_t s = 0; s < ELEMENTSOF(suffixes); s++) {
                        char name[64];
                        snprintf(name, sizeof(name), "layer.%d.%s", l, suffixes[s]);
                        const OnnxInitializer *x = find(base, name);
                        ck_assert_int_eq(x->data_type, s == 0 || s == 2 ? ONNX_TYPE_INT8
                                                       : s == 1       ? ONNX_TYPE_FLOAT
                                                                      : ONNX_TYPE_INT32);
                        ck_assert_uint_eq(x->n_dims, 1 + 3 * (s == 0));
                        ck_assert_int_eq(x->dims[0], 8);
                }

        /* Same layout; sites differ exactly in the changed layers' weights and scales. */
        size_t changed = 0;
        bool layer_changed[64] = {};
        for (size_t i = 0; i < base->n_inits; i++) {
                const OnnxInitializer *x = &base->inits[i], *y = &t->inits[i];
                ck_assert_str_eq(x->name, y->name);
                ck_assert_uint_eq(x->offset, y->offset);
                ck_assert_uint_eq(x->length, y->length);
                if (memcmp(bb.p + x->offset, tb.p + y->offset, x->length) != 0) {
                        int l;
                        char what[32];
                        ck_assert_int_eq(sscanf(x->name, "layer.%d.%31s", &l, what), 2);
                        ck_assert_msg(strcmp(what, "weight") == 0 || strcmp(what, "w_scale") == 0, "%s", x->name);
                        layer_changed[l] = true;
                        changed++;
                }
        }
        size_t n_layers = 0;
        for (int l = 0; l < 64; l++)
                n_layers += layer_changed[l];
        ck_assert_uint_eq(n_layers, 10);
        ck_assert_uint_eq(changed, 20);
        /* Outside the sites, the files are byte-identical. */
        ck_assert_uint_eq(bb.n, tb.n);
        for (size_t i = 0, at = 0; i <= base->n_inits; i++) {
                size_t end = i < base->n_inits ? base->inits[i].offset : bb.n;
                ck_assert(memcmp(bb.p + at, tb.p + at, end - at) == 0);
                at = i < base->n_inits ? base->inits[i].offset + base->inits[i].length : at;
        }
        onnx_free(base);
        onnx_free(t);
        free(bb.p);
        free(tb.p);

        /* The external-data variant is recognised and reported. */
        snprintf(cmd, sizeof(cmd), "ext/base.onnx");
        Onnx *e = read_path(dir, cmd, &bb);
        ck_assert(e->has_external);
        ck_assert_uint_eq(e->n_inits, 64 * 6 + 2);
        ck_assert(find(e, "layer.0.weight")->external);
        ck_assert_str_eq(find(e, "layer.0.weight")->location, "base.onnx.data");
        onnx_free(e);
        free(bb.p);

        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* make-onnx.py's external-data layouts, each read back and checked against the inline model. */
static const struct {
        const char *label;
        const char *args[10];   /* NULL-terminated */
        bool per_tensor;
        uint64_t threshold, align;      /* tensors under threshold stay inline; offsets a multiple of align */
        const char *location;           /* the one data file */
} layouts[] = {
        { "one file, contiguous as onnx.save_model", { "--external", "one" }, false, 0, 1, "base.onnx.data" },
        { "one file in a subdirectory, every tensor aligned to 4096",
          { "--external", "one", "--align", "4096", "--align-above", "0", "--location", "w/data.bin" }, false, 0, 4096,
          "w/data.bin" },
        { "a file per tensor, small ones inline, checksums",
          { "--external", "per-tensor", "--size-threshold", "100", "--checksum" }, true, 100, 1, NULL },
};

static Buf slurp(const char *dir, const char *file) {
        char path[400];
        snprintf(path, sizeof(path), "%s/%s", dir, file);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        ck_assert_msg(fd >= 0, "%s: %m", path);
        Buf b = {};
        uint8_t chunk[65536];
        ssize_t n;
        while ((n = read(fd, chunk, sizeof(chunk))) > 0)
                put(&b, chunk, (size_t) n);
        ck_assert_int_eq(n, 0);
        close(fd);
        return b;
}

/* "checksum" is the SHA-1 of the whole file, as sha1sum prints it. */
static void check_sha1(const char *dir, const char *file, const uint8_t want[ONNX_SHA1_SIZE]) {
        char cmd[400], hex[2 * ONNX_SHA1_SIZE + 1] = "", got[2 * ONNX_SHA1_SIZE + 1];
        snprintf(cmd, sizeof(cmd), "sha1sum '%s/%s'", dir, file);
        FILE *p = popen(cmd, "r");
        ck_assert_ptr_nonnull(p);
        ck_assert_int_eq(fscanf(p, "%40s", hex), 1);
        ck_assert_int_eq(pclose(p), 0);
        for (size_t i = 0; i < ONNX_SHA1_SIZE; i++)
                snprintf(got + 2 * i, 3, "%02x", want[i]);
        ck_assert_str_eq(got, hex);
}

START_TEST(test_fixtures_external) {
        char dir[] = "/tmp/check_onnx.XXXXXX", ext[300], extdir[300], cmd[300];
        const char *argv[16] = { "--layers", "4", "--external-dir", ext };
        Buf ib = {}, eb = {};

        ck_assert_ptr_nonnull(mkdtemp(dir));
        snprintf(ext, sizeof(ext), "%s/ext", dir);
        for (size_t i = 0; layouts[_i].args[i]; i++)
                argv[4 + i] = layouts[_i].args[i];
        ck_assert_int_eq(run_generator(dir, argv), 0);

        Onnx *in = read_path(dir, "base.onnx", &ib), *e = read_path(dir, "ext/base.onnx", &eb);
        ck_assert(!in->has_external);
        ck_assert(e->has_external);
        ck_assert_uint_eq(e->n_inits, in->n_inits);
        snprintf(extdir, sizeof(extdir), "%s/ext", dir);
        Buf one = layouts[_i].location ? slurp(extdir, layouts[_i].location) : (Buf) {};
        uint64_t end = 0;       /* of the previous tensor in the one file */
        for (size_t i = 0; i < in->n_inits; i++) {
                const OnnxInitializer *x = &in->inits[i], *y = find(e, x->name);
                uint64_t bytes;
                ck_assert_int_eq(onnx_initializer_bytes(x, &bytes), 0);
                ck_assert_uint_eq(bytes, x->length);
                ck_assert_msg(y->external == (x->length >= layouts[_i].threshold), "%s", x->name);
                if (!y->external) {
                        ck_assert_uint_eq(y->length, x->length);
                        ck_assert(memcmp(eb.p + y->offset, ib.p + x->offset, x->length) == 0);
                        continue;
                }
                ck_assert(y->ext_has_length);
                ck_assert_uint_eq(y->ext_length, bytes);
                ck_assert(y->ext_has_checksum == layouts[_i].per_tensor);
                Buf own = {}, *data = &one;
                if (layouts[_i].per_tensor) {
                        ck_assert_str_eq(y->location, x->name);         /* a valid file name: kept */
                        ck_assert_uint_eq(y->ext_offset, 0);
                        own = slurp(extdir, y->location);
                        ck_assert_uint_eq(own.n, bytes);
                        data = &own;
                        check_sha1(extdir, y->location, y->ext_checksum);
                } else {
                        ck_assert_str_eq(y->location, layouts[_i].location);
                        ck_assert_uint_eq(y->ext_offset % layouts[_i].align, 0);
                        ck_assert_uint_ge(y->ext_offset, end);
                        ck_assert_uint_lt(y->ext_offset - end, layouts[_i].align);     /* no gap but the padding */
                        end = y->ext_offset + y->ext_length;
                }
                ck_assert_uint_le(y->ext_offset + y->ext_length, data->n);
                ck_assert_msg(memcmp(data->p + y->ext_offset, ib.p + x->offset, bytes) == 0, "%s", x->name);
                free(own.p);
        }
        if (layouts[_i].location)
                ck_assert_uint_eq(end, one.n);
        free(one.p);
        onnx_free(in);
        onnx_free(e);
        free(ib.p);
        free(eb.p);
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        ck_assert_int_eq(system(cmd), 0);
}
END_TEST

static Suite *onnx_suite(void) {
        Suite *s = suite_create("onnx");
        TCase *tc = tcase_create("reader");

        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_raw_data);
        tcase_add_test(tc, test_no_initializers);
        tcase_add_loop_test(tc, test_typed, 0, ELEMENTSOF(typed));
        tcase_add_test(tc, test_dims);
        tcase_add_test(tc, test_nested);
        tcase_add_test(tc, test_sparse);
        tcase_add_loop_test(tc, test_external_good, 0, ELEMENTSOF(ext_good));
        tcase_add_test(tc, test_external_order);
        tcase_add_loop_test(tc, test_bytes, 0, ELEMENTSOF(sizes));
        tcase_add_test(tc, test_duplicates);
        tcase_add_test(tc, test_functions_training);
        tcase_add_test(tc, test_fixtures);
        tcase_add_loop_test(tc, test_fixtures_external, 0, ELEMENTSOF(layouts));
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(onnx_suite)
