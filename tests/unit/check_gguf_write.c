/* SPDX-License-Identifier: MIT */
/* common/artifact/gguf-write.c: the exact layout (against an independent builder), round trips through
 * common/artifact/gguf.c, key replacement, copying key/values from a file, and every refusal. */

#include <check.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check-main.h"
#include "gguf-builder.h"
#include "gguf-write.h"

static char dir[] = "/tmp/check_gguf_write.XXXXXX";
static char path[256];

static void setup(void) {
        snprintf(dir, sizeof(dir), "/tmp/check_gguf_write.XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(dir));
        snprintf(path, sizeof(path), "%s/out.gguf", dir);
}

static void teardown(void) {
        DIR *d = opendir(dir);
        struct dirent *e;
        char p[512];

        while (d && (e = readdir(d)))
                if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
                        snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
                        unlink(p);
                }
        if (d)
                closedir(d);
        rmdir(dir);
}

/* Entries in the test directory: a failed write leaves none. */
static int dir_entries(void) {
        DIR *d = opendir(dir);
        struct dirent *e;
        int n = 0;

        ck_assert_ptr_nonnull(d);
        while ((e = readdir(d)))
                n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
        closedir(d);
        return n;
}

static Buf slurp(const char *p) {
        Buf b = {0};
        uint8_t chunk[4096];
        ssize_t k;
        int fd = open(p, O_RDONLY | O_CLOEXEC);

        ck_assert_int_ge(fd, 0);
        while ((k = read(fd, chunk, sizeof(chunk))) > 0)
                put(&b, chunk, (size_t) k);
        close(fd);
        return b;
}

/* ---- the exact layout ---------------------------------------------------------------- */

static const struct {
        const char *name;
        uint32_t n_dims;        /* as passed */
        uint64_t ne[4];
        uint32_t type;
        uint32_t written_dims;  /* ggml_n_dims */
} tensors[] = {
        { "token_embd.weight", 2, { 8, 3, 1, 1 }, GGML_TYPE_F32, 2 },
        { "blk.0.attn_norm.weight", 1, { 6, 1, 1, 1 }, GGML_TYPE_F16, 1 },
        { "blk.0.attn_q.weight", 2, { 64, 2, 1, 1 }, GGML_TYPE_Q4_0, 2 },
        { "blk.0.attn_k.weight", 3, { 32, 1, 2, 1 }, GGML_TYPE_Q8_0, 3 },
        { "blk.0.ffn_up.weight", 4, { 256, 1, 1, 2 }, GGML_TYPE_Q4_K, 4 },
        { "output.weight", 2, { 512, 1, 1, 1 }, GGML_TYPE_Q6_K, 1 }, /* trailing 1s dropped */
        { "empty", 2, { 32, 0, 1, 1 }, GGML_TYPE_F32, 2 }, /* a 0 is kept: no element */
        { "last", 4, { 3, 1, 1, 1 }, GGML_TYPE_F32, 1 },
};

static uint8_t data_byte(size_t t, uint64_t i) {
        return (uint8_t) (t * 31 + i * 7 + 1);
}

