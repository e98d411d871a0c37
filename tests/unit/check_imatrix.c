/* SPDX-License-Identifier: MIT */
/*
 * common/model/imatrix.c: both forms built in memory and read through a memfd. The values as
 * llama-quantize normalizes them (per expert, counts rounded, ones for an expert never counted;
 * legacy sums over ncall), datasets and chunk counts, the legacy trailer read as std::istream
 * reads it, duplicate legacy names, lookup; each refusal with its message; every truncation.
 */

#include <check.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check-main.h"
#include "gguf-builder.h"
#include "imatrix.h"

static void put_i32(Buf *b, int32_t v) {
        put_u32(b, (uint32_t) v);
}

static uint32_t f32_bits(float f) {
        uint32_t u;
        memcpy(&u, &f, sizeof(u));
        return u;
}

static int read_buf(const Buf *f, Imatrix **ret, TpError *err) {
        int fd = memfd_with(f->p, f->n);
        int r = imatrix_read(fd, ret, err);
        close(fd);
        return r;
}

static Imatrix *read_ok(const Buf *f) {
        Imatrix *im = NULL;
        TpError err = {};
        int r = read_buf(f, &im, &err);
        ck_assert_msg(r == 0, "refused: %s", err.message);
        ck_assert_ptr_nonnull(im);
        return im;
}

/* Refused with @code and a message holding @needle; the output untouched. */
static void read_bad(const Buf *f, int code, const char *needle) {
        Imatrix sentinel, *im = &sentinel;
        TpError err = {};
        int r = read_buf(f, &im, &err);
        ck_assert_msg(r == code, "expected %d, got %d (%s)", code, r, err.message);
        ck_assert_int_eq(err.code, r);
        ck_assert_msg(strstr(err.message, needle), "message '%s' lacks '%s'", err.message, needle);
        ck_assert_ptr_eq(im, &sentinel);
}

static const ImatrixEntry *find(const Imatrix *im, const char *name, size_t n_values, uint32_t n_experts) {
        const ImatrixEntry *e = imatrix_find(im, name);
        ck_assert_msg(e, "no entry '%s'", name);
        ck_assert_str_eq(e->name, name);
        ck_assert_uint_eq(e->n_values, n_values);
        ck_assert_uint_eq(e->n_experts, n_experts);
        return e;
}

/* Sorted by name without duplicates, as imatrix_find's binary search needs. */
static void check_sorted(const Imatrix *im) {
        ck_assert_uint_ge(im->n_entries, 1);
        for (size_t i = 1; i < im->n_entries; i++)
                ck_assert_int_lt(strcmp(im->entries[i - 1].name, im->entries[i].name), 0);
        for (size_t i = 0; i < im->n_entries; i++)
                ck_assert_ptr_eq(imatrix_find(im, im->entries[i].name), &im->entries[i]);
}

/* A read that succeeds with @n_entries entries, sorted. */
static Imatrix *read_sorted(const Buf *f, size_t n_entries) {
        Imatrix *im = read_ok(f);
        ck_assert_uint_eq(im->n_entries, n_entries);
        check_sorted(im);
        return im;
}

/* ---- the legacy form ------------------------------------------------------------------------ */

typedef struct LegacyEntry {
        const char *name;
        size_t len; /* bytes of name; 0: strlen(name) */
        int32_t ncall, nval;
        const float *sums; /* nval */
} LegacyEntry;

static const float sums4[4] = {3.0f, 1.0f, 0.0f, 7.5f};
static const float sums3[3] = {10.0f, 0.25f, 1e-3f};

/* A legacy file of @n entries, without the trailer. */
static Buf legacy_of(const LegacyEntry *e, size_t n) {
        Buf f = {};
        put_i32(&f, (int32_t) n);
        for (size_t i = 0; i < n; i++) {
                size_t len = e[i].len ? e[i].len : strlen(e[i].name);
                put_i32(&f, (int32_t) len);
                put(&f, e[i].name, len);
                put_i32(&f, e[i].ncall);
                put_i32(&f, e[i].nval);
                for (int32_t j = 0; j < e[i].nval; j++)
                        put_u32(&f, f32_bits(e[i].sums[j]));
        }
        return f;
}

