/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * tpctl's own pieces, one file per noun: the connection to taskpatchd
 * (tpctl-conn.c), the progress line (tpctl-progress.c), human formatting
 * (tpctl-format.c), how a failure is reported (tpctl-failure.c) and the
 * commands (tpctl-status.c, tpctl-operation.c, tpctl-watch.c). Commands
 * return a tpctl exit code.
 */

#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "cli.h"
#include "jsonline.h"

#define TPCTL_DEFAULT_SOCKET "/run/taskpatch/taskpatchd.sock"

/* tpctl(1), EXIT STATUS. */
enum {
        TPCTL_EXIT_OK = 0,
        TPCTL_EXIT_USAGE = 1,           /* tpctl's own usage error */
        TPCTL_EXIT_REFUSED = 2,         /* usage, permission, refused, not-found, too-large */
        TPCTL_EXIT_FAILED = 3,          /* busy, io, no-space, internal; unreachable; connection lost */
        TPCTL_EXIT_ROLLED_BACK = 4,     /* rolled-back */
};

/*
 * tpctl's own failures, as the "code" of the --json error object (tpctl(1), JSON ERRORS).
 * A refusal by the daemon is the daemon's own object instead.
 */
typedef enum TpctlFailure {
        TPCTL_FAILURE_USAGE,            /* "usage": tpctl's own usage error (exit 1) */
        TPCTL_FAILURE_UNREACHABLE,      /* "unreachable": cannot connect to the socket (exit 3) */
        TPCTL_FAILURE_IO,               /* "io": the connection failed, or the daemon's line cannot be read (exit 3) */
        TPCTL_FAILURE_INTERNAL,         /* "internal": tpctl ran out of memory (exit 3) */
        _TPCTL_FAILURE_MAX,
        _TPCTL_FAILURE_INVALID = -EINVAL,
} TpctlFailure;

/* The global options. */
typedef struct Tpctl {
        const char *socket_path;
        const char *model;              /* --model: every request names it; NULL: none */
        bool json;
        bool no_progress;
} Tpctl;

/* Options every command accepts too (after its name): getopt_long() values and table entries. */
enum {
        OPT_HELP = 'h',
        OPT_MODEL = 'm',
        OPT_SOCKET = 0x100,
        OPT_JSON,
        OPT_NO_PROGRESS,
        OPT_COMMAND_BASE,       /* first value free for a command's own options */
};
#define TPCTL_GLOBAL_OPTIONS                                            \
        { "help", no_argument, NULL, OPT_HELP },                        \
        { "socket", required_argument, NULL, OPT_SOCKET },              \
        { "json", no_argument, NULL, OPT_JSON },                        \
        { "no-progress", no_argument, NULL, OPT_NO_PROGRESS },          \
        { "model", required_argument, NULL, OPT_MODEL }

/*
 * Handle @c (from getopt_long) when it is a global option, --help of @command (NULL: tpctl's
 * own help) or an option error (opterr must be 0 and the optstring start with ':').
 * Returns TPCTL_GO_ON (keep parsing), TPCTL_NOT_MINE (the command's own option), or the
 * exit code to return at once (after --help, or a usage error it printed).
 */
enum {
        TPCTL_GO_ON = -1,
        TPCTL_NOT_MINE = -2,
};
int tpctl_common_option(Tpctl *t, const char *command, int c, char *argv[]);
void tpctl_command_help(const char *command);
/* Parse the options of a command that takes no arguments: TPCTL_GO_ON, or the exit code to return. */
int tpctl_parse_options(Tpctl *t, const char *command, int argc, char *argv[]);
/* Complain about an argument ("tpctl switch: ...") and return TPCTL_EXIT_USAGE (a TPCTL_FAILURE_USAGE). */
_printf_(2, 3) int tpctl_usage_error(const char *command, const char *fmt, ...);

/* ---- tpctl-failure.c: what a failed run says ---- */

const char *tpctl_failure_to_string(TpctlFailure f);   /* "usage", "unreachable", "io", "internal" */
/* The exit code of @f: TPCTL_EXIT_USAGE or TPCTL_EXIT_FAILED. */
int tpctl_failure_exit(TpctlFailure f);
/*
 * "tpctl: <message>" on stderr (on a line of its own even while a bar is drawn), and
 * remember it as the run's failure (the first one counts: it is the cause). Returns
 * tpctl_failure_exit(@f).
 */
_printf_(2, 3) int tpctl_fail(TpctlFailure f, const char *fmt, ...);
/* Like tpctl_fail(), for a message already formatted with its own prefix on stderr. */
void tpctl_failure_record(TpctlFailure f, const char *message);
/* A daemon's response went to stdout (--json): it is the run's one JSON object. */
void tpctl_failure_answered(void);
/*
 * The end of every run: with --json and @ex not 0, print the run's failure as one
 * {"ok":false,"error":{"code","message"}} line on stdout, unless the daemon's own
 * answer was printed. Returns @ex.
 */
int tpctl_finish(const Tpctl *t, int ex);

/* ---- tpctl-conn.c: one connection to taskpatchd ---- */

typedef struct Conn {
        int fd;
        const char *path;
        const char *model;      /* added to every request sent (--model), NULL: none */
        LineReader reader;
        bool eof;               /* the daemon closed its end */
        bool overflow;          /* a line over JSONLINE_MAX_MESSAGE came: nothing more is read */
        char buf[16384];
} Conn;

