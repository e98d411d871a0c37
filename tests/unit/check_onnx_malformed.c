/* SPDX-License-Identifier: MIT */
/*
 * common/artifact/onnx.c, onnx-external.c and pbwire.c on malformed input: every truncation of a
 * valid model, bad varints, lengths past the parent or the file, refused wire types, external_data
 * breaking each rule, depth bombs, caps, a quantizing node's bad inputs and attributes and its caps,
 * random bytes and random corruptions; and onnx_probe().
 * Nothing may crash; every failure is -EBADMSG with a message that says where.
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

START_TEST(test_truncations) {
        Buf m = nested_model();
        size_t ok = 0;

        for (size_t len = 0; len < m.n; len++) {
                TpError err = {};
                Onnx *o = NULL;
                int k = read_bytes(m.p, len, &o, &err);
                if (k == 0) {
                        ok++;
                        check_invariants(o, m.p, len);
                        ck_assert_uint_eq(o->n_inits, ELEMENTSOF(nested_want));
                        /* Here the only field after the graph is opset_import: its start is the one boundary. */
                        ck_assert_uint_eq(m.p[len], 8 << 3 | 2);
                        onnx_free(o);
                } else {
                        ck_assert_msg(k == -EBADMSG, "prefix %zu: %d", len, k);
                        ck_assert_msg(err.message[0], "prefix %zu: no message", len);
                }
        }
        ck_assert_uint_eq(ok, 1);
        free(m.p);
}
END_TEST

/* ---- malformed input ---------------------------------------------------------------------------- */

#define B(...) ((const uint8_t[]) { __VA_ARGS__ }), sizeof((const uint8_t[]) { __VA_ARGS__ })

/* A valid model head, then the bytes under test as the graph's payload or on their own. */
static const struct {
        const char *label;
        const uint8_t *d;
        size_t n;
        const char *want;       /* in the error message */
} bad[] = {
        { "empty file", NULL, 0, "no graph" },
        { "11-byte tag varint", B(0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01),
          "longer than 10 bytes" },
        { "varint over 64 bits", B(0x08, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x02),
          "does not fit in 64 bits" },
        { "varint cut by EOF", B(0x08, 0x80), "runs past the end of its ModelProto" },
        { "tag over 32 bits", B(0x80, 0x80, 0x80, 0x80, 0x10, 0x00), "does not fit in 32 bits" },
        { "field 0", B(0x02, 0x00), "field number 0" },
        { "wire type 3", B(0x0b), "group" },
        { "wire type 4", B(0x0c), "group" },
        { "wire type 6", B(0x0e), "invalid wire type 6" },
        { "wire type 7", B(0x0f), "invalid wire type 7" },
        { "graph as varint", B(0x38, 0x01), "graph has wire type 0" },
        { "ir_version as bytes", B(0x0a, 0x00), "ir_version has wire type 2" },
        { "graph past EOF", B(0x08, 0x08, 0x3a, 0x05, 0x2a, 0x00), "graph length 5 runs past the end of its ModelProto" },
        { "fixed64 past EOF", B(0x3a, 0x00, 0x19, 0x01, 0x02), "field 3 length 8 runs past" },
        { "initializer past graph", B(0x3a, 0x02, 0x2a, 0x03, 0x00, 0x00, 0x00),
          "graph at offset 2: initializer length 3 runs past the end of its GraphProto (ends at 4)" },
        { "raw_data past tensor", B(0x3a, 0x08, 0x2a, 0x06, 0x42, 0x01, 0x77, 0x4a, 0x63, 0x00, 0x00),
          "graph.initializer #0 ('w') at offset 7: raw_data length 99 runs past the end of its TensorProto (ends at 10)" },
        { "tag varint past tensor", B(0x3a, 0x04, 0x2a, 0x02, 0x08, 0x80, 0x00, 0x00), "varint runs past the end of its TensorProto" },
        { "packed dims cut", B(0x3a, 0x05, 0x2a, 0x03, 0x0a, 0x01, 0x80), "packed dims" },
        { "float_data not a multiple of 4", B(0x3a, 0x05, 0x2a, 0x03, 0x22, 0x01, 0x00), "not a multiple of 4" },
        { "name with NUL", B(0x3a, 0x06, 0x2a, 0x04, 0x42, 0x02, 'a', 0x00), "name contains a NUL byte" },
        { "sparse values twice", B(0x3a, 0x06, 0x7a, 0x04, 0x0a, 0x00, 0x0a, 0x00), "values appears twice" },
        { "node output with wrong wire type", B(0x3a, 0x04, 0x0a, 0x02, 0x10, 0x01), "output has wire type 0" },
};

