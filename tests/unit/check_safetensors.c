/* SPDX-License-Identifier: MIT */
/*
 * common/artifact/safetensors.c: valid files (every dtype, sub-byte ones, empty tensors, a scalar,
 * __metadata__, padding, tensors listed out of order) and what artifact_open makes of them; each
 * refusal with its message; every truncation; the caps.
 */

#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "artifact.h"
#include "check-main.h"
#include "le.h"
#include "match.h"
#include "safetensors.h"
#include "test-buf.h"

/* 8-byte N, @header, @data bytes of a pattern, @extra bytes more. */
static Buf st_file(const char *header, size_t header_len, size_t data, size_t extra) {
        Buf f = {};
        uint8_t n[8];
        put_le64(n, header_len);
        put(&f, n, 8);
        put(&f, header, header_len);
        for (size_t i = 0; i < data + extra; i++) {
                uint8_t b = (uint8_t) (i * 7 + 1);
                put(&f, &b, 1);
        }
        return f;
}

static Buf st_of(const char *header, size_t data) {
        return st_file(header, strlen(header), data, 0);
}

static int read_buf(const Buf *f, Safetensors **ret, TpError *err) {
        int fd = memfd_with(f->p, f->n);
        int r = safetensors_read(fd, ret, err);
        close(fd);
        return r;
}

static Safetensors *read_ok(const Buf *f) {
        Safetensors *s = NULL;
        TpError err = {};
        int r = read_buf(f, &s, &err);
        ck_assert_msg(r == 0, "refused: %s", err.message);
        ck_assert_ptr_nonnull(s);
        return s;
}

/* Sorted, inside the file, tiling the buffer, ending at the end of the file. */
static void check_invariants(const Safetensors *s, size_t size) {
        uint64_t at = 0;
        ck_assert_uint_eq(s->file_size, size);
        ck_assert_uint_eq(s->data_offset, 8 + s->header_length);
        for (size_t i = 0; i < s->n_tensors; i++) {
                const SafetensorsTensor *t = &s->tensors[i];
                ck_assert_uint_eq(t->begin, at);
                ck_assert_uint_eq(t->offset, s->data_offset + t->begin);
                ck_assert_uint_eq(t->length, t->end - t->begin);
                ck_assert_uint_eq(t->n_elements * safetensors_dtype_bits(t->dtype), 8 * t->length);
                at = t->end;
        }
        ck_assert_uint_eq(s->data_offset + at, size);
}

static const SafetensorsTensor *find(const Safetensors *s, const char *name) {
        for (size_t i = 0; i < s->n_tensors; i++)
                if (strcmp(s->tensors[i].name, name) == 0)
                        return &s->tensors[i];
        ck_abort_msg("no tensor %s", name);
        return NULL;
}

/* ---- the dtypes -------------------------------------------------------------------------------- */

/* The reference's Dtype and bitsize() (safetensors/src/tensor.rs), with our stable ids. */
static const struct {
        const char *name;
        unsigned bits;
        int id;
} dtypes[] = {
        { "BOOL", 8, 0 },      { "U8", 8, 1 },       { "I8", 8, 2 },           { "I16", 16, 3 },
        { "U16", 16, 4 },      { "F16", 16, 5 },     { "BF16", 16, 6 },        { "I32", 32, 7 },
        { "U32", 32, 8 },      { "F32", 32, 9 },     { "F64", 64, 10 },        { "I64", 64, 11 },
        { "U64", 64, 12 },     { "F8_E5M2", 8, 13 }, { "F8_E4M3", 8, 14 },     { "F8_E8M0", 8, 15 },
        { "F4", 4, 16 },       { "F6_E2M3", 6, 17 }, { "F6_E3M2", 6, 18 },     { "C64", 64, 19 },
        { "F8_E4M3FNUZ", 8, 20 }, { "F8_E5M2FNUZ", 8, 21 },
};

