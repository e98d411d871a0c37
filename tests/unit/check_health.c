/* SPDX-License-Identifier: MIT */
/*
 * daemon/taskpatchd-health.c and daemon/taskpatchd-curl.c: probes against real
 * children and a tiny HTTP server forked by the test. Each test has its own
 * sd-event loop, blocks SIGCHLD (sd-event's requirement, as in the daemon) and
 * runs the loop until the callback fires, with a safety timeout.
 */

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check-main.h"
#include "taskpatchd-curl.h"
#include "taskpatchd-health.h"

#define MSEC       1000ULL
#define SEC        1000000ULL
#define SAFETY     (3 * SEC)    /* no test waits longer than this for a callback */

/* ---- event loop helpers ----------------------------------------------------- */

static sd_event *loop_new(void) {
        sigset_t ss;
        sd_event *e = NULL;

        sigemptyset(&ss);
        sigaddset(&ss, SIGCHLD);
        ck_assert_int_eq(sigprocmask(SIG_BLOCK, &ss, NULL), 0);
        ck_assert_int_ge(sd_event_new(&e), 0);
        return e;
}

static int on_expired(sd_event_source *s _unused_, uint64_t usec _unused_, void *userdata) {
        *(bool *) userdata = true;
        return 0;
}

/* Run @e until *@done or @usec passed; returns *@done. */
static bool run_until(sd_event *e, const bool *done, uint64_t usec) {
        sd_event_source *t = NULL;
        bool expired = false;

        ck_assert_int_ge(sd_event_add_time_relative(e, &t, CLOCK_MONOTONIC, usec, MSEC, on_expired, &expired), 0);
        while (!*done && !expired)
                ck_assert_int_ge(sd_event_run(e, UINT64_MAX), 0);
        sd_event_source_unref(t);
        return *done;
}

static void run_for(sd_event *e, uint64_t usec) {
        static const bool never = false;
        (void) run_until(e, &never, usec);
}

static uint64_t now_usec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * SEC + (uint64_t) ts.tv_nsec / 1000;
}

/* No child left, running or zombie. */
static void assert_no_children(void) {
        pid_t p = waitpid(-1, NULL, WNOHANG);
        ck_assert_msg(p == -1 && errno == ECHILD, "a child is left: waitpid gave %d (%s)", (int) p,
                      p < 0 ? strerror(errno) : "running");
}

/* ---- a tiny HTTP server ----------------------------------------------------- */

typedef struct Server {
        pid_t pid;
        int port;
        char url[64];
} Server;

/* @answer: sent after each request; NULL accepts and never answers. @body_len zeros follow it. */
static void serve(int fd, const char *answer, size_t body_len) {
        static char zeros[16384];
        int held[64];
        size_t n_held = 0;

        for (;;) {
                int c = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
                if (c < 0)
                        continue;
                if (!answer) {
                        if (n_held < ELEMENTSOF(held))
                                held[n_held++] = c;     /* open and silent */
                        continue;
                }

                char req[4096];
                size_t got = 0;
                while (got < sizeof(req) - 1) {
                        ssize_t k = read(c, req + got, sizeof(req) - 1 - got);
                        if (k <= 0)
                                break;
                        got += (size_t) k;
                        req[got] = '\0';
                        if (strstr(req, "\r\n\r\n"))
                                break;
                }
                bool ok = send(c, answer, strlen(answer), MSG_NOSIGNAL) >= 0;
                for (size_t left = body_len; ok && left > 0;) {
                        size_t n = left < sizeof(zeros) ? left : sizeof(zeros);
                        ssize_t k = send(c, zeros, n, MSG_NOSIGNAL);
                        ok = k > 0;
                        left -= ok ? (size_t) k : 0;
                }
                close(c);
        }
}