START_TEST(test_bad) {
        TpError err = {};
        Onnx *o = (Onnx *) 0x1;

        int k = read_bytes(bad[_i].d, bad[_i].n, &o, &err);
        ck_assert_msg(k == -EBADMSG, "%s: %d", bad[_i].label, k);
        ck_assert_ptr_eq(o, (Onnx *) 0x1);      /* untouched on failure */
        ck_assert_msg(strstr(err.message, bad[_i].want), "%s: '%s' lacks '%s'", bad[_i].label, err.message,
                      bad[_i].want);
}
END_TEST

/* ---- external_data ------------------------------------------------------------------------------ */

#define SHA1_HEX "0123456789abcdef0123456789ABCDEF01234567"
#define E(...) ((const OnnxEntry[]) { __VA_ARGS__ }), ELEMENTSOF(((const OnnxEntry[]) { __VA_ARGS__ }))

/* Every rule, each broken once; @want is in the message, which names the tensor. */
static const struct {
        const char *label;
        const OnnxEntry *e;
        size_t n;
        size_t at;              /* the entry whose offset the message gives */
        const char *want;
} ext_bad[] = {
        { "no location", E({ "offset", "0" }), SIZE_MAX, "data_location is EXTERNAL but external_data has no \"location\"" },
        { "two locations", E({ "location", "a" }, { "offset", "0" }, { "location", "a" }), 2,
          "external_data \"location\" appears twice" },
        { "two offsets", E({ "location", "a" }, { "offset", "0" }, { "offset", "0" }), 2,
          "external_data \"offset\" appears twice" },
        { "two lengths", E({ "length", "1" }, { "location", "a" }, { "length", "2" }, { "length", "3" }), 2,
          "external_data \"length\" appears twice" },
        { "two checksums", E({ "location", "a" }, { "checksum", SHA1_HEX }, { "checksum", SHA1_HEX }), 2,
          "external_data \"checksum\" appears twice" },
        { "empty location", E({ "location", "" }), 0, "external_data \"location\" is empty" },
        { "location without a value", E({ "location", NULL }), 0, "external_data \"location\" is empty" },
        { "offset 12x", E({ "location", "a" }, { "offset", "12x" }), 1, "external_data \"offset\" '12x' is not a decimal number" },
        { "offset -1", E({ "location", "a" }, { "offset", "-1" }), 1, "\"offset\" '-1' is not a decimal number" },
        { "offset +5", E({ "location", "a" }, { "offset", "+5" }), 1, "\"offset\" '+5' is not a decimal number" },
        { "offset with a space", E({ "location", "a" }, { "offset", " 5" }), 1, "\"offset\" ' 5' is not a decimal number" },
        { "offset with a leading zero", E({ "location", "a" }, { "offset", "05" }), 1, "'05' is not a decimal number" },
        { "offset in hex", E({ "location", "a" }, { "offset", "0x10" }), 1, "'0x10' is not a decimal number" },
        { "empty offset", E({ "location", "a" }, { "offset", "" }), 1, "\"offset\" '' is not a decimal number" },
        { "offset without a value", E({ "location", "a" }, { "offset", NULL }), 1, "\"offset\" '' is not a decimal number" },
        { "length 1e3", E({ "location", "a" }, { "length", "1e3" }), 1, "\"length\" '1e3' is not a decimal number" },
        { "length 4.0", E({ "location", "a" }, { "length", "4.0" }), 1, "\"length\" '4.0' is not a decimal number" },
        { "odd bytes quoted", E({ "location", "a" }, { "length", "\x01'\\" }), 1, "'\\x01\\x27\\x5c' is not a decimal number" },
        { "offset past UINT64_MAX", E({ "location", "a" }, { "offset", "18446744073709551616" }), 1,
          "\"offset\" '18446744073709551616' is past the largest file offset (9223372036854775807)" },
        { "offset past INT64_MAX", E({ "location", "a" }, { "offset", "9223372036854775808" }), 1,
          "\"offset\" '9223372036854775808' is past the largest file offset" },
        { "length past INT64_MAX", E({ "location", "a" }, { "length", "18446744073709551615" }), 1,
          "\"length\" '18446744073709551615' is past the largest file offset" },
        { "offset + length past INT64_MAX",
          E({ "location", "a" }, { "length", "8" }, { "offset", "9223372036854775800" }), 1,
          "external_data \"offset\" 9223372036854775800 + \"length\" 8 is past the largest file offset (9223372036854775807)" },
        { "checksum of 39 digits", E({ "location", "a" }, { "checksum", "0123456789abcdef0123456789abcdef0123456" }), 1,
          "external_data \"checksum\" '0123456789abcdef0123456789abcdef0123456' is not a SHA-1 digest (40 hex digits)" },
        { "checksum of 41 digits", E({ "location", "a" }, { "checksum", SHA1_HEX "8" }), 1, "is not a SHA-1 digest" },
        { "checksum not hex", E({ "location", "a" }, { "checksum", "0123456789abcdef0123456789abcdef0123456g" }), 1,
          "is not a SHA-1 digest" },
        { "checksum as SHA-256", E({ "location", "a" }, { "checksum", SHA1_HEX SHA1_HEX "abcdefab" }), 1,
          "is not a SHA-1 digest" },
        { "checksum with a prefix", E({ "location", "a" }, { "checksum", "sha1:" SHA1_HEX }), 1, "is not a SHA-1 digest" },
        { "empty checksum", E({ "location", "a" }, { "checksum", "" }), 1,
          "external_data \"checksum\" '' is not a SHA-1 digest" },
};