START_TEST(test_dtype_table) {
        ck_assert_int_eq(ELEMENTSOF(dtypes), _SAFETENSORS_DTYPE_MAX);
        for (size_t i = 0; i < ELEMENTSOF(dtypes); i++) {
                SafetensorsDtype d = safetensors_dtype_from_string(dtypes[i].name);
                ck_assert_int_eq(d, dtypes[i].id);
                ck_assert_str_eq(safetensors_dtype_to_string(d), dtypes[i].name);
                ck_assert_uint_eq(safetensors_dtype_bits(d), dtypes[i].bits);
        }
        ck_assert_int_eq(safetensors_dtype_from_string("f16"), _SAFETENSORS_DTYPE_INVALID);
        ck_assert_int_eq(safetensors_dtype_from_string("F8_E4M3FN"), _SAFETENSORS_DTYPE_INVALID);
        ck_assert_int_eq(safetensors_dtype_from_string(""), _SAFETENSORS_DTYPE_INVALID);
        ck_assert_int_eq(safetensors_dtype_from_string(NULL), _SAFETENSORS_DTYPE_INVALID);
        ck_assert_ptr_null(safetensors_dtype_to_string(_SAFETENSORS_DTYPE_MAX));
        ck_assert_ptr_null(safetensors_dtype_to_string(-1));
        ck_assert_uint_eq(safetensors_dtype_bits(_SAFETENSORS_DTYPE_MAX), 0);
}
END_TEST

/* One tensor of each dtype, four elements (F6: eight, so its bits are whole bytes). */
START_TEST(test_every_dtype) {
        unsigned n = dtypes[_i].bits == 6 ? 8 : 4;
        size_t bytes = n * dtypes[_i].bits / 8;
        char h[256];
        snprintf(h, sizeof(h), "{\"t\":{\"dtype\":\"%s\",\"shape\":[%u],\"data_offsets\":[0,%zu]}}", dtypes[_i].name,
                 n, bytes);
        Buf f = st_of(h, bytes);
        Safetensors *s = read_ok(&f);
        check_invariants(s, f.n);
        ck_assert_uint_eq(s->n_tensors, 1);
        ck_assert_int_eq(s->tensors[0].dtype, dtypes[_i].id);
        ck_assert_uint_eq(s->tensors[0].length, bytes);
        safetensors_free(s);
        free(f.p);
}
END_TEST

/* ---- valid files ------------------------------------------------------------------------------- */

/* Listed out of offset order, with __metadata__ first, a scalar, sub-byte tensors, an empty one, and padding. */
static const char valid_header[] =
        "{\"__metadata__\":{\"format\":\"pt\",\"note\":\"caf\xc3\xa9\"},"
        "\"model.b\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[16,22]},"
        "\"model.w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
        "\"empty\":{\"dtype\":\"F16\",\"shape\":[0,7],\"data_offsets\":[22,22]},"
        "\"scale\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[22,30]},"
        "\"q\":{\"dtype\":\"F4\",\"shape\":[3,2],\"data_offsets\":[30,33],\"extra\":\"ignored\"},"
        "\"q6\":{\"dtype\":\"F6_E2M3\",\"shape\":[4],\"data_offsets\":[33,36]},"
        "\"flag\":{\"dtype\":\"BOOL\",\"shape\":[1],\"data_offsets\":[36,37]}}      ";

