/* SPDX-License-Identifier: MIT */
/* common/text/yaml-doc.c: the tree, typed getters, caps and refusals. */

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "check-main.h"
#include "yaml-doc.h"

static YamlNode *parse_ok(const char *text) {
        YamlNode *n = NULL;
        TpError err = {};
        int r = yaml_doc_parse(text, strlen(text), 1 << 20, "doc", &n, &err);
        ck_assert_msg(r == 0, "parse failed: %s", err.message);
        return n;
}

static void parse_bad(const char *text, const char *want_in_message) {
        YamlNode *n = NULL;
        TpError err = {};
        int r = yaml_doc_parse(text, strlen(text), 1 << 20, "doc", &n, &err);
        ck_assert_msg(r < 0, "'%s' parsed", text);
        ck_assert_ptr_null(n);
        ck_assert_msg(strstr(err.message, want_in_message), "message '%s' lacks '%s'", err.message, want_in_message);
}

START_TEST(test_tree) {
        YamlNode *n = parse_ok("a: 1\nb:\n  c: [x, y]\n  d: \"quoted\"\n");
        const YamlNode *b, *c;
        const char *s;
        uint64_t v;

        ck_assert_int_eq(yaml_get_u64(n, "a", true, "doc", &v, NULL), 1);
        ck_assert_uint_eq(v, 1);
        ck_assert_int_eq(yaml_get_map(n, "b", true, "doc", &b, NULL), 1);
        ck_assert_int_eq(yaml_get_seq(b, "c", true, "doc", &c, NULL), 1);
        ck_assert_uint_eq(c->n, 2);
        ck_assert_str_eq(c->items[1]->scalar, "y");
        ck_assert_int_eq(yaml_get_str(b, "d", true, "doc", &s, NULL), 1);
        ck_assert_str_eq(s, "quoted");
        ck_assert_uint_eq(b->line, 3);
        ck_assert_int_eq(yaml_get_str(n, "missing", false, "doc", &s, NULL), 0);
        yaml_node_free(n);
}
END_TEST

START_TEST(test_typed_errors) {
        YamlNode *n = parse_ok("neg: -3\nbig: 18446744073709551616\nlead: 007\nq: \"5\"\nhex: abc\nt: 2026-02-30T00:00:00Z\n"
                               "m: {x: 1}\n");
        TpError err = {};
        uint64_t v = 99;
        uint8_t d[32];
        int64_t t;
        const char *s;

        ck_assert_int_eq(yaml_get_u64(n, "neg", true, "doc", &v, &err), -EBADMSG);
        ck_assert_ptr_nonnull(strstr(err.message, "line 1: 'neg': expected an unsigned integer, found '-3'"));
        ck_assert_int_eq(yaml_get_u64(n, "big", true, "doc", &v, &err), -EBADMSG);
        ck_assert_int_eq(yaml_get_u64(n, "lead", true, "doc", &v, &err), -EBADMSG);
        ck_assert_int_eq(yaml_get_u64(n, "q", true, "doc", &v, &err), -EBADMSG);  /* quoted: a string */
        ck_assert_uint_eq(v, 99);
        ck_assert_int_eq(yaml_get_sha256(n, "hex", true, "doc", d, &err), -EBADMSG);
        ck_assert_int_eq(yaml_get_time(n, "t", true, "doc", &t, &err), -EBADMSG);
        ck_assert_int_eq(yaml_get_str(n, "m", true, "doc", &s, &err), -EBADMSG);
        ck_assert_ptr_nonnull(strstr(err.message, "expected a scalar, found a mapping"));
        ck_assert_int_eq(yaml_get_u64(n, "absent", true, "doc", &v, &err), -EBADMSG);
        ck_assert_ptr_nonnull(strstr(err.message, "missing 'absent'"));
        yaml_node_free(n);
}
END_TEST

START_TEST(test_check_keys) {
        static const char *const allowed[] = { "a", "b", NULL };
        YamlNode *n = parse_ok("a: 1\nb: 2\n");
        TpError err = {};

        ck_assert_int_eq(yaml_check_keys(n, allowed, "doc", &err), 0);
        yaml_node_free(n);
        n = parse_ok("a: 1\nc: 2\n");
        ck_assert_int_eq(yaml_check_keys(n, allowed, "doc", &err), -EBADMSG);
        ck_assert_ptr_nonnull(strstr(err.message, "line 2: unknown key 'c'"));
        yaml_node_free(n);
        n = parse_ok("a: 1\na: 2\n");
        ck_assert_int_eq(yaml_check_keys(n, allowed, "doc", &err), -EBADMSG);
        ck_assert_ptr_nonnull(strstr(err.message, "duplicate key 'a'"));
        yaml_node_free(n);
}
END_TEST

START_TEST(test_refusals) {
        parse_bad("a: &x 1\nb: *x\n", "anchors are not allowed");
        parse_bad("a: [1, 2\n", "line");
        parse_bad("a: 1\n---\nb: 2\n", "only one YAML document");
        parse_bad("", "empty document");
        parse_bad("? [a, b]\n: c\n", "mapping keys must be plain scalars");

        /* Nesting bomb. */
        char deep[200];
        memset(deep, '[', 100);
        memset(deep + 100, ']', 99);
        deep[199] = '\0';
        parse_bad(deep, "nesting deeper than");

        /* Size cap. */
        YamlNode *n = NULL;
        TpError err = {};
        ck_assert_int_eq(yaml_doc_parse("a: 1\n", 5, 4, "doc", &n, &err), -EMSGSIZE);
}
END_TEST

