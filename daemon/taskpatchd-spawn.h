/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Run a configured command (a health check, a notify hook) with /bin/sh -c: stdin from
 * /dev/null, stdout and stderr inherited, no other descriptor, default signal mask and
 * SIGPIPE, its own process group (so a timeout can kill the whole group), and the daemon's
 * environment without what systemd meant for the daemon alone (NOTIFY_SOCKET, WATCHDOG_*,
 * LISTEN_*), plus @extra_env ("NAME=value" strings, NULL-terminated; may be NULL).
 * The caller reaps the child (sd_event_add_child). Returns 0 or -errno.
 */

#include <sys/types.h>

#include "macro.h"

_warn_unused_result_ int shell_spawn(const char *command, char *const extra_env[], pid_t *ret_pid);
