/* SPDX-License-Identifier: MIT */
/* common/artifact/gguf.c, valid files: every value type, tensor types, alignments, odd but valid layouts,
 * offsets past 4 GiB; the API; descriptor errors; artifact_site_after() over sorted sites. */

#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "artifact.h"
#include "check-main.h"
#include "gguf-builder.h"

/* ---- valid files -------------------------------------------------------- */

static const GgufKv *find_kv(const Gguf *g, const char *name, uint32_t type) {
        const GgufKv *k = gguf_find(g, name);
        ck_assert_msg(k, "no key %s", name);
        ck_assert_uint_eq(k->type, type);
        ck_assert_str_eq(k->key, name);
        return k;
}
static const struct {
        uint32_t version;
        uint32_t align; /* 0: no general.alignment key (default 32) */
} valid_cases[] = {
        {3, 0}, {2, 0}, {3, 64}, {2, 64}, {3, 1}, {3, 4096}, {3, 32},
};

START_TEST(test_valid) {
        uint32_t align = valid_cases[_i].align ? valid_cases[_i].align : 32;
        Buf f = {0};
        Model m;
        Gguf *g = NULL;
        TpError err = {0};
        uint64_t infos_end;

        full_model(&m, valid_cases[_i].version, valid_cases[_i].align);
        model_bytes(&m, &f, &infos_end);
        ck_assert_msg(read_bytes(f.p, f.n, &g, &err) == 0, "%s", err.message);
        check_invariants(g);

        ck_assert_uint_eq(g->version, valid_cases[_i].version);
        ck_assert_uint_eq(g->alignment, align);
        ck_assert_uint_eq(g->file_size, f.n);
        ck_assert_uint_eq(g->data_offset, round_up(infos_end, align));
        ck_assert_uint_eq(g->n_kv, m.n_kv);
        for (uint64_t i = 0; i < g->n_kv; i++)
                ck_assert_uint_eq(g->kv[i].offset, 24 + m.kv_off[i]);

        const GgufKv *k;
#define KV(name, t) (k = find_kv(g, name, t))
        ck_assert_uint_eq(KV("t.u8", GGUF_TYPE_UINT8)->v.u, 200);
        ck_assert_int_eq(KV("t.i8", GGUF_TYPE_INT8)->v.i, -5);
        ck_assert_uint_eq(KV("t.u16", GGUF_TYPE_UINT16)->v.u, 60000);
        ck_assert_int_eq(KV("t.i16", GGUF_TYPE_INT16)->v.i, -30000);
        ck_assert_uint_eq(KV("t.u32", GGUF_TYPE_UINT32)->v.u, 4000000000u);
        ck_assert_int_eq(KV("t.i32", GGUF_TYPE_INT32)->v.i, -2000000000);
        ck_assert(KV("t.f32", GGUF_TYPE_FLOAT32)->v.f == 1.5);
        ck_assert(KV("t.bool", GGUF_TYPE_BOOL)->v.b);
        ck_assert(!KV("t.bool0", GGUF_TYPE_BOOL)->v.b);
        ck_assert_uint_eq(KV("t.u64", GGUF_TYPE_UINT64)->v.u, (UINT64_C(1) << 63) + 7);
        ck_assert_int_eq(KV("t.i64", GGUF_TYPE_INT64)->v.i, -(INT64_C(1) << 60));
        ck_assert(KV("t.f64", GGUF_TYPE_FLOAT64)->v.f == 3.25);
        ck_assert_str_eq(KV("t.str", GGUF_TYPE_STRING)->str, "hello, world");
        ck_assert_uint_eq(k->str_len, 12);
        ck_assert_str_eq(KV("general.architecture", GGUF_TYPE_STRING)->str, "llama");

        static const struct {
                const char *key;
                uint32_t type;
                uint64_t count;
        } arrays[] = {
                {"t.arr_u32", GGUF_TYPE_UINT32, 3},
                {"t.arr_str", GGUF_TYPE_STRING, 3},
                {"t.arr_arr", GGUF_TYPE_ARRAY, 3},
                {"t.arr_empty", GGUF_TYPE_INT64, 0},
        };
        for (size_t i = 0; i < ELEMENTSOF(arrays); i++) {
                KV(arrays[i].key, GGUF_TYPE_ARRAY);
                ck_assert_uint_eq(k->array_type, arrays[i].type);
                ck_assert_uint_eq(k->array_count, arrays[i].count);
                /* key length + key + type + element type + count */
                ck_assert_uint_eq(k->array_offset, k->offset + 8 + strlen(arrays[i].key) + 4 + 4 + 8);
                ck_assert_ptr_null(k->str);
        }
        /* The array is left on disk: its first element is where array_offset says. */
        KV("t.arr_str", GGUF_TYPE_ARRAY);
        ck_assert_uint_eq(f.p[k->array_offset], 1);
        ck_assert_int_eq(memcmp(f.p + k->array_offset + 8, "a", 1), 0);
#undef KV
        if (valid_cases[_i].align)
                ck_assert_uint_eq(gguf_find(g, "general.alignment")->v.u, align);
        ck_assert_ptr_null(gguf_find(g, "t.missing"));
        ck_assert_ptr_null(gguf_find(g, "t"));
        ck_assert_ptr_null(gguf_find(g, NULL));
        ck_assert_ptr_null(gguf_find(NULL, "t.u8"));

        static const struct {
                const char *name;
                uint32_t n_dims;
                uint64_t ne[4];
                uint32_t type;
                uint64_t size;
        } want[] = {
                {"token_embd.weight", 2, {8, 3, 1, 1}, GGML_TYPE_F32, 96},
                {"blk.0.attn_norm.weight", 1, {6, 1, 1, 1}, GGML_TYPE_F16, 12},
                {"blk.0.attn_q.weight", 2, {64, 2, 1, 1}, GGML_TYPE_Q4_0, 4 * 18},
                {"blk.0.attn_k.weight", 3, {32, 1, 2, 1}, GGML_TYPE_Q8_0, 2 * 34},
                {"blk.0.ffn_up.weight", 4, {256, 1, 1, 2}, GGML_TYPE_Q4_K, 2 * 144},
                {"output.weight", 2, {512, 1, 1, 1}, GGML_TYPE_Q6_K, 2 * 210},
        };
        ck_assert_uint_eq(g->n_tensors, ELEMENTSOF(want));
        uint64_t rel = 0;
        for (size_t i = 0; i < ELEMENTSOF(want); i++) {
                const GgufTensor *t = &g->tensors[i];
                ck_assert_str_eq(t->name, want[i].name);
                ck_assert_uint_eq(t->n_dims, want[i].n_dims);
                for (unsigned j = 0; j < 4; j++)
                        ck_assert_uint_eq(t->ne[j], want[i].ne[j]);
                ck_assert_uint_eq(t->type, want[i].type);
                ck_assert_uint_eq(t->size, want[i].size);
                ck_assert_uint_eq(t->rel_offset, rel);
                ck_assert_uint_eq(t->offset, g->data_offset + rel);
                ck_assert_ptr_eq(gguf_find_tensor(g, want[i].name), t);
                /* The data really is there: model_bytes() wrote byte i*7+1 at data position i. */
                ck_assert_uint_eq(f.p[t->offset], (uint8_t) (rel * 7 + 1));
                rel = round_up(rel + want[i].size, align);
        }
        ck_assert_uint_eq(g->tensors[5].offset + g->tensors[5].size, f.n);
        ck_assert_ptr_null(gguf_find_tensor(g, "nope"));

        ck_assert_ptr_null(gguf_free(g));
        model_done(&m);
        buf_done(&f);
}
END_TEST
/* Files that are odd but valid. */
static void edge_nested8(Model *m) {
        nested_array(m, GGUF_ARRAY_DEPTH_MAX);
}
static void edge_no_tensors_short_padding(Model *m) {
        kv_string(m, "general.name", "x"); /* ends at 24 + 8+12+4+8+1 = 57 */
        m->align = 4;                      /* padded to 60, not to 64 */
}
static void edge_empty(Model *m) {
        (void) m;
}
static void edge_zero_elements(Model *m) {
        tensor(m, "a", 2, NE(4, 0), GGML_TYPE_F32);
        tensor(m, "b", 1, NE(4), GGML_TYPE_F32);
}
static void edge_out_of_order(Model *m) {
        tensor_at(m, "late", 1, NE(8), GGML_TYPE_F32, 64, 32);
        tensor_at(m, "early", 1, NE(8), GGML_TYPE_F32, 0, 32);
}
static void edge_gap_and_trailing_bytes(Model *m) {
        tensor_at(m, "a", 1, NE(8), GGML_TYPE_F32, 128, 32);
        m->data_len += 100;
}
static void edge_long_names(Model *m) {
        char key[GGUF_KEY_LEN_MAX + 1], name[GGUF_TENSOR_NAME_LEN_MAX + 1];
        memset(key, 'k', sizeof(key) - 1);
        key[sizeof(key) - 1] = '\0';
        memset(name, 'n', sizeof(name) - 1);
        name[sizeof(name) - 1] = '\0';
        kv_u32(m, key, 1);
        tensor(m, name, 1, NE(32), GGML_TYPE_Q8_0);
}
static void edge_string_cap(Model *m) {
        char *s = malloc(GGUF_STRING_LEN_MAX + 1);
        ck_assert_ptr_nonnull(s);
        memset(s, 's', GGUF_STRING_LEN_MAX);
        s[GGUF_STRING_LEN_MAX] = '\0';
        kv_string(m, "tokenizer.chat_template", s);
        free(s);
}
static void edge_embedded_nul_value(Model *m) {
        put_strn(kv(m, "t.s", GGUF_TYPE_STRING), "a\0b", 3);
}

