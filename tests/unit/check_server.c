/* SPDX-License-Identifier: MIT */
/*
 * daemon/taskpatchd-server.c: the per-client output cap on the broadcast path. A subscriber
 * that stops reading is disconnected once JSONLINE_MAX_MESSAGE bytes are queued for it, while
 * a subscriber that reads gets every event. (Socket-level caps seen from outside -- request
 * line, client count -- are in tests/integration/test-caps.sh and test-daemon-bad.sh; this
 * one needs events in bulk, which only the server's own API makes cheaply.)
 *
 * The connection caps (SERVER_MAX_CLIENTS_PER_UID, SERVER_ADMIN_RESERVE): readers of other
 * uids are made with seteuid(2) around connect(2) -- SO_PEERCRED records the effective ids
 * at connect time -- so those tests need root (as CI runs them) and are left out otherwise.
 * The idle timeout (TASKPATCHD_IDLE_TIMEOUT_MS, shortened here): an idle client is closed
 * with a timeout line, a subscriber, a deferred request and a client that trickles a line
 * are kept; a deferred client's clock starts again at its answer.
 */

#include <assert.h>
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "check-main.h"
#include "jsonline.h"
#include "taskpatchd-server.h"

#define EVENT_PAD (64u << 10)
#define EVENTS 64               /* 4 MiB in all: far past the cap plus what the kernel buffers */

#define READER_UID 10001       /* no such user needed: seteuid() takes any number */
#define IDLE_MS 400             /* the shortened idle timeout */
#define TRICKLE_MS 50           /* a byte this often keeps a half-sent line alive */

static char dir[64], sock_path[128], log_path[128];
static Client *waiting;         /* the request "wait" is deferred until the test answers it */

/* Every request is answered {"ok":true}; "subscribe" also subscribes; "wait" is deferred. */
static void handler(void *userdata, Client *c, json_t *req, int fd) {
        const char *cmd = json_string_value(json_object_get(req, "cmd"));
        (void) userdata;

        safe_close(fd);
        if (strcmp(cmd, "wait") == 0) {
                ck_assert_ptr_null(waiting);
                waiting = client_defer(c);
                return;
        }
        if (strcmp(cmd, "subscribe") == 0)
                client_subscribe(c);
        client_reply(c, NULL);
}

