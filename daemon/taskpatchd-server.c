/* SPDX-License-Identifier: MIT */

#include <assert.h>
#include <errno.h>
#include <grp.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>

#include "jsonline.h"
#include "parse.h"
#include "taskpatchd-log.h"
#include "taskpatchd-server.h"

#define SERVER_MAX_GROUPS 256
#define SERVER_IDLE_TIMEOUT_MAX_MS 86400000u    /* the test hook's upper bound: a day */

struct Client {
        unsigned ref;
        Server *server;
        Client *prev, *next;
        int fd;                         /* -1 once disconnected */
        sd_event_source *io;
        LineReader in;
        char *out;                      /* queued output */
        size_t out_len, out_sent;
        int fds[JSONLINE_MAX_FDS];
        size_t n_fds;
        struct ucred cred;
        bool admin;
        bool subscriber;
        bool deferred;                  /* a request awaits its answer: hold the next ones */
        bool closing;                   /* answer, then drain what the client still sends, then close */
        uint64_t drained;
        uint64_t active_usec;           /* CLOCK_BOOTTIME when a byte last moved or a deferred answer went out */
};

struct Server {
        sd_event *event;
        int fd;
        bool bound;                     /* we created the path: remove it at exit */
        char *path;
        sd_event_source *io;
        gid_t admin_gid;
        bool have_admin_gid;
        RequestHandler handler;
        void *userdata;
        Client *clients;
        unsigned n_clients;
        uint64_t idle_usec;             /* SERVER_IDLE_TIMEOUT_MS, or the test hook's */
        sd_event_source *idle_timer;    /* armed while a client may go idle: at the earliest deadline */
};

static void client_process(Client *c);

static void client_close_fds(Client *c) {
        for (size_t i = 0; i < c->n_fds; i++)
                safe_close(c->fds[i]);
        c->n_fds = 0;
}

/* Idle means: not subscribed and not waiting for an answer (then the manager holds it). */
static bool client_may_idle(const Client *c) {
        return !c->subscriber && !c->deferred;
}

/* Restart the client's idle clock. The timer, when armed, is due no later than this new
 * deadline (deadlines only grow), so it needs arming only when it is off. */
static void client_touch(Client *c) {
        Server *s = c->server;
        int enabled = SD_EVENT_OFF;

        (void) sd_event_now(s->event, CLOCK_BOOTTIME, &c->active_usec);
        if (!client_may_idle(c) || !s->idle_timer)
                return;
        (void) sd_event_source_get_enabled(s->idle_timer, &enabled);
        if (enabled == SD_EVENT_OFF) {
                (void) sd_event_source_set_time(s->idle_timer, c->active_usec + s->idle_usec);
                (void) sd_event_source_set_enabled(s->idle_timer, SD_EVENT_ONESHOT);
        }
}

static void client_disconnect(Client *c) {
        if (c->fd < 0)
                return;
        c->io = sd_event_source_disable_unref(c->io);
        c->fd = safe_close(c->fd);
        client_close_fds(c);
        if (c->prev)
                c->prev->next = c->next;
        else
                c->server->clients = c->next;
        if (c->next)
                c->next->prev = c->prev;
        c->server->n_clients--;
        c->deferred = false;
        client_unref(c);                /* the connection's reference */
}

Client *client_unref(Client *c) {
        if (!c || --c->ref > 0)
                return NULL;
        line_reader_done(&c->in);
        free(c->out);
        free(c);
        return NULL;
}

Client *client_defer(Client *c) {
        c->deferred = true;
        c->ref++;
        return c;
}

static void client_update_events(Client *c) {
        uint32_t ev = 0;

        if (c->fd < 0)
                return;
        if (!c->deferred)
                ev |= EPOLLIN;
        if (c->out_len > c->out_sent)
                ev |= EPOLLOUT;
        (void) sd_event_source_set_io_events(c->io, ev);
}