/* Two entries, out of name order; with @trailer the chunk count and the dataset name. */
static Buf legacy_file(bool trailer) {
        static const LegacyEntry e[] = {
                {"blk.0.ffn_up.weight", 0, 3, 4, sums4},
                {"blk.0.attn_q.weight", 0, 0, 3, sums3},
        };
        Buf f = legacy_of(e, ELEMENTSOF(e));
        if (trailer) {
                put_i32(&f, 42);
                put_i32(&f, 9);
                put(&f, "wiki.raw!", 9);
        }
        return f;
}

START_TEST(test_legacy_values) {
        Buf f = legacy_file(true);
        Imatrix *im = read_sorted(&f, 2);

        ck_assert(im->legacy);
        ck_assert_str_eq(im->entries[0].name, "blk.0.attn_q.weight");
        /* ncall 3: each sum over (float) 3; ncall 0: the sums as they are. */
        const ImatrixEntry *e = find(im, "blk.0.ffn_up.weight", 4, 1);
        for (size_t i = 0; i < 4; i++)
                ck_assert_float_eq(e->values[i], sums4[i] / 3.0f);
        e = find(im, "blk.0.attn_q.weight", 3, 1);
        ck_assert_mem_eq(e->values, sums3, sizeof(sums3));
        ck_assert_int_eq(im->chunk_count, 42);
        ck_assert_int_eq(im->chunk_size, 0);
        ck_assert_uint_eq(im->n_datasets, 1);
        ck_assert_str_eq(im->datasets[0], "wiki.raw!");
        ck_assert_ptr_null(imatrix_find(im, "blk.0.ffn_up"));
        ck_assert_ptr_null(imatrix_find(im, "blk.0.ffn_up.weight2"));
        ck_assert_ptr_null(imatrix_find(im, ""));
        ck_assert_ptr_null(imatrix_find(im, NULL));
        ck_assert_ptr_null(imatrix_find(NULL, "blk.0.ffn_up.weight"));
        imatrix_free(im);
        ck_assert_ptr_null(imatrix_free(NULL));
        free(f.p);
}
END_TEST

/* A negative ncall leaves the sums alone, as 0 does. */
START_TEST(test_legacy_negative_ncall) {
        static const LegacyEntry e[] = {{"t", 0, -5, 3, sums3}};
        Buf f = legacy_of(e, 1);
        Imatrix *im = read_ok(&f);
        ck_assert_mem_eq(find(im, "t", 3, 1)->values, sums3, sizeof(sums3));
        imatrix_free(im);
        free(f.p);
}
END_TEST

/*
 * The trailer as llama.cpp's std::istream reads it, after the entries: nothing (no chunk count);
 * 1 to 3 bytes (a partial chunk count, kept); 4 (chunk count only); a dataset length that is 0,
 * negative or longer than what is left (no dataset); a dataset with a NUL (cut there); bytes after it.
 */
static const struct {
        const char *bytes;
        size_t n;
        int32_t chunk_count;
        const char *dataset; /* NULL: none */
} trailers[] = {
        {"", 0, 0, NULL},
        {"\x07", 1, 7, NULL},
        {"\x07\x01\x02", 3, 0x020107, NULL},
        {"\x10\0\0\0", 4, 16, NULL},
        {"\x10\0\0\0\x05\0", 6, 16, NULL},
        {"\xff\xff\xff\xff\0\0\0\0", 8, -1, NULL},
        {"\x10\0\0\0\xfe\xff\xff\377ab", 10, 16, NULL},
        {"\x10\0\0\0\x05\0\0\0abcd", 12, 16, NULL},
        {"\x10\0\0\0\x04\0\0\0abcd", 12, 16, "abcd"},
        {"\x10\0\0\0\x04\0\0\0ab\0d", 12, 16, "ab"},
        {"\x10\0\0\0\x02\0\0\0\xff\xfejunk", 14, 16, "\xff\xfe"},
        {"\x10\0\0\0\x01\0\0\0\0", 9, 16, ""},
};

