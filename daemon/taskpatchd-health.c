/* SPDX-License-Identifier: MIT */

/*
 * Trial health probes. The command runs as `/bin/sh -c COMMAND` in its own process
 * group (so a timeout kills what the shell started too), watched with an sd-event
 * child source; the URL is one GET through CurlGlue. Every result reaches the
 * caller through one defer source, so the callback never runs inside
 * health_check_probe() or inside another module's handler, and may free the check.
 *
 * sd_event_add_child() requires SIGCHLD to be blocked in every thread of the
 * process: the daemon blocks it (sigprocmask) before its event loop starts.
 */

#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "taskpatchd-curl.h"
#include "taskpatchd-health.h"
#include "taskpatchd-spawn.h"

#ifndef TASKPATCH_VERSION
#  define TASKPATCH_VERSION "unknown"
#endif

#define HEALTH_BODY_MAX (64u * 1024) /* bytes of a URL's answer we read before we stop listening */
#define EXIT_NOT_YET    75           /* EX_TEMPFAIL */

typedef struct Part {
        bool pending;
        HealthResult result;
        char detail[96];
} Part;

struct HealthCheck {
        sd_event *event;
        char *command, *url;
        uint64_t timeout_usec;
        CurlGlue *glue;                 /* only with a URL */
        sd_event_source *deliver;       /* defer: hands a finished probe to the caller */

        /* The running probe. */
        bool running;
        HealthCallback cb;
        void *userdata;
        Part cmd, http;

        pid_t pid;                      /* the shell (and its process group); > 0 until reaped */
        sd_event_source *child, *timer;
        bool timed_out;

        CURL *easy;
        size_t body_bytes;
        bool body_capped;
};

static const char *const health_result_table[_HEALTH_RESULT_MAX] = {
        [HEALTH_OK] = "ok",
        [HEALTH_NOT_YET] = "not-yet",
        [HEALTH_FAILING] = "failing",
};

const char *health_result_to_string(HealthResult r) {
        if (r < 0 || r >= _HEALTH_RESULT_MAX)
                return NULL;
        return health_result_table[r];
}

static void part_set(Part *p, HealthResult result, const char *fmt, ...) _printf_(3, 4);
static void part_set(Part *p, HealthResult result, const char *fmt, ...) {
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(p->detail, sizeof(p->detail), fmt, ap);
        va_end(ap);
        p->result = result;
        p->pending = false;
}

static void format_timeout(char *buf, size_t size, uint64_t usec) {
        if (usec % 1000000 == 0)
                snprintf(buf, size, "timed out after %" PRIu64 " s", usec / 1000000);
        else
                snprintf(buf, size, "timed out after %" PRIu64 " ms", (usec + 999) / 1000);
}

/* Kill the command's process group and reap the shell; no callback. */
static void command_stop(HealthCheck *h) {
        h->timer = sd_event_source_unref(h->timer);
        h->child = sd_event_source_unref(h->child);
        if (h->pid <= 0)
                return;
        (void) kill(-h->pid, SIGKILL);
        (void) kill(h->pid, SIGKILL);
        while (waitpid(h->pid, NULL, 0) < 0 && errno == EINTR)
                ;
        h->pid = 0;
}

static void http_stop(HealthCheck *h) {
        if (!h->easy)
                return;
        curl_glue_remove(h->glue, h->easy);
        curl_easy_cleanup(h->easy);
        h->easy = NULL;
}

static void probe_stop(HealthCheck *h) {
        command_stop(h);
        http_stop(h);
        if (h->deliver)
                (void) sd_event_source_set_enabled(h->deliver, SD_EVENT_OFF);
        h->running = false;
        h->cb = NULL;
        h->userdata = NULL;
}

static void maybe_deliver(HealthCheck *h) {
        if (h->cmd.pending || h->http.pending)
                return;
        /* If this fails the probe hangs until freed; it can only fail for a dead event loop. */
        (void) sd_event_source_set_enabled(h->deliver, SD_EVENT_ONESHOT);
}

