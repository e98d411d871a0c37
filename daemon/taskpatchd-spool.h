/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The spool folder (config "spool:"): a bundle dropped there, from a USB
 * stick or over scp, is installed as 'tpctl install' would install it. The
 * folder is watched with inotify (a file counts once it is closed after
 * writing or renamed into the folder) and scanned at start for what arrived
 * while the daemon was down. One bundle at a time, submitted to the host
 * when it can_start(); then it is moved to installed/, or to rejected/ with a
 * <name>.reason file saying why. Names starting with '.' are ignored (copy
 * under a dot-name, then rename).
 */

#include <systemd/sd-event.h>

#include "config.h"
#include "error.h"
#include "taskpatchd-source.h"

typedef struct Spool Spool;

/*
 * A watcher of @c's spool folder (created 0700 if missing) on @e, submitting to @host;
 * *ret = NULL when none is configured. What is in the folder already is looked at once
 * the loop runs. Register it with spool_source.
 */
_warn_unused_result_ int spool_new(sd_event *e, const DaemonConfig *c, const SourceHost *host, Spool **ret,
                                   TpError *err);
Spool *spool_free(Spool *s);

/* Its callbacks for the manager (operation_done, idle); userdata is the Spool. */
extern const UpdateSource spool_source;
