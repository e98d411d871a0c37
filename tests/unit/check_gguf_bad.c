/* SPDX-License-Identifier: MIT */
/* common/artifact/gguf.c, malformed files: each refused with -EBADMSG and a message naming what and where;
 * every truncation of a valid file; random and mutated bytes. */

#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "check-main.h"
#include "gguf-builder.h"

/* ---- malformed files ---------------------------------------------------- */

static void small_model(Model *m) {
        kv_string(m, "general.architecture", "llama");
        tensor(m, "a", 1, NE(8), GGML_TYPE_F32);
        tensor(m, "b", 2, NE(32, 2), GGML_TYPE_Q4_0);
}

/* Each bad case builds a model and may patch the bytes afterwards. */
typedef struct BadCase {
        const char *name;
        void (*build)(Model *m);
        void (*patch)(Buf *f);
        int code;
        const char *needle, *needle2; /* must both appear in the message (needle2 may be NULL) */
} BadCase;

static void bad_v1(Model *m) {
        small_model(m);
        m->version = 1;
}
static void bad_v4(Model *m) {
        small_model(m);
        m->version = 4;
}
static void bad_v0(Model *m) {
        small_model(m);
        m->version = 0;
}
static void bad_big_endian(Model *m) {
        small_model(m);
        m->version = 0x03000000;
}
static void patch_magic(Buf *f) {
        f->p[3] = 'X';
}
static void patch_n_tensors_huge(Buf *f) {
        set_le(f, 8, UINT64_C(1) << 63, 8);
}
static void patch_n_tensors_1000(Buf *f) {
        set_le(f, 8, 1000, 8);
}
static void patch_n_kv_huge(Buf *f) {
        set_le(f, 16, UINT64_MAX, 8);
}
static void patch_n_kv_5000(Buf *f) {
        set_le(f, 16, 5000, 8);
}
static void patch_cut_to_2(Buf *f) {
        f->n = 2;
}
static void patch_cut_to_0(Buf *f) {
        f->n = 0;
}