static Server server_start_body(const char *answer, size_t body_len) {
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t len = sizeof(sa);
        Server s = {};
        pid_t parent = getpid();
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(bind(fd, (struct sockaddr *) &sa, sizeof(sa)), 0);
        ck_assert_int_eq(listen(fd, 16), 0);
        ck_assert_int_eq(getsockname(fd, (struct sockaddr *) &sa, &len), 0);
        s.port = ntohs(sa.sin_port);
        snprintf(s.url, sizeof(s.url), "http://127.0.0.1:%d/health", s.port);

        s.pid = fork();
        ck_assert_int_ge(s.pid, 0);
        if (s.pid == 0) {
                /* Never outlive the test, even one that failed half way. */
                (void) prctl(PR_SET_PDEATHSIG, SIGKILL);
                if (getppid() != parent)
                        _exit(0);
                serve(fd, answer, body_len);
                _exit(0);
        }
        close(fd);
        return s;
}

static Server server_start(const char *answer) {
        return server_start_body(answer, 0);
}

static void server_stop(Server *s) {
        if (s->pid <= 0)
                return;
        kill(s->pid, SIGKILL);
        while (waitpid(s->pid, NULL, 0) < 0 && errno == EINTR)
                ;
        s->pid = 0;
}

/* A port with nothing listening: bound once, then closed. */
static int free_port(void) {
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t len = sizeof(sa);
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(bind(fd, (struct sockaddr *) &sa, sizeof(sa)), 0);
        ck_assert_int_eq(getsockname(fd, (struct sockaddr *) &sa, &len), 0);
        close(fd);
        return ntohs(sa.sin_port);
}

#define ANSWER(status) ("HTTP/1.1 " status "\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")

/* ---- health probes ---------------------------------------------------------- */

typedef struct Seen {
        bool done;
        unsigned calls;
        HealthResult result;
        char detail[256];
} Seen;

static void on_result(void *userdata, HealthResult result, const char *detail) {
        Seen *seen = userdata;

        seen->calls++;
        seen->done = true;
        seen->result = result;
        snprintf(seen->detail, sizeof(seen->detail), "%s", detail);
}

/* One probe on a fresh loop; the callback must come later, exactly once. */
static Seen probe(const char *command, const char *url, uint64_t timeout) {
        sd_event *e = loop_new();
        HealthCheck *h = NULL;
        Seen seen = {};

        ck_assert_int_eq(health_check_new(e, command, url, timeout, &h), 0);
        ck_assert_int_eq(health_check_probe(h, on_result, &seen), 0);
        ck_assert_uint_eq(seen.calls, 0);
        ck_assert_int_eq(health_check_probe(h, on_result, &seen), -EBUSY);
        ck_assert_msg(run_until(e, &seen.done, SAFETY), "no result for %s %s", command ?: "-", url ?: "-");
        run_for(e, 20 * MSEC);
        ck_assert_uint_eq(seen.calls, 1);
        health_check_free(h);
        sd_event_unref(e);
        return seen;
}

#define ck_assert_seen(seen, res, det)                                                                \
        do {                                                                                          \
                ck_assert_msg((seen).result == (res), "result %s (%s), expected %s",                  \
                              health_result_to_string((seen).result), (seen).detail,                  \
                              health_result_to_string(res));                                          \
                ck_assert_str_eq((seen).detail, (det));                                               \
        } while (0)

static const struct {
        const char *command;
        uint64_t timeout;
        HealthResult result;
        const char *detail;
} command_cases[] = {
        { "true", 2 * SEC, HEALTH_OK, "exit status 0" },
        { "exit 75", 2 * SEC, HEALTH_NOT_YET, "exit status 75" },
        { "exit 3", 2 * SEC, HEALTH_FAILING, "exit status 3" },
        { "kill -9 $$", 2 * SEC, HEALTH_FAILING, "killed by signal 9" },
        { "sleep 30", 200 * MSEC, HEALTH_NOT_YET, "timed out after 200 ms" },
        { "no-such-command-here 2>/dev/null", 2 * SEC, HEALTH_FAILING, "exit status 127" },
        /* stdin is /dev/null: a command that reads it ends at once. */
        { "test \"$(readlink /proc/self/fd/0)\" = /dev/null && cat", 2 * SEC, HEALTH_OK, "exit status 0" },
        /* The test blocks SIGTERM and ignores SIGPIPE (as a daemon might); the command gets neither. */
        { "kill -TERM $$; exit 0", 2 * SEC, HEALTH_FAILING, "killed by signal 15" },
        { "kill -PIPE $$; exit 0", 2 * SEC, HEALTH_FAILING, "killed by signal 13" },
        { "grep -q '^SigBlk:[[:space:]]*0*$' /proc/self/status", 2 * SEC, HEALTH_OK, "exit status 0" },
        /* Nothing but stdin, stdout and stderr is inherited. */
        { "test \"$(ls /proc/self/fd | wc -l)\" -le 4", 2 * SEC, HEALTH_OK, "exit status 0" },
};