/* The file as llama.cpp lays it out, built with gguf-builder.h, independent of the writer. */
static void expected_file(uint32_t align, Buf *out) {
        Model m;
        uint64_t rel[ELEMENTSOF(tensors)];

        model_init(&m, 3);
        if (align) {
                kv_u32(&m, "general.alignment", align);
                m.align = align;
        }
        kv_string(&m, "general.architecture", "llama");
        put_u8(kv(&m, "t.u8", GGUF_TYPE_UINT8), 200);
        put_u8(kv(&m, "t.i8", GGUF_TYPE_INT8), -5);
        put_u16(kv(&m, "t.i16", GGUF_TYPE_INT16), -30000);
        put_u32(kv(&m, "t.f32", GGUF_TYPE_FLOAT32), 0x3fc00000);
        put_u8(kv(&m, "t.bool", GGUF_TYPE_BOOL), 1); /* set with bits 2 */
        put_u64(kv(&m, "t.i64", GGUF_TYPE_INT64), -(INT64_C(1) << 60));
        put_u64(kv(&m, "t.f64", GGUF_TYPE_FLOAT64), 0x400a000000000000);
        put_strn(kv(&m, "t.nul", GGUF_TYPE_STRING), "a\0b", 3);
        Buf *b = kv(&m, "t.arr_u16", GGUF_TYPE_ARRAY);
        put_u32(b, GGUF_TYPE_UINT16);
        put_u64(b, 2);
        put_u16(b, 7);
        put_u16(b, 65535);
        b = kv(&m, "t.arr_bool", GGUF_TYPE_ARRAY);
        put_u32(b, GGUF_TYPE_BOOL);
        put_u64(b, 3);
        put_u8(b, 0);
        put_u8(b, 1); /* set as 2 */
        put_u8(b, 1);
        b = kv(&m, "t.arr_str", GGUF_TYPE_ARRAY);
        put_u32(b, GGUF_TYPE_STRING);
        put_u64(b, 3);
        put_str(b, "a");
        put_str(b, "");
        put_str(b, "\xe2\x96\x81hi");
        b = kv(&m, "t.arr_empty", GGUF_TYPE_ARRAY);
        put_u32(b, GGUF_TYPE_INT64);
        put_u64(b, 0);
        kv_u32(&m, "t.moved", 2); /* set twice: the second value, at the end */

        for (size_t i = 0; i < ELEMENTSOF(tensors); i++) {
                uint64_t n = tensors[i].ne[0] * tensors[i].ne[1] * tensors[i].ne[2] * tensors[i].ne[3];
                uint64_t size = n ? tensor_bytes(tensors[i].type, n) : 0;
                rel[i] = m.next_rel;
                tensor_at(&m, tensors[i].name, tensors[i].written_dims, tensors[i].ne, tensors[i].type, rel[i], size);
                m.next_rel = round_up(rel[i] + size, m.align);
        }
        put(out, "GGUF", 4);
        put_u32(out, 3);
        put_u64(out, m.n_t);
        put_u64(out, m.n_kv);
        put(out, m.kv.p, m.kv.n);
        put(out, m.ti.p, m.ti.n);
        put_fill(out, round_up(out->n, m.align) - out->n, 0);
        uint64_t data = out->n;
        for (size_t i = 0; i < ELEMENTSOF(tensors); i++) {
                ck_assert_uint_eq(out->n - data, rel[i]);
                uint64_t n = tensors[i].ne[0] * tensors[i].ne[1] * tensors[i].ne[2] * tensors[i].ne[3];
                uint64_t size = n ? tensor_bytes(tensors[i].type, n) : 0;
                for (uint64_t j = 0; j < size; j++)
                        put_u8(out, data_byte(i, j));
                put_fill(out, round_up(out->n - data, m.align) - (out->n - data), 0);
        }
        model_done(&m);
}

