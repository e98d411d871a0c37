/* SPDX-License-Identifier: MIT */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timex.h>
#include <unistd.h>

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

bool clock_synchronized(void) {
        const char *e = getenv("TASKPATCH_TEST_SYNCHRONIZED");
        struct timex tx = { 0 };

        if (e && (strcmp(e, "0") == 0 || strcmp(e, "1") == 0))
                return e[0] == '1';
        if (access("/run/systemd/timesync/synchronized", F_OK) == 0)
                return true;
        int state = adjtimex(&tx);
        return state >= 0 && state != TIME_ERROR && !(tx.status & STA_UNSYNC);
}

uint64_t clock_mono_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
}
