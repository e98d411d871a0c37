/* SPDX-License-Identifier: MIT */
/* tpctl: the progress bar drawn on stderr (a terminal only) while an operation runs. */

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tpctl.h"

#define BAR_WIDTH 30

/* The bar on screen, if any, so an error message can end its line first. */
static Progress *drawn_bar;

void progress_init(Progress *p, bool want) {
        *p = (Progress) { .enabled = want && isatty(STDERR_FILENO), .percent = -1 };
}

void progress_done(Progress *p) {
        if (!p->drawn)
                return;
        fputc('\n', stderr);
        fflush(stderr);
        p->drawn = false;
        drawn_bar = NULL;
}

void progress_interrupt(void) {
        if (drawn_bar)
                progress_done(drawn_bar);
}

static void mib(uint64_t v, char *buf, size_t n) {
        snprintf(buf, n, "%.1f", (double) v / (1024.0 * 1024.0));
}

void progress_event(Progress *p, json_t *event) {
        const char *name = get_str(event, "event");
        char phase[sizeof(p->phase)], done_s[32], total_s[32], bar[BAR_WIDTH + 1];
        uint64_t done = 0, total = 0;
        int percent = -1;

        if (!p->enabled || !name)
                return;
        if (strcmp(name, "download") == 0)
                snprintf(phase, sizeof(phase), "download");
        else if (strcmp(name, "staging") == 0)
                snprintf(phase, sizeof(phase), "%s", get_str(event, "phase") ?: "staging");
        else
                return;
        for (char *s = phase; *s; s++)
                if ((unsigned char) *s < 0x20 || *s == 0x7f)
                        *s = '?';

        (void) get_u64(event, "done", &done);
        (void) get_u64(event, "total", &total);
        if (total > 0)
                percent = done >= total ? 100 : (int) ((double) done * 100.0 / (double) total);

        bool same_phase = strcmp(phase, p->phase) == 0;
        if (p->drawn && same_phase && percent == p->percent)
                return;         /* nothing visible changed: spare the terminal */
        if (p->drawn && !same_phase)
                progress_done(p);       /* keep the finished phase on its own line */
        memcpy(p->phase, phase, sizeof(phase));
        p->percent = percent;

        mib(done, done_s, sizeof(done_s));
        if (percent >= 0) {
                int fill = percent * BAR_WIDTH / 100;
                memset(bar, '#', (size_t) fill);
                memset(bar + fill, '-', (size_t) (BAR_WIDTH - fill));
                bar[BAR_WIDTH] = '\0';
                mib(total, total_s, sizeof(total_s));
                fprintf(stderr, "\r%-8s [%s] %3d%%  %s/%s MiB ", phase, bar, percent, done_s, total_s);
        } else {
                fprintf(stderr, "\r%-8s %s MiB ", phase, done_s);
        }
        fflush(stderr);
        p->drawn = true;
        drawn_bar = p;
}
