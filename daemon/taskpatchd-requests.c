/* SPDX-License-Identifier: MIT */
/* The socket requests (packaging/docs/protocol.md): checked, then handed to the manager. */

#include <inttypes.h>
#include <string.h>

#include "clock.h"
#include "jsonline.h"
#include "taskpatchd-log.h"
#include "taskpatchd-manager.h"
#include "taskpatchd-requests.h"
#include "yaml-doc.h"

static const Command commands[] = {
        { "status", ACCESS_READ, { NULL } },
        { "list", ACCESS_READ, { NULL } },
        { "subscribe", ACCESS_READ, { NULL } },
        { "provision", ACCESS_ADMIN, { "sha256", "wait", NULL } },
        { "install", ACCESS_ADMIN, { "allow_downgrade", "switch", "wait", NULL } },
        { "switch", ACCESS_ADMIN, { "task", "version", "wait", NULL } },
        { "mark-good", ACCESS_ADMIN, { NULL } },
        { "rollback", ACCESS_ADMIN, { "allow_downgrade", "wait", NULL } },
        { "trust-update", ACCESS_ADMIN, { NULL } },     /* the device's, not a model's: Models handles it */
};

/*
 * How many bytes of @s (valid UTF-8, as jansson guarantees) to quote: at most
 * @max, never half a character -- a reply holding invalid UTF-8 cannot be
 * encoded, and the client would get no error at all.
 */
static int quote_len(const char *s, size_t max) {
        size_t n = strnlen(s, max + 1);

        if (n > max) {
                n = max;
                while (n > 0 && ((unsigned char) s[n] & 0xc0) == 0x80)
                        n--;
        }
        return (int) n;
}

#define QUOTE_MAX 64

/* Unknown keys and wrong types are refused: a typo must never be silently ignored. */
static int check_keys(const Command *cmd, json_t *req, TpError *err) {
        const char *key;
        json_t *v;

        json_object_foreach(req, key, v) {
                bool known = strcmp(key, "cmd") == 0 || strcmp(key, "model") == 0;
                for (size_t i = 0; !known && cmd->keys[i]; i++)
                        known = strcmp(key, cmd->keys[i]) == 0;
                if (!known)
                        return tp_error(err, -EINVAL, "%s: unknown field '%.*s'", cmd->name,
                                        quote_len(key, QUOTE_MAX), key);
                bool ok = true;
                if (strcmp(key, "wait") == 0 || strcmp(key, "switch") == 0 || strcmp(key, "allow_downgrade") == 0)
                        ok = json_is_boolean(v);
                else if (strcmp(key, "version") == 0)
                        ok = json_is_integer(v) && json_integer_value(v) > 0;
                else if (strcmp(key, "sha256") == 0 || strcmp(key, "task") == 0 || strcmp(key, "model") == 0)
                        ok = json_is_string(v) || (strcmp(key, "task") == 0 && json_is_null(v));
                if (!ok)
                        return tp_error(err, -EINVAL, "%s: field '%s' has the wrong type", cmd->name, key);
        }
        return 0;
}

int request_check(json_t *req, const Command **ret_cmd, TpError *err) {
        const char *name = json_string_value(json_object_get(req, "cmd"));
        int r;

        if (!name)
                return tp_error(err, -EINVAL, "a request needs a string field 'cmd'");
        for (size_t i = 0; i < ELEMENTSOF(commands); i++) {
                const Command *cmd = &commands[i];
                if (strcmp(name, cmd->name) != 0)
                        continue;
                r = check_keys(cmd, req, err);
                if (r < 0)
                        return r;
                *ret_cmd = cmd;
                return 0;
        }
        return tp_error(err, -EINVAL, "unknown command '%.*s'", quote_len(name, QUOTE_MAX), name);
}