START_TEST(test_legacy_trailer) {
        Buf f = legacy_file(false);
        put(&f, trailers[_i].bytes, trailers[_i].n);
        Imatrix *im = read_ok(&f);
        ck_assert_int_eq(im->chunk_count, trailers[_i].chunk_count);
        if (trailers[_i].dataset) {
                ck_assert_uint_eq(im->n_datasets, 1);
                ck_assert_str_eq(im->datasets[0], trailers[_i].dataset);
        } else
                ck_assert_uint_eq(im->n_datasets, 0);
        ck_assert_uint_eq(im->n_entries, 2);
        imatrix_free(im);
        free(f.p);
}
END_TEST

/*
 * Names are bytes, cut at their first NUL: empty, not UTF-8, control characters are names too.
 * A later entry of the same name replaces the earlier one whole (llama.cpp's std::map).
 */
START_TEST(test_legacy_names) {
        static const LegacyEntry e[] = {
                {"b", 0, 1, 4, sums4},
                {"a", 0, 1, 3, sums3},
                {"", 0, 0, 3, sums3},
                {"b", 0, 2, 3, sums3},
                {"\xff\xfe\x80", 0, 0, 3, sums3},
                {"a\0ignored", 9, 0, 4, sums4}, /* "a" again */
                {"tab\there\n", 0, 0, 3, sums3},
        };
        Buf f = legacy_of(e, ELEMENTSOF(e));
        Imatrix *im = read_sorted(&f, 5);
        ck_assert_mem_eq(find(im, "a", 4, 1)->values, sums4, sizeof(sums4));
        const ImatrixEntry *b = find(im, "b", 3, 1);
        for (size_t i = 0; i < 3; i++)
                ck_assert_float_eq(b->values[i], sums3[i] / 2.0f);
        ck_assert_mem_eq(find(im, "", 3, 1)->values, sums3, sizeof(sums3));
        find(im, "\xff\xfe\x80", 3, 1);
        find(im, "tab\there\n", 3, 1);
        ck_assert_ptr_null(imatrix_find(im, "a\xff"));
        imatrix_free(im);
        free(f.p);
}
END_TEST

static Buf one_entry(int32_t len, const char *name, int32_t ncall, int32_t nval, const float *sums, size_t n) {
        Buf f = {};
        put_i32(&f, 1);
        put_i32(&f, len);
        put(&f, name, strlen(name));
        put_i32(&f, ncall);
        put_i32(&f, nval);
        for (size_t i = 0; i < n; i++)
                put_u32(&f, f32_bits(sums[i]));
        return f;
}

static const float bad_nan[3] = {1.0f, NAN, 2.0f}, bad_inf[3] = {1.0f, 2.0f, INFINITY}, bad_neg[3] = {-0.5f, 1, 1};

START_TEST(test_legacy_bad) {
        Buf f = {};

        read_bad(&f, -EBADMSG, "legacy imatrix: no data: 0 bytes");
        put(&f, "\x01\x00", 2);
        read_bad(&f, -EBADMSG, "no data: 2 bytes");
        f.n = 0;
        put_i32(&f, 0);
        read_bad(&f, -EBADMSG, "no data: entry count 0");
        f.n = 0;
        put_i32(&f, -3);
        read_bad(&f, -EBADMSG, "no data: entry count -3");
        f.n = 0;
        put_i32(&f, IMATRIX_ENTRIES_MAX + 1);
        read_bad(&f, -EBADMSG, "entry count 1000001 exceeds the cap of 1000000");
        free(f.p);
        f = legacy_of((const LegacyEntry[]){{"x", 0, 1, 3, sums3}}, 1);
        set_le(&f, 0, 3, 4);
        read_bad(&f, -EBADMSG, "entry count 3: entries need at least 16 bytes each, but only 25 bytes are left");
        free(f.p);

        static const struct {
                int32_t len;
                const char *name;
                int32_t ncall, nval;
                const float *sums;
                const char *message;
        } cases[] = {
                {-1, "", 1, 3, sums3, "entry #0 at offset 4: name length -1 is negative"},
                {INT32_MIN, "", 1, 3, sums3, "name length -2147483648 is negative"},
                {IMATRIX_NAME_LEN_MAX + 1, "", 1, 3, sums3, "name length 4097 exceeds the 4096-byte cap"},
                {40, "short", 1, 3, sums3,
                 "entry #0 at offset 4: name length 40 runs past the end of the file (25 "
                 "bytes left at offset 8)"},
                {1, "x", 1, 0, sums3, "entry #0 'x' at offset 4: nval 0: an entry holds at least 1 value"},
                {1, "x", 1, -7, sums3, "nval -7"},
                {1, "x", 1, 4, sums3,
                 "entry #0 'x' at offset 4: 4 sums declared need 16 bytes, but 12 bytes are left "
                 "at offset 17"},
                {1, "x", 1, INT32_MAX, sums3, "2147483647 sums exceed the cap of 268435456 values per entry"},
                {1, "x", 1, 3, bad_nan, "entry #0 'x' at offset 4: sums value 1 is nan: a sum of squares is finite"},
                {1, "x", 1, 3, bad_inf, "sums value 2 is inf"},
                {1, "x", 0, 3, bad_neg, "sums value 0 is -0.5"},
                {4, "\xff\n'\\", 1, 3, bad_nan, "entry #0 '\\xff\\x0a\\x27\\x5c' at offset 4: sums value 1 is nan"},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                Buf g = one_entry(cases[i].len, cases[i].name, cases[i].ncall, cases[i].nval, cases[i].sums, 3);
                read_bad(&g, -EBADMSG, cases[i].message);
                free(g.p);
        }
}
END_TEST