START_TEST(test_valid) {
        Buf f = st_of(valid_header, 37);
        Safetensors *s = read_ok(&f);
        check_invariants(s, f.n);
        ck_assert_uint_eq(s->header_length, strlen(valid_header));
        ck_assert_uint_eq(s->n_tensors, 7);
        ck_assert_uint_eq(s->n_metadata, 2);
        static const char *const order[] = { "model.w", "model.b", "empty", "scale", "q", "q6", "flag" };
        for (size_t i = 0; i < ELEMENTSOF(order); i++)
                ck_assert_str_eq(s->tensors[i].name, order[i]);

        const SafetensorsTensor *t = find(s, "model.w");
        ck_assert_int_eq(t->dtype, SAFETENSORS_F32);
        ck_assert_uint_eq(t->n_dims, 2);
        ck_assert_uint_eq(t->shape[0], 2);
        ck_assert_uint_eq(t->shape[1], 2);
        ck_assert_uint_eq(t->offset, 8 + strlen(valid_header));
        t = find(s, "empty");
        ck_assert_uint_eq(t->n_elements, 0);
        ck_assert_uint_eq(t->length, 0);
        t = find(s, "scale");
        ck_assert_uint_eq(t->n_dims, 0);
        ck_assert_ptr_null(t->shape);
        ck_assert_uint_eq(t->n_elements, 1);
        ck_assert_uint_eq(t->length, 8);
        t = find(s, "q");
        ck_assert_int_eq(t->dtype, SAFETENSORS_F4);
        ck_assert_uint_eq(t->n_elements, 6);
        ck_assert_uint_eq(t->length, 3);
        ck_assert_uint_eq(find(s, "q6")->length, 3);
        safetensors_free(s);
        free(f.p);
}
END_TEST

/* No tensors at all: "{}" and a file that ends with the header. An empty tensor at the start, one at the end. */
START_TEST(test_edges) {
        Buf f = st_of("{}", 0);
        Safetensors *s = read_ok(&f);
        ck_assert_uint_eq(s->n_tensors, 0);
        ck_assert_uint_eq(s->data_offset, 10);
        safetensors_free(s);
        free(f.p);

        f = st_of("{\"__metadata__\":{}}   ", 0);
        s = read_ok(&f);
        ck_assert_uint_eq(s->n_tensors, 0);
        ck_assert_uint_eq(s->n_metadata, 0);
        safetensors_free(s);
        free(f.p);

        f = st_of("{\"z\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,4]},"
                  "\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                  "\"y\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]},"
                  "\"x\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}",
                  4);
        s = read_ok(&f);
        check_invariants(s, f.n);
        ck_assert_uint_eq(s->n_tensors, 4);
        ck_assert_str_eq(s->tensors[0].name, "x");
        ck_assert_str_eq(s->tensors[1].name, "y");
        ck_assert_str_eq(s->tensors[2].name, "a");
        ck_assert_str_eq(s->tensors[3].name, "z");
        safetensors_free(s);

        /* Through artifact_open: the empty sites at offset 0 come before the one they start. */
        int fd = memfd_with(f.p, f.n);
        Artifact *a = NULL;
        TpError err = {};
        ck_assert_msg(artifact_open(fd, &a, &err) == 0, "%s", err.message);
        ck_assert_int_eq(a->kind, ARTIFACT_SAFETENSORS);
        ck_assert_uint_eq(a->n_sites, 4);
        ck_assert_uint_eq(a->sites[0].length, 0);
        ck_assert_uint_eq(a->sites[1].length, 0);
        ck_assert_str_eq(a->sites[2].name, "a");
        artifact_free(a);
        close(fd);
        free(f.p);
}
END_TEST

