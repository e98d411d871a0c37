/* SPDX-License-Identifier: MIT */
/* Running a configured shell command (taskpatchd-spawn.h). */

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include "macro.h"
#include "taskpatchd-spawn.h"

extern char **environ;

/*
 * The daemon's environment without what the service manager meant for the daemon
 * alone: a probe must not send sd_notify messages or pet the watchdog in its name.
 */
static char **child_environment(char *const extra[]) {
        static char *env[256];
        static const char *const drop[] = { "NOTIFY_SOCKET=", "WATCHDOG_USEC=", "WATCHDOG_PID=", "LISTEN_FDS=",
                                            "LISTEN_PID=", "LISTEN_FDNAMES=" };
        size_t n = 0;

        for (char **e = environ; *e && n < ELEMENTSOF(env) - 1; e++) {
                bool keep = true;
                for (size_t i = 0; keep && i < ELEMENTSOF(drop); i++)
                        keep = strncmp(*e, drop[i], strlen(drop[i])) != 0;
                if (keep)
                        env[n++] = *e;
        }
        for (size_t i = 0; extra && extra[i] && n < ELEMENTSOF(env) - 1; i++)
                env[n++] = extra[i];
        env[n] = NULL;
        return env;
}

int shell_spawn(const char *command, char *const extra_env[], pid_t *ret_pid) {
        char *argv[] = { (char *) "/bin/sh", (char *) "-c", (char *) command, NULL };
        posix_spawn_file_actions_t actions;
        posix_spawnattr_t attr;
        sigset_t none, defaults;
        pid_t pid;
        int r;

        _cleanup_close_ int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (devnull < 0)
                return negative_errno();

        sigemptyset(&none);
        sigemptyset(&defaults);
        sigaddset(&defaults, SIGPIPE);

        r = posix_spawn_file_actions_init(&actions);
        if (r != 0)
                return -r;
        r = posix_spawnattr_init(&attr);
        if (r != 0) {
                posix_spawn_file_actions_destroy(&actions);
                return -r;
        }

        /* stdin from /dev/null, stdout/stderr inherited, nothing else: the daemon's sockets
         * (curl's among them) must not live on in a shell that outlives it. The daemon
         * blocks signals for sd-event and may ignore SIGPIPE; the shell gets neither. */
        r = posix_spawn_file_actions_adddup2(&actions, devnull, STDIN_FILENO);
        if (r == 0)
                r = posix_spawn_file_actions_addclosefrom_np(&actions, STDERR_FILENO + 1);
        if (r == 0)
                r = posix_spawnattr_setsigmask(&attr, &none);
        if (r == 0)
                r = posix_spawnattr_setsigdefault(&attr, &defaults);
        if (r == 0)
                r = posix_spawnattr_setpgroup(&attr, 0);
        if (r == 0)
                r = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                                            POSIX_SPAWN_SETPGROUP);
        if (r == 0)
                r = posix_spawn(&pid, argv[0], &actions, &attr, argv, child_environment(extra_env));

        posix_spawnattr_destroy(&attr);
        posix_spawn_file_actions_destroy(&actions);
        if (r != 0)
                return -r;
        *ret_pid = pid;
        return 0;
}

