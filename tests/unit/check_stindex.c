/* SPDX-License-Identifier: MIT */
/* common/artifact/stindex.c: sharded safetensors indexes (model.safetensors.index.json), valid and malformed. */

#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "check-main.h"
#include "safetensors.h"
#include "stindex.h"
#include "test-buf.h"

static int parse_str(const char *json, Stindex **ret, TpError *err) {
        return stindex_parse(json, strlen(json), ret, err);
}

/* ---- valid -------------------------------------------------------------- */

START_TEST(test_typical) {
        static const char json[] =
                "{\n"
                "  \"metadata\": {\"total_size\": 16060522496, \"total_parameters\": 8030261248},\n"
                "  \"weight_map\": {\n"
                "    \"lm_head.weight\": \"model-00002-of-00002.safetensors\",\n"
                "    \"model.embed_tokens.weight\": \"model-00001-of-00002.safetensors\",\n"
                "    \"model.layers.0.mlp.down_proj.weight\": \"model-00001-of-00002.safetensors\",\n"
                "    \"model.norm.weight\": \"model-00002-of-00002.safetensors\"\n"
                "  }\n"
                "}\n";
        _cleanup_(stindex_freep) Stindex *s = NULL;
        TpError err = {0};

        ck_assert_msg(parse_str(json, &s, &err) == 0, "%s", err.message);
        ck_assert(s->has_total_size);
        ck_assert_uint_eq(s->total_size, UINT64_C(16060522496));
        ck_assert_uint_eq(s->n_shards, 2);
        ck_assert_str_eq(s->shards[0], "model-00001-of-00002.safetensors");
        ck_assert_str_eq(s->shards[1], "model-00002-of-00002.safetensors");
        ck_assert_uint_eq(s->n_tensors, 4);
        static const struct {
                const char *name;
                uint32_t shard;
        } want[] = {
                {"lm_head.weight", 1},
                {"model.embed_tokens.weight", 0},
                {"model.layers.0.mlp.down_proj.weight", 0},
                {"model.norm.weight", 1},
        };
        for (size_t i = 0; i < ELEMENTSOF(want); i++) {
                ck_assert_str_eq(s->tensors[i].name, want[i].name); /* sorted by name */
                ck_assert_uint_eq(s->tensors[i].shard, want[i].shard);
                ck_assert_ptr_eq(stindex_find(s, want[i].name), &s->tensors[i]);
        }
        ck_assert_ptr_null(stindex_find(s, "model.layers.1.mlp.down_proj.weight"));
        ck_assert_ptr_null(stindex_find(s, ""));
        ck_assert_ptr_null(stindex_find(s, NULL));
        ck_assert_ptr_null(stindex_find(NULL, "lm_head.weight"));
        ck_assert_int_eq(stindex_find_shard(s, "model-00002-of-00002.safetensors"), 1);
        ck_assert_int_eq(stindex_find_shard(s, "model-00001-of-00002.safetensors"), 0);
        ck_assert_int_eq(stindex_find_shard(s, "model-00003-of-00002.safetensors"), -ENOENT);
        ck_assert_int_eq(stindex_find_shard(s, NULL), -ENOENT);
        ck_assert_int_eq(stindex_find_shard(NULL, "x"), -ENOENT);
}
END_TEST

typedef struct GoodCase {
        const char *json;
        size_t n_tensors, n_shards;
        bool has_total_size;
        uint64_t total_size;
} GoodCase;

