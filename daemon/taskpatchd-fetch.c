/* SPDX-License-Identifier: MIT */
/* The fleet fetcher (taskpatchd-fetch.h): channel polls, bundle downloads, install and switch. */

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "clock.h"
#include "taskpatchd-download.h"
#include "taskpatchd-fetch.h"
#include "taskpatchd-log.h"
#include "yaml-doc.h"

#define CHANNEL_TIMEOUT_SEC 120         /* a whole channel transfer */

/* Where the fetcher's work on the channel stands (polls run beside it: Fetcher.polling). */
typedef enum FetchPhase {
        FETCH_IDLE,
        FETCH_DOWNLOADING,
        FETCH_INSTALLING,               /* our install (maybe with its switch) runs */
        FETCH_SWITCHING,                /* our switch runs, or its trial */
        _FETCH_PHASE_MAX,
} FetchPhase;

static const char *const phase_names[_FETCH_PHASE_MAX] = {
        [FETCH_IDLE] = "idle",
        [FETCH_DOWNLOADING] = "downloading",
        [FETCH_INSTALLING] = "installing",
        [FETCH_SWITCHING] = "switching",
};

struct Fetcher {
        const SourceHost *host;
        const DaemonConfig *config;
        sd_event *event;
        CurlGlue *glue;                 /* borrowed */
        CURL *easy;                     /* one handle for every transfer: its connections are reused */
        struct curl_slist *headers;
        sd_event_source *timer;         /* the next poll */
        sd_event_source *defer;         /* fetch_next() once the current callback has returned */
        FetchPhase phase;
        bool polling;                   /* a channel transfer runs on easy */

        size_t mirror;                  /* the URL being tried, or that answered last */
        unsigned failures;              /* polls in a row that failed everywhere: back-off */
        char etag[256];                 /* of the channel the mirror last sent (conditional GET) */
        HttpBody body;

        Channel *channel;               /* the last one accepted */
        char *channel_url;              /* where it came from: bundle paths are relative to it */
        Download dl;
        TaskVersion dl_what;            /* what dl fetches */
        FetchRefused refused;           /* under the current serial */
        char transaction[TRANSACTION_ID_SIZE];  /* of the operation we started */
        bool wait_for_poll;             /* a download failed: try again after the next poll, not at once */

        /* for status */
        char last_error[TP_ERROR_MAX];
        int64_t last_poll, last_change;
        uint64_t last_poll_bytes;       /* HTTP bytes of the last poll: request, headers, body */
        long last_status;
        struct {
                TaskVersion what;
                const char *result;     /* NULL, "pending", "success", "failure" */
                char reason[TP_ERROR_MAX];
        } update;
};

#define set_error(f, ...) source_error((f)->host, "channel", (f)->last_error, __VA_ARGS__)

static void set_update(Fetcher *f, const char *task, uint64_t version, const char *result, const char *reason) {
        snprintf(f->update.what.task, sizeof(f->update.what.task), "%s", task);
        f->update.what.version = version;
        f->update.result = result;
        snprintf(f->update.reason, sizeof(f->update.reason), "%s", reason ? reason : "");
}

static void kick(Fetcher *f) {
        (void) sd_event_source_set_enabled(f->defer, SD_EVENT_ONESHOT);
}

/* ---- the decisions ---- */

bool fetch_refused_has(const FetchRefused *f, const char *task, uint64_t version) {
        for (size_t i = 0; i < f->n; i++)
                if (strcmp(f->list[i].task, task) == 0 && f->list[i].version == version)
                        return true;
        return false;
}

void fetch_refused_add(FetchRefused *f, const char *task, uint64_t version) {
        if (f->n >= FETCH_REFUSED_MAX)
                return;
        snprintf(f->list[f->n].task, sizeof(f->list[f->n].task), "%s", task);
        f->list[f->n++].version = version;
}

