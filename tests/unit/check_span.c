/* SPDX-License-Identifier: MIT */
/*
 * common/bundle/span.c: the span decoder that bundle_apply() and the stager share — raw and delta
 * spans decode byte for byte (hashing on this thread and on a hash pipe), and each damaged span is
 * refused with a message naming the span, its offset, what was expected and what was found.
 * (Apply and the stager giving the same words for the same damage: tests/unit/check_stage.c.)
 */

#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <zstd.h>

#include "bundle.h"
#include "check-main.h"
#include "delta.h"
#include "span.h"
#include "test-buf.h"

#define BASE_SIZE 300000
#define WINDOW (32u << 10)              /* small raw pieces, so raw spans take several */

static uint8_t base[BASE_SIZE], target[BASE_SIZE + 4096];

static uint64_t rng_state = 7;
static uint8_t next_byte(void) {
        rng_state = rng_state * 6364136223846793005u + 1442695040888963407u;
        return (uint8_t) (rng_state >> 56);
}

/* What a test span is: where it lies in the target and how its frame is coded. */
typedef struct TestSpan {
        uint64_t offset, length;
        const char *layout;             /* NULL: raw */
} TestSpan;

static void hex(const uint8_t d[32], char out[65]) {
        sha256_to_hex(d, out);
}

/* zstd(delta of every group) or zstd(raw bytes) for @s: one frame. */
static void code_frame(const TestSpan *s, Buf *frame) {
        uint8_t *src = malloc(s->length);
        ck_assert_ptr_nonnull(src);
        if (s->layout) {
                DeltaLayout l = delta_layout_from_string(s->layout);
                size_t group = delta_group_bytes(l);
                for (uint64_t p = 0; p < s->length; p += group) {
                        size_t n = s->length - p < group ? (size_t) (s->length - p) : group;
                        delta_encode(l, base + s->offset + p, target + s->offset + p, n, src + p);
                }
        } else
                memcpy(src, target + s->offset, s->length);
        size_t cap = ZSTD_compressBound(s->length);
        uint8_t *z = malloc(cap);
        size_t zn = ZSTD_compress(z, cap, src, s->length, 3);
        ck_assert(!ZSTD_isError(zn));
        put(frame, z, zn);
        free(z);
        free(src);
}

/*
 * An unsigned bundle of @n spans over a @target_size-byte target made from the base (the first
 * BASE_SIZE bytes; past them, a grown file). @frame0, when not NULL, replaces span #0's frame.
 */
static Bundle *make_bundle(const TestSpan *spans, size_t n, uint64_t target_size, const Buf *frame0) {
        char manifest[8192], h1[65], h2[65], h3[65];
        uint8_t hdr[BUNDLE_HEADER_SIZE], d[32];
        Buf payload = {}, file = {}, list = {};
        Bundle *b = NULL;
        TpError err = {};
        int k;

        for (size_t i = 0; i < n; i++) {
                const TestSpan *s = &spans[i];
                size_t at = payload.n;
                char line[512];
                if (i == 0 && frame0)
                        put(&payload, frame0->p, frame0->n);
                else
                        code_frame(s, &payload);
                memset(d, 0, 32);
                if (s->offset + s->length <= BASE_SIZE)
                        sha256_digest(base + s->offset, s->length, d);
                hex(d, h1);
                sha256_digest(target + s->offset, s->length, d);
                hex(d, h2);
                k = snprintf(line, sizeof(line), "- {offset: %" PRIu64 ", length: %" PRIu64 ", encoding: %s%s, "
                             "base_sha256: %s, new_sha256: %s, frame_offset: %zu, frame_size: %zu}\n", s->offset,
                             s->length, s->layout ? "delta, layout: " : "raw", s->layout ? s->layout : "", h1, h2, at,
                             payload.n - at);
                ck_assert(k > 0 && (size_t) k < sizeof(line));
                put(&list, line, (size_t) k);
        }
        put(&list, "", 1);
        sha256_digest(base, BASE_SIZE, d);
        hex(d, h1);
        sha256_digest(target, target_size, d);
        hex(d, h2);
        sha256_digest(payload.p, payload.n, d);
        hex(d, h3);
        k = snprintf(manifest, sizeof(manifest),
                     "format: 1\ntask: spans\nversion: 1\ncreated: 2026-01-01T00:00:00Z\nkind: raw\n"
                     "base: {sha256: %s, size: %d, layout: %s}\n"
                     "target: {sha256: %s, size: %" PRIu64 ", chunk_size: 4096, chunk_root: %s}\n"
                     "sites: {fingerprint: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855, "
                     "names: []}\n"
                     "payload: {size: %zu, sha256: %s}\nspans:\n%s",
                     h1, BASE_SIZE, h1, h2, target_size, h2, payload.n, h3, (const char *) list.p);
        ck_assert(k > 0 && (size_t) k < sizeof(manifest));
        bundle_header_encode(&(BundleHeader) { BUNDLE_FORMAT, (uint64_t) k, 0, payload.n }, hdr);
        put(&file, hdr, sizeof(hdr));
        put(&file, manifest, (size_t) k);
        put(&file, payload.p, payload.n);
        ck_assert_msg(bundle_open_fd(memfd_with(file.p, file.n), "t.tpb", &b, &err) == 0, "%s", err.message);
        free(payload.p);
        free(file.p);
        free(list.p);
        return b;
}