static void bad_key_len(Model *m) {
        kv_u32(m, "a", 1);
        put_u64(&m->kv, UINT64_MAX);
        put_fill(&m->kv, 40, 'x');
        m->n_kv++;
}
static void bad_key_len_past_end(Model *m) {
        kv_u32(m, "a", 1);
        put_u64(&m->kv, 1000);
        put_fill(&m->kv, 40, 'x');
        m->n_kv++;
}
static void bad_string_len(Model *m) {
        Buf *b = kv(m, "t.s", GGUF_TYPE_STRING);
        put_u64(b, GGUF_STRING_LEN_MAX + 1);
        put_fill(b, 64, 'x');
}
static void bad_array_string_len(Model *m) {
        Buf *b = kv(m, "t.tokens", GGUF_TYPE_ARRAY);
        put_u32(b, GGUF_TYPE_STRING);
        put_u64(b, 3);
        put_str(b, "ok");
        put_u64(b, UINT64_MAX);
        put_fill(b, 64, 'x');
}
static void bad_empty_key(Model *m) {
        kv_u32(m, "", 1);
}
static void bad_nul_key(Model *m) {
        put_strn(&m->kv, "gen\0x", 5);
        put_u32(&m->kv, GGUF_TYPE_UINT8);
        put_u8(&m->kv, 1);
        m->n_kv++;
}
static void bad_value_type(Model *m) {
        put_u32(kv(m, "t.x", 13), 0);
}
static void bad_value_type_huge(Model *m) {
        put_u32(kv(m, "t.x", 0xffffffff), 0);
}
static void bad_array_type(Model *m) {
        Buf *b = kv(m, "t.x", GGUF_TYPE_ARRAY);
        put_u32(b, 99);
        put_u64(b, 1);
        put_u32(b, 0);
}
static void bad_array_count_cap(Model *m) {
        Buf *b = kv(m, "t.x", GGUF_TYPE_ARRAY);
        put_u32(b, GGUF_TYPE_UINT8);
        put_u64(b, UINT64_C(1) << 40);
        put_u32(b, 0);
}
static void bad_array_count_file(Model *m) {
        Buf *b = kv(m, "t.x", GGUF_TYPE_ARRAY);
        put_u32(b, GGUF_TYPE_UINT32);
        put_u64(b, 1000);
        put_u32(b, 0);
}
static void bad_array_of_arrays_count(Model *m) {
        Buf *b = kv(m, "t.x", GGUF_TYPE_ARRAY);
        put_u32(b, GGUF_TYPE_ARRAY);
        put_u64(b, 2);
        put_u32(b, GGUF_TYPE_UINT8);
        put_u64(b, 0);
        put_u32(b, GGUF_TYPE_UINT64);
        put_u64(b, 1000);
}
static void bad_nesting(Model *m) {
        nested_array(m, GGUF_ARRAY_DEPTH_MAX + 1);
}
static void bad_dup_key(Model *m) {
        kv_u32(m, "a", 1);
        kv_u32(m, "b", 1);
        kv_string(m, "a", "again");
}
static void bad_align_0(Model *m) {
        kv_u32(m, "general.alignment", 0);
        small_model(m);
}
static void bad_align_3(Model *m) {
        kv_u32(m, "general.alignment", 3);
        small_model(m);
}
static void bad_align_u64(Model *m) {
        put_u64(kv(m, "general.alignment", GGUF_TYPE_UINT64), 32);
}
static void bad_align_str(Model *m) {
        kv_string(m, "general.alignment", "32");
}
static void bad_align_i32(Model *m) {
        put_u32(kv(m, "general.alignment", GGUF_TYPE_INT32), 32);
}
static void bad_align_array(Model *m) {
        Buf *b = kv(m, "general.alignment", GGUF_TYPE_ARRAY);
        put_u32(b, GGUF_TYPE_UINT32);
        put_u64(b, 1);
        put_u32(b, 32);
}
static void bad_ggml_type_removed(Model *m) {
        tensor_at(m, "a", 1, NE(32), 4, 0, 64);
}
static void bad_ggml_type_huge(Model *m) {
        tensor_at(m, "a", 1, NE(32), 1000, 0, 64);
}
static void bad_n_dims_0(Model *m) {
        tensor_at(m, "a", 0, NE(0), GGML_TYPE_F32, 0, 64);
}
static void bad_n_dims_5(Model *m) {
        tensor_at(m, "a", 5, NE(1, 1, 1, 1, 1), GGML_TYPE_F32, 0, 64);
}
static void bad_ne_overflow(Model *m) {
        tensor_at(m, "a", 3, NE(UINT64_C(1) << 32, UINT64_C(1) << 31, 2), GGML_TYPE_F32, 0, 64);
}
static void bad_ne_int64(Model *m) {
        tensor_at(m, "a", 1, NE(UINT64_MAX), GGML_TYPE_I8, 0, 64);
}
static void bad_size_overflow(Model *m) {
        tensor_at(m, "a", 1, NE(UINT64_C(1) << 62), GGML_TYPE_F32, 0, 64);
}
static void bad_block(Model *m) {
        tensor_at(m, "a", 2, NE(33, 2), GGML_TYPE_Q4_0, 0, 64);
}
static void bad_block_k(Model *m) {
        tensor_at(m, "a", 1, NE(128), GGML_TYPE_Q6_K, 0, 256);
}
static void bad_dup_tensor(Model *m) {
        tensor(m, "a", 1, NE(8), GGML_TYPE_F32);
        tensor(m, "b", 1, NE(8), GGML_TYPE_F32);
        tensor(m, "a", 1, NE(8), GGML_TYPE_F32);
}
static void bad_misaligned(Model *m) {
        tensor(m, "a", 1, NE(8), GGML_TYPE_F32);
        tensor_at(m, "b", 1, NE(8), GGML_TYPE_F32, 48, 32);
}
static void bad_misaligned_custom(Model *m) {
        kv_u32(m, "general.alignment", 64);
        m->align = 64;
        tensor_at(m, "a", 1, NE(8), GGML_TYPE_F32, 32, 32);
}
static void bad_offset_past_end(Model *m) {
        tensor(m, "a", 1, NE(8), GGML_TYPE_F32);
        tensor_at(m, "b", 1, NE(8), GGML_TYPE_F32, UINT64_C(1) << 40, 0);
}
static void bad_offset_huge(Model *m) {
        tensor_at(m, "a", 1, NE(8), GGML_TYPE_F32, UINT64_MAX - 31, 0);
}
static void bad_data_past_end(Model *m) {
        tensor(m, "a", 1, NE(8), GGML_TYPE_F32);
        tensor(m, "b", 1, NE(8), GGML_TYPE_F32);
        m->data_len -= 1;
}
static void bad_overlap(Model *m) {
        tensor_at(m, "a", 1, NE(16), GGML_TYPE_F32, 0, 64);
        tensor_at(m, "b", 1, NE(8), GGML_TYPE_F32, 32, 32);
}
static void bad_overlap_same(Model *m) {
        tensor_at(m, "a", 1, NE(8), GGML_TYPE_F32, 0, 32);
        tensor_at(m, "b", 1, NE(8), GGML_TYPE_F32, 0, 32);
}
static void bad_overlap_contained(Model *m) {
        tensor_at(m, "a", 1, NE(64), GGML_TYPE_F32, 0, 256);
        tensor_at(m, "b", 1, NE(8), GGML_TYPE_F32, 32, 32);
        tensor_at(m, "c", 1, NE(8), GGML_TYPE_F32, 128, 32);
}
static void bad_empty_inside(Model *m) {
        tensor_at(m, "a", 1, NE(16), GGML_TYPE_F32, 0, 64);
        tensor_at(m, "z", 2, NE(16, 0), GGML_TYPE_F32, 32, 0);
}
static void bad_tensor_name_len(Model *m) {
        char name[GGUF_TENSOR_NAME_LEN_MAX + 2];
        memset(name, 'n', sizeof(name) - 1);
        name[sizeof(name) - 1] = '\0';
        tensor(m, name, 1, NE(8), GGML_TYPE_F32);
}
static void bad_tensor_name_nul(Model *m) {
        tensor(m, "a", 1, NE(8), GGML_TYPE_F32);
        tensor(m, "xx", 1, NE(8), GGML_TYPE_F32);
        m->ti.p[m->ti.n - (4 + 8 + 4 + 8) - 1] = 0; /* the second 'x' */
}
static void bad_data_start_past_end(Model *m) {
        tensor(m, "a", 2, NE(8, 0), GGML_TYPE_F32); /* empty: the data section is the padding alone */
}
static void patch_cut_padding(Buf *f) {
        f->n -= 1;
}
static void bad_kept_total(Model *m) {
        char *s = malloc(GGUF_STRING_LEN_MAX + 1);
        ck_assert_ptr_nonnull(s);
        memset(s, 's', GGUF_STRING_LEN_MAX);
        s[GGUF_STRING_LEN_MAX] = '\0';
        for (unsigned i = 0; i <= GGUF_KEPT_BYTES_MAX / GGUF_STRING_LEN_MAX; i++) {
                char key[16];
                snprintf(key, sizeof(key), "t.s%u", i);
                kv_string(m, key, s);
        }
        free(s);
}
static void bad_long_key_quoted(Model *m) {
        char key[101];
        memset(key, 'k', 100);
        key[100] = '\0';
        put_u32(kv(m, key, 77), 0);
}
static void bad_escaped_name(Model *m) {
        tensor_at(m, "\x1b[31mred'", 1, NE(8), GGML_TYPE_F32, UINT64_C(1) << 40, 32);
}

