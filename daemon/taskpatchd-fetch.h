/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The fleet fetcher: polls the configured channel (channel.url, mirrors
 * tried in order) over HTTPS with libcurl's multi interface on the event
 * loop, so the socket is never blocked; verifies it (signature, expiry,
 * serial never lower than the last one accepted, persisted); downloads the
 * bundles it lists for this device's base into <state_dir>/downloads/
 * (a partial file is kept and resumed with a Range request; a body is cut
 * at the size the channel declares); installs them and switches to the
 * channel's desired task through the normal operations and trial. What it
 * reports (status "channel.update") says "success" only once the trial
 * committed, "failure" with the reason after a rollback or a refusal.
 *
 *   idle --timer--> polling --200, verified--> (downloading --> installing) ... --> switching --> idle
 *                          --304--> idle               each step starts only when the manager is idle
 */

#include <jansson.h>
#include <stdbool.h>

#include "error.h"

typedef struct Manager Manager;
typedef struct Operation Operation;
typedef struct Fetcher Fetcher;

/* A fetcher for @m's configured channel; *ret = NULL (and 0) when no channel is configured. */
_warn_unused_result_ int fetcher_new(Manager *m, Fetcher **ret, TpError *err);
Fetcher *fetcher_free(Fetcher *f);

/* From the manager: an operation ended (@r < 0: failed), a trial ended. */
void fetcher_operation_done(Fetcher *f, const Operation *op, int r);
void fetcher_trial_done(Fetcher *f, const char *transaction, bool committed, const char *reason);

/* The "channel" object of the status (url, serial, state, last poll, errors, download, update). */
json_t *fetcher_status(const Fetcher *f);
