/* SPDX-License-Identifier: MIT */
/* The fleet fetcher (taskpatchd-fetch.h): channel polls, bundle downloads, install and switch. */

#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <systemd/sd-id128.h>
#include <unistd.h>

#include "clock.h"
#include "taskpatchd-download.h"
#include "taskpatchd-fetch.h"
#include "taskpatchd-log.h"
#include "taskpatchd-trust.h"
#include "yaml-doc.h"

static void set_update(FetchModel *fm, const char *task, uint64_t version, const char *result, const char *reason) {
        snprintf(fm->update.what.task, sizeof(fm->update.what.task), "%s", task);
        fm->update.what.version = version;
        fm->update.result = result;
        snprintf(fm->update.reason, sizeof(fm->update.reason), "%s", reason ? reason : "");
}

static void kick(Fetcher *f) {
        (void) sd_event_source_set_enabled(f->defer, SD_EVENT_ONESHOT);
}

const ChannelModel *fetch_model_section(const FetchModel *fm) {
        const Fetcher *f = fm->f;
        return f->channel ? fetch_section(f->channel, fm->index, fm->name) : NULL;
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
void fetch_poll_failed(Fetcher *f, const char *why) {
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
        f->polling = false;
        f->last_error[0] = '\0';
        for (size_t i = 0; i < f->n_models; i++) {
                f->models[i].wait_for_poll = false;
                f->models[i].last_error[0] = '\0';
        }
        schedule_poll(f);
        kick(f);
}

/* The log line of what a model does with a new channel. */
static void log_section(const FetchModel *fm) {
        const ChannelModel *cm = fetch_model_section(fm);
        const char *model = fm->name;
        char why[TP_ERROR_MAX];
        unsigned cohort;

        if (!cm) {
                log_info("channel: model %s: the channel has no section for it", model);
                return;
        }
        bool in = fetch_in_rollout(cm, fm->f->device_id, &cohort, why);
        log_info("channel: model %s: desired %s, %zu bundles; %s%s", model, cm->desired[0] ? cm->desired : "none",
                 cm->n_bundles, why, in ? "" : ": not taken");
}

/*
 * The serial, through every model's host and policy (the highest any model accepted is the
 * floor); then the channel is the one followed.
 */
static int accept_channel(Fetcher *f, Channel *c, const char *url, TpError *err) {
        _cleanup_(channel_freep) Channel *owned = c;
        bool changed = false, unrecorded = false;
        TpError save = {};
        int r;

        for (size_t i = 0; i < f->n_models; i++) {
                ChannelView cv;
                f->models[i].host->channel(f->models[i].host, &cv);
                if (cv.have_serial && c->serial < cv.serial)
                        return f->models[i].host->channel_accept_serial(f->models[i].host, c->serial, c->created,
                                                                        err);
        }
        for (size_t i = 0; i < f->n_models; i++) {
                r = f->models[i].host->channel_accept_serial(f->models[i].host, c->serial, c->created, &save);
                if (r == -ESTALE)
                        return tp_error(err, r, "%s", save.message);
                changed = changed || r > 0 || r == -EIO;
                if (r == -EIO && !unrecorded) {
                        unrecorded = true;
                        *err = save;
                }
        }
        if (unrecorded) {
                /* Not followed until its serial is recorded (the next change writes it). */
                for (size_t i = 0; i < f->n_models; i++)
                        f->models[i].refused.n = 0;
                return -EIO;
        }
        char *u = strdup(url);
        if (!u)
                return -ENOMEM;
        channel_free(f->channel);
        f->channel = TAKE_PTR(owned);
        free(f->channel_url);
        f->channel_url = u;
        if (changed) {
                log_info("channel %s serial %" PRIu64 " accepted (format %" PRIu32 ", %zu models, %zu bundles)",
                         f->channel->name, f->channel->serial, f->channel->format, f->channel->n_models,
                         f->channel->n_bundles);
                for (size_t i = 0; i < f->n_models; i++) {
                        f->models[i].refused.n = 0;
                        log_section(&f->models[i]);
                }
                f->last_change = (int64_t) clock_wall();
        }
        return 0;
}

int fetcher_take_channel(Fetcher *f, Channel *c, const char *url, TpError *err) {
        int r = accept_channel(f, c, url, err);

        if (r == -ESTALE) {
                char why[2 * TP_ERROR_MAX];
                /* A stale mirror: the next one may be good. */
                snprintf(why, sizeof(why), "%s: %s", url, err->message);
                fetch_poll_failed(f, why);
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
        f->polls++;
        f->last_poll_bytes = (uint64_t) req + (uint64_t) header + (uint64_t) body;
        f->last_status = status;
        if (f->body.capped) {
                snprintf(why, sizeof(why), "%s: larger than a channel can be (%u bytes): cut", url, CHANNEL_MAX_FILE);
                fetch_poll_failed(f, why);
                return;
        }
        if (result != CURLE_OK || (status != 200 && status != 304)) {
                http_describe(f->config, result, status, url, why, sizeof(why));
                fetch_poll_failed(f, why);
                return;
        }
        if (status == 304) {
                log_debug("channel unchanged (304, %" PRIu64 " bytes of HTTP)", f->last_poll_bytes);
                poll_succeeded(f);
                return;
        }

        _cleanup_(channel_freep) Channel *c = NULL;
        TpError err = {};
        int r = channel_parse(f->body.data, f->body.len, url, &c, &err);
        if (r < 0) {
                /* A bad mirror (tampered, stale, foreign): the next one may be good. */
                fetch_poll_failed(f, tp_error_message(&err, r));
                return;
        }
        fetch_channel_continue(f, TAKE_PTR(c), url, false);
}

int fetch_verify_channel(Fetcher *f, const Channel *c, const char *url, TpError *err) {
        const SourceHost *host = f->models[0].host;
        time_t now;
        int r = host->dates_now(host, &now, err);

        if (r < 0)
                return tp_error_prefix(err, r, "%s", url);
        SignatureTrust trust = trust_role(host->trust_root(host), host->revocations(host), f->config,
                                          TRUST_ROLE_CHANNEL, now);
        return channel_verify(c, url, &trust, NULL, err);
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
                fetch_poll_failed(f, "cannot start the transfer (out of memory?)");
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

static void mark_failed(FetchModel *fm, const TaskVersion *tv) {
        fetch_refused_add(&fm->refused, tv->task, tv->version);
}

/* The download is over (installed, kept for later, or failed): the handle is free for the next. */
static void download_over(Fetcher *f, FetchModel *fm, FetchPhase phase) {
        f->dl_model = NULL;
        fm->phase = phase;
        kick(f);
}

/* The bundle has all its bytes and they hash as the channel says: install it. */
static void install_download(Fetcher *f, FetchModel *fm) {
        const ChannelModel *cm = fetch_model_section(fm);
        TaskVersion tv = f->dl_what;
        char transaction[TRANSACTION_ID_SIZE];
        ChannelView cv;
        TpError err = {};

        if (!cm || !fm->host->can_start(fm->host)) {
                /* Busy since the download started: the file stays, and is installed when the host is idle. */
                download_stop(&f->dl);
                download_over(f, fm, FETCH_IDLE);
                return;
        }
        fm->host->channel(fm->host, &cv);
        InstallRequest req = { .then_switch = f->dl_base ? !cv.pinned : fetch_then_switch(cm, &cv, tv.task),
                               .origin = ORIGIN_CHANNEL };
        /* A base bundle must make the base the section names: the channel's signer vouched for that one. */
        if (f->dl_base && cm->has_base)
                req.expect_target = cm->base_sha256;
        int fd = open(f->dl.path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        int r = fd < 0 ? -errno : fm->host->submit_install(fm->host, fd, &req, transaction, &err);

        if (r < 0) {
                set_model_error(fm, "%s v%" PRIu64 ": %s", tv.task, tv.version,
                                fd < 0 ? strerror(-r) : tp_error_message(&err, r));
                set_update(fm, tv.task, tv.version, "failure", fm->last_error);
                mark_failed(fm, &tv);
                download_remove(&f->dl);
                download_over(f, fm, FETCH_IDLE);
                return;
        }
        /* The file stays (and the handle with it) until the operation ends: on_operation_done(). */
        fm->phase = req.then_switch ? FETCH_SWITCHING : FETCH_INSTALLING;
        if (req.then_switch)
                set_update(fm, tv.task, tv.version, "pending", NULL);
        memcpy(fm->transaction, transaction, sizeof(transaction));
}

static void on_download_progress(Download *d, void *userdata) {
        Fetcher *f = userdata;
        FetchModel *fm = f->dl_model;

        fm->host->emit(fm->host, download_json(d, json_pack("{s:s, s:s, s:I}", "event", "download", "task",
                                                            f->dl_what.task, "version",
                                                            (json_int_t) f->dl_what.version)));
}

static void on_download(Download *d, DownloadResult result, const char *why, void *userdata) {
        Fetcher *f = userdata;
        FetchModel *fm = f->dl_model;

        if (result == DOWNLOAD_OK) {
                if (d->overflow)
                        log_warning("channel: %s: the server sent more than the %" PRIu64 " bytes the channel "
                                    "declares: cut there", d->url, d->size);
                install_download(f, fm);
                return;
        }
        set_model_error(fm, "%s", why);
        fm->wait_for_poll = true;       /* not in a tight loop against a failing server */
        if (result == DOWNLOAD_BAD) {
                /* The bundle itself is bad (not the transfer): report it, do not retry it. */
                set_update(fm, f->dl_what.task, f->dl_what.version, "failure", why);
                mark_failed(fm, &f->dl_what);
        }
        download_stop(d);
        download_over(f, fm, FETCH_IDLE);
}

static void fetch_bundle(Fetcher *f, FetchModel *fm, const ChannelBundle *b) {
        _cleanup_free_ char *url = http_resolve(f->channel_url, b->path);
        char name[TASK_NAME_MAX + 32];
        int r;

        snprintf(f->dl_what.task, sizeof(f->dl_what.task), "%s", b->task);
        f->dl_what.version = b->version;
        f->dl_base = b->role == MANIFEST_ROLE_BASE;
        snprintf(name, sizeof(name), "%s-%" PRIu64 ".tpb", b->task, b->version);
        DownloadSpec spec = { .url = url, .name = name, .size = b->size, .sha256 = b->sha256 };
        f->dl_model = fm;
        fm->phase = FETCH_DOWNLOADING;
        log_info("%sdownloading %s v%" PRIu64 " from %s (%" PRIu64 " bytes)", fm->log_prefix, b->task, b->version,
                 url ? url : "?", b->size);
        /* The model's own state_dir holds it (its disk budget counts it). */
        r = url ? download_start(&f->dl, fm->config, f->event, f->glue, f->easy, &spec, on_download,
                                 on_download_progress, f)
                : -ENOMEM;
        if (r < 0) {
                set_model_error(fm, "%s v%" PRIu64 ": cannot download: %s", b->task, b->version, strerror(-r));
                download_stop(&f->dl);
                fm->wait_for_poll = true;
                f->dl_model = NULL;
                fm->phase = FETCH_IDLE;
        }
}

/* ---- deciding what to do next ---- */

static void switch_to_desired(FetchModel *fm, const ChannelModel *cm, const DeviceView *d, const ChannelView *cv) {
        const ChannelBundle *want = fetch_switch_target(fm->f->channel, cm, d, cv, &fm->refused, fm->host);
        char transaction[TRANSACTION_ID_SIZE];
        TpError err = {};

        if (!want)
                return;
        TaskVersion tv = { .version = want->version };
        snprintf(tv.task, sizeof(tv.task), "%s", want->task);
        int r = fm->host->submit_switch(fm->host, tv.task, tv.version, ORIGIN_CHANNEL, transaction, &err);
        if (r < 0) {
                set_model_error(fm, "switch to %s v%" PRIu64 ": %s", tv.task, tv.version, tp_error_message(&err, r));
                set_update(fm, tv.task, tv.version, "failure", fm->last_error);
                mark_failed(fm, &tv);
                return;
        }
        if (r == 0)
                return;         /* already active */
        log_info("%schannel %s: switching to the desired task %s v%" PRIu64, fm->log_prefix, fm->f->channel->name,
                 tv.task, tv.version);
        set_update(fm, tv.task, tv.version, "pending", NULL);
        fm->phase = FETCH_SWITCHING;
        memcpy(fm->transaction, transaction, sizeof(transaction));
}

/* The section's base is not the device's: download base bundle @b (true: it holds the handle), or switch to it. */
static bool take_base(Fetcher *f, FetchModel *fm, const ChannelBundle *b) {
        char transaction[TRANSACTION_ID_SIZE];
        ChannelView cv;
        TpError err = {};

        fm->host->channel(fm->host, &cv);
        if (cv.pinned)
                return false;   /* a technician's switch holds the model until the serial changes */
        TaskVersion tv = { .version = b->version };
        snprintf(tv.task, sizeof(tv.task), "%s", b->task);
        if (!fm->host->installed(fm->host, b->task, b->version)) {
                if (fm->wait_for_poll)
                        return false;
                fetch_bundle(f, fm, b);
                return f->dl_model != NULL;
        }
        int r = fm->host->submit_switch(fm->host, tv.task, tv.version, ORIGIN_CHANNEL, transaction, &err);
        if (r < 0) {
                set_model_error(fm, "switch to base %s v%" PRIu64 ": %s", tv.task, tv.version,
                                tp_error_message(&err, r));
                set_update(fm, tv.task, tv.version, "failure", fm->last_error);
                mark_failed(fm, &tv);
                return false;
        }
        if (r == 0)
                return false;
        log_info("%schannel %s: replacing the base with %s v%" PRIu64, fm->log_prefix, f->channel->name, tv.task,
                 tv.version);
        set_update(fm, tv.task, tv.version, "pending", NULL);
        fm->phase = FETCH_SWITCHING;
        memcpy(fm->transaction, transaction, sizeof(transaction));
        return false;
}

/* What @fm does next: a download (true: it holds the handle), or a switch, or nothing. */
static bool model_next(Fetcher *f, FetchModel *fm) {
        const ChannelModel *cm = fetch_model_section(fm);
        const ChannelBundle *b;
        char why[TP_ERROR_MAX];
        unsigned cohort;
        DeviceView d;
        ChannelView cv;

        if (fm->phase != FETCH_IDLE || !cm || !fetch_in_rollout(cm, f->device_id, &cohort, why))
                return false;
        if (!fm->host->can_start(fm->host))
                return false;   /* busy (an operation, a trial): the host tells us when it ends */
        fm->host->device(fm->host, &d);
        if (!fetch_on_base(f->channel, cm, &d, &fm->refused, &b, why))
                return b && take_base(f, fm, b);
        if ((b = fetch_next_bundle(f->channel, cm, &d, &fm->refused, fm->host))) {
                if (fm->wait_for_poll)
                        return false;
                fetch_bundle(f, fm, b);
                return f->dl_model != NULL;
        }
        fm->host->channel(fm->host, &cv);
        switch_to_desired(fm, cm, &d, &cv);
        return false;
}

static void fetch_next(Fetcher *f) {
        if (f->polling || f->dl_model || !f->channel)
                return;         /* downloads share the poll's handle, one at a time */
        for (size_t i = 0; i < f->n_models; i++)
                if (model_next(f, &f->models[i]))
                        return;
}

static int on_defer(sd_event_source *s _unused_, void *userdata) {
        fetch_next(userdata);
        return 0;
}

/* ---- the host's side ---- */

static void on_operation_done(void *userdata, const OperationOutcome *o) {
        FetchModel *fm = userdata;

        if (!fm->transaction[0] || strcmp(o->transaction, fm->transaction) != 0) {
                kick(fm->f);    /* someone else's: what it changed may unblock us */
                return;
        }
        if (fm->f->dl_model == fm) {
                download_remove(&fm->f->dl);    /* installed (the store has its copy) or refused */
                fm->f->dl_model = NULL;
        }
        if (o->r < 0) {
                TaskVersion tv = { .version = o->version };
                snprintf(tv.task, sizeof(tv.task), "%s", o->task);
                set_model_error(fm, "%s %s v%" PRIu64 ": %s", o->cmd, o->task, o->version, o->error);
                set_update(fm, o->task, o->version, "failure", fm->last_error);
                mark_failed(fm, &tv);
                fm->transaction[0] = '\0';
                fm->phase = FETCH_IDLE;
        } else if (!o->on_trial) {
                /* Installed only, or the switch committed at once (no trial). */
                if (fm->phase == FETCH_SWITCHING)
                        set_update(fm, o->task, o->version, "success", NULL);
                fm->transaction[0] = '\0';
                fm->phase = FETCH_IDLE;
        }
        /* else: on trial; on_trial_done() says how it ended. */
        kick(fm->f);
}

static void on_trial_done(void *userdata, const char *transaction, bool committed, const char *reason) {
        FetchModel *fm = userdata;

        if (fm->transaction[0] && strcmp(transaction, fm->transaction) == 0) {
                TaskVersion tv = fm->update.what;
                set_update(fm, tv.task, tv.version, committed ? "success" : "failure", committed ? NULL : reason);
                if (!committed)
                        mark_failed(fm, &tv);
                fm->transaction[0] = '\0';
                fm->phase = FETCH_IDLE;
        }
        kick(fm->f);
}

static void on_idle(void *userdata) {
        FetchModel *fm = userdata;
        kick(fm->f);
}

const UpdateSource fetcher_source = {
        .name = "channel",
        .operation_done = on_operation_done,
        .trial_done = on_trial_done,
        .idle = on_idle,
};

/* ---- life ---- */

/* device_id when configured, else /etc/machine-id (as sd_id128_get_machine() reads it), else none. */
static void find_device_id(Fetcher *f) {
        sd_id128_t id;
        int r;

        if (f->config->device_id) {
                snprintf(f->device_id, sizeof(f->device_id), "%s", f->config->device_id);
                f->device_id_source = "device_id";
                return;
        }
        if ((r = sd_id128_get_machine(&id)) >= 0) {
                sd_id128_to_string(id, f->device_id);
                f->device_id_source = "/etc/machine-id";
                return;
        }
        f->device_id_source = "none";
        log_warning("channel: no device id (/etc/machine-id: %s; set device_id): partial rollouts leave this "
                    "device out", strerror(-r));
}

FetchModel *fetcher_model(Fetcher *f, size_t i) {
        return i < f->n_models ? &f->models[i] : NULL;
}

int fetcher_new(sd_event *e, const SourceTarget *targets, size_t n, CurlGlue *glue, Fetcher **ret, TpError *err) {
        _cleanup_(fetcher_freep) Fetcher *f = NULL;
        const DaemonConfig *c = targets[0].config;
        int r;

        *ret = NULL;
        if (c->channel.n_urls == 0)
                return 0;
        if (n == 0 || n > CONFIG_MAX_MODELS)
                return tp_error(err, -EINVAL, "channel: %zu models", n);
        f = calloc(1, sizeof(Fetcher));
        if (!f)
                return -ENOMEM;
        *f = (Fetcher) { .config = c, .event = e, .glue = glue, .dl = DOWNLOAD_NULL, .n_models = n };
        for (size_t i = 0; i < n; i++) {
                f->models[i] = (FetchModel) { .f = f, .host = targets[i].host, .config = targets[i].config,
                                              .index = i, .name = source_target_model(&targets[i]) };
                if (n > 1)
                        snprintf(f->models[i].log_prefix, sizeof(f->models[i].log_prefix), "[%s] ", f->models[i].name);
        }
        f->easy = curl_easy_init();
        if (http_body_init(&f->body, CHANNEL_MAX_FILE) < 0 || !f->easy)
                return -ENOMEM;
        if ((r = sd_event_add_time_relative(e, &f->timer, CLOCK_BOOTTIME, 1000000, 0, on_timer, f)) < 0 ||
            (r = sd_event_add_defer(e, &f->defer, on_defer, f)) < 0)
                return tp_error(err, r, "channel: cannot set up polling: %s", strerror(-r));
        (void) sd_event_source_set_enabled(f->defer, SD_EVENT_OFF);
        (void) sd_event_source_set_description(f->timer, "channel-poll");
        (void) sd_event_source_set_description(f->defer, "channel-next");
        find_device_id(f);
        /* The first poll a second after start. */
        log_info("polling the channel %s every %" PRIu64 " s for %zu model%s", c->channel.urls[0],
                 c->channel.interval, n, n == 1 ? "" : "s");
        *ret = TAKE_PTR(f);
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
        channel_free(f->pending);
        free(f->pending_url);
        http_body_done(&f->body);
        free(f);
        return NULL;
}