/* The same file through the writer; tensor data in pieces of @piece bytes (crossing tensors). */
static void write_file(uint32_t align, size_t piece) {
        _cleanup_(gguf_writer_freep) GgufWriter *w = NULL;
        static const char *const strs[] = { "a", "", "\xe2\x96\x81hi" };
        const uint8_t bools[] = { 0, 2, 1 };
        const uint16_t u16s[] = { 7, 65535 };
        TpError err = {};

        ck_assert_int_eq(gguf_writer_new(&w), 0);
        ck_assert_int_eq(gguf_writer_set_u32(w, "t.moved", 1), 0);
        if (align)
                ck_assert_int_eq(gguf_writer_set_u32(w, "general.alignment", align), 0);
        ck_assert_int_eq(gguf_writer_set_string(w, "general.architecture", "llama", 5), 0);
        ck_assert_int_eq(gguf_writer_set_scalar(w, "t.u8", GGUF_TYPE_UINT8, 200), 0);
        ck_assert_int_eq(gguf_writer_set_scalar(w, "t.i8", GGUF_TYPE_INT8, (uint64_t) (int64_t) -5), 0);
        ck_assert_int_eq(gguf_writer_set_scalar(w, "t.i16", GGUF_TYPE_INT16, (uint64_t) (int64_t) -30000), 0);
        ck_assert_int_eq(gguf_writer_set_f32(w, "t.f32", 1.5f), 0);
        ck_assert_int_eq(gguf_writer_set_scalar(w, "t.bool", GGUF_TYPE_BOOL, 2), 0);
        ck_assert_int_eq(gguf_writer_set_scalar(w, "t.i64", GGUF_TYPE_INT64, (uint64_t) -(INT64_C(1) << 60)), 0);
        ck_assert_int_eq(gguf_writer_set_scalar(w, "t.f64", GGUF_TYPE_FLOAT64, 0x400a000000000000), 0);
        ck_assert_int_eq(gguf_writer_set_string(w, "t.nul", "a\0b", 3), 0);
        ck_assert_int_eq(gguf_writer_set_array(w, "t.arr_u16", GGUF_TYPE_UINT16, u16s, 2), 0);
        ck_assert_int_eq(gguf_writer_set_array(w, "t.arr_bool", GGUF_TYPE_BOOL, bools, 3), 0);
        ck_assert_int_eq(gguf_writer_set_string_array(w, "t.arr_str", strs, 3), 0);
        ck_assert_int_eq(gguf_writer_set_array(w, "t.arr_empty", GGUF_TYPE_INT64, NULL, 0), 0);
        ck_assert_int_eq(gguf_writer_set_u32(w, "t.moved", 2), 0);

        uint64_t total = 0;
        for (size_t i = 0; i < ELEMENTSOF(tensors); i++) {
                ck_assert_int_eq(gguf_writer_add_tensor(w, tensors[i].name, tensors[i].n_dims, tensors[i].ne,
                                                        tensors[i].type),
                                 (int) i);
                total += gguf_writer_tensor_size(w, i);
        }
        ck_assert_int_eq(gguf_writer_begin(w, path, true, &err), 0);
        ck_assert_uint_eq(gguf_writer_data_offset(w) % (align ? align : 32), 0);

        Buf data = {0};
        for (size_t i = 0; i < ELEMENTSOF(tensors); i++)
                for (uint64_t j = 0; j < gguf_writer_tensor_size(w, i); j++)
                        put_u8(&data, data_byte(i, j));
        ck_assert_uint_eq(data.n, total);
        for (size_t o = 0; o < data.n; o += piece) {
                size_t n = data.n - o < piece ? data.n - o : piece;
                ck_assert_msg(gguf_writer_write(w, data.p + o, n, &err) == 0, "%s", err.message);
        }
        ck_assert_msg(gguf_writer_commit(w, &err) == 0, "%s", err.message);
        buf_done(&data);
}

static const struct {
        uint32_t align;
        size_t piece;
} layout_cases[] = {
        { 0, 1 << 20 }, { 0, 1 }, { 0, 13 }, { 64, 100 }, { 1, 7 }, { 4096, 3000 },
};

START_TEST(test_layout) {
        Buf want = {0};

        expected_file(layout_cases[_i].align, &want);
        write_file(layout_cases[_i].align, layout_cases[_i].piece);
        Buf got = slurp(path);
        ck_assert_uint_eq(got.n, want.n);
        for (size_t i = 0; i < got.n; i++)
                ck_assert_msg(got.p[i] == want.p[i], "byte %zu: 0x%02x, expected 0x%02x", i, got.p[i], want.p[i]);
        ck_assert_int_eq(dir_entries(), 1); /* no temporary left */
        buf_done(&want);
        buf_done(&got);
}
END_TEST