const ChannelBundle *fetch_next_bundle(const Channel *c, const DeviceView *d, const FetchRefused *refused,
                                       const SourceHost *host) {
        const ChannelBundle *pick = NULL;

        for (size_t i = 0; i < c->n_bundles; i++) {
                const ChannelBundle *b = &c->bundles[i];
                if (memcmp(b->base_sha256, d->base_sha256, SHA256_DIGEST_SIZE) != 0 || b->kind != d->base_kind ||
                    channel_find(c, b->task) != b || fetch_refused_has(refused, b->task, b->version) ||
                    b->version <= host->newest_installed(host, b->task) || b->version < host->accepted(host, b->task))
                        continue;
                if (strcmp(b->task, c->desired) == 0)
                        return b;
                if (!pick)
                        pick = b;
        }
        return pick;
}

bool fetch_then_switch(const Channel *c, const ChannelView *cv, const char *task) {
        return c->desired[0] && strcmp(task, c->desired) == 0 && !cv->pinned;
}

const ChannelBundle *fetch_switch_target(const Channel *c, const DeviceView *d, const ChannelView *cv,
                                         const FetchRefused *refused, const SourceHost *host) {
        const ChannelBundle *want = c->desired[0] && !cv->pinned ? channel_find(c, c->desired) : NULL;

        if (!want || !host->installed(host, want->task, want->version) ||
            (strcmp(d->active_task, want->task) == 0 && d->active_version == want->version) ||
            fetch_refused_has(refused, want->task, want->version))
                return NULL;
        return want;
}

/* ---- polling the channel ---- */

static uint64_t random_u64(void) {
        uint64_t v = 0;
        if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != sizeof(v))
                v = (uint64_t) clock_wall() * 2654435761u;
        return v;
}

/* The interval with +-20% jitter, doubled for each failure in a row up to 8x. */
static void schedule_poll(Fetcher *f) {
        uint64_t usec = f->config->channel.interval * 1000000ULL;
        unsigned shift = f->failures < 3 ? f->failures : 3;
        usec <<= shift;
        usec = usec * 4 / 5 + random_u64() % (usec * 2 / 5 + 1);
        (void) sd_event_source_set_time_relative(f->timer, usec);
        (void) sd_event_source_set_enabled(f->timer, SD_EVENT_ONESHOT);
}

static size_t on_header(char *data, size_t size, size_t nmemb, void *userdata) {
        Fetcher *f = userdata;
        size_t n = size * nmemb;

        if (f->polling && n > 5 && strncasecmp(data, "ETag:", 5) == 0) {
                size_t i = 5, end = n;
                while (i < end && (data[i] == ' ' || data[i] == '\t'))
                        i++;
                while (end > i && (data[end - 1] == '\r' || data[end - 1] == '\n' || data[end - 1] == ' '))
                        end--;
                if (end - i < sizeof(f->etag))
                        snprintf(f->etag, sizeof(f->etag), "%.*s", (int) (end - i), data + i);
        }
        return n;
}

static void poll_start(Fetcher *f);

/* A poll failed at this mirror: the next one now, or back off when every mirror failed. */
static void poll_failed(Fetcher *f, const char *why) {
        set_error(f, "%s", why);
        f->etag[0] = '\0';
        if (f->mirror + 1 < f->config->channel.n_urls) {
                f->mirror++;
                poll_start(f);
                return;
        }
        f->mirror = 0;
        f->failures++;
        f->polling = false;
        schedule_poll(f);
        kick(f);
}

static void poll_succeeded(Fetcher *f) {
        f->failures = 0;
        f->wait_for_poll = false;
        f->polling = false;
        f->last_error[0] = '\0';
        schedule_poll(f);
        kick(f);
}

/* The serial, through the host's policy; then the channel is the one followed. */
static int accept_channel(Fetcher *f, Channel *c, const char *url, TpError *err) {
        _cleanup_(channel_freep) Channel *owned = c;
        int r = f->host->channel_accept_serial(f->host, c->serial, err);

        if (r == -ESTALE)
                return r;
        if (r > 0 || r == -EIO) {
                log_info("channel %s serial %" PRIu64 " accepted (desired: %s, %zu bundles)", c->name, c->serial,
                         c->desired[0] ? c->desired : "none", c->n_bundles);
                f->refused.n = 0;
                f->last_change = (int64_t) clock_wall();
        }
        if (r < 0)
                return r;
        char *u = strdup(url);
        if (!u)
                return -ENOMEM;
        channel_free(f->channel);
        f->channel = TAKE_PTR(owned);
        free(f->channel_url);
        f->channel_url = u;
        return 0;
}