static const GoodCase good_cases[] = {
        {"{\"weight_map\":{\"a\":\"s.safetensors\"}}", 1, 1, false, 0},
        {"{\"metadata\":{},\"weight_map\":{\"a\":\"s\"}}", 1, 1, false, 0},
        {"{\"metadata\":{\"format\":\"pt\",\"x\":[1,{}]},\"weight_map\":{\"a\":\"s\"}}", 1, 1, false, 0},
        {"{\"metadata\":{\"total_size\":0},\"weight_map\":{\"a\":\"s\"}}", 1, 1, true, 0},
        {"{\"metadata\":{\"total_size\":1.6e10},\"weight_map\":{\"a\":\"s\"}}", 1, 1, true, UINT64_C(16000000000)},
        {"{\"metadata\":{\"total_size\":4.0},\"weight_map\":{\"a\":\"s\"}}", 1, 1, true, 4},
        {"{\"metadata\":{\"total_size\":9223372036854775807},\"weight_map\":{\"a\":\"s\"}}", 1, 1, true,
         UINT64_C(9223372036854775807)},
        /* Unknown top-level keys are ignored, before and after. */
        {"{\"format\":2,\"weight_map\":{\"a\":\"s\",\"b\":\"t\",\"c\":\"s\"},\"zzz\":null}", 3, 2, false, 0},
        /* Plain file names may hold spaces, backslashes, dots, UTF-8. */
        {"{\"weight_map\":{\"a\":\"a b\\\\c.safetensors\",\"b\":\"...\",\"c\":\".hidden\",\"d\":\"\\u00e9.st\"}}", 4, 4,
         false, 0},
        /* Tensor names are any nonempty strings. */
        {"{\"weight_map\":{\"\\u00e9\":\"s\",\"a/b\":\"s\",\"..\":\"s\",\" \":\"s\"}}", 4, 1, false, 0},
        {" \n\t{ \"weight_map\" : { \"a\" : \"s\" } } \n", 1, 1, false, 0},
};

START_TEST(test_good) {
        const GoodCase *c = &good_cases[_i];
        _cleanup_(stindex_freep) Stindex *s = NULL;
        TpError err = {0};

        ck_assert_msg(parse_str(c->json, &s, &err) == 0, "case %d: %s", _i, err.message);
        ck_assert_uint_eq(s->n_tensors, c->n_tensors);
        ck_assert_uint_eq(s->n_shards, c->n_shards);
        ck_assert(s->has_total_size == c->has_total_size);
        ck_assert_uint_eq(s->total_size, c->total_size);
        for (size_t i = 0; i < s->n_shards; i++)
                ck_assert_int_eq(stindex_find_shard(s, s->shards[i]), (int) i);
        for (size_t i = 1; i < s->n_shards; i++)
                ck_assert_int_lt(strcmp(s->shards[i - 1], s->shards[i]), 0);
        for (size_t i = 0; i < s->n_tensors; i++) {
                ck_assert_uint_lt(s->tensors[i].shard, s->n_shards);
                ck_assert_ptr_eq(stindex_find(s, s->tensors[i].name), &s->tensors[i]);
        }
}
END_TEST

/* Shard names of exactly the cap; many tensors over many shards, each found in its own. */
START_TEST(test_many) {
        Buf b = {0};
        char name[STINDEX_SHARD_NAME_MAX + 1], line[STINDEX_SHARD_NAME_MAX + 64];
        _cleanup_(stindex_freep) Stindex *s = NULL;
        TpError err = {0};
        const unsigned n = 5000, shards = 37;

        memset(name, 'x', STINDEX_SHARD_NAME_MAX - 5);
        name[STINDEX_SHARD_NAME_MAX - 5] = '\0';
        put(&b, "{\"weight_map\":{", 15);
        for (unsigned i = 0; i < n; i++) {
                /* Shard (i * 7) % 37, named so that its sorted position is its number. */
                int k = snprintf(line, sizeof(line), "%s\"t.%u\":\"%s%05u\"", i ? "," : "", (i * 7919) % n, name,
                                 (i * 7) % shards);
                put(&b, line, (size_t) k);
        }
        put(&b, "}}", 2);
        ck_assert_msg(stindex_parse((const char *) b.p, b.n, &s, &err) == 0, "%s", err.message);
        ck_assert_uint_eq(s->n_tensors, n);
        ck_assert_uint_eq(s->n_shards, shards);
        for (unsigned i = 0; i < n; i++) {
                char t[32];
                snprintf(t, sizeof(t), "t.%u", (i * 7919) % n);
                const StindexTensor *e = stindex_find(s, t);
                ck_assert_ptr_nonnull(e);
                ck_assert_uint_eq(e->shard, (i * 7) % shards);
                ck_assert_uint_eq(strlen(s->shards[e->shard]), STINDEX_SHARD_NAME_MAX);
        }
        free(b.p);
}
END_TEST

/* ---- malformed ---------------------------------------------------------- */

typedef struct BadCase {
        const char *json;
        const char *needle;
} BadCase;