START_TEST(test_external_bad) {
        Buf g = {}, t;
        size_t entry_at[16], graph_at;

        t = tensor_raw("inline", ONNX_TYPE_FLOAT, NULL, 0, "INL", 3);
        f_msg(&g, 5, &t);
        t = tensor_entries("w", ext_bad[_i].e, ext_bad[_i].n, 1, entry_at);
        size_t tensor_at = f_msg(&g, 5, &t);
        Buf m = model_at(&g, &graph_at);

        TpError err = {};
        Onnx *o = (Onnx *) 0x1;
        ck_assert_int_eq(read_bytes(m.p, m.n, &o, &err), -EBADMSG);
        ck_assert_ptr_eq(o, (Onnx *) 0x1);
        char want[TP_ERROR_MAX];
        size_t at = graph_at + tensor_at + (ext_bad[_i].at == SIZE_MAX ? 0 : entry_at[ext_bad[_i].at]);
        snprintf(want, sizeof(want), "graph.initializer #1 ('w') at offset %zu: ", at);
        ck_assert_msg(strncmp(err.message, want, strlen(want)) == 0, "%s: '%s' does not start with '%s'",
                      ext_bad[_i].label, err.message, want);
        ck_assert_msg(strstr(err.message, ext_bad[_i].want), "%s: '%s' lacks '%s'", ext_bad[_i].label, err.message,
                      ext_bad[_i].want);
        free(m.p);
}
END_TEST

