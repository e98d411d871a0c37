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
 * under a dot-name, then rename). On a device of several models, a bundle goes
 * to the model its manifest names (one the device does not have is rejected).
 */

#include <systemd/sd-event.h>

#include "config.h"
#include "error.h"
#include "taskpatchd-source.h"

typedef struct Spool Spool;

/*
 * A watcher of the spool folder of @targets[0].config (created 0700 if missing) on @e,
 * submitting to the hosts of the @n models of @targets (copied; what they point to is
 * borrowed); *ret = NULL when none is configured. What is in the folder already is looked
 * at once the loop runs. Register it with every model's manager as spool_source.
 */
_warn_unused_result_ int spool_new(sd_event *e, const SourceTarget *targets, size_t n, Spool **ret, TpError *err);
Spool *spool_free(Spool *s);
DEFINE_POINTER_CLEANUP(Spool, spool_free)

/* Its callbacks for each manager (operation_done, idle); userdata is the Spool. */
extern const UpdateSource spool_source;
