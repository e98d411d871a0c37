/* SPDX-License-Identifier: MIT */
/*
 * tpctl provision, install, switch, mark-good, rollback: the commands that change the
 * device. The long ones send "wait": true, draw the transaction's events as progress
 * (and the wait for a trial's health check as a countdown) and print one line saying
 * how it settled.
 */

#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "clock.h"
#include "parse.h"
#include "tpctl.h"

/* What the events of a waited-for operation told us. */
typedef struct Wait {
        Progress progress;
        bool have_timeout;
        uint64_t trial_timeout;         /* from trial-started */
} Wait;

static void on_event(json_t *event, const char *line, void *userdata) {
        Wait *w = userdata;
        const char *name = get_str(event, "event");

        (void) line;
        progress_event(&w->progress, event);
        if (name && strcmp(name, "trial-started") == 0)
                w->have_timeout = get_u64(event, "timeout", &w->trial_timeout);
}

static int on_idle(void *userdata) {
        Wait *w = userdata;

        return progress_idle(&w->progress);
}

/* ", on trial: confirm with 'tpctl mark-good' within 120 s": the response's own word first, then the event's. */
static void print_trial_hint(json_t *resp, const Wait *w) {
        uint64_t timeout;
        int64_t deadline;

        printf(", on trial: confirm with 'tpctl mark-good'");
        if (get_u64(resp, "timeout", &timeout))
                printf(" within %" PRIu64 " s", timeout);
        else if (w->have_timeout)
                printf(" within %" PRIu64 " s", w->trial_timeout);
        else if (parse_iso8601(get_str(resp, "deadline"), &deadline) >= 0 && deadline >= (int64_t) clock_wall())
                printf(" within %" PRId64 " s", deadline - (int64_t) clock_wall());
}

static void print_outcome(const char *command, json_t *req, json_t *resp, const Wait *w) {
        const char *state = get_str(resp, "state"), *slot = get_str(resp, "slot"), *label;
        char task[160];

        json_sanitize(resp);
        label = format_task(resp, task, sizeof(task));

        if (strcmp(command, "provision") == 0) {
                printf("base model provisioned");
                if (slot)
                        printf(" in slot %s", slot);
                if (get_str(resp, "sha256"))
                        printf(", sha256 %s", get_str(resp, "sha256"));
                printf("\n");
                return;
        }
        if (strcmp(command, "install") == 0 && !json_is_true(json_object_get(req, "switch"))) {
                printf("%s installed\n", label ?: "bundle");
                return;
        }
        if (strcmp(command, "mark-good") == 0) {
                printf("%s committed\n", label ?: "the task on trial");
                return;
        }
        if (strcmp(command, "trust") == 0) {
                json_int_t v = json_integer_value(json_object_get(resp, "version"));
                json_int_t n = json_integer_value(json_object_get(resp, "entries"));
                json_int_t b = json_integer_value(json_object_get(resp, "revoked_bundles"));
                bool root = strcmp(json_string_value(json_object_get(resp, "kind")) ?: "", "root") == 0;
                if (root)
                        printf(json_is_true(json_object_get(resp, "changed")) ?
                               "trust root version %" JSON_INTEGER_FORMAT " accepted; %" JSON_INTEGER_FORMAT
                               " installed bundle(s) no longer trusted\n" :
                               "trust root version %" JSON_INTEGER_FORMAT " is the one held already\n", v, b);
                else if (json_is_true(json_object_get(resp, "changed")))
                        printf("revocation list version %" JSON_INTEGER_FORMAT " accepted: %" JSON_INTEGER_FORMAT
                               " entries; %" JSON_INTEGER_FORMAT " installed bundle(s) revoked\n", v, n, b);
                else
                        printf("revocation list version %" JSON_INTEGER_FORMAT " is the one held already\n", v);
                return;
        }

        /* switch, install --switch, rollback: a model is now active. */
        printf("%s active", label ?: "the model");
        if (slot)
                printf(" in slot %s", slot);
        if (state && strcmp(state, "trial") == 0)
                print_trial_hint(resp, w);
        else if (state && strcmp(state, "committed") == 0)
                printf(", committed");
        printf("\n");
}

