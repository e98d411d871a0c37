/* SPDX-License-Identifier: MIT */
/* tpctl watch: subscribe to the daemon's events, print them, and run a command on slot changes. */

#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "tpctl.h"

extern char **environ;

enum {
        OPT_EXEC = OPT_COMMAND_BASE,
};

static void print_pairs(json_t *ev) {
        for (void *it = json_object_iter(ev); it; it = json_object_iter_next(ev, it)) {
                const char *key = json_object_iter_key(it);
                json_t *v = json_object_iter_value(it);

                if (strcmp(key, "event") == 0 || strcmp(key, "time") == 0 || strcmp(key, "transaction") == 0)
                        continue;
                _cleanup_free_ char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
                if (json_is_string(v))
                        printf(" %s=%s", key, json_string_value(v));
                else
                        printf(" %s=%s", key, s ?: "?");
        }
}

/* "12.0 MiB of 24.0 MiB (50%)" from done/total, or nothing. */
static void print_amount(json_t *ev) {
        char d[32], t[32];
        uint64_t done, total;

        if (!get_u64(ev, "done", &done))
                return;
        printf(" %s", format_bytes(done, d, sizeof(d)));
        if (get_u64(ev, "total", &total) && total > 0)
                printf(" of %s (%d%%)", format_bytes(total, t, sizeof(t)),
                       done >= total ? 100 : (int) ((double) done * 100.0 / (double) total));
}

/* One readable line per event: "<time> <event>: <what happened>". */
static void print_event(json_t *ev) {
        const char *name = get_str(ev, "event") ?: "?", *slot = get_str(ev, "slot") ?: "?";
        char task[160], b[32];
        uint64_t v;

        json_sanitize(ev);
        const char *label = format_task(ev, task, sizeof(task)) ?: "?", *model = get_str(ev, "model");
        printf("%s %s:", get_str(ev, "time") ?: "-", name);
        /* On a device of several models, whose event it is (a one-model device's is "default"). */
        if (model && strcmp(model, "default") != 0)
                printf(" [%s]", model);

        if (strcmp(name, "update-available") == 0) {
                printf(" %s", label);
        } else if (strcmp(name, "download") == 0) {
                printf(" %s,", label);
                print_amount(ev);
        } else if (strcmp(name, "staging") == 0) {
                printf(" %s into slot %s, %s", label, slot, get_str(ev, "phase") ?: "?");
                print_amount(ev);
        } else if (strcmp(name, "staged") == 0) {
                printf(" %s in slot %s", label, slot);
                if (get_str(ev, "sha256"))
                        printf(", sha256 %s", get_str(ev, "sha256"));
                if (get_u64(ev, "slot_bytes_written", &v))
                        printf(", %s written", format_bytes(v, b, sizeof(b)));
        } else if (strcmp(name, "slot-changed") == 0) {
                printf(" %s active in slot %s", label, slot);
                if (get_str(ev, "reason"))
                        printf(" (%s)", get_str(ev, "reason"));
                if (get_str(ev, "model_path"))
                        printf(", model %s", get_str(ev, "model_path"));
        } else if (strcmp(name, "trial-started") == 0) {
                printf(" %s in slot %s, confirm with 'tpctl mark-good'", label, slot);
                if (get_u64(ev, "timeout", &v))
                        printf(" within %" PRIu64 " s", v);
        } else if (strcmp(name, "committed") == 0) {
                printf(" %s in slot %s", label, slot);
                if (get_str(ev, "how"))
                        printf(" (%s)", get_str(ev, "how"));
        } else if (strcmp(name, "health") == 0) {
                printf(" %s", get_str(ev, "result") ?: "?");
                if (get_str(ev, "detail") && get_str(ev, "detail")[0])
                        printf(" (%s)", get_str(ev, "detail"));
        } else if (strcmp(name, "rolled-back") == 0) {
                printf(" %s failed", label);
                if (get_str(ev, "reason"))
                        printf(" (%s)", get_str(ev, "reason"));
                printf(", slot %s active again", slot);
        } else if (strcmp(name, "error") == 0) {
                printf(" %s", get_str(ev, "message") ?: "?");
                printf(" (%s%s%s)", get_str(ev, "code") ?: "?", get_str(ev, "cmd") ? ", " : "",
                       get_str(ev, "cmd") ?: "");
        } else {
                print_pairs(ev);
        }
        printf("\n");
}

/* The environment of the --exec command: every value as text, "" when absent (TASKPATCH_TASK: the base). */
static int exec_env(json_t *ev, const char *line) {
        static const struct {
                const char *var, *key;
        } strings[] = {
                { "TASKPATCH_EVENT", "event" },
                { "TASKPATCH_SLOT", "slot" },
                { "TASKPATCH_TASK", "task" },
                { "TASKPATCH_SHA256", "sha256" },
                { "TASKPATCH_MODEL_PATH", "model_path" },
                { "TASKPATCH_MODEL", "model" },
                { "TASKPATCH_REASON", "reason" },
        };
        char version[24] = "";
        uint64_t v;

        for (size_t i = 0; i < ELEMENTSOF(strings); i++)
                if (setenv(strings[i].var, get_str(ev, strings[i].key) ?: "", 1) < 0)
                        return negative_errno();
        if (get_u64(ev, "version", &v))
                snprintf(version, sizeof(version), "%" PRIu64, v);
        if (setenv("TASKPATCH_VERSION", version, 1) < 0 || setenv("TASKPATCH_EVENT_JSON", line, 1) < 0)
                return negative_errno();
        return 0;
}