static const struct {
        const char *name;
        void (*build)(Model *m);
} edge_cases[] = {
        {"arrays nested to the cap", edge_nested8},
        {"no tensors, padding cut short", edge_no_tensors_short_padding},
        {"no keys, no tensors", edge_empty},
        {"zero-element tensor", edge_zero_elements},
        {"tensors not in table order", edge_out_of_order},
        {"gap and trailing bytes", edge_gap_and_trailing_bytes},
        {"names at their caps", edge_long_names},
        {"string value at its cap", edge_string_cap},
        {"string value with a NUL", edge_embedded_nul_value},
};

START_TEST(test_edge) {
        Buf f = {0};
        Model m;
        Gguf *g = NULL;
        TpError err = {0};

        model_init(&m, 3);
        edge_cases[_i].build(&m);
        model_bytes(&m, &f, NULL);
        ck_assert_msg(read_bytes(f.p, f.n, &g, &err) == 0, "%s: %s", edge_cases[_i].name, err.message);
        check_invariants(g);
        ck_assert_uint_eq(g->n_tensors, m.n_t);
        if (!strcmp(edge_cases[_i].name, "no tensors, padding cut short"))
                ck_assert_uint_eq(g->data_offset, 60); /* the file size */
        if (!strcmp(edge_cases[_i].name, "zero-element tensor")) {
                ck_assert_uint_eq(g->tensors[0].size, 0);
                ck_assert_uint_eq(g->tensors[1].size, 16);
        }
        if (!strcmp(edge_cases[_i].name, "string value with a NUL")) {
                ck_assert_uint_eq(g->kv[0].str_len, 3);
                ck_assert_int_eq(memcmp(g->kv[0].str, "a\0b", 4), 0);
        }
        gguf_free(g);
        model_done(&m);
        buf_done(&f);
}
END_TEST

