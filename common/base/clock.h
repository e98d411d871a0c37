/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The wall clock, as every date check in TaskPatch reads it.
 *
 * Tests move it through the environment: TASKPATCH_TEST_NOW=<seconds since
 * the epoch> replaces the real clock (faketime does not mix with
 * AddressSanitizer). It only moves dates (bundle and certificate expiry,
 * trial start times shown in status); timers run on CLOCK_MONOTONIC.
 *
 * A device without a real-time clock boots in 1970 until network time
 * arrives. Such a device must not lock itself out by refusing every
 * certificate as "not yet valid", so clock_for_dates() (sign.h: it speaks
 * the signature checks' convention) reports a clock that reads earlier than
 * clock_floor(), the build (TASKPATCH_BUILD_EPOCH, set by the Makefile from
 * SOURCE_DATE_EPOCH, the last commit or the build itself), as unknown, and
 * the date checks are skipped (see CLOCK in sign.h for the trade-off).
 */

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

/* Seconds since the epoch: TASKPATCH_TEST_NOW when set to a number, else time(NULL). */
time_t clock_wall(void);
/* CLOCK_MONOTONIC in nanoseconds: for durations (a step's time cap), never for dates. */
uint64_t clock_mono_ns(void);
/* The time before which the clock is known to be wrong (the build time; 0 when unknown). */
time_t clock_floor(void);
/*
 * Whether the system clock is synchronized to network time: systemd-timesyncd's
 * /run/systemd/timesync/synchronized exists, or the kernel's NTP state says so (adjtimex(2),
 * which chrony and ntpd keep too). TASKPATCH_TEST_SYNCHRONIZED=0|1 replaces the answer in tests.
 */
bool clock_synchronized(void);