/* Send @req (with @fd), wait for its response while drawing progress, print the outcome. */
static int operation_run(Tpctl *t, const char *command, json_t *req, int fd) {
        _cleanup_(json_decrefp) json_t *resp = NULL;
        Wait w = {};
        Conn c;
        int r, ex;

        if (conn_open(&c, t) < 0)
                return TPCTL_EXIT_FAILED;
        progress_init(&w.progress, !t->no_progress);
        r = conn_call(&c, req, fd, on_event, on_idle, &w, &resp);
        progress_done(&w.progress);
        conn_close(&c);
        if (r < 0)
                return TPCTL_EXIT_FAILED;
        ex = response_exit(t, resp);
        if (ex == TPCTL_EXIT_OK && !t->json)
                print_outcome(command, req, resp, &w);
        return ex;
}

/*
 * Open the file to hand over. Failing to is tpctl's own argument error (exit 1),
 * found before the daemon is asked anything.
 */
static int open_input(const char *command, const char *path, int *ret_fd) {
        struct stat st;
        int fd;

        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return tpctl_fail(TPCTL_FAILURE_USAGE, "%s: cannot open '%s': %s", command, path, strerror(errno));
        if (fstat(fd, &st) < 0) {
                int e = errno;
                close(fd);
                return tpctl_fail(TPCTL_FAILURE_USAGE, "%s: '%s': %s", command, path, strerror(e));
        }
        /* A model of several files is provisioned as its directory: the daemon walks the descriptor itself. */
        if (S_ISDIR(st.st_mode) && strcmp(command, "provision") != 0) {
                close(fd);
                return tpctl_fail(TPCTL_FAILURE_USAGE, "%s: '%s' is a directory, not a bundle", command, path);
        }
        *ret_fd = fd;
        return TPCTL_GO_ON;
}

