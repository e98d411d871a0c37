/* SPDX-License-Identifier: MIT */
/*
 * tpctl: the progress line drawn on stderr (a terminal only) while an operation runs: one
 * bar per phase of bytes, then the countdown of a trial's health check.
 *
 * The daemon's done/total are the bytes of the phase it names ("copy", "write", "verify");
 * the other phases ("prepare", "seal", "commit", "activate") have none. A daemon that still
 * counts across phases is drawn as it says: a bar that starts part-full.
 */

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "tpctl.h"

#define BAR_WIDTH 30
#define USEC_PER_SEC UINT64_C(1000000)

/* The bar on screen, if any, so an error message can end its line first. */
static Progress *drawn_bar;

void progress_init(Progress *p, bool want) {
        *p = (Progress) { .enabled = want && isatty(STDERR_FILENO), .shown_left = -1 };
}

static uint64_t now_usec(void) {
        struct timespec ts;

        (void) clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * USEC_PER_SEC + (uint64_t) ts.tv_nsec / 1000;
}

/* Columns a line may use: one less than the terminal's, so that it never wraps (\r must reach its start). */
static size_t line_max(void) {
        struct winsize ws;

        if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20)
                return (size_t) ws.ws_col - 1;
        return 79;
}

/* Replace what is on the line with @text (cut to the terminal); @keep: end it with a newline, not a blank. */
static void draw(Progress *p, const char *text, bool keep) {
        char line[sizeof(p->line)];
        size_t n;

        format_truncate(text, line_max(), line, sizeof(line));
        if (p->drawn && strcmp(line, p->line) == 0)
                return;         /* nothing visible changed: spare the terminal */
        n = utf8_width(line);
        /* Blank the rest of a longer line drawn before. */
        fprintf(stderr, "\r%s%*s", line, p->drawn && p->width > n ? (int) (p->width - n) : 0, "");
        if (p->drawn && p->width > n)
                fprintf(stderr, "\r%s", line);
        fflush(stderr);
        p->drawn = true;
        p->keep = keep;
        p->width = n;
        memcpy(p->line, line, sizeof(line));
        drawn_bar = p;
}

void progress_done(Progress *p) {
        if (!p->drawn)
                return;
        if (p->keep)
                fputc('\n', stderr);
        else    /* a phase name or a countdown says nothing once it is over */
                fprintf(stderr, "\r%*s\r", (int) p->width, "");
        fflush(stderr);
        p->drawn = false;
        p->width = 0;
        drawn_bar = NULL;
}

void progress_interrupt(void) {
        if (drawn_bar) {
                drawn_bar->keep = true;         /* what it said leads up to the message */
                progress_done(drawn_bar);
        }
}

/* "8.0/37.1 MiB", "12.0/36.5 KiB", "512/900 B": both in the unit of the larger one. */
static void amount(uint64_t done, uint64_t total, char *buf, size_t n) {
        uint64_t big = total > done ? total : done;

        if (big >= 1024 * 1024)
                snprintf(buf, n, "%.1f/%.1f MiB", (double) done / (1024.0 * 1024.0), (double) total / (1024.0 * 1024.0));
        else if (big >= 1024)
                snprintf(buf, n, "%.1f/%.1f KiB", (double) done / 1024.0, (double) total / 1024.0);
        else
                snprintf(buf, n, "%" PRIu64 "/%" PRIu64 " B", done, total);
}

static void copy_clean(char *dst, size_t n, const char *src) {
        snprintf(dst, n, "%s", src);
        for (char *s = dst; *s; s++)
                if ((unsigned char) *s < 0x20 || *s == 0x7f)
                        *s = '?';
}

