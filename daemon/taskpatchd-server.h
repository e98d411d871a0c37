/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The socket server (packaging/docs/protocol.md): accepts connections on
 * the listening socket (socket-activated or bound here), splits requests
 * into JSON lines with a cap, reads peer credentials, caps connections
 * (below) and closes idle ones, collects descriptors passed with
 * SCM_RIGHTS, and queues responses and events per client with a cap -- a
 * client that does not read is disconnected, never waited for.
 * What a request means is the manager's business (the handler).
 */

#include <jansson.h>
#include <stdbool.h>
#include <sys/types.h>
#include <systemd/sd-event.h>

#include "error.h"

/*
 * Connection caps (DESIGN.md invariant 9: one client, or one group of readers, never locks
 * out an admin). Admins and readers are as client_is_admin() says, decided once, at accept,
 * from SO_PEERCRED/SO_PEERGROUPS. A peer over a cap gets one line,
 * {"ok": false, "error": {"code": "busy", "message": ...}} naming that cap, and is closed.
 *
 * SERVER_MAX_CLIENTS: connections in all; admins are held to this cap only.
 * SERVER_ADMIN_RESERVE: connections readers together can never take, so admins (tpctl as
 *   root, mark-good during a trial) always find this many, whatever readers hold.
 * SERVER_MAX_CLIENTS_PER_UID: connections one reader uid may hold. A reader needs one
 *   subscription per watching process plus a few short requests; 16 leaves room for a
 *   service with several workers, and it takes 7 reader uids together to fill the readers'
 *   share (112), so one misbehaving reader cannot shut the others out either.
 */
#define SERVER_MAX_CLIENTS 128u
#define SERVER_ADMIN_RESERVE 16u
#define SERVER_MAX_CLIENTS_PER_UID 16u

/*
 * A connection that is not subscribed and has no request in progress (client_defer()) is
 * closed once no byte has moved either way for this long: a half-sent line whose bytes keep
 * coming is not idle, and the clock restarts when a deferred answer goes out. Before the
 * close the client gets {"ok": false, "error": {"code": "timeout", "message": "idle for
 * 30 s: closed"}} when nothing else is queued for it. Requests take milliseconds and tpctl
 * sends its request right after connecting, so only a connection held open for nothing
 * meets this; without it idle readers could still hold their whole share for ever.
 *
 * Test hook: TASKPATCHD_IDLE_TIMEOUT_MS=<milliseconds> (1 to 86400000), read by server_new(),
 * replaces it, so tests need not wait 30 s; another value is ignored with a warning.
 */
#define SERVER_IDLE_TIMEOUT_MS 30000u

typedef struct Server Server;
typedef struct Client Client;

/*
 * One request: @req is a JSON object (borrowed), @fd the first descriptor
 * the client passed and no earlier request took, or -1; the handler owns
 * @fd. The handler must answer with client_reply*() now, or call
 * client_defer() and answer later (the client's next requests wait).
 */
typedef void (*RequestHandler)(void *userdata, Client *c, json_t *req, int fd);

/*
 * Listen on the socket systemd passed (LISTEN_FDS), else bind @path
 * (creating its directory, mode 0660). Admins: root, our own user, and
 * members of @admin_group (NULL or unknown: nobody else). The idle timeout
 * is SERVER_IDLE_TIMEOUT_MS, or TASKPATCHD_IDLE_TIMEOUT_MS when set (above).
 */
_warn_unused_result_ int server_new(sd_event *e, const char *path, const char *admin_group, RequestHandler handler,
                                    void *userdata, Server **ret, TpError *err);
Server *server_free(Server *s);
DEFINE_POINTER_CLEANUP(Server, server_free)

/* Queue @ev (an event object, borrowed) for every subscriber. */
void server_broadcast(Server *s, json_t *ev);

bool client_is_admin(const Client *c);
uid_t client_uid(const Client *c);
pid_t client_pid(const Client *c);

/* Answer the current request: @resp gets "ok": true added; the reference is stolen. */
void client_reply(Client *c, json_t *resp);
/* Answer with {"ok":false,"error":{"code":...,"message":...}}. */
_printf_(3, 4) void client_reply_error(Client *c, const char *code, const char *fmt, ...);
/* The answer comes later; keep the client (and its reference) until client_reply*(). */
Client *client_defer(Client *c);
/* Drop a reference taken by client_defer() (after replying, or when giving up). */
Client *client_unref(Client *c);
/* Send an event line (borrowed) to this client only. */
void client_send_event(Client *c, json_t *ev);
/* From now on the client receives every broadcast. */
void client_subscribe(Client *c);
