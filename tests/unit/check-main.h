/* SPDX-License-Identifier: MIT */
#pragma once

/* The main() every unit-test binary shares: run one suite (fork mode unless CK_FORK=no), exit 1 on failure. */

#include <check.h>
#include <stdlib.h>

#define CHECK_MAIN(suite_fn)                                    \
        int main(void) {                                        \
                SRunner *sr = srunner_create(suite_fn());       \
                srunner_run_all(sr, CK_NORMAL);                 \
                int failed = srunner_ntests_failed(sr);         \
                srunner_free(sr);                               \
                return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE; \
        }
