/* SPDX-License-Identifier: MIT */
/* common/manifest.c: write/parse round trip and every validation rule. */

#include <check.h>
#include <string.h>

#include "check-main.h"
#include "manifest.h"

/* A valid manifest with two spans (one raw, one delta) and two sites. */
static Manifest *sample(void) {
        Manifest *m = calloc(1, sizeof(*m));
        ck_assert_ptr_nonnull(m);
        m->format = MANIFEST_FORMAT;
        m->task = strdup("json");
        m->version = 3;
        m->created = 1790000000;
        m->expires = 1800000000;
        m->kind = ARTIFACT_GGUF;
        memset(m->base.sha256, 0x11, 32);
        m->base.size = 1000000;
        memset(m->base.layout, 0x22, 32);
        memset(m->target.sha256, 0x33, 32);
        m->target.size = 1000000;
        m->target.chunk_size = 1 << 20;
        memset(m->target.chunk_root, 0x44, 32);
        m->n_sites = 2;
        m->sites = calloc(2, sizeof(char *));
        m->sites[0] = strdup("blk.0.attn_q.weight");
        m->sites[1] = strdup("blk.0.attn_v.weight");
        sites_fingerprint(m->sites, 2, m->sites_fingerprint);
        m->payload.size = 300;
        memset(m->payload.sha256, 0x55, 32);
        m->n_spans = 2;
        m->spans = calloc(2, sizeof(ManifestSpan));
        m->spans[0] = (ManifestSpan) { .offset = 100, .length = 50, .encoding = SPAN_RAW, .frame_offset = 0,
                                       .frame_size = 100 };
        m->spans[1] = (ManifestSpan) { .offset = 4096, .length = 1152, .encoding = SPAN_DELTA,
                                       .layout = strdup("q4_0"), .site = strdup("blk.0.attn_q.weight"),
                                       .frame_offset = 100, .frame_size = 200 };
        memset(m->spans[1].base_sha256, 0x66, 32);
        memset(m->spans[1].new_sha256, 0x77, 32);
        return m;
}

static char *write_text(const Manifest *m, size_t *len) {
        char *text = NULL;
        TpError err = {};
        ck_assert_msg(manifest_write(m, &text, len, &err) == 0, "%s", err.message);
        return text;
}

START_TEST(test_round_trip) {
        Manifest *m = sample(), *p = NULL;
        size_t len;
        char *text = write_text(m, &len);
        TpError err = {};

        ck_assert_msg(manifest_parse(text, len, &p, &err) == 0, "%s\n%.*s", err.message, (int) len, text);
        ck_assert_str_eq(p->task, "json");
        ck_assert_uint_eq(p->version, 3);
        ck_assert_int_eq(p->created, 1790000000);
        ck_assert_int_eq(p->expires, 1800000000);
        ck_assert_int_eq(p->kind, ARTIFACT_GGUF);
        ck_assert_uint_eq(p->n_sites, 2);
        ck_assert_str_eq(p->sites[1], "blk.0.attn_v.weight");
        ck_assert_uint_eq(p->n_spans, 2);
        ck_assert_int_eq(p->spans[1].encoding, SPAN_DELTA);
        ck_assert_str_eq(p->spans[1].layout, "q4_0");
        ck_assert_str_eq(p->spans[1].site, "blk.0.attn_q.weight");
        ck_assert_ptr_null(p->spans[0].site);
        ck_assert_mem_eq(p->spans[1].new_sha256, m->spans[1].new_sha256, 32);
        ck_assert_mem_eq(p->target.chunk_root, m->target.chunk_root, 32);

        /* Writing the parsed manifest gives the same bytes: one spelling per manifest. */
        size_t len2;
        char *text2 = write_text(p, &len2);
        ck_assert_uint_eq(len, len2);
        ck_assert_mem_eq(text, text2, len);
        free(text);
        free(text2);
        manifest_free(m);
        manifest_free(p);
}
END_TEST