static void client_flush(Client *c) {
        while (c->fd >= 0 && c->out_sent < c->out_len) {
                ssize_t k = send(c->fd, c->out + c->out_sent, c->out_len - c->out_sent, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno != EAGAIN)
                                client_disconnect(c);
                        break;
                }
                c->out_sent += (size_t) k;
                client_touch(c);        /* a client that reads a long answer is not idle */
        }
        if (c->fd >= 0 && c->out_sent == c->out_len) {
                c->out_len = c->out_sent = 0;
                /* Our last word is out; reading on until the client's EOF keeps it from being reset away. */
                if (c->closing)
                        (void) shutdown(c->fd, SHUT_WR);
        }
        client_update_events(c);
}

/* Queue one line; a client that has let JSONLINE_MAX_MESSAGE pile up is cut off. */
static void client_queue(Client *c, json_t *obj) {
        _cleanup_free_ char *line = NULL;
        size_t len;

        if (c->fd < 0)
                return;
        if (jsonline_dump(obj, JSONLINE_MAX_MESSAGE, &line, &len) < 0) {
                /* A reply the client waits for becomes an error it can read; an event is dropped. */
                bool reply = json_object_get(obj, "ok") != NULL;
                log_error("a %s for client pid %d exceeds the %u-byte message cap: %s", reply ? "reply" : "message",
                          (int) c->cred.pid, JSONLINE_MAX_MESSAGE, reply ? "answering with an error" : "dropped");
                if (!reply)
                        return;
                static_assert(JSONLINE_MAX_MESSAGE == 1u << 20, "the message below names the cap");
                json_t *err = json_pack("{s:b, s:{s:s, s:s}}", "ok", 0, "error", "code", "internal", "message",
                                        "the reply exceeds the daemon's 1 MiB message cap");
                int k = err ? jsonline_dump(err, JSONLINE_MAX_MESSAGE, &line, &len) : -ENOMEM;
                json_decref(err);
                if (k < 0)
                        return;
        }
        if (c->out_len - c->out_sent + len > JSONLINE_MAX_MESSAGE) {
                log_warning("client pid %d reads too slowly (%zu bytes queued): disconnecting", (int) c->cred.pid,
                            c->out_len - c->out_sent);
                client_disconnect(c);
                return;
        }
        if (c->out_sent > 0) {
                memmove(c->out, c->out + c->out_sent, c->out_len - c->out_sent);
                c->out_len -= c->out_sent;
                c->out_sent = 0;
        }
        char *p = realloc(c->out, c->out_len + len);
        if (!p) {
                client_disconnect(c);
                return;
        }
        c->out = p;
        memcpy(c->out + c->out_len, line, len);
        c->out_len += len;
        client_flush(c);
}

void client_reply(Client *c, json_t *resp) {
        bool was_deferred = c->deferred;

        if (!resp)
                resp = json_object();
        if (!json_object_get(resp, "ok"))
                (void) json_object_set_new(resp, "ok", json_true());
        client_queue(c, resp);
        json_decref(resp);
        if (was_deferred && c->fd >= 0) {
                c->deferred = false;
                client_touch(c);        /* it waited for this answer: its idle clock starts now */
                client_update_events(c);
                client_process(c);      /* requests that arrived meanwhile */
        }
}

void client_reply_error(Client *c, const char *code, const char *fmt, ...) {
        char msg[1024];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        /* Messages quote what clients sent; jansson refuses invalid UTF-8, and a reply that
         * cannot be built must never read as {"ok": true}. */
        jsonline_scrub_utf8(msg);
        json_t *reply = json_pack("{s:b, s:{s:s, s:s}}", "ok", 0, "error", "code", code, "message", msg);
        if (!reply)
                reply = json_pack("{s:b, s:{s:s, s:s}}", "ok", 0, "error", "code", "internal", "message",
                                  "the error could not be encoded");
        client_reply(c, reply);
}

void client_send_event(Client *c, json_t *ev) {
        client_queue(c, ev);
}