/* Every cut inside the entries is refused with a message; every cut inside the trailer is fine. */
START_TEST(test_legacy_truncations) {
        Buf f = legacy_file(true);
        Buf plain = legacy_file(false);
        size_t full = f.n, entries_end = plain.n;

        for (size_t n = 0; n < full; n++) {
                Imatrix sentinel, *im = &sentinel;
                TpError err = {};
                f.n = n;
                int r = read_buf(&f, &im, &err);
                if (n < entries_end) {
                        ck_assert_msg(r == -EBADMSG, "cut at %zu: %d", n, r);
                        ck_assert_msg(strncmp(err.message, "legacy imatrix: ", 16) == 0, "cut at %zu: %s", n,
                                      err.message);
                        ck_assert_ptr_eq(im, &sentinel);
                } else {
                        ck_assert_msg(r == 0, "cut at %zu: %s", n, err.message);
                        ck_assert_uint_eq(im->n_entries, 2);
                        ck_assert_uint_eq(im->n_datasets, 0);
                        imatrix_free(im);
                }
        }
        free(f.p);
        free(plain.p);
}
END_TEST

/* ---- the GGUF form -------------------------------------------------------------------------- */

/* A GGUF imatrix under construction: the model, and the floats to put into its tensors' data. */
typedef struct GgufIm {
        Model m;
        struct {
                uint64_t rel;
                const float *v;
                size_t n;
        } fill[16];
        size_t n_fill;
} GgufIm;

enum { KEY_DATASETS = 1, KEY_CHUNK_COUNT = 2, KEY_CHUNK_SIZE = 4, KEYS_ALL = 7 };

static void gi_init(GgufIm *g, unsigned keys) {
        *g = (GgufIm){};
        model_init(&g->m, 3);
        if (keys & KEY_DATASETS) {
                Buf *b = kv(&g->m, IMATRIX_KEY_DATASETS, GGUF_TYPE_ARRAY);
                put_u32(b, GGUF_TYPE_STRING);
                put_u64(b, 2);
                put_str(b, "wiki.train.raw");
                put_strn(b, "code\0.txt", 9);
        }
        if (keys & KEY_CHUNK_COUNT)
                kv_u32(&g->m, IMATRIX_KEY_CHUNK_COUNT, 100);
        if (keys & KEY_CHUNK_SIZE)
                kv_u32(&g->m, IMATRIX_KEY_CHUNK_SIZE, 512);
}

static void gi_tensor(GgufIm *g, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type, const float *v) {
        uint64_t rel = tensor(&g->m, name, n_dims, ne, type), n = 1;
        for (uint32_t j = 0; j < n_dims; j++)
                n *= ne[j];
        if (v) {
                ck_assert_uint_lt(g->n_fill, ELEMENTSOF(g->fill));
                g->fill[g->n_fill++] = (__typeof__(g->fill[0])){rel, v, n};
        }
}

