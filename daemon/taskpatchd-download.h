/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * HTTP for the fleet (the channel fetcher and the hawkBit client): the options every
 * transfer shares, and bundle downloads into <state_dir>/downloads/ that resume with a
 * Range request, are cut at the size the server side declared (bookworm's curl cannot cap
 * a body itself), and must hash to the declared SHA-256.
 */

#include <curl/curl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "sha256.h"
#include "taskpatchd-curl.h"

#define HTTP_LOW_SPEED_LIMIT 1024       /* bytes/s, for channel.low_speed_time seconds */

/* Reset @easy and set what every transfer shares: https only (unless allow_http), tls.ca, timeouts, rate, agent. */
_warn_unused_result_ int http_setup(CURL *easy, const DaemonConfig *c, const char *url);
/* A failed transfer in words: "URL: HTTP 404", "URL: too slow (...) or stalled: cut", "URL: refused: only https://". */
void http_describe(const DaemonConfig *c, CURLcode result, long status, const char *url, char *buf, size_t n);
/* @relative resolved against @base (malloc'd); NULL when that fails. */
char *http_resolve(const char *base, const char *relative);

/* A response body kept in memory, capped: a larger one ends its transfer. */
typedef struct HttpBody {
        uint8_t *data;
        size_t len, max;
        bool capped;                    /* the server sent more than max bytes: cut, the transfer failed */
} HttpBody;

/* Room for @max bytes; -ENOMEM. */
_warn_unused_result_ int http_body_init(HttpBody *b, size_t max);
/* Safe on a zeroed or done HttpBody. */
void http_body_done(HttpBody *b);
/*
 * http_setup() for a GET of @url into @b (emptied first), sending @headers (NULL: none), the
 * whole transfer within @timeout_sec. The caller may set more options before starting it.
 */
_warn_unused_result_ int http_setup_get(CURL *easy, const DaemonConfig *c, const char *url,
                                        const struct curl_slist *headers, long timeout_sec, HttpBody *b);

typedef enum DownloadResult {
        DOWNLOAD_OK,                    /* every byte, hashed right: the file is at path */
        DOWNLOAD_RETRY,                 /* the transfer failed; the partial file is kept for the next try */
        DOWNLOAD_BAD,                   /* the content is bad (wrong hash, gone from the server): file removed */
} DownloadResult;

typedef struct Download Download;
/* Called once per download_start(), from the event loop or (file already complete) before it returns. */
typedef void (*DownloadDone)(Download *d, DownloadResult result, const char *why, void *userdata);
/* Called at most five times a second while bytes arrive. */
typedef void (*DownloadProgress)(Download *d, void *userdata);

struct Download {
        char *url;
        char *path;                     /* <state_dir>/downloads/<name>.part */
        int fd;
        uint64_t have, size;            /* bytes on disk, bytes declared */
        uint8_t sha256[SHA256_DIGEST_SIZE];
        Sha256 hash;                    /* of the bytes on disk so far */
        bool overflow;                  /* the server sent more than declared */
        uint64_t last_progress_usec;
        const DaemonConfig *config;
        sd_event *event;
        CurlGlue *glue;                 /* borrowed */
        CURL *easy;                     /* borrowed; running while the download does */
        DownloadDone done;
        DownloadProgress progress;
        void *userdata;
};

#define DOWNLOAD_NULL ((Download) { .fd = -1 })

typedef struct DownloadSpec {
        const char *url;
        const char *name;               /* file name under downloads/ (".part" is added) */
        uint64_t size;
        const uint8_t *sha256;
        const struct curl_slist *headers;       /* extra request headers (hawkBit's Authorization), or NULL */
} DownloadSpec;

/* Start or resume a download. < 0 when it could not start (nothing called back). */
_warn_unused_result_ int download_start(Download *d, const DaemonConfig *c, sd_event *e, CurlGlue *g, CURL *easy,
                                        const DownloadSpec *spec, DownloadDone done, DownloadProgress progress,
                                        void *userdata);
/* Stop a running transfer (the partial file stays) and free the fields; safe on DOWNLOAD_NULL. */
void download_stop(Download *d);
/* Remove the file (installed, or no longer wanted) and download_stop(). */
void download_remove(Download *d);
/*
 * How far it got, {"done": N, "total": N}, after @what's fields (reference stolen; NULL:
 * none): the "download" events and the status's "download" objects of every source.
 */
json_t *download_json(const Download *d, json_t *what);