static const BadCase bad_cases[] = {
        {"bad magic", small_model, patch_magic, -EBADMSG, "not a GGUF file (magic 'GGUX'", NULL},
        {"empty file", small_model, patch_cut_to_0, -EBADMSG, "not a GGUF file", NULL},
        {"2-byte file", small_model, patch_cut_to_2, -EBADMSG, "not a GGUF file", NULL},
        {"v1", bad_v1, NULL, -EBADMSG, "GGUF version 1 is not supported", NULL},
        {"v4", bad_v4, NULL, -EBADMSG, "GGUF version 4 is not supported", NULL},
        {"v0", bad_v0, NULL, -EBADMSG, "GGUF version 0 is not supported", NULL},
        {"big-endian", bad_big_endian, NULL, -EBADMSG, "0x03000000 looks byte-swapped", "big-endian"},
        {"tensor count cap", small_model, patch_n_tensors_huge, -EBADMSG,
         "tensor count 9223372036854775808 exceeds the 65536-tensor cap", "header"},
        {"tensor count vs file", small_model, patch_n_tensors_1000, -EBADMSG,
         "1000 tensor-info records need at least 32000 bytes", NULL},
        {"kv count cap", small_model, patch_n_kv_huge, -EBADMSG,
         "key/value count 18446744073709551615 exceeds the 16384-key cap", NULL},
        {"kv count vs file", small_model, patch_n_kv_5000, -EBADMSG, "5000 key/value records need at least", NULL},
        {"key length cap", bad_key_len, NULL, -EBADMSG,
         "key #1 at offset 41: key length 18446744073709551615 exceeds the 65536-byte cap", NULL},
        {"key length vs file", bad_key_len_past_end, NULL, -EBADMSG,
         "key #1 at offset 41: key length 1000 runs past the end of the file", NULL},
        {"string value cap", bad_string_len, NULL, -EBADMSG,
         "key #0 't.s' at offset 24: string value length 1048577 exceeds the 1048576-byte cap", NULL},
        {"array string cap", bad_array_string_len, NULL, -EBADMSG,
         "key #0 't.tokens' at offset 24: element 1 at offset 66: string length 18446744073709551615 exceeds", NULL},
        {"empty key", bad_empty_key, NULL, -EBADMSG, "key #0 at offset 24: key is empty", NULL},
        {"NUL in key", bad_nul_key, NULL, -EBADMSG, "key #0 at offset 24: key holds a NUL byte at position 3", NULL},
        {"unknown value type", bad_value_type, NULL, -EBADMSG, "key #0 't.x' at offset 24: unknown value type 13",
         NULL},
        {"unknown value type 2^32-1", bad_value_type_huge, NULL, -EBADMSG, "unknown value type 4294967295", NULL},
        {"unknown array type", bad_array_type, NULL, -EBADMSG, "'t.x' at offset 24: unknown array element type 99",
         NULL},
        {"array count cap", bad_array_count_cap, NULL, -EBADMSG,
         "array of 1099511627776 elements exceeds the 1073741824-element cap", NULL},
        {"array count vs file", bad_array_count_file, NULL, -EBADMSG,
         "array of 1000 uint32 elements needs at least 4 bytes each", NULL},
        {"inner array count vs file", bad_array_of_arrays_count, NULL, -EBADMSG,
         "element 1 at offset 63: array of 1000 uint64 elements", NULL},
        {"array nesting", bad_nesting, NULL, -EBADMSG, "arrays nested more than 8 levels deep", "'t.nested'"},
        {"duplicate key", bad_dup_key, NULL, -EBADMSG, "duplicate key 'a': #0 at offset 24 and #2 at offset 58", NULL},
        {"alignment 0", bad_align_0, NULL, -EBADMSG,
         "'general.alignment' at offset 24: 0 is not a nonzero power of two", NULL},
        {"alignment 3", bad_align_3, NULL, -EBADMSG, "3 is not a nonzero power of two", NULL},
        {"alignment uint64", bad_align_u64, NULL, -EBADMSG,
         "'general.alignment' at offset 24: must be a uint32, not uint64", NULL},
        {"alignment int32", bad_align_i32, NULL, -EBADMSG, "must be a uint32, not int32", NULL},
        {"alignment string", bad_align_str, NULL, -EBADMSG, "must be a uint32, not string", NULL},
        {"alignment array", bad_align_array, NULL, -EBADMSG, "must be a uint32, not array", NULL},
        {"removed ggml type", bad_ggml_type_removed, NULL, -EBADMSG,
         "tensor 'a' (#0) at offset 24: unknown or removed ggml type 4", NULL},
        {"unknown ggml type", bad_ggml_type_huge, NULL, -EBADMSG, "unknown or removed ggml type 1000", NULL},
        {"n_dims 0", bad_n_dims_0, NULL, -EBADMSG, "tensor 'a' (#0) at offset 24: n_dims 0 is not in 1..4", NULL},
        {"n_dims 5", bad_n_dims_5, NULL, -EBADMSG, "n_dims 5 is not in 1..4", NULL},
        {"ne product overflow", bad_ne_overflow, NULL, -EBADMSG,
         "the element count overflows ggml's int64 range at ne[1] = 2147483648", NULL},
        {"ne beyond int64", bad_ne_int64, NULL, -EBADMSG, "ne[0] = 18446744073709551615 exceeds ggml's int64 range",
         NULL},
        {"size overflow", bad_size_overflow, NULL, -EBADMSG,
         "4611686018427387904 elements of f32: the size in bytes overflows", NULL},
        {"ne[0] vs block", bad_block, NULL, -EBADMSG, "ne[0] = 33 is not a multiple of the q4_0 block size 32", NULL},
        {"ne[0] vs K block", bad_block_k, NULL, -EBADMSG, "ne[0] = 128 is not a multiple of the q6_K block size 256",
         NULL},
        {"duplicate tensor", bad_dup_tensor, NULL, -EBADMSG, "duplicate tensor name 'a': #0 at offset 24 and #2", NULL},
        {"misaligned", bad_misaligned, NULL, -EBADMSG,
         "tensor 'b' (#1) at offset 57: rel_offset 48 is not a multiple of the alignment 32", NULL},
        {"misaligned (64)", bad_misaligned_custom, NULL, -EBADMSG,
         "rel_offset 32 is not a multiple of the alignment 64", NULL},
        {"offset past end", bad_offset_past_end, NULL, -EBADMSG,
         "tensor 'b' (#1): rel_offset 1099511627776 is past the end of the file", NULL},
        {"offset 2^64-32", bad_offset_huge, NULL, -EBADMSG, "rel_offset 18446744073709551584 is past the end", NULL},
        {"data past end", bad_data_past_end, NULL, -EBADMSG,
         "tensor 'b' (#1): data [offset 128, +32) runs past the end of the file (size 159)", NULL},
        {"overlap", bad_overlap, NULL, -EBADMSG,
         "tensor 'b' (#1): data [offset 128, +32) overlaps tensor 'a' (#0) [offset 96, +64)", NULL},
        {"overlap, same offset", bad_overlap_same, NULL, -EBADMSG, "overlaps tensor 'a' (#0)", NULL},
        {"overlap, contained", bad_overlap_contained, NULL, -EBADMSG, "tensor 'b' (#1)",
         "overlaps tensor 'a' (#0) [offset 128, +256)"},
        {"empty tensor inside another", bad_empty_inside, NULL, -EBADMSG,
         "tensor 'z' (#1): data [offset 160, +0) overlaps tensor 'a' (#0) [offset 128, +64)", NULL},
        {"tensor name cap", bad_tensor_name_len, NULL, -EBADMSG,
         "tensor #0 at offset 24: tensor name length 64 exceeds the 63-byte cap", NULL},
        {"NUL in tensor name", bad_tensor_name_nul, NULL, -EBADMSG,
         "tensor #1 at offset 57: tensor name holds a NUL byte at position 1", NULL},
        {"data section past end", bad_data_start_past_end, patch_cut_padding, -EBADMSG,
         "the tensor-info table ends at offset 65; the data section, aligned to 32, would start at 96", NULL},
        {"kept bytes cap", bad_kept_total, NULL, -EBADMSG,
         "string value of 1048576 bytes would take the names and strings kept in memory past the 4194304-byte cap",
         "key #3 't.s3'"},
        {"long names cut", bad_long_key_quoted, NULL, -EBADMSG,
         "key #0 'kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk...' at offset 24: unknown value "
         "type 77",
         NULL},
        {"names escaped", bad_escaped_name, NULL, -EBADMSG, "tensor '\\x1b[31mred\\x27' (#0)", NULL},
};

