/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Error context for library code. Functions return 0 (or a count) on
 * success and a negative errno on failure, as everywhere; those that can
 * say more also take a `TpError *err` (last parameter, may be NULL) and
 * fill it with a message that names what was wrong: the file, the field,
 * the offset, what was expected and what was found. The caller decides
 * whether and how to show it; library code never prints.
 *
 *     return tp_error(err, -EBADMSG, "tensor '%s': offset %" PRIu64 " past the end of the file (%" PRIu64 ")", ...);
 */

#include <stdarg.h>

#include "macro.h"

#define TP_ERROR_MAX 512

typedef struct TpError {
        int code;                       /* the negative errno last returned through this, 0 if none */
        char message[TP_ERROR_MAX];     /* "" if none */
} TpError;

/* Record the message in @e (when not NULL) and return @code (a negative errno). */
_printf_(3, 4) int tp_error(TpError *e, int code, const char *fmt, ...);

/*
 * Put "<context>: " in front of the message already in @e (or of
 * strerror(-code) when it has none) and return @code. For callers adding
 * where they were: "bundle.tpb: manifest: line 12: ...".
 */
_printf_(3, 4) int tp_error_prefix(TpError *e, int code, const char *fmt, ...);

/* The message of @e, or strerror(-code) if it holds none. Never NULL. */
const char *tp_error_message(const TpError *e, int code);
