/* SPDX-License-Identifier: MIT */
/*
 * The channel index (common/bundle/channel.c): written and read back, and every
 * rule a reader enforces on untrusted input: header fields, caps, order,
 * paths, names, the desired task. Signatures are check_sign.c's and the
 * integration test's (test-publish.sh); here a placeholder block stands in.
 */

#include <stdio.h>
#include <string.h>

#include "channel.h"
#include "check-main.h"
#include "le.h"

static const uint8_t fake_sig[] = "TPSIG1\0\0placeholder";

static Channel *make_channel(size_t n) {
        Channel *c = calloc(1, sizeof(Channel));
        ck_assert_ptr_nonnull(c);
        snprintf(c->name, sizeof(c->name), "stable");
        c->serial = 7;
        c->created = 1795000000;
        c->bundles = calloc(n, sizeof(ChannelBundle));
        c->n_bundles = n;
        for (size_t i = 0; i < n; i++) {
                ChannelBundle *b = &c->bundles[n - 1 - i];      /* reversed: the writer sorts */
                snprintf(b->task, sizeof(b->task), "task%zu", i % 3);
                b->version = i + 1;
                snprintf(b->path, sizeof(b->path), "b/%zu.tpb", i);
                b->size = 1000 + i;
                b->kind = ARTIFACT_GGUF;
                memset(b->sha256, (int) i, sizeof(b->sha256));
                memset(b->base_sha256, 0xab, sizeof(b->base_sha256));
        }
        return c;
}

/* Pack @text with the placeholder signature and parse it; returns the error code, message in @err. */
static int parse_text(const char *text, Channel **ret, TpError *err) {
        uint8_t *data;
        size_t len;

        ck_assert_int_eq(channel_pack(text, strlen(text), fake_sig, sizeof(fake_sig), &data, &len), 0);
        int r = channel_parse(data, len, "test.channel", ret, err);
        free(data);
        return r;
}

START_TEST(roundtrip) {
        _cleanup_(channel_freep) Channel *c = make_channel(5), *back = NULL;
        _cleanup_free_ char *text = NULL;
        TpError err = {};
        size_t len;

        snprintf(c->desired, sizeof(c->desired), "task1");
        c->expires = c->created + 86400;
        ck_assert_int_eq(channel_index_write(c, &text, &len, &err), 0);
        text = realloc(text, len + 1);
        text[len] = 0;
        ck_assert_int_eq(parse_text(text, &back, &err), 0);
        ck_assert_str_eq(back->name, "stable");
        ck_assert_uint_eq(back->serial, 7);
        ck_assert_int_eq(back->created, c->created);
        ck_assert_int_eq(back->expires, c->expires);
        ck_assert_str_eq(back->desired, "task1");
        ck_assert_uint_eq(back->n_bundles, 5);
        for (size_t i = 0; i < 5; i++) {
                ck_assert_str_eq(back->bundles[i].task, c->bundles[i].task);
                ck_assert_uint_eq(back->bundles[i].version, c->bundles[i].version);
                ck_assert_str_eq(back->bundles[i].path, c->bundles[i].path);
                ck_assert_uint_eq(back->bundles[i].size, c->bundles[i].size);
                ck_assert_mem_eq(back->bundles[i].sha256, c->bundles[i].sha256, 32);
        }
        /* sorted by task, then version; the newest of a task is found */
        ck_assert_str_eq(back->bundles[0].task, "task0");
        ck_assert_uint_eq(channel_find(back, "task0")->version, 4);
        ck_assert_ptr_null(channel_find(back, "nosuch"));
        ck_assert_uint_eq(back->index_len, len);
        ck_assert_mem_eq(back->index_text, text, len);
}
END_TEST

START_TEST(writer_refusals) {
        _cleanup_(channel_freep) Channel *c = make_channel(2);
        char *text = NULL;
        TpError err = {};
        size_t len;

        snprintf(c->desired, sizeof(c->desired), "nosuch");
        ck_assert_int_eq(channel_index_write(c, &text, &len, &err), -EINVAL);
        ck_assert_msg(strstr(err.message, "'nosuch' has no bundle"), "%s", err.message);
        c->desired[0] = 0;
        c->bundles[1] = c->bundles[0];
        ck_assert_int_eq(channel_index_write(c, &text, &len, &err), -EINVAL);
        ck_assert_msg(strstr(err.message, "listed twice"), "%s", err.message);
        snprintf(c->name, sizeof(c->name), "Bad Name");
        ck_assert_int_eq(channel_index_write(c, &text, &len, &err), -EINVAL);
}
END_TEST

START_TEST(paths) {
        static const char *const good[] = { "a.tpb", "x/y/json-3.tpb", "A_b+c-1.tpb", "..a", "a..", NULL };
        static const char *const bad[] = { "", "/abs.tpb", "../x.tpb", "a/../b", "a//b", "a/", ".", "a/./b",
                                           "sp ace", "q?x", "h#x", "%2e%2e", "back\\slash", NULL };
        char longp[CHANNEL_PATH_MAX + 2];

        for (size_t i = 0; good[i]; i++)
                ck_assert_msg(channel_path_valid(good[i]), "%s", good[i]);
        for (size_t i = 0; bad[i]; i++)
                ck_assert_msg(!channel_path_valid(bad[i]), "'%s'", bad[i]);
        memset(longp, 'a', sizeof(longp) - 1);
        longp[sizeof(longp) - 1] = 0;
        ck_assert(!channel_path_valid(longp));
}
END_TEST

