/* SPDX-License-Identifier: MIT */
/*
 * common/bundle/bundle.c: the fixed header's rules, and the caps on what a span's frame may decode to.
 * (Whole bundles: tests/integration/test-bundle.sh.)
 */

#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "bundle.h"
#include "check-main.h"
#include "test-buf.h"

static void good_header(uint8_t h[BUNDLE_HEADER_SIZE]) {
        BundleHeader bh = { BUNDLE_FORMAT, 1000, 200, 5000 };
        bundle_header_encode(&bh, h);
}

START_TEST(test_round_trip) {
        uint8_t h[BUNDLE_HEADER_SIZE];
        BundleHeader out = {};

        good_header(h);
        ck_assert_mem_eq(h, "TPBUNDL\0", 8);
        ck_assert_int_eq(bundle_header_decode(h, 64 + 1000 + 200 + 5000, &out, NULL), 0);
        ck_assert_uint_eq(out.manifest_size, 1000);
        ck_assert_uint_eq(out.signature_size, 200);
        ck_assert_uint_eq(out.payload_size, 5000);
}
END_TEST

/*
 * Every single-bit flip of a header is refused (or, for a size field, contradicts the file size),
 * but the one that sets BUNDLE_FLAG_MANIFEST_ZSTD: that header is well-formed, and its plain
 * manifest is then refused as not a zstd frame (test-bundle.sh flips every byte of whole bundles).
 */
START_TEST(test_every_bit_flip) {
        uint8_t h[BUNDLE_HEADER_SIZE];
        BundleHeader out;

        for (unsigned bit = 0; bit < 8 * BUNDLE_HEADER_SIZE; bit++) {
                good_header(h);
                h[bit / 8] ^= (uint8_t) (1u << (bit % 8));
                TpError err = {};
                int r = bundle_header_decode(h, 64 + 1000 + 200 + 5000, &out, &err);
                if (bit == 12 * 8) {
                        ck_assert_int_eq(r, 0);
                        ck_assert_uint_eq(out.flags, BUNDLE_FLAG_MANIFEST_ZSTD);
                        continue;
                }
                ck_assert_msg(r < 0, "bit %u flipped: accepted", bit);
                ck_assert_msg(err.message[0], "bit %u: no message", bit);
        }
}
END_TEST

START_TEST(test_caps) {
        uint8_t h[BUNDLE_HEADER_SIZE];
        BundleHeader bh = { BUNDLE_FORMAT, MANIFEST_MAX_BYTES + 1, 0, 0 }, out;
        TpError err = {};

        bundle_header_encode(&bh, h);
        ck_assert_int_eq(bundle_header_decode(h, 64 + MANIFEST_MAX_BYTES + 1, &out, &err), -EBADMSG);
        ck_assert_ptr_nonnull(strstr(err.message, "manifest size"));
        bh = (BundleHeader) { BUNDLE_FORMAT, 10, BUNDLE_MAX_SIGNATURE + 1, 0 };
        bundle_header_encode(&bh, h);
        ck_assert_int_eq(bundle_header_decode(h, 64 + 10 + BUNDLE_MAX_SIGNATURE + 1, &out, &err), -EBADMSG);
        ck_assert_ptr_nonnull(strstr(err.message, "signature size"));
        /* Sizes that overflow when added must not wrap around into a match. */
        bh = (BundleHeader) { BUNDLE_FORMAT, 10, 0, UINT64_MAX - 10 };
        bundle_header_encode(&bh, h);
        ck_assert_int_eq(bundle_header_decode(h, 100, &out, &err), -EBADMSG);
}
END_TEST

/* ---- span frames: decoded size and window caps -------------------------------------------------- */

/*
 * A zstd frame made by hand, so the test controls its header: no content size, the window
 * descriptor @window_byte (windowLog = 10 + (byte >> 3) when the mantissa bits are 0), then
 * @n bytes (at most 128 KiB) as one raw last block.
 */
