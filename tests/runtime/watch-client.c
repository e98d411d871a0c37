/* watch-client SOCKET: follow taskpatchd's events, printing each line; reconnect when it goes away. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int main(int argc, char **argv) {
        struct sockaddr_un addr = { .sun_family = AF_UNIX };
        static char line[1 << 20]; /* the protocol's cap on a daemon line: 1 MiB */
        size_t n = argc == 2 ? strlen(argv[1]) : 0;

        if (n == 0 || n >= sizeof addr.sun_path)
                return fprintf(stderr, "usage: watch-client SOCKET\n"), 2;
        memcpy(addr.sun_path, argv[1], n + 1);
        for (;; sleep(1)) { /* a restart of the daemon (or an upgrade) is a reconnect, not an end */
                int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
                if (fd < 0 || connect(fd, (struct sockaddr *) &addr, sizeof addr) < 0) {
                        if (fd >= 0)
                                close(fd);
                        continue;
                }
                FILE *f = fdopen(fd, "r+");
                if (!f || fputs("{\"cmd\":\"subscribe\"}\n", f) < 0 || fflush(f) != 0)
                        return perror("subscribe"), 3;
                /* The first line answers the request: {"ok":true}, or {"ok":false,"error":{...}}. */
                if (!fgets(line, sizeof line, f) || strncmp(line, "{\"ok\":true", 10) != 0)
                        return fprintf(stderr, "subscribe refused: %s", line), 3;
                fprintf(stderr, "subscribed to %s\n", argv[1]);
                /*
                 * Then one event per line. The first is always {"event":"snapshot",...}: the state,
                 * the active model and model_path now. A service loads that model if it is not the
                 * one it serves (it may have missed events while disconnected), then reopens
                 * model_path on every {"event":"slot-changed",...}.
                 */
                while (fgets(line, sizeof line, f)) {
                        fputs(line, stdout);
                        fflush(stdout);
                }
                fclose(f); /* the daemon closed the connection (it stopped, or we read too slowly) */
                fprintf(stderr, "disconnected: reconnecting\n");
        }
}
