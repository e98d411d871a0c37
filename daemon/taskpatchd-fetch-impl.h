/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The fetcher's inside, shared by its files: taskpatchd-fetch.c (polls, downloads, installs,
 * switches), taskpatchd-fetch-status.c (its status) and taskpatchd-fetch-trust.c (the
 * revocation list a channel carries). Nothing else includes it.
 */

#include <curl/curl.h>

#include "taskpatchd-download.h"
#include "taskpatchd-fetch.h"

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
        Channel *pending;               /* verified, waiting for its revocation list (fetched on easy) */
        char *pending_url;              /* where it came from */
        char *channel_url;              /* where it came from: bundle paths are relative to it */
        Download dl;                    /* one at a time, whatever the model */
        FetchModel *dl_model;           /* whose download dl is, while it runs */
        TaskVersion dl_what;            /* what dl fetches */
        bool dl_base;                   /* ... a base bundle: switched to once installed (no pin holds it) */

        /* for status */
        char last_error[TP_ERROR_MAX];  /* of the polls */
        int64_t last_poll, last_change;
        uint64_t last_poll_bytes;       /* HTTP bytes of the last poll: request, headers, body */
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
/* A poll failed at this mirror (the channel is not taken): the next one now, or back off. */
void fetch_poll_failed(Fetcher *f, const char *why);

/*
 * The revocation list a verified channel @c (from @url) names, when it is newer than the
 * device's: fetched, checked against the channel's size and SHA-256 and given to the host
 * before the channel is taken (fetcher_take_channel()), so nothing the list revokes is
 * downloaded or installed under it. True when that transfer started (it owns @c then).
 */
bool fetch_revocations_start(Fetcher *f, Channel **c, const char *url);
