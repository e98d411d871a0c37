/* SPDX-License-Identifier: MIT */
/* HTTP options and resumable bundle downloads for the fleet (taskpatchd-download.h). */

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fileio.h"
#include "taskpatchd-download.h"

int http_setup(CURL *easy, const DaemonConfig *c, const char *url) {
        const char *protocols = c->channel.allow_http ? "http,https" : "https";
        CURLcode r = CURLE_OK;

        curl_easy_reset(easy);
#define SET(opt, val) \
        if (r == CURLE_OK) \
        r = curl_easy_setopt(easy, opt, val)
        SET(CURLOPT_URL, url);
        SET(CURLOPT_PROTOCOLS_STR, protocols);
        SET(CURLOPT_REDIR_PROTOCOLS_STR, protocols);
        SET(CURLOPT_FOLLOWLOCATION, 1L);
        SET(CURLOPT_MAXREDIRS, 5L);
        SET(CURLOPT_NOSIGNAL, 1L);
        SET(CURLOPT_CONNECTTIMEOUT, 30L);
        SET(CURLOPT_LOW_SPEED_LIMIT, (long) HTTP_LOW_SPEED_LIMIT);
        SET(CURLOPT_LOW_SPEED_TIME, (long) c->channel.low_speed_time);
        SET(CURLOPT_USERAGENT, "taskpatchd/" TASKPATCH_VERSION);
        if (c->tls.ca)
                SET(CURLOPT_CAINFO, c->tls.ca);
        if (c->channel.max_download_rate)
                SET(CURLOPT_MAX_RECV_SPEED_LARGE, (curl_off_t) c->channel.max_download_rate);
        /* Keep the connection between polls (libcurl drops one idle for 118 s), if the server does too. */
        SET(CURLOPT_MAXAGE_CONN, (long) (c->channel.interval * 6 / 5 + 60));
#undef SET
        return r == CURLE_OK ? 0 : -EINVAL;
}

void http_describe(const DaemonConfig *c, CURLcode result, long status, const char *url, char *buf, size_t n) {
        if (result == CURLE_UNSUPPORTED_PROTOCOL)
                snprintf(buf, n, "%s: refused: only https:// is allowed (a redirect to http:// counts)", url);
        else if (result == CURLE_OPERATION_TIMEDOUT)
                snprintf(buf, n, "%s: too slow (under %d bytes/s for %" PRIu64 " s) or stalled: cut", url,
                         HTTP_LOW_SPEED_LIMIT, c->channel.low_speed_time);
        else if (result != CURLE_OK)
                snprintf(buf, n, "%s: %s", url, curl_easy_strerror(result));
        else
                snprintf(buf, n, "%s: HTTP %ld", url, status);
}

char *http_resolve(const char *base, const char *relative) {
        CURLU *u = curl_url();
        char *out = NULL, *copy = NULL;

        if (u && curl_url_set(u, CURLUPART_URL, base, 0) == CURLUE_OK &&
            curl_url_set(u, CURLUPART_URL, relative, 0) == CURLUE_OK &&
            curl_url_get(u, CURLUPART_URL, &out, 0) == CURLUE_OK) {
                copy = strdup(out);
                curl_free(out);
        }
        curl_url_cleanup(u);
        return copy;
}

int http_body_init(HttpBody *b, size_t max) {
        *b = (HttpBody) { .data = malloc(max), .max = max };
        return b->data ? 0 : -ENOMEM;
}

void http_body_done(HttpBody *b) {
        free(b->data);
        *b = (HttpBody) {};
}

static size_t on_body_data(char *data, size_t size, size_t nmemb, void *userdata) {
        HttpBody *b = userdata;
        size_t n = size * nmemb;

        if (n > b->max - b->len) {
                b->capped = true;
                return 0;
        }
        memcpy(b->data + b->len, data, n);
        b->len += n;
        return n;
}

int http_setup_get(CURL *easy, const DaemonConfig *c, const char *url, const struct curl_slist *headers,
                   long timeout_sec, HttpBody *b) {
        b->len = 0;
        b->capped = false;
        if (http_setup(easy, c, url) < 0 || curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_body_data) ||
            curl_easy_setopt(easy, CURLOPT_WRITEDATA, b) || curl_easy_setopt(easy, CURLOPT_TIMEOUT, timeout_sec) ||
            curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers))
                return -EINVAL;
        return 0;
}

void download_stop(Download *d) {
        if (d->glue && d->easy)
                curl_glue_remove(d->glue, d->easy);
        safe_close(d->fd);
        free(d->url);
        free(d->path);
        *d = DOWNLOAD_NULL;
}

void download_remove(Download *d) {
        if (d->path)
                (void) unlink(d->path);
        download_stop(d);
}

json_t *download_json(const Download *d, json_t *what) {
        json_t *o = what ? what : json_object();

        json_object_set_new(o, "done", json_integer((json_int_t) d->have));
        json_object_set_new(o, "total", json_integer((json_int_t) d->size));
        return o;
}

/* Report and forget the transfer (the caller's callback may start the next download). */
static void finish(Download *d, DownloadResult result, const char *why) {
        if (result == DOWNLOAD_BAD)
                (void) unlink(d->path);
        d->fd = safe_close(d->fd);
        d->easy = NULL;         /* no longer running */
        d->done(d, result, why, d->userdata);
}