static json_t *slot_json(Manager *m, SlotId s) {
        const Seal *seal = &m->seals[s];
        /* "other-base": sealed for another base (the old one after a base change, until re-provisioned). */
        bool other_family = seal->size && memcmp(seal->base_sha256, m->ps.base.sha256, SHA256_DIGEST_SIZE) != 0;
        const char *state = m->sealed[s] ? "clean" : seal->dirty ? "dirty" : other_family ? "other-base" : "missing";
        json_t *o = json_pack("{s:s, s:b, s:o, s:I, s:o, s:b, s:I}", "state", state, "active",
                              m->ps.provisioned && m->active == s, "task",
                              seal->task[0] ? json_string(seal->task) : json_null(), "version",
                              (json_int_t) seal->version, "sha256", m->sealed[s] ? json_sha256(seal->sha256) : json_null(),
                              "relocated", m->sealed[s] && seal->relocated, "size",
                              (json_int_t) (m->sealed[s] ? seal->size : 0));
        if (m->ps.base.directory)
                json_object_set_new(o, "files", json_integer(m->sealed[s] ? (json_int_t) seal->n_files : 0));
        return o;
}

static json_t *last_event_json(const LastEvent *l) {
        char t[21];

        if (!l->kind[0])
                return json_null();
        format_time_utc(l->time, t);
        json_t *o = json_pack("{s:s, s:s, s:s}", "kind", l->kind, "time", t, "reason", l->reason);
        if (l->code[0])
                json_object_set_new(o, "code", json_string(l->code));
        return o;
}

/* A directory base's files, each with its path and size: what a slot directory holds. */
static json_t *base_files_json(Manager *m) {
        const FileSet *set = &m->base_files.set;
        json_t *a = json_array();

        for (size_t i = 0; a && i < set->n_files; i++)
                json_array_append_new(a, json_pack("{s:s, s:I}", "path", set->files[i].path, "size",
                                                   (json_int_t) set->files[i].size));
        return a;
}

/* The installed bundles a revoked signer made: [{task, version, why}]. */
static json_t *revoked_json(const Manager *m) {
        json_t *a = json_array();

        for (size_t i = 0; i < m->store.n_revoked; i++)
                json_array_append_new(a, json_pack("{s:s, s:I, s:s}", "task", m->store.revoked[i].task, "version",
                                                   (json_int_t) m->store.revoked[i].version, "why",
                                                   m->store.revoked[i].why));
        return a;
}