static void setup(void) {
        for (size_t i = 0; i < BASE_SIZE; i++)
                base[i] = next_byte();
        memcpy(target, base, BASE_SIZE);
        for (size_t i = BASE_SIZE; i < sizeof(target); i++)
                target[i] = next_byte();
}

/* Change @len bytes at @off of the target a little (what a fine-tune does to quantized blocks). */
static void change(uint64_t off, uint64_t len) {
        for (uint64_t i = 0; i < len; i++)
                target[off + i] ^= (uint8_t) (1u << (next_byte() % 3));
}

/*
 * Decode every span of @b against @bytes (a base of @size bytes, as a caller reads it) into
 * @out, the way bundle_apply() and the stager drive the decoder; @pipe: hash on a worker (2: and
 * defer the span checks, as the stager does). Returns 0 or the first error.
 */
static int decode_all(Bundle *b, const uint8_t *bytes, uint64_t size, int pipe, uint8_t *out, TpError *err) {
        _cleanup_(hash_pipe_freep) HashPipe *hp = NULL;
        _cleanup_(span_decoder_freep) SpanDecoder *d = NULL;
        size_t bufsize = span_decoder_buffer_size(WINDOW);
        uint8_t *bufs[HASH_PIPE_SLOTS][3];
        const ManifestSpan *s;
        int r;

        if (pipe)
                ck_assert_int_eq(hash_pipe_new(&hp), 0);
        for (unsigned i = 0; i < HASH_PIPE_SLOTS; i++)
                for (unsigned j = 0; j < 3; j++)
                        ck_assert_ptr_nonnull(bufs[i][j] = malloc(bufsize));
        r = span_decoder_new(b, size, hp, &d, err);
        if (r >= 0 && pipe == 2)
                span_decoder_defer_checks(d);
        while (r >= 0 && (r = span_decoder_next(d, &s, err)) > 0) {
                uint64_t pos = s->offset;
                size_t n;
                while (r >= 0 && (n = span_decoder_want(d, WINDOW)) > 0) {
                        unsigned slot = hp ? hash_pipe_slot(hp) : 0;
                        size_t nb = pos >= size ? 0 : size - pos < n ? (size_t) (size - pos) : n;
                        const uint8_t *got;
                        if (nb > 0) {
                                memcpy(bufs[slot][0], bytes + pos, nb);
                                r = span_decoder_base(d, slot, bufs[slot][0], nb, NULL, err);
                        }
                        if (r >= 0)
                                r = span_decoder_read(d, slot, bufs[slot][1], bufs[slot][2], n, NULL, &got, err);
                        if (r >= 0)
                                memcpy(out + pos, got, n);
                        pos += n;
                }
                if (r >= 0)
                        r = span_decoder_end(d, err);
        }
        if (r >= 0)
                r = span_decoder_finish(d, err);
        hp = hash_pipe_free(hp);
        for (unsigned i = 0; i < HASH_PIPE_SLOTS; i++)
                for (unsigned j = 0; j < 3; j++)
                        free(bufs[i][j]);
        return r;
}

static const TestSpan mixed[] = {
        { 1000, 5000, NULL },                   /* raw, several pieces */
        { 10000, 34 * 3000, "q8_0" },           /* delta, two groups */
        { 150000, 70000, "bytes" },             /* delta, two groups */
        { 250000, 100, NULL },
};

static void change_mixed(void) {
        for (size_t i = 0; i < ELEMENTSOF(mixed); i++)
                change(mixed[i].offset, mixed[i].length);
}

