/* SPDX-License-Identifier: MIT */

#include <stdint.h>
#include <stdlib.h>

#include "clock.h"
#include "parse.h"

#ifndef TASKPATCH_BUILD_EPOCH
#  define TASKPATCH_BUILD_EPOCH 0
#endif

time_t clock_wall(void) {
        const char *e = getenv("TASKPATCH_TEST_NOW");
        uint64_t v;

        if (e && parse_u64(e, &v) >= 0)
                return (time_t) v;
        return time(NULL);
}

time_t clock_floor(void) {
        return (time_t) TASKPATCH_BUILD_EPOCH;
}