json_t *manager_status(Manager *m) {
        json_t *o = json_pack("{s:s, s:s, s:s, s:s}", "model", m->model, "state",
                              manager_state_to_string(manager_state(m)), "model_path", m->config->model_path, "version",
                              TASKPATCH_VERSION);
        json_t *tasks = json_array(), *slots = json_object();

        if (m->ps.provisioned) {
                json_t *active = json_pack("{s:s}", "slot", slot_id_to_string(m->active));
                const Seal *a = &m->seals[m->active];
                json_object_set_new(active, "task", a->task[0] ? json_string(a->task) : json_null());
                json_object_set_new(active, "version", json_integer((json_int_t) a->version));
                json_object_set_new(active, "sha256", json_sha256(a->sha256));
                json_object_set_new(o, "active", active);
                for (SlotId s = 0; s < _SLOT_ID_MAX; s++)
                        json_object_set_new(slots, slot_id_to_string(s), slot_json(m, s));
                json_object_set_new(o, "base",
                                    json_pack("{s:o, s:I, s:s}", "sha256", json_sha256(m->ps.base.sha256), "size",
                                              (json_int_t) m->ps.base.size, "kind",
                                              artifact_kind_to_string(m->ps.base.kind)));
                if (m->ps.base.directory)
                        json_object_set_new(json_object_get(o, "base"), "files", base_files_json(m));
        } else {
                json_object_set_new(o, "active", json_null());
                json_object_set_new(o, "base", json_null());
        }
        json_object_set_new(o, "slots", slots);
        for (size_t i = 0; i < m->store.n; i++) {
                json_t *t = json_pack("{s:s, s:I}", "task", m->store.tasks[i].task, "version",
                                      (json_int_t) m->store.tasks[i].version);
                if (m->store.tasks[i].role == MANIFEST_ROLE_BASE)
                        json_object_set_new(t, "role", json_string("base"));
                json_array_append_new(tasks, t);
        }
        json_object_set_new(o, "tasks", tasks);
        json_object_set_new(o, "revoked", revoked_json(m));
        json_object_set_new(o, "trust", trust_status_json(m));
        json_object_set_new(o, "reprovision", json_boolean(m->ps.provisioned && m->ps.reprovision));

        if (manager_on_trial(m)) {
                char started[21], deadline[21];
                format_time_utc(m->ps.trial.started, started);
                format_time_utc(m->ps.trial.started + (int64_t) m->config->trial.timeout, deadline);
                json_object_set_new(o, "trial",
                                    json_pack("{s:o, s:I, s:s, s:s, s:s, s:I, s:s}", "task",
                                              m->ps.trial.task[0] ? json_string(m->ps.trial.task) : json_null(),
                                              "version", (json_int_t) m->ps.trial.version, "slot",
                                              slot_id_to_string(m->ps.trial.slot), "started", started, "deadline",
                                              deadline, "timeout", (json_int_t) m->config->trial.timeout,
                                              "transaction", m->ps.trial.transaction));
                if (m->ps.trial.new_base)
                        json_object_set_new(json_object_get(o, "trial"), "new_base",
                                            json_pack("{s:o, s:I, s:s}", "sha256", json_sha256(m->ps.trial.base.sha256),
                                                      "size", (json_int_t) m->ps.trial.base.size, "kind",
                                                      artifact_kind_to_string(m->ps.trial.base.kind)));
        } else
                json_object_set_new(o, "trial", json_null());
        if (m->op)
                json_object_set_new(o, "operation",
                                    json_pack("{s:s, s:s, s:s, s:I, s:I}", "cmd", m->op->cmd, "transaction",
                                              m->op->transaction, "phase", m->op->phase ? m->op->phase : "",
                                              "done", (json_int_t) m->op->done, "total", (json_int_t) m->op->total));
        else
                json_object_set_new(o, "operation", json_null());
        json_object_set_new(o, "counters",
                            json_pack("{s:I, s:I, s:I, s:I, s:I}", "switches", (json_int_t) m->counters.switches,
                                      "slot_bytes_written", (json_int_t) m->counters.slot_bytes, "undo_bytes_written",
                                      (json_int_t) m->counters.undo_bytes, "state_bytes_written",
                                      (json_int_t) m->counters.state_bytes, "last_switch_slot_bytes",
                                      (json_int_t) m->counters.last_switch_slot_bytes));
        json_object_set_new(o, "last_event", last_event_json(&m->last));
        if (m->last.kind[0] && m->last.failure)
                json_object_set_new(o, "last_error", json_pack("{s:s, s:s}", "code", m->last.code[0] ? m->last.code : "io",
                                                               "message", m->last.reason));
        else
                json_object_set_new(o, "last_error", json_null());
        if (m->config->disk_budget > 0)
                json_object_set_new(o, "disk", json_pack("{s:I, s:I}", "used", (json_int_t) manager_disk_usage(m),
                                                         "budget", (json_int_t) m->config->disk_budget));
        json_object_set_new(o, "verify", json_string(verify_mode_to_string(m->config->verify)));
        json_object_set_new(o, "writable", json_boolean(m->write_error == 0));
        json_object_set_new(o, "channel", m->fetch ? fetcher_status(m->fetch) : json_null());
        json_object_set_new(o, "hawkbit", m->hawkbit ? hawkbit_status(m->hawkbit) : json_null());
        json_object_set_new(o, "notify", m->notifier ? notifier_status(m->notifier) : json_null());
        return o;
}