/* Connect to @t's socket; prints why not (a TPCTL_FAILURE_UNREACHABLE) and returns -errno. */
int conn_open(Conn *c, const Tpctl *t);
void conn_close(Conn *c);
/* Send @req as one line, with @fd (SCM_RIGHTS) when >= 0; prints and returns -errno on failure. */
int conn_send(Conn *c, const json_t *req, int fd);
/*
 * Called before each wait for the daemon's next bytes: draw what depends on the time, and
 * return the milliseconds after which to be called again when nothing came (-1: no limit).
 */
typedef int (*IdleFn)(void *userdata);
/*
 * The next line from the daemon, parsed (*ret) and raw (*ret_line, valid until the next
 * read): 1; 0 at EOF; -errno after printing why (broken line, over 1 MiB, lost connection:
 * a TPCTL_FAILURE_IO). @on_idle may be NULL.
 */
int conn_read(Conn *c, IdleFn on_idle, void *userdata, json_t **ret, const char **ret_line);

/* Called for each event line while waiting for a response. */
typedef void (*EventFn)(json_t *event, const char *line, void *userdata);
/*
 * Send @req and read until its response, giving event lines to @on_event and the waits to
 * @on_idle (either may be NULL). 0 with the response in *ret (ok true or false), or -errno
 * after printing (also when the daemon closed the connection before answering).
 */
int conn_call(Conn *c, const json_t *req, int fd, EventFn on_event, IdleFn on_idle, void *userdata, json_t **ret);

/* The exit code for a response, after printing it (--json: the run's JSON object) and its error message. */
int response_exit(const Tpctl *t, json_t *resp);
/* The exit code for an error code of the protocol ("busy" → 3). */
int error_code_exit(const char *code);
/* Connect, call, print: the whole life of a one-request command; *ret_resp (when not NULL) gets a ref. */
int tpctl_simple_call(const Tpctl *t, const json_t *req, json_t **ret_resp);

/* ---- tpctl-progress.c: the progress line on stderr ---- */

/*
 * One line on stderr (a terminal only), redrawn in place: the phase of the running
 * operation with a bar of that phase's done/total (a new line for each phase; a phase
 * without bytes is only named, and the next one overwrites it), then, after
 * trial-started, the wait for the health check counting down to the trial's end
 * (cleared when the trial settles).
 */
typedef struct Progress {
        bool enabled;           /* stderr is a terminal and --no-progress was not given */
        bool drawn;             /* something is on the line */
        bool keep;              /* ...a bar, kept when the line ends (else it is cleared) */
        size_t width;           /* characters of the line drawn, to blank a longer one's rest */
        char line[512];         /* as drawn, so that the same text is not drawn again */
        char phase[32];         /* of the last staging or download event */
        /* The wait for the trial's outcome: from trial-started to committed, rolled-back or the response. */
        bool waiting;
        uint64_t wait_end_usec;         /* CLOCK_MONOTONIC */
        int64_t shown_left;             /* seconds drawn, -1: none yet */
        char health[160];               /* the last health event: "failing: HTTP 503" */
} Progress;

void progress_init(Progress *p, bool want);
/*
 * Draw a "download" or "staging" event, start the countdown at "trial-started", note a
 * "health" event's detail, end the countdown at "committed" or "rolled-back"; other
 * events are ignored.
 */
void progress_event(Progress *p, json_t *event);
/* An IdleFn (@userdata a Progress): redraw the countdown when its second changed; when to come back. */
int progress_idle(void *userdata);
/* End the line: a bar keeps its line, a phase name or a countdown is cleared. */
void progress_done(Progress *p);
/* End the line of whatever is drawn (before a message goes to stderr). */
void progress_interrupt(void);

/* "tpctl: <message>" on stderr, on a line of its own even while a bar is drawn: not a failure. */
#define tpctl_error(...)                        \
        do {                                    \
                progress_interrupt();           \
                cli_error(__VA_ARGS__);         \
        } while (0)

/* ---- tpctl-format.c: human output ---- */

/* Replace control characters in every string of @j (daemon text reaching a terminal). */
void json_sanitize(json_t *j);
/* From @obj's "task" and "version": "json v3", or "base model" when task is null; NULL without a task. */
const char *format_task(json_t *obj, char *buf, size_t n);
/* "23.5 MiB", "4.0 KiB", "512 B". */
const char *format_bytes(uint64_t v, char *buf, size_t n);
/* An ISO 8601 UTC time ("2026-11-29T15:00:00Z", fractions allowed) as seconds; -EINVAL when not one. */
int parse_iso8601(const char *s, int64_t *ret);
/* Characters (UTF-8 sequences) in @s. */
size_t utf8_width(const char *s);
/* @s cut to at most @max characters (and @n - 1 bytes), "..." ending a cut one, into @buf; returns @buf. */
const char *format_truncate(const char *s, size_t max, char *buf, size_t n);
/* String member or NULL. */
const char *get_str(json_t *obj, const char *key);
/* Non-negative integer member, or false. */
bool get_u64(json_t *obj, const char *key, uint64_t *ret);

/* ---- the commands ---- */

int cmd_status(Tpctl *t, int argc, char *argv[]);
int cmd_list(Tpctl *t, int argc, char *argv[]);
int cmd_provision(Tpctl *t, int argc, char *argv[]);
int cmd_install(Tpctl *t, int argc, char *argv[]);
int cmd_switch(Tpctl *t, int argc, char *argv[]);
int cmd_mark_good(Tpctl *t, int argc, char *argv[]);
int cmd_rollback(Tpctl *t, int argc, char *argv[]);
int cmd_trust(Tpctl *t, int argc, char *argv[]);
int cmd_watch(Tpctl *t, int argc, char *argv[]);
