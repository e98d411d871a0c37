/* SPDX-License-Identifier: MIT */
/* The channel's serial and the technician's pin (taskpatchd-policy.h). */

#include <inttypes.h>
#include <string.h>

#include "parse.h"
#include "sign.h"
#include "taskpatchd-policy.h"

int policy_channel_serial(PersistentState *ps, uint64_t serial, bool *ret_unpinned, TpError *err) {
        *ret_unpinned = false;
        if (ps->have_channel && serial < ps->channel_serial)
                return tp_error(err, -ESTALE, "serial %" PRIu64 " is older than the accepted %" PRIu64
                                " (a replayed channel): refused", serial, ps->channel_serial);
        if (ps->have_channel && serial == ps->channel_serial)
                return 0;
        ps->have_channel = true;
        ps->channel_serial = serial;
        if (ps->pinned && ps->pinned_serial != serial) {
                ps->pinned = false;
                *ret_unpinned = true;
        }
        return 1;
}

int policy_dates_now(ClockPolicy policy, time_t wall, time_t build, time_t seen, bool synchronized, time_t *ret,
                     TpError *err) {
        time_t floor = build > seen ? build : seen;
        char now[21], before[21];

        *ret = SIGNATURE_CLOCK_UNKNOWN;
        if (wall <= 0 || wall < floor) {
                if (policy != CLOCK_STRICT) {
                        if (seen > 0 && seen >= build)
                                *ret = seen;    /* the newest time known: expired keys are still refused */
                        return 0;
                }
                format_time_utc((int64_t) wall, now);
                format_time_utc((int64_t) floor, before);
                return tp_error(err, -EKEYREJECTED, "the clock reads %s, before %s (%s): trust.clock strict verifies "
                                "nothing until it is set", now, before,
                                floor == seen ? "the newest channel accepted" : "this build");
        }
        if (policy == CLOCK_STRICT && !synchronized)
                return tp_error(err, -EKEYREJECTED, "the clock is not synchronized to network time: trust.clock strict "
                                "verifies nothing until it is");
        *ret = wall;
        return 0;
}

bool policy_pin(PersistentState *ps, UpdateOrigin origin, const char *cmd, int r) {
        if (r < 0 || origin == ORIGIN_CHANNEL || origin == ORIGIN_DAEMON || strcmp(cmd, "switch") != 0 ||
            !ps->have_channel)
                return false;
        ps->pinned = true;
        ps->pinned_serial = ps->channel_serial;
        return true;
}