static const BadCase bad_cases[] = {
        {"", "not valid JSON: line 1, column 0"},
        {"{", "not valid JSON"},
        {"{\"weight_map\":{\"a\":\"s\"}", "not valid JSON"},
        {"{\"weight_map\":{\"a\":\"s\"}} x", "not valid JSON"},
        {"\xef\xbb\xbf{\"weight_map\":{\"a\":\"s\"}}", "not valid JSON"},
        {"{\"weight_map\":{\"a\":\"\xff\"}}", "not valid JSON"},
        {"[]", "the index is a list, not an object"},
        {"\"weight_map\"", "not valid JSON"},
        {"{}", "no \"weight_map\""},
        {"{\"metadata\":{}}", "no \"weight_map\""},
        {"{\"weight_map\":{\"a\":\"s\"},\"weight_map\":{\"b\":\"s\"}}", "duplicate object key"},
        {"{\"weight_map\":{\"a\":\"s\",\"a\":\"t\"}}", "duplicate object key"},
        {"{\"metadata\":{\"total_size\":1,\"total_size\":2},\"weight_map\":{\"a\":\"s\"}}", "duplicate object key"},
        {"{\"weight_map\":{\"a\\u0000b\":\"s\"}}", "not valid JSON"},
        {"{\"weight_map\":{\"a\":\"s\\u0000.safetensors\"}}", "not valid JSON"},
        {"{\"weight_map\":[]}", "\"weight_map\" is a list, not an object"},
        {"{\"weight_map\":null}", "\"weight_map\" is null, not an object"},
        {"{\"weight_map\":\"model.safetensors\"}", "\"weight_map\" is a string, not an object"},
        {"{\"weight_map\":{}}", "\"weight_map\" is empty"},
        {"{\"weight_map\":{\"a\":1}}", "weight_map['a']: a number, not a shard's file name"},
        {"{\"weight_map\":{\"a\":null}}", "weight_map['a']: null, not a shard's file name"},
        {"{\"weight_map\":{\"a\":[\"s\"]}}", "weight_map['a']: a list, not a shard's file name"},
        {"{\"weight_map\":{\"a\":{\"s\":1}}}", "weight_map['a']: an object, not a shard's file name"},
        {"{\"weight_map\":{\"a\":true}}", "weight_map['a']: a boolean"},
        {"{\"weight_map\":{\"x\":\"../a\"}}",
         "weight_map['x']: shard name '../a' is not a plain file name (it holds a '/')"},
        {"{\"weight_map\":{\"x\":\"/etc/passwd\"}}", "shard name '/etc/passwd' is not a plain file name"},
        {"{\"weight_map\":{\"x\":\"d/\"}}", "shard name 'd/' is not a plain file name (it holds a '/')"},
        {"{\"weight_map\":{\"x\":\"\"}}", "weight_map['x']: shard name '' is not a plain file name (it is empty)"},
        {"{\"weight_map\":{\"x\":\".\"}}", "shard name '.' is not a plain file name (it names a directory)"},
        {"{\"weight_map\":{\"x\":\"..\"}}", "shard name '..' is not a plain file name (it names a directory)"},
        {"{\"weight_map\":{\"a\":\"s\",\"y\":\"a\\/b\"}}", "weight_map['y']: shard name 'a/b'"},
        {"{\"weight_map\":{\"\":\"s\"}}", "weight_map: a tensor with an empty name"},
        {"{\"weight_map\":{\"__metadata__\":\"s\"}}",
         "weight_map['__metadata__']: no safetensors file holds a tensor of that name"},
        {"{\"weight_map\":{\"\\u001b[31m\":\"x/y\"}}", "weight_map['\\x1b[31m']: shard name 'x/y'"},
        {"{\"metadata\":[],\"weight_map\":{\"a\":\"s\"}}", "\"metadata\" is a list, not an object"},
        {"{\"metadata\":null,\"weight_map\":{\"a\":\"s\"}}", "\"metadata\" is null, not an object"},
        {"{\"metadata\":\"x\",\"weight_map\":{\"a\":\"s\"}}", "\"metadata\" is a string, not an object"},
        {"{\"metadata\":{\"total_size\":-1},\"weight_map\":{\"a\":\"s\"}}", "metadata.total_size: -1 is negative"},
        {"{\"metadata\":{\"total_size\":\"16\"},\"weight_map\":{\"a\":\"s\"}}",
         "metadata.total_size is a string, not a number"},
        {"{\"metadata\":{\"total_size\":null},\"weight_map\":{\"a\":\"s\"}}",
         "metadata.total_size is null, not a number"},
        {"{\"metadata\":{\"total_size\":1.5},\"weight_map\":{\"a\":\"s\"}}",
         "metadata.total_size: 1.5 is not a whole number of bytes below 2^63"},
        {"{\"metadata\":{\"total_size\":-2.0},\"weight_map\":{\"a\":\"s\"}}", "-2 is not a whole number"},
        {"{\"metadata\":{\"total_size\":9.3e18},\"weight_map\":{\"a\":\"s\"}}", "9.3e+18 is not a whole number"},
        {"{\"metadata\":{\"total_size\":1e400},\"weight_map\":{\"a\":\"s\"}}", "not valid JSON"},
        {"{\"metadata\":{\"total_size\":99999999999999999999},\"weight_map\":{\"a\":\"s\"}}", "not valid JSON"},
        /* metadata is checked before weight_map. */
        {"{\"weight_map\":{},\"metadata\":{\"total_size\":-1}}", "metadata.total_size: -1 is negative"},
};

