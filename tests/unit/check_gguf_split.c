/* SPDX-License-Identifier: MIT */
/* Split GGUF: the shard keys gguf_read() checks into Gguf.split (common/artifact/gguf.c), and the
 * shard file names of common/artifact/gguf-split.c. */

#include <check.h>
#include <stdio.h>
#include <string.h>

#include "check-main.h"
#include "gguf-builder.h"
#include "gguf-split.h"

/* ---- split keys --------------------------------------------------------- */

static void kv_u16(Model *m, const char *key, uint16_t v) {
        put_u16(kv(m, key, GGUF_TYPE_UINT16), v);
}

static void kv_i32(Model *m, const char *key, int32_t v) {
        put_u32(kv(m, key, GGUF_TYPE_INT32), (uint32_t) v);
}

/* Two tensors, as llama-gguf-split writes a shard: its keys first, the split keys last, in its order. */
static void shard(Model *m, bool first, uint16_t no, uint16_t count, int32_t total) {
        if (first) {
                kv_string(m, "general.architecture", "llama");
                kv_u32(m, "llama.block_count", 2);
        }
        kv_u16(m, GGUF_KEY_SPLIT_NO, no);
        kv_i32(m, GGUF_KEY_SPLIT_TENSORS_COUNT, total);
        kv_u16(m, GGUF_KEY_SPLIT_COUNT, count);
        tensor(m, "blk.0.attn_q.weight", 2, NE(32, 2), GGML_TYPE_Q4_0);
        tensor(m, "blk.0.attn_norm.weight", 1, NE(32), GGML_TYPE_F32);
}

static void good_first(Model *m) {
        shard(m, true, 0, 3, 6);
}
static void good_middle(Model *m) {
        shard(m, false, 1, 3, 6);
}
static void good_last(Model *m) {
        shard(m, false, 2, 3, 2); /* the total may equal this shard's own count */
}
static void good_single(Model *m) {
        shard(m, true, 0, 1, 2);
}
static void good_max(Model *m) {
        shard(m, false, 65534, 65535, INT32_MAX);
}
static void good_none(Model *m) {
        kv_string(m, "general.architecture", "llama");
        tensor(m, "a", 1, NE(8), GGML_TYPE_F32);
}
static void good_metadata_only(Model *m) { /* --no-tensor-first-split: the first shard holds no tensor */
        kv_string(m, "general.architecture", "llama");
        kv_u16(m, GGUF_KEY_SPLIT_NO, 0);
        kv_i32(m, GGUF_KEY_SPLIT_TENSORS_COUNT, 0);
        kv_u16(m, GGUF_KEY_SPLIT_COUNT, 2);
}

typedef struct GoodCase {
        const char *name;
        void (*build)(Model *m);
        bool present;
        uint16_t no, count;
        int32_t tensors_count;
} GoodCase;

static const GoodCase good_cases[] = {
        {"first shard", good_first, true, 0, 3, 6},
        {"middle shard", good_middle, true, 1, 3, 6},
        {"last shard", good_last, true, 2, 3, 2},
        {"a split of one", good_single, true, 0, 1, 2},
        {"the largest", good_max, true, 65534, 65535, INT32_MAX},
        {"no split keys", good_none, false, 0, 0, 0},
        {"metadata only", good_metadata_only, true, 0, 2, 0},
};

START_TEST(test_split_good) {
        const GoodCase *c = &good_cases[_i];
        TpError err = {0};
        Gguf *g = NULL;
        Buf f = {0};
        Model m;

        model_init(&m, 3);
        c->build(&m);
        model_bytes(&m, &f, NULL);
        int r = read_bytes(f.p, f.n, &g, &err);
        ck_assert_msg(r == 0, "%s: %d (%s)", c->name, r, err.message);
        ck_assert_msg(g->split.present == c->present, "%s: present %d", c->name, g->split.present);
        ck_assert_uint_eq(g->split.no, c->no);
        ck_assert_uint_eq(g->split.count, c->count);
        ck_assert_int_eq(g->split.tensors_count, c->tensors_count);
        check_invariants(g);
        gguf_free(g);
        model_done(&m);
        buf_done(&f);
}
END_TEST

