/* SPDX-License-Identifier: MIT */
/* common/model/fold.c: the documented arithmetic to the bit (summation order, no fused multiply-add,
 * token_embd's swapped layout, alpha 0), and every adapter the fold must refuse. Models and
 * adapters are written with common/artifact/gguf-write.c into a temporary directory. */

#include <check.h>
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "check-main.h"
#include "fold.h"
#include "gguf-write.h"

static char dir[64];

static void setup(void) {
        snprintf(dir, sizeof(dir), "/tmp/check_fold.XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(dir));
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

static const char *path_of(const char *name) {
        static char p[4][256];
        static unsigned n;
        char *s = p[n++ % 4];
        snprintf(s, 256, "%s/%s", dir, name);
        return s;
}

typedef struct T {
        const char *name;
        uint64_t ne0, ne1;
        uint32_t type;        /* F32, F16 or Q8_0 (written as zero blocks) */
        const float *data;    /* ne0 * ne1 floats (F32, F16: converted exactly: small integers) */
} T;

/* A GGUF file: general.architecture, the extra keys (already set on @w), the tensors. */
static void write_gguf(GgufWriter *w, const char *path, const char *arch, const T *t, size_t n) {
        TpError err = {};

        ck_assert_int_eq(gguf_writer_set_string(w, "general.architecture", arch, strlen(arch)), 0);
        for (size_t i = 0; i < n; i++) {
                const uint64_t ne[2] = { t[i].ne0, t[i].ne1 };
                ck_assert_int_ge(gguf_writer_add_tensor(w, t[i].name, 2, ne, t[i].type), 0);
        }
        ck_assert_int_eq(gguf_writer_begin(w, path, true, &err), 0);
        for (size_t i = 0; i < n; i++) {
                uint64_t k = t[i].ne0 * t[i].ne1;
                if (t[i].type == GGML_TYPE_F32) {
                        ck_assert_int_eq(gguf_writer_write(w, t[i].data, k * 4, &err), 0);
                } else if (t[i].type == GGML_TYPE_F16) {
                        for (uint64_t j = 0; j < k; j++) {
                                /* small integers only: exact in half */
                                float v = t[i].data[j];
                                int e = 0;
                                uint16_t h = 0;
                                if (v != 0.0f) {
                                        float m = frexpf(fabsf(v), &e); /* v = m * 2^e, m in [0.5, 1) */
                                        h = (uint16_t) ((v < 0 ? 0x8000 : 0) | (uint16_t) (e + 14) << 10 |
                                                        (uint16_t) ((m * 2.0f - 1.0f) * 1024.0f));
                                }
                                ck_assert_int_eq(gguf_writer_write(w, &h, 2, &err), 0);
                        }
                } else {
                        uint8_t zero[34] = {0};
                        for (uint64_t j = 0; j < k / 32; j++)
                                ck_assert_int_eq(gguf_writer_write(w, zero, sizeof(zero), &err), 0);
                }
        }
        ck_assert_msg(gguf_writer_commit(w, &err) == 0, "%s", err.message);
}

static void write_base(const char *path, const char *arch, const T *t, size_t n) {
        _cleanup_(gguf_writer_freep) GgufWriter *w = NULL;
        ck_assert_int_eq(gguf_writer_new(&w), 0);
        ck_assert_int_eq(gguf_writer_set_string(w, "general.type", "model", 5), 0);
        ck_assert_int_eq(gguf_writer_set_u32(w, "llama.block_count", 1), 0);
        write_gguf(w, path, arch, t, n);
}

/* An adapter; @alpha < 0: no adapter.lora.alpha key. */
static void write_adapter(const char *path, const char *arch, float alpha, const T *t, size_t n) {
        _cleanup_(gguf_writer_freep) GgufWriter *w = NULL;
        ck_assert_int_eq(gguf_writer_new(&w), 0);
        ck_assert_int_eq(gguf_writer_set_string(w, "general.type", "adapter", 7), 0);
        ck_assert_int_eq(gguf_writer_set_string(w, "adapter.type", "lora", 4), 0);
        if (alpha >= 0)
                ck_assert_int_eq(gguf_writer_set_f32(w, "adapter.lora.alpha", alpha), 0);
        write_gguf(w, path, arch, t, n);
}

/* Fold @lora into @base as F32 (every value kept), then read tensor @name back. */
static void fold_f32(const char *base, const char *lora, float scale, const char *name, float *out, size_t n) {
        _cleanup_(lora_freep) Lora *l = NULL;
        Gguf *g = NULL, *h = NULL;
        TpError err = {};
        QuantizeOptions o = { .ftype = quant_ftype_from_name("F32"), .no_sync = true };
        QuantizeResult res;
        int fd = open(base, O_RDONLY | O_CLOEXEC), fd2;

        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(gguf_read(fd, &g, &err), 0);
        ck_assert_msg(lora_open(lora, &l, &err) == 0, "%s", err.message);
        ck_assert_msg(model_fold(fd, g, l, scale, path_of("task.gguf"), &o, &res, &err) == 0, "%s", err.message);
        ck_assert_uint_eq(res.n_hooked, l->n_pairs);
        fd2 = open(path_of("task.gguf"), O_RDONLY | O_CLOEXEC);
        ck_assert_int_ge(fd2, 0);
        ck_assert_int_eq(gguf_read(fd2, &h, &err), 0);
        const GgufTensor *t = gguf_find_tensor(h, name);
        ck_assert_ptr_nonnull(t);
        ck_assert_uint_eq(t->size, n * 4);
        ck_assert_int_eq(pread(fd2, out, n * 4, (off_t) t->offset), (ssize_t) (n * 4));
        gguf_free(g);
        gguf_free(h);
        close(fd);
        close(fd2);
}

/*
 * attn_q, in = 2, out = 2, rank 3, W = 0, alpha = 3 (f = 1):
 *   row 0: acc = fl(fl(-1 · 1) + fl((1 + 2^-12)²)) + 0 = -1 + (1 + 2^-11) = 2^-11 exactly,
 *          where a fused multiply-add would keep the 2^-24 of the square: 2^-11 + 2^-24;
 *   row 1: acc = fl(fl(1e8 + (1 + 2^-12)) - 1e8) = 0 in the documented order (k = 0 up),
 *          1 or more in any other.
 */
static const float A[3 * 2] = { 1, 0, 1 + 0x1p-12f, 0, 1, 0 };        /* lora_a ne = [2, 3]: A[k][i] */
static const float B[2 * 3] = { -1, 1 + 0x1p-12f, 0, 1e8f, 1, -1e8f }; /* lora_b ne = [3, 2]: B[o][k] */
static const float W0[4] = { 0, 0, 0, 0 };

START_TEST(test_order_and_rounding) {
        float out[4];
        const T base[] = { { "blk.0.attn_q.weight", 2, 2, GGML_TYPE_F32, W0 } };
        const T lora[] = { { "blk.0.attn_q.weight.lora_a", 2, 3, GGML_TYPE_F32, A },
                           { "blk.0.attn_q.weight.lora_b", 3, 2, GGML_TYPE_F32, B } };

        write_base(path_of("base.gguf"), "llama", base, 1);
        write_adapter(path_of("lora.gguf"), "llama", 3.0f, lora, 2);
        fold_f32(path_of("base.gguf"), path_of("lora.gguf"), 1.0f, "blk.0.attn_q.weight", out, 4);
        ck_assert_msg(out[0] == 0x1p-11f, "W'[0][0] = %a, expected 0x1p-11 (a fused multiply-add gives 0x1.0008p-11)",
                      (double) out[0]);
        ck_assert_msg(out[2] == 0.0f, "W'[1][0] = %a, expected 0 (the sum runs from k = 0)", (double) out[2]);
        ck_assert(out[1] == 0.0f && out[3] == 0.0f);

        /* scale 2, alpha 3, rank 3: f = fl(fl(2 · 3) / 3) = 2. */
        fold_f32(path_of("base.gguf"), path_of("lora.gguf"), 2.0f, "blk.0.attn_q.weight", out, 4);
        ck_assert(out[0] == 0x1p-10f);
}
END_TEST

/* token_embd (dim 2, vocab 3): lora_a ne = [rank, vocab], lora_b ne = [rank, dim]; W' = W + La·Lbᵀ. */
START_TEST(test_token_embd) {
        static const float W[6] = { 1, 1, 1, 1, 1, 1 };
        static const float La[9] = { 1, 0, 0, 0, 1, 0, 0, 0, 1 };      /* row v = e_v */
        static const float Lb[6] = { 10, 11, 12, 20, 21, 22 };         /* row d: (d + 1) · 10 + k */
        const T base[] = { { "token_embd.weight", 2, 3, GGML_TYPE_F16, W } };
        const T lora[] = { { "token_embd.weight.lora_a", 3, 3, GGML_TYPE_F32, La },
                           { "token_embd.weight.lora_b", 3, 2, GGML_TYPE_F16, Lb } };
        float out[6];

        write_base(path_of("base.gguf"), "llama", base, 1);
        write_adapter(path_of("lora.gguf"), "llama", -1, lora, 2); /* no alpha: f = scale */
        fold_f32(path_of("base.gguf"), path_of("lora.gguf"), 0.5f, "token_embd.weight", out, 6);
        for (unsigned v = 0; v < 3; v++)
                for (unsigned d = 0; d < 2; d++)
                        ck_assert_msg(out[v * 2 + d] == 1.0f + 0.5f * (float) ((d + 1) * 10 + v), "W'[%u][%u] = %g", v,
                                      d, (double) out[v * 2 + d]);
}
END_TEST

/* ---- refusals ---------------------------------------------------------------------------- */

static const float Z[64 * 64] = {0};

/* A well-formed base: blk.0.attn_q.weight [32, 32] F32 (or @type), blk.0.attn_norm.weight. */
static void good_base(uint32_t type) {
        const T base[] = { { "blk.0.attn_q.weight", 32, 32, type, Z } };
        write_base(path_of("base.gguf"), "llama", base, 1);
}

static int open_and_check(const char *lora, TpError *err) {
        _cleanup_(lora_freep) Lora *l = NULL;
        Gguf *g = NULL;
        int fd = open(path_of("base.gguf"), O_RDONLY | O_CLOEXEC);

        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(gguf_read(fd, &g, err), 0);
        int r = lora_open(lora, &l, err);
        if (r >= 0)
                r = lora_check_base(l, g, err);
        gguf_free(g);
        close(fd);
        return r;
}

static const struct {
        const char *what;
        const char *arch;
        T t[3];
        size_t n;
        uint32_t base_type;
        const char *expect;
} bad_cases[] = {
        { "another architecture", "qwen2",
          { { "blk.0.attn_q.weight.lora_a", 32, 4, GGML_TYPE_F32, Z }, { "blk.0.attn_q.weight.lora_b", 4, 32, GGML_TYPE_F32, Z } },
          2, GGML_TYPE_F32, "architecture 'qwen2'" },
        { "lora_a without lora_b", "llama", { { "blk.0.attn_q.weight.lora_a", 32, 4, GGML_TYPE_F32, Z } }, 1,
          GGML_TYPE_F32, "no matching 'blk.0.attn_q.weight.lora_b'" },
        { "lora_b without lora_a", "llama", { { "blk.0.attn_q.weight.lora_b", 4, 32, GGML_TYPE_F32, Z } }, 1,
          GGML_TYPE_F32, "no matching 'blk.0.attn_q.weight.lora_a'" },
        { "rank mismatch", "llama",
          { { "blk.0.attn_q.weight.lora_a", 32, 4, GGML_TYPE_F32, Z }, { "blk.0.attn_q.weight.lora_b", 8, 32, GGML_TYPE_F32, Z } },
          2, GGML_TYPE_F32, "rank mismatch" },
        { "other shape", "llama",
          { { "blk.0.attn_q.weight.lora_a", 64, 4, GGML_TYPE_F32, Z }, { "blk.0.attn_q.weight.lora_b", 4, 32, GGML_TYPE_F32, Z } },
          2, GGML_TYPE_F32, "is [32, 32] in the base model" },
        { "target not in the base", "llama",
          { { "blk.0.attn_k.weight.lora_a", 32, 4, GGML_TYPE_F32, Z }, { "blk.0.attn_k.weight.lora_b", 4, 32, GGML_TYPE_F32, Z } },
          2, GGML_TYPE_F32, "does not exist in the base model" },
        { "unexpected suffix", "llama", { { "blk.0.attn_q.weight.lora_c", 32, 4, GGML_TYPE_F32, Z } }, 1,
          GGML_TYPE_F32, "neither a lora_a nor a lora_b" },
        { "quantized factors", "llama",
          { { "blk.0.attn_q.weight.lora_a", 32, 4, GGML_TYPE_Q8_0, Z }, { "blk.0.attn_q.weight.lora_b", 4, 32, GGML_TYPE_F32, Z } },
          2, GGML_TYPE_F32, "only F32, F16 and BF16 factors" },
        { "quantized base", "llama",
          { { "blk.0.attn_q.weight.lora_a", 32, 4, GGML_TYPE_F32, Z }, { "blk.0.attn_q.weight.lora_b", 4, 32, GGML_TYPE_F32, Z } },
          2, GGML_TYPE_Q8_0, "float (F32, F16 or BF16) base model" },
        { "no pair at all", "llama", { { "blk.0.attn_norm.weight", 32, 1, GGML_TYPE_F32, Z } }, 1, GGML_TYPE_F32,
          "no lora_a/lora_b pair" },
};

START_TEST(test_bad_adapter) {
        TpError err = {};

        good_base(bad_cases[_i].base_type);
        write_adapter(path_of("lora.gguf"), bad_cases[_i].arch, 8.0f, bad_cases[_i].t, bad_cases[_i].n);
        int r = open_and_check(path_of("lora.gguf"), &err);
        ck_assert_msg(r < 0, "%s: accepted", bad_cases[_i].what);
        ck_assert_msg(strstr(err.message, bad_cases[_i].expect), "%s: '%s' lacks '%s'", bad_cases[_i].what, err.message,
                      bad_cases[_i].expect);
}
END_TEST

START_TEST(test_bad_keys) {
        const T t[] = { { "blk.0.attn_q.weight.lora_a", 32, 4, GGML_TYPE_F32, Z },
                        { "blk.0.attn_q.weight.lora_b", 4, 32, GGML_TYPE_F32, Z } };
        _cleanup_(gguf_writer_freep) GgufWriter *w = NULL;
        TpError err = {};

        good_base(GGML_TYPE_F32);
        /* A model, not an adapter. */
        ck_assert_int_lt(open_and_check(path_of("base.gguf"), &err), 0);
        ck_assert(strstr(err.message, "general.type is 'model', expected 'adapter'"));

        /* adapter.lora.alpha as a uint32: llama.cpp reads a float32. */
        ck_assert_int_eq(gguf_writer_new(&w), 0);
        ck_assert_int_eq(gguf_writer_set_string(w, "general.type", "adapter", 7), 0);
        ck_assert_int_eq(gguf_writer_set_string(w, "adapter.type", "lora", 4), 0);
        ck_assert_int_eq(gguf_writer_set_u32(w, "adapter.lora.alpha", 16), 0);
        write_gguf(w, path_of("lora.gguf"), "llama", t, 2);
        ck_assert_int_lt(open_and_check(path_of("lora.gguf"), &err), 0);
        ck_assert(strstr(err.message, "adapter.lora.alpha is a uint32"));
        w = gguf_writer_free(w);

        /* An activated LoRA. */
        const uint32_t tokens[] = { 1, 2 };
        ck_assert_int_eq(gguf_writer_new(&w), 0);
        ck_assert_int_eq(gguf_writer_set_string(w, "general.type", "adapter", 7), 0);
        ck_assert_int_eq(gguf_writer_set_string(w, "adapter.type", "lora", 4), 0);
        ck_assert_int_eq(gguf_writer_set_array(w, "adapter.alora.invocation_tokens", GGUF_TYPE_UINT32, tokens, 2), 0);
        write_gguf(w, path_of("lora.gguf"), "llama", t, 2);
        ck_assert_int_lt(open_and_check(path_of("lora.gguf"), &err), 0);
        ck_assert(strstr(err.message, "activated LoRA"));
        w = gguf_writer_free(w);

        /* adapter.type other than lora. */
        ck_assert_int_eq(gguf_writer_new(&w), 0);
        ck_assert_int_eq(gguf_writer_set_string(w, "general.type", "adapter", 7), 0);
        ck_assert_int_eq(gguf_writer_set_string(w, "adapter.type", "control_vector", 14), 0);
        write_gguf(w, path_of("lora.gguf"), "llama", t, 2);
        ck_assert_int_lt(open_and_check(path_of("lora.gguf"), &err), 0);
        ck_assert(strstr(err.message, "adapter.type is 'control_vector'"));

        /* Norm tensors are ignored, as llama.cpp ignores them. */
        const T with_norm[] = { t[0], t[1], { "blk.0.attn_norm.weight", 32, 1, GGML_TYPE_F32, Z } };
        _cleanup_(lora_freep) Lora *l = NULL;
        write_adapter(path_of("lora2.gguf"), "llama", 8.0f, with_norm, 3);
        ck_assert_int_eq(lora_open(path_of("lora2.gguf"), &l, &err), 0);
        ck_assert_uint_eq(l->n_pairs, 1);
        ck_assert_uint_eq(l->n_ignored, 1);
        ck_assert_uint_eq(l->pairs[0].rank, 4);
        ck_assert(l->alpha == 8.0f);
}
END_TEST

static Suite *fold_suite(void) {
        Suite *s = suite_create("fold");
        TCase *tc = tcase_create("core");

        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_order_and_rounding);
        tcase_add_test(tc, test_token_embd);
        tcase_add_loop_test(tc, test_bad_adapter, 0, ELEMENTSOF(bad_cases));
        tcase_add_test(tc, test_bad_keys);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(fold_suite)