void client_subscribe(Client *c) {
        c->subscriber = true;
}

bool client_is_admin(const Client *c) {
        return c->admin;
}

uid_t client_uid(const Client *c) {
        return c->cred.uid;
}

pid_t client_pid(const Client *c) {
        return c->cred.pid;
}

void server_broadcast(Server *s, json_t *ev) {
        for (Client *c = s->clients, *next; c; c = next) {
                next = c->next;         /* a slow subscriber may be disconnected on the way */
                if (c->subscriber)
                        client_queue(c, ev);
        }
}

/* Handle every complete line held, unless a request is waiting for its answer. */
static void client_process(Client *c) {
        char *line;
        size_t len;

        c->ref++;                       /* the handler may disconnect it */
        while (c->fd >= 0 && !c->deferred && !c->closing && line_reader_next(&c->in, &line, &len) > 0) {
                json_t *req = NULL;
                TpError err = {};
                int fd = -1;

                if (c->n_fds > 0) {
                        fd = c->fds[0];
                        memmove(c->fds, c->fds + 1, (--c->n_fds) * sizeof(int));
                }
                if (jsonline_parse(line, len, &req, &err) < 0) {
                        safe_close(fd);
                        client_reply_error(c, "usage", "%s", tp_error_message(&err, -EBADMSG));
                        continue;
                }
                c->server->handler(c->server->userdata, c, req, fd);
                json_decref(req);
        }
        /* Descriptors that arrived with no request to take them. */
        if (c->fd >= 0 && !c->deferred && c->in.len == c->in.start)
                client_close_fds(c);
        client_unref(c);
}

static int on_client_io(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        Client *c = userdata;
        (void) s;

        if (revents & EPOLLOUT)
                client_flush(c);
        if (c->fd < 0 || !(revents & (EPOLLIN | EPOLLHUP | EPOLLERR)))
                return 0;
        if (c->closing) {
                char sink[16 << 10];
                ssize_t k = recv(fd, sink, sizeof(sink), MSG_DONTWAIT);
                if (k > 0) {
                        c->drained += (uint64_t) k;
                        client_touch(c);
                }
                if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR) || c->drained > (64u << 20))
                        client_disconnect(c);
                return 0;
        }
        if (c->deferred) {
                /* Not reading now; a hang-up still ends the connection. */
                if (revents & (EPOLLHUP | EPOLLERR))
                        client_disconnect(c);
                return 0;
        }

        char buf[16 << 10];
        int fds[JSONLINE_MAX_FDS];
        size_t nfds = 0;
        ssize_t k = jsonline_recv(fd, buf, sizeof(buf), fds, &nfds);
        for (size_t i = 0; i < nfds; i++) {
                if (c->n_fds < JSONLINE_MAX_FDS)
                        c->fds[c->n_fds++] = fds[i];
                else
                        safe_close(fds[i]);
        }
        if (k == -EAGAIN)
                return 0;
        if (k <= 0) {
                client_disconnect(c);
                return 0;
        }
        client_touch(c);                /* bytes keep coming: even half a line is not idle */
        if (line_reader_feed(&c->in, buf, (size_t) k) < 0) {
                client_reply_error(c, "too-large", "request line longer than %u bytes: closing the connection",
                                   JSONLINE_MAX_REQUEST);
                c->closing = true;
                client_close_fds(c);
                client_flush(c);
                return 0;
        }
        client_process(c);
        return 0;
}

/* One error line for a peer about to be closed: best effort, never blocking, never queued.
 * @message is ours (numbers and words, nothing to escape). */
