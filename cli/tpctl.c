/* SPDX-License-Identifier: MIT */
/* tpctl: the technician's client of taskpatchd over its Unix socket. This file parses the global options and dispatches. */

#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "parse.h"         /* task_name_valid(): model names follow the same rule */
#include "tpctl.h"

static const struct {
        const char *name;
        int (*run)(Tpctl *t, int argc, char *argv[]);
        const char *synopsis;   /* after "tpctl [OPTIONS] NAME" */
        const char *summary;
        const char *help;       /* the command's own options and what it prints */
} commands[] = {
        { "status", cmd_status, "", "show the daemon's state, the slots, a trial, counters",
          "Print a summary of taskpatchd's state: the model path, the active slot and its task,\n"
          "both slots, the task on trial and its remaining time, the running operation, the\n"
          "daemon's write counters and its last event. --json prints the daemon's answer as it is.\n" },
        { "list", cmd_list, "", "list the installed task bundles",
          "Print a table of the task bundles the daemon has installed: '*' marks the active one,\n"
          "then task, version, the slot holding it (or -), bundle size, signer (its CN) and the\n"
          "task model's SHA-256.\n" },
        { "provision", cmd_provision, "FILE|DIR [--sha256 HEX]", "install FILE (or a model directory) as the base model",
          "Pass FILE (opened by tpctl, handed over as a descriptor) to the daemon as the base\n"
          "model, and wait until it is provisioned. A model of several files (split GGUF, sharded\n"
          "safetensors, ONNX with external data) is passed as its directory DIR: the daemon walks\n"
          "the open directory itself and copies every regular file; the slots are directories.\n"
          "\n"
          "  --sha256 HEX   the expected SHA-256 of FILE, or the set digest of DIR as\n"
          "                 'taskpatch hash DIR' prints it (64 hex digits); refused when it differs\n" },
        { "install", cmd_install, "BUNDLE [--switch] [--allow-downgrade]", "install a task bundle (.tpb)",
          "Pass BUNDLE (opened by tpctl, handed over as a descriptor) to the daemon, and wait\n"
          "until it is installed.\n"
          "\n"
          "  --switch            also switch to the task, as 'tpctl switch' does\n"
          "  --allow-downgrade   accept a version lower than the newest installed or accepted\n" },
        { "switch", cmd_switch, "(TASK [--version N] | --base)", "make a task (or the base model) the active model",
          "Stage TASK into the inactive slot, verify it, activate it, and wait until it is on\n"
          "trial (confirm with 'tpctl mark-good') or committed by the health check (on a\n"
          "terminal, the wait for the check counts down the trial's time).\n"
          "\n"
          "  --version N   that version of TASK (default: the newest installed)\n"
          "  --base        return to the base model instead of a task\n" },
        { "mark-good", cmd_mark_good, "", "confirm the task on trial",
          "Commit the task on trial, so it is no longer rolled back when the trial ends.\n" },
        { "rollback", cmd_rollback, "[--allow-downgrade]", "return to what was committed before",
          "During a trial: back to the committed model at once. Otherwise: switch back to the\n"
          "task committed before the current one, through a trial like any switch, and wait\n"
          "until it is settled. Pressed again, it goes further back (it never toggles). Refused\n"
          "when nothing was committed before, when that task failed its trial, or when its\n"
          "version is below the one this device has accepted.\n"
          "\n"
          "  --allow-downgrade   roll back to a version below the accepted one anyway\n" },
        { "trust", cmd_trust, "update FILE", "give the device a revocation list or a trust root",
          "Pass FILE, a revocation list written by 'taskpatch revoke' (opened by tpctl, handed\n"
          "over as a descriptor), to the daemon. It takes the list when it verifies against the\n"
          "root role (trust.root_ca, else trust.ca) and its version is higher than the one it\n"
          "holds, keeps it across restarts, and from then on refuses every bundle and channel\n"
          "whose signer it revokes; a model that runs from a revoked bundle is replaced through\n"
          "a trial by the newest good version of its task, else by the base. The channel can\n"
          "carry the list too (taskpatch publish --revocations).\n"
          "\n"
          "FILE may be a trust root written by 'taskpatch root' instead: the CAs and thresholds\n"
          "of each role. The daemon takes version N+1 when a threshold of the root role it\n"
          "holds (version N's, else trust.root_ca) and of N+1's own signed it, it has not\n"
          "expired and its version is higher; its roles then replace trust.*_ca and the\n"
          "thresholds (taskpatchd(8), Key rotation; taskpatch publish --root).\n" },
        { "watch", cmd_watch, "[--exec CMD]", "print the daemon's events as they come",
          "Subscribe to the daemon's events and print one line per event (with --json, each\n"
          "event line as the daemon sent it) until the daemon closes the connection.\n"
          "\n"
          "  --exec CMD   on every slot-changed event, run '/bin/sh -c CMD' and wait for it, with\n"
          "               TASKPATCH_EVENT, TASKPATCH_SLOT, TASKPATCH_TASK (empty for the base),\n"
          "               TASKPATCH_VERSION, TASKPATCH_SHA256, TASKPATCH_MODEL_PATH, TASKPATCH_MODEL,\n"
          "               TASKPATCH_REASON and TASKPATCH_EVENT_JSON (the whole line) set\n" },
};

