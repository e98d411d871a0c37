/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The fleet fetcher: polls the configured channel (channel.url, mirrors
 * tried in order) over HTTPS with libcurl's multi interface on the event
 * loop, so the socket is never blocked; verifies it (signature, expiry, and
 * through the host a serial never lower than the last one accepted);
 * downloads the bundles it lists for this device's base into
 * <state_dir>/downloads/ (a partial file is kept and resumed with a Range
 * request; a body is cut at the size the channel declares); submits them to
 * the host as installs and switches to the channel's desired task, unless a
 * technician's switch pinned the task. What it reports (status
 * "channel.update") says "success" only once the trial committed,
 * "failure" with the reason after a rollback or a refusal.
 *
 *   idle --timer--> polling --200, verified--> (downloading --> installing) ... --> switching --> idle
 *                          --304--> idle               each step starts only when the host can_start()
 *
 * It knows the manager only as its SourceHost (taskpatchd-source.h).
 */

#include <jansson.h>
#include <stdbool.h>
#include <systemd/sd-event.h>

#include "channel.h"
#include "config.h"
#include "error.h"
#include "taskpatchd-curl.h"
#include "taskpatchd-source.h"

typedef struct Fetcher Fetcher;

/*
 * A fetcher for @c's channel, on @e, its transfers on @glue (borrowed: it must outlive the
 * fetcher), submitting to @host; *ret = NULL (and 0) when no channel is configured. The
 * first poll is a second after. Register it with fetcher_source.
 */
_warn_unused_result_ int fetcher_new(sd_event *e, const DaemonConfig *c, CurlGlue *glue, const SourceHost *host,
                                     Fetcher **ret, TpError *err);
Fetcher *fetcher_free(Fetcher *f);

/* Its callbacks for the manager; userdata is the Fetcher. */
extern const UpdateSource fetcher_source;

/* The "channel" object of the status (url, serial, state, last poll, errors, download, update). */
json_t *fetcher_status(const Fetcher *f);

/*
 * A channel verified (signature, expiry) from @url, taken (freed on failure): its serial
 * is offered to the host; then it is what the fetcher follows. -ESTALE for a replayed
 * serial (the channel is refused), -EIO when the serial cannot be recorded, else 0; each
 * failure is reported (status, error event) here. The poll does this; exported for the
 * unit test.
 */
int fetcher_take_channel(Fetcher *f, Channel *c, const char *url, TpError *err);

/* ---- the decisions, on plain data (for the unit test) ---- */

typedef struct TaskVersion {
        char task[TASK_NAME_MAX + 1];
        uint64_t version;
} TaskVersion;

#define FETCH_REFUSED_MAX 16

/* Bundles refused or failed under the current serial: not tried again until it changes. */
typedef struct FetchRefused {
        TaskVersion list[FETCH_REFUSED_MAX];
        size_t n;                       /* past FETCH_REFUSED_MAX, more are not remembered */
} FetchRefused;

bool fetch_refused_has(const FetchRefused *f, const char *task, uint64_t version);
void fetch_refused_add(FetchRefused *f, const char *task, uint64_t version);

/*
 * The next bundle to download: one made for @d's base (digest and kind), the newest of its
 * task in @c, newer than what is installed, not below the task's anti-rollback floor, not
 * refused; the desired task's first, else the first such in the channel's order. NULL: none.
 */
const ChannelBundle *fetch_next_bundle(const Channel *c, const DeviceView *d, const FetchRefused *refused,
                                       const SourceHost *host);
/* Whether installing @task switches to it at once: it is the desired task and no pin holds it. */
bool fetch_then_switch(const Channel *c, const ChannelView *cv, const char *task);
/*
 * What to switch to: exactly the version of the desired task the channel lists, once it is
 * installed, when it is not what runs, not refused and no pin holds it. NULL: nothing.
 */
const ChannelBundle *fetch_switch_target(const Channel *c, const DeviceView *d, const ChannelView *cv,
                                         const FetchRefused *refused, const SourceHost *host);