START_TEST(test_artifact) {
        Buf f = st_of(valid_header, 37);
        int fd = memfd_with(f.p, f.n);
        Artifact *a = NULL;
        TpError err = {};

        ck_assert_msg(artifact_open(fd, &a, &err) == 0, "%s", err.message);
        ck_assert_int_eq(a->kind, ARTIFACT_SAFETENSORS);
        ck_assert_str_eq(artifact_kind_to_string(a->kind), "safetensors");
        ck_assert_int_eq(artifact_kind_from_string("safetensors"), ARTIFACT_SAFETENSORS);
        ck_assert_uint_eq(a->size, f.n);
        ck_assert_uint_eq(a->n_sites, 7);
        uint64_t data = 8 + strlen(valid_header);
        for (size_t i = 0; i < a->n_sites; i++) {
                ck_assert_uint_ge(a->sites[i].offset, data);
                ck_assert_uint_le(a->sites[i].offset + a->sites[i].length, f.n);
                if (i > 0)
                        ck_assert_uint_eq(a->sites[i].offset,
                                          a->sites[i - 1].offset + a->sites[i - 1].length);
        }
        ck_assert_str_eq(a->sites[0].name, "model.w");
        ck_assert_uint_eq(a->sites[0].offset, data);
        ck_assert_int_eq(a->sites[0].type, SAFETENSORS_F32);
        ck_assert_int_eq(a->sites[1].type, SAFETENSORS_BF16);

        /* The delta layouts: F32, F16, BF16 their own, the others bytes. */
        Site st = { .type = SAFETENSORS_F16 };
        ck_assert_int_eq(site_delta_layout(a, &a->sites[0]), DELTA_F32);
        ck_assert_int_eq(site_delta_layout(a, &a->sites[1]), DELTA_BF16);
        ck_assert_int_eq(site_delta_layout(a, &st), DELTA_F16);
        static const int bytes[] = { SAFETENSORS_F4, SAFETENSORS_I8, SAFETENSORS_U16, SAFETENSORS_F8_E4M3,
                                     SAFETENSORS_C64, SAFETENSORS_F64, -1, 99 };
        for (size_t i = 0; i < ELEMENTSOF(bytes); i++) {
                st.type = bytes[i];
                ck_assert_int_eq(site_delta_layout(a, &st), DELTA_BYTES);
        }
        artifact_free(a);
        close(fd);
        free(f.p);
}
END_TEST

/* The probe: a plausible N and a '{', nothing else. Files that fail it are raw. */
START_TEST(test_probe) {
        Buf f = st_of("{}", 0);
        ck_assert(safetensors_probe(f.p, f.n, f.n));
        ck_assert(!safetensors_probe(f.p, 9, 9));            /* N = 2 past the end */
        ck_assert(!safetensors_probe(f.p, f.n, f.n - 1));
        f.p[8] = ' ';
        ck_assert(!safetensors_probe(f.p, f.n, f.n));
        free(f.p);

        f = st_file("{}", 2, 0, 0);
        put_le64(f.p, 0);
        ck_assert(!safetensors_probe(f.p, f.n, f.n));
        put_le64(f.p, SAFETENSORS_HEADER_MAX + 1ull);
        ck_assert(!safetensors_probe(f.p, f.n, UINT64_MAX));
        put_le64(f.p, SAFETENSORS_HEADER_MAX);
        ck_assert(safetensors_probe(f.p, f.n, 8ull + SAFETENSORS_HEADER_MAX));
        ck_assert(!safetensors_probe(NULL, 0, 100));
        free(f.p);

        /* A text file, and the header cut short: raw. */
        static const char text[] = "{\"not\": \"safetensors\"}\n";
        int fd = memfd_with(text, strlen(text));
        Artifact *a = NULL;
        TpError err = {};
        ck_assert_int_eq(artifact_open(fd, &a, &err), 0);
        ck_assert_int_eq(a->kind, ARTIFACT_RAW);
        artifact_free(a);
        close(fd);
        f = st_of(valid_header, 37);
        fd = memfd_with(f.p, 8 + 20);
        ck_assert_int_eq(artifact_open(fd, &a, &err), 0);
        ck_assert_int_eq(a->kind, ARTIFACT_RAW);
        artifact_free(a);
        close(fd);
        free(f.p);
}
END_TEST

/* ---- refusals ---------------------------------------------------------------------------------- */

#define T(name, dtype, shape, b, e) "\"" name "\":{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}"