START_TEST(test_bad) {
        const BadCase *c = &bad_cases[_i];
        Stindex *sentinel = (Stindex *) &bad_cases, *s = sentinel;
        TpError err = {0};

        int r = parse_str(c->json, &s, &err);
        ck_assert_msg(r == -EBADMSG, "case %d: got %d (%s)", _i, r, err.message);
        ck_assert_int_eq(err.code, -EBADMSG);
        ck_assert_msg(strstr(err.message, c->needle), "case %d: message \"%s\" lacks \"%s\"", _i, err.message,
                      c->needle);
        ck_assert_ptr_eq(s, sentinel);
        for (const char *p = err.message; *p; p++) /* printable, whatever the input */
                ck_assert_msg((unsigned char) *p >= 0x20 && (unsigned char) *p < 0x7f, "case %d: \"%s\"", _i,
                              err.message);
}
END_TEST

/* Names one byte over their caps. */
START_TEST(test_name_caps) {
        Buf b = {0};
        char big[SAFETENSORS_NAME_MAX + 2];
        Stindex *s = NULL;
        TpError err = {0};

        memset(big, 'n', sizeof(big) - 1);
        big[STINDEX_SHARD_NAME_MAX + 1] = '\0';
        put(&b, "{\"weight_map\":{\"a\":\"", 20);
        put(&b, big, strlen(big));
        put(&b, "\"}}", 3);
        ck_assert_int_eq(stindex_parse((const char *) b.p, b.n, &s, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "weight_map['a']: a shard name of 256 bytes, over the cap of 255"), "%s",
                      err.message);

        b.n = 0;
        memset(big, 'n', sizeof(big) - 1);
        big[SAFETENSORS_NAME_MAX + 1] = '\0';
        put(&b, "{\"weight_map\":{\"", 16);
        put(&b, big, strlen(big));
        put(&b, "\":\"s\"}}", 7);
        ck_assert_int_eq(stindex_parse((const char *) b.p, b.n, &s, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "a tensor name of 4097 bytes, over the cap of 4096"), "%s", err.message);

        /* At the caps: accepted. */
        b.n = 0;
        big[SAFETENSORS_NAME_MAX] = '\0';
        put(&b, "{\"weight_map\":{\"", 16);
        put(&b, big, strlen(big));
        put(&b, "\":\"", 3);
        put(&b, big, STINDEX_SHARD_NAME_MAX);
        put(&b, "\"}}", 3);
        ck_assert_msg(stindex_parse((const char *) b.p, b.n, &s, &err) == 0, "%s", err.message);
        ck_assert_uint_eq(strlen(s->tensors[0].name), SAFETENSORS_NAME_MAX);
        ck_assert_uint_eq(strlen(s->shards[0]), STINDEX_SHARD_NAME_MAX);
        s = stindex_free(s);
        free(b.p);
}
END_TEST

