/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The fleet fetcher: polls the configured channel (channel.url, mirrors
 * tried in order) once for every model of the device, over HTTPS with libcurl's multi interface on the event
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
 * Each model follows its section of the channel (format 1: the first model follows the
 * only one), unless the section's rollout leaves this device out or names a base the
 * device does not run. Downloads run one at a time, whatever the model.
 *
 * It knows each manager only as its SourceHost (taskpatchd-source.h).
 */

#include <jansson.h>
#include <stdbool.h>
#include <systemd/sd-event.h>

#include "channel.h"
#include "config.h"
#include "error.h"
#include "taskpatchd-curl.h"
#include "taskpatchd-download.h"
#include "taskpatchd-source.h"

typedef struct Fetcher Fetcher;
typedef struct FetchModel FetchModel;   /* the fetcher's side of one model */

/*
 * A fetcher for the channel of @targets[0].config (the device-wide keys are the same in
 * every view), on @e, its transfers on @glue (borrowed: it must outlive the fetcher),
 * serving the @n models of @targets (borrowed too) with one poll; *ret = NULL (and 0) when
 * no channel is configured. The first poll is a second after. Register each model's side
 * (fetcher_model()) with its manager as fetcher_source.
 */
_warn_unused_result_ int fetcher_new(sd_event *e, const SourceTarget *targets, size_t n, CurlGlue *glue,
                                     Fetcher **ret, TpError *err);
Fetcher *fetcher_free(Fetcher *f);
DEFINE_POINTER_CLEANUP(Fetcher, fetcher_free)

FetchModel *fetcher_model(Fetcher *f, size_t i);

/* Its callbacks for a manager; userdata is that manager's FetchModel. */
extern const UpdateSource fetcher_source;

/*
 * The "channel" object of a model's status: the channel's (url, serial, state, last poll,
 * errors) and the model's (its section's desired task and rollout, the device's cohort,
 * "decision": why it does or does not take the update, download, update).
 */
json_t *fetcher_status(const FetchModel *fm);

/*
 * A channel verified (signature, expiry) from @url, taken (freed on failure): its serial
 * is offered to every model's host; then it is what the fetcher follows. -ESTALE for a
 * replayed serial (the channel is refused), -EIO when the serial cannot be recorded, else
 * 0; each failure is reported (status, error event) here. The poll does this; exported for
 * the unit test.
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

/* The section of @c for the device's model @index named @name: format 1's one speaks for the first model. */
const ChannelModel *fetch_section(const Channel *c, size_t index, const char *name);

/*
 * Whether the device takes @cm's update: yes without a rollout, else when its cohort for the
 * rollout's seed (channel_cohort() of @device_id; "" = unknown, in no partial rollout) is
 * below the percent. *@ret_cohort: the cohort (UINT_MAX when there is none to compute);
 * @why (TP_ERROR_MAX bytes) says it in words.
 */
bool fetch_in_rollout(const ChannelModel *cm, const char *device_id, unsigned *ret_cohort, char *why);

/*
 * Whether the device runs the base @cm names (yes when it names none). When not,
 * *@ret_base is the base bundle that brings it there (channel_base_bundle(), not refused),
 * or NULL when it waits for one; @why (TP_ERROR_MAX bytes) says which.
 */
bool fetch_on_base(const Channel *c, const ChannelModel *cm, const DeviceView *d, const FetchRefused *refused,
                   const ChannelBundle **ret_base, char *why);

/*
 * The next bundle to download: one of @cm's made for @d's base (digest and kind), the newest
 * of its task, newer than what is installed, not below the task's anti-rollback floor, not
 * refused; the desired task's first, else the first such in the channel's order. NULL: none.
 */
const ChannelBundle *fetch_next_bundle(const Channel *c, const ChannelModel *cm, const DeviceView *d,
                                       const FetchRefused *refused, const SourceHost *host);
/* Whether installing @task switches to it at once: it is the desired task and no pin holds it. */
bool fetch_then_switch(const ChannelModel *cm, const ChannelView *cv, const char *task);
/*
 * What to switch to: exactly the version of the desired task @cm lists for @d's base, once
 * it is installed, when it is not what runs, not refused and no pin holds it. NULL: nothing.
 */
const ChannelBundle *fetch_switch_target(const Channel *c, const ChannelModel *cm, const DeviceView *d,
                                         const ChannelView *cv, const FetchRefused *refused,
                                         const SourceHost *host);

/*
 * ---- the fetcher's inside ----
 * For its own files only: taskpatchd-fetch.c (polls, downloads, installs, switches),
 * taskpatchd-fetch-status.c (its status) and taskpatchd-fetch-trust.c (the revocation list a
 * channel carries). Everything else knows a Fetcher through the functions above.
 */

#define CHANNEL_TIMEOUT_SEC 120         /* a whole channel transfer */