START_TEST(test_decodes) {
        static uint8_t out[BASE_SIZE];
        TpError err = {};

        change_mixed();
        for (int pipe = 0; pipe <= 2; pipe++) {
                _cleanup_(bundle_freep) Bundle *b = make_bundle(mixed, ELEMENTSOF(mixed), BASE_SIZE, NULL);
                memcpy(out, base, BASE_SIZE);
                ck_assert_msg(decode_all(b, base, BASE_SIZE, pipe, out, &err) == 0, "%s", err.message);
                ck_assert_msg(memcmp(out, target, BASE_SIZE) == 0, "pipe %d: wrong bytes", pipe);
        }
}
END_TEST

/* A raw span reaching past the end of a shorter base (a grown file) has no base bytes to check. */
START_TEST(test_grown_file) {
        static uint8_t out[sizeof(target)];
        static const TestSpan grow[] = { { BASE_SIZE - 500, 4596, NULL } };
        _cleanup_(bundle_freep) Bundle *b = NULL;
        TpError err = {};

        change(BASE_SIZE - 500, 500);
        b = make_bundle(grow, 1, sizeof(target), NULL);
        ck_assert_msg(decode_all(b, base, BASE_SIZE, true, out, &err) == 0, "%s", err.message);
        ck_assert(memcmp(out + BASE_SIZE - 500, target + BASE_SIZE - 500, 4596) == 0);
}
END_TEST

/* Refusals: run the damaged bundle in every hashing mode; all must give the same message. */
static void refused(Bundle *b, const uint8_t *bytes, uint64_t size, const char *want) {
        static uint8_t out[sizeof(target)];
        TpError e1 = {}, e2 = {}, e3 = {};

        ck_assert_int_eq(decode_all(b, bytes, size, 0, out, &e1), -EBADMSG);
        ck_assert_int_eq(decode_all(b, bytes, size, 1, out, &e2), -EBADMSG);
        ck_assert_int_eq(decode_all(b, bytes, size, 2, out, &e3), -EBADMSG);
        ck_assert_str_eq(e1.message, e2.message);
        ck_assert_str_eq(e1.message, e3.message);
        ck_assert_msg(strstr(e1.message, want), "wanted \"%s\" in: %s", want, e1.message);
}

START_TEST(test_span_past_payload_end) {
        _cleanup_(bundle_freep) Bundle *b = NULL;
        char want[160];

        change_mixed();
        b = make_bundle(mixed, ELEMENTSOF(mixed), BASE_SIZE, NULL);
        /* The manifest parser refuses this; the decoder does not rely on it. */
        ManifestSpan *last = &b->manifest->spans[3];
        last->frame_size += 1;
        snprintf(want, sizeof(want), "t.tpb: span #3 (offset 250000, 100 bytes): its frame [%" PRIu64 ", +%" PRIu64
                 ") reaches past the end of the payload (%" PRIu64 " bytes)", last->frame_offset, last->frame_size,
                 b->header.payload_size);
        refused(b, base, BASE_SIZE, want);

        last->frame_size -= 1;
        last->frame_offset -= 1;
        refused(b, base, BASE_SIZE, "t.tpb: span #3 (offset 250000, 100 bytes): its frame is at payload offset");
}
END_TEST

/* Caps on a frame: no more output than the span's length, no window past BUNDLE_WINDOW_LOG. */
START_TEST(test_frame_over_cap) {
        static const TestSpan one[] = { { 0, 1000, NULL } };
        _cleanup_(bundle_freep) Bundle *b = NULL, *w = NULL;
        Buf f = {};

        /* Span #0's frame decodes to 1001 bytes. */
        TestSpan longer = { 0, 1001, NULL };
        code_frame(&longer, &f);
        b = make_bundle(one, 1, BASE_SIZE, &f);
        refused(b, base, BASE_SIZE, "t.tpb: span #0 (offset 0, 1000 bytes): the frame decodes to more bytes than the span's length");

        /* A frame asking for a 16 MiB window (hand-made header: windowLog 24, one raw block). */
        static const uint8_t head[] = { 0x28, 0xb5, 0x2f, 0xfd, 0x00, (24 - 10) << 3 };
        uint32_t block = 1u | 1000u << 3;
        uint8_t bh[3] = { (uint8_t) block, (uint8_t) (block >> 8), (uint8_t) (block >> 16) };
        f.n = 0;
        put(&f, head, sizeof(head));
        put(&f, bh, 3);
        put(&f, target, 1000);
        w = make_bundle(one, 1, BASE_SIZE, &f);
        refused(w, base, BASE_SIZE, "t.tpb: span #0 (offset 0, 1000 bytes): the frame asks for a window larger than the 8 MiB cap");
        free(f.p);
}
END_TEST

