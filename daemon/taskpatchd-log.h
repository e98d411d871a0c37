/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The daemon's voice: lines on stderr with "<N>" syslog priority prefixes
 * (journald reads them when it runs the service), and lifecycle events as
 * structured journal entries (TASK, VERSION, SLOT, SHA256, TRANSACTION_ID).
 */

#include <syslog.h>

#include "macro.h"

/* Messages above this priority are dropped; TASKPATCHD_LOG_LEVEL=debug|info|notice|warning|err sets it. */
void log_setup(void);
_printf_(2, 3) void log_full(int priority, const char *fmt, ...);

#define log_debug(...) log_full(LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_full(LOG_INFO, __VA_ARGS__)
#define log_notice(...) log_full(LOG_NOTICE, __VA_ARGS__)
#define log_warning(...) log_full(LOG_WARNING, __VA_ARGS__)
#define log_error(...) log_full(LOG_ERR, __VA_ARGS__)

/* Log a negative errno @r with a message and return @r. */
#define log_error_errno(r, ...) (log_error(__VA_ARGS__), (r))

/*
 * A lifecycle event ("staged", "activated", "committed", "rolled-back") of @model to the
 * journal with its fields (MODEL too), and a line on stderr that starts with @prefix ("" or
 * "[MODEL] ", as the manager's lines do). @task NULL = the base.
 */
void log_lifecycle(const char *model, const char *prefix, const char *event, const char *task,
                   unsigned long long version, const char *slot, const char *sha256, const char *transaction,
                   const char *detail);