int fetcher_take_channel(Fetcher *f, Channel *c, const char *url, TpError *err) {
        int r = accept_channel(f, c, url, err);

        if (r == -ESTALE) {
                char why[2 * TP_ERROR_MAX];
                /* A stale mirror: the next one may be good. */
                snprintf(why, sizeof(why), "%s: %s", url, err->message);
                poll_failed(f, why);
                return r;
        }
        poll_succeeded(f);
        if (r == -EIO)
                set_error(f, "cannot record the channel's serial: %s", tp_error_message(err, r));
        else if (r < 0)
                set_error(f, "%s: %s", url, strerror(-r));
        return r;
}

static void on_poll_done(CurlGlue *g _unused_, CURL *easy, CURLcode result, void *userdata) {
        Fetcher *f = userdata;
        const char *url = f->config->channel.urls[f->mirror];
        curl_off_t req = 0, body = 0;
        long status = 0, header = 0;
        char why[TP_ERROR_MAX];

        (void) curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
        (void) curl_easy_getinfo(easy, CURLINFO_HEADER_SIZE, &header);
        (void) curl_easy_getinfo(easy, CURLINFO_REQUEST_SIZE, &req);
        (void) curl_easy_getinfo(easy, CURLINFO_SIZE_DOWNLOAD_T, &body);
        f->last_poll = (int64_t) clock_wall();
        f->last_poll_bytes = (uint64_t) req + (uint64_t) header + (uint64_t) body;
        f->last_status = status;
        if (f->body.capped) {
                snprintf(why, sizeof(why), "%s: larger than a channel can be (%u bytes): cut", url, CHANNEL_MAX_FILE);
                poll_failed(f, why);
                return;
        }
        if (result != CURLE_OK || (status != 200 && status != 304)) {
                http_describe(f->config, result, status, url, why, sizeof(why));
                poll_failed(f, why);
                return;
        }
        if (status == 304) {
                log_debug("channel unchanged (304, %" PRIu64 " bytes of HTTP)", f->last_poll_bytes);
                poll_succeeded(f);
                return;
        }

        _cleanup_(channel_freep) Channel *c = NULL;
        char signer[256];
        TpError err = {};
        int r = channel_parse(f->body.data, f->body.len, url, &c, &err);
        if (r >= 0)
                r = channel_verify(c, url, f->config->trust.ca, clock_for_dates(), signer, &err);
        if (r < 0) {
                /* A bad mirror (tampered, stale, foreign): the next one may be good. */
                poll_failed(f, tp_error_message(&err, r));
                return;
        }
        (void) fetcher_take_channel(f, TAKE_PTR(c), url, &err);        /* reports its own errors */
}

static void poll_start(Fetcher *f) {
        const char *url = f->config->channel.urls[f->mirror];
        char line[300];

        f->polling = true;
        curl_slist_free_all(f->headers);
        f->headers = NULL;
        if (f->etag[0]) {
                snprintf(line, sizeof(line), "If-None-Match: %s", f->etag);
                f->headers = curl_slist_append(NULL, line);
        }
        if (http_setup_get(f->easy, f->config, url, f->headers, CHANNEL_TIMEOUT_SEC, &f->body) < 0 ||
            curl_easy_setopt(f->easy, CURLOPT_HEADERFUNCTION, on_header) ||
            curl_easy_setopt(f->easy, CURLOPT_HEADERDATA, f) || curl_glue_add(f->glue, f->easy, on_poll_done, f) < 0) {
                poll_failed(f, "cannot start the transfer (out of memory?)");
                return;
        }
        log_debug("polling %s%s", url, f->etag[0] ? " (conditional)" : "");
}

