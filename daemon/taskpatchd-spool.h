/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The spool folder (config "spool:"): a bundle dropped there, from a USB
 * stick or over scp, is installed as 'tpctl install' would install it. The
 * folder is watched with inotify (a file counts once it is closed after
 * writing or renamed into the folder) and scanned at start for what arrived
 * while the daemon was down. One bundle at a time, when the manager is
 * idle; then it is moved to installed/, or to rejected/ with a
 * <name>.reason file saying why. Names starting with '.' are ignored (copy
 * under a dot-name, then rename).
 */

#include "error.h"

typedef struct Manager Manager;
typedef struct Operation Operation;
typedef struct Spool Spool;

/* A watcher of @m's configured spool folder (created 0700 if missing); *ret = NULL when none is configured. */
_warn_unused_result_ int spool_new(Manager *m, Spool **ret, TpError *err);
Spool *spool_free(Spool *s);

/* From the manager: an operation ended (@r < 0: failed). */
void spool_operation_done(Spool *s, const Operation *op, int r);
/* From the manager: it is idle again; the next bundle may go in. NULL-safe. */
void spool_kick(Spool *s);
