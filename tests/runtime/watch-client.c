/* watch-client SOCKET: subscribe to taskpatchd's events and print each line as it comes. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

int main(int argc, char **argv) {
        struct sockaddr_un addr = { .sun_family = AF_UNIX };
        static char line[1 << 20]; /* the protocol's cap on a daemon line: 1 MiB */
        size_t n = argc == 2 ? strlen(argv[1]) : 0;

        if (n == 0 || n >= sizeof addr.sun_path)
                return fprintf(stderr, "usage: watch-client SOCKET\n"), 2;
        memcpy(addr.sun_path, argv[1], n + 1);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *) &addr, sizeof addr) < 0)
                return perror(argv[1]), 3;
        FILE *f = fdopen(fd, "r+");
        if (!f || fputs("{\"cmd\":\"subscribe\"}\n", f) < 0 || fflush(f) != 0)
                return perror("subscribe"), 3;
        /* The first line answers the request: {"ok":true}, or {"ok":false,"error":{...}}. */
        if (!fgets(line, sizeof line, f) || strncmp(line, "{\"ok\":true", 10) != 0)
                return fprintf(stderr, "subscribe refused: %s", line), 3;
        fprintf(stderr, "subscribed to %s\n", argv[1]);
        /* Then one event per line, e.g. {"event":"slot-changed",...,"model_path":"..."}. */
        while (fgets(line, sizeof line, f)) {
                fputs(line, stdout);
                fflush(stdout);
        }
        return 0; /* the daemon closed the connection (it stopped, or we read too slowly) */
}