/* Where the fetcher's work on the channel stands (polls run beside it: Fetcher.polling). */
typedef enum FetchPhase {
        FETCH_IDLE,
        FETCH_DOWNLOADING,
        FETCH_INSTALLING,               /* our install (maybe with its switch) runs */
        FETCH_SWITCHING,                /* our switch runs, or its trial */
        _FETCH_PHASE_MAX,
} FetchPhase;

/* One model's side: what it downloads, installs and switches to, and why. */
struct FetchModel {
        Fetcher *f;
        const SourceHost *host;
        const DaemonConfig *config;     /* the model's view: its state_dir holds its downloads */
        size_t index;
        const char *name;               /* the model's */
        char log_prefix[TASK_NAME_MAX + 4];     /* "[MODEL] " with several models (as the manager's lines) */
        FetchPhase phase;
        FetchRefused refused;           /* under the current serial */
        char transaction[TRANSACTION_ID_SIZE];  /* of the operation we started */
        bool wait_for_poll;             /* a download failed: try again after the next poll, not at once */
        char last_error[TP_ERROR_MAX];  /* of its downloads, installs and switches */
        struct {
                TaskVersion what;
                const char *result;     /* NULL, "pending", "success", "failure" */
                char reason[TP_ERROR_MAX];
        } update;
};

struct Fetcher {
        const DaemonConfig *config;     /* the first model's view: the device-wide keys */
        sd_event *event;
        CurlGlue *glue;                 /* borrowed */
        CURL *easy;                     /* one handle for every transfer: its connections are reused */
        struct curl_slist *headers;
        sd_event_source *timer;         /* the next poll */
        sd_event_source *defer;         /* fetch_next() once the current callback has returned */
        bool polling;                   /* a channel transfer runs on easy */
        char device_id[CONFIG_DEVICE_ID_MAX + 1];      /* "" when there is none */
        const char *device_id_source;   /* "device_id", "/etc/machine-id" or "none" */

        size_t mirror;                  /* the URL being tried, or that answered last */
        unsigned failures;              /* polls in a row that failed everywhere: back-off */
        char etag[256];                 /* of the channel the mirror last sent (conditional GET) */
        HttpBody body;

        Channel *channel;               /* the last one accepted */
        Channel *pending;               /* waiting for its trust root or revocation list (fetched on easy) */
        char *pending_url;              /* where it came from */
        bool pending_root;              /* the file fetched is the trust root (else the revocation list) */
        char *channel_url;              /* where it came from: bundle paths are relative to it */
        Download dl;                    /* one at a time, whatever the model */
        FetchModel *dl_model;           /* whose download dl is, while it runs */
        TaskVersion dl_what;            /* what dl fetches */
        bool dl_base;                   /* ... a base bundle: switched to once installed (no pin holds it) */

        /* for status */
        char last_error[TP_ERROR_MAX];  /* of the polls */
        int64_t last_poll, last_change;
        uint64_t last_poll_bytes;       /* HTTP bytes of the last poll: request, headers, body */
        uint64_t polls;                 /* polls ended since the daemon started (answered or failed) */
        long last_status;

        FetchModel models[CONFIG_MAX_MODELS];
        size_t n_models;
};

/* A poll's error, reported once (through the first model). */
#define set_error(f, ...) source_error((f)->models[0].host, "channel", (f)->last_error, __VA_ARGS__)
/* A model's own. */
#define set_model_error(fm, ...) source_error((fm)->host, "channel", (fm)->last_error, __VA_ARGS__)

/* The section of the channel @fm follows, or NULL. */
const ChannelModel *fetch_model_section(const FetchModel *fm);
/*
 * The channel's signature and expiry, against trust.channel_ca, the CRLs and the revocation
 * list the device holds, at the host's clock.
 */
_warn_unused_result_ int fetch_verify_channel(Fetcher *f, const Channel *c, const char *url, TpError *err);
/* A poll failed at this mirror (the channel is not taken): the next one now, or back off. */
void fetch_poll_failed(Fetcher *f, const char *why);

/*
 * A poll's channel @c (parsed, from @url; taken), up to the end (taskpatchd-fetch-trust.c):
 * 1. the trust root it names, when newer than the device's, fetched and given to the host
 *    *before* the channel's signature is checked: the root may be what rotates the channel
 *    role (the root stands on its own signatures, never on the channel's);
 * 2. the channel verified (fetch_verify_channel());
 * 3. the revocation list it names, when newer, fetched and given to the host, and the
 *    channel verified again under it;
 * 4. the channel taken (fetcher_take_channel()).
 * Each file is checked against the channel's size and SHA-256; one that cannot be had or is
 * refused fails the poll at this mirror, so nothing it revokes or retires is used.
 * @root_done: step 1 was done (this call continues after it).
 */
void fetch_channel_continue(Fetcher *f, Channel *c, const char *url, bool root_done);
