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
        c->format = CHANNEL_FORMAT_1;
        c->serial = 7;
        c->created = 1795000000;
        c->models = calloc(1, sizeof(ChannelModel));
        c->n_models = 1;
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

/*
 * Pack @text with the placeholder signature, the header's format the text's own ("format: 2"
 * first, after the writer's "---" or not; else 1), and parse it; returns the error code, message in @err.
 */
static int parse_text(const char *text, Channel **ret, TpError *err) {
        uint32_t format = strstr(text, "format: 2\n") == text || strstr(text, "---\nformat: 2\n") == text ?
                          CHANNEL_FORMAT : CHANNEL_FORMAT_1;
        uint8_t *data;
        size_t len;

        ck_assert_int_eq(channel_pack(format, text, strlen(text), fake_sig, sizeof(fake_sig), &data, &len), 0);
        int r = channel_parse(data, len, "test.channel", ret, err);
        free(data);
        return r;
}

/* @text is refused, the message holding @message and naming the file, nothing returned (case @i). */
static void expect_refused(const char *text, const char *message, size_t i) {
        Channel *c = NULL;
        TpError err = {};

        ck_assert_msg(parse_text(text, &c, &err) < 0, "case %zu parsed", i);
        ck_assert_msg(strstr(err.message, message), "case %zu: '%s' lacks '%s'", i, err.message, message);
        ck_assert_msg(strstr(err.message, "test.channel"), "case %zu: the file is not named: %s", i, err.message);
        ck_assert_ptr_null(c);
}

START_TEST(roundtrip) {
        _cleanup_(channel_freep) Channel *c = make_channel(5), *back = NULL;
        _cleanup_free_ char *text = NULL;
        TpError err = {};
        size_t len;

        snprintf(c->models[0].desired, sizeof(c->models[0].desired), "task1");
        c->expires = c->created + 86400;
        ck_assert_int_eq(channel_index_write(c, &text, &len, &err), 0);
        text = realloc(text, len + 1);
        text[len] = 0;
        ck_assert_int_eq(parse_text(text, &back, &err), 0);
        ck_assert_str_eq(back->name, "stable");
        ck_assert_uint_eq(back->serial, 7);
        ck_assert_int_eq(back->created, c->created);
        ck_assert_int_eq(back->expires, c->expires);
        ck_assert_uint_eq(back->format, CHANNEL_FORMAT_1);
        ck_assert_uint_eq(back->n_models, 1);
        ck_assert_str_eq(back->models[0].desired, "task1");
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
        ck_assert_uint_eq(channel_find(back, &back->models[0], "task0", NULL)->version, 4);
        ck_assert_ptr_null(channel_find(back, &back->models[0], "nosuch", NULL));
        ck_assert_ptr_eq(channel_model(back, ""), &back->models[0]);
        ck_assert_uint_eq(back->index_len, len);
        ck_assert_mem_eq(back->index_text, text, len);
}
END_TEST

START_TEST(writer_refusals) {
        _cleanup_(channel_freep) Channel *c = make_channel(2);
        char *text = NULL;
        TpError err = {};
        size_t len;

        snprintf(c->models[0].desired, sizeof(c->models[0].desired), "nosuch");
        ck_assert_int_eq(channel_index_write(c, &text, &len, &err), -EINVAL);
        ck_assert_msg(strstr(err.message, "'nosuch' has no bundle"), "%s", err.message);
        c->models[0].desired[0] = 0;
        c->models[0].rollout.set = true;
        ck_assert_int_eq(channel_index_write(c, &text, &len, &err), -EINVAL);
        ck_assert_msg(strstr(err.message, "format-1 channel has one unnamed model"), "%s", err.message);
        c->models[0].rollout.set = false;
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
                { HEAD "bundles:\n- {role: base, task: a, version: 1, path: a.tpb, size: 100, sha256: " SHA
                  ", kind: gguf, base_sha256: " SHA ", base_layout: " SHA "}\n", "unknown key 'role'" },
                { "format: 2\nchannel: s\nserial: 1\ncreated: 2026-11-29T12:00:00Z\nbundles: []\n",
                  "unknown key 'bundles'" },
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
                { HEAD "revocations: {version: 0, path: r, size: 100, sha256: " SHA "}\nbundles: []\n",
                  "revocations: version must be at least 1" },
                { HEAD "revocations: {version: 1, path: ../r, size: 100, sha256: " SHA "}\nbundles: []\n",
                  "revocations: path '../r' is not a plain relative path" },
                { HEAD "revocations: {version: 1, path: r, size: 10, sha256: " SHA "}\nbundles: []\n",
                  "revocations: size 10 is outside 64..1114176" },
                { HEAD "revocations: {version: 1, path: r, size: 100}\nbundles: []\n", "'sha256'" },
                { HEAD "revocations: {version: 1, path: r, size: 100, sha256: " SHA ", url: x}\nbundles: []\n",
                  "unknown key 'url'" },
                { HEAD "revocations: stable.revocations\nbundles: []\n", "'revocations'" },
                { HEAD "root: {version: 0, path: r, size: 100, sha256: " SHA "}\nbundles: []\n",
                  "root: version must be at least 1" },
                { HEAD "root: {version: 1, path: /r, size: 100, sha256: " SHA "}\nbundles: []\n",
                  "root: path '/r' is not a plain relative path" },
                { HEAD "root: {version: 1, path: r, size: 400000, sha256: " SHA "}\nbundles: []\n",
                  "root: size 400000 is outside 64..327744" },
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++)
                expect_refused(cases[i].text, cases[i].message, i);
}
END_TEST