static HealthResult combine(const Part *const parts[], size_t n, char *detail, size_t size) {
        HealthResult result = HEALTH_OK;
        size_t len = 0;

        for (size_t i = 0; i < n; i++)
                if (parts[i] && parts[i]->result > result)
                        result = parts[i]->result;      /* FAILING > NOT_YET > OK */

        detail[0] = '\0';
        for (size_t i = 0; i < n; i++) {
                if (!parts[i] || parts[i]->result != result || len >= size)
                        continue;
                int k = snprintf(detail + len, size - len, "%s%s", len > 0 ? ", " : "", parts[i]->detail);
                if (k > 0)
                        len += (size_t) k;
        }
        return result;
}

static int on_deliver(sd_event_source *s _unused_, void *userdata) {
        HealthCheck *h = userdata;
        const Part *parts[] = { h->command ? &h->cmd : NULL, h->url ? &h->http : NULL };
        char detail[2 * sizeof(h->cmd.detail)];
        HealthResult result = combine(parts, ELEMENTSOF(parts), detail, sizeof(detail));
        HealthCallback cb = h->cb;
        void *cb_userdata = h->userdata;

        /* Finish first: the callback may start the next probe or free @h. */
        probe_stop(h);
        cb(cb_userdata, result, detail);
        return 0;
}

/* ---- the command ---------------------------------------------------------- */

static int on_child(sd_event_source *s _unused_, const siginfo_t *si, void *userdata) {
        HealthCheck *h = userdata;

        /* sd-event reaps the child when we return; the source stays until the probe ends. */
        h->pid = 0;
        h->timer = sd_event_source_unref(h->timer);

        if (si->si_code == CLD_EXITED) {
                if (si->si_status == 0)
                        part_set(&h->cmd, HEALTH_OK, "exit status 0");
                else if (si->si_status == EXIT_NOT_YET)
                        part_set(&h->cmd, HEALTH_NOT_YET, "exit status %d", si->si_status);
                else
                        part_set(&h->cmd, HEALTH_FAILING, "exit status %d", si->si_status);
        } else if (h->timed_out) {
                format_timeout(h->cmd.detail, sizeof(h->cmd.detail), h->timeout_usec);
                h->cmd.result = HEALTH_NOT_YET;
                h->cmd.pending = false;
        } else
                part_set(&h->cmd, HEALTH_FAILING, "killed by signal %d", si->si_status);

        maybe_deliver(h);
        return 0;
}

static int on_command_timeout(sd_event_source *s _unused_, uint64_t usec _unused_, void *userdata) {
        HealthCheck *h = userdata;

        /* The child source reports the kill; the result is "not yet" then. */
        h->timed_out = true;
        if (h->pid > 0) {
                (void) kill(-h->pid, SIGKILL);
                (void) kill(h->pid, SIGKILL);
        }
        return 0;
}

static int command_start(HealthCheck *h) {
        int r;

        r = shell_spawn(h->command, NULL, &h->pid);
        if (r < 0)
                return r;
        h->timed_out = false;
        h->cmd.pending = true;

        r = sd_event_add_child(h->event, &h->child, h->pid, WEXITED, on_child, h);
        if (r < 0)
                return r;       /* -EBUSY: SIGCHLD is not blocked */
        (void) sd_event_source_set_description(h->child, "health-command");

        r = sd_event_add_time_relative(h->event, &h->timer, CLOCK_BOOTTIME, h->timeout_usec, 1000,
                                       on_command_timeout, h);
        if (r < 0)
                return r;
        (void) sd_event_source_set_description(h->timer, "health-command-timeout");
        return 0;
}

/* ---- the URL -------------------------------------------------------------- */

static size_t on_body(char *data _unused_, size_t size, size_t nmemb, void *userdata) {
        HealthCheck *h = userdata;
        size_t n = size * nmemb;

        /* The status line is the answer; a body that goes on and on ends the transfer. */
        if (n > HEALTH_BODY_MAX - h->body_bytes) {
                h->body_capped = true;
                return 0;
        }
        h->body_bytes += n;
        return n;
}

static void on_http_done(CurlGlue *g _unused_, CURL *easy, CURLcode result, void *userdata) {
        HealthCheck *h = userdata;
        long status = 0;

        if (result == CURLE_OK || (result == CURLE_WRITE_ERROR && h->body_capped)) {
                (void) curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
                part_set(&h->http, status == 200 ? HEALTH_OK : status == 503 ? HEALTH_NOT_YET : HEALTH_FAILING,
                         "HTTP %ld", status);
        } else if (result == CURLE_COULDNT_CONNECT)
                part_set(&h->http, HEALTH_NOT_YET, "connection refused");
        else if (result == CURLE_OPERATION_TIMEDOUT) {
                format_timeout(h->http.detail, sizeof(h->http.detail), h->timeout_usec);
                h->http.result = HEALTH_NOT_YET;
                h->http.pending = false;
        } else
                part_set(&h->http, HEALTH_FAILING, "%s", curl_easy_strerror(result));

        maybe_deliver(h);
}

