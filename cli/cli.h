/* SPDX-License-Identifier: MIT */
#pragma once

/* What the command-line tools share: messages to stderr, exit codes, version. */

#include <stdbool.h>

#include "macro.h"

#ifndef TASKPATCH_VERSION
#  define TASKPATCH_VERSION "unknown"
#endif

/* Exit codes of taskpatch (tpctl has its own set, documented in tpctl(1)). */
enum {
        EXIT_OK = 0,
        EXIT_FAILED = 1,        /* something did not hold or could not be done */
        EXIT_USAGE = 2,         /* bad arguments */
};

/* "taskpatch hash" etc.: the prefix of every message. Set once by main. */
extern const char *cli_program;

/* Print "<program>: <message>\n" to stderr. */
_printf_(1, 2) void cli_error(const char *fmt, ...);

/* Select kernels per TASKPATCH_KERNEL; complain and return -errno when it names nothing usable. */
int cli_init_kernels(void);

#include <stdint.h>

#include "artifact.h"
#include "clock.h"          /* clock_wall(): the time every command reads */

/* Open @path read-only and parse it as an artifact; prints the error and returns -errno on failure. */
int cli_open_artifact(const char *path, int *ret_fd, Artifact **ret);

/* A number of days, 1..36500 (a validity), as seconds; prints "--NAME: ..." and returns -EINVAL when bad. */
int cli_parse_days(const char *option, const char *value, int64_t *ret_seconds);

/* Parse a decimal unsigned integer option value; prints "--NAME: ..." and returns -EINVAL when bad. */
int cli_parse_u64(const char *option, const char *value, uint64_t *ret);