#define HEAD "format: 1\nchannel: stable\nserial: 3\ncreated: 2026-11-29T12:00:00Z\n"
#define SHA "0000000000000000000000000000000000000000000000000000000000000000"
#define BUNDLE(task, v, path) \
        "- {task: " task ", version: " v ", path: " path ", size: 100, sha256: " SHA ", kind: gguf, base_sha256: " \
        SHA ", base_layout: " SHA "}\n"

START_TEST(index_refusals) {
        static const struct {
                const char *text, *message;
        } cases[] = {
                { HEAD "bundles: []\nextra: 1\n", "unknown key" },
                { "format: 2\nchannel: s\nserial: 1\ncreated: 2026-11-29T12:00:00Z\nbundles: []\n", "format 2" },
                { HEAD, "'bundles'" },
                { HEAD "bundles:\n" BUNDLE("b", "1", "b.tpb") BUNDLE("a", "1", "a.tpb"), "out of order" },
                { HEAD "bundles:\n" BUNDLE("a", "1", "a.tpb") BUNDLE("a", "1", "a2.tpb"), "out of order or repeated" },
                { HEAD "bundles:\n" BUNDLE("a", "1", "../a.tpb"), "not a plain relative path" },
                { HEAD "bundles:\n" BUNDLE("A", "1", "a.tpb"), "invalid task name" },
                { HEAD "bundles:\n" BUNDLE("a", "-1", "a.tpb"), "unsigned integer" },
                { HEAD "desired: b\nbundles:\n" BUNDLE("a", "1", "a.tpb"), "desired task 'b' has no bundle" },
                { "format: 1\nchannel: ../x\nserial: 1\ncreated: 2026-11-29T12:00:00Z\nbundles: []\n",
                  "invalid channel name" },
                { HEAD "bundles:\n- {task: a, version: 1, path: a.tpb, size: 10, sha256: " SHA
                  ", kind: gguf, base_sha256: " SHA ", base_layout: " SHA "}\n",
                  "smaller than a bundle header" },
                { HEAD "bundles:\n- {task: a, version: 1, path: a.tpb, size: 100, sha256: " SHA
                  ", kind: zip, base_sha256: " SHA ", base_layout: " SHA "}\n",
                  "unknown kind" },
                { HEAD "bundles: [1]\n", "not a mapping" },
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                Channel *c = NULL;
                TpError err = {};
                ck_assert_msg(parse_text(cases[i].text, &c, &err) < 0, "case %zu parsed", i);
                ck_assert_msg(strstr(err.message, cases[i].message), "case %zu: '%s' lacks '%s'", i, err.message,
                              cases[i].message);
                ck_assert_msg(strstr(err.message, "test.channel"), "case %zu: the file is not named: %s", i, err.message);
                ck_assert_ptr_null(c);
        }
}
END_TEST

START_TEST(bundle_cap) {
        size_t n = CHANNEL_MAX_BUNDLES + 1, cap = n * 400 + 200, len;
        char *text = malloc(cap);
        Channel *c = NULL;
        TpError err = {};

        ck_assert_ptr_nonnull(text);
        len = (size_t) snprintf(text, cap, HEAD "bundles:\n");
        for (size_t i = 0; i < n; i++)
                len += (size_t) snprintf(text + len, cap - len, BUNDLE("a", "%zu", "a.tpb"), i + 1);
        ck_assert_int_eq(parse_text(text, &c, &err), -E2BIG);
        ck_assert_msg(strstr(err.message, "2049 bundles exceed the cap of 2048"), "%s", err.message);
        free(text);
}
END_TEST

START_TEST(header_refusals) {
        const char *text = HEAD "bundles: []\n";
        uint8_t *data;
        size_t len;
        Channel *c = NULL;
        TpError err = {};

        ck_assert_int_eq(channel_pack(text, strlen(text), fake_sig, sizeof(fake_sig), &data, &len), 0);
        ck_assert_int_eq(channel_parse(data, len, "t", &c, &err), 0);
        channel_free(c);
        c = NULL;
        ck_assert_int_eq(channel_parse(data, len - 1, "t", &c, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "truncated or padded"), "%s", err.message);
        ck_assert_int_eq(channel_parse(data, 10, "t", &c, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "shorter than a channel header"), "%s", err.message);
        data[40] = 1;
        ck_assert_int_eq(channel_parse(data, len, "t", &c, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "reserved byte 40"), "%s", err.message);
        data[40] = 0;
        put_le64(data + 24, 0);
        ck_assert_int_eq(channel_parse(data, len, "t", &c, &err), -EKEYREJECTED);
        ck_assert_msg(strstr(err.message, "unsigned"), "%s", err.message);
        put_le64(data + 24, sizeof(fake_sig));
        put_le64(data + 16, CHANNEL_MAX_INDEX + 1);
        ck_assert_int_eq(channel_parse(data, len, "t", &c, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "index size 1048577 is outside 1..1048576"), "%s", err.message);
        memcpy(data, "TPBUNDL", 8);
        ck_assert_int_eq(channel_parse(data, len, "t", &c, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "not a TaskPatch channel"), "%s", err.message);
        free(data);
}
END_TEST

static Suite *channel_suite(void) {
        Suite *s = suite_create("channel");
        TCase *tc = tcase_create("channel");
        tcase_add_test(tc, roundtrip);
        tcase_add_test(tc, writer_refusals);
        tcase_add_test(tc, paths);
        tcase_add_test(tc, index_refusals);
        tcase_add_test(tc, bundle_cap);
        tcase_add_test(tc, header_refusals);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(channel_suite)