START_TEST(test_bad) {
        const BadCase *c = &bad_cases[_i];
        Gguf *sentinel = (Gguf *) &bad_cases, *g = sentinel;
        TpError err = {0};
        Buf f = {0};
        Model m;

        model_init(&m, 3);
        c->build(&m);
        model_bytes(&m, &f, NULL);
        if (c->patch)
                c->patch(&f);
        int r = read_bytes(f.p, f.n, &g, &err);
        ck_assert_msg(r == c->code, "%s: got %d (%s), want %d", c->name, r, err.message, c->code);
        ck_assert_int_eq(err.code, c->code);
        ck_assert_msg(strstr(err.message, c->needle), "%s: message \"%s\" lacks \"%s\"", c->name, err.message,
                      c->needle);
        if (c->needle2)
                ck_assert_msg(strstr(err.message, c->needle2), "%s: message \"%s\" lacks \"%s\"", c->name, err.message,
                              c->needle2);
        ck_assert_ptr_eq(g, sentinel); /* untouched on failure */
        model_done(&m);
        buf_done(&f);
}
END_TEST

/* Every proper prefix of a valid file fails cleanly, with a message. */
START_TEST(test_truncations) {
        Buf f = {0};
        Model m;

        full_model(&m, _i ? 2 : 3, _i == 2 ? 64 : 0);
        model_bytes(&m, &f, NULL);
        int fd = memfd_with(f.p, f.n);
        for (size_t n = 0; n < f.n; n++) {
                Gguf *g = NULL;
                TpError err = {0};
                ck_assert_int_eq(ftruncate(fd, (off_t) n), 0);
                int r = gguf_read(fd, &g, &err);
                ck_assert_msg(r == -EBADMSG, "prefix of %zu/%zu bytes: got %d (%s)", n, f.n, r, err.message);
                ck_assert_ptr_null(g);
                ck_assert_msg(err.message[0], "prefix of %zu bytes: no message", n);
        }
        close(fd);
        model_done(&m);
        buf_done(&f);
}
END_TEST