START_TEST(test_base_hash_mismatch) {
        static uint8_t other[BASE_SIZE];
        _cleanup_(bundle_freep) Bundle *b = NULL;
        char want[400], got[65], exp[65];
        uint8_t d[32];

        change_mixed();
        b = make_bundle(mixed, ELEMENTSOF(mixed), BASE_SIZE, NULL);
        memcpy(other, base, BASE_SIZE);
        other[150001] ^= 1;                     /* under span #2 */
        sha256_digest(other + 150000, 70000, d);
        hex(d, got);
        hex(b->manifest->spans[2].base_sha256, exp);
        snprintf(want, sizeof(want), "t.tpb: span #2 (offset 150000, 70000 bytes): the base bytes' SHA-256 is %s, "
                 "the manifest says %s (wrong base?)", got, exp);
        refused(b, other, BASE_SIZE, want);
}
END_TEST

/* The manifest's new-bytes digest of span #@i edited: refused in every mode, naming the span and both digests. */
static void refused_new_digest(Bundle *b, size_t i) {
        ManifestSpan *s = &b->manifest->spans[i];
        char want[400], got[65], exp[65];

        hex(s->new_sha256, got);
        s->new_sha256[31] ^= 0x10;
        hex(s->new_sha256, exp);
        snprintf(want, sizeof(want), "t.tpb: span #%zu (offset %" PRIu64 ", %" PRIu64 " bytes): the new bytes' SHA-256 "
                 "is %s, the manifest says %s", i, s->offset, s->length, got, exp);
        refused(b, base, BASE_SIZE, want);
}

START_TEST(test_new_hash_mismatch) {
        _cleanup_(bundle_freep) Bundle *b = NULL;

        change_mixed();
        b = make_bundle(mixed, ELEMENTSOF(mixed), BASE_SIZE, NULL);
        refused_new_digest(b, 1);
}
END_TEST

/*
 * Deferred checks never let a later span's refusal hide an earlier span's: base bytes damaged under
 * span #1 and span #3's frame out of place give span #1's refusal in every mode.
 */
START_TEST(test_earlier_failure_first) {
        static uint8_t other[BASE_SIZE];
        _cleanup_(bundle_freep) Bundle *b = NULL;

        change_mixed();
        b = make_bundle(mixed, ELEMENTSOF(mixed), BASE_SIZE, NULL);
        memcpy(other, base, BASE_SIZE);
        other[10001] ^= 1;
        b->manifest->spans[3].frame_offset -= 1;
        refused(b, other, BASE_SIZE, "t.tpb: span #1 (offset 10000, 102000 bytes): the base bytes' SHA-256 is ");
}
END_TEST

/*
 * More spans than the deferred checks' ring: span #0's refusal comes, in the same words, though
 * span #5 fails too and the ring's reuse (at span #16, in span #0's entry) reads both at once.
 */
START_TEST(test_many_spans_deferred) {
        static TestSpan many[20];
        _cleanup_(bundle_freep) Bundle *b = NULL;

        for (size_t i = 0; i < ELEMENTSOF(many); i++) {
                many[i] = (TestSpan) { 1000 + i * 7000, 3000 + (i % 3) * 500, i % 2 ? "bytes" : NULL };
                change(many[i].offset, many[i].length);
        }
        b = make_bundle(many, ELEMENTSOF(many), BASE_SIZE, NULL);
        static uint8_t out[BASE_SIZE];
        TpError err = {};
        memcpy(out, base, BASE_SIZE);
        ck_assert_msg(decode_all(b, base, BASE_SIZE, 2, out, &err) == 0, "%s", err.message);
        ck_assert(memcmp(out, target, BASE_SIZE) == 0);

        b->manifest->spans[5].new_sha256[0] ^= 1;
        refused_new_digest(b, 0);
}
END_TEST

START_TEST(test_truncated_zstd) {
        static const TestSpan one[] = { { 0, 20000, NULL } };
        _cleanup_(bundle_freep) Bundle *b = NULL;
        Buf f = {};

        change(0, 20000);
        code_frame(&one[0], &f);
        f.n -= 100;
        b = make_bundle(one, 1, BASE_SIZE, &f);
        refused(b, base, BASE_SIZE, "t.tpb: span #0 (offset 0, 20000 bytes): the frame ends before the span's length");
        free(f.p);
}
END_TEST