/* data_location neither 0 nor 1; a NUL in a value; a value over the cap (any tensor, any key). */
START_TEST(test_external_malformed) {
        static char big[ONNX_MAX_NAME + 2];
        Buf g = {}, t = {}, e = {};
        TpError err = {};
        Onnx *o;

        t = tensor_entries("w", E({ "location", "a" }), 2, NULL);
        f_msg(&g, 5, &t);
        Buf m = model_of(&g);
        ck_assert_int_eq(read_bytes(m.p, m.n, &o, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "('w') at offset") && strstr(err.message, "data_location 2"), "%s", err.message);
        free(m.p);

        f_str(&t, 8, "n");
        f_str(&e, 1, "offset");
        f_bytes(&e, 2, "1\0", 2);
        f_msg(&t, 13, &e);
        f_msg(&g, 5, &t);
        m = model_of(&g);
        ck_assert_int_eq(read_bytes(m.p, m.n, &o, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "value contains a NUL byte"), "%s", err.message);
        free(m.p);

        memset(big, 'k', ONNX_MAX_NAME + 1);
        t = tensor_entries("w", E({ big, "1" }), 0, NULL);
        f_msg(&g, 5, &t);
        m = model_of(&g);
        ck_assert_int_eq(read_bytes(m.p, m.n, &o, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "key is 4097 bytes long, more than the cap of 4096"), "%s", err.message);
        free(m.p);
}
END_TEST

/* Subgraphs nested deeper than the cap fail cleanly; just under it they are read. */
static Buf deep_model(unsigned levels) {
        Buf g = {}, t = tensor_raw("deep", 1, NULL, 0, "DP", 2);
        f_msg(&g, 5, &t);
        for (unsigned i = 0; i < levels; i++) {
                Buf a = attr_graph("body", &g);
                Buf n = node("Loop", NULL, NULL, &a, 1);
                f_msg(&g, 1, &n);
        }
        return model_of(&g);
}

START_TEST(test_depth) {
        /* graph = 1 frame, each level adds node, attribute, g = 3, the tensor 1: 1 + 3 * 10 + 1 = 32. */
        Buf m = deep_model(10);
        Onnx *o = read_ok(&m);
        ck_assert_uint_eq(o->n_inits, 1);
        check_data(o, &m, "deep", "DP", 2);
        onnx_free(o);
        free(m.p);

        TpError err = {};
        m = deep_model(11);
        ck_assert_int_eq(read_bytes(m.p, m.n, &o, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "nests deeper than 32"), "%s", err.message);
        free(m.p);

        /* A depth bomb: 3000 nested graphs. */
        m = deep_model(3000);
        ck_assert_int_eq(read_bytes(m.p, m.n, &o, &err), -EBADMSG);
        free(m.p);
}
END_TEST

START_TEST(test_caps) {
        TpError err = {};
        Onnx *o;
        char name[ONNX_MAX_NAME + 2];

        for (int over = 0; over < 2; over++) {
                memset(name, 'n', sizeof(name));
                name[ONNX_MAX_NAME + over] = '\0';
                Buf g = {}, t = tensor_raw(name, 1, NULL, 0, "", 0);
                f_msg(&g, 5, &t);
                Buf m = model_of(&g);
                int k = read_bytes(m.p, m.n, &o, &err);
                if (over) {
                        ck_assert_int_eq(k, -EBADMSG);
                        ck_assert_msg(strstr(err.message, "more than the cap"), "%s", err.message);
                } else {
                        ck_assert_int_eq(k, 0);
                        ck_assert_uint_eq(strlen(o->inits[0].name), ONNX_MAX_NAME);
                        onnx_free(o);
                }
                free(m.p);
        }

        int64_t dims[ONNX_MAX_DIMS + 1];
        for (size_t i = 0; i <= ONNX_MAX_DIMS; i++)
                dims[i] = 1;
        Buf g = {}, t = tensor_raw("d", 1, dims, ONNX_MAX_DIMS + 1, "", 0);
        f_msg(&g, 5, &t);
        Buf m = model_of(&g);
        ck_assert_int_eq(read_bytes(m.p, m.n, &o, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "more than 16 dims"), "%s", err.message);
        free(m.p);

        /* Not a regular file. */
        int p[2];
        ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
        ck_assert_int_eq(onnx_read(p[0], &o, &err), -EINVAL);
        close(p[0]);
        close(p[1]);
}
END_TEST