START_TEST(test_command) {
        /* The test's own state must not leak into the command's: block and ignore like a daemon. */
        sigset_t ss;
        sigemptyset(&ss);
        sigaddset(&ss, SIGTERM);
        ck_assert_int_eq(sigprocmask(SIG_BLOCK, &ss, NULL), 0);
        signal(SIGPIPE, SIG_IGN);
        int fd = open("/dev/null", O_RDONLY); /* not O_CLOEXEC on purpose */
        ck_assert_int_ge(fd, 0);
        int in[2];                              /* our stdin: a pipe nobody writes to */
        ck_assert_int_eq(pipe2(in, O_CLOEXEC), 0);
        ck_assert_int_eq(dup2(in[0], STDIN_FILENO), STDIN_FILENO);

        uint64_t start = now_usec();
        Seen seen = probe(command_cases[_i].command, NULL, command_cases[_i].timeout);
        ck_assert_seen(seen, command_cases[_i].result, command_cases[_i].detail);
        ck_assert_uint_lt(now_usec() - start, command_cases[_i].timeout + SEC);
        assert_no_children();
        close(fd);
        close(in[0]);
        close(in[1]);
}
END_TEST

static bool process_gone(pid_t pid) {
        char path[64], line[256];
        snprintf(path, sizeof(path), "/proc/%d/stat", (int) pid);
        FILE *f = fopen(path, "re");
        if (!f)
                return true;
        /* "pid (comm) S ...": a zombie is gone too, whoever reaps it. */
        bool gone = !fgets(line, sizeof(line), f) || (strrchr(line, ')') && strrchr(line, ')')[2] == 'Z');
        fclose(f);
        return gone;
}