json_t *manager_list(Manager *m) {
        json_t *a = json_array();
        for (size_t i = 0; i < m->store.n; i++) {
                const InstalledTask *t = &m->store.tasks[i];
                char created[21];
                json_t *slot = json_null();
                format_time_utc(t->created, created);
                for (SlotId s = 0; s < _SLOT_ID_MAX; s++)
                        if (m->sealed[s] && strcmp(m->seals[s].task, t->task) == 0 && m->seals[s].version == t->version)
                                slot = json_string(slot_id_to_string(s));
                /* A base bundle's slot: the one sealed as a base with its target's digest (the new base on trial). */
                for (SlotId s = 0; s < _SLOT_ID_MAX && t->role == MANIFEST_ROLE_BASE; s++)
                        if (m->sealed[s] && !m->seals[s].task[0] &&
                            memcmp(m->seals[s].sha256, t->target_sha256, SHA256_DIGEST_SIZE) == 0)
                                slot = json_string(slot_id_to_string(s));
                json_array_append_new(a, json_pack("{s:s, s:s, s:I, s:o, s:I, s:I, s:s, s:s, s:b, s:o}", "task",
                                                   t->task, "role", manifest_role_to_string(t->role),
                                                   "version", (json_int_t) t->version, "sha256",
                                                   json_sha256(t->target_sha256), "bundle_size", (json_int_t) t->bundle_size,
                                                   "span_bytes", (json_int_t) t->span_bytes, "created", created,
                                                   "signer", t->signer, "active",
                                                   m->ps.provisioned && json_is_string(slot) &&
                                                           slot_id_from_string(json_string_value(slot)) == m->active,
                                                   "slot", slot));
        }
        return json_pack("{s:o, s:o}", "tasks", a, "revoked", revoked_json(m));
}

static bool refuse_busy(Manager *m, Client *c, bool trial_too) {
        const Manager *peer;

        (void) manager_stop_background(m);
        if (m->op) {
                client_reply_error(c, "busy", "%s is running (transaction %s)", m->op->cmd, m->op->transaction);
                return true;
        }
        if ((peer = manager_peer_busy(m))) {
                client_reply_error(c, "busy", "model %s: %s is running (transaction %s): operations run one at a time "
                                   "across models", peer->model, peer->op->cmd, peer->op->transaction);
                return true;
        }
        if (trial_too && manager_on_trial(m)) {
                client_reply_error(c, "busy", "%s v%" PRIu64 " is on trial: 'tpctl mark-good' or 'tpctl rollback' first",
                                   m->ps.trial.task[0] ? m->ps.trial.task : "the base", m->ps.trial.version);
                return true;
        }
        return false;
}

static void handle_provision(Manager *m, Client *c, json_t *req, int fd, bool wait) {
        const char *hexs = json_string_value(json_object_get(req, "sha256"));
        uint8_t want[SHA256_DIGEST_SIZE];
        Operation *op = NULL;
        TpError err = {};
        int r;

        if (fd < 0) {
                client_reply_error(c, "usage", "provision: pass the model's file descriptor (SCM_RIGHTS)");
                return;
        }
        if (hexs && parse_sha256_hex(hexs, want) < 0) {
                safe_close(fd);
                client_reply_error(c, "usage", "provision: 'sha256' is not 64 hex digits");
                return;
        }
        if (refuse_busy(m, c, true)) {
                safe_close(fd);
                return;
        }
        r = provision_new(m, fd, hexs ? want : NULL, &op, &err);
        if (r < 0) {
                client_reply_error(c, r == -EBADMSG || r == -EINVAL ? "refused" : r == -ENOSPC ? "no-space" : "io",
                                   "%s", tp_error_message(&err, r));
                return;
        }
        manager_start(m, op, c, wait);
}

static void handle_install(Manager *m, Client *c, json_t *req, int fd, bool wait) {
        InstallRequest ir = { .allow_downgrade = json_is_true(json_object_get(req, "allow_downgrade")),
                              .then_switch = json_is_true(json_object_get(req, "switch")),
                              .origin = ORIGIN_SOCKET };
        const char *code = NULL;
        TpError err = {};
        int r;

        if (fd < 0) {
                client_reply_error(c, "usage", "install: pass the bundle's file descriptor (SCM_RIGHTS)");
                return;
        }
        if (refuse_busy(m, c, ir.then_switch)) {
                safe_close(fd);
                return;
        }
        /* The same submission as the update sources', with the client to answer. */
        r = manager_submit_install(m, fd, &ir, c, wait, NULL, &code, &err);
        if (r < 0)
                client_reply_error(c, code ? code : "io", "%s", tp_error_message(&err, r));
}