/* ONNX_MAX_INITIALIZERS and ONNX_MAX_NAME_BYTES: one tensor too many, one name too many. */
START_TEST(test_count_caps) {
        static char name[ONNX_MAX_NAME + 1];
        TpError err = {};
        Onnx *o;
        Buf g = {}, m;

        for (unsigned i = 0; i <= ONNX_MAX_INITIALIZERS; i++) {
                char n[16];
                snprintf(n, sizeof(n), "t%u", i);
                Buf t = tensor_raw(n, 1, NULL, 0, "", 0);
                f_msg(&g, 5, &t);
        }
        m = model_of(&g);
        ck_assert_int_eq(read_bytes(m.p, m.n, &o, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "more than 65536 tensors"), "%s", err.message);
        free(m.p);

        /* Names of ONNX_MAX_NAME bytes (+1 for the NUL each): 2047 fit in 8 MiB, 2048 do not. */
        g = (Buf) {};
        memset(name, 'n', ONNX_MAX_NAME);
        for (unsigned i = 0; i < ONNX_MAX_NAME_BYTES / (ONNX_MAX_NAME + 1) + 1; i++) {
                char head[8];
                snprintf(head, sizeof(head), "%05u", i);
                memcpy(name, head, 5);
                Buf t = tensor_raw(name, 1, NULL, 0, "", 0);
                f_msg(&g, 5, &t);
        }
        m = model_of(&g);
        ck_assert_int_eq(read_bytes(m.p, m.n, &o, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "names take more than 8388608 bytes"), "%s", err.message);
        free(m.p);
}
END_TEST

/* ---- quantizing nodes' inputs and attributes ----------------------------------------------------- */

/* A graph with "w" INT8 [2] and the node @n (freed): a model. */
static Buf quant_model(Buf *n) {
        Buf g = {}, t = tensor_raw("w", ONNX_TYPE_INT8, (int64_t[]) { 2 }, 1, "\x01\x02", 2);
        f_msg(&g, 5, &t);
        f_msg(&g, 1, n);
        return model_of(&g);
}

static void want_refused(Buf *m, const char *label, const char *words) {
        TpError err = {};
        Onnx *o = (Onnx *) 0x1;
        int k = read_bytes(m->p, m->n, &o, &err);
        ck_assert_msg(k == -EBADMSG, "%s: %d", label, k);
        ck_assert_ptr_eq(o, (Onnx *) 0x1);
        ck_assert_msg(strstr(err.message, words), "%s: '%s' lacks '%s'", label, err.message, words);
        free(m->p);
        *m = (Buf) {};
}

/*
 * A DequantizeLinear's input holding a NUL byte, or one byte over ONNX_MAX_NAME (exactly the cap
 * is read, and is the use's name); an input that is not a string; AttributeProto.i with a wire
 * type other than varint, in a quantizing node and in any other.
 */
START_TEST(test_quant_inputs) {
        static char big[ONNX_MAX_NAME + 2];
        Buf n, a, m;

        n = (Buf) {};
        f_str(&n, 1, "w");
        f_bytes(&n, 1, "s\0x", 3);
        f_str(&n, 4, "DequantizeLinear");
        m = quant_model(&n);
        want_refused(&m, "scale with NUL", "input contains a NUL byte");

        n = (Buf) {};
        f_bytes(&n, 1, "w\0", 2);
        f_str(&n, 4, "QLinearMatMul");          /* its data is input 3: every one of the first six is read */
        m = quant_model(&n);
        want_refused(&m, "input 0 with NUL", "contains a NUL byte");

        for (int over = 0; over < 2; over++) {
                memset(big, 'z', sizeof(big));
                big[ONNX_MAX_NAME + over] = '\0';
                n = node_in("DequantizeLinear", NULL, (const char *[]) { "w", "s", big }, 3, NULL, 0);
                m = quant_model(&n);
                if (over) {
                        want_refused(&m, "zero point over the cap",
                                     "input is 4097 bytes long, more than the cap of 4096");
                        continue;
                }
                Onnx *o = read_ok(&m);
                const OnnxQuantUse *u = onnx_quant_use_of(o, find(o, "w"));
                ck_assert_ptr_nonnull(u);
                ck_assert_uint_eq(strlen(u->zero_point), ONNX_MAX_NAME);
                onnx_free(o);
                free(m.p);
        }

        for (int quantizing = 0; quantizing < 2; quantizing++) {
                const char *op = quantizing ? "DequantizeLinear" : "Relu";
                n = (Buf) {};
                f_str(&n, 1, "w");
                f_uint(&n, 1, 7);
                f_str(&n, 4, op);
                m = quant_model(&n);
                want_refused(&m, "input as a varint", "input has wire type 0, which this field cannot have");

                static const struct {
                        unsigned wire;
                        const char *bytes;
                        size_t n;
                } wrong[] = { { 2, "\x01\x01", 2 }, { 5, "\x01\x00\x00\x00", 4 }, { 1, "\x01\0\0\0\0\0\0\0", 8 } };
                for (size_t i = 0; i < ELEMENTSOF(wrong); i++) {
                        a = (Buf) {};
                        f_str(&a, 1, "axis");
                        tag(&a, 3, wrong[i].wire);
                        put(&a, wrong[i].bytes, wrong[i].n);
                        f_uint(&a, 20, 2);
                        n = node_in(op, NULL, (const char *[]) { "w", "s" }, 2, &a, 1);
                        m = quant_model(&n);
                        char words[64];
                        snprintf(words, sizeof(words), "i has wire type %u, which this field cannot have",
                                 wrong[i].wire);
                        want_refused(&m, op, words);
                }
        }
}
END_TEST