/* Each mutation of the sample must be refused with a message holding the given words. */
typedef void (*Mutate)(Manifest *m);
static void m_overlap(Manifest *m) { m->spans[1].offset = 120; }
static void m_order(Manifest *m) { m->spans[0].offset = 5000; }
static void m_past_end(Manifest *m) { m->spans[1].offset = 999999; }
static void m_frame_gap(Manifest *m) { m->spans[1].frame_offset = 101; }
static void m_frame_sum(Manifest *m) { m->payload.size = 301; }
static void m_site_order(Manifest *m) {
        char *t = m->sites[0];
        m->sites[0] = m->sites[1];
        m->sites[1] = t;
}
static void m_fingerprint(Manifest *m) { m->sites_fingerprint[0] ^= 1; }
static void m_chunk(Manifest *m) { m->target.chunk_size = 1000; }
static void m_empty_span(Manifest *m) { m->spans[0].length = 0; }
static void m_format(Manifest *m) { m->format = 2; }

static const struct {
        Mutate mutate;
        const char *words;
} bad_cases[] = {
        { m_overlap, "overlaps or precedes" },
        { m_order, "overlaps or precedes" },
        { m_past_end, "runs past the target size" },
        { m_frame_gap, "frames are back to back" },
        { m_frame_sum, "frames add up to 300 bytes" },
        { m_site_order, "out of order or repeated" },
        { m_fingerprint, "fingerprint does not match" },
        { m_chunk, "chunk_size 1000" },
        { m_empty_span, "empty span" },
        { m_format, "format 2 is not supported" },
};

START_TEST(test_refusals) {
        Manifest *m = sample(), *p = NULL;
        TpError err = {};
        size_t len;

        bad_cases[_i].mutate(m);
        char *text = write_text(m, &len);
        int r = manifest_parse(text, len, &p, &err);
        ck_assert_msg(r < 0, "case %d parsed", _i);
        ck_assert_ptr_null(p);
        ck_assert_msg(strstr(err.message, bad_cases[_i].words), "case %d: '%s' lacks '%s'", _i, err.message,
                      bad_cases[_i].words);
        free(text);
        manifest_free(m);
}
END_TEST

/* Hand-edited documents: unknown keys, bad task names, missing fields. */
START_TEST(test_text_refusals) {
        Manifest *m = sample(), *p = NULL;
        TpError err = {};
        size_t len;
        char *text = write_text(m, &len);
        char *edited = malloc(len + 64);

        /* An unknown top-level key. */
        memcpy(edited, text, len);
        memcpy(edited + len, "extra: 1\n", 9);
        ck_assert_int_lt(manifest_parse(edited, len + 9, &p, &err), 0);
        ck_assert_ptr_nonnull(strstr(err.message, "unknown key 'extra'"));

        /* A task name with a slash. */
        char *t = strstr(text, "task: json");
        ck_assert_ptr_nonnull(t);
        memcpy(t, "task: j/on", 10);
        ck_assert_int_lt(manifest_parse(text, len, &p, &err), 0);
        ck_assert_ptr_nonnull(strstr(err.message, "invalid task name"));

        /* Truncations never parse into something else silently (the fingerprint or frames catch it). */
        memcpy(t, "task: json", 10);
        for (size_t cut = 0; cut < len; cut++) {
                int r = manifest_parse(text, cut, &p, &err);
                if (r == 0) {
                        /* Only a cut inside the final trailing newline/spans may still be a valid document. */
                        ck_assert_uint_ge(cut, len - 2);
                        manifest_free(p);
                        p = NULL;
                }
        }
        free(edited);
        free(text);
        manifest_free(m);
}
END_TEST

START_TEST(test_task_names) {
        ck_assert(task_name_valid("json"));
        ck_assert(task_name_valid("a"));
        ck_assert(task_name_valid("v1.2_beta-3"));
        ck_assert(!task_name_valid(""));
        ck_assert(!task_name_valid(".."));
        ck_assert(!task_name_valid("a/b"));
        ck_assert(!task_name_valid("-a"));
        ck_assert(!task_name_valid("Json"));
        ck_assert(!task_name_valid("0123456789012345678901234567890123456789012345678901234567890123456789"));
        ck_assert(task_name_valid("0123456789012345678901234567890123456789012345678901234567890123"));
}
END_TEST

static Suite *manifest_suite(void) {
        Suite *s = suite_create("manifest");
        TCase *tc = tcase_create("manifest");

        tcase_add_test(tc, test_round_trip);
        tcase_add_loop_test(tc, test_refusals, 0, (int) (sizeof(bad_cases) / sizeof(bad_cases[0])));
        tcase_add_test(tc, test_text_refusals);
        tcase_add_test(tc, test_task_names);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(manifest_suite)