/* Offsets past 4 GiB: a sparse 5 GiB memfd. */
START_TEST(test_large_file) {
        const uint64_t big = UINT64_C(9) << 29; /* 4.5 GiB */
        Buf f = {0};
        Model m;
        Gguf *g = NULL;
        TpError err = {0};

        model_init(&m, 3);
        tensor_at(&m, "small", 1, NE(8), GGML_TYPE_F32, 0, 32);
        tensor_at(&m, "far", 2, NE(1024, 1024), GGML_TYPE_Q8_0, big, 1024 / 32 * 34 * 1024);
        uint64_t data_len = m.data_len;
        m.data_len = 0;
        model_bytes(&m, &f, NULL);
        int fd = memfd_with(f.p, f.n);
        ck_assert_int_eq(ftruncate(fd, (off_t) (f.n + data_len)), 0);
        ck_assert_msg(gguf_read(fd, &g, &err) == 0, "%s", err.message);
        check_invariants(g);
        ck_assert_uint_eq(g->tensors[1].offset, f.n + big);
        ck_assert_uint_gt(g->tensors[1].offset, UINT32_MAX);
        ck_assert_uint_eq(g->tensors[1].offset + g->tensors[1].size, g->file_size);
        g = gguf_free(g);

        /* One byte short. */
        ck_assert_int_eq(ftruncate(fd, (off_t) (f.n + data_len - 1)), 0);
        ck_assert_int_eq(gguf_read(fd, &g, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "tensor 'far' (#1): data [offset ") &&
                              strstr(err.message, "runs past the end of the file"),
                      "%s", err.message);
        ck_assert_ptr_null(g);
        close(fd);
        model_done(&m);
        buf_done(&f);
}
END_TEST
/* Not a regular file, an unreadable descriptor, no TpError. */
START_TEST(test_fd_errors) {
        Gguf *g = NULL;
        TpError err = {0};
        int pipefd[2];

        ck_assert_int_eq(pipe2(pipefd, O_CLOEXEC), 0);
        ck_assert_int_eq(gguf_read(pipefd[0], &g, &err), -EINVAL);
        ck_assert_str_eq(err.message, "not a regular file");
        close(pipefd[0]);
        close(pipefd[1]);

        ck_assert_int_eq(gguf_read(-1, &g, &err), -EBADF);
        ck_assert(strstr(err.message, "cannot stat"));

        char path[] = "/tmp/check-gguf-XXXXXX";
        int fd = mkostemp(path, O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write(fd, "GGUF", 4), 4);
        int wfd = open(path, O_WRONLY | O_CLOEXEC);
        ck_assert_int_ge(wfd, 0);
        unlink(path);
        ck_assert_int_eq(gguf_read(wfd, &g, &err), -EBADF);
        ck_assert_msg(strstr(err.message, "reading magic at offset 0"), "%s", err.message);
        close(wfd);
        close(fd);

        ck_assert_int_eq(read_bytes("GGUF\1\0\0\0", 8, &g, NULL), -EBADMSG);
        ck_assert_ptr_null(g);
        ck_assert_ptr_null(gguf_free(NULL));
}
END_TEST