/* <name>.in_sum2 (ne0 × experts) and <name>.counts (experts). */
static void gi_pair(GgufIm *g, const char *name, uint64_t ne0, uint64_t experts, const float *sums,
                    const float *counts) {
        char t[64];
        snprintf(t, sizeof(t), "%s" IMATRIX_SUFFIX_SUMS, name);
        gi_tensor(g, t, 2, NE(ne0, experts), GGML_TYPE_F32, sums);
        snprintf(t, sizeof(t), "%s" IMATRIX_SUFFIX_COUNTS, name);
        gi_tensor(g, t, 1, NE(experts), GGML_TYPE_F32, counts);
}

/* The file, its last tensor padded as ggml writes it (unless @unpadded); frees the model. */
static Buf gi_bytes_padded(GgufIm *g, bool unpadded) {
        Buf out = {};
        uint64_t infos_end = 0;
        model_bytes(&g->m, &out, &infos_end);
        if (!unpadded && g->m.n_t > 0)
                put_fill(&out, round_up(out.n, g->m.align) - out.n, 0);
        uint64_t data = round_up(infos_end, g->m.align);
        for (size_t k = 0; k < g->n_fill; k++)
                for (size_t i = 0; i < g->fill[k].n; i++)
                        set_le(&out, data + g->fill[k].rel + 4 * i, f32_bits(g->fill[k].v[i]), 4);
        model_done(&g->m);
        return out;
}

static Buf gi_bytes(GgufIm *g) {
        return gi_bytes_padded(g, false);
}

static const float moe_sums[8] = {6.0f, 3.0f, 1.5f, 9.0f, 5.0f, 5.0f, 5.0f, 5.0f};
static const float moe_counts[2] = {3.0f, 0.0f};
static const float q_sums[3] = {10.0f, 7.0f, 0.5f};
static const float q_counts[1] = {2.5f}; /* lround: 3 (half away from zero; rint would give 2) */
static const float k_counts[1] = {0.4f}; /* lround: 0, so ones */

static Buf gguf_file(unsigned keys) {
        GgufIm g;
        gi_init(&g, keys);
        gi_pair(&g, "blk.0.ffn_up_exps.weight", 4, 2, moe_sums, moe_counts);
        gi_tensor(&g, "token_embd.weight", 1, NE(8), GGML_TYPE_F32, NULL); /* not imatrix data: ignored */
        gi_pair(&g, "blk.0.attn_q.weight", 3, 1, q_sums, q_counts);
        gi_pair(&g, "blk.0.attn_k.weight", 3, 1, q_sums, k_counts);
        return gi_bytes(&g);
}

START_TEST(test_gguf_values) {
        Buf f = gguf_file(KEYS_ALL);
        Imatrix *im = read_sorted(&f, 3);

        ck_assert(!im->legacy);
        /* Expert 0 counted 3 times: its sums over 3; expert 1 never: ones. */
        const ImatrixEntry *e = find(im, "blk.0.ffn_up_exps.weight", 8, 2);
        for (size_t i = 0; i < 4; i++) {
                ck_assert_float_eq(e->values[i], moe_sums[i] / 3.0f);
                ck_assert_float_eq(e->values[4 + i], 1.0f);
        }
        e = find(im, "blk.0.attn_q.weight", 3, 1);
        for (size_t i = 0; i < 3; i++)
                ck_assert_float_eq(e->values[i], q_sums[i] / 3.0f);
        e = find(im, "blk.0.attn_k.weight", 3, 1);
        for (size_t i = 0; i < 3; i++)
                ck_assert_float_eq(e->values[i], 1.0f);
        ck_assert_ptr_null(imatrix_find(im, "token_embd.weight"));
        ck_assert_ptr_null(imatrix_find(im, "blk.0.attn_q.weight.in_sum2"));
        ck_assert_int_eq(im->chunk_count, 100);
        ck_assert_int_eq(im->chunk_size, 512);
        ck_assert_uint_eq(im->n_datasets, 2);
        ck_assert_str_eq(im->datasets[0], "wiki.train.raw");
        ck_assert_str_eq(im->datasets[1], "code"); /* cut at its NUL, as llama.cpp's const char * */
        imatrix_free(im);
        free(f.p);
}
END_TEST