/* The value and tensor caps, each hit by one more than allowed. */
START_TEST(test_count_caps) {
        Buf b = {0};
        Stindex *s = NULL;
        TpError err = {0};
        char line[48];

        /* 2^21 + 1 commas in a list inside metadata. */
        put(&b, "{\"metadata\":{\"x\":[0", 19);
        for (unsigned i = 0; i < STINDEX_TOKENS_MAX; i++)
                put(&b, ",0", 2);
        put(&b, "]},\"weight_map\":{\"a\":\"s\"}}", 26);
        ck_assert_int_eq(stindex_parse((const char *) b.p, b.n, &s, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "more than 2097152 values"), "%s", err.message);

        /* Separators inside strings are not values. */
        b.n = 0;
        put(&b, "{\"metadata\":{\"x\":\"", 18);
        for (unsigned i = 0; i <= STINDEX_TOKENS_MAX; i++)
                put(&b, ",:{[\\\"", 6);
        put(&b, "\"},\"weight_map\":{\"a\":\"s\"}}", 26);
        ck_assert_msg(stindex_parse((const char *) b.p, b.n, &s, &err) == 0, "%s", err.message);
        s = stindex_free(s);

        /* STINDEX_TENSORS_MAX + 1 entries. */
        b.n = 0;
        put(&b, "{\"weight_map\":{", 15);
        for (unsigned i = 0; i <= STINDEX_TENSORS_MAX; i++) {
                int k = snprintf(line, sizeof(line), "%s\"%u\":\"s\"", i ? "," : "", i);
                put(&b, line, (size_t) k);
        }
        put(&b, "}}", 2);
        ck_assert_int_eq(stindex_parse((const char *) b.p, b.n, &s, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "\"weight_map\" has 524289 tensors, over the cap of 524288"), "%s",
                      err.message);
        free(b.p);
}
END_TEST

/* stindex_read: the same as stindex_parse from a file; the file-size cap; not a regular file. */
START_TEST(test_read) {
        static const char json[] = "{\"weight_map\":{\"b\":\"s2\",\"a\":\"s1\"}}";
        Stindex *s = NULL;
        TpError err = {0};

        int fd = memfd_with(json, strlen(json));
        ck_assert_msg(stindex_read(fd, &s, &err) == 0, "%s", err.message);
        ck_assert_uint_eq(s->n_tensors, 2);
        ck_assert_str_eq(s->tensors[0].name, "a");
        ck_assert_str_eq(s->shards[s->tensors[0].shard], "s1");
        ck_assert_int_eq(lseek(fd, 0, SEEK_CUR), (off_t) strlen(json)); /* the offset is not the reader's */
        s = stindex_free(s);

        ck_assert_int_eq(ftruncate(fd, STINDEX_FILE_MAX + 1), 0); /* sparse */
        ck_assert_int_eq(stindex_read(fd, &s, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "67108865 bytes, over the cap of 67108864"), "%s", err.message);
        ck_assert_int_eq(stindex_parse(json, STINDEX_FILE_MAX + 1, &s, &err), -EBADMSG); /* length checked first */
        ck_assert_ptr_null(s);
        close(fd);

        fd = memfd_with("", 0);
        ck_assert_int_eq(stindex_read(fd, &s, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "not valid JSON"), "%s", err.message);
        close(fd);

        int p[2];
        ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
        ck_assert_int_eq(stindex_read(p[0], &s, &err), -EINVAL);
        ck_assert_str_eq(err.message, "not a regular file");
        close(p[0]);
        close(p[1]);
        ck_assert_int_eq(stindex_read(-1, &s, &err), -EBADF);
        ck_assert_ptr_null(s);
        ck_assert_ptr_null(stindex_free(NULL));
}
END_TEST

static Suite *stindex_suite(void) {
        Suite *s = suite_create("stindex");
        TCase *tc = tcase_create("stindex");
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_typical);
        tcase_add_loop_test(tc, test_good, 0, (int) ELEMENTSOF(good_cases));
        tcase_add_test(tc, test_many);
        tcase_add_loop_test(tc, test_bad, 0, (int) ELEMENTSOF(bad_cases));
        tcase_add_test(tc, test_name_caps);
        tcase_add_test(tc, test_count_caps);
        tcase_add_test(tc, test_read);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(stindex_suite)
