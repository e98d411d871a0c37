/* SPDX-License-Identifier: MIT */
/* common/base/workbuf.c: zeroed buffers of any size, writable to their last byte, freed either way. */

#include <check.h>
#include <stdint.h>
#include <string.h>

#include "check-main.h"
#include "workbuf.h"

static const size_t sizes[] = { 0, 1, 100, (64u << 10) - 1, 64u << 10, (2u << 20) + 12345, 9u << 20 };

START_TEST(test_zeroed_and_writable) {
        size_t n = sizes[_i];
        uint8_t *p = workbuf_new(n);

        ck_assert_ptr_nonnull(p);
        ck_assert_uint_eq((uintptr_t) p % 16, 0);
        for (size_t k = 0; k < n; k += 4093)
                ck_assert_quiet(p[k] == 0, "byte %zu of %zu is not zero", k, n);
        if (n) {
                ck_assert_uint_eq(p[n - 1], 0);
                memset(p, 0xa5, n);
                ck_assert_uint_eq(p[n - 1], 0xa5);
        }
        workbuf_free(p);
}
END_TEST

START_TEST(test_free_null) {
        workbuf_free(NULL);
}
END_TEST

START_TEST(test_too_large) {
        ck_assert_ptr_null(workbuf_new(SIZE_MAX));
        ck_assert_ptr_null(workbuf_new(SIZE_MAX - 64));
}
END_TEST

static Suite *workbuf_suite(void) {
        Suite *s = suite_create("workbuf");
        TCase *tc = tcase_create("workbuf");

        tcase_add_loop_test(tc, test_zeroed_and_writable, 0, (int) (sizeof(sizes) / sizeof(sizes[0])));
        tcase_add_test(tc, test_free_null);
        tcase_add_test(tc, test_too_large);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(workbuf_suite)