/* A timeout kills what the shell started too, not just the shell. */
START_TEST(test_command_timeout_kills_group) {
        char path[] = "/tmp/check_health.XXXXXX", command[256];
        int fd = mkostemp(path, O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        snprintf(command, sizeof(command), "sleep 30 & echo $! > %s; wait", path);

        Seen seen = probe(command, NULL, 300 * MSEC);
        ck_assert_seen(seen, HEALTH_NOT_YET, "timed out after 300 ms");
        assert_no_children();

        char buf[32] = "";
        ck_assert_int_gt(read(fd, buf, sizeof(buf) - 1), 0);
        pid_t grandchild = (pid_t) strtol(buf, NULL, 10);
        ck_assert_int_gt(grandchild, 0);
        for (int i = 0; i < 100 && !process_gone(grandchild); i++)
                usleep(10000);
        ck_assert_msg(process_gone(grandchild), "sleep %d survived the probe", (int) grandchild);
        close(fd);
        unlink(path);
}
END_TEST

static const struct {
        const char *answer;
        size_t body_len;
        HealthResult result;
        const char *detail;
} url_cases[] = {
        { ANSWER("200 OK"), 0, HEALTH_OK, "HTTP 200" },
        { ANSWER("503 Service Unavailable"), 0, HEALTH_NOT_YET, "HTTP 503" },
        { ANSWER("500 Internal Server Error"), 0, HEALTH_FAILING, "HTTP 500" },
        { "HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\nConnection: close\r\n\r\nnot found", 0, HEALTH_FAILING,
          "HTTP 404" },
        /* Redirects are not followed: the health endpoint itself must answer. */
        { "HTTP/1.1 302 Found\r\nLocation: /elsewhere\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", 0,
          HEALTH_FAILING, "HTTP 302" },
        /* A long body is not read to the end; the status decides. */
        { "HTTP/1.1 200 OK\r\nContent-Length: 4194304\r\nConnection: close\r\n\r\n", 4194304, HEALTH_OK,
          "HTTP 200" },
        { "garbage\r\n\r\n", 0, HEALTH_FAILING, "Unsupported protocol" },
};

START_TEST(test_url) {
        Server s = server_start_body(url_cases[_i].answer, url_cases[_i].body_len);
        Seen seen = probe(NULL, s.url, 2 * SEC);
        ck_assert_seen(seen, url_cases[_i].result, url_cases[_i].detail);
        server_stop(&s);
        assert_no_children();
}
END_TEST

START_TEST(test_url_refused) {
        char url[64];
        snprintf(url, sizeof(url), "http://127.0.0.1:%d/health", free_port());
        Seen seen = probe(NULL, url, 2 * SEC);
        ck_assert_seen(seen, HEALTH_NOT_YET, "connection refused");
}
END_TEST

START_TEST(test_url_silent) {
        Server s = server_start(NULL);
        uint64_t start = now_usec();
        Seen seen = probe(NULL, s.url, 300 * MSEC);
        ck_assert_seen(seen, HEALTH_NOT_YET, "timed out after 300 ms");
        ck_assert_uint_lt(now_usec() - start, 1 * SEC);
        server_stop(&s);
}
END_TEST

START_TEST(test_url_other_protocol) {
        Seen seen = probe(NULL, "file:///etc/hostname", 2 * SEC);
        ck_assert_int_eq(seen.result, HEALTH_FAILING);
        seen = probe(NULL, "http://[", 2 * SEC);
        ck_assert_int_eq(seen.result, HEALTH_FAILING);
}
END_TEST

static const struct {
        const char *command;
        const char *answer;
        HealthResult result;
        const char *detail;
} both_cases[] = {
        { "true", ANSWER("200 OK"), HEALTH_OK, "exit status 0, HTTP 200" },
        { "true", ANSWER("500 Internal Server Error"), HEALTH_FAILING, "HTTP 500" },
        { "exit 4", ANSWER("200 OK"), HEALTH_FAILING, "exit status 4" },
        { "exit 75", ANSWER("200 OK"), HEALTH_NOT_YET, "exit status 75" },
        { "true", ANSWER("503 Service Unavailable"), HEALTH_NOT_YET, "HTTP 503" },
        { "exit 75", ANSWER("500 Internal Server Error"), HEALTH_FAILING, "HTTP 500" },
        { "exit 1", ANSWER("500 Internal Server Error"), HEALTH_FAILING, "exit status 1, HTTP 500" },
};

START_TEST(test_both) {
        Server s = server_start(both_cases[_i].answer);
        Seen seen = probe(both_cases[_i].command, s.url, 2 * SEC);
        ck_assert_seen(seen, both_cases[_i].result, both_cases[_i].detail);
        server_stop(&s);
        assert_no_children();
}
END_TEST

/* Both run at once: a slow command and a silent server take one timeout, not two. */
START_TEST(test_both_parallel) {
        Server s = server_start(NULL);
        uint64_t start = now_usec();
        Seen seen = probe("sleep 0.4", s.url, 500 * MSEC);
        uint64_t took = now_usec() - start;
        ck_assert_seen(seen, HEALTH_NOT_YET, "timed out after 500 ms");
        ck_assert_uint_lt(took, 800 * MSEC);    /* one after the other: 900 ms */
        server_stop(&s);
        assert_no_children();
}
END_TEST

/* Free while the command, the transfer or both are running: no callback, no child, no leak. */
START_TEST(test_free_running) {
        static const bool with_command[] = { true, false, true }, with_url[] = { false, true, true };
        Server s = server_start(NULL);
        sd_event *e = loop_new();
        HealthCheck *h = NULL;
        Seen seen = {};

        ck_assert_int_eq(health_check_new(e, with_command[_i] ? "sleep 30" : NULL, with_url[_i] ? s.url : NULL,
                                          10 * SEC, &h),
                         0);
        ck_assert_int_eq(health_check_probe(h, on_result, &seen), 0);
        run_for(e, 50 * MSEC);
        ck_assert_uint_eq(seen.calls, 0);
        health_check_free(h);
        run_for(e, 50 * MSEC);
        ck_assert_uint_eq(seen.calls, 0);
        server_stop(&s);
        assert_no_children();
        sd_event_unref(e);
}
END_TEST

/* The callback may free the check, or start its next probe. */
typedef struct Chain {
        HealthCheck *h;
        unsigned calls;
        bool done;
        HealthResult results[2];
} Chain;

static void on_result_free(void *userdata, HealthResult result, const char *detail _unused_) {
        Chain *c = userdata;

        c->results[c->calls++] = result;
        c->h = health_check_free(c->h);
        c->done = true;
}

static void on_result_again(void *userdata, HealthResult result, const char *detail _unused_) {
        Chain *c = userdata;

        c->results[c->calls++] = result;
        if (c->calls == 1)
                ck_assert_int_eq(health_check_probe(c->h, on_result_again, c), 0);
        else
                c->done = true;
}

START_TEST(test_callback_reentry) {
        Server s = server_start(ANSWER("200 OK"));
        sd_event *e = loop_new();
        Chain c = {};

        ck_assert_int_eq(health_check_new(e, "true", s.url, 2 * SEC, &c.h), 0);
        ck_assert_int_eq(health_check_probe(c.h, on_result_again, &c), 0);
        ck_assert(run_until(e, &c.done, SAFETY));
        ck_assert_uint_eq(c.calls, 2);
        ck_assert_int_eq(c.results[1], HEALTH_OK);

        c.done = false;
        c.calls = 0;
        ck_assert_int_eq(health_check_probe(c.h, on_result_free, &c), 0);
        ck_assert(run_until(e, &c.done, SAFETY));
        run_for(e, 20 * MSEC);
        ck_assert_uint_eq(c.calls, 1);
        ck_assert_int_eq(c.results[0], HEALTH_OK);
        ck_assert_ptr_null(c.h);

        server_stop(&s);
        assert_no_children();
        sd_event_unref(e);
}
END_TEST

START_TEST(test_new_refusals) {
        sd_event *e = loop_new();
        HealthCheck *h = NULL;

        ck_assert_int_eq(health_check_new(e, NULL, NULL, SEC, &h), -EINVAL);
        ck_assert_int_eq(health_check_new(e, "true", NULL, 0, &h), -EINVAL);
        ck_assert_int_eq(health_check_new(e, "", NULL, SEC, &h), -EINVAL);
        ck_assert_int_eq(health_check_new(NULL, "true", NULL, SEC, &h), -EINVAL);
        ck_assert_ptr_null(h);
        ck_assert_int_eq(health_check_new(e, "true", NULL, SEC, &h), 0);
        ck_assert_int_eq(health_check_probe(h, NULL, NULL), -EINVAL);

        /* sd-event watches children only with SIGCHLD blocked; without, the probe fails and leaves no child. */
        sigset_t ss;
        Seen seen = {};
        sigemptyset(&ss);
        sigaddset(&ss, SIGCHLD);
        ck_assert_int_eq(sigprocmask(SIG_UNBLOCK, &ss, NULL), 0);
        ck_assert_int_eq(health_check_probe(h, on_result, &seen), -EBUSY);
        assert_no_children();
        ck_assert_int_eq(sigprocmask(SIG_BLOCK, &ss, NULL), 0);
        ck_assert_int_eq(health_check_probe(h, on_result, &seen), 0);
        ck_assert(run_until(e, &seen.done, SAFETY));
        ck_assert_int_eq(seen.result, HEALTH_OK);
        health_check_free(h);
        health_check_free(NULL);

        ck_assert_str_eq(health_result_to_string(HEALTH_OK), "ok");
        ck_assert_str_eq(health_result_to_string(HEALTH_NOT_YET), "not-yet");
        ck_assert_str_eq(health_result_to_string(HEALTH_FAILING), "failing");
        ck_assert_ptr_null(health_result_to_string(_HEALTH_RESULT_MAX));
        ck_assert_ptr_null(health_result_to_string(_HEALTH_RESULT_INVALID));
        sd_event_unref(e);
}
END_TEST

/* ---- CurlGlue ---------------------------------------------------------------- */

typedef struct Xfer {
        CURL *easy;
        unsigned calls;
        CURLcode result;
        long status;
        CurlGlue **glue;        /* on done: free it (and set NULL) when set */
        CURL *remove;           /* on done: remove this transfer too */
        unsigned *n_done;
} Xfer;

static size_t discard(char *data _unused_, size_t size, size_t nmemb, void *userdata _unused_) {
        return size * nmemb;
}

static void on_done(CurlGlue *g, CURL *easy, CURLcode result, void *userdata) {
        Xfer *x = userdata;

        ck_assert_ptr_eq(easy, x->easy);
        x->calls++;
        x->result = result;
        (void) curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &x->status);
        curl_glue_remove(g, easy);      /* already removed: a no-op */
        if (x->remove)
                curl_glue_remove(g, x->remove);
        if (x->glue)
                *x->glue = curl_glue_free(*x->glue);
        (*x->n_done)++;
}

