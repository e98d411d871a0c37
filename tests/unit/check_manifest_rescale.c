/* SPDX-License-Identifier: MIT */
/*
 * common/bundle/rescale-span.c through manifest.c: a rescale span's "rescale" key round trips
 * through the YAML writer and parser, and every rule about it is enforced (type, channels, inner,
 * first, layout i8, the key with encoding rescale and only then, format 2 only). The rest of the
 * manifest: check_manifest.c.
 */

#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check-main.h"
#include "manifest-sample.h"
#include "manifest.h"
#include "rescale.h"

/* sample2()'s i8 delta span [4096, +1152) as a rescale span of @channels x @inner from element @first. */
static Manifest *sample_rescale(bool is_signed, uint64_t channels, uint64_t inner, uint64_t first) {
        Manifest *m = sample2();
        ManifestSpan *s = &m->spans[1];

        s->encoding = SPAN_RESCALE;
        s->rescale = (RescaleShape) { .is_signed = is_signed, .channels = channels, .inner = inner };
        s->rescale_first = first;
        return m;
}

START_TEST(test_rescale_round_trip) {
        static const struct {
                bool is_signed;
                uint64_t channels, inner, first;
                const char *text;
        } cases[] = {
                { true, 128, 1152, 0, "rescale: {type: int8, channels: 128, inner: 1152, first: 0}" },
                { false, 1, 1, 5, "rescale: {type: uint8, channels: 1, inner: 1, first: 5}" },
                { true, RESCALE_MAX_CHANNELS, RESCALE_MAX_INNER, UINT64_MAX / 2,
                  "rescale: {type: int8, channels: 1048576, inner: 1099511627776, first: 9223372036854775807}" },
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                Manifest *m = sample_rescale(cases[i].is_signed, cases[i].channels, cases[i].inner, cases[i].first);
                Manifest *p = NULL;
                TpError err = {};
                size_t len, len2;
                /* Either 8-bit layout: i8 and the range-coded i8ac. */
                const char *layout = i % 2 ? "i8ac" : "i8";
                char want[64];
                free(m->spans[1].layout);
                ck_assert_ptr_nonnull(m->spans[1].layout = strdup(layout));
                snprintf(want, sizeof(want), "encoding: rescale, layout: %s, ", layout);
                char *text = write_text(m, &len);

                ck_assert_msg(strstr(text, want) && strstr(text, cases[i].text), "case %zu: %s", i, text);
                ck_assert_msg(manifest_parse(text, len, &p, &err) == 0, "case %zu: %s\n%s", i, err.message, text);
                const ManifestSpan *s = &p->spans[1];
                ck_assert_int_eq(s->encoding, SPAN_RESCALE);
                ck_assert_str_eq(s->layout, layout);
                ck_assert(s->rescale.is_signed == cases[i].is_signed);
                ck_assert_uint_eq(s->rescale.channels, cases[i].channels);
                ck_assert_uint_eq(s->rescale.inner, cases[i].inner);
                ck_assert_uint_eq(s->rescale_first, cases[i].first);
                ck_assert_uint_eq(s->base_offset, 4096);
                ck_assert_uint_eq(s->base_length, s->length);   /* it reads its base bytes beside its new ones */
                ck_assert(span_predicted(s) && span_base_in_pieces(s));
                ck_assert_uint_eq(span_frame_prefix_bytes(s), 8 * cases[i].channels);
                ck_assert_mem_eq(s->base_sha256, m->spans[1].base_sha256, 32);
                ck_assert_uint_eq(p->spans[0].rescale.channels, 0);

                /* One spelling per manifest: writing the parsed one gives the same bytes. */
                char *text2 = write_text(p, &len2);
                ck_assert_uint_eq(len, len2);
                ck_assert_mem_eq(text, text2, len);
                free(text2);
                free(text);
                manifest_free(p);
                manifest_free(m);
        }
}
END_TEST