static const struct {
        const char *label;
        const char *header;
        size_t data, extra;
        const char *needle, *needle2;
} bad[] = {
        { "offsets past the end", "{" T("w", "F32", "[4]", 0, 16) "}", 12, 0, "tensor 'w'", "run past the end of the file" },
        { "offsets lying about the end", "{" T("a", "U8", "[4]", 0, 4) "," T("b", "U8", "[4]", 4, 8) "}", 4, 0,
          "tensor 'b'", "the data buffer holds 4 bytes" },
        { "a hole", "{" T("a", "F32", "[1]", 0, 4) "," T("b", "F32", "[1]", 8, 12) "}", 12, 0,
          "a hole in the data buffer: bytes [4, 8)", "the next is 'b'" },
        { "a hole at the start", "{" T("a", "F32", "[1]", 4, 8) "}", 8, 0, "bytes [0, 4)", "'a'" },
        { "an overlap", "{" T("a", "F32", "[2]", 0, 8) "," T("b", "F32", "[2]", 4, 12) "}", 12, 0,
          "tensor 'b' [4, 12) overlaps tensor 'a' [0, 8)", NULL },
        { "an empty tensor inside another", "{" T("a", "F32", "[2]", 0, 8) "," T("e", "F32", "[0]", 4, 4) "}", 8, 0,
          "overlaps", NULL },
        { "the same bytes twice", "{" T("a", "F32", "[2]", 0, 8) "," T("b", "F32", "[2]", 0, 8) "}", 8, 0,
          "overlaps", NULL },
        { "bytes after the last tensor", "{" T("a", "F32", "[2]", 0, 8) "}", 8, 3,
          "the tensors end at data buffer byte 8", "3 bytes belong to no tensor" },
        { "no tensors but data", "{}", 0, 5, "5 bytes belong to no tensor", NULL },
        { "offsets backwards", "{" T("a", "F32", "[0]", 8, 4) "}", 8, 0, "tensor 'a'", "ends before it begins" },
        { "unknown dtype", "{" T("a", "Q4_0", "[2]", 0, 8) "}", 8, 0, "tensor 'a'", "unknown dtype 'Q4_0'" },
        { "lowercase dtype", "{" T("a", "f32", "[2]", 0, 8) "}", 8, 0, "unknown dtype 'f32'", NULL },
        { "dtype not a string", "{\"a\":{\"dtype\":9,\"shape\":[],\"data_offsets\":[0,0]}}", 0, 0,
          "\"dtype\" is not a string", NULL },
        { "shape/size mismatch", "{" T("a", "F32", "[3]", 0, 8) "}", 8, 0,
          "3 elements of F32 take 12 bytes", "hold 8" },
        { "shape/size mismatch (BF16)", "{" T("a", "BF16", "[2,3]", 0, 6) "}", 6, 0, "take 12 bytes", NULL },
        { "sub-byte, not whole bytes", "{" T("a", "F4", "[3]", 0, 2) "}", 2, 0, "3 elements of F4 (4 bits each)",
          "not a whole number of bytes" },
        { "F6, not whole bytes", "{" T("a", "F6_E3M2", "[2]", 0, 2) "}", 2, 0, "not a whole number of bytes", NULL },
        { "negative dim", "{" T("a", "U8", "[-1]", 0, 0) "}", 0, 0, "\"shape\"[0] is not a non-negative integer", NULL },
        { "real dim", "{" T("a", "U8", "[2, 2.0]", 0, 4) "}", 4, 0, "\"shape\"[1] is not a non-negative integer", NULL },
        { "shape not a list", "{" T("a", "U8", "4", 0, 4) "}", 4, 0, "\"shape\" is not a list", NULL },
        { "elements overflow", "{" T("a", "U8", "[4294967296,4294967296,2]", 0, 0) "}", 0, 0, "more than 2^64 elements",
          NULL },
        { "bits overflow", "{" T("a", "F64", "[2305843009213693952,2]", 0, 0) "}", 0, 0, "more than 2^64 bits", NULL },
        { "offsets not two", "{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0]}}", 0, 0,
          "\"data_offsets\" is not a list of two non-negative integers", NULL },
        { "offsets strings", "{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[\"0\",\"0\"]}}", 0, 0,
          "\"data_offsets\" is not a list", NULL },
        { "offset negative", "{" T("a", "U8", "[0]", -1, 0) "}", 0, 0, "\"data_offsets\" is not a list", NULL },
        { "no dtype", "{\"a\":{\"shape\":[0],\"data_offsets\":[0,0]}}", 0, 0, "tensor 'a': no \"dtype\"", NULL },
        { "no shape", "{\"a\":{\"dtype\":\"U8\",\"data_offsets\":[0,0]}}", 0, 0, "no \"shape\"", NULL },
        { "no data_offsets", "{\"a\":{\"dtype\":\"U8\",\"shape\":[0]}}", 0, 0, "no \"data_offsets\"", NULL },
        { "tensor not an object", "{\"a\":[1,2]}", 0, 0, "tensor 'a': not an object", NULL },
        { "tensor a string", "{\"a\":\"x\"}", 0, 0, "tensor 'a': not an object", NULL },
        { "duplicate names", "{" T("a", "U8", "[1]", 0, 1) "," T("a", "U8", "[1]", 1, 2) "}", 2, 0,
          "not valid JSON", "duplicate object key" },
        { "duplicate __metadata__", "{\"__metadata__\":{},\"__metadata__\":{}}", 0, 0, "duplicate", NULL },
        { "empty name", "{" T("", "U8", "[1]", 0, 1) "}", 1, 0, "a tensor with an empty name", NULL },
        { "metadata not an object", "{\"__metadata__\":[\"a\"]}", 0, 0, "\"__metadata__\" is not an object", NULL },
        { "metadata not strings", "{\"__metadata__\":{\"a\":\"b\",\"n\":1}}", 0, 0,
          "\"__metadata__\": the value of 'n' is not a string", NULL },
        { "not an object", "[1,2]", 0, 0, "the header is not a JSON object (it starts with '[1,2]')", NULL },
        { "a string", "\"abc\"", 0, 0, "not a JSON object", NULL },
        { "not JSON", "{\"a\":", 0, 0, "the header is not valid JSON: line 1, column", NULL },
        { "trailing garbage", "{} x", 0, 0, "not valid JSON", NULL },
        { "a second object", "{}{}", 0, 0, "'{' after the header's object", NULL },
        { "not UTF-8", "{\"\xff\xfe\":{}}", 0, 0, "not valid JSON", NULL },
        { "a NUL escape", "{\"a\\u0000b\":{}}", 0, 0, "not valid JSON", NULL },
        { "an object in a tensor entry", "{\"a\":{\"dtype\":{\"x\":1}}}", 0, 0, "an object inside a tensor entry", NULL },
        { "an array in an array", "{\"a\":{\"shape\":[[1]]}}", 0, 0, "inside an array", NULL },
        { "an object in an array", "{\"a\":[{}]}", 0, 0, "'{' inside an array", NULL },
        { "brackets in strings are skipped",
          "{\"[{\\\"\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,2]}}", 2, 0,
          "tensor '[{\"'", "take 1 bytes" },
};