static void zstd_raw_frame(Buf *b, uint8_t window_byte, const uint8_t *data, size_t n) {
        static const uint8_t magic[4] = { 0x28, 0xb5, 0x2f, 0xfd };
        uint8_t hdr[2] = { 0x00, window_byte };
        uint32_t block = 1u | (uint32_t) n << 3;        /* last block, raw, n bytes */
        uint8_t bh[3] = { (uint8_t) block, (uint8_t) (block >> 8), (uint8_t) (block >> 16) };

        ck_assert_uint_le(n, 128u << 10);
        put(b, magic, 4);
        put(b, hdr, 2);
        put(b, bh, 3);
        put(b, data, n);
}

#define WINDOW_LOG_BYTE(log) ((uint8_t) (((log) - 10) << 3))

/* An unsigned bundle with one raw span of @length bytes at offset 0 whose frame is @frame. */
static Bundle *one_span_bundle(uint64_t length, const Buf *frame) {
        static const char z64[] = "0000000000000000000000000000000000000000000000000000000000000000";
        char manifest[2048];
        uint8_t hdr[BUNDLE_HEADER_SIZE];
        Bundle *b = NULL;
        TpError err = {};
        Buf f = {};

        int n = snprintf(manifest, sizeof(manifest),
                         "format: 1\ntask: caps\nversion: 1\ncreated: 2026-01-01T00:00:00Z\nkind: raw\n"
                         "base: {sha256: %s, size: %" PRIu64 ", layout: %s}\n"
                         "target: {sha256: %s, size: %" PRIu64 ", chunk_size: 4096, chunk_root: %s}\n"
                         "sites: {fingerprint: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855, "
                         "names: []}\n"
                         "payload: {size: %zu, sha256: %s}\n"
                         "spans:\n- {offset: 0, length: %" PRIu64 ", encoding: raw, base_sha256: %s, new_sha256: %s, "
                         "frame_offset: 0, frame_size: %zu}\n",
                         z64, length, z64, z64, length, z64, frame->n, z64, length, z64, z64, frame->n);
        ck_assert(n > 0 && (size_t) n < sizeof(manifest));
        bundle_header_encode(&(BundleHeader) { BUNDLE_FORMAT, (uint64_t) n, 0, frame->n }, hdr);
        put(&f, hdr, sizeof(hdr));
        put(&f, manifest, (size_t) n);
        put(&f, frame->p, frame->n);
        ck_assert_msg(bundle_open_fd(memfd_with(f.p, f.n), "caps.tpb", &b, &err) == 0, "%s", err.message);
        free(f.p);
        return b;
}

/*
 * A device checks the signature on the manifest's bytes before it parses them: an unsigned
 * bundle whose manifest is not even YAML is refused as unsigned, and one with a signature
 * block that is garbage as a bad signature — never with a parser's error.
 */
START_TEST(test_signature_before_parse) {
        static const char manifest[] = "{{{ not: yaml, and large in a real attack";
        static const uint8_t garbage_signature[64] = { 0x30, 0x82 };
        uint8_t hdr[BUNDLE_HEADER_SIZE];
        BundleTrust trust = { .ca_path = "/nonexistent-ca.pem" };
        Bundle *b = NULL;
        TpError err = {};

        for (int signed_ = 0; signed_ <= 1; signed_++) {
                size_t sig_len = signed_ ? sizeof(garbage_signature) : 0;
                Buf f = {};
                bundle_header_encode(&(BundleHeader) { BUNDLE_FORMAT, sizeof(manifest) - 1, sig_len, 0 }, hdr);
                put(&f, hdr, sizeof(hdr));
                put(&f, manifest, sizeof(manifest) - 1);
                put(&f, garbage_signature, sig_len);

                /* Parsed first (inspect, publish), the manifest's own error shows. */
                ck_assert_int_lt(bundle_open_fd(memfd_with(f.p, f.n), "x.tpb", &b, &err), 0);
                ck_assert_ptr_eq(b, NULL);
                ck_assert_msg(strstr(err.message, "manifest") != NULL, "%s", err.message);

                err = (TpError) {};
                int r = bundle_open_verified_fd(memfd_with(f.p, f.n), "x.tpb", &trust, &b, &err);
                ck_assert_ptr_eq(b, NULL);
                if (!signed_)
                        ck_assert_int_eq(r, -EKEYREJECTED);
                else
                        ck_assert_int_lt(r, 0);
                ck_assert_msg(strstr(err.message, signed_ ? "signature" : "unsigned") != NULL, "%s", err.message);
                ck_assert_msg(strstr(err.message, "yaml") == NULL && strstr(err.message, "YAML") == NULL, "%s",
                              err.message);
                free(f.p);
        }
}
END_TEST