static int on_timer(sd_event_source *s _unused_, uint64_t usec _unused_, void *userdata) {
        Fetcher *f = userdata;

        if (f->polling || f->dl.easy) {
                schedule_poll(f);       /* a transfer runs: poll after it */
                return 0;
        }
        f->mirror = 0;
        poll_start(f);
        return 0;
}

/* ---- downloads ---- */

static void mark_failed(Fetcher *f, const TaskVersion *tv) {
        fetch_refused_add(&f->refused, tv->task, tv->version);
}

/* The bundle has all its bytes and they hash as the channel says: install it. */
static void install_download(Fetcher *f) {
        const TaskVersion *tv = &f->dl_what;
        char transaction[TRANSACTION_ID_SIZE];
        ChannelView cv;
        TpError err = {};

        if (!f->host->can_start(f->host)) {
                /* Busy since the download started: the file stays, and is installed when the host is idle. */
                download_stop(&f->dl);
                f->phase = FETCH_IDLE;
                return;
        }
        f->host->channel(f->host, &cv);
        InstallRequest req = { .then_switch = fetch_then_switch(f->channel, &cv, tv->task), .origin = ORIGIN_CHANNEL };
        int fd = open(f->dl.path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        int r = fd < 0 ? -errno : f->host->submit_install(f->host, fd, &req, transaction, &err);

        if (r < 0) {
                set_error(f, "%s v%" PRIu64 ": %s", tv->task, tv->version,
                          fd < 0 ? strerror(-r) : tp_error_message(&err, r));
                set_update(f, tv->task, tv->version, "failure", f->last_error);
                mark_failed(f, tv);
                download_remove(&f->dl);
                f->phase = FETCH_IDLE;
                kick(f);
                return;
        }
        f->phase = req.then_switch ? FETCH_SWITCHING : FETCH_INSTALLING;
        if (req.then_switch)
                set_update(f, tv->task, tv->version, "pending", NULL);
        memcpy(f->transaction, transaction, sizeof(transaction));
}

static void on_download_progress(Download *d, void *userdata) {
        Fetcher *f = userdata;
        f->host->emit(f->host, download_json(d, json_pack("{s:s, s:s, s:I}", "event", "download", "task",
                                                          f->dl_what.task, "version",
                                                          (json_int_t) f->dl_what.version)));
}

static void on_download(Download *d, DownloadResult result, const char *why, void *userdata) {
        Fetcher *f = userdata;

        if (result == DOWNLOAD_OK) {
                if (d->overflow)
                        log_warning("channel: %s: the server sent more than the %" PRIu64 " bytes the channel "
                                    "declares: cut there", d->url, d->size);
                install_download(f);
                return;
        }
        set_error(f, "%s", why);
        f->wait_for_poll = true;        /* not in a tight loop against a failing server */
        if (result == DOWNLOAD_BAD) {
                /* The bundle itself is bad (not the transfer): report it, do not retry it. */
                set_update(f, f->dl_what.task, f->dl_what.version, "failure", why);
                mark_failed(f, &f->dl_what);
        }
        download_stop(d);
        f->phase = FETCH_IDLE;
        kick(f);
}

static void fetch_bundle(Fetcher *f, const ChannelBundle *b) {
        _cleanup_free_ char *url = http_resolve(f->channel_url, b->path);
        char name[TASK_NAME_MAX + 32];
        int r;

        snprintf(f->dl_what.task, sizeof(f->dl_what.task), "%s", b->task);
        f->dl_what.version = b->version;
        snprintf(name, sizeof(name), "%s-%" PRIu64 ".tpb", b->task, b->version);
        DownloadSpec spec = { .url = url, .name = name, .size = b->size, .sha256 = b->sha256 };
        f->phase = FETCH_DOWNLOADING;
        log_info("downloading %s v%" PRIu64 " from %s (%" PRIu64 " bytes)", b->task, b->version, url ? url : "?",
                 b->size);
        r = url ? download_start(&f->dl, f->config, f->event, f->glue, f->easy, &spec, on_download,
                                 on_download_progress, f)
                : -ENOMEM;
        if (r < 0) {
                set_error(f, "%s v%" PRIu64 ": cannot download: %s", b->task, b->version, strerror(-r));
                download_stop(&f->dl);
                f->wait_for_poll = true;
                f->phase = FETCH_IDLE;
        }
}

/* ---- deciding what to do next ---- */

static void switch_to_desired(Fetcher *f, const DeviceView *d, const ChannelView *cv) {
        const ChannelBundle *want = fetch_switch_target(f->channel, d, cv, &f->refused, f->host);
        char transaction[TRANSACTION_ID_SIZE];
        TpError err = {};

        if (!want)
                return;
        TaskVersion tv = { .version = want->version };
        snprintf(tv.task, sizeof(tv.task), "%s", want->task);
        int r = f->host->submit_switch(f->host, tv.task, tv.version, ORIGIN_CHANNEL, transaction, &err);
        if (r < 0) {
                set_error(f, "switch to %s v%" PRIu64 ": %s", tv.task, tv.version, tp_error_message(&err, r));
                set_update(f, tv.task, tv.version, "failure", f->last_error);
                mark_failed(f, &tv);
                return;
        }
        if (r == 0)
                return;         /* already active */
        log_info("channel %s: switching to the desired task %s v%" PRIu64, f->channel->name, tv.task, tv.version);
        set_update(f, tv.task, tv.version, "pending", NULL);
        f->phase = FETCH_SWITCHING;
        memcpy(f->transaction, transaction, sizeof(transaction));
}

static void fetch_next(Fetcher *f) {
        const ChannelBundle *b;
        DeviceView d;
        ChannelView cv;

        if (f->phase != FETCH_IDLE || f->polling || !f->channel)
                return;         /* downloads share the poll's handle */
        if (!f->host->can_start(f->host))
                return;         /* busy (an operation, a trial): the host tells us when it ends */
        f->host->device(f->host, &d);
        if ((b = fetch_next_bundle(f->channel, &d, &f->refused, f->host))) {
                if (!f->wait_for_poll)
                        fetch_bundle(f, b);
                return;
        }
        f->host->channel(f->host, &cv);
        switch_to_desired(f, &d, &cv);
}

static int on_defer(sd_event_source *s _unused_, void *userdata) {
        fetch_next(userdata);
        return 0;
}

/* ---- the host's side ---- */

static void on_operation_done(void *userdata, const OperationOutcome *o) {
        Fetcher *f = userdata;

        if (!f->transaction[0] || strcmp(o->transaction, f->transaction) != 0) {
                kick(f);        /* someone else's: what it changed may unblock us */
                return;
        }
        download_remove(&f->dl);        /* installed (the store has its copy) or refused */
        if (o->r < 0) {
                TaskVersion tv = { .version = o->version };
                snprintf(tv.task, sizeof(tv.task), "%s", o->task);
                set_error(f, "%s %s v%" PRIu64 ": %s", o->cmd, o->task, o->version, o->error);
                set_update(f, o->task, o->version, "failure", f->last_error);
                mark_failed(f, &tv);
                f->transaction[0] = '\0';
                f->phase = FETCH_IDLE;
        } else if (!o->on_trial) {
                /* Installed only, or the switch committed at once (no trial). */
                if (f->phase == FETCH_SWITCHING)
                        set_update(f, o->task, o->version, "success", NULL);
                f->transaction[0] = '\0';
                f->phase = FETCH_IDLE;
        }
        /* else: on trial; on_trial_done() says how it ended. */
        kick(f);
}

static void on_trial_done(void *userdata, const char *transaction, bool committed, const char *reason) {
        Fetcher *f = userdata;

        if (f->transaction[0] && strcmp(transaction, f->transaction) == 0) {
                TaskVersion tv = f->update.what;
                set_update(f, tv.task, tv.version, committed ? "success" : "failure", committed ? NULL : reason);
                if (!committed)
                        mark_failed(f, &tv);
                f->transaction[0] = '\0';
                f->phase = FETCH_IDLE;
        }
        kick(f);
}

static void on_idle(void *userdata) {
        kick(userdata);
}

const UpdateSource fetcher_source = {
        .name = "channel",
        .operation_done = on_operation_done,
        .trial_done = on_trial_done,
        .idle = on_idle,
};

json_t *fetcher_status(const Fetcher *f) {
        char when[21];
        ChannelView cv;
        json_t *urls = json_array();

        f->host->channel(f->host, &cv);
        for (size_t i = 0; i < f->config->channel.n_urls; i++)
                json_array_append_new(urls, json_string(f->config->channel.urls[i]));
        json_t *o = json_pack("{s:o, s:s, s:o, s:o}", "urls", urls, "state",
                              f->polling && f->phase == FETCH_IDLE ? "polling" : phase_names[f->phase], "serial",
                              cv.have_serial ? json_integer((json_int_t) cv.serial) : json_null(), "last_error",
                              f->last_error[0] ? json_string(f->last_error) : json_null());
        if (f->channel) {
                json_object_set_new(o, "name", json_string(f->channel->name));
                json_object_set_new(o, "desired", f->channel->desired[0] ? json_string(f->channel->desired) : json_null());
        }
        json_object_set_new(o, "pinned", json_boolean(cv.pinned));
        if (f->last_poll) {
                format_time_utc(f->last_poll, when);
                json_object_set_new(o, "last_poll", json_string(when));
                json_object_set_new(o, "last_poll_http_status", json_integer(f->last_status));
                json_object_set_new(o, "last_poll_bytes", json_integer((json_int_t) f->last_poll_bytes));
        }
        if (f->dl.easy)
                json_object_set_new(o, "download",
                                    download_json(&f->dl, json_pack("{s:s, s:I, s:s}", "task", f->dl_what.task,
                                                                    "version", (json_int_t) f->dl_what.version,
                                                                    "url", f->dl.url)));
        if (f->update.result)
                json_object_set_new(o, "update",
                                    json_pack("{s:s, s:I, s:s, s:o}", "task", f->update.what.task, "version",
                                              (json_int_t) f->update.what.version, "result", f->update.result,
                                              "reason", f->update.reason[0] ? json_string(f->update.reason) : json_null()));
        return o;
}

/* ---- life ---- */

int fetcher_new(sd_event *e, const DaemonConfig *c, CurlGlue *glue, const SourceHost *host, Fetcher **ret,
                TpError *err) {
        Fetcher *f;
        int r;

        *ret = NULL;
        if (c->channel.n_urls == 0)
                return 0;
        f = calloc(1, sizeof(Fetcher));
        if (!f)
                return -ENOMEM;
        *f = (Fetcher) { .host = host, .config = c, .event = e, .glue = glue, .dl = DOWNLOAD_NULL };
        f->easy = curl_easy_init();
        if (http_body_init(&f->body, CHANNEL_MAX_FILE) < 0 || !f->easy) {
                fetcher_free(f);
                return -ENOMEM;
        }
        if ((r = sd_event_add_time_relative(e, &f->timer, CLOCK_BOOTTIME, 1000000, 0, on_timer, f)) < 0 ||
            (r = sd_event_add_defer(e, &f->defer, on_defer, f)) < 0) {
                fetcher_free(f);
                return tp_error(err, r, "channel: cannot set up polling: %s", strerror(-r));
        }
        (void) sd_event_source_set_enabled(f->defer, SD_EVENT_OFF);
        (void) sd_event_source_set_description(f->timer, "channel-poll");
        (void) sd_event_source_set_description(f->defer, "channel-next");
        /* The first poll a second after start. */
        log_info("polling the channel %s every %" PRIu64 " s", c->channel.urls[0], c->channel.interval);
        *ret = f;
        return 0;
}

Fetcher *fetcher_free(Fetcher *f) {
        if (!f)
                return NULL;
        download_stop(&f->dl);
        if (f->easy) {
                curl_glue_remove(f->glue, f->easy);
                curl_easy_cleanup(f->easy);
        }
        curl_slist_free_all(f->headers);
        sd_event_source_disable_unref(f->timer);
        sd_event_source_disable_unref(f->defer);
        channel_free(f->channel);
        free(f->channel_url);
        http_body_done(&f->body);
        free(f);
        return NULL;
}