/* A datasets key that is not an array of strings gives no datasets (llama.cpp goes on); counts wrap to int32. */
START_TEST(test_gguf_lenient_keys) {
        GgufIm g = {};
        model_init(&g.m, 3);
        kv_string(&g.m, IMATRIX_KEY_DATASETS, "not an array");
        kv_u32(&g.m, IMATRIX_KEY_CHUNK_COUNT, UINT32_MAX);
        kv_u32(&g.m, IMATRIX_KEY_CHUNK_SIZE, 0x80000000u);
        gi_pair(&g, ".x", 3, 1, q_sums, q_counts);
        gi_pair(&g, "", 3, 1, q_sums, k_counts); /* tensors ".in_sum2" and ".counts": the name "" */
        Buf f = gi_bytes(&g);
        Imatrix *im = read_sorted(&f, 2);
        ck_assert_uint_eq(im->n_datasets, 0);
        ck_assert_int_eq(im->chunk_count, -1);
        ck_assert_int_eq(im->chunk_size, INT32_MIN);
        ck_assert_float_eq(find(im, "", 3, 1)->values[0], 1.0f);
        ck_assert_float_eq(find(im, ".x", 3, 1)->values[0], q_sums[0] / 3.0f);
        imatrix_free(im);
        free(f.p);
}
END_TEST

/* Each of the three keys missing. */
START_TEST(test_gguf_missing_key) {
        static const char *const names[] = {IMATRIX_KEY_DATASETS, IMATRIX_KEY_CHUNK_COUNT, IMATRIX_KEY_CHUNK_SIZE};
        char needle[128];
        Buf f = gguf_file(KEYS_ALL & ~(1u << _i));
        snprintf(needle, sizeof(needle), "GGUF imatrix: missing imatrix metadata: no key '%s'", names[_i]);
        read_bad(&f, -EBADMSG, needle);
        free(f.p);
}
END_TEST

static const float one[1] = {1.0f}, six[6] = {1, 2, 3, 4, 5, 6};
static const float c_nan[1] = {NAN}, c_neg[1] = {-1.0f}, c_big[1] = {1e19f}, c_inf[1] = {INFINITY};
static const float s_neg[3] = {1.0f, -2.0f, 1.0f}, s_inf[3] = {1.0f, 2.0f, -INFINITY};