static void bad_no_u32(Model *m) {
        kv_u32(m, GGUF_KEY_SPLIT_NO, 0);
        kv_i32(m, GGUF_KEY_SPLIT_TENSORS_COUNT, 1);
        kv_u16(m, GGUF_KEY_SPLIT_COUNT, 2);
}
static void bad_count_i16(Model *m) {
        kv_u16(m, GGUF_KEY_SPLIT_NO, 0);
        kv_i32(m, GGUF_KEY_SPLIT_TENSORS_COUNT, 1);
        put_u16(kv(m, GGUF_KEY_SPLIT_COUNT, GGUF_TYPE_INT16), 2);
}
static void bad_count_string(Model *m) {
        kv_u16(m, GGUF_KEY_SPLIT_NO, 0);
        kv_i32(m, GGUF_KEY_SPLIT_TENSORS_COUNT, 1);
        kv_string(m, GGUF_KEY_SPLIT_COUNT, "2");
}
static void bad_total_u32(Model *m) {
        kv_u16(m, GGUF_KEY_SPLIT_NO, 0);
        kv_u32(m, GGUF_KEY_SPLIT_TENSORS_COUNT, 1);
        kv_u16(m, GGUF_KEY_SPLIT_COUNT, 2);
}
static void bad_total_i64(Model *m) {
        kv_u16(m, GGUF_KEY_SPLIT_NO, 0);
        put_u64(kv(m, GGUF_KEY_SPLIT_TENSORS_COUNT, GGUF_TYPE_INT64), 1);
        kv_u16(m, GGUF_KEY_SPLIT_COUNT, 2);
}
static void bad_total_array(Model *m) {
        kv_u16(m, GGUF_KEY_SPLIT_NO, 0);
        Buf *b = kv(m, GGUF_KEY_SPLIT_TENSORS_COUNT, GGUF_TYPE_ARRAY);
        put_u32(b, GGUF_TYPE_INT32);
        put_u64(b, 1);
        put_u32(b, 1);
        kv_u16(m, GGUF_KEY_SPLIT_COUNT, 2);
}
static void bad_no_is_count(Model *m) {
        shard(m, false, 3, 3, 6);
}
static void bad_no_past_count(Model *m) {
        shard(m, false, 9, 3, 6);
}
static void bad_count_0(Model *m) {
        shard(m, false, 0, 0, 6);
}
static void bad_total_negative(Model *m) {
        shard(m, false, 0, 2, -1);
}
static void bad_total_min(Model *m) {
        shard(m, false, 0, 2, INT32_MIN);
}
static void bad_total_below_own(Model *m) {
        shard(m, false, 0, 2, 1);
}
static void bad_only_no(Model *m) {
        kv_string(m, "general.architecture", "llama");
        kv_u16(m, GGUF_KEY_SPLIT_NO, 0);
}
static void bad_only_count(Model *m) {
        kv_u16(m, GGUF_KEY_SPLIT_COUNT, 2);
}
static void bad_no_total(Model *m) {
        kv_u16(m, GGUF_KEY_SPLIT_NO, 0);
        kv_u16(m, GGUF_KEY_SPLIT_COUNT, 2);
}
static void bad_no_no(Model *m) {
        kv_i32(m, GGUF_KEY_SPLIT_TENSORS_COUNT, 1);
        kv_u16(m, GGUF_KEY_SPLIT_COUNT, 2);
}

typedef struct BadCase {
        const char *name;
        void (*build)(Model *m);
        const char *needle, *needle2; /* both must appear in the message (needle2 may be NULL) */
} BadCase;