static void check_hash(Download *d) {
        uint8_t digest[SHA256_DIGEST_SIZE];
        char why[TP_ERROR_MAX];
        Sha256 h = d->hash;

        sha256_final(&h, digest);
        if (memcmp(digest, d->sha256, sizeof(digest)) != 0) {
                snprintf(why, sizeof(why), "%s: %" PRIu64 " bytes that do not hash as declared (damaged or tampered): "
                         "removed", d->url, d->have);
                finish(d, DOWNLOAD_BAD, why);
                return;
        }
        finish(d, DOWNLOAD_OK, NULL);
}

static size_t on_data(char *data, size_t size, size_t nmemb, void *userdata) {
        Download *d = userdata;
        size_t n = size * nmemb;
        /* What goes past the declared size is never written. */
        size_t take = n < d->size - d->have ? n : (size_t) (d->size - d->have);
        uint64_t now = 0;

        if (write_full(d->fd, data, take) < 0)
                return 0;
        sha256_update(&d->hash, data, take);
        d->have += take;
        (void) sd_event_now(d->event, CLOCK_MONOTONIC, &now);
        if (d->progress && (now - d->last_progress_usec >= 200000 || d->have == d->size)) {
                d->last_progress_usec = now;
                d->progress(d, d->userdata);
        }
        if (take < n) {
                d->overflow = true;
                return 0;       /* ends the transfer */
        }
        return n;
}

static void on_done(CurlGlue *g _unused_, CURL *easy, CURLcode result, void *userdata) {
        Download *d = userdata;
        long status = 0;
        char why[TP_ERROR_MAX];

        (void) curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
        if (d->overflow) {
                snprintf(why, sizeof(why), "%s: the server sent more than the %" PRIu64 " bytes declared: cut", d->url,
                         d->size);
                /* The first size bytes are kept: if they hash right, they are the bundle. */
                if (d->have < d->size)
                        finish(d, DOWNLOAD_BAD, why);
                else
                        check_hash(d);
                return;
        }
        if (result == CURLE_RANGE_ERROR) {
                /* The server ignored the Range request: start over from the first byte next time. */
                if (ftruncate(d->fd, 0) < 0)
                        (void) unlink(d->path);
                snprintf(why, sizeof(why), "%s: the server cannot resume (no Range support): the download starts over",
                         d->url);
                finish(d, DOWNLOAD_RETRY, why);
                return;
        }
        if (result != CURLE_OK || (status != 200 && status != 206)) {
                http_describe(d->config, result, status, d->url, why, sizeof(why));
                /* Kept for resuming (drop-request, stalls), unless the server says it is gone. */
                finish(d, status == 404 || status == 410 ? DOWNLOAD_BAD : DOWNLOAD_RETRY, why);
                return;
        }
        if (d->have != d->size) {
                snprintf(why, sizeof(why), "%s: %" PRIu64 " of %" PRIu64 " bytes (the body ended early)", d->url,
                         d->have, d->size);
                finish(d, DOWNLOAD_RETRY, why);
                return;
        }
        check_hash(d);
}

/* Continue the hash over what a previous attempt left on disk. */
static int hash_existing(Download *d) {
        uint8_t buf[65536];

        for (uint64_t off = 0; off < d->have;) {
                size_t n = d->have - off < sizeof(buf) ? (size_t) (d->have - off) : sizeof(buf);
                int r = pread_full(d->fd, buf, n, off);
                if (r < 0)
                        return r;
                sha256_update(&d->hash, buf, n);
                off += n;
        }
        return 0;
}

int download_start(Download *d, const DaemonConfig *c, sd_event *e, CurlGlue *g, CURL *easy, const DownloadSpec *spec,
                   DownloadDone done, DownloadProgress progress, void *userdata) {
        _cleanup_free_ char *dir = NULL;
        struct stat st;
        int r;

        download_stop(d);
        *d = (Download) { .fd = -1, .size = spec->size, .config = c, .event = e, .glue = g, .done = done,
                          .progress = progress, .userdata = userdata };
        memcpy(d->sha256, spec->sha256, SHA256_DIGEST_SIZE);
        sha256_init(&d->hash);
        if (asprintf(&dir, "%s/downloads", c->state_dir) < 0 || asprintf(&d->path, "%s/%s.part", dir, spec->name) < 0 ||
            !(d->url = strdup(spec->url)))
                return -ENOMEM;
        if ((r = mkdir_durable(dir, 0750)) < 0)
                return r;
        d->fd = open(d->path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0640);
        if (d->fd < 0 || fstat(d->fd, &st) < 0)
                return -errno;
        d->have = (uint64_t) st.st_size;
        if (d->have > d->size) {
                if (ftruncate(d->fd, 0) < 0)
                        return -errno;
                d->have = 0;
        }
        if ((r = hash_existing(d)) < 0)
                return r;
        if (lseek(d->fd, (off_t) d->have, SEEK_SET) < 0)
                return -errno;
        if (d->have == d->size) {
                check_hash(d);  /* complete from an earlier run */
                return 0;
        }
        if (http_setup(easy, c, d->url) < 0 || curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_data) ||
            curl_easy_setopt(easy, CURLOPT_WRITEDATA, d) ||
            curl_easy_setopt(easy, CURLOPT_RESUME_FROM_LARGE, (curl_off_t) d->have) ||
            (spec->headers && curl_easy_setopt(easy, CURLOPT_HTTPHEADER, spec->headers)) ||
            (r = curl_glue_add(g, easy, on_done, d)) < 0)
                return r < 0 ? r : -EINVAL;
        d->easy = easy;
        return 0;
}
