/* SPDX-License-Identifier: MIT */
/*
 * daemon/taskpatchd-server.c: the per-client output cap on the broadcast path. A subscriber
 * that stops reading is disconnected once JSONLINE_MAX_MESSAGE bytes are queued for it, while
 * a subscriber that reads gets every event. (Socket-level caps seen from outside -- request
 * line, client count -- are in tests/integration/test-caps.sh and test-daemon-bad.sh; this
 * one needs events in bulk, which only the server's own API makes cheaply.)
 */

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "check-main.h"
#include "jsonline.h"
#include "taskpatchd-server.h"

#define EVENT_PAD (64u << 10)
#define EVENTS 64               /* 4 MiB in all: far past the cap plus what the kernel buffers */

static char dir[64], sock_path[128], log_path[128];

/* Every request is answered {"ok":true}; "subscribe" also subscribes. */
static void handler(void *userdata, Client *c, json_t *req, int fd) {
        (void) userdata;
        safe_close(fd);
        if (strcmp(json_string_value(json_object_get(req, "cmd")), "subscribe") == 0)
                client_subscribe(c);
        client_reply(c, NULL);
}

static Server *server_setup(sd_event **ret_event) {
        Server *s = NULL;
        TpError err = {};

        snprintf(dir, sizeof(dir), "/tmp/check-server-XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(dir));
        snprintf(sock_path, sizeof(sock_path), "%s/s.sock", dir);
        snprintf(log_path, sizeof(log_path), "%s/log", dir);
        ck_assert_ptr_nonnull(freopen(log_path, "we", stderr));       /* the daemon's log lines */
        ck_assert_int_ge(sd_event_new(ret_event), 0);
        ck_assert_msg(server_new(*ret_event, sock_path, NULL, handler, NULL, &s, &err) == 0, "%s", err.message);
        return s;
}

static int client_connect(void) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

        ck_assert_int_ge(fd, 0);
        memcpy(sa.sun_path, sock_path, strlen(sock_path));
        ck_assert_int_eq(connect(fd, (struct sockaddr *) &sa, sizeof(sa)), 0);
        return fd;
}

/* Read what @fd holds now into *@lines (counting newlines); -1 at EOF or reset, else bytes read. */
static ssize_t drain(int fd, size_t *lines) {
        char buf[64 << 10];
        ssize_t total = 0;

        for (;;) {
                ssize_t k = recv(fd, buf, sizeof(buf), 0);
                if (k == 0 || (k < 0 && errno == ECONNRESET))
                        return -1;
                if (k < 0) {
                        ck_assert_int_eq(errno, EAGAIN);
                        return total;
                }
                for (ssize_t i = 0; i < k; i++)
                        *lines += buf[i] == '\n';
                total += k;
        }
}

/* Run the loop until @fd has received @want lines in all (*@lines), or fail after a few seconds. */
static void pump_until(sd_event *e, int fd, size_t *lines, size_t want) {
        for (int i = 0; i < 5000 && *lines < want; i++) {
                ck_assert_int_ge(sd_event_run(e, 1000), 0);
                ck_assert_int_ge(drain(fd, lines), 0);
        }
        ck_assert_uint_eq(*lines, want);
}

static void subscribe(sd_event *e, int fd) {
        static const char req[] = "{\"cmd\":\"subscribe\"}\n";
        size_t lines = 0;

        ck_assert_int_eq(send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL), (ssize_t) sizeof(req) - 1);
        pump_until(e, fd, &lines, 1);
}

START_TEST(test_subscriber_queue_cap) {
        sd_event *e = NULL;
        Server *s = server_setup(&e);
        int reader, sleeper;
        size_t lines = 0, slept = 0;
        char *pad = malloc(EVENT_PAD + 1);
        json_t *ev;

        ck_assert_ptr_nonnull(pad);
        memset(pad, 'x', EVENT_PAD);
        pad[EVENT_PAD] = '\0';
        ev = json_pack("{s:s, s:s}", "event", "test", "pad", pad);
        ck_assert_ptr_nonnull(ev);

        /* Both subscribed (connected one at a time: the server accepts on its own loop). */
        sleeper = client_connect();
        subscribe(e, sleeper);
        reader = client_connect();
        subscribe(e, reader);

        for (size_t i = 0; i < EVENTS; i++) {
                server_broadcast(s, ev);
                pump_until(e, reader, &lines, i + 1);
        }

        /* The sleeper wakes up: what the kernel buffered, then the end -- far less than was sent. */
        ssize_t got = 0, k;
        while ((k = drain(sleeper, &slept)) >= 0) {
                got += k;
                struct pollfd p = { .fd = sleeper, .events = POLLIN };
                ck_assert_int_eq(poll(&p, 1, 2000), 1);
        }
        ck_assert_msg((size_t) got < (size_t) EVENTS * EVENT_PAD / 2, "the sleeper got %zd bytes", got);
        ck_assert_uint_lt(slept, EVENTS);

        /* The daemon's log says why. */
        char log[4096] = "";
        FILE *f = fopen(log_path, "re");
        ck_assert_ptr_nonnull(f);
        size_t n = fread(log, 1, sizeof(log) - 1, f);
        log[n] = '\0';
        fclose(f);
        ck_assert_msg(strstr(log, "reads too slowly") && strstr(log, "bytes queued): disconnecting"), "log: %s", log);

        json_decref(ev);
        free(pad);
        close(reader);
        close(sleeper);
        server_free(s);
        sd_event_unref(e);
        (void) unlink(log_path);
        (void) rmdir(dir);
}
END_TEST

static Suite *server_suite(void) {
        Suite *s = suite_create("server");
        TCase *tc = tcase_create("caps");

        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_subscriber_queue_cap);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(server_suite)