/* The reader sees what was written: values, types, offsets, data. */
START_TEST(test_roundtrip) {
        Gguf *g = NULL;
        TpError err = {};

        write_file(64, 4096);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        ck_assert_msg(gguf_read(fd, &g, &err) == 0, "%s", err.message);
        check_invariants(g);
        ck_assert_uint_eq(g->version, 3);
        ck_assert_uint_eq(g->alignment, 64);
        ck_assert_uint_eq(g->n_kv, 15);
        ck_assert_str_eq(g->kv[g->n_kv - 1].key, "t.moved");
        ck_assert_uint_eq(g->kv[g->n_kv - 1].v.u, 2);
        ck_assert_int_eq(gguf_find(g, "t.i8")->v.i, -5);
        ck_assert_int_eq(gguf_find(g, "t.i64")->v.i, -(INT64_C(1) << 60));
        ck_assert(gguf_find(g, "t.f32")->v.f == 1.5);
        ck_assert(gguf_find(g, "t.f64")->v.f == 3.25);
        ck_assert(gguf_find(g, "t.bool")->v.b);
        ck_assert_uint_eq(gguf_find(g, "t.nul")->str_len, 3);
        ck_assert_int_eq(memcmp(gguf_find(g, "t.nul")->str, "a\0b", 3), 0);
        ck_assert_uint_eq(gguf_find(g, "t.arr_str")->array_count, 3);
        ck_assert_uint_eq(gguf_find(g, "t.arr_str")->array_type, GGUF_TYPE_STRING);
        ck_assert_uint_eq(g->n_tensors, ELEMENTSOF(tensors));
        for (size_t i = 0; i < ELEMENTSOF(tensors); i++) {
                const GgufTensor *t = &g->tensors[i];
                ck_assert_str_eq(t->name, tensors[i].name);
                ck_assert_uint_eq(t->n_dims, tensors[i].written_dims);
                ck_assert_uint_eq(t->type, tensors[i].type);
                for (unsigned d = 0; d < 4; d++)
                        ck_assert_uint_eq(t->ne[d], tensors[i].ne[d]);
                uint8_t b[4096];
                ck_assert_uint_le(t->size, sizeof(b));
                ck_assert_int_eq(pread(fd, b, t->size, (off_t) t->offset), (ssize_t) t->size);
                for (uint64_t j = 0; j < t->size; j++)
                        ck_assert_uint_eq(b[j], data_byte(i, j));
        }
        gguf_free(g);
        close(fd);
}
END_TEST

/* Every key/value of a file copied through gguf_writer_copy_kv: the same records, byte for byte. */
START_TEST(test_copy_kv) {
        _cleanup_(gguf_writer_freep) GgufWriter *w = NULL;
        Buf in = {0};
        Model m;
        Gguf *g = NULL, *h = NULL;
        TpError err = {};
        uint64_t infos_end;

        full_model(&m, 3, 0);
        model_bytes(&m, &in, &infos_end);
        int fd = memfd_with(in.p, in.n);
        ck_assert_int_eq(gguf_read(fd, &g, &err), 0);
        ck_assert_int_eq(gguf_writer_new(&w), 0);
        for (uint64_t i = 0; i < g->n_kv; i++) {
                int r = gguf_writer_copy_kv(w, fd, &g->kv[i], &err);
                if (strcmp(g->kv[i].key, "t.arr_arr") == 0) {
                        ck_assert_int_eq(r, -EOPNOTSUPP);
                        ck_assert(strstr(err.message, "array of arrays"));
                } else
                        ck_assert_msg(r == 0, "%s: %s", g->kv[i].key, err.message);
        }
        ck_assert_int_eq(gguf_writer_begin(w, path, true, &err), 0);
        close(fd); /* arrays were copied while the header was written */
        ck_assert_int_eq(gguf_writer_commit(w, &err), 0);

        Buf out = slurp(path);
        fd = memfd_with(out.p, out.n);
        ck_assert_int_eq(gguf_read(fd, &h, &err), 0);
        ck_assert_uint_eq(h->n_kv, g->n_kv - 1);
        /* Input records (minus t.arr_arr) are the output's header, in order. */
        size_t at = 24;
        for (uint64_t i = 0, j = 0; i < g->n_kv; i++) {
                uint64_t end = i + 1 < g->n_kv ? g->kv[i + 1].offset : g->tensors[0].info_offset;
                if (strcmp(g->kv[i].key, "t.arr_arr") == 0)
                        continue;
                ck_assert_uint_eq(h->kv[j].offset, at);
                ck_assert_msg(memcmp(out.p + at, in.p + g->kv[i].offset, end - g->kv[i].offset) == 0,
                              "key '%s' differs", g->kv[i].key);
                at += end - g->kv[i].offset;
                j++;
        }
        ck_assert_uint_eq(h->data_offset, round_up(at, 32));
        ck_assert_uint_lt(g->tensors[0].info_offset, infos_end);
        gguf_free(g);
        gguf_free(h);
        close(fd);
        buf_done(&in);
        buf_done(&out);
        model_done(&m);
}
END_TEST