static void xfer_start(CurlGlue *g, Xfer *x, const char *url, unsigned *n_done) {
        x->easy = curl_easy_init();
        x->n_done = n_done;
        ck_assert_ptr_nonnull(x->easy);
        ck_assert_int_eq(curl_easy_setopt(x->easy, CURLOPT_URL, url), CURLE_OK);
        ck_assert_int_eq(curl_easy_setopt(x->easy, CURLOPT_NOSIGNAL, 1L), CURLE_OK);
        ck_assert_int_eq(curl_easy_setopt(x->easy, CURLOPT_NOPROXY, "*"), CURLE_OK);
        ck_assert_int_eq(curl_easy_setopt(x->easy, CURLOPT_TIMEOUT_MS, 2000L), CURLE_OK);
        ck_assert_int_eq(curl_easy_setopt(x->easy, CURLOPT_WRITEFUNCTION, discard), CURLE_OK);
        ck_assert_int_eq(curl_glue_add(g, x->easy, on_done, x), 0);
        ck_assert_int_eq(curl_glue_add(g, x->easy, on_done, x), -EBUSY);
}

static bool n_reached(sd_event *e, unsigned *n, unsigned want) {
        bool done = *n >= want;
        sd_event_source *t = NULL;
        bool expired = false;

        ck_assert_int_ge(sd_event_add_time_relative(e, &t, CLOCK_MONOTONIC, SAFETY, MSEC, on_expired, &expired), 0);
        while (!done && !expired) {
                ck_assert_int_ge(sd_event_run(e, UINT64_MAX), 0);
                done = *n >= want;
        }
        sd_event_source_unref(t);
        return done;
}