/* A server on a fresh socket; @idle_ms: the test hook's timeout, 0 for the default. */
static Server *server_setup_with(sd_event **ret_event, const char *admin_group, unsigned idle_ms) {
        Server *s = NULL;
        TpError err = {};
        char ms[16];

        snprintf(dir, sizeof(dir), "/tmp/check-server-XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(dir));
        snprintf(sock_path, sizeof(sock_path), "%s/s.sock", dir);
        snprintf(log_path, sizeof(log_path), "%s/log", dir);
        ck_assert_ptr_nonnull(freopen(log_path, "we", stderr));       /* the daemon's log lines */
        if (idle_ms > 0) {
                snprintf(ms, sizeof(ms), "%u", idle_ms);
                ck_assert_int_eq(setenv("TASKPATCHD_IDLE_TIMEOUT_MS", ms, 1), 0);
        } else
                ck_assert_int_eq(unsetenv("TASKPATCHD_IDLE_TIMEOUT_MS"), 0);
        ck_assert_int_ge(sd_event_new(ret_event), 0);
        ck_assert_msg(server_new(*ret_event, sock_path, admin_group, handler, NULL, &s, &err) == 0, "%s",
                      err.message);
        (void) unsetenv("TASKPATCHD_IDLE_TIMEOUT_MS");  /* read once, by server_new (CK_FORK=no runs on) */
        return s;
}

static Server *server_setup(sd_event **ret_event) {
        return server_setup_with(ret_event, NULL, 0);
}

static void server_teardown(Server *s, sd_event *e) {
        server_free(s);
        sd_event_unref(e);
        (void) unlink(log_path);
        (void) rmdir(dir);
}

/* The daemon's log so far. */
static void read_log(char *buf, size_t size) {
        FILE *f = fopen(log_path, "re");
        ck_assert_ptr_nonnull(f);
        size_t n = fread(buf, 1, size - 1, f);
        buf[n] = '\0';
        fclose(f);
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
        read_log(log, sizeof(log));
        ck_assert_msg(strstr(log, "reads too slowly") && strstr(log, "bytes queued): disconnecting"), "log: %s", log);

        json_decref(ev);
        free(pad);
        close(reader);
        close(sleeper);
        server_teardown(s, e);
}
END_TEST

/* ---- connection caps and the idle timeout -------------------------------- */

static uint64_t now_usec(void) {
        struct timespec ts;
        ck_assert_int_eq(clock_gettime(CLOCK_BOOTTIME, &ts), 0);
        return (uint64_t) ts.tv_sec * 1000000 + (uint64_t) ts.tv_nsec / 1000;
}

/* One client socket as the test sees it: everything it received, and whether it was closed. */
typedef struct {
        int fd;
        char got[4096];
        size_t len, lines;
        bool eof;                       /* EOF or reset */
        uint64_t eof_usec;
} Peer;

/* Take what the socket holds now. */
static void peer_read(Peer *p) {
        while (!p->eof) {
                char buf[512];
                ssize_t k = recv(p->fd, buf, sizeof(buf), MSG_DONTWAIT);
                if (k < 0 && errno == EAGAIN)
                        return;
                if (k == 0 || (k < 0 && errno == ECONNRESET)) {
                        p->eof = true;
                        p->eof_usec = now_usec();
                        return;
                }
                ck_assert_int_gt(k, 0);
                ck_assert_uint_lt(p->len + (size_t) k, sizeof(p->got));
                memcpy(p->got + p->len, buf, (size_t) k);
                p->len += (size_t) k;
                p->got[p->len] = '\0';
                for (ssize_t i = 0; i < k; i++)
                        p->lines += buf[i] == '\n';
        }
}

/* Run the loop until @p has received @lines lines in all or is closed; fail after 10 s. */
static void pump_peer(sd_event *e, Peer *p, size_t lines) {
        uint64_t end = now_usec() + 10000000;

        for (;;) {
                peer_read(p);
                if (p->eof || p->lines >= lines)
                        return;
                ck_assert_msg(now_usec() < end, "no line %zu within 10 s; got: %s", lines, p->got);
                ck_assert_int_ge(sd_event_run(e, 10000), 0);
        }
}

static void peer_send(Peer *p, const char *s) {
        ck_assert_int_eq(send(p->fd, s, strlen(s), MSG_NOSIGNAL), (ssize_t) strlen(s));
}

/* A client connected with effective ids @uid/@gid (-1: the test's own). */
static Peer *peer_connect_as(uid_t uid, gid_t gid) {
        Peer *p = calloc(1, sizeof(*p));

        ck_assert_ptr_nonnull(p);
        if (gid != (gid_t) -1)
                ck_assert_int_eq(setegid(gid), 0);
        if (uid != (uid_t) -1)
                ck_assert_int_eq(seteuid(uid), 0);
        p->fd = client_connect();
        /* Back to root before the server accepts: its own uid is geteuid() at accept. */
        if (uid != (uid_t) -1)
                ck_assert_int_eq(seteuid(0), 0);
        if (gid != (gid_t) -1)
                ck_assert_int_eq(setegid(0), 0);
        return p;
}

static Peer *peer_connect(void) {
        return peer_connect_as((uid_t) -1, (gid_t) -1);
}

static void peer_free(Peer *p) {
        close(p->fd);
        free(p);
}

/* The client's request is answered: it was let in. */
static void assert_served(sd_event *e, Peer *p) {
        size_t from = p->len, want = p->lines + 1;

        peer_send(p, "{\"cmd\":\"status\"}\n");
        pump_peer(e, p, want);
        ck_assert_msg(!p->eof && strcmp(p->got + from, "{\"ok\":true}\n") == 0, "not served: '%s'%s", p->got + from,
                      p->eof ? " (closed)" : "");
}

/* The client was refused: one busy line holding @message, then the close. */
static void assert_refused(sd_event *e, Peer *p, const char *message) {
        pump_peer(e, p, 1);
        ck_assert_msg(strstr(p->got, "{\"ok\": false, \"error\": {\"code\": \"busy\", \"message\": \"") == p->got &&
                              strstr(p->got, message) && p->lines == 1,
                      "expected busy naming '%s', got '%s'", message, p->got);
        pump_peer(e, p, 2);
        ck_assert_msg(p->eof && p->lines == 1, "not closed after busy: '%s'", p->got);
}

/* Let readers of other uids reach the socket (the test runs as root). */
static void open_socket_to_all(void) {
        ck_assert_int_eq(chmod(dir, 0711), 0);
        ck_assert_int_eq(chmod(sock_path, 0666), 0);
        /* Root's supplementary groups would go with every seteuid() peer (SO_PEERGROUPS). */
        ck_assert_int_eq(setgroups(0, NULL), 0);
}

START_TEST(test_reader_uid_cap) {
        sd_event *e = NULL;
        Server *s = server_setup(&e);
        Peer *mine[SERVER_MAX_CLIENTS_PER_UID], *p;
        char msg[128], log[8192];

        open_socket_to_all();
        for (size_t i = 0; i < SERVER_MAX_CLIENTS_PER_UID; i++) {
                mine[i] = peer_connect_as(READER_UID, READER_UID);
                assert_served(e, mine[i]);
        }
        /* One more of the same uid: refused, naming its cap. */
        snprintf(msg, sizeof(msg), "uid %u holds %u connections, the most a read-only client may", READER_UID,
                 SERVER_MAX_CLIENTS_PER_UID);
        p = peer_connect_as(READER_UID, READER_UID);
        assert_refused(e, p, msg);
        peer_free(p);
        /* The cap is per uid: another reader, and root, get in. */
        p = peer_connect_as(READER_UID + 1, READER_UID + 1);
        assert_served(e, p);
        peer_free(p);
        p = peer_connect();
        assert_served(e, p);
        peer_free(p);
        /* The reader's connections were not disturbed, and one that leaves makes room. */
        assert_served(e, mine[0]);
        peer_free(mine[0]);
        mine[0] = NULL;
        for (uint64_t end = now_usec() + 10000000;;) {
                /* The daemon notices the hang-up on its own loop: busy until then. */
                p = peer_connect_as(READER_UID, READER_UID);
                (void) send(p->fd, "{\"cmd\":\"status\"}\n", 17, MSG_NOSIGNAL);
                pump_peer(e, p, 1);
                bool served = strcmp(p->got, "{\"ok\":true}\n") == 0;
                peer_free(p);
                if (served)
                        break;
                ck_assert_msg(now_usec() < end, "no room for the reader after one of its connections left");
        }

        read_log(log, sizeof(log));
        snprintf(msg, sizeof(msg), "uid %u (pid %d) holds %u read-only connections, the per-uid cap: refusing another",
                 READER_UID, (int) getpid(), SERVER_MAX_CLIENTS_PER_UID);
        ck_assert_msg(strstr(log, msg), "log: %s", log);
        for (size_t i = 1; i < SERVER_MAX_CLIENTS_PER_UID; i++)
                peer_free(mine[i]);
        server_teardown(s, e);
}
END_TEST

/* Any group but root's, for admin_group: its members are admins. */
static gid_t some_group(char *name, size_t size) {
        struct group *g;

        setgrent();
        while ((g = getgrent()) && g->gr_gid == 0)
                ;
        ck_assert_msg(g, "no group but root's in the group database");
        ck_assert_uint_lt(strlen(g->gr_name), size);
        memcpy(name, g->gr_name, strlen(g->gr_name) + 1);
        gid_t gid = g->gr_gid;
        endgrent();
        return gid;
}

START_TEST(test_admin_reserve) {
        enum { SHARE = SERVER_MAX_CLIENTS - SERVER_ADMIN_RESERVE };
        static_assert(SHARE % SERVER_MAX_CLIENTS_PER_UID == 0, "whole uids fill the share");
        Peer *peers[SERVER_MAX_CLIENTS], *p;
        size_t n = 0;
        char group[256], msg[160], log[16384];
        sd_event *e = NULL;
        gid_t admin_gid = some_group(group, sizeof(group));
        Server *s = server_setup_with(&e, group, 0);

        open_socket_to_all();
        /* Readers of SHARE / 16 uids fill the readers' share. */
        for (unsigned u = 0; u < SHARE / SERVER_MAX_CLIENTS_PER_UID; u++)
                for (unsigned i = 0; i < SERVER_MAX_CLIENTS_PER_UID; i++) {
                        peers[n] = peer_connect_as(READER_UID + u, READER_UID + u);
                        assert_served(e, peers[n++]);
                }
        /* A reader of a new uid, under its own cap: refused, naming the reserve. */
        snprintf(msg, sizeof(msg), "read-only clients hold %u connections, all but the %u the daemon keeps for admins",
                 SHARE, SERVER_ADMIN_RESERVE);
        p = peer_connect_as(READER_UID + 100, READER_UID + 100);
        assert_refused(e, p, msg);
        peer_free(p);
        /* Admins still get in, up to the total: a member of admin_group (not root, not us), then root. */
        peers[n] = peer_connect_as(READER_UID + 101, admin_gid);
        assert_served(e, peers[n++]);
        while (n < SERVER_MAX_CLIENTS) {
                peers[n] = peer_connect();
                assert_served(e, peers[n++]);
        }
        /* The total holds for admins too. */
        p = peer_connect();
        snprintf(msg, sizeof(msg), "the daemon serves %u clients at once: try again later", SERVER_MAX_CLIENTS);
        assert_refused(e, p, msg);
        peer_free(p);
        /* Everyone connected is still served. */
        for (size_t i = 0; i < n; i += 15)
                assert_served(e, peers[i]);

        read_log(log, sizeof(log));
        snprintf(msg, sizeof(msg), "read-only clients hold %u connections, all but the %u kept for admins: "
                 "refusing uid %u", SHARE, SERVER_ADMIN_RESERVE, READER_UID + 100);
        ck_assert_msg(strstr(log, msg), "log: %s", log);
        ck_assert_msg(strstr(log, "128 clients connected: refusing another"), "log: %s", log);
        for (size_t i = 0; i < n; i++)
                peer_free(peers[i]);
        server_teardown(s, e);
}
END_TEST

/* The first line @p received is the idle timeout's, and then it was closed, no sooner than
 * IDLE_MS after @since (before the client last sent). */
static void assert_timed_out(const Peer *p, uint64_t since, const char *what) {
        char want[128];

        snprintf(want, sizeof(want), "{\"ok\": false, \"error\": {\"code\": \"timeout\", \"message\": "
                 "\"idle for %u ms: closed\"}}\n", IDLE_MS);
        ck_assert_msg(p->eof, "%s: still open", what);
        ck_assert_msg(p->len >= strlen(want) && strcmp(p->got + p->len - strlen(want), want) == 0,
                      "%s: expected the timeout line last, got '%s'", what, p->got);
        ck_assert_msg(p->eof_usec - since >= IDLE_MS * 1000ull, "%s: closed after %llu ms, before the timeout", what,
                      (unsigned long long) (p->eof_usec - since) / 1000);
}

/* Run the loop for @ms, a byte to @trickle every TRICKLE_MS; every peer read as it goes. */
static void pump_for(sd_event *e, unsigned ms, Peer **peers, size_t n, Peer *trickle) {
        uint64_t end = now_usec() + ms * 1000ull, next = 0;

        while (now_usec() < end) {
                if (trickle && now_usec() >= next) {
                        peer_send(trickle, " ");
                        next = now_usec() + TRICKLE_MS * 1000;
                }
                ck_assert_int_ge(sd_event_run(e, 5000), 0);
                for (size_t i = 0; i < n; i++)
                        peer_read(peers[i]);
        }
}

START_TEST(test_idle_timeout) {
        sd_event *e = NULL;
        Server *s = server_setup_with(&e, NULL, IDLE_MS);
        json_t *ev = json_pack("{s:s}", "event", "test");
        char log[8192];

        /* silent: never sends; asked: one request, then nothing; sub: subscribed; wait: a
         * deferred request; trickle: a line that takes its time, a byte every TRICKLE_MS. */
        uint64_t t_silent = now_usec();
        Peer *silent = peer_connect();
        Peer *asked = peer_connect(), *sub = peer_connect(), *wait = peer_connect(), *trickle = peer_connect();
        Peer *all[] = { silent, asked, sub, wait, trickle };
        uint64_t t_asked = now_usec();
        assert_served(e, asked);
        subscribe(e, sub->fd);
        peer_send(wait, "{\"cmd\":\"wait\"}\n");
        while (!waiting)
                ck_assert_int_ge(sd_event_run(e, 5000), 0);
        peer_send(trickle, "{\"cmd\":\"status\"");

        /* Four timeouts: the idle two are closed, the others kept. */
        pump_for(e, 4 * IDLE_MS, all, ELEMENTSOF(all), trickle);
        assert_timed_out(silent, t_silent, "a client that never sent");
        assert_timed_out(asked, t_asked, "a client answered, then silent");
        ck_assert_msg(!sub->eof && !wait->eof && !trickle->eof, "closed: subscriber %d, deferred %d, trickle %d",
                      sub->eof, wait->eof, trickle->eof);

        /* They still work: the trickled line is answered, the subscriber gets an event. Once
         * silent, the trickle client is closed too. */
        uint64_t t_trickle = now_usec();
        peer_send(trickle, "}\n");
        pump_peer(e, trickle, 1);
        ck_assert_str_eq(trickle->got, "{\"ok\":true}\n");
        server_broadcast(s, ev);
        pump_peer(e, sub, 1);
        ck_assert_str_eq(sub->got, "{\"event\":\"test\"}\n");
        pump_for(e, 3 * IDLE_MS, all, ELEMENTSOF(all), NULL);
        assert_timed_out(trickle, t_trickle, "the trickle client once silent");
        ck_assert_msg(!sub->eof && !wait->eof, "closed: subscriber %d, deferred %d", sub->eof, wait->eof);

        /* The deferred request gets its answer, with no other client that may go idle left: its
         * clock starts at the answer, not at its request, and it is closed IDLE_MS later. */
        uint64_t t_answer = now_usec();
        ck_assert_int_ge(sd_event_run(e, 0), 0);        /* the server's clock: the loop's last wake-up */
        client_reply(waiting, NULL);
        waiting = client_unref(waiting);
        pump_peer(e, wait, 1);
        ck_assert_str_eq(wait->got, "{\"ok\":true}\n");
        pump_for(e, 3 * IDLE_MS, all, ELEMENTSOF(all), NULL);
        assert_timed_out(wait, t_answer, "a client after its deferred answer");
        ck_assert_msg(!sub->eof, "the subscriber was closed");

        read_log(log, sizeof(log));
        ck_assert_msg(strstr(log, "TASKPATCHD_IDLE_TIMEOUT_MS=400: idle clients are closed after 400 ms"), "log: %s",
                      log);
        ck_assert_msg(strstr(log, "idle for 400 ms: closed"), "log: %s", log);
        for (size_t i = 0; i < ELEMENTSOF(all); i++)
                peer_free(all[i]);
        json_decref(ev);
        server_teardown(s, e);
}
END_TEST

static Suite *server_suite(void) {
        Suite *s = suite_create("server");
        TCase *tc = tcase_create("caps");

        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_subscriber_queue_cap);
        tcase_add_test(tc, test_idle_timeout);
        if (geteuid() == 0) {
                tcase_add_test(tc, test_reader_uid_cap);
                tcase_add_test(tc, test_admin_reserve);
        } else
                printf("check_server: not root, so the reader-cap tests (seteuid peers) are not run\n");
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(server_suite)