START_TEST(test_gguf_bad) {
        GgufIm g;
        Buf f;

#define BAD(setup, message)                                                                                            \
        do {                                                                                                           \
                gi_init(&g, KEYS_ALL);                                                                                 \
                setup;                                                                                                 \
                f = gi_bytes(&g);                                                                                      \
                read_bad(&f, -EBADMSG, message);                                                                       \
                free(f.p);                                                                                             \
        } while (0)

        BAD((void) 0, "GGUF imatrix: no data: the file holds no tensors");
        BAD(gi_tensor(&g, "output.weight", 1, NE(4), GGML_TYPE_F32, NULL),
            "no imatrix entries: none of the 1 tensors is named '<name>.in_sum2' or '<name>.counts'");
        BAD(gi_tensor(&g, "a.in_sum2", 1, NE(3), GGML_TYPE_F32, q_sums), "tensor 'a.in_sum2' (#0) has no 'a.counts'");
        BAD((gi_pair(&g, "a", 3, 1, q_sums, one), gi_tensor(&g, "b.counts", 1, NE(1), GGML_TYPE_F32, one)),
            "tensor 'b.counts' (#2) has no 'b.in_sum2'");
        BAD((gi_tensor(&g, "a.in_sum2", 1, NE(32), GGML_TYPE_F16, NULL),
             gi_tensor(&g, "a.counts", 1, NE(1), GGML_TYPE_F32, one)),
            "entry 'a': tensor 'a.in_sum2' is f16: sums and counts must be f32");
        BAD((gi_tensor(&g, "a.in_sum2", 1, NE(32), GGML_TYPE_F32, NULL),
             gi_tensor(&g, "a.counts", 1, NE(32), GGML_TYPE_Q8_0, NULL)),
            "tensor 'a.counts' is q8_0");
        BAD(gi_pair(&g, "a", 3, 0, q_sums, NULL), "entry 'a': tensor 'a.counts' holds no counts");
        BAD((gi_tensor(&g, "a.in_sum2", 1, NE(0), GGML_TYPE_F32, NULL),
             gi_tensor(&g, "a.counts", 1, NE(1), GGML_TYPE_F32, one)),
            "tensor 'a.in_sum2' holds no values");
        BAD((gi_tensor(&g, "a.in_sum2", 2, NE(3, 2), GGML_TYPE_F32, six),
             gi_tensor(&g, "a.counts", 1, NE(4), GGML_TYPE_F32, moe_sums)),
            "tensor 'a.in_sum2' holds 6 values, not a multiple of the 4 counts (one per expert) of 'a.counts'");
        BAD(gi_pair(&g, "a", 1, 1, one, c_nan), "entry 'a': tensor 'a.counts': count 0 is nan");
        BAD(gi_pair(&g, "a", 1, 1, one, c_inf), "count 0 is inf");
        BAD(gi_pair(&g, "a", 1, 1, one, c_neg), "count 0 is -1: a count is finite, not negative and below 2^63");
        BAD(gi_pair(&g, "a", 1, 1, one, c_big), "count 0 is 1e+19");
        BAD(gi_pair(&g, "a", 3, 1, s_neg, one), "entry 'a': a.in_sum2 value 1 is -2: a sum of squares");
        BAD(gi_pair(&g, "a", 3, 1, s_inf, one), "a.in_sum2 value 2 is -inf");
        BAD(gi_pair(&g, "a", 3, 1, bad_nan, one), "a.in_sum2 value 1 is nan");
#undef BAD

        /* chunk_count of another type: llama.cpp's gguf_get_val_u32 would abort. */
        g = (GgufIm){};
        model_init(&g.m, 3);
        Buf *b = kv(&g.m, IMATRIX_KEY_DATASETS, GGUF_TYPE_ARRAY);
        put_u32(b, GGUF_TYPE_STRING);
        put_u64(b, 0);
        put_u32(kv(&g.m, IMATRIX_KEY_CHUNK_COUNT, GGUF_TYPE_INT32), 5);
        kv_u32(&g.m, IMATRIX_KEY_CHUNK_SIZE, 512);
        gi_pair(&g, "a", 3, 1, q_sums, one);
        f = gi_bytes(&g);
        read_bad(&f, -EBADMSG, "key 'imatrix.chunk_count' at offset 64: must be a uint32, not int32");
        free(f.p);
}
END_TEST

/* What ggml's GGUF reader refuses and gguf.h accepts: llama.cpp cannot load these files. */
START_TEST(test_gguf_ggml_rules) {
        GgufIm g;
        Buf f;

        /* The last tensor's padding missing: 12 + 4 bytes of data, 64 with the padding. */
        gi_init(&g, KEYS_ALL);
        gi_pair(&g, "a", 3, 1, q_sums, one);
        f = gi_bytes_padded(&g, true);
        read_bad(&f, -EBADMSG, "the data section, each tensor padded to 32 bytes, is 64 bytes from offset ");
        free(f.p);

        /* Not in table order: the counts' bytes first. */
        gi_init(&g, KEYS_ALL);
        tensor_at(&g.m, "a.in_sum2", 1, NE(3), GGML_TYPE_F32, 32, 12);
        tensor_at(&g.m, "a.counts", 1, NE(1), GGML_TYPE_F32, 0, 4);
        f = gi_bytes(&g);
        read_bad(&f, -EBADMSG,
                 "tensor 'a.in_sum2' (#0): rel_offset 32, but llama.cpp's GGUF reader wants the tensors packed in "
                 "table order, this one at 0");
        free(f.p);

        /* A key holding an array of arrays. */
        gi_init(&g, KEYS_ALL);
        Buf *b = kv(&g.m, "t.nested", GGUF_TYPE_ARRAY);
        put_u32(b, GGUF_TYPE_ARRAY);
        put_u64(b, 0);
        gi_pair(&g, "a", 3, 1, q_sums, one);
        f = gi_bytes(&g);
        read_bad(&f, -EBADMSG,
                 "key 't.nested' at offset 172: an array of arrays, which llama.cpp's GGUF reader refuses");
        free(f.p);
}
END_TEST