START_TEST(test_glue_parallel) {
        Server s = server_start(ANSWER("200 OK"));
        sd_event *e = loop_new();
        CurlGlue *g = NULL;
        Xfer a = {}, b = {};
        unsigned n = 0;

        ck_assert_int_eq(curl_glue_new(e, &g), 0);
        xfer_start(g, &a, s.url, &n);
        xfer_start(g, &b, s.url, &n);
        ck_assert_uint_eq(n, 0);
        ck_assert(n_reached(e, &n, 2));
        ck_assert_uint_eq(a.calls, 1);
        ck_assert_uint_eq(b.calls, 1);
        ck_assert_int_eq(a.result, CURLE_OK);
        ck_assert_int_eq(b.status, 200);

        /* The glue can run the same handle again. */
        ck_assert_int_eq(curl_glue_add(g, a.easy, on_done, &a), 0);
        ck_assert(n_reached(e, &n, 3));
        ck_assert_uint_eq(a.calls, 2);
        ck_assert_int_eq(a.status, 200);

        curl_glue_free(g);
        curl_easy_cleanup(a.easy);
        curl_easy_cleanup(b.easy);
        server_stop(&s);
        sd_event_unref(e);
}
END_TEST

START_TEST(test_glue_remove_in_callback) {
        Server fast = server_start(ANSWER("200 OK")), silent = server_start(NULL);
        sd_event *e = loop_new();
        CurlGlue *g = NULL;
        Xfer a = {}, b = {};
        unsigned n = 0;

        ck_assert_int_eq(curl_glue_new(e, &g), 0);
        xfer_start(g, &b, silent.url, &n);
        xfer_start(g, &a, fast.url, &n);
        a.remove = b.easy;
        ck_assert(n_reached(e, &n, 1));
        run_for(e, 100 * MSEC);
        ck_assert_uint_eq(a.calls, 1);
        ck_assert_int_eq(a.status, 200);
        ck_assert_uint_eq(b.calls, 0);

        curl_glue_remove(g, b.easy);    /* already removed: a no-op */
        curl_glue_free(g);
        curl_easy_cleanup(a.easy);
        curl_easy_cleanup(b.easy);
        server_stop(&fast);
        server_stop(&silent);
        sd_event_unref(e);
}
END_TEST

