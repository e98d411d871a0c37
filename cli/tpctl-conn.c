/* SPDX-License-Identifier: MIT */
/* tpctl: one connection to taskpatchd: connect, send a request, read lines, map answers to exit codes. */

#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "cli.h"
#include "tpctl.h"

int conn_open(Conn *c, const Tpctl *t) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        const char *path = t->socket_path;
        int r;

        *c = (Conn) { .fd = -1, .path = path, .model = t->model, .reader = LINE_READER_INIT(JSONLINE_MAX_MESSAGE) };
        if (strlen(path) >= sizeof(sa.sun_path)) {
                tpctl_fail(TPCTL_FAILURE_UNREACHABLE,
                           "cannot connect to %s: the path is longer than a socket address holds (%zu bytes)", path,
                           sizeof(sa.sun_path) - 1);
                return -ENAMETOOLONG;
        }
        memcpy(sa.sun_path, path, strlen(path) + 1);

        c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (c->fd < 0) {
                r = negative_errno();
                tpctl_fail(TPCTL_FAILURE_UNREACHABLE, "socket: %s", strerror(-r));
                return r;
        }
        for (;;) {
                if (connect(c->fd, (struct sockaddr *) &sa, sizeof(sa)) >= 0)
                        return 0;
                if (errno != EINTR)
                        break;
        }
        r = negative_errno();
        c->fd = safe_close(c->fd);
        const char *hint = r == -ENOENT || r == -ECONNREFUSED ? " (is taskpatchd running?)"
                         : r == -EACCES ? " (is this user in the socket's group?)" : "";
        tpctl_fail(TPCTL_FAILURE_UNREACHABLE, "cannot connect to %s: %s%s", path, strerror(-r), hint);
        return r;
}

void conn_close(Conn *c) {
        c->fd = safe_close(c->fd);
        line_reader_done(&c->reader);
}

int conn_send(Conn *c, const json_t *req, int fd) {
        _cleanup_free_ char *line = NULL;
        _cleanup_(json_decrefp) json_t *named = NULL;
        size_t len;
        int r;

        if (c->model) {
                /* The request names the model (--model): a copy, the caller's stays as it was. */
                named = json_copy((json_t *) req);
                if (!named || json_object_set_new(named, "model", json_string(c->model)) < 0) {
                        tpctl_fail(TPCTL_FAILURE_INTERNAL, "out of memory");
                        return -ENOMEM;
                }
                req = named;
        }
        r = jsonline_dump(req, JSONLINE_MAX_REQUEST, &line, &len);
        if (r < 0) {
                tpctl_fail(r == -EMSGSIZE ? TPCTL_FAILURE_USAGE : TPCTL_FAILURE_INTERNAL, "cannot encode the request: %s",
                           r == -EMSGSIZE ? "longer than 64 KiB" : strerror(-r));
                return r;
        }
        r = jsonline_send(c->fd, line, len, fd);
        if (r < 0) {
                tpctl_fail(TPCTL_FAILURE_IO, "sending to taskpatchd at %s: %s", c->path, strerror(-r));
                return r;
        }
        return 0;
}

/* Until the socket has bytes (or is closed), calling @on_idle whenever the wait it asked for passes. */
static int conn_wait(Conn *c, IdleFn on_idle, void *userdata) {
        for (;;) {
                struct pollfd pfd = { .fd = c->fd, .events = POLLIN };
                int ms = on_idle ? on_idle(userdata) : -1;

                if (ms < 0)
                        return 0;       /* recvmsg() blocks for us */
                int n = poll(&pfd, 1, ms);
                if (n > 0)
                        return 0;
                if (n < 0 && errno != EINTR) {
                        int r = negative_errno();
                        tpctl_fail(TPCTL_FAILURE_IO, "waiting for taskpatchd: %s", strerror(-r));
                        return r;
                }
        }
}