/* Hand edits of a valid rescale span's text, each refused with a message holding @words. */
static const struct {
        const char *from, *to, *words;
} rescale_edits[] = {
        { "type: int8", "type: int16", "rescale: 'type' is 'int16' (expected int8 or uint8)" },
        { "type: int8", "type: INT8", "'type' is 'INT8'" },
        { "type: int8", "type: 3", "'type' is '3'" },
        { "channels: 128", "channels: 0", "a rescale span of 0 channels (expected 1 .. 1048576)" },
        { "channels: 128", "channels: 1048577", "a rescale span of 1048577 channels" },
        { "channels: 128", "channels: -1", "channels" },
        { "inner: 1152", "inner: 0", "a rescale span with 0 elements per channel run (expected 1 .. 2^40)" },
        { "inner: 1152", "inner: 1099511627777", "with 1099511627777 elements per channel run" },
        { "first: 3", "first: 9223372036854775808", "rescale: 'first' is out of range" },
        { "layout: i8", "layout: q8_0", "a rescale span's layout is i8" },
        { "layout: i8", "layout: i16", "a rescale span's layout is i8" },
        { "layout: i8, ", "", "'layout' is required with encodings delta, lora and rescale and only then" },
        { ", first: 3}", "}", "first" },
        { "type: int8, ", "", "type" },
        { "first: 3}", "first: 3, extra: 1}", "extra" },
        { "rescale: {type: int8, channels: 128, inner: 1152, first: 3}", "rescale: 5", "rescale" },
        /* The key on another encoding, the encoding without the key. */
        { "encoding: rescale, layout: i8", "encoding: delta, layout: i8",
          "'rescale' is required with encoding rescale and only then" },
        { "rescale: {type: int8, channels: 128, inner: 1152, first: 3}, ", "",
          "'rescale' is required with encoding rescale and only then" },
        { "encoding: rescale", "encoding: rescaled", "unknown encoding 'rescaled'" },
};

START_TEST(test_rescale_refusals) {
        Manifest *m = sample_rescale(true, 128, 1152, 3), *p = NULL;
        TpError err = {};
        size_t len;
        char *text = write_text(m, &len);

        ck_assert_msg(manifest_parse(text, len, &p, &err) == 0, "%s\n%s", err.message, text);
        manifest_free(p);
        p = NULL;
        char *bad = replaced(text, rescale_edits[_i].from, rescale_edits[_i].to);
        int r = parse_text(bad, &p, &err);
        ck_assert_msg(r == -EBADMSG, "edit %d ('%s' -> '%s'): %d", _i, rescale_edits[_i].from, rescale_edits[_i].to, r);
        ck_assert_ptr_null(p);
        ck_assert_msg(strstr(err.message, rescale_edits[_i].words), "edit %d: '%s' lacks '%s'", _i, err.message,
                      rescale_edits[_i].words);
        free(bad);
        free(text);
        manifest_free(m);
}
END_TEST

/* The 'rescale' key on a delta span as the writer would put it; encoding rescale in a format-1 manifest. */
START_TEST(test_rescale_other_spans) {
        Manifest *m = sample_rescale(false, 4, 8, 0), *p = NULL;
        TpError err = {};
        size_t len;

        /* A delta span with the key: the writer leaves it out, a hand edit puts it in. */
        m->spans[1].encoding = SPAN_DELTA;
        char *text = write_text(m, &len);
        ck_assert_ptr_null(strstr(text, "rescale"));
        char *bad = replaced(text, "layout: i8, ",
                             "layout: i8, rescale: {type: uint8, channels: 4, inner: 8, first: 0}, ");
        ck_assert_int_eq(parse_text(bad, &p, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "span #1: 'rescale' is required with encoding rescale and only then"), "%s",
                      err.message);
        free(bad);
        free(text);
        manifest_free(m);

        /* Format 1 (in place): no rescale spans, with or without the key. */
        m = sample();
        free(m->spans[1].layout);
        m->spans[1].layout = strdup("i8");
        m->spans[1].encoding = SPAN_RESCALE;
        m->spans[1].rescale = (RescaleShape) { .is_signed = true, .channels = 4, .inner = 8 };
        text = write_text(m, &len);
        ck_assert_msg(strstr(text, "encoding: rescale"), "%s", text);
        ck_assert_int_eq(manifest_parse(text, len, &p, &err), -EBADMSG);
        ck_assert_ptr_null(p);
        ck_assert_msg(strstr(err.message, "unknown key 'rescale'"), "%s", err.message);
        bad = replaced(text, "rescale: {type: int8, channels: 4, inner: 8, first: 0}, ", "");
        ck_assert_int_eq(parse_text(bad, &p, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "unknown encoding 'rescale' (expected raw, delta or lora)"), "%s",
                      err.message);
        free(bad);
        free(text);
        manifest_free(m);
}
END_TEST

static Suite *manifest_rescale_suite(void) {
        Suite *s = suite_create("manifest_rescale");
        TCase *tc = tcase_create("rescale");

        tcase_add_test(tc, test_rescale_round_trip);
        tcase_add_loop_test(tc, test_rescale_refusals, 0, (int) ELEMENTSOF(rescale_edits));
        tcase_add_test(tc, test_rescale_other_spans);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(manifest_rescale_suite)
