/* SPDX-License-Identifier: MIT */
#pragma once

/* The main() every unit-test binary shares: run one suite (fork mode unless CK_FORK=no), exit 1 on failure. */

#include <check.h>
#include <stdlib.h>

/*
 * ck_assert_msg for the inner loops: Check records every passing ck_assert_* (its line, one
 * write(2) to the runner), which across millions of bytes or pairs costs more than the test;
 * this records the failure only.
 */
#define ck_assert_quiet(expr, ...)                              \
        do {                                                    \
                if (!(expr))                                    \
                        ck_abort_msg(__VA_ARGS__);              \
        } while (0)

#define CHECK_MAIN(suite_fn)                                    \
        int main(void) {                                        \
                SRunner *sr = srunner_create(suite_fn());       \
                srunner_run_all(sr, CK_NORMAL);                 \
                int failed = srunner_ntests_failed(sr);         \
                srunner_free(sr);                               \
                return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE; \
        }
