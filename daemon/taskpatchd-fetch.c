/* SPDX-License-Identifier: MIT */
/* The fleet fetcher (taskpatchd-fetch.h): channel polls, bundle downloads, install and switch. */

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "channel.h"
#include "clock.h"
#include "fileio.h"
#include "taskpatchd-curl.h"
#include "taskpatchd-download.h"
#include "taskpatchd-fetch.h"
#include "taskpatchd-log.h"
#include "taskpatchd-manager.h"
#include "yaml-doc.h"

#define CHANNEL_TIMEOUT_SEC 120         /* a whole channel transfer */
#define MAX_FAILED 16                   /* bundles remembered as refused until the serial changes */

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

typedef struct TaskVersion {
        char task[TASK_NAME_MAX + 1];
        uint64_t version;
} TaskVersion;

struct Fetcher {
        Manager *m;
        const DaemonConfig *config;
        CurlGlue *glue;
        CURL *easy;                     /* one handle for every transfer: its connections are reused */
        struct curl_slist *headers;
        sd_event_source *timer;         /* the next poll */
        sd_event_source *defer;         /* fetch_next() once the current callback has returned */
        FetchPhase phase;
        bool polling;                   /* a channel transfer runs on easy */

        size_t mirror;                  /* the URL being tried, or that answered last */
        unsigned failures;              /* polls in a row that failed everywhere: back-off */
        char etag[256];                 /* of the channel the mirror last sent (conditional GET) */
        uint8_t *body;
        size_t body_len;
        bool body_capped;