START_TEST(test_parsers) {
        uint64_t v;
        int64_t t;
        uint8_t d[32];
        char buf[21];

        ck_assert_int_eq(parse_u64("0", &v), 0);
        ck_assert_int_eq(parse_u64("18446744073709551615", &v), 0);
        ck_assert_uint_eq(v, UINT64_MAX);
        ck_assert_int_eq(parse_u64("18446744073709551616", &v), -ERANGE);
        ck_assert_int_eq(parse_u64("", &v), -EINVAL);
        ck_assert_int_eq(parse_u64("1 ", &v), -EINVAL);
        ck_assert_int_eq(parse_time_utc("2026-11-29T12:00:00Z", &t), 0);
        format_time_utc(t, buf);
        ck_assert_str_eq(buf, "2026-11-29T12:00:00Z");
        ck_assert_int_eq(parse_time_utc("2026-11-29 12:00:00", &t), -EINVAL);
        ck_assert_int_eq(parse_sha256_hex("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", d), 0);
        ck_assert_uint_eq(d[0], 0xe3);
        ck_assert_int_eq(parse_sha256_hex("E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855", d), -EINVAL);
}
END_TEST

/* Each cap, just under and just over, with a message that names it (DESIGN.md, invariant 6). */
START_TEST(test_caps) {
        YamlNode *n = NULL;
        TpError err = {};
        char *text;
        size_t len;

        /* YAML_DOC_MAX_SCALAR: "a: " and the scalar. */
        text = malloc(3 + YAML_DOC_MAX_SCALAR + 2);
        ck_assert_ptr_nonnull(text);
        for (size_t extra = 0; extra < 2; extra++) {
                memcpy(text, "a: ", 3);
                memset(text + 3, 'x', YAML_DOC_MAX_SCALAR + extra);
                len = 3 + YAML_DOC_MAX_SCALAR + extra;
                int r = yaml_doc_parse(text, len, 1 << 20, "doc", &n, &err);
                if (extra == 0) {
                        ck_assert_msg(r == 0, "%s", err.message);
                        ck_assert_uint_eq(strlen(yaml_map_get(n, "a")->scalar), YAML_DOC_MAX_SCALAR);
                        n = yaml_node_free(n);
                } else {
                        ck_assert_int_eq(r, -EBADMSG);
                        ck_assert_ptr_null(n);
                        ck_assert_msg(strstr(err.message, "doc: line 1: scalar longer than 65536 bytes"), "%s",
                                      err.message);
                }
        }
        free(text);

        /* YAML_DOC_MAX_DEPTH: the root is level 0; 33 nested sequences reach level 32. */
        char deep[2 * (YAML_DOC_MAX_DEPTH + 2) + 1];
        for (size_t levels = YAML_DOC_MAX_DEPTH + 1; levels <= YAML_DOC_MAX_DEPTH + 2; levels++) {
                memset(deep, '[', levels);
                memset(deep + levels, ']', levels);
                int r = yaml_doc_parse(deep, 2 * levels, 1 << 20, "doc", &n, &err);
                if (levels == YAML_DOC_MAX_DEPTH + 1) {
                        ck_assert_msg(r == 0, "%zu levels: %s", levels, err.message);
                        n = yaml_node_free(n);
                } else {
                        ck_assert_int_eq(r, -EBADMSG);
                        ck_assert_msg(strstr(err.message, "nesting deeper than 32 levels"), "%s", err.message);
                }
        }

        /*
         * YAML_DOC_MAX_NODES: a flow sequence of N empty sequences is N + 1 nodes; one too many is
         * refused. (Empty sequences: the cheapest nodes to build, so the test stays quick under ASan.)
         */
        len = 2 + 3 * (size_t) YAML_DOC_MAX_NODES - 1;
        text = malloc(len);
        ck_assert_ptr_nonnull(text);
        text[0] = '[';
        for (size_t i = 0; i < YAML_DOC_MAX_NODES; i++)
                memcpy(text + 1 + 3 * i, "[],", 3);
        text[len - 1] = ']';
        ck_assert_int_eq(yaml_doc_parse(text, len, len, "doc", &n, &err), -EBADMSG);
        ck_assert_ptr_null(n);
        ck_assert_msg(strstr(err.message, "doc: line 1: more than 4194304 nodes"), "%s", err.message);
        free(text);

        /* The caller's byte cap. */
        ck_assert_int_eq(yaml_doc_parse("a: 1\n", 5, 4, "doc", &n, &err), -EMSGSIZE);
        ck_assert_msg(strstr(err.message, "doc: 5 bytes exceed the 4-byte cap"), "%s", err.message);
}
END_TEST

static Suite *yaml_doc_suite(void) {
        Suite *s = suite_create("yaml_doc");
        TCase *tc = tcase_create("yaml");

        tcase_add_test(tc, test_tree);
        tcase_add_test(tc, test_typed_errors);
        tcase_add_test(tc, test_check_keys);
        tcase_add_test(tc, test_refusals);
        tcase_add_test(tc, test_parsers);
        suite_add_tcase(s, tc);

        tc = tcase_create("caps");
        tcase_set_timeout(tc, 60);      /* 4 million nodes, under ASan on a slow box */
        tcase_add_test(tc, test_caps);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(yaml_doc_suite)