START_TEST(test_bad) {
        Buf f = st_file(bad[_i].header, strlen(bad[_i].header), bad[_i].data, bad[_i].extra);
        Safetensors *s = NULL;
        TpError err = {};
        int r = read_buf(&f, &s, &err);
        ck_assert_msg(r == -EBADMSG, "%s: accepted (%d)", bad[_i].label, r);
        ck_assert_ptr_null(s);
        ck_assert_int_eq(err.code, -EBADMSG);
        ck_assert_msg(strstr(err.message, bad[_i].needle), "%s: '%s' lacks '%s'", bad[_i].label, err.message,
                      bad[_i].needle);
        ck_assert_msg(!bad[_i].needle2 || strstr(err.message, bad[_i].needle2), "%s: '%s' lacks '%s'",
                      bad[_i].label, err.message, bad[_i].needle2);

        /* artifact_open: an error naming the format, not a raw file (when the probe says safetensors). */
        if (bad[_i].header[0] == '{') {
                int fd = memfd_with(f.p, f.n);
                Artifact *a = NULL;
                ck_assert_int_eq(artifact_open(fd, &a, &err), -EBADMSG);
                ck_assert_ptr_null(a);
                ck_assert_msg(strncmp(err.message, "safetensors: ", 13) == 0, "%s", err.message);
                ck_assert_msg(strstr(err.message, bad[_i].needle), "%s", err.message);
                close(fd);
        }
        free(f.p);
}
END_TEST