static const BadCase bad_cases[] = {
        {"split.no uint32", bad_no_u32, "key #0 'split.no' at offset 24: must be a uint16, not uint32", NULL},
        {"split.count int16", bad_count_i16, "key #2 'split.count' at offset ", ": must be a uint16, not int16"},
        {"split.count string", bad_count_string, "'split.count'", "must be a uint16, not string"},
        {"split.tensors.count uint32", bad_total_u32, "'split.tensors.count'", "must be an int32, not uint32"},
        {"split.tensors.count int64", bad_total_i64, "'split.tensors.count'", "must be an int32, not int64"},
        {"split.tensors.count array", bad_total_array, "'split.tensors.count'", "must be an int32, not array"},
        {"no = count", bad_no_is_count, "key #0 'split.no' at offset 24: shard 3 is not below 'split.count' 3", NULL},
        {"no > count", bad_no_past_count, "'split.no'", "shard 9 is not below 'split.count' 3"},
        {"count 0", bad_count_0, "key #2 'split.count' at offset ", ": 0 shards"},
        {"negative total", bad_total_negative, "key #1 'split.tensors.count' at offset ", ": -1 is negative"},
        {"INT32_MIN total", bad_total_min, "'split.tensors.count'", "-2147483648 is negative"},
        {"total below own", bad_total_below_own, "'split.tensors.count'",
         "1 tensors in all shards, but this shard alone holds 2"},
        {"only split.no", bad_only_no, "key #1 'split.no' at offset ",
         "a split GGUF's shard holds all of 'split.no', 'split.count' and 'split.tensors.count', but "
         "'split.tensors.count' is missing"},
        {"only split.count", bad_only_count, "'split.count'", "but 'split.tensors.count' is missing"},
        {"no split.tensors.count", bad_no_total, "but 'split.tensors.count' is missing", NULL},
        {"no split.no", bad_no_no, "but 'split.no' is missing", NULL},
};

START_TEST(test_split_bad) {
        const BadCase *c = &bad_cases[_i];
        Gguf *sentinel = (Gguf *) &bad_cases, *g = sentinel;
        TpError err = {0};
        Buf f = {0};
        Model m;

        model_init(&m, 3);
        c->build(&m);
        model_bytes(&m, &f, NULL);
        int r = read_bytes(f.p, f.n, &g, &err);
        ck_assert_msg(r == -EBADMSG, "%s: got %d (%s)", c->name, r, err.message);
        ck_assert_int_eq(err.code, -EBADMSG);
        ck_assert_msg(strstr(err.message, c->needle), "%s: message \"%s\" lacks \"%s\"", c->name, err.message,
                      c->needle);
        if (c->needle2)
                ck_assert_msg(strstr(err.message, c->needle2), "%s: message \"%s\" lacks \"%s\"", c->name, err.message,
                              c->needle2);
        ck_assert_ptr_eq(g, sentinel);
        model_done(&m);
        buf_done(&f);
}
END_TEST

/* ---- shard names -------------------------------------------------------- */

typedef struct NameCase {
        const char *name;
        size_t prefix_len;
        uint16_t no, count;
        const char *needle; /* NULL: valid */
} NameCase;

static const NameCase name_cases[] = {
        {"model-00001-of-00002.gguf", 5, 0, 2, NULL},
        {"model-00002-of-00002.gguf", 5, 1, 2, NULL},
        {"m-00001-of-00001.gguf", 1, 0, 1, NULL},
        {"Qwen2.5-7B-Instruct-Q4_K_M-00003-of-00004.gguf", 26, 2, 4, NULL},
        {"x-65535-of-65535.gguf", 1, 65534, 65535, NULL},
        {"a-00001-of-00002.gguf-00001-of-00003.gguf", 21, 0, 3, NULL}, /* the last suffix counts */
        {"-00001-of-00002-00001-of-00002.gguf", 15, 0, 2, NULL},
        {"..-00001-of-00002.gguf", 2, 0, 2, NULL}, /* a strange prefix, but a file name */
        {"-00001-of-00002.gguf", 0, 0, 0, "too short"},
        {"model.gguf", 0, 0, 0, "too short"},
        {"", 0, 0, 0, "too short"},
        {"model-00001-of-00002.GGUF", 0, 0, 0, "does not end in -NNNNN-of-NNNNN.gguf"},
        {"model-00001-of-00002.ggu", 0, 0, 0, "does not end in"},
        {"model-00001-of-00002.gguf.tmp", 0, 0, 0, "does not end in"},
        {"model-0001-of-00002.gguf", 0, 0, 0, "does not end in"},
        {"model-000001-of-00002.gguf", 0, 0, 0, "does not end in"},
        {"model-00001-of-000002.gguf", 0, 0, 0, "does not end in"},
        {"model-00001-of-0002.gguf", 0, 0, 0, "does not end in"},
        {"model-0000a-of-00002.gguf", 0, 0, 0, "does not end in"},
        {"model-+0001-of-00002.gguf", 0, 0, 0, "does not end in"},
        {"model- 0001-of-00002.gguf", 0, 0, 0, "does not end in"},
        {"model_00001-of-00002.gguf", 0, 0, 0, "does not end in"},
        {"model-00001_of-00002.gguf", 0, 0, 0, "does not end in"},
        {"model-00001-OF-00002.gguf", 0, 0, 0, "does not end in"},
        {"model-00000-of-00002.gguf", 0, 0, 0, "shard 00000 is not in 00001..00002"},
        {"model-00003-of-00002.gguf", 0, 0, 0, "shard 00003 is not in 00001..00002"},
        {"model-00001-of-00000.gguf", 0, 0, 0, "a count of 0 shards (split.count is 1..65535)"},
        {"model-00001-of-65536.gguf", 0, 0, 0, "a count of 65536 shards"},
        {"model-00001-of-99999.gguf", 0, 0, 0, "a count of 99999 shards"},
        {"dir/model-00001-of-00002.gguf", 0, 0, 0, "holds a '/'"},
        {"/model-00001-of-00002.gguf", 0, 0, 0, "holds a '/'"},
        {"model\x1b-00001-of-00002.gguf", 5 + 1, 0, 2, NULL},
};

