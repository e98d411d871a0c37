/* SPDX-License-Identifier: MIT */
#pragma once

/* What the command-line tools share: messages to stderr, exit codes, version. */

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

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

/*
 * A failure of a command that has --json: the message on stderr as cli_error() prints it and, when
 * @json, {"ok": false, "error": MESSAGE} on standard output, so a script parsing the output always
 * gets one object. Returns EXIT_FAILED.
 */
_printf_(2, 3) int cli_fail(bool json, const char *fmt, ...);

/*
 * Print @j (taken: freed here) on standard output, indented, keys in insertion order. NULL (what
 * json_pack() returns for a string that is not UTF-8, or out of memory) is an error, printed on stderr.
 * Returns 0 or -EINVAL.
 */
int cli_print_json(json_t *j);

/* A number of days, 1..36500 (a validity), as seconds; prints "--NAME: ..." and returns -EINVAL when bad. */
int cli_parse_days(const char *option, const char *value, int64_t *ret_seconds);

/* Parse a decimal unsigned integer option value; prints "--NAME: ..." and returns -EINVAL when bad. */
int cli_parse_u64(const char *option, const char *value, uint64_t *ret);