static void handle_switch(Manager *m, Client *c, json_t *req, bool wait) {
        json_t *task = json_object_get(req, "task"), *version = json_object_get(req, "version");
        Operation *op = NULL;
        const char *code = NULL;
        TpError err = {};
        int r;

        if (!task) {
                client_reply_error(c, "usage", "switch: 'task' is required (null for the base)");
                return;
        }
        if (refuse_busy(m, c, true))
                return;
        r = switch_new(m, json_string_value(task), version ? (uint64_t) json_integer_value(version) : 0, &op, &code,
                       &err);
        if (r < 0) {
                client_reply_error(c, code ? code : "io", "%s", tp_error_message(&err, r));
                return;
        }
        if (!op) {
                json_t *st = manager_status(m);
                client_reply(c, json_pack("{s:s, s:O, s:s}", "state", "committed", "active",
                                          json_object_get(st, "active"), "note", "already active"));
                json_decref(st);
                return;
        }
        manager_start(m, op, c, wait);
}

/*
 * A subscription starts with a snapshot of what is true now, so that a
 * service that (re)connects never has to guess what it missed; then what
 * happened at start-up before anyone could listen (a rollback), once.
 */
void manager_send_snapshot(Manager *m, Client *c) {
        json_t *st = manager_status(m);
        json_t *ev = json_pack("{s:s, s:O, s:O, s:O, s:O, s:O, s:O}", "event", "snapshot", "model",
                               json_object_get(st, "model"), "state", json_object_get(st, "state"), "model_path",
                               json_object_get(st, "model_path"), "active", json_object_get(st, "active"), "trial",
                               json_object_get(st, "trial"), "last_event", json_object_get(st, "last_event"));
        char t[21];
        size_t i;

        json_decref(st);
        format_time_utc((int64_t) clock_wall(), t);
        json_object_set_new(ev, "time", json_string(t));
        client_send_event(c, ev);
        json_decref(ev);
        for (i = 0; i < json_array_size(m->startup_events); i++)
                client_send_event(c, json_array_get(m->startup_events, i));
        json_decref(m->startup_events);
        m->startup_events = NULL;
}

static void handle(Manager *m, Client *c, const Command *cmd, json_t *req, int fd) {
        bool wait = json_is_true(json_object_get(req, "wait"));

        if (strcmp(cmd->name, "provision") == 0)
                handle_provision(m, c, req, TAKE_FD(fd), wait);
        else if (strcmp(cmd->name, "install") == 0)
                handle_install(m, c, req, TAKE_FD(fd), wait);
        else if (strcmp(cmd->name, "switch") == 0)
                handle_switch(m, c, req, wait);
        else if (strcmp(cmd->name, "status") == 0)
                client_reply(c, manager_status(m));
        else if (strcmp(cmd->name, "list") == 0)
                client_reply(c, manager_list(m));
        else if (strcmp(cmd->name, "subscribe") == 0) {
                client_subscribe(c);
                client_reply(c, NULL);
                manager_send_snapshot(m, c);
        }
        else if (strcmp(cmd->name, "mark-good") == 0)
                (void) manager_mark_good(m, c);
        else if (strcmp(cmd->name, "rollback") == 0)
                manager_rollback(m, c, json_is_true(json_object_get(req, "allow_downgrade")), wait);
        safe_close(fd);
}

void manager_handle_request(void *userdata, Client *c, json_t *req, int fd) {
        Manager *m = userdata;
        const Command *cmd;
        TpError err = {};

        if (request_check(req, &cmd, &err) < 0) {
                safe_close(fd);
                client_reply_error(c, "usage", "%s", err.message);
                return;
        }
        if (cmd->access == ACCESS_ADMIN && !client_is_admin(c)) {
                log_notice("refused %s from uid %u: not root or in the admin group", cmd->name,
                           (unsigned) client_uid(c));
                safe_close(fd);
                client_reply_error(c, "permission", "%s changes state: only root and members of '%s' may do that",
                                   cmd->name, m->config->admin_group ? m->config->admin_group : "(no admin group)");
                return;
        }
        if (cmd->access == ACCESS_ADMIN && m->write_error) {
                safe_close(fd);
                manager_reply_unwritable(m, c, cmd->name);
                return;
        }
        if (cmd->access == ACCESS_ADMIN && !m->ps.provisioned && strcmp(cmd->name, "provision") != 0) {
                safe_close(fd);
                client_reply_error(c, "not-found", "nothing is provisioned yet: 'tpctl provision MODEL' first");
                return;
        }
        handle(m, c, cmd, req, fd);
}
