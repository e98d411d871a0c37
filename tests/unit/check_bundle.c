/* SPDX-License-Identifier: MIT */
/* common/bundle.c: the fixed header's rules. (Whole bundles: tests/integration/test-bundle.sh.) */

#include <check.h>
#include <string.h>

#include "bundle.h"
#include "check-main.h"

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

/* Every single-bit flip of a header is refused (or, for a size field, contradicts the file size). */
START_TEST(test_every_bit_flip) {
        uint8_t h[BUNDLE_HEADER_SIZE];
        BundleHeader out;

        for (unsigned bit = 0; bit < 8 * BUNDLE_HEADER_SIZE; bit++) {
                good_header(h);
                h[bit / 8] ^= (uint8_t) (1u << (bit % 8));
                TpError err = {};
                int r = bundle_header_decode(h, 64 + 1000 + 200 + 5000, &out, &err);
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

static Suite *bundle_suite(void) {
        Suite *s = suite_create("bundle");
        TCase *tc = tcase_create("header");

        tcase_add_test(tc, test_round_trip);
        tcase_add_test(tc, test_every_bit_flip);
        tcase_add_test(tc, test_caps);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(bundle_suite)
