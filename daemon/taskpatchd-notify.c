/* SPDX-License-Identifier: MIT */
/* Notifying inference services of a slot change (taskpatchd-notify.h). */

#include <ctype.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <systemd/sd-bus.h>

#include "taskpatchd-log.h"
#include "taskpatchd-notify.h"
#include "taskpatchd-spawn.h"

#define EXEC_TIMEOUT_USEC (60 * 1000000ULL)
#define ENV_MAX 16

struct Notifier {
        sd_event *event;
        const DaemonConfig *config;
        sd_bus *bus;                    /* opened at the first use */
        sd_event_source *child, *timer; /* the exec command running */
        pid_t pid;
        json_t *pending;                /* the newest change that came while the command ran */
        unsigned calls, exec_runs;
        char last_error[TP_ERROR_MAX];
};

static void set_error(Notifier *n, const char *fmt, ...) _printf_(2, 3);
static void set_error(Notifier *n, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(n->last_error, sizeof(n->last_error), fmt, ap);
        va_end(ap);
        log_warning("notify: %s", n->last_error);
}

/* ---- systemd units over D-Bus ---- */

static int on_unit_reply(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error _unused_) {
        Notifier *n = userdata;
        const sd_bus_error *e = sd_bus_message_get_error(reply);
        const char *job = NULL;

        if (e)
                set_error(n, "%s", e->message ? e->message : e->name);
        else if (sd_bus_message_read(reply, "o", &job) >= 0)
                log_info("notify: systemd queued %s", job);
        return 0;
}

static void call_units(Notifier *n, const char *method, char *const *units, size_t n_units) {
        int r;

        if (n_units == 0)
                return;
        if (!n->bus) {
                if ((r = sd_bus_open_system(&n->bus)) < 0 || (r = sd_bus_attach_event(n->bus, n->event, 0)) < 0) {
                        set_error(n, "cannot reach systemd on the system bus: %s", strerror(-r));
                        n->bus = sd_bus_flush_close_unref(n->bus);
                        return;
                }
        }
        for (size_t i = 0; i < n_units; i++) {
                r = sd_bus_call_method_async(n->bus, NULL, "org.freedesktop.systemd1", "/org/freedesktop/systemd1",
                                             "org.freedesktop.systemd1.Manager", method, on_unit_reply, n, "ss",
                                             units[i], "replace");
                if (r < 0)
                        set_error(n, "%s %s: %s", method, units[i], strerror(-r));
                else {
                        log_info("notify: %s %s", method, units[i]);
                        n->calls++;
                }
        }
}

/* ---- the command ---- */

static void exec_done(Notifier *n) {
        n->child = sd_event_source_disable_unref(n->child);
        n->timer = sd_event_source_disable_unref(n->timer);
        n->pid = 0;
}

static void run_exec(Notifier *n, json_t *ev);

/* The command ended: a change that came meanwhile runs now (only the newest: it says what is active). */
static void exec_next(Notifier *n) {
        json_t *ev = TAKE_PTR(n->pending);

        exec_done(n);
        if (ev)
                run_exec(n, ev);
        json_decref(ev);
}

static int on_exec_exit(sd_event_source *s _unused_, const siginfo_t *si, void *userdata) {
        Notifier *n = userdata;

        if (si->si_code != CLD_EXITED || si->si_status != 0)
                set_error(n, "'%s' %s %d", n->config->notify.exec, si->si_code == CLD_EXITED ? "exited with" : "killed by signal",
                          si->si_status);
        exec_next(n);
        return 0;
}

static int on_exec_timeout(sd_event_source *s _unused_, uint64_t usec _unused_, void *userdata) {
        Notifier *n = userdata;
        if (n->pid > 0)
                (void) kill(-n->pid, SIGKILL);
        return 0;
}

/* TASKPATCH_<FIELD>=value for each string or integer field of @ev. */
static void run_exec(Notifier *n, json_t *ev) {
        char vars[ENV_MAX][512], *env[ENV_MAX + 1];
        size_t k = 0;
        const char *key;
        json_t *v;
        int r;

        if (!n->config->notify.exec)
                return;
        if (n->pid > 0) {
                /* Never two at once, and never lost: the newest change runs when this one ends. */
                log_info("notify: '%s' is still running from the last change: this one runs when it ends",
                         n->config->notify.exec);
                json_decref(n->pending);
                n->pending = json_incref(ev);
                return;
        }
        json_object_foreach(ev, key, v) {
                char name[64];
                size_t i;
                if (k == ENV_MAX || (!json_is_string(v) && !json_is_integer(v)))
                        continue;
                for (i = 0; i < sizeof(name) - 1 && key[i]; i++)
                        name[i] = key[i] == '-' ? '_' : (char) toupper((unsigned char) key[i]);
                name[i] = '\0';
                if (json_is_string(v))
                        snprintf(vars[k], sizeof(vars[k]), "TASKPATCH_%s=%s", name, json_string_value(v));
                else
                        snprintf(vars[k], sizeof(vars[k]), "TASKPATCH_%s=%" JSON_INTEGER_FORMAT, name,
                                 json_integer_value(v));
                env[k] = vars[k];
                k++;
        }
        env[k] = NULL;
        if ((r = shell_spawn(n->config->notify.exec, env, &n->pid)) < 0 ||
            (r = sd_event_add_child(n->event, &n->child, n->pid, WEXITED, on_exec_exit, n)) < 0 ||
            (r = sd_event_add_time_relative(n->event, &n->timer, CLOCK_BOOTTIME, EXEC_TIMEOUT_USEC, 0,
                                            on_exec_timeout, n)) < 0) {
                set_error(n, "cannot run '%s': %s", n->config->notify.exec, strerror(-r));
                if (n->pid > 0 && !n->child)
                        (void) kill(-n->pid, SIGKILL);
                if (!n->child)
                        n->pid = 0;
                return;
        }
        n->exec_runs++;
}

void notifier_slot_changed(Notifier *n, json_t *ev) {
        if (!n)
                return;
        n->last_error[0] = '\0';
        call_units(n, "RestartUnit", n->config->notify.restart_units, n->config->notify.n_restart_units);
        call_units(n, "ReloadOrRestartUnit", n->config->notify.reload_units, n->config->notify.n_reload_units);
        run_exec(n, ev);
}

json_t *notifier_status(const Notifier *n) {
        return json_pack("{s:I, s:I, s:o}", "unit_calls", (json_int_t) n->calls, "exec_runs", (json_int_t) n->exec_runs,
                         "last_error", n->last_error[0] ? json_string(n->last_error) : json_null());
}

int notifier_new(sd_event *e, const DaemonConfig *config, Notifier **ret, TpError *err _unused_) {
        const DaemonConfig *c = config;
        Notifier *n;

        *ret = NULL;
        if (c->notify.n_restart_units == 0 && c->notify.n_reload_units == 0 && !c->notify.exec)
                return 0;
        n = calloc(1, sizeof(Notifier));
        if (!n)
                return -ENOMEM;
        n->event = e;
        n->config = c;
        *ret = n;
        return 0;
}

Notifier *notifier_free(Notifier *n) {
        if (!n)
                return NULL;
        if (n->pid > 0)
                (void) kill(-n->pid, SIGKILL);
        exec_done(n);
        json_decref(n->pending);
        sd_bus_flush_close_unref(n->bus);
        free(n);
        return NULL;
}