START_TEST(test_set_remove) {
        _cleanup_(gguf_writer_freep) GgufWriter *w = NULL;

        ck_assert_int_eq(gguf_writer_new(&w), 0);
        ck_assert_int_eq(gguf_writer_set_u32(w, "a", 1), 0);
        ck_assert_int_eq(gguf_writer_set_u32(w, "b", 2), 0);
        ck_assert_int_eq(gguf_writer_remove(w, "a"), 1);
        ck_assert_int_eq(gguf_writer_remove(w, "a"), 0);
        ck_assert_int_eq(gguf_writer_set_u32(w, "", 1), -EINVAL);
        ck_assert_int_eq(gguf_writer_set_scalar(w, "s", GGUF_TYPE_STRING, 1), -EINVAL);
        ck_assert_int_eq(gguf_writer_set_array(w, "s", GGUF_TYPE_ARRAY, NULL, 0), -EINVAL);
}
END_TEST

/* ---- refusals ----------------------------------------------------------------------------- */

START_TEST(test_bad_tensors) {
        _cleanup_(gguf_writer_freep) GgufWriter *w = NULL;
        char long_name[80];

        memset(long_name, 'x', sizeof(long_name) - 1);
        long_name[sizeof(long_name) - 1] = 0;
        ck_assert_int_eq(gguf_writer_new(&w), 0);
        ck_assert_int_eq(gguf_writer_add_tensor(w, "a", 1, NE(32), GGML_TYPE_Q4_0), 0);
        ck_assert_int_eq(gguf_writer_add_tensor(w, "a", 1, NE(32), GGML_TYPE_F32), -EEXIST);
        ck_assert_int_eq(gguf_writer_add_tensor(w, "b", 1, NE(33), GGML_TYPE_Q4_0), -EINVAL);
        ck_assert_int_eq(gguf_writer_add_tensor(w, "b", 1, NE(32), 4), -EINVAL); /* removed type */
        ck_assert_int_eq(gguf_writer_add_tensor(w, "b", 0, NE(32), GGML_TYPE_F32), -EINVAL);
        ck_assert_int_eq(gguf_writer_add_tensor(w, "b", 5, NE(32, 1, 1, 1, 1), GGML_TYPE_F32), -EINVAL);
        ck_assert_int_eq(gguf_writer_add_tensor(w, long_name, 1, NE(32), GGML_TYPE_F32), -EINVAL);
        ck_assert_int_eq(gguf_writer_add_tensor(w, "b", 2, NE(UINT64_C(1) << 40, UINT64_C(1) << 40), GGML_TYPE_F32),
                         -EOVERFLOW);
        ck_assert_uint_eq(gguf_writer_n_tensors(w), 1);
}
END_TEST