static const char global_help[] =
        "Global options (before or after the command):\n"
        "  --socket PATH   the daemon's socket (default: $TASKPATCH_SOCKET, else " TPCTL_DEFAULT_SOCKET ")\n"
        "  -m, --model NAME  the model a command is for, on a device of several (taskpatchd.yaml's\n"
        "                  models:); a command that changes state needs it there (install: the\n"
        "                  bundle names its model), status and list without it show every\n"
        "                  model, watch every model's events\n"
        "  --json          print the daemon's final answer as one JSON line; a failure always\n"
        "                  prints one {\"ok\":false,\"error\":{\"code\",\"message\"}} object (tpctl's\n"
        "                  own codes: usage, unreachable, io, internal)\n"
        "  --no-progress   draw no progress line (drawn on stderr only when it is a terminal)\n"
        "  --help          show help (also 'tpctl COMMAND --help')\n";

static const char exit_help[] =
        "Exit status: 0 done, 1 usage error, 2 refused (usage, permission, refused, not-found,\n"
        "too-large), 3 failed (busy, io, no-space, internal, daemon unreachable, connection lost),\n"
        "4 rolled back.\n";

static void help(void) {
        printf("Usage: tpctl [--socket PATH] [--model NAME] [--json] [--no-progress] COMMAND [ARGS...]\n"
               "\n"
               "Client of taskpatchd, the on-device update daemon.\n"
               "\n"
               "Commands:\n");
        for (size_t i = 0; i < ELEMENTSOF(commands); i++)
                printf("  %-10s %s\n", commands[i].name, commands[i].summary);
        printf("\n%s  --version       show tpctl's version\n"
               "\nRun 'tpctl COMMAND --help' for a command's options.\n\n%s", global_help, exit_help);
}

void tpctl_command_help(const char *command) {
        for (size_t i = 0; i < ELEMENTSOF(commands); i++) {
                if (strcmp(commands[i].name, command) != 0)
                        continue;
                printf("Usage: tpctl [OPTIONS] %s%s%s\n\n%s\n%s\n%s", command, commands[i].synopsis[0] ? " " : "",
                       commands[i].synopsis, commands[i].help, global_help, exit_help);
                return;
        }
}

int tpctl_usage_error(const char *command, const char *fmt, ...) {
        char message[512], json_message[600];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(message, sizeof(message), fmt, ap);
        va_end(ap);
        fflush(stdout);
        fprintf(stderr, "tpctl%s%s: %s (try 'tpctl %s%s--help')\n", command[0] ? " " : "", command, message, command,
                command[0] ? " " : "");
        /* For --json: "switch: missing the task ...", as stderr says it but for the program's name. */
        snprintf(json_message, sizeof(json_message), "%s%s%s", command, command[0] ? ": " : "", message);
        tpctl_failure_record(TPCTL_FAILURE_USAGE, json_message);
        return TPCTL_EXIT_USAGE;
}

int tpctl_common_option(Tpctl *t, const char *command, int c, char *argv[]) {
        const char *cmd = command ?: "";

        switch (c) {
        case OPT_HELP:
                if (command)
                        tpctl_command_help(command);
                else
                        help();
                return TPCTL_EXIT_OK;
        case OPT_SOCKET:
                if (!optarg[0])
                        return tpctl_usage_error(cmd, "--socket: empty path");
                t->socket_path = optarg;
                return TPCTL_GO_ON;
        case OPT_JSON:
                t->json = true;
                return TPCTL_GO_ON;
        case OPT_NO_PROGRESS:
                t->no_progress = true;
                return TPCTL_GO_ON;
        case OPT_MODEL:
                if (!task_name_valid(optarg))
                        return tpctl_usage_error(cmd, "--model '%s': expected a model name, [a-z0-9][a-z0-9._-]{0,63}",
                                                 optarg);
                t->model = optarg;
                return TPCTL_GO_ON;
        case '?':
                /* opterr is 0: say it ourselves, naming the option as typed. */
                if (optopt > 0 && optopt < 0x100)
                        return tpctl_usage_error(cmd, "unknown option '-%c'", optopt);
                return tpctl_usage_error(cmd, "unknown option '%s'", argv[optind - 1]);
        case ':':
                return tpctl_usage_error(cmd, "option '%s' needs an argument", argv[optind - 1]);
        default:
                return TPCTL_NOT_MINE;
        }
}