static void send_last_word(int fd, const char *code, const char *message) {
        char line[512];
        int n = snprintf(line, sizeof(line), "{\"ok\": false, \"error\": {\"code\": \"%s\", \"message\": \"%s\"}}\n",
                         code, message);

        if (n > 0 && (size_t) n < sizeof(line))
                (void) send(fd, line, (size_t) n, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* Close the clients idle past their deadline; re-arm at the earliest deadline left. */
static int on_idle_timer(sd_event_source *es, uint64_t now, void *userdata) {
        Server *s = userdata;
        uint64_t next = UINT64_MAX, ms = s->idle_usec / 1000;
        char msg[64];

        if (ms % 1000 == 0)
                snprintf(msg, sizeof(msg), "idle for %" PRIu64 " s: closed", ms / 1000);
        else
                snprintf(msg, sizeof(msg), "idle for %" PRIu64 " ms: closed", ms);
        for (Client *c = s->clients, *n; c; c = n) {
                n = c->next;
                if (!client_may_idle(c))
                        continue;
                uint64_t deadline = c->active_usec + s->idle_usec;
                if (deadline > now) {
                        if (deadline < next)
                                next = deadline;
                        continue;
                }
                log_info("client pid %d uid %u %s", (int) c->cred.pid, (unsigned) c->cred.uid, msg);
                /* Not after too-large (our side is shut), nor after half a queued line. */
                if (!c->closing && c->out_len == c->out_sent)
                        send_last_word(c->fd, "timeout", msg);
                client_disconnect(c);
        }
        if (next != UINT64_MAX) {
                (void) sd_event_source_set_time(es, next);
                (void) sd_event_source_set_enabled(es, SD_EVENT_ONESHOT);
        }
        return 0;
}

static bool peer_in_group(int fd, gid_t gid, gid_t primary) {
        gid_t groups[SERVER_MAX_GROUPS];
        socklen_t len = sizeof(groups);

        if (primary == gid)
                return true;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0)
                return false;
        for (size_t i = 0; i < len / sizeof(gid_t); i++)
                if (groups[i] == gid)
                        return true;
        return false;
}

/*
 * The caps in taskpatchd-server.h, for a peer with @cred: false when it may connect, else
 * true with the busy message in @msg. A reader meets its own cap first, then the readers'
 * share; anyone, the total.
 */
static bool server_refuses(Server *s, const struct ucred *cred, bool admin, char *msg, size_t size) {
        static_assert(SERVER_ADMIN_RESERVE < SERVER_MAX_CLIENTS, "readers keep some share");
        static_assert(SERVER_MAX_CLIENTS_PER_UID <= SERVER_MAX_CLIENTS - SERVER_ADMIN_RESERVE,
                      "a uid's cap fits the readers' share");
        unsigned readers = 0, mine = 0;

        for (Client *c = s->clients; c && !admin; c = c->next)
                if (!c->admin) {
                        readers++;
                        mine += c->cred.uid == cred->uid;
                }
        if (!admin && mine >= SERVER_MAX_CLIENTS_PER_UID) {
                log_warning("uid %u (pid %d) holds %u read-only connections, the per-uid cap: refusing another",
                            (unsigned) cred->uid, (int) cred->pid, mine);
                snprintf(msg, size, "uid %u holds %u connections, the most a read-only client may: "
                         "close one and try again", (unsigned) cred->uid, mine);
                return true;
        }
        if (!admin && readers >= SERVER_MAX_CLIENTS - SERVER_ADMIN_RESERVE) {
                log_warning("read-only clients hold %u connections, all but the %u kept for admins: "
                            "refusing uid %u (pid %d)",
                            readers, SERVER_ADMIN_RESERVE, (unsigned) cred->uid, (int) cred->pid);
                snprintf(msg, size, "read-only clients hold %u connections, all but the %u the daemon keeps for "
                         "admins: try again later", readers, SERVER_ADMIN_RESERVE);
                return true;
        }
        if (s->n_clients >= SERVER_MAX_CLIENTS) {
                log_warning("%u clients connected: refusing another", s->n_clients);
                snprintf(msg, size, "the daemon serves %u clients at once: try again later", SERVER_MAX_CLIENTS);
                return true;
        }
        return false;
}

static int on_accept(sd_event_source *es, int fd, uint32_t revents, void *userdata) {
        Server *s = userdata;
        struct ucred cred;
        socklen_t len = sizeof(cred);
        char msg[256];
        (void) es;
        (void) revents;

        int cfd = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (cfd < 0) {
                if (errno != EAGAIN && errno != EINTR)
                        log_warning("accept: %s", strerror(errno));
                return 0;
        }
        /* The peer's ids as of its connect(2): who it is never changes for this connection. */
        if (getsockopt(cfd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
                log_warning("SO_PEERCRED: %s", strerror(errno));
                cred = (struct ucred) { .pid = 0, .uid = (uid_t) -1, .gid = (gid_t) -1 };
        }
        bool admin = cred.uid == 0 || cred.uid == geteuid() ||
                     (s->have_admin_gid && peer_in_group(cfd, s->admin_gid, cred.gid));
        if (server_refuses(s, &cred, admin, msg, sizeof(msg))) {
                /* One line that says why, best effort on a fresh socket's empty buffer; then close. */
                send_last_word(cfd, "busy", msg);
                safe_close(cfd);
                return 0;
        }
        Client *c = calloc(1, sizeof(*c));
        if (!c) {
                safe_close(cfd);
                return 0;
        }
        *c = (Client) { .ref = 1, .server = s, .fd = cfd, .in = LINE_READER_INIT(JSONLINE_MAX_REQUEST),
                        .cred = cred, .admin = admin };
        if (sd_event_add_io(s->event, &c->io, cfd, EPOLLIN, on_client_io, c) < 0) {
                safe_close(cfd);
                free(c);
                return 0;
        }
        (void) sd_event_source_set_description(c->io, "client");
        c->next = s->clients;
        if (s->clients)
                s->clients->prev = c;
        s->clients = c;
        s->n_clients++;
        client_touch(c);
        log_debug("client pid %d uid %u connected%s", (int) c->cred.pid, (unsigned) c->cred.uid,
                  c->admin ? " (admin)" : "");
        return 0;
}

static int bind_socket(Server *s, const char *path, TpError *err) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        _cleanup_free_ char *dir = strdup(path);
        struct stat st;

        if (!dir)
                return -ENOMEM;
        if (strlen(path) >= sizeof(sa.sun_path))
                return tp_error(err, -ENAMETOOLONG, "socket path %s is too long", path);
        memcpy(sa.sun_path, path, strlen(path));
        char *slash = strrchr(dir, '/');
        if (slash && slash != dir) {
                *slash = 0;
                if (mkdir(dir, 0755) < 0 && errno != EEXIST)
                        return tp_error(err, negative_errno(), "%s: %s", dir, strerror(errno));
        }
        s->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (s->fd < 0)
                return tp_error(err, negative_errno(), "socket: %s", strerror(errno));
        /* A socket file left by a daemon that died: remove it, unless someone still answers there. */
        if (lstat(path, &st) == 0) {
                if (!S_ISSOCK(st.st_mode))
                        return tp_error(err, -EEXIST, "%s exists and is not a socket", path);
                _cleanup_close_ int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
                if (probe < 0)
                        return tp_error(err, negative_errno(), "socket: %s", strerror(errno));
                if (connect(probe, (struct sockaddr *) &sa, sizeof(sa)) == 0 || errno != ECONNREFUSED)
                        return tp_error(err, -EADDRINUSE, "%s: another taskpatchd is listening there", path);
                (void) unlink(path);
        }
        mode_t old = umask(0117);       /* 0660 from the start: no window where others may connect */
        int r = bind(s->fd, (struct sockaddr *) &sa, sizeof(sa));
        umask(old);
        if (r < 0)
                return tp_error(err, negative_errno(), "bind %s: %s", path, strerror(errno));
        s->bound = true;
        if (listen(s->fd, SOMAXCONN) < 0)
                return tp_error(err, negative_errno(), "listen %s: %s", path, strerror(errno));
        return 0;
}

/* SERVER_IDLE_TIMEOUT_MS, or the test hook TASKPATCHD_IDLE_TIMEOUT_MS (taskpatchd-server.h). */
static uint64_t idle_timeout_usec(void) {
        const char *e = getenv("TASKPATCHD_IDLE_TIMEOUT_MS");
        uint64_t ms;

        if (!e)
                return (uint64_t) SERVER_IDLE_TIMEOUT_MS * 1000;
        if (parse_u64(e, &ms) < 0 || ms == 0 || ms > SERVER_IDLE_TIMEOUT_MAX_MS) {
                log_warning("TASKPATCHD_IDLE_TIMEOUT_MS=%s is not 1 to %u milliseconds: ignored, "
                            "idle clients are closed after %u ms",
                            e, SERVER_IDLE_TIMEOUT_MAX_MS, SERVER_IDLE_TIMEOUT_MS);
                return (uint64_t) SERVER_IDLE_TIMEOUT_MS * 1000;
        }
        log_info("TASKPATCHD_IDLE_TIMEOUT_MS=%" PRIu64 ": idle clients are closed after %" PRIu64 " ms", ms, ms);
        return ms * 1000;
}

int server_new(sd_event *e, const char *path, const char *admin_group, RequestHandler handler, void *userdata,
               Server **ret, TpError *err) {
        _cleanup_(server_freep) Server *s = calloc(1, sizeof(*s));
        int r, n;

        if (!s)
                return -ENOMEM;
        s->fd = -1;
        s->event = sd_event_ref(e);
        s->handler = handler;
        s->userdata = userdata;
        s->path = strdup(path);
        if (!s->path)
                return -ENOMEM;
        s->idle_usec = idle_timeout_usec();
        if (admin_group) {
                struct group *g = getgrnam(admin_group);
                if (g) {
                        s->admin_gid = g->gr_gid;
                        s->have_admin_gid = true;
                } else
                        log_warning("admin group '%s' does not exist: only root and uid %u may change state",
                                    admin_group, (unsigned) geteuid());
        }

        n = sd_listen_fds(true);
        if (n < 0)
                return tp_error(err, n, "LISTEN_FDS: %s", strerror(-n));
        if (n > 1)
                return tp_error(err, -EINVAL, "systemd passed %d sockets, expected one", n);
        if (n == 1) {
                s->fd = SD_LISTEN_FDS_START;
                if (sd_is_socket_unix(s->fd, SOCK_STREAM, 1, NULL, 0) <= 0)
                        return tp_error(err, -EINVAL, "the socket systemd passed is not a listening Unix stream socket");
                log_info("listening on the socket systemd passed");
        } else {
                if ((r = bind_socket(s, path, err)) < 0)
                        return r;
                log_info("listening on %s", path);
        }
        r = sd_event_add_io(e, &s->io, s->fd, EPOLLIN, on_accept, s);
        if (r < 0)
                return tp_error(err, r, "sd_event_add_io: %s", strerror(-r));
        (void) sd_event_source_set_description(s->io, "listen");
        /* Off until a client may go idle (client_touch() arms it); coalesced within a tenth of the timeout. */
        r = sd_event_add_time(e, &s->idle_timer, CLOCK_BOOTTIME, 0, s->idle_usec / 10, on_idle_timer, s);
        if (r < 0)
                return tp_error(err, r, "sd_event_add_time: %s", strerror(-r));
        (void) sd_event_source_set_description(s->idle_timer, "client-idle");
        (void) sd_event_source_set_enabled(s->idle_timer, SD_EVENT_OFF);
        *ret = TAKE_PTR(s);
        return 0;
}

Server *server_free(Server *s) {
        if (!s)
                return NULL;
        while (s->clients)
                client_disconnect(s->clients);
        sd_event_source_disable_unref(s->idle_timer);
        sd_event_source_disable_unref(s->io);
        if (s->bound)
                (void) unlink(s->path);
        safe_close(s->fd);
        sd_event_unref(s->event);
        free(s->path);
        free(s);
        return NULL;
}
