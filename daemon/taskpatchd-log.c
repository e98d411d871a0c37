/* SPDX-License-Identifier: MIT */

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <systemd/sd-journal.h>

#include "taskpatchd-log.h"

static int max_priority = LOG_INFO;

void log_setup(void) {
        static const char *const names[] = { "emerg", "alert", "crit", "err", "warning", "notice", "info", "debug" };
        const char *e = getenv("TASKPATCHD_LOG_LEVEL");

        for (int i = 0; e && i < (int) ELEMENTSOF(names); i++)
                if (strcmp(e, names[i]) == 0)
                        max_priority = i;
}

void log_full(int priority, const char *fmt, ...) {
        char line[2048];
        va_list ap;

        if (priority > max_priority)
                return;
        va_start(ap, fmt);
        vsnprintf(line, sizeof(line), fmt, ap);
        va_end(ap);
        /* One write per line, so lines from a crash-restart loop never interleave. */
        fprintf(stderr, "<%d>%s\n", priority, line);
        fflush(stderr);
}

void log_lifecycle(const char *model, const char *prefix, const char *event, const char *task,
                   unsigned long long version, const char *slot, const char *sha256, const char *transaction,
                   const char *detail) {
        const char *t = task && task[0] ? task : "(base)";

        log_full(LOG_NOTICE, "%s%s: %s v%llu in slot %s%s%s", prefix, event, t, version, slot, detail ? ": " : "",
                 detail ? detail : "");
        /* No journald (tests, containers): the stderr line above is the record. */
        (void) sd_journal_send("MESSAGE=taskpatchd: %s%s: %s v%llu in slot %s%s%s", prefix, event, t, version, slot,
                               detail ? ": " : "", detail ? detail : "", "PRIORITY=%d", LOG_NOTICE,
                               "SYSLOG_IDENTIFIER=taskpatchd", "TASKPATCH_EVENT=%s", event, "MODEL=%s", model,
                               "TASK=%s", t, "VERSION=%llu", version, "SLOT=%s", slot, "SHA256=%s",
                               sha256 ? sha256 : "", "TRANSACTION_ID=%s", transaction ? transaction : "", NULL);
}