int tpctl_parse_options(Tpctl *t, const char *command, int argc, char *argv[]) {
        static const struct option options[] = {
                TPCTL_GLOBAL_OPTIONS,
                {},
        };
        int c, ex;

        while ((c = getopt_long(argc, argv, ":hm:", options, NULL)) >= 0) {
                ex = tpctl_common_option(t, command, c, argv);
                if (ex == TPCTL_NOT_MINE)       /* cannot happen: no options of its own */
                        return TPCTL_EXIT_USAGE;
                if (ex != TPCTL_GO_ON)
                        return ex;
        }
        if (optind < argc)
                return tpctl_usage_error(command, "unexpected argument '%s'", argv[optind]);
        return TPCTL_GO_ON;
}

static int run(Tpctl *t, int argc, char *argv[]) {
        static const struct option options[] = {
                TPCTL_GLOBAL_OPTIONS,
                { "version", no_argument, NULL, 'V' },
                {},
        };
        int c, ex;

        /* A daemon that goes away must be an error we report, not a signal that kills us. */
        struct sigaction sa = { .sa_handler = SIG_IGN };
        sigemptyset(&sa.sa_mask);
        sigaction(SIGPIPE, &sa, NULL);

        const char *env = getenv("TASKPATCH_SOCKET");
        t->socket_path = env && env[0] ? env : TPCTL_DEFAULT_SOCKET;

        /* '+': stop at the command; its own options are parsed by the command. ':': we report. */
        opterr = 0;
        while ((c = getopt_long(argc, argv, "+:hm:", options, NULL)) >= 0) {
                if (c == 'V') {
                        printf("tpctl %s\n", TASKPATCH_VERSION);
                        return TPCTL_EXIT_OK;
                }
                ex = tpctl_common_option(t, NULL, c, argv);
                if (ex != TPCTL_GO_ON)
                        return ex;
        }

        if (optind >= argc)
                return tpctl_fail(TPCTL_FAILURE_USAGE, "missing command (try 'tpctl --help')");

        const char *name = argv[optind];
        for (size_t i = 0; i < ELEMENTSOF(commands); i++) {
                if (strcmp(name, commands[i].name) != 0)
                        continue;
                int sub_argc = argc - optind;
                char **sub_argv = argv + optind;
                optind = 0;     /* GNU getopt: start over for the command's arguments */
                ex = commands[i].run(t, sub_argc, sub_argv);
                if (fflush(stdout) != 0 && ex == TPCTL_EXIT_OK)
                        return tpctl_fail(TPCTL_FAILURE_IO, "writing to standard output: %m");
                return ex;
        }

        return tpctl_fail(TPCTL_FAILURE_USAGE, "unknown command '%s' (try 'tpctl --help')", name);
}

/*
 * Whether --json is among the arguments, looked for before they are parsed, so that a usage
 * error found before getopt reaches it is reported as JSON too. The argument of an option
 * that takes one is skipped ("--exec --json" runs a command named --json); --version takes
 * one after the command only (switch).
 */
static bool wants_json(int argc, char *argv[]) {
        static const char *const with_argument[] = { "--socket", "--sha256", "--exec", "--model", "-m" };
        bool command = false;

        for (int i = 1; i < argc; i++) {
                const char *a = argv[i];
                bool skip = command && strcmp(a, "--version") == 0;

                if (strcmp(a, "--") == 0)
                        break;
                if (strcmp(a, "--json") == 0)
                        return true;
                for (size_t k = 0; k < ELEMENTSOF(with_argument); k++)
                        skip |= strcmp(a, with_argument[k]) == 0;
                if (skip)
                        i++;
                else if (a[0] != '-')
                        command = true;
        }
        return false;
}

int main(int argc, char *argv[]) {
        Tpctl t = {};

        cli_program = "tpctl";
        t.json = wants_json(argc, argv);
        return tpctl_finish(&t, run(&t, argc, argv));
}