static void draw_phase(Progress *p, json_t *event, const char *phase_name) {
        char phase[sizeof(p->phase)], done_s[48] = "", text[160], bar[BAR_WIDTH + 1];
        uint64_t done = 0, total = 0;
        int percent = -1;

        copy_clean(phase, sizeof(phase), phase_name);
        (void) get_u64(event, "done", &done);
        (void) get_u64(event, "total", &total);
        if (total > 0) {
                percent = done >= total ? 100 : (int) ((double) done * 100.0 / (double) total);
                amount(done, total, done_s, sizeof(done_s));
        } else if (done > 0) {
                format_bytes(done, done_s, sizeof(done_s));
        }

        if (p->drawn && p->keep && strcmp(phase, p->phase) != 0) {
                fputc('\n', stderr);    /* keep the finished phase's bar on its own line */
                p->drawn = false;
                p->width = 0;
        }
        memcpy(p->phase, phase, sizeof(phase));

        if (percent >= 0) {
                int fill = percent * BAR_WIDTH / 100;
                memset(bar, '#', (size_t) fill);
                memset(bar + fill, '-', (size_t) (BAR_WIDTH - fill));
                bar[BAR_WIDTH] = '\0';
                snprintf(text, sizeof(text), "%-8s [%s] %3d%%  %s", phase, bar, percent, done_s);
        } else if (done_s[0]) {
                snprintf(text, sizeof(text), "%-8s %s", phase, done_s);
        } else {
                snprintf(text, sizeof(text), "%s", phase);      /* no bytes in this phase: no bar */
        }
        draw(p, text, percent >= 0 || done_s[0]);
}

/* "waiting for the health check, 87 s left (starting: connection refused)", when the second changed. */
static void draw_countdown(Progress *p, bool force) {
        uint64_t now = now_usec();
        int64_t left = now >= p->wait_end_usec ? 0
                     : (int64_t) ((p->wait_end_usec - now + USEC_PER_SEC - 1) / USEC_PER_SEC);
        char text[320];

        if (!force && left == p->shown_left)
                return;
        p->shown_left = left;
        snprintf(text, sizeof(text), "waiting for the health check, %" PRId64 " s left%s%s%s", left,
                 p->health[0] ? " (" : "", p->health, p->health[0] ? ")" : "");
        draw(p, text, false);
}

static void on_health(Progress *p, json_t *event) {
        const char *result = get_str(event, "result"), *detail = get_str(event, "detail");
        char text[sizeof(p->health)];

        if (detail && detail[0])
                snprintf(text, sizeof(text), "%s: %s", result ?: "?", detail);
        else
                snprintf(text, sizeof(text), "%s", result ?: "?");
        copy_clean(p->health, sizeof(p->health), text);
        if (p->waiting)
                draw_countdown(p, true);
}

void progress_event(Progress *p, json_t *event) {
        const char *name = get_str(event, "event");
        uint64_t timeout;

        if (!p->enabled || !name)
                return;
        if (strcmp(name, "download") == 0) {
                draw_phase(p, event, "download");
        } else if (strcmp(name, "staging") == 0) {
                draw_phase(p, event, get_str(event, "phase") ?: "staging");
        } else if (strcmp(name, "trial-started") == 0) {
                if (!get_u64(event, "timeout", &timeout))
                        return;
                if (p->drawn && p->keep)
                        progress_done(p);
                p->waiting = true;
                p->wait_end_usec = now_usec() + (timeout > UINT64_MAX / USEC_PER_SEC / 2 ? UINT64_MAX / 2
                                                                                         : timeout * USEC_PER_SEC);
                p->shown_left = -1;
                p->phase[0] = '\0';
                draw_countdown(p, true);
        } else if (strcmp(name, "health") == 0) {
                on_health(p, event);
        } else if (strcmp(name, "committed") == 0 || strcmp(name, "rolled-back") == 0) {
                if (!p->waiting)
                        return;
                p->waiting = false;
                progress_done(p);
        }
}

int progress_idle(void *userdata) {
        Progress *p = userdata;

        if (!p->enabled || !p->waiting)
                return -1;
        draw_countdown(p, false);
        if (p->shown_left <= 0)
                return -1;      /* nothing left to count: the daemon ends the trial */
        /* Come back when the next second begins. */
        uint64_t now = now_usec(), rest = p->wait_end_usec > now ? (p->wait_end_usec - now) % USEC_PER_SEC : 0;
        return (int) ((rest ? rest : USEC_PER_SEC) / 1000) + 1;
}