        Channel *channel;               /* the last one accepted */
        char *channel_url;              /* where it came from: bundle paths are relative to it */
        Download dl;
        TaskVersion dl_what;            /* what dl fetches */
        TaskVersion failed[MAX_FAILED]; /* refused or failed under the current serial: not retried */
        size_t n_failed;
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

static void fetch_next(Fetcher *f);

static void set_error(Fetcher *f, const char *fmt, ...) _printf_(2, 3);
static void set_error(Fetcher *f, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(f->last_error, sizeof(f->last_error), fmt, ap);
        va_end(ap);
        log_warning("channel: %s", f->last_error);
        manager_report_error(f->m, NULL, "channel", f->last_error, "fetch");
}

static void set_update(Fetcher *f, const char *task, uint64_t version, const char *result, const char *reason) {
        snprintf(f->update.what.task, sizeof(f->update.what.task), "%s", task);
        f->update.what.version = version;
        f->update.result = result;
        snprintf(f->update.reason, sizeof(f->update.reason), "%s", reason ? reason : "");
}

static void kick(Fetcher *f) {
        (void) sd_event_source_set_enabled(f->defer, SD_EVENT_ONESHOT);
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

static size_t on_channel_data(char *data, size_t size, size_t nmemb, void *userdata) {
        Fetcher *f = userdata;
        size_t n = size * nmemb;

        if (n > CHANNEL_MAX_FILE - f->body_len) {
                f->body_capped = true;
                return 0;
        }
        memcpy(f->body + f->body_len, data, n);
        f->body_len += n;
        return n;
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

/* A verified channel, newer than or the same as the last one: remember it, persist its serial. */
static int accept_channel(Fetcher *f, Channel *c, const char *url) {
        PersistentState *ps = &f->m->ps;
        TpError err = {};

        if (!ps->have_channel || c->serial != ps->channel_serial) {
                log_info("channel %s serial %" PRIu64 " accepted (desired: %s, %zu bundles)", c->name, c->serial,
                         c->desired[0] ? c->desired : "none", c->n_bundles);
                f->n_failed = 0;
                f->last_change = (int64_t) clock_wall();
                ps->have_channel = true;
                ps->channel_serial = c->serial;
                if (ps->pinned && ps->pinned_serial != c->serial) {
                        log_info("the technician's switch no longer pins the task: the channel's serial changed");
                        ps->pinned = false;
                }
                if (manager_save_state(f->m, &err) < 0) {
                        set_error(f, "cannot record the channel's serial: %s", err.message);
                        return -EIO;
                }
        }
        channel_free(f->channel);
        f->channel = c;
        free(f->channel_url);
        f->channel_url = strdup(url);
        return f->channel_url ? 0 : -ENOMEM;
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
        if (f->body_capped) {
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
        int r = channel_parse(f->body, f->body_len, url, &c, &err);
        if (r >= 0)
                r = channel_verify(c, url, f->m->config->trust.ca, clock_for_dates(), signer, &err);
        if (r >= 0 && f->m->ps.have_channel && c->serial < f->m->ps.channel_serial)
                r = tp_error(&err, -ESTALE, "%s: serial %" PRIu64 " is older than the accepted %" PRIu64
                             " (a replayed channel): refused", url, c->serial, f->m->ps.channel_serial);
        if (r < 0) {
                /* A bad mirror (tampered, stale, foreign): the next one may be good. */
                poll_failed(f, tp_error_message(&err, r));
                return;
        }
        poll_succeeded(f);
        (void) accept_channel(f, TAKE_PTR(c), url);    /* reports its own errors */
}

static void poll_start(Fetcher *f) {
        const char *url = f->config->channel.urls[f->mirror];
        char line[300];

        f->polling = true;
        f->body_len = 0;
        f->body_capped = false;
        curl_slist_free_all(f->headers);
        f->headers = NULL;
        if (f->etag[0]) {
                snprintf(line, sizeof(line), "If-None-Match: %s", f->etag);
                f->headers = curl_slist_append(NULL, line);
        }
        if (http_setup(f->easy, f->config, url) < 0 || curl_easy_setopt(f->easy, CURLOPT_HEADERFUNCTION, on_header) ||
            curl_easy_setopt(f->easy, CURLOPT_HEADERDATA, f) ||
            curl_easy_setopt(f->easy, CURLOPT_WRITEFUNCTION, on_channel_data) ||
            curl_easy_setopt(f->easy, CURLOPT_WRITEDATA, f) ||
            curl_easy_setopt(f->easy, CURLOPT_TIMEOUT, (long) CHANNEL_TIMEOUT_SEC) ||
            curl_easy_setopt(f->easy, CURLOPT_HTTPHEADER, f->headers) ||
            curl_glue_add(f->glue, f->easy, on_poll_done, f) < 0) {
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

static bool is_failed(Fetcher *f, const char *task, uint64_t version) {
        for (size_t i = 0; i < f->n_failed; i++)
                if (strcmp(f->failed[i].task, task) == 0 && f->failed[i].version == version)
                        return true;
        return false;
}

static void mark_failed(Fetcher *f, const TaskVersion *tv) {
        if (f->n_failed < MAX_FAILED)
                f->failed[f->n_failed++] = *tv;
}

/* The bundle has all its bytes and they hash as the channel says: install it. */
static void install_download(Fetcher *f) {
        const TaskVersion *tv = &f->dl_what;
        Operation *op = NULL;
        const char *code = NULL;
        TpError err = {};
        bool then_switch = f->channel->desired[0] && strcmp(tv->task, f->channel->desired) == 0 && !f->m->ps.pinned;
        int fd = open(f->dl.path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        int r = fd < 0 ? -errno : install_new(f->m, fd, false, then_switch, &op, &code, &err);

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
        f->phase = then_switch ? FETCH_SWITCHING : FETCH_INSTALLING;
        if (then_switch)
                set_update(f, tv->task, tv->version, "pending", NULL);
        manager_start(f->m, op, NULL, false);
        snprintf(f->transaction, sizeof(f->transaction), "%s", f->m->op ? f->m->op->transaction : "");
}

static void on_download_progress(Download *d, void *userdata) {
        Fetcher *f = userdata;
        manager_emit(f->m, NULL, json_pack("{s:s, s:s, s:I, s:I, s:I}", "event", "download", "task", f->dl_what.task,
                                           "version", (json_int_t) f->dl_what.version, "done", (json_int_t) d->have,
                                           "total", (json_int_t) d->size));
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
        r = url ? download_start(&f->dl, f->config, f->m->event, f->glue, f->easy, &spec, on_download,
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

/* The next bundle to fetch: the desired task's first, then newer versions of other tasks, for this base. */
static const ChannelBundle *next_bundle(Fetcher *f) {
        const PersistentState *ps = &f->m->ps;
        const Channel *c = f->channel;
        const ChannelBundle *pick = NULL;

        for (size_t i = 0; i < c->n_bundles; i++) {
                const ChannelBundle *b = &c->bundles[i];
                if (memcmp(b->base_sha256, ps->base.sha256, SHA256_DIGEST_SIZE) != 0 || b->kind != ps->base.kind ||
                    channel_find(c, b->task) != b || is_failed(f, b->task, b->version) ||
                    b->version <= store_newest(&f->m->store, b->task) || b->version < state_accepted(ps, b->task))
                        continue;
                if (strcmp(b->task, c->desired) == 0)
                        return b;
                if (!pick)
                        pick = b;
        }
        return pick;
}

/* Exactly the version of the desired task the channel lists, once installed; never another one. */
static void switch_to_desired(Fetcher *f) {
        const Channel *c = f->channel;
        const ChannelBundle *want = channel_find(c, c->desired);
        const InstalledTask *t = want ? store_find(&f->m->store, want->task, want->version) : NULL;
        const Seal *active = &f->m->seals[f->m->active];
        Operation *op = NULL;
        const char *code = NULL;
        TpError err = {};

        if (!t || (strcmp(active->task, t->task) == 0 && active->version == t->version) ||
            is_failed(f, t->task, t->version))
                return;
        TaskVersion tv = { .version = t->version };
        snprintf(tv.task, sizeof(tv.task), "%s", t->task);
        int r = switch_new(f->m, tv.task, tv.version, &op, &code, &err);
        if (r < 0) {
                set_error(f, "switch to %s v%" PRIu64 ": %s", tv.task, tv.version, tp_error_message(&err, r));
                set_update(f, tv.task, tv.version, "failure", f->last_error);
                mark_failed(f, &tv);
                return;
        }
        if (!op)
                return;         /* already active */
        log_info("channel %s: switching to the desired task %s v%" PRIu64, c->name, tv.task, tv.version);
        set_update(f, tv.task, tv.version, "pending", NULL);
        f->phase = FETCH_SWITCHING;
        manager_start(f->m, op, NULL, false);
        snprintf(f->transaction, sizeof(f->transaction), "%s", f->m->op ? f->m->op->transaction : "");
}

static void fetch_next(Fetcher *f) {
        Manager *m = f->m;
        const ChannelBundle *b;

        if (f->phase != FETCH_IDLE || f->polling || !f->channel || !m->ps.provisioned)
                return;         /* downloads share the poll's handle */
        if (m->op || manager_state(m) != STATE_IDLE)
                return;         /* busy (an operation, a trial): the manager tells us when it ends */
        if ((b = next_bundle(f))) {
                if (!f->wait_for_poll)
                        fetch_bundle(f, b);
                return;
        }
        if (f->channel->desired[0] && !m->ps.pinned)
                switch_to_desired(f);
}

static int on_defer(sd_event_source *s _unused_, void *userdata) {
        fetch_next(userdata);
        return 0;
}

/* ---- the manager's side ---- */

void fetcher_operation_done(Fetcher *f, const Operation *op, int r) {
        if (!f)
                return;
        bool ours = f->transaction[0] && strcmp(op->transaction, f->transaction) == 0;
        if (!ours) {
                /* A technician's switch pins its task until the channel's serial changes. */
                if (r >= 0 && strcmp(op->cmd, "switch") == 0 && f->m->ps.have_channel) {
                        TpError err = {};
                        f->m->ps.pinned = true;
                        f->m->ps.pinned_serial = f->m->ps.channel_serial;
                        if (manager_save_state(f->m, &err) < 0)
                                log_warning("cannot record the pin: %s", err.message);
                        log_info("%s is pinned by the technician's switch until the channel's serial changes",
                                 op->task[0] ? op->task : "the base");
                }
                kick(f);
                return;
        }
        download_remove(&f->dl);        /* installed (the store has its copy) or refused */
        if (r < 0) {
                TaskVersion tv = { .version = op->version };
                snprintf(tv.task, sizeof(tv.task), "%s", op->task);
                set_error(f, "%s %s v%" PRIu64 ": %s", op->cmd, op->task, op->version, tp_error_message(&op->err, r));
                set_update(f, op->task, op->version, "failure", f->last_error);
                mark_failed(f, &tv);
                f->transaction[0] = '\0';
                f->phase = FETCH_IDLE;
        } else if (!manager_on_trial(f->m)) {
                /* Installed only, or the switch committed at once (no trial). */
                if (f->phase == FETCH_SWITCHING)
                        set_update(f, op->task, op->version, "success", NULL);
                f->transaction[0] = '\0';
                f->phase = FETCH_IDLE;
        }
        /* else: on trial; fetcher_trial_done() says how it ended. */
        kick(f);
}

void fetcher_trial_done(Fetcher *f, const char *transaction, bool committed, const char *reason) {
        if (!f)
                return;
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

json_t *fetcher_status(const Fetcher *f) {
        char when[21];
        json_t *urls = json_array();
        for (size_t i = 0; i < f->config->channel.n_urls; i++)
                json_array_append_new(urls, json_string(f->config->channel.urls[i]));
        json_t *o = json_pack("{s:o, s:s, s:o, s:o}", "urls", urls, "state",
                              f->polling && f->phase == FETCH_IDLE ? "polling" : phase_names[f->phase], "serial",
                              f->m->ps.have_channel ? json_integer((json_int_t) f->m->ps.channel_serial) : json_null(),
                              "last_error", f->last_error[0] ? json_string(f->last_error) : json_null());
        if (f->channel) {
                json_object_set_new(o, "name", json_string(f->channel->name));
                json_object_set_new(o, "desired", f->channel->desired[0] ? json_string(f->channel->desired) : json_null());
        }
        json_object_set_new(o, "pinned", json_boolean(f->m->ps.pinned));
        if (f->last_poll) {
                format_time_utc(f->last_poll, when);
                json_object_set_new(o, "last_poll", json_string(when));
                json_object_set_new(o, "last_poll_http_status", json_integer(f->last_status));
                json_object_set_new(o, "last_poll_bytes", json_integer((json_int_t) f->last_poll_bytes));
        }
        if (f->dl.easy)
                json_object_set_new(o, "download",
                                    json_pack("{s:s, s:I, s:s, s:I, s:I}", "task", f->dl_what.task, "version",
                                              (json_int_t) f->dl_what.version, "url", f->dl.url, "done",
                                              (json_int_t) f->dl.have, "total", (json_int_t) f->dl.size));
        if (f->update.result)
                json_object_set_new(o, "update",
                                    json_pack("{s:s, s:I, s:s, s:o}", "task", f->update.what.task, "version",
                                              (json_int_t) f->update.what.version, "result", f->update.result,
                                              "reason", f->update.reason[0] ? json_string(f->update.reason) : json_null()));
        return o;
}

/* ---- life ---- */

int fetcher_new(Manager *m, Fetcher **ret, TpError *err) {
        Fetcher *f;
        int r;

        *ret = NULL;
        if (m->config->channel.n_urls == 0)
                return 0;
        f = calloc(1, sizeof(Fetcher));
        if (!f)
                return -ENOMEM;
        f->m = m;
        f->config = m->config;
        f->dl = DOWNLOAD_NULL;
        f->body = malloc(CHANNEL_MAX_FILE);
        f->easy = curl_easy_init();
        if (!f->body || !f->easy) {
                fetcher_free(f);
                return -ENOMEM;
        }
        if ((r = curl_glue_new(m->event, &f->glue)) < 0 ||
            (r = sd_event_add_time_relative(m->event, &f->timer, CLOCK_BOOTTIME, 1000000, 0, on_timer, f)) < 0 ||
            (r = sd_event_add_defer(m->event, &f->defer, on_defer, f)) < 0) {
                fetcher_free(f);
                return tp_error(err, r, "channel: cannot set up polling: %s", strerror(-r));
        }
        (void) sd_event_source_set_enabled(f->defer, SD_EVENT_OFF);
        (void) sd_event_source_set_description(f->timer, "channel-poll");
        /* The first poll a second after start. */
        log_info("polling the channel %s every %" PRIu64 " s", f->config->channel.urls[0], f->config->channel.interval);
        *ret = f;
        return 0;
}

Fetcher *fetcher_free(Fetcher *f) {
        if (!f)
                return NULL;
        download_stop(&f->dl);
        if (f->glue && f->easy)
                curl_glue_remove(f->glue, f->easy);
        curl_glue_free(f->glue);
        if (f->easy)
                curl_easy_cleanup(f->easy);
        curl_slist_free_all(f->headers);
        sd_event_source_disable_unref(f->timer);
        sd_event_source_disable_unref(f->defer);
        channel_free(f->channel);
        free(f->channel_url);
        free(f->body);
        free(f);
        return NULL;
}