/* Free with transfers running (from outside, and from inside a callback): no callback, no leak. */
START_TEST(test_glue_free_running) {
        Server fast = server_start(ANSWER("200 OK")), silent = server_start(NULL);
        sd_event *e = loop_new();
        CurlGlue *g = NULL;
        Xfer a = {}, b = {}, c = {};
        unsigned n = 0;

        ck_assert_int_eq(curl_glue_new(e, &g), 0);
        xfer_start(g, &a, silent.url, &n);
        run_for(e, 50 * MSEC);
        g = curl_glue_free(g);
        run_for(e, 50 * MSEC);
        ck_assert_uint_eq(a.calls, 0);

        ck_assert_int_eq(curl_glue_new(e, &g), 0);
        xfer_start(g, &b, silent.url, &n);
        xfer_start(g, &c, fast.url, &n);
        c.glue = &g;
        ck_assert(n_reached(e, &n, 1));
        ck_assert_ptr_null(g);
        run_for(e, 50 * MSEC);
        ck_assert_uint_eq(c.calls, 1);
        ck_assert_uint_eq(b.calls, 0);

        curl_easy_cleanup(a.easy);
        curl_easy_cleanup(b.easy);
        curl_easy_cleanup(c.easy);
        server_stop(&fast);
        server_stop(&silent);
        sd_event_unref(e);
}
END_TEST

static Suite *health_suite(void) {
        Suite *s = suite_create("health");
        TCase *tc = tcase_create("health");

        tcase_add_loop_test(tc, test_command, 0, (int) ELEMENTSOF(command_cases));
        tcase_add_test(tc, test_command_timeout_kills_group);
        tcase_add_loop_test(tc, test_url, 0, (int) ELEMENTSOF(url_cases));
        tcase_add_test(tc, test_url_refused);
        tcase_add_test(tc, test_url_silent);
        tcase_add_test(tc, test_url_other_protocol);
        tcase_add_loop_test(tc, test_both, 0, (int) ELEMENTSOF(both_cases));
        tcase_add_test(tc, test_both_parallel);
        tcase_add_loop_test(tc, test_free_running, 0, 3);
        tcase_add_test(tc, test_callback_reentry);
        tcase_add_test(tc, test_new_refusals);
        suite_add_tcase(s, tc);

        tc = tcase_create("curl-glue");
        tcase_add_test(tc, test_glue_parallel);
        tcase_add_test(tc, test_glue_remove_in_callback);
        tcase_add_test(tc, test_glue_free_running);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(health_suite)