/* The header length: under 8 bytes of file, over the cap, past the end of the file. */
START_TEST(test_header_length) {
        Safetensors *s = NULL;
        TpError err = {};

        Buf f = st_of("{}", 0);
        f.n = 5;
        ck_assert_int_eq(read_buf(&f, &s, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "shorter than the 8-byte header length"), "%s", err.message);
        f.n = 10;

        put_le64(f.p, SAFETENSORS_HEADER_MAX + 1ull);
        ck_assert_int_eq(read_buf(&f, &s, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "header length 100000001 is over the cap of 100000000 bytes"), "%s",
                      err.message);
        put_le64(f.p, UINT64_MAX);
        ck_assert_int_eq(read_buf(&f, &s, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "over the cap"), "%s", err.message);
        put_le64(f.p, 3);
        ck_assert_int_eq(read_buf(&f, &s, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "header length 3 runs past the end of the file (10 bytes)"), "%s",
                      err.message);
        put_le64(f.p, 0);
        ck_assert_int_eq(read_buf(&f, &s, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "not a JSON object"), "%s", err.message);
        ck_assert_ptr_null(s);
        free(f.p);
}
END_TEST

/* A header just over the 100 MB cap, in a file that holds it: refused before it is read. */
START_TEST(test_header_over_cap_in_file) {
        size_t n = SAFETENSORS_HEADER_MAX + 1ull;
        int fd = memfd_create("big", MFD_CLOEXEC);
        uint8_t head[9];
        ck_assert_int_ge(fd, 0);
        put_le64(head, n);
        head[8] = '{';
        ck_assert_int_eq(write(fd, head, 9), 9);
        ck_assert_int_eq(ftruncate(fd, (off_t) (8 + n)), 0);
        Safetensors *s = NULL;
        Artifact *a = NULL;
        TpError err = {};
        ck_assert_int_eq(safetensors_probe(head, 9, 8 + n), false);
        ck_assert_int_eq(safetensors_read(fd, &s, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "over the cap"), "%s", err.message);
        /* Not safetensors to the probe: artifact_open sees a raw file. */
        ck_assert_int_eq(artifact_open(fd, &a, &err), 0);
        ck_assert_int_eq(a->kind, ARTIFACT_RAW);
        artifact_free(a);
        close(fd);
}
END_TEST

/* A header of @n copies of @unit between @pre and @post. */
static Buf repeated(const char *pre, const char *unit, size_t n, const char *post) {
        Buf h = {};
        put(&h, pre, strlen(pre));
        for (size_t i = 0; i < n; i++)
                put(&h, unit, strlen(unit));
        put(&h, post, strlen(post));
        Buf f = st_file((const char *) h.p, h.n, 0, 0);
        free(h.p);
        return f;
}

