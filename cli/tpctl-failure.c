/* SPDX-License-Identifier: MIT */
/*
 * tpctl: what a failed run says. Every failure is told on stderr as it happens; with --json
 * the run also ends with exactly one JSON object on stdout: the daemon's answer when it
 * gave one, else {"ok":false,"error":{"code","message"}} for tpctl's own first failure.
 */

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "tpctl.h"

static const char *const failure_names[_TPCTL_FAILURE_MAX] = {
        [TPCTL_FAILURE_USAGE] = "usage",
        [TPCTL_FAILURE_UNREACHABLE] = "unreachable",
        [TPCTL_FAILURE_IO] = "io",
        [TPCTL_FAILURE_INTERNAL] = "internal",
};

/* The run's failure: one per process, as the exit code is. */
static struct {
        TpctlFailure failure;           /* _TPCTL_FAILURE_INVALID: none yet */
        bool answered;                  /* a daemon response is on stdout */
        char message[1024];
} run = { .failure = _TPCTL_FAILURE_INVALID };

const char *tpctl_failure_to_string(TpctlFailure f) {
        return f >= 0 && f < _TPCTL_FAILURE_MAX ? failure_names[f] : NULL;
}

int tpctl_failure_exit(TpctlFailure f) {
        return f == TPCTL_FAILURE_USAGE ? TPCTL_EXIT_USAGE : TPCTL_EXIT_FAILED;
}

void tpctl_failure_record(TpctlFailure f, const char *message) {
        if (run.failure >= 0)
                return;         /* what followed the first failure is its consequence */
        run.failure = f;
        snprintf(run.message, sizeof(run.message), "%s", message);
}

int tpctl_fail(TpctlFailure f, const char *fmt, ...) {
        char message[sizeof(run.message)];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(message, sizeof(message), fmt, ap);
        va_end(ap);
        tpctl_error("%s", message);
        tpctl_failure_record(f, message);
        return tpctl_failure_exit(f);
}

void tpctl_failure_answered(void) {
        run.answered = true;
}

int tpctl_finish(const Tpctl *t, int ex) {
        if (!t->json || ex == TPCTL_EXIT_OK || run.answered)
                return ex;
        /* Every path to a non-zero exit records why; this is the net under a missed one. */
        TpctlFailure f = run.failure >= 0 ? run.failure
                       : ex == TPCTL_EXIT_USAGE ? TPCTL_FAILURE_USAGE : TPCTL_FAILURE_IO;
        const char *message = run.failure >= 0 ? run.message : "failed (see standard error)";
        /* The message may quote a path or the daemon's bytes: jansson takes UTF-8 only. */
        char text[sizeof(run.message)];
        snprintf(text, sizeof(text), "%s", message);
        jsonline_scrub_utf8(text);

        _cleanup_(json_decrefp) json_t *j = json_pack("{s:b, s:{s:s, s:s}}", "ok", 0, "error", "code",
                                                      tpctl_failure_to_string(f), "message", text);
        _cleanup_free_ char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
        if (s)
                printf("%s\n", s);
        else
                /* Out of memory: still one object, with nothing of ours to escape. */
                printf("{\"ok\":false,\"error\":{\"code\":\"internal\",\"message\":\"out of memory\"}}\n");
        fflush(stdout);
        return ex;
}