/* A delta needs the base bytes under all of it: past a shorter base it is refused before decoding. */
START_TEST(test_delta_short_base) {
        static const TestSpan one[] = { { 200000, 34 * 1000, "q8_0" } };
        _cleanup_(bundle_freep) Bundle *b = NULL;

        change(200000, 34 * 1000);
        b = make_bundle(one, 1, BASE_SIZE, NULL);
        refused(b, base, 200000 + 34 * 999, "t.tpb: span #0 (offset 200000, 34000 bytes): a delta span must lie inside "
                                            "the base (233966 bytes)");
}
END_TEST

/* A caller that hands a delta piece fewer base bytes than it decodes against is stopped too. */
START_TEST(test_delta_piece_short_base) {
        static const TestSpan one[] = { { 200000, 34 * 1000, "q8_0" } };
        _cleanup_(bundle_freep) Bundle *b = NULL;
        _cleanup_(span_decoder_freep) SpanDecoder *d = NULL;
        static uint8_t frame[1 << 20], out[1 << 20];
        const ManifestSpan *s;
        const uint8_t *got;
        TpError err = {};

        change(200000, 34 * 1000);
        b = make_bundle(one, 1, BASE_SIZE, NULL);
        ck_assert_int_eq(span_decoder_new(b, BASE_SIZE, NULL, &d, &err), 0);
        ck_assert_int_eq(span_decoder_next(d, &s, &err), 1);
        size_t n = span_decoder_want(d, WINDOW);
        ck_assert_uint_eq(n, 34000);
        ck_assert_int_eq(span_decoder_base(d, 0, base + 200000, n - 34, NULL, &err), 0);
        ck_assert_int_eq(span_decoder_read(d, 0, frame, out, n, NULL, &got, &err), -EINVAL);
        ck_assert_msg(strstr(err.message, "t.tpb: span #0 (offset 200000, 34000 bytes): the delta at offset 200000 needs "
                                          "34000 base bytes, 33966 were given"), "%s", err.message);
}
END_TEST

/* A bad layout, a delta of partial blocks: refused with the span's place. */
START_TEST(test_bad_delta_layout) {
        static const TestSpan one[] = { { 200000, 34 * 10, "q8_0" } };
        _cleanup_(bundle_freep) Bundle *b = NULL;

        change(200000, 340);
        b = make_bundle(one, 1, BASE_SIZE, NULL);
        free(b->manifest->spans[0].layout);
        b->manifest->spans[0].layout = strdup("q9_9");
        refused(b, base, BASE_SIZE, "t.tpb: span #0 (offset 200000, 340 bytes): unknown delta layout 'q9_9'");
        free(b->manifest->spans[0].layout);
        b->manifest->spans[0].layout = strdup("q4_0");
        refused(b, base, BASE_SIZE, "t.tpb: span #0 (offset 200000, 340 bytes): a delta span must be whole q4_0 blocks "
                                    "(18 bytes each)");
        /* A format-2 layout in a format-1 bundle. */
        free(b->manifest->spans[0].layout);
        b->manifest->spans[0].layout = strdup("i8");
        refused(b, base, BASE_SIZE, "t.tpb: span #0 (offset 200000, 340 bytes): delta layout 'i8' needs bundle format 2");
}
END_TEST

static Suite *span_suite(void) {
        Suite *s = suite_create("span");
        TCase *tc = tcase_create("decode");

        tcase_add_checked_fixture(tc, setup, NULL);
        tcase_add_test(tc, test_decodes);
        tcase_add_test(tc, test_grown_file);
        suite_add_tcase(s, tc);

        tc = tcase_create("refusals");
        tcase_add_checked_fixture(tc, setup, NULL);
        tcase_add_test(tc, test_span_past_payload_end);
        tcase_add_test(tc, test_frame_over_cap);
        tcase_add_test(tc, test_base_hash_mismatch);
        tcase_add_test(tc, test_new_hash_mismatch);
        tcase_add_test(tc, test_earlier_failure_first);
        tcase_add_test(tc, test_many_spans_deferred);
        tcase_add_test(tc, test_truncated_zstd);
        tcase_add_test(tc, test_delta_short_base);
        tcase_add_test(tc, test_delta_piece_short_base);
        tcase_add_test(tc, test_bad_delta_layout);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(span_suite)
