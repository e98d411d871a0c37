/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The manager's update policy on the persistent state, without I/O (the manager writes
 * state.json afterwards):
 *   - a channel's serial never goes down: a lower one is a replay, refused;
 *   - a technician's switch (any switch the channel did not ask for) pins the task that
 *     runs: the channel's desired task waits until a channel with another serial arrives.
 */

#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "error.h"
#include "taskpatchd-source.h"
#include "taskpatchd-store.h"

/*
 * The serial of a verified channel: -ESTALE (@err says so) when it is below the accepted
 * one, 0 when it is the accepted one, 1 when it is new: recorded in @ps, and a pin made
 * under another serial dropped (*@ret_unpinned true, else false).
 */
_warn_unused_result_ int policy_channel_serial(PersistentState *ps, uint64_t serial, bool *ret_unpinned,
                                               TpError *err);

/*
 * The time a signature's dates are checked at (sign.h) under trust.clock @policy, for a wall
 * clock reading @wall, the @build time it cannot be before, and @seen, the newest accepted
 * channel's time (0: none), which time never goes back behind. @wall when it is past both;
 * else, build-floor: @seen when that is past the build (dates are checked at the newest time
 * known), or SIGNATURE_CLOCK_UNKNOWN (dates not checked, everything else is). Strict refuses
 * instead, -EKEYREJECTED with @err saying why, and also when the clock is not @synchronized.
 */
_warn_unused_result_ int policy_dates_now(ClockPolicy policy, time_t wall, time_t build, time_t seen,
                                          bool synchronized, time_t *ret, TpError *err);

/*
 * An operation ended (@r < 0: failed): a switch that ended well and that @origin was not
 * the channel (nor the daemon's own, ORIGIN_DAEMON) pins under the accepted serial. True when it pinned (@ps changed); never
 * before a channel was accepted.
 */
bool policy_pin(PersistentState *ps, UpdateOrigin origin, const char *cmd, int r);