int conn_read(Conn *c, IdleFn on_idle, void *userdata, json_t **ret, const char **ret_line) {
        for (;;) {
                TpError err = {};
                char *line;
                size_t len;
                int r;

                r = line_reader_next(&c->reader, &line, &len);
                if (r > 0) {
                        json_t *j = NULL;

                        r = jsonline_parse(line, len, &j, &err);
                        if (r < 0) {
                                tpctl_fail(TPCTL_FAILURE_IO, "taskpatchd sent a malformed line: %s", err.message);
                                return r;
                        }
                        *ret = j;
                        *ret_line = line;
                        return 1;
                }
                if (c->overflow) {
                        tpctl_fail(TPCTL_FAILURE_IO, "taskpatchd sent a line longer than 1 MiB (%u bytes, the protocol's cap)",
                                   JSONLINE_MAX_MESSAGE);
                        return -EMSGSIZE;
                }
                if (c->eof) {
                        if (c->reader.len > c->reader.start) {
                                tpctl_fail(TPCTL_FAILURE_IO, "taskpatchd closed the connection in the middle of a line");
                                return -EPIPE;
                        }
                        return 0;
                }

                r = conn_wait(c, on_idle, userdata);
                if (r < 0)
                        return r;

                int fds[JSONLINE_MAX_FDS];
                size_t nfds = 0;
                ssize_t n = jsonline_recv(c->fd, c->buf, sizeof(c->buf), fds, &nfds);
                if (n < 0) {
                        tpctl_fail(TPCTL_FAILURE_IO, "lost the connection to taskpatchd: %s", strerror((int) -n));
                        return (int) n;
                }
                /* The daemon sends no descriptors; do not keep any it might. */
                for (size_t i = 0; i < nfds; i++)
                        safe_close(fds[i]);
                if (n == 0) {
                        c->eof = true;
                        continue;
                }
                r = line_reader_feed(&c->reader, c->buf, (size_t) n);
                if (r == -EMSGSIZE) {
                        /* The lines completed before the long one are still read, then the error. */
                        c->overflow = true;
                        continue;
                }
                if (r < 0) {
                        tpctl_fail(TPCTL_FAILURE_IO, "reading from taskpatchd: %s", strerror(-r));
                        return r;
                }
        }
}

int conn_call(Conn *c, const json_t *req, int fd, EventFn on_event, IdleFn on_idle, void *userdata, json_t **ret) {
        int r;

        r = conn_send(c, req, fd);
        if (r < 0)
                return r;
        for (;;) {
                json_t *j = NULL;
                const char *line;

                r = conn_read(c, on_idle, userdata, &j, &line);
                if (r < 0)
                        return r;
                if (r == 0) {
                        tpctl_fail(TPCTL_FAILURE_IO, "taskpatchd closed the connection before answering "
                                                     "(the operation may still be running: see 'tpctl status')");
                        return -ECONNRESET;
                }
                if (json_object_get(j, "ok")) {
                        *ret = j;
                        return 0;
                }
                if (json_object_get(j, "event")) {
                        if (on_event)
                                on_event(j, line, userdata);
                        json_decref(j);
                        continue;
                }
                json_decref(j);
                tpctl_fail(TPCTL_FAILURE_IO,
                           "taskpatchd sent a line that is neither a response (\"ok\") nor an event (\"event\")");
                return -EBADMSG;
        }
}

static const struct {
        const char *code;
        int exit;
} error_exits[] = {
        { "usage", TPCTL_EXIT_REFUSED },
        { "permission", TPCTL_EXIT_REFUSED },
        { "refused", TPCTL_EXIT_REFUSED },
        { "not-found", TPCTL_EXIT_REFUSED },
        { "too-large", TPCTL_EXIT_REFUSED },
        { "busy", TPCTL_EXIT_FAILED },
        { "io", TPCTL_EXIT_FAILED },
        { "no-space", TPCTL_EXIT_FAILED },
        { "internal", TPCTL_EXIT_FAILED },
        { "rolled-back", TPCTL_EXIT_ROLLED_BACK },
};

int error_code_exit(const char *code) {
        for (size_t i = 0; code && i < ELEMENTSOF(error_exits); i++)
                if (strcmp(code, error_exits[i].code) == 0)
                        return error_exits[i].exit;
        return TPCTL_EXIT_FAILED;       /* a code this tpctl does not know: it did not work */
}

int response_exit(const Tpctl *t, json_t *resp) {
        if (t->json) {
                _cleanup_free_ char *s = json_dumps(resp, JSON_COMPACT);
                if (s) {
                        printf("%s\n", s);
                        tpctl_failure_answered();
                }
        }
        if (json_is_true(json_object_get(resp, "ok")))
                return TPCTL_EXIT_OK;

        json_t *e = json_object_get(resp, "error");
        const char *code = get_str(e, "code"), *message;
        if (!code) {
                tpctl_error("taskpatchd answered with an error but no error code");
                return TPCTL_EXIT_FAILED;
        }
        json_sanitize(e);
        message = get_str(e, "message");
        if (message && message[0])
                tpctl_error("%s", message);
        else
                tpctl_error("taskpatchd refused the request (%s)", code);
        return error_code_exit(code);
}

int tpctl_simple_call(const Tpctl *t, const json_t *req, json_t **ret_resp) {
        Conn c;
        json_t *resp = NULL;
        int r, ex;

        if (conn_open(&c, t) < 0)
                return TPCTL_EXIT_FAILED;
        r = conn_call(&c, req, -1, NULL, NULL, NULL, &resp);
        conn_close(&c);
        if (r < 0)
                return TPCTL_EXIT_FAILED;
        ex = response_exit(t, resp);
        if (ret_resp)
                *ret_resp = resp;
        else
                json_decref(resp);
        return ex;
}