START_TEST(test_write_errors) {
        _cleanup_(gguf_writer_freep) GgufWriter *w = NULL;
        TpError err = {};
        uint8_t data[200] = {0};

        ck_assert_int_eq(gguf_writer_new(&w), 0);
        ck_assert_int_eq(gguf_writer_add_tensor(w, "a", 1, NE(16), GGML_TYPE_F32), 0);
        ck_assert_int_eq(gguf_writer_write(w, data, 4, &err), -EINVAL); /* before the header */
        ck_assert_int_eq(gguf_writer_begin(w, path, true, &err), 0);
        ck_assert_int_eq(gguf_writer_set_u32(w, "late", 1), -EBUSY);
        ck_assert_int_eq(gguf_writer_add_tensor(w, "late", 1, NE(16), GGML_TYPE_F32), -EBUSY);
        ck_assert_int_eq(gguf_writer_begin(w, path, true, &err), -EBUSY);
        ck_assert_int_eq(gguf_writer_write(w, data, 40, &err), 0);
        ck_assert_int_eq(gguf_writer_commit(w, &err), -EINVAL); /* 24 bytes missing */
        ck_assert(strstr(err.message, "40 of its 64 bytes"));
        ck_assert_int_eq(gguf_writer_write(w, data, 25, &err), -EINVAL); /* one too many */
        ck_assert(strstr(err.message, "beyond the last tensor"));
        w = gguf_writer_free(w);
        ck_assert_int_eq(dir_entries(), 0); /* freed uncommitted: no file, no temporary */
        ck_assert_int_eq(access(path, F_OK), -1);
}
END_TEST

START_TEST(test_bad_alignment) {
        _cleanup_(gguf_writer_freep) GgufWriter *w = NULL;
        TpError err = {};

        ck_assert_int_eq(gguf_writer_new(&w), 0);
        ck_assert_int_eq(gguf_writer_set_u32(w, "general.alignment", 48), 0);
        ck_assert_int_eq(gguf_writer_begin(w, path, true, &err), -EINVAL);
        ck_assert(strstr(err.message, "power of two"));
        ck_assert_int_eq(gguf_writer_set_scalar(w, "general.alignment", GGUF_TYPE_UINT64, 64), 0);
        ck_assert_int_eq(gguf_writer_begin(w, path, true, &err), -EINVAL);
        ck_assert_int_eq(dir_entries(), 0);
}
END_TEST

/* The durable path: fsync and rename (no_sync false) gives the same file. */
START_TEST(test_durable) {
        _cleanup_(gguf_writer_freep) GgufWriter *w = NULL;
        TpError err = {};
        float v[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };

        ck_assert_int_eq(gguf_writer_new(&w), 0);
        ck_assert_int_eq(gguf_writer_add_tensor(w, "v", 1, NE(8), GGML_TYPE_F32), 0);
        ck_assert_int_eq(gguf_writer_begin(w, path, false, &err), 0);
        ck_assert_int_eq(access(path, F_OK), -1); /* nothing at the path before the commit */
        ck_assert_int_eq(gguf_writer_write(w, v, sizeof(v), &err), 0);
        ck_assert_int_eq(gguf_writer_commit(w, &err), 0);
        struct stat st;
        ck_assert_int_eq(stat(path, &st), 0);
        ck_assert_uint_eq((uint64_t) st.st_size, gguf_writer_file_size(w));
        ck_assert_uint_eq(gguf_writer_file_size(w), 96); /* 24 + info 33 + padding 7, then 32 data bytes */
        ck_assert_int_eq(dir_entries(), 1);
}
END_TEST

static Suite *gguf_write_suite(void) {
        Suite *s = suite_create("gguf_write");
        TCase *tc = tcase_create("core");

        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_loop_test(tc, test_layout, 0, ELEMENTSOF(layout_cases));
        tcase_add_test(tc, test_roundtrip);
        tcase_add_test(tc, test_copy_kv);
        tcase_add_test(tc, test_set_remove);
        tcase_add_test(tc, test_bad_tensors);
        tcase_add_test(tc, test_write_errors);
        tcase_add_test(tc, test_bad_alignment);
        tcase_add_test(tc, test_durable);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(gguf_write_suite)