/* artifact_site_after(): the first site that ends after an offset, over sorted sites with gaps and an empty one. */
START_TEST(test_site_after) {
        Site sites[] = { { "a", 10, 10, SITE_TYPE_NONE, 0 }, { "b", 20, 0, SITE_TYPE_NONE, 0 },
                         { "c", 20, 5, SITE_TYPE_NONE, 0 }, { "d", 40, 8, SITE_TYPE_NONE, 0 } };
        Artifact a = { .kind = ARTIFACT_GGUF, .size = 64, .sites = sites, .n_sites = 4 };
        static const struct {
                uint64_t offset;
                size_t index;
        } want[] = { { 0, 0 }, { 10, 0 }, { 19, 0 }, { 20, 2 }, { 24, 2 }, { 25, 3 }, { 30, 3 }, { 47, 3 },
                     { 48, 4 }, { UINT64_MAX, 4 } };

        for (size_t i = 0; i < ELEMENTSOF(want); i++)
                ck_assert_uint_eq(artifact_site_after(&a, want[i].offset), want[i].index);
        a.n_sites = 0;
        ck_assert_uint_eq(artifact_site_after(&a, 0), 0);
}
END_TEST

START_TEST(test_type_names) {
        ck_assert_str_eq(gguf_value_type_to_string(GGUF_TYPE_UINT8), "uint8");
        ck_assert_str_eq(gguf_value_type_to_string(GGUF_TYPE_FLOAT64), "float64");
        ck_assert_ptr_null(gguf_value_type_to_string(_GGUF_TYPE_MAX));
        ck_assert_ptr_null(gguf_value_type_to_string(_GGUF_TYPE_INVALID));
        for (GgufValueType t = 0; t < _GGUF_TYPE_MAX; t++) {
                ck_assert_ptr_nonnull(gguf_value_type_to_string(t));
                ck_assert_int_eq(gguf_value_type_from_string(gguf_value_type_to_string(t)), t);
        }
        ck_assert_int_eq(gguf_value_type_from_string("uint128"), _GGUF_TYPE_INVALID);
        ck_assert_int_eq(gguf_value_type_from_string(NULL), _GGUF_TYPE_INVALID);
}
END_TEST
static Suite *gguf_suite(void) {
        Suite *s = suite_create("gguf");
        TCase *tc = tcase_create("valid");

        tcase_set_timeout(tc, 120);
        tcase_add_loop_test(tc, test_valid, 0, (int) ELEMENTSOF(valid_cases));
        tcase_add_loop_test(tc, test_edge, 0, (int) ELEMENTSOF(edge_cases));
        tcase_add_test(tc, test_large_file);
        tcase_add_test(tc, test_fd_errors);
        tcase_add_test(tc, test_type_names);
        tcase_add_test(tc, test_site_after);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(gguf_suite)