static int http_start(HealthCheck *h) {
        uint64_t ms = (h->timeout_usec + 999) / 1000;
        long timeout_ms = ms > LONG_MAX ? LONG_MAX : (long) ms;
        CURLcode c = CURLE_OK;

        h->easy = curl_easy_init();
        if (!h->easy)
                return -ENOMEM;
        h->body_bytes = 0;
        h->body_capped = false;

#define SET(opt, val)                                                   \
        do {                                                            \
                if (c == CURLE_OK)                                      \
                        c = curl_easy_setopt(h->easy, opt, val);        \
        } while (0)
        SET(CURLOPT_URL, h->url);
        SET(CURLOPT_HTTPGET, 1L);
        SET(CURLOPT_NOSIGNAL, 1L);
        SET(CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
        SET(CURLOPT_TIMEOUT_MS, timeout_ms);
        SET(CURLOPT_FOLLOWLOCATION, 0L);
#if LIBCURL_VERSION_NUM >= 0x075500 /* 7.85.0 */
        SET(CURLOPT_PROTOCOLS_STR, "http,https");
#else
        SET(CURLOPT_PROTOCOLS, (long) (CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
        /* The service is normally local: a proxy from the environment must not answer for it. */
        SET(CURLOPT_NOPROXY, "localhost,127.0.0.1,::1");
        SET(CURLOPT_USERAGENT, "taskpatchd/" TASKPATCH_VERSION);
        SET(CURLOPT_WRITEFUNCTION, on_body);
        SET(CURLOPT_WRITEDATA, h);
#undef SET
        if (c != CURLE_OK)
                return c == CURLE_OUT_OF_MEMORY ? -ENOMEM : -EINVAL;

        h->http.pending = true;
        return curl_glue_add(h->glue, h->easy, on_http_done, h);
}

/* ---- lifecycle ------------------------------------------------------------- */

int health_check_new(sd_event *e, const char *command, const char *url, uint64_t probe_timeout_usec,
                     HealthCheck **ret) {
        HealthCheck *h;
        int r;

        if (!e || !ret || (!command && !url) || (command && !*command) || (url && !*url) ||
            probe_timeout_usec == 0)
                return -EINVAL;

        h = calloc(1, sizeof(*h));
        if (!h)
                return -ENOMEM;
        h->event = sd_event_ref(e);
        h->timeout_usec = probe_timeout_usec;

        if ((command && !(h->command = strdup(command))) || (url && !(h->url = strdup(url)))) {
                r = -ENOMEM;
                goto fail;
        }
        if (url) {
                r = curl_glue_new(e, &h->glue);
                if (r < 0)
                        goto fail;
        }

        r = sd_event_add_defer(e, &h->deliver, on_deliver, h);
        if (r < 0)
                goto fail;
        (void) sd_event_source_set_description(h->deliver, "health-result");
        r = sd_event_source_set_enabled(h->deliver, SD_EVENT_OFF);
        if (r < 0)
                goto fail;

        *ret = h;
        return 0;

fail:
        health_check_free(h);
        return r;
}

HealthCheck *health_check_free(HealthCheck *h) {
        if (!h)
                return NULL;
        probe_stop(h);
        sd_event_source_unref(h->deliver);
        curl_glue_free(h->glue);
        free(h->command);
        free(h->url);
        sd_event_unref(h->event);
        free(h);
        return NULL;
}

int health_check_probe(HealthCheck *h, HealthCallback cb, void *userdata) {
        int r;

        if (!h || !cb)
                return -EINVAL;
        if (h->running)
                return -EBUSY;

        h->running = true;
        h->cb = cb;
        h->userdata = userdata;
        h->cmd = h->http = (Part) {};

        if (h->command) {
                r = command_start(h);
                if (r < 0)
                        goto fail;
        }
        if (h->url) {
                r = http_start(h);
                if (r < 0)
                        goto fail;
        }
        return 0;

fail:
        probe_stop(h);
        return r;
}