static bool is_sha256_hex(char *s) {
        size_t n = 0;

        for (; s[n]; n++) {
                if (s[n] >= 'A' && s[n] <= 'F')
                        s[n] = (char) (s[n] - 'A' + 'a');
                if (!((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f')))
                        return false;
        }
        return n == 64;
}

static int oom(void) {
        return tpctl_fail(TPCTL_FAILURE_INTERNAL, "out of memory");
}

static json_t *request_new(const char *cmd, bool wait) {
        json_t *req = json_object();

        if (!req || json_object_set_new(req, "cmd", json_string(cmd)) < 0 ||
            (wait && json_object_set_new(req, "wait", json_true()) < 0)) {
                json_decref(req);
                return NULL;
        }
        return req;
}

enum {
        OPT_SHA256 = OPT_COMMAND_BASE,
        OPT_SWITCH,
        OPT_ALLOW_DOWNGRADE,
        OPT_VERSION,
        OPT_BASE,
};

/* Parse the options of provision/install/switch: TPCTL_GO_ON, or the exit code to return. */
static int parse(Tpctl *t, const char *command, int argc, char *argv[], const struct option *options,
                 int (*own)(int c, void *userdata), void *userdata) {
        int c, ex;

        while ((c = getopt_long(argc, argv, ":hm:", options, NULL)) >= 0) {
                ex = tpctl_common_option(t, command, c, argv);
                if (ex == TPCTL_NOT_MINE)
                        ex = own(c, userdata);
                if (ex != TPCTL_GO_ON)
                        return ex;
        }
        return TPCTL_GO_ON;
}

/* The FILE argument of provision and install: exactly one. */
static int one_file(const char *command, int argc, char *argv[], const char **ret) {
        if (optind >= argc)
                return tpctl_usage_error(command, "missing the file to %s", command);
        if (optind + 1 < argc)
                return tpctl_usage_error(command, "unexpected argument '%s'", argv[optind + 1]);
        *ret = argv[optind];
        return TPCTL_GO_ON;
}

static int provision_option(int c, void *userdata) {
        char **sha = userdata;

        if (c != OPT_SHA256)
                return TPCTL_EXIT_USAGE;
        if (!is_sha256_hex(optarg))
                return tpctl_usage_error("provision", "--sha256: expected 64 hex digits, got '%s'", optarg);
        *sha = optarg;
        return TPCTL_GO_ON;
}

int cmd_provision(Tpctl *t, int argc, char *argv[]) {
        static const struct option options[] = {
                TPCTL_GLOBAL_OPTIONS,
                { "sha256", required_argument, NULL, OPT_SHA256 },
                {},
        };
        _cleanup_(json_decrefp) json_t *req = NULL;
        _cleanup_close_ int fd = -1;
        const char *path = NULL;
        char *sha = NULL;
        int ex;

        ex = parse(t, "provision", argc, argv, options, provision_option, &sha);
        if (ex == TPCTL_GO_ON)
                ex = one_file("provision", argc, argv, &path);
        if (ex == TPCTL_GO_ON)
                ex = open_input("provision", path, &fd);
        if (ex != TPCTL_GO_ON)
                return ex;

        req = request_new("provision", true);
        if (!req || (sha && json_object_set_new(req, "sha256", json_string(sha)) < 0))
                return oom();
        return operation_run(t, "provision", req, fd);
}

typedef struct InstallArgs {
        bool do_switch, allow_downgrade;
} InstallArgs;

static int install_option(int c, void *userdata) {
        InstallArgs *a = userdata;

        if (c == OPT_SWITCH)
                a->do_switch = true;
        else if (c == OPT_ALLOW_DOWNGRADE)
                a->allow_downgrade = true;
        else
                return TPCTL_EXIT_USAGE;
        return TPCTL_GO_ON;
}

int cmd_install(Tpctl *t, int argc, char *argv[]) {
        static const struct option options[] = {
                TPCTL_GLOBAL_OPTIONS,
                { "switch", no_argument, NULL, OPT_SWITCH },
                { "allow-downgrade", no_argument, NULL, OPT_ALLOW_DOWNGRADE },
                {},
        };
        _cleanup_(json_decrefp) json_t *req = NULL;
        _cleanup_close_ int fd = -1;
        InstallArgs a = {};
        const char *path = NULL;
        int ex;

        ex = parse(t, "install", argc, argv, options, install_option, &a);
        if (ex == TPCTL_GO_ON)
                ex = one_file("install", argc, argv, &path);
        if (ex == TPCTL_GO_ON)
                ex = open_input("install", path, &fd);
        if (ex != TPCTL_GO_ON)
                return ex;

        req = request_new("install", true);
        if (!req || (a.do_switch && json_object_set_new(req, "switch", json_true()) < 0) ||
            (a.allow_downgrade && json_object_set_new(req, "allow_downgrade", json_true()) < 0))
                return oom();
        return operation_run(t, "install", req, fd);
}

typedef struct SwitchArgs {
        bool base, have_version;
        uint64_t version;
} SwitchArgs;

static int switch_option(int c, void *userdata) {
        SwitchArgs *a = userdata;

        if (c == OPT_BASE) {
                a->base = true;
        } else if (c == OPT_VERSION) {
                if (parse_u64(optarg, &a->version) < 0)
                        return tpctl_usage_error("switch", "--version: expected a non-negative integer, got '%s'", optarg);
                if (a->version > (uint64_t) INT64_MAX)
                        return tpctl_usage_error("switch", "--version: %s is too large", optarg);
                a->have_version = true;
        } else {
                return TPCTL_EXIT_USAGE;
        }
        return TPCTL_GO_ON;
}

int cmd_switch(Tpctl *t, int argc, char *argv[]) {
        static const struct option options[] = {
                TPCTL_GLOBAL_OPTIONS,
                { "version", required_argument, NULL, OPT_VERSION },
                { "base", no_argument, NULL, OPT_BASE },
                {},
        };
        _cleanup_(json_decrefp) json_t *req = NULL;
        SwitchArgs a = {};
        int ex;

        ex = parse(t, "switch", argc, argv, options, switch_option, &a);
        if (ex != TPCTL_GO_ON)
                return ex;
        if (optind + 1 < argc)
                return tpctl_usage_error("switch", "unexpected argument '%s'", argv[optind + 1]);
        const char *task = optind < argc ? argv[optind] : NULL;
        if (a.base && task)
                return tpctl_usage_error("switch", "give a TASK or --base, not both");
        if (!a.base && !task)
                return tpctl_usage_error("switch", "missing the task to switch to (or --base)");
        if (a.base && a.have_version)
                return tpctl_usage_error("switch", "--version needs a TASK, the base model has none");
        if (task && !task[0])
                return tpctl_usage_error("switch", "the task name is empty");
        json_t *name = task ? json_string(task) : json_null();
        if (!name)
                return tpctl_usage_error("switch", "the task name is not valid UTF-8");

        req = request_new("switch", false);
        if (!req) {
                json_decref(name);
                return oom();
        }
        /* Key order as in the protocol's examples: cmd, task, version, wait. */
        if (json_object_set_new(req, "task", name) < 0 ||
            (a.have_version && json_object_set_new(req, "version", json_integer((json_int_t) a.version)) < 0) ||
            json_object_set_new(req, "wait", json_true()) < 0)
                return oom();
        return operation_run(t, "switch", req, -1);
}

int cmd_mark_good(Tpctl *t, int argc, char *argv[]) {
        _cleanup_(json_decrefp) json_t *req = NULL;
        int ex;

        ex = tpctl_parse_options(t, "mark-good", argc, argv);
        if (ex != TPCTL_GO_ON)
                return ex;
        req = request_new("mark-good", false);
        if (!req)
                return oom();
        return operation_run(t, "mark-good", req, -1);
}

int cmd_rollback(Tpctl *t, int argc, char *argv[]) {
        static const struct option options[] = {
                TPCTL_GLOBAL_OPTIONS,
                { "allow-downgrade", no_argument, NULL, OPT_ALLOW_DOWNGRADE },
                {},
        };
        _cleanup_(json_decrefp) json_t *req = NULL;
        InstallArgs a = {};
        int ex;

        ex = parse(t, "rollback", argc, argv, options, install_option, &a);
        if (ex == TPCTL_GO_ON && optind < argc)
                ex = tpctl_usage_error("rollback", "unexpected argument '%s'", argv[optind]);
        if (ex != TPCTL_GO_ON)
                return ex;
        req = request_new("rollback", true);
        if (!req || (a.allow_downgrade && json_object_set_new(req, "allow_downgrade", json_true()) < 0))
                return oom();
        return operation_run(t, "rollback", req, -1);
}

static int no_option(int c, void *userdata) {
        (void) c;
        (void) userdata;
        return TPCTL_EXIT_USAGE;
}

int cmd_trust(Tpctl *t, int argc, char *argv[]) {
        static const struct option options[] = {
                TPCTL_GLOBAL_OPTIONS,
                {},
        };
        _cleanup_(json_decrefp) json_t *req = NULL;
        _cleanup_close_ int fd = -1;
        const char *path = NULL;
        int ex;

        ex = parse(t, "trust", argc, argv, options, no_option, NULL);
        if (ex == TPCTL_GO_ON && (optind >= argc || strcmp(argv[optind], "update") != 0))
                ex = tpctl_usage_error("trust", "expected 'update FILE'");
        if (ex == TPCTL_GO_ON) {
                optind++;
                ex = one_file("trust", argc, argv, &path);
        }
        if (ex == TPCTL_GO_ON)
                ex = open_input("trust", path, &fd);
        if (ex != TPCTL_GO_ON)
                return ex;
        req = request_new("trust-update", false);
        if (!req)
                return oom();
        return operation_run(t, "trust", req, fd);
}