START_TEST(test_name_parse) {
        const NameCase *c = &name_cases[_i];
        size_t len = 77;
        uint16_t no = 77, count = 77;
        TpError err = {0};

        int r = gguf_split_name_parse(c->name, &len, &no, &count, &err);
        if (!c->needle) {
                ck_assert_msg(r == 0, "'%s': %d (%s)", c->name, r, err.message);
                ck_assert_uint_eq(len, c->prefix_len);
                ck_assert_uint_eq(no, c->no);
                ck_assert_uint_eq(count, c->count);

                /* It formats back to itself. */
                char prefix[GGUF_SPLIT_NAME_MAX + 1], *s = NULL;
                memcpy(prefix, c->name, len);
                prefix[len] = '\0';
                ck_assert_int_eq(gguf_split_name_format(prefix, no, count, &s, &err), 0);
                ck_assert_str_eq(s, c->name);
                free(s);
                return;
        }
        ck_assert_msg(r == -EINVAL, "'%s': got %d, want -EINVAL", c->name, r);
        ck_assert_msg(strstr(err.message, c->needle), "'%s': message \"%s\" lacks \"%s\"", c->name, err.message,
                      c->needle);
        ck_assert_uint_eq(len, 77); /* untouched */
        ck_assert_uint_eq(no, 77);
        ck_assert_uint_eq(count, 77);
}
END_TEST

START_TEST(test_name_parse_edges) {
        char name[GGUF_SPLIT_NAME_MAX + 2];
        size_t len;
        TpError err = {0};

        /* NULL outputs are allowed; a NULL name is an error. */
        ck_assert_int_eq(gguf_split_name_parse("m-00001-of-00002.gguf", NULL, NULL, NULL, NULL), 0);
        ck_assert_int_eq(gguf_split_name_parse(NULL, &len, NULL, NULL, &err), -EINVAL);

        /* GGUF_SPLIT_NAME_MAX bytes in all, and not one more. */
        memset(name, 'p', sizeof(name));
        strcpy(name + GGUF_SPLIT_NAME_MAX - GGUF_SPLIT_SUFFIX_LEN, "-00001-of-00002.gguf");
        ck_assert_uint_eq(strlen(name), GGUF_SPLIT_NAME_MAX);
        ck_assert_int_eq(gguf_split_name_parse(name, &len, NULL, NULL, &err), 0);
        ck_assert_uint_eq(len, GGUF_SPLIT_NAME_MAX - GGUF_SPLIT_SUFFIX_LEN);
        memset(name, 'p', sizeof(name));
        strcpy(name + GGUF_SPLIT_NAME_MAX + 1 - GGUF_SPLIT_SUFFIX_LEN, "-00001-of-00002.gguf");
        ck_assert_int_eq(gguf_split_name_parse(name, &len, NULL, NULL, &err), -EINVAL);
        ck_assert_msg(strstr(err.message, "256 bytes, over the cap of 255"), "%s", err.message);
}
END_TEST