/* One quantizing node over ONNX_MAX_INITIALIZERS; their names over ONNX_MAX_NAME_BYTES. */
START_TEST(test_quant_caps) {
        static char name[3][ONNX_MAX_NAME + 1];
        Buf g = {}, n, m;

        for (unsigned i = 0; i <= ONNX_MAX_INITIALIZERS; i++) {
                n = node_in("DequantizeLinear", NULL, (const char *[]) { "w", "s" }, 2, NULL, 0);
                f_msg(&g, 1, &n);
        }
        m = model_of(&g);
        want_refused(&m, "65537 nodes", "more than 65536 quantizing nodes");

        /* Three names of ONNX_MAX_NAME bytes a node: 682 nodes take 8,382,462 bytes, 683 more than 8 MiB. */
        g = (Buf) {};
        for (int k = 0; k < 3; k++)
                memset(name[k], 'a' + k, ONNX_MAX_NAME);
        for (unsigned i = 0; i < ONNX_MAX_NAME_BYTES / (3 * (ONNX_MAX_NAME + 1)) + 1; i++) {
                n = node_in("DequantizeLinear", NULL, (const char *[]) { name[0], name[1], name[2] }, 3, NULL, 0);
                f_msg(&g, 1, &n);
        }
        m = model_of(&g);
        want_refused(&m, "683 nodes of long names", "names take more than 8388608 bytes");
}
END_TEST

/* Every truncation and random corruptions of a model of quantizing nodes: 0 or -EBADMSG, uses in order. */
START_TEST(test_quant_random) {
        Buf g = {}, t, a, n;
        uint8_t buf[2048];

        t = tensor_raw("w", ONNX_TYPE_INT8, (int64_t[]) { 2, 2 }, 2, "\x01\x02\x03\x04", 4);
        f_msg(&g, 5, &t);
        a = attr_int("axis", -1);
        n = node_in("DequantizeLinear", "com.microsoft", (const char *[]) { "w", "s", "zp" }, 3, &a, 1);
        f_msg(&g, 1, &n);
        n = node_in("QLinearMatMul", NULL, (const char *[]) { "a", "as", "az", "w", "s", "zp", "ys", "yz" }, 8, NULL,
                    0);
        f_msg(&g, 1, &n);
        a = attr_int("block_size", 2);
        n = node_in("DequantizeLinear", NULL, (const char *[]) { "b", "bs" }, 2, &a, 1);
        f_msg(&g, 1, &n);
        Buf m = model_of(&g);
        ck_assert_uint_le(m.n, sizeof(buf));

        srand(4321);
        for (size_t iter = 0; iter < m.n + 3000; iter++) {
                size_t len = m.n;
                memcpy(buf, m.p, m.n);
                if (iter < m.n)
                        len = iter;
                else
                        for (int j = 1 + rand() % 4; j > 0; j--)
                                buf[(size_t) rand() % len] = (uint8_t) rand();
                TpError err = {};
                Onnx *o = NULL;
                int k = read_bytes(buf, len, &o, &err);
                ck_assert_msg(k == 0 || k == -EBADMSG, "iteration %zu: %d", iter, k);
                if (k < 0) {
                        ck_assert(err.message[0]);
                        continue;
                }
                check_invariants(o, buf, len);
                for (size_t i = 0; i < o->n_uses; i++) {
                        ck_assert(o->uses[i].data && o->uses[i].data[0]);
                        ck_assert(i == 0 || strcmp(o->uses[i - 1].data, o->uses[i].data) <= 0);
                }
                for (size_t i = 0; i < o->n_inits; i++)
                        (void) onnx_quant_use_of(o, &o->inits[i]);
                onnx_free(o);
        }
        free(m.p);
}
END_TEST