/*
 * Format 2's manifest section is a zstd frame of the YAML: a bundle reads it back, and a device's
 * cap (limits.manifest_bytes) holds for the YAML it decodes to, not only for the frame.
 */
START_TEST(test_compressed_manifest) {
        Manifest m = { .format = MANIFEST_FORMAT_RELOCATING, .task = (char *) "t", .version = 1, .kind = ARTIFACT_RAW };
        ManifestSpan span = { .offset = 0, .length = 10, .encoding = SPAN_RAW, .frame_offset = 0, .frame_size = 5 };
        uint8_t hdr[BUNDLE_HEADER_SIZE];
        char *section = NULL, *text = NULL;
        size_t slen, tlen;
        Bundle *b = NULL;
        TpError err = {};
        Buf f = {};

        m.base.size = m.target.size = 10;
        m.target.chunk_size = 4096;
        m.payload.size = 5;
        m.spans = &span;
        m.n_spans = 1;
        sites_fingerprint(NULL, 0, m.sites_fingerprint);
        ck_assert_int_eq(manifest_write(&m, &text, &tlen, &err), 0);
        ck_assert_int_eq(manifest_section_write(&m, false, &section, &slen, &err), 0);
        ck_assert_uint_lt(slen, tlen);
        bundle_header_encode(&(BundleHeader) { BUNDLE_FORMAT_RELOCATING, slen, 0, 5 }, hdr);
        put(&f, hdr, sizeof(hdr));
        put(&f, section, slen);
        put(&f, "12345", 5);

        ck_assert_msg(bundle_open_fd(memfd_with(f.p, f.n), "z.tpb", &b, &err) == 0, "%s", err.message);
        ck_assert_uint_eq(b->manifest_len, slen);       /* the signed bytes are the frame */
        ck_assert_uint_eq(b->manifest->target.size, 10);
        b = bundle_free(b);

        BundleTrust trust = { .allow_unsigned = true, .max_manifest_bytes = tlen };
        ck_assert_msg(bundle_open_verified_fd(memfd_with(f.p, f.n), "z.tpb", &trust, &b, &err) == 0, "%s", err.message);
        b = bundle_free(b);
        trust.max_manifest_bytes = tlen - 1;
        ck_assert_int_eq(bundle_open_verified_fd(memfd_with(f.p, f.n), "z.tpb", &trust, &b, &err), -EBADMSG);
        ck_assert_ptr_null(b);
        ck_assert_msg(strstr(err.message, "z.tpb: manifest: the zstd frame declares") &&
                      strstr(err.message, "more than the cap"), "%s", err.message);

        /* The YAML itself under a format-2 header. */
        free(f.p);
        f = (Buf) {};
        bundle_header_encode(&(BundleHeader) { BUNDLE_FORMAT_RELOCATING, tlen, 0, 5 }, hdr);
        put(&f, hdr, sizeof(hdr));
        put(&f, text, tlen);
        put(&f, "12345", 5);
        ck_assert_int_eq(bundle_open_fd(memfd_with(f.p, f.n), "z.tpb", &b, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "does not start with the zstd magic"), "%s", err.message);
        free(f.p);
        free(text);
        free(section);
}
END_TEST