/* The revocation list and the trust root a channel carries: written, read back, in either format. */
START_TEST(revocations) {
        for (uint32_t format = CHANNEL_FORMAT_1; format <= CHANNEL_FORMAT; format++) {
                _cleanup_(channel_freep) Channel *c = make_channel(2), *back = NULL;
                _cleanup_free_ char *text = NULL;
                TpError err = {};
                size_t len;

                c->format = format;
                if (format == CHANNEL_FORMAT)
                        snprintf(c->models[0].name, sizeof(c->models[0].name), "default");
                for (size_t i = 0; format == CHANNEL_FORMAT && i < c->n_bundles; i++)
                        snprintf(c->bundles[i].model, sizeof(c->bundles[i].model), "default");
                c->revocations = (ChannelTrustFile) { .set = true, .version = 7, .path = "stable.revocations",
                                                        .size = 1294 };
                memset(c->revocations.sha256, 0xab, SHA256_DIGEST_SIZE);
                c->root = (ChannelTrustFile) { .set = true, .version = 3, .path = "fleet.root", .size = 3317 };
                memset(c->root.sha256, 0xcd, SHA256_DIGEST_SIZE);
                ck_assert_msg(channel_index_write(c, &text, &len, &err) == 0, "%s", err.message);
                ck_assert_ptr_nonnull(memmem(text, len, "root: {version: 3, path: fleet.root, size: 3317",
                                             strlen("root: {version: 3, path: fleet.root, size: 3317")));
                ck_assert_ptr_nonnull(memmem(text, len, "revocations: {version: 7, path: stable.revocations, size: 1294",
                                             strlen("revocations: {version: 7, path: stable.revocations, size: 1294")));
                char *z = strndup(text, len);
                ck_assert_msg(parse_text(z, &back, &err) == 0, "format %u: %s", format, err.message);
                free(z);
                ck_assert(back->revocations.set);
                ck_assert(memcmp(&back->revocations, &c->revocations, sizeof(ChannelTrustFile)) == 0);
                ck_assert(memcmp(&back->root, &c->root, sizeof(ChannelTrustFile)) == 0);
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

        ck_assert_int_eq(channel_pack(CHANNEL_FORMAT_1, text, strlen(text), fake_sig, sizeof(fake_sig), &data, &len), 0);
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
        put_le64(data + 16, strlen(text));
        put_le32(data + 8, 2);          /* the header says 2, the index 1 */
        ck_assert_int_eq(channel_parse(data, len, "t", &c, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "format 1 differs from the header's 2"), "%s", err.message);
        put_le32(data + 8, 3);
        ck_assert_int_eq(channel_parse(data, len, "t", &c, &err), -EPROTONOSUPPORT);
        ck_assert_msg(strstr(err.message, "format 3 is not supported (this build reads 1 and 2)"), "%s", err.message);
        memcpy(data, "TPBUNDL", 8);
        ck_assert_int_eq(channel_parse(data, len, "t", &c, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "not a TaskPatch channel"), "%s", err.message);
        free(data);
}
END_TEST

/* ---- format 2: sections per model ---- */

#define HEAD2 "format: 2\nchannel: stable\nserial: 3\ncreated: 2026-11-29T12:00:00Z\n"
#define SHA2 "2222222222222222222222222222222222222222222222222222222222222222"
#define BUNDLE2(task, v, base) \
        "  - {task: " task ", version: " v ", path: " task v ".tpb, size: 100, sha256: " SHA ", kind: gguf, " \
        "base_sha256: " base ", base_layout: " SHA "}\n"

START_TEST(roundtrip2) {
        static const char text[] = HEAD2 "models:\n"
                "- model: det\n  desired: person\n  bundles:\n" BUNDLE2("person", "1", SHA)
                "- model: llm\n  base: " SHA2 "\n  desired: json\n  rollout: {percent: 5, seed: 4242}\n  bundles:\n"
                BUNDLE2("json", "3", SHA) BUNDLE2("json", "4", SHA2) BUNDLE2("shout", "1", SHA)
                "- model: wake\n  bundles:\n  - {role: base, task: base, version: 2, path: b.tpb, size: 100, sha256: "
                SHA ", kind: gguf, base_sha256: " SHA ", base_layout: " SHA ", target_sha256: " SHA2 "}\n";
        _cleanup_(channel_freep) Channel *c = NULL, *back = NULL;
        _cleanup_free_ char *out = NULL;
        TpError err = {};
        size_t len;

        ck_assert_msg(parse_text(text, &c, &err) == 0, "%s", err.message);
        ck_assert_uint_eq(c->format, CHANNEL_FORMAT);
        ck_assert_uint_eq(c->n_models, 3);
        ck_assert_uint_eq(c->n_bundles, 5);
        ck_assert_int_eq(c->bundles[4].role, MANIFEST_ROLE_BASE);
        ck_assert_uint_eq(c->bundles[4].target_sha256[0], 0x22);
        ck_assert_int_eq(c->bundles[0].role, MANIFEST_ROLE_TASK);
        /* A base bundle is no task: the desired task never finds it. */
        ck_assert_ptr_null(channel_find(c, channel_model(c, "wake"), "base", NULL));
        const ChannelModel *det = channel_model(c, "det"), *llm = channel_model(c, "llm");
        ck_assert(det && llm && channel_model(c, "wake") && !channel_model(c, "nosuch") && !channel_model(c, ""));
        ck_assert(!det->has_base && !det->rollout.set && det->n_bundles == 1);
        ck_assert(llm->has_base && llm->base_sha256[0] == 0x22);
        ck_assert(llm->rollout.set && llm->rollout.percent == 5 && llm->rollout.seed == 4242);
        ck_assert_uint_eq(llm->first, 1);
        ck_assert_uint_eq(llm->n_bundles, 3);
        ck_assert_str_eq(c->bundles[1].model, "llm");
        /* The desired task's bundle is the one for the section's base, whatever the device runs. */
        ck_assert_uint_eq(channel_desired(c, llm, c->bundles[0].base_sha256)->version, 4);
        ck_assert_uint_eq(channel_find(c, llm, "json", c->bundles[0].base_sha256)->version, 3);
        ck_assert_uint_eq(channel_desired(c, det, NULL)->version, 1);
        /* Written back, it reads the same. */
        ck_assert_int_eq(channel_index_write(c, &out, &len, &err), 0);
        out = realloc(out, len + 1);
        out[len] = 0;
        ck_assert_msg(parse_text(out, &back, &err) == 0, "%s\n%s", err.message, out);
        ck_assert_uint_eq(back->n_models, 3);
        ck_assert_uint_eq(back->n_bundles, 5);
        ck_assert_ptr_nonnull(strstr(out, "  - {role: base, task: base, version: 2,"));
        for (size_t i = 0; i < 3; i++)
                ck_assert_mem_eq(&back->models[i], &c->models[i], sizeof(ChannelModel));
        for (size_t i = 0; i < 5; i++)
                ck_assert_mem_eq(&back->bundles[i], &c->bundles[i], sizeof(ChannelBundle));
}
END_TEST

START_TEST(refusals2) {
        static const struct {
                const char *text, *message;
        } cases[] = {
                { HEAD2, "'models'" },
                { HEAD2 "models:\n- model: b\n  bundles: []\n- model: a\n  bundles: []\n", "model a is out of order" },
                { HEAD2 "models:\n- model: a\n  bundles: []\n- model: a\n  bundles: []\n", "out of order or repeated" },
                { HEAD2 "models:\n- model: A\n  bundles: []\n", "invalid model name" },
                { HEAD2 "models:\n- model: a\n", "'bundles'" },
                { HEAD2 "models:\n- model: a\n  bundles: []\n  extra: 1\n", "unknown key" },
                { HEAD2 "models:\n- model: a\n  rollout: {percent: 101, seed: 1}\n  bundles: []\n",
                  "rollout percent 101 is outside 0..100" },
                { HEAD2 "models:\n- model: a\n  rollout: {percent: -1, seed: 1}\n  bundles: []\n", "unsigned integer" },
                { HEAD2 "models:\n- model: a\n  rollout: {percent: 5}\n  bundles: []\n", "'seed'" },
                { HEAD2 "models:\n- model: a\n  rollout: {percent: 5, seed: 1, when: now}\n  bundles: []\n",
                  "unknown key" },
                { HEAD2 "models:\n- model: a\n  rollout: 5\n  bundles: []\n", "rollout" },
                { HEAD2 "models:\n- model: a\n  base: xyz\n  bundles: []\n", "base" },
                { HEAD2 "models:\n- model: a\n  desired: json\n  bundles: []\n",
                  "model a: desired task 'json' has no bundle" },
                { HEAD2 "models:\n- model: a\n  base: " SHA2 "\n  desired: json\n  bundles:\n" BUNDLE2("json", "1", SHA),
                  "has no bundle for the model's base" },
                { HEAD2 "models:\n- model: a\n  bundles:\n" BUNDLE2("json", "2", SHA) BUNDLE2("json", "1", SHA),
                  "out of order" },
                { HEAD2 "models:\n- model: a\n  bundles: []\ndesired: x\n", "unknown key 'desired'" },
                { HEAD2 "models: [1]\n", "not a mapping" },
                { HEAD2 "models:\n- model: a\n  bundles:\n  - {role: tusk, task: a, version: 1, path: a.tpb, size: 100, "
                  "sha256: " SHA ", kind: gguf, base_sha256: " SHA ", base_layout: " SHA "}\n",
                  "role 'tusk' is neither task nor base" },
                { HEAD2 "models:\n- model: a\n  bundles:\n  - {role: base, task: a, version: 1, path: a.tpb, size: 100, "
                  "sha256: " SHA ", kind: gguf, base_sha256: " SHA ", base_layout: " SHA "}\n",
                  "missing 'target_sha256'" },
                { HEAD2 "models:\n- model: a\n  bundles:\n  - {task: a, version: 1, path: a.tpb, size: 100, "
                  "sha256: " SHA ", kind: gguf, base_sha256: " SHA ", base_layout: " SHA ", target_sha256: " SHA "}\n",
                  "target_sha256 is a base bundle's key" },
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++)
                expect_refused(cases[i].text, cases[i].message, i);
}
END_TEST

START_TEST(caps2) {
        size_t cap = 200 + 3000 * 400, len;
        char *text = malloc(cap);
        Channel *c = NULL;
        TpError err = {};

        ck_assert_ptr_nonnull(text);
        /* The bundle cap is over every section. */
        len = (size_t) snprintf(text, cap, HEAD2 "models:\n");
        for (size_t m = 0; m < 2; m++) {
                len += (size_t) snprintf(text + len, cap - len, "- model: m%zu\n  bundles:\n", m);
                for (size_t i = 0; i < CHANNEL_MAX_BUNDLES / 2 + 1; i++)
                        len += (size_t) snprintf(text + len, cap - len, BUNDLE2("a", "%zu", SHA), i + 1, i + 1);
        }
        ck_assert_int_eq(parse_text(text, &c, &err), -E2BIG);
        ck_assert_msg(strstr(err.message, "2050 bundles exceed the cap of 2048"), "%s", err.message);
        len = (size_t) snprintf(text, cap, HEAD2 "models:\n");
        for (size_t m = 0; m <= CHANNEL_MAX_MODELS; m++)
                len += (size_t) snprintf(text + len, cap - len, "- model: m%03zu\n  bundles: []\n", m);
        ck_assert_int_eq(parse_text(text, &c, &err), -E2BIG);
        ck_assert_msg(strstr(err.message, "65 models exceed the cap of 64"), "%s", err.message);
        free(text);
}
END_TEST

START_TEST(writer2) {
        _cleanup_(channel_freep) Channel *c = make_channel(3);
        _cleanup_free_ char *text = NULL;
        TpError err = {};
        size_t len;

        c->format = CHANNEL_FORMAT;
        snprintf(c->models[0].name, sizeof(c->models[0].name), "llm");
        /* The bundles name no model ("" is format 1's): no section holds them. */
        ck_assert_int_eq(channel_index_write(c, &text, &len, &err), -EINVAL);
        ck_assert_msg(strstr(err.message, "for model '', which has no section"), "%s", err.message);
        for (size_t i = 0; i < c->n_bundles; i++)
                snprintf(c->bundles[i].model, sizeof(c->bundles[i].model), "llm");
        c->models[0].rollout = (ChannelRollout) { .set = true, .percent = 101 };
        ck_assert_int_eq(channel_index_write(c, &text, &len, &err), -EINVAL);
        ck_assert_msg(strstr(err.message, "rollout percent 101"), "%s", err.message);
        c->models[0].rollout.percent = 100;
        ck_assert_int_eq(channel_index_write(c, &text, &len, &err), 0);
        ck_assert_msg(strstr(text, "- model: llm\n  rollout: {percent: 100, seed: 0}\n  bundles:\n"), "%.*s",
                      (int) len, text);
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
        tcase_add_test(tc, revocations);
        tcase_add_test(tc, header_refusals);
        tcase_add_test(tc, roundtrip2);
        tcase_add_test(tc, refusals2);
        tcase_add_test(tc, caps2);
        tcase_add_test(tc, writer2);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(channel_suite)