/* Random bytes, and random corruptions of a valid model: never a crash, only 0 or -EBADMSG. */
START_TEST(test_random) {
        Buf m = nested_model();
        uint8_t buf[1024];

        srand(1234);
        for (int iter = 0; iter < 3000; iter++) {
                size_t n;
                if (iter % 2) {
                        n = (size_t) rand() % sizeof(buf);
                        for (size_t i = 0; i < n; i++)
                                buf[i] = (uint8_t) rand();
                        if (n && iter % 4 == 1)
                                buf[0] = 0x08;  /* get past the first byte more often */
                } else {
                        n = m.n;
                        memcpy(buf, m.p, n);
                        for (int j = 1 + rand() % 4; j > 0; j--)
                                buf[(size_t) rand() % n] = (uint8_t) rand();
                }
                TpError err = {};
                Onnx *o = NULL;
                int k = read_bytes(buf, n, &o, &err);
                ck_assert_msg(k == 0 || k == -EBADMSG, "iteration %d: %d", iter, k);
                if (k == 0) {
                        check_invariants(o, buf, n);
                        onnx_free(o);
                } else
                        ck_assert(err.message[0]);
        }
        free(m.p);
}
END_TEST

START_TEST(test_probe) {
        Buf m = nested_model();
        ck_assert(onnx_probe(m.p, m.n));
        ck_assert(onnx_probe(m.p, 16));
        ck_assert(!onnx_probe(m.p, 2));
        ck_assert(!onnx_probe(NULL, 0));
        ck_assert(!onnx_probe((const uint8_t *) "GGUF\3\0\0\0", 8));
        ck_assert(!onnx_probe(B(0x08, 0x00, 0x3a)));                 /* ir_version 0 */
        ck_assert(!onnx_probe(B(0x08, 0xe5, 0x01, 0x3a)));           /* ir_version 229 */
        ck_assert(!onnx_probe(B(0x08, 0x08, 0x0f)));                 /* then wire type 7 */
        ck_assert(!onnx_probe(B(0x08, 0x08, 0x38)));                 /* then graph as a varint */
        ck_assert(onnx_probe(B(0x08, 0x07, 0x12, 0x00)));             /* then producer_name */
        ck_assert(onnx_probe(B(0x08, 0x08, 0x3a, 0x80)));             /* then graph */
        ck_assert(onnx_probe(B(0x08, 0x03, 0x42, 0x00)));             /* then opset_import */
        free(m.p);
        ck_assert_ptr_null(onnx_free(NULL));
}
END_TEST

static Suite *onnx_malformed_suite(void) {
        Suite *s = suite_create("onnx_malformed");
        TCase *tc = tcase_create("malformed");

        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_truncations);
        tcase_add_loop_test(tc, test_bad, 0, ELEMENTSOF(bad));
        tcase_add_loop_test(tc, test_external_bad, 0, ELEMENTSOF(ext_bad));
        tcase_add_test(tc, test_external_malformed);
        tcase_add_test(tc, test_depth);
        tcase_add_test(tc, test_caps);
        tcase_add_test(tc, test_count_caps);
        tcase_add_test(tc, test_quant_inputs);
        tcase_add_test(tc, test_quant_caps);
        tcase_add_test(tc, test_quant_random);
        tcase_add_test(tc, test_random);
        tcase_add_test(tc, test_probe);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(onnx_malformed_suite)