START_TEST(test_name_format) {
        static const struct {
                const char *prefix;
                unsigned no, count;
                const char *want, *needle;
        } cases[] = {
                {"model", 0, 2, "model-00001-of-00002.gguf", NULL},
                {"model", 1, 2, "model-00002-of-00002.gguf", NULL},
                {"m", 0, 1, "m-00001-of-00001.gguf", NULL},
                {"m", 9, 10, "m-00010-of-00010.gguf", NULL},
                {"m", 65534, 65535, "m-65535-of-65535.gguf", NULL},
                {"m", 0, 0, NULL, "a split of 0 shards (split.count is 1..65535)"},
                {"m", 0, 65536, NULL, "a split of 65536 shards"},
                {"m", 0, 100000, NULL, "a split of 100000 shards"},
                {"m", 2, 2, NULL, "shard 2 of 2: shards count from 0"},
                {"m", 70000, 2, NULL, "shard 70000 of 2"},
                {"", 0, 2, NULL, "an empty shard name prefix"},
                {NULL, 0, 2, NULL, "an empty shard name prefix"},
                {"d/m", 0, 2, NULL, "shard name prefix 'd/m' holds a '/'"},
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                char *s = (char *) cases, *sentinel = s;
                TpError err = {0};
                int r = gguf_split_name_format(cases[i].prefix, cases[i].no, cases[i].count, &s, &err);
                if (cases[i].want) {
                        ck_assert_msg(r == 0, "case %zu: %d (%s)", i, r, err.message);
                        ck_assert_str_eq(s, cases[i].want);
                        free(s);
                        continue;
                }
                ck_assert_msg(r == -EINVAL, "case %zu: got %d", i, r);
                ck_assert_msg(strstr(err.message, cases[i].needle), "case %zu: \"%s\" lacks \"%s\"", i, err.message,
                              cases[i].needle);
                ck_assert_ptr_eq(s, sentinel);
        }

        /* The longest prefix that fits, and one byte more. */
        char prefix[GGUF_SPLIT_NAME_MAX + 1], *s = NULL;
        TpError err = {0};
        memset(prefix, 'p', sizeof(prefix));
        prefix[GGUF_SPLIT_NAME_MAX - GGUF_SPLIT_SUFFIX_LEN] = '\0';
        ck_assert_int_eq(gguf_split_name_format(prefix, 0, 2, &s, &err), 0);
        ck_assert_uint_eq(strlen(s), GGUF_SPLIT_NAME_MAX);
        free(s);
        prefix[GGUF_SPLIT_NAME_MAX - GGUF_SPLIT_SUFFIX_LEN] = 'p';
        prefix[GGUF_SPLIT_NAME_MAX - GGUF_SPLIT_SUFFIX_LEN + 1] = '\0';
        ck_assert_int_eq(gguf_split_name_format(prefix, 0, 2, &s, &err), -EINVAL);
        ck_assert_msg(strstr(err.message, "236 bytes, over the cap of 235"), "%s", err.message);
}
END_TEST

/* Every (no, count) a split can have formats to a name that parses back to it (a sample of the counts). */
START_TEST(test_name_round_trip) {
        static const unsigned counts[] = {1, 2, 3, 9, 10, 99, 100, 999, 1000, 9999, 10000, 65534, 65535};

        for (size_t c = 0; c < ELEMENTSOF(counts); c++)
                for (unsigned no = 0; no < counts[c]; no += no < 20 ? 1 : 997) {
                        char *s = NULL;
                        size_t len;
                        uint16_t n, k;
                        ck_assert_int_eq(gguf_split_name_format("model", no, counts[c], &s, NULL), 0);
                        ck_assert_int_eq(gguf_split_name_parse(s, &len, &n, &k, NULL), 0);
                        ck_assert_uint_eq(len, 5);
                        ck_assert_uint_eq(n, no);
                        ck_assert_uint_eq(k, counts[c]);
                        free(s);
                }
}
END_TEST

static Suite *gguf_split_suite(void) {
        Suite *s = suite_create("gguf_split");
        TCase *tc = tcase_create("keys");
        tcase_add_loop_test(tc, test_split_good, 0, (int) ELEMENTSOF(good_cases));
        tcase_add_loop_test(tc, test_split_bad, 0, (int) ELEMENTSOF(bad_cases));
        suite_add_tcase(s, tc);
        tc = tcase_create("names");
        tcase_add_loop_test(tc, test_name_parse, 0, (int) ELEMENTSOF(name_cases));
        tcase_add_test(tc, test_name_parse_edges);
        tcase_add_test(tc, test_name_format);
        tcase_add_test(tc, test_name_round_trip);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(gguf_split_suite)