/* Run '/bin/sh -c @cmd' and wait; a failure is reported, and watching goes on. */
static void run_exec(const char *cmd) {
        char *argv[] = { (char *) "sh", (char *) "-c", (char *) cmd, NULL };
        posix_spawnattr_t attr;
        sigset_t dfl;
        pid_t pid;
        int r, status;

        fflush(stdout);
        /* We ignore SIGPIPE; the command should not inherit that. */
        sigemptyset(&dfl);
        sigaddset(&dfl, SIGPIPE);
        posix_spawnattr_init(&attr);
        posix_spawnattr_setsigdefault(&attr, &dfl);
        posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF);
        r = posix_spawn(&pid, "/bin/sh", NULL, &attr, argv, environ);
        posix_spawnattr_destroy(&attr);
        if (r != 0) {
                tpctl_error("--exec: cannot run /bin/sh: %s", strerror(r));
                return;
        }
        while (waitpid(pid, &status, 0) < 0)
                if (errno != EINTR) {
                        tpctl_error("--exec: waiting for the command: %m");
                        return;
                }
        if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
                tpctl_error("--exec: the command exited with status %d", WEXITSTATUS(status));
        else if (WIFSIGNALED(status))
                tpctl_error("--exec: the command was killed by signal %d (%s)", WTERMSIG(status),
                            strsignal(WTERMSIG(status)));
}

static int exec_option(int c, const char **exec) {
        if (c != OPT_EXEC)
                return TPCTL_EXIT_USAGE;
        if (!optarg[0])
                return tpctl_usage_error("watch", "--exec: empty command");
        *exec = optarg;
        return TPCTL_GO_ON;
}

/* Handle one event line: print it, run --exec on slot-changed. TPCTL_GO_ON, or the exit code. */
static int watch_event(const Tpctl *t, const char *exec, json_t *ev, const char *line) {
        const char *name = get_str(ev, "event"), *model = get_str(ev, "model");
        bool run = exec && name && strcmp(name, "slot-changed") == 0;

        /* --model: that model's events only (a subscription hears every model's). */
        if (t->model && model && strcmp(model, t->model) != 0)
                return TPCTL_GO_ON;

        if (run) {
                int r = exec_env(ev, line);     /* before print_event() sanitizes the values */
                if (r < 0) {
                        tpctl_error("--exec: setting the environment: %s", strerror(-r));
                        run = false;
                }
        }
        if (t->json)
                printf("%s\n", line);
        else
                print_event(ev);
        if (fflush(stdout) != 0) {
                if (errno == EPIPE)     /* the reader is gone ('tpctl watch | head'): done */
                        return TPCTL_EXIT_OK;
                return tpctl_fail(TPCTL_FAILURE_IO, "writing to standard output: %m");
        }
        if (run)
                run_exec(exec);
        return TPCTL_GO_ON;
}

int cmd_watch(Tpctl *t, int argc, char *argv[]) {
        static const struct option options[] = {
                TPCTL_GLOBAL_OPTIONS,
                { "exec", required_argument, NULL, OPT_EXEC },
                {},
        };
        _cleanup_(json_decrefp) json_t *req = NULL;
        const char *exec = NULL;
        bool subscribed = false;
        int c, ex;
        Conn conn;

        while ((c = getopt_long(argc, argv, ":hm:", options, NULL)) >= 0) {
                ex = tpctl_common_option(t, "watch", c, argv);
                if (ex == TPCTL_NOT_MINE)
                        ex = exec_option(c, &exec);
                if (ex != TPCTL_GO_ON)
                        return ex;
        }
        if (optind < argc)
                return tpctl_usage_error("watch", "unexpected argument '%s'", argv[optind]);

        req = json_pack("{s:s}", "cmd", "subscribe");
        if (!req)
                return tpctl_fail(TPCTL_FAILURE_INTERNAL, "out of memory");
        if (conn_open(&conn, t) < 0)
                return TPCTL_EXIT_FAILED;
        if (conn_send(&conn, req, -1) < 0) {
                conn_close(&conn);
                return TPCTL_EXIT_FAILED;
        }

        for (ex = TPCTL_GO_ON; ex == TPCTL_GO_ON;) {
                _cleanup_(json_decrefp) json_t *j = NULL;
                const char *line;
                int r = conn_read(&conn, NULL, NULL, &j, &line);

                if (r < 0) {
                        ex = TPCTL_EXIT_FAILED;
                } else if (r == 0) {
                        ex = tpctl_fail(TPCTL_FAILURE_IO, "taskpatchd closed the connection");
                } else if (json_object_get(j, "event")) {
                        ex = watch_event(t, exec, j, line);
                } else if (!json_object_get(j, "ok")) {
                        ex = tpctl_fail(TPCTL_FAILURE_IO,
                                        "taskpatchd sent a line that is neither a response (\"ok\") nor an event (\"event\")");
                } else if (!subscribed) {
                        /* The answer to subscribe: say nothing when it is yes. */
                        if (json_is_true(json_object_get(j, "ok")))
                                subscribed = true;
                        else
                                ex = response_exit(t, j);
                }
        }
        conn_close(&conn);
        return ex;
}