static uint64_t rng_state;
static uint64_t rng(void) {
        rng_state ^= rng_state << 13;
        rng_state ^= rng_state >> 7;
        rng_state ^= rng_state << 17;
        return rng_state;
}

/* Random bytes: refused (no magic), or, behind a valid header, anything but a crash or a broken promise. */
START_TEST(test_random) {
        uint8_t buf[1024];

        rng_state = 0x9e3779b97f4a7c15u + (uint64_t) _i;
        for (unsigned iter = 0; iter < 2000; iter++) {
                size_t n = rng() % sizeof(buf);
                Gguf *g = NULL;
                TpError err = {0};
                for (size_t i = 0; i < n; i++)
                        buf[i] = (uint8_t) rng();
                bool framed = _i == 1 && n >= 24;
                if (framed) {
                        memcpy(buf, "GGUF\3\0\0\0", 8);
                        set_le(&(Buf){buf, n, n}, 8, rng() % 4, 8);
                        set_le(&(Buf){buf, n, n}, 16, rng() % 4, 8);
                }
                int r = read_bytes(buf, n, &g, &err);
                if (r == 0) {
                        ck_assert(framed);
                        check_invariants(g);
                        gguf_free(g);
                } else {
                        ck_assert_int_eq(r, -EBADMSG);
                        ck_assert(err.message[0]);
                }
        }
}
END_TEST