/* Every cut of a GGUF imatrix is refused (the last tensor's data ends the file). */
START_TEST(test_gguf_truncations) {
        Buf f = gguf_file(KEYS_ALL);
        size_t full = f.n;
        for (size_t n = 0; n < full; n++) {
                Imatrix sentinel, *im = &sentinel;
                TpError err = {};
                f.n = n;
                int r = read_buf(&f, &im, &err);
                ck_assert_msg(r == -EBADMSG, "cut at %zu: %d", n, r);
                ck_assert(err.message[0]);
                ck_assert_ptr_eq(im, &sentinel);
        }
        free(f.p);
}
END_TEST

/* ---- both ----------------------------------------------------------------------------------- */

START_TEST(test_file_size_cap) {
        Buf f = legacy_file(true);
        int fd = memfd_with(f.p, f.n);
        Imatrix *im = NULL;
        TpError err = {};

        /* Sparse: no memory is used. */
        ck_assert_int_eq(ftruncate(fd, (off_t) IMATRIX_FILE_SIZE_MAX + 1), 0);
        ck_assert_int_eq(imatrix_read(fd, &im, &err), -EBADMSG);
        ck_assert_str_eq(err.message, "2147483649 bytes: an imatrix file is at most 2147483648 bytes");
        ck_assert_ptr_null(im);
        close(fd);
        free(f.p);
}
END_TEST

START_TEST(test_not_regular) {
        int p[2];
        Imatrix *im = NULL;
        TpError err = {};
        ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
        ck_assert_int_eq(imatrix_read(p[0], &im, &err), -EINVAL);
        ck_assert_str_eq(err.message, "not a regular file");
        ck_assert_ptr_null(im);
        close(p[0]);
        close(p[1]);
}
END_TEST

START_TEST(test_open) {
        char dir[] = "/tmp/check-imatrix-XXXXXX", path[64], missing[64];
        Buf f = gguf_file(KEYS_ALL);
        Imatrix *im = NULL;
        TpError err = {};

        ck_assert_ptr_nonnull(mkdtemp(dir));
        snprintf(path, sizeof(path), "%s/imatrix.gguf", dir);
        snprintf(missing, sizeof(missing), "%s/none.dat", dir);
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write(fd, f.p, f.n), (ssize_t) f.n);
        ck_assert_int_eq(close(fd), 0);

        ck_assert_int_eq(imatrix_open(path, &im, &err), 0);
        ck_assert_uint_eq(im->n_entries, 3);
        im = imatrix_free(im);

        ck_assert_int_eq(imatrix_open(missing, &im, &err), -ENOENT);
        ck_assert_ptr_null(im);
        ck_assert(strncmp(err.message, missing, strlen(missing)) == 0);

        /* A refusal names the path first. */
        ck_assert_int_eq(truncate(path, 40), 0);
        ck_assert_int_eq(imatrix_open(path, &im, &err), -EBADMSG);
        ck_assert_ptr_null(im);
        ck_assert(strncmp(err.message, path, strlen(path)) == 0);
        ck_assert(strstr(err.message, ": GGUF imatrix: "));

        ck_assert_int_eq(unlink(path), 0);
        ck_assert_int_eq(rmdir(dir), 0);
        free(f.p);
}
END_TEST

static Suite *imatrix_suite(void) {
        Suite *s = suite_create("imatrix");
        TCase *tc = tcase_create("core");
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_legacy_values);
        tcase_add_test(tc, test_legacy_negative_ncall);
        tcase_add_loop_test(tc, test_legacy_trailer, 0, (int) ELEMENTSOF(trailers));
        tcase_add_test(tc, test_legacy_names);
        tcase_add_test(tc, test_legacy_bad);
        tcase_add_test(tc, test_legacy_truncations);
        tcase_add_test(tc, test_gguf_values);
        tcase_add_test(tc, test_gguf_lenient_keys);
        tcase_add_loop_test(tc, test_gguf_missing_key, 0, 3);
        tcase_add_test(tc, test_gguf_bad);
        tcase_add_test(tc, test_gguf_ggml_rules);
        tcase_add_test(tc, test_gguf_truncations);
        tcase_add_test(tc, test_file_size_cap);
        tcase_add_test(tc, test_not_regular);
        tcase_add_test(tc, test_open);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(imatrix_suite)