/* Read the one span in pieces, then move past it: 0, or the first error (its message in @err). */
static int read_span(Bundle *b, TpError *err) {
        static uint8_t buf[64 << 10];
        SpanReader *sr = NULL;
        const ManifestSpan *s;
        int r;

        ck_assert_int_eq(span_reader_new(b, &sr, err), 0);
        ck_assert_int_eq(span_reader_next(sr, &s, err), 1);
        r = 0;
        for (uint64_t left = s->length; left > 0 && r >= 0;) {
                size_t n = left < sizeof(buf) ? (size_t) left : sizeof(buf);
                r = span_reader_read(sr, buf, n, err);
                left -= n;
        }
        if (r >= 0)
                r = span_reader_next(sr, &s, err);     /* 0: no more spans, and the frame ended exactly */
        span_reader_free(sr);
        return r;
}

START_TEST(test_span_decoded_size) {
        static uint8_t data[1001];
        Buf frame = {};
        Bundle *b;
        TpError err = {};

        memset(data, 0xab, sizeof(data));

        /* Exactly the span's length. */
        zstd_raw_frame(&frame, WINDOW_LOG_BYTE(16), data, 1000);
        b = one_span_bundle(1000, &frame);
        ck_assert_msg(read_span(b, &err) == 0, "%s", err.message);
        bundle_free(b);

        /* One byte more than the span's length: the reader never returns it. */
        frame.n = 0;
        zstd_raw_frame(&frame, WINDOW_LOG_BYTE(16), data, 1001);
        b = one_span_bundle(1000, &frame);
        ck_assert_int_eq(read_span(b, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "caps.tpb: span #0 (offset 0, 1000 bytes): the frame decodes to more bytes "
                                          "than the span's length"), "%s", err.message);
        bundle_free(b);

        /* One byte less. */
        frame.n = 0;
        zstd_raw_frame(&frame, WINDOW_LOG_BYTE(16), data, 999);
        b = one_span_bundle(1000, &frame);
        ck_assert_int_eq(read_span(b, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "the frame ends before the span's length"), "%s", err.message);
        bundle_free(b);
        free(frame.p);
}
END_TEST

/* A frame may ask a reader for at most BUNDLE_WINDOW_LOG (8 MiB) of window memory. */
START_TEST(test_span_window_cap) {
        static const uint8_t data[100];
        Buf frame = {};
        Bundle *b;
        TpError err = {};

        zstd_raw_frame(&frame, WINDOW_LOG_BYTE(BUNDLE_WINDOW_LOG), data, sizeof(data));
        b = one_span_bundle(sizeof(data), &frame);
        ck_assert_msg(read_span(b, &err) == 0, "%s", err.message);
        bundle_free(b);

        frame.n = 0;
        zstd_raw_frame(&frame, WINDOW_LOG_BYTE(BUNDLE_WINDOW_LOG + 1), data, sizeof(data));
        b = one_span_bundle(sizeof(data), &frame);
        ck_assert_int_eq(read_span(b, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "caps.tpb: span #0 (offset 0, 100 bytes): the frame asks for a window "
                                          "larger than the 8 MiB cap"), "%s", err.message);
        bundle_free(b);
        free(frame.p);
}
END_TEST

static Suite *bundle_suite(void) {
        Suite *s = suite_create("bundle");
        TCase *tc = tcase_create("header");

        tcase_add_test(tc, test_round_trip);
        tcase_add_test(tc, test_every_bit_flip);
        tcase_add_test(tc, test_caps);
        tcase_add_test(tc, test_signature_before_parse);
        tcase_add_test(tc, test_compressed_manifest);
        suite_add_tcase(s, tc);

        tc = tcase_create("spans");
        tcase_add_test(tc, test_span_decoded_size);
        tcase_add_test(tc, test_span_window_cap);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(bundle_suite)