/* Byte flips in a valid file: no crash, and a success keeps every promise. */
START_TEST(test_mutations) {
        Buf f = {0};
        Model m;
        unsigned ok = 0;

        full_model(&m, 3, 0);
        model_bytes(&m, &f, NULL);
        int fd = memfd_create("check-gguf", MFD_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        rng_state = 12345;
        for (unsigned iter = 0; iter < 3000; iter++) {
                uint8_t *p = malloc(f.n);
                Gguf *g = NULL;
                TpError err = {0};
                memcpy(p, f.p, f.n);
                for (unsigned k = 1 + rng() % 4; k > 0; k--)
                        p[rng() % f.n] ^= (uint8_t) (1u << (rng() % 8));
                ck_assert_int_eq(ftruncate(fd, 0), 0);
                ck_assert_int_eq(pwrite(fd, p, f.n, 0), (ssize_t) f.n);
                int r = gguf_read(fd, &g, &err);
                if (r == 0) {
                        check_invariants(g);
                        gguf_free(g);
                        ok++;
                } else {
                        ck_assert_int_eq(r, -EBADMSG);
                        ck_assert(err.message[0]);
                }
                free(p);
        }
        ck_assert_uint_gt(ok, 0); /* flips in tensor data or string bytes leave a valid file */
        close(fd);
        model_done(&m);
        buf_done(&f);
}
END_TEST
static Suite *gguf_bad_suite(void) {
        Suite *s = suite_create("gguf-bad");
        TCase *tc = tcase_create("malformed");

        tcase_set_timeout(tc, 120);
        tcase_add_loop_test(tc, test_bad, 0, (int) ELEMENTSOF(bad_cases));
        tcase_add_loop_test(tc, test_truncations, 0, 3);
        tcase_add_loop_test(tc, test_random, 0, 2);
        tcase_add_test(tc, test_mutations);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(gguf_bad_suite)