START_TEST(test_caps) {
        Safetensors *s = NULL;
        TpError err = {};

        /* The tokens: a shape of 2^21 zeros. */
        Buf f = repeated("{\"a\":{\"dtype\":\"U8\",\"data_offsets\":[0,0],\"shape\":[0", ",0", SAFETENSORS_TOKENS_MAX, "]}}");
        ck_assert_int_eq(read_buf(&f, &s, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "more than 2097152 values"), "%s", err.message);
        free(f.p);

        /* The dims: 65 of them. */
        f = repeated("{\"a\":{\"dtype\":\"U8\",\"data_offsets\":[0,1],\"shape\":[1", ",1", SAFETENSORS_DIMS_MAX, "]}}");
        ck_assert_int_eq(read_buf(&f, &s, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "tensor 'a': \"shape\" has 65 dimensions, over the cap of 64"), "%s",
                      err.message);
        free(f.p);

        /* A name of 4097 bytes (4096 pass). */
        for (size_t len = SAFETENSORS_NAME_MAX; len <= SAFETENSORS_NAME_MAX + 1; len++) {
                f = repeated("{\"", "n", len, "\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}");
                int r = read_buf(&f, &s, &err);
                if (len == SAFETENSORS_NAME_MAX) {
                        ck_assert_msg(r == 0, "%s", err.message);
                        ck_assert_uint_eq(strlen(s->tensors[0].name), len);
                        s = safetensors_free(s);
                } else {
                        ck_assert_int_eq(r, -EBADMSG);
                        ck_assert_msg(strstr(err.message, "a name of 4097 bytes, over the cap of 4096"), "%s",
                                      err.message);
                }
                free(f.p);
        }
}
END_TEST

/* The tensor count: SAFETENSORS_TENSORS_MAX empty tensors (and __metadata__) pass, one more does not. */
START_TEST(test_tensor_cap) {
        for (size_t n = SAFETENSORS_TENSORS_MAX; n <= SAFETENSORS_TENSORS_MAX + 1; n++) {
                Buf h = {};
                char e[96];
                put(&h, "{\"__metadata__\":{\"k\":\"v\"}", 25);
                for (size_t i = 0; i < n; i++) {
                        int k = snprintf(e, sizeof(e), ",\"t%zu\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}", i);
                        put(&h, e, (size_t) k);
                }
                put(&h, "}", 1);
                Buf f = st_file((const char *) h.p, h.n, 0, 0);
                Safetensors *s = NULL;
                TpError err = {};
                int r = read_buf(&f, &s, &err);
                if (n == SAFETENSORS_TENSORS_MAX) {
                        ck_assert_msg(r == 0, "%s", err.message);
                        ck_assert_uint_eq(s->n_tensors, n);
                        ck_assert_uint_eq(s->n_metadata, 1);
                        safetensors_free(s);
                } else {
                        ck_assert_int_eq(r, -EBADMSG);
                        ck_assert_msg(strstr(err.message, "more than 131072 tensors"), "%s", err.message);
                }
                free(h.p);
                free(f.p);
        }
}
END_TEST

/* Every cut of a valid file is refused (or, cut inside the header, not safetensors to the probe). */
START_TEST(test_truncations) {
        Buf f = st_of(valid_header, 37);
        size_t full = f.n;
        for (size_t n = 0; n < full; n++) {
                Safetensors *s = NULL;
                TpError err = {};
                f.n = n;
                int r = read_buf(&f, &s, &err);
                ck_assert_msg(r == -EBADMSG, "cut at %zu: %d", n, r);
                ck_assert(err.message[0]);
                ck_assert_ptr_null(s);
                ck_assert(!safetensors_probe(f.p, n, n) || n >= 8 + strlen(valid_header));
        }
        free(f.p);
}
END_TEST

static Suite *safetensors_suite(void) {
        Suite *s = suite_create("safetensors");
        TCase *tc = tcase_create("core");
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_dtype_table);
        tcase_add_loop_test(tc, test_every_dtype, 0, (int) ELEMENTSOF(dtypes));
        tcase_add_test(tc, test_valid);
        tcase_add_test(tc, test_edges);
        tcase_add_test(tc, test_artifact);
        tcase_add_test(tc, test_probe);
        tcase_add_loop_test(tc, test_bad, 0, (int) ELEMENTSOF(bad));
        tcase_add_test(tc, test_header_length);
        tcase_add_test(tc, test_header_over_cap_in_file);
        tcase_add_test(tc, test_caps);
        tcase_add_test(tc, test_tensor_cap);
        tcase_add_test(tc, test_truncations);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(safetensors_suite)
