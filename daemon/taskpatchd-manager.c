/* SPDX-License-Identifier: MIT */

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <libgen.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <systemd/sd-daemon.h>
#include <systemd/sd-id128.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "fileio.h"
#include "taskpatchd-log.h"
#include "taskpatchd-manager.h"
#include "yaml-doc.h"

static void now_utc(char buf[21]) {
        format_time_utc((int64_t) clock_wall(), buf);
}

/* ---- state, events ---- */

/* One model's state in a line: "idle: json v3 active in slot a". */
static void status_text(const Manager *m, char *buf, size_t size) {
        const Seal *a = &m->seals[m->active];
        ManagerState st = manager_state(m);

        if (manager_state_on_trial(st))
                snprintf(buf, size, "%s v%" PRIu64 " on trial in slot %s%s",
                         m->ps.trial.task[0] ? m->ps.trial.task : "base", m->ps.trial.version,
                         slot_id_to_string(m->ps.trial.slot), st == STATE_TRIAL_INSTALLING ? "; installing" : "");
        else if (st == STATE_IDLE && m->ps.provisioned)
                snprintf(buf, size, "idle: %s v%" PRIu64 " active in slot %s", a->task[0] ? a->task : "base",
                         a->version, slot_id_to_string(m->active));
        else
                snprintf(buf, size, "%s", manager_state_to_string(st));
}

void manager_send_status(Manager *m) {
        char line[CONFIG_MAX_MODELS * 160] = "", one[160];
        size_t o = 0;

        if (m->n_peers <= 1) {
                status_text(m, one, sizeof(one));
                (void) sd_notifyf(false, "STATUS=%s", one);
                return;
        }
        /* A device of several models: every model's, "default: idle: ...; detector: ...". */
        for (size_t i = 0; i < m->n_peers && o < sizeof(line); i++) {
                status_text(m->peers[i], one, sizeof(one));
                o += (size_t) snprintf(line + o, sizeof(line) - o, "%s%s: %s", i ? "; " : "", m->peers[i]->model, one);
        }
        (void) sd_notifyf(false, "STATUS=%s", line);
}

static void on_state_changed(void *userdata, ManagerState from, ManagerEvent e, ManagerState to) {
        Manager *m = userdata;

        if (from != to)
                mlog_info(m, "state: %s -> %s (%s)", manager_state_to_string(from), manager_state_to_string(to),
                          manager_event_to_string(e));
        /* "On trial" is the state's; the persistent trial record follows it, never the other way round. */
        if (manager_state_on_trial(to) != m->ps.trial.on) {
                mlog_error(m, "state %s, but the state file's trial record says %s: a bug", manager_state_to_string(to),
                           m->ps.trial.on ? "on trial" : "no trial");
#ifndef NDEBUG
                abort();
#endif
        }
        manager_send_status(m);
        if (to == STATE_IDLE)
                manager_sources_idle(m);        /* what waited for the manager (the spool's bundles) may go now */
}

static const MachineHost machine_host = { .changed = on_state_changed };

void manager_init_state(Manager *m, ManagerState s) {
        machine_init(&m->machine, s, &machine_host, m);
        manager_send_status(m);
}

int manager_fire(Manager *m, ManagerEvent e) {
        return machine_fire(&m->machine, e);
}

void manager_emit(Manager *m, const char *transaction, json_t *ev) {
        char t[21];

        if (!ev)
                return;
        now_utc(t);
        json_object_set_new(ev, "time", json_string(t));
        json_object_set_new(ev, "model", json_string(m->model));
        if (transaction && transaction[0])
                json_object_set_new(ev, "transaction", json_string(transaction));
        if (m->server)
                server_broadcast(m->server, ev);
        if (m->op && m->op->client && transaction && strcmp(transaction, m->op->transaction) == 0)
                client_send_event(m->op->client, ev);
        else if (m->trial_client && transaction && strcmp(transaction, m->ps.trial.transaction) == 0)
                client_send_event(m->trial_client, ev);
        json_decref(ev);
}

void manager_progress(Manager *m, Operation *op, const char *event_name) {
        uint64_t now = 0;

        (void) sd_event_now(m->event, CLOCK_MONOTONIC, &now);
        if (op->done < op->total && now - op->last_event_usec < 200000)
                return;
        op->last_event_usec = now;
        manager_emit(m, op->transaction,
                     json_pack("{s:s, s:o, s:I, s:s, s:s, s:I, s:I}", "event", event_name, "task",
                               op->task[0] ? json_string(op->task) : json_null(), "version", (json_int_t) op->version,
                               "slot", slot_id_to_string(slot_other(m->active)), "phase", op->phase, "done",
                               (json_int_t) op->done, "total", (json_int_t) op->total));
}

void manager_record(Manager *m, const char *kind, const char *code, bool failure, const char *reason) {
        LastEvent *l = &m->last;

        snprintf(l->kind, sizeof(l->kind), "%s", kind);
        snprintf(l->code, sizeof(l->code), "%s", code ? code : "");
        snprintf(l->reason, sizeof(l->reason), "%s", reason ? reason : "");
        l->time = (int64_t) clock_wall();
        l->failure = failure;
}

void manager_report_error(Manager *m, const char *transaction, const char *code, const char *msg, const char *cmd) {
        manager_record(m, "error", code, true, msg);
        manager_emit(m, transaction, json_pack("{s:s, s:s, s:s, s:s}", "event", "error", "code", code, "message", msg,
                                               "cmd", cmd));
}

/* The floor first: once it is raised in floor.json, no loss of state.json can lower it. */
static int save_floor(Manager *m, TpError *err) {
        _cleanup_free_ char *text = floor_text(&m->ps);
        int r;

        if (!text)
                return -ENOMEM;
        if (m->floor_written && strcmp(text, m->floor_written) == 0)
                return 0;
        size_t len = strlen(text);
        text[len] = '\n';
        if ((r = atomic_file_write(m->floor_path, text, len + 1)) < 0)
                return tp_error(err, r, "%s: %s", m->floor_path, strerror(-r));
        text[len] = '\0';
        m->counters.state_bytes += len + 1;
        free(m->floor_written);
        m->floor_written = TAKE_PTR(text);
        return 0;
}

int manager_save_state(Manager *m, TpError *err) {
        uint64_t bytes = 0;
        int r = save_floor(m, err);
        if (r < 0)
                return r;
        r = state_save(m->state_path, &m->ps, &bytes, err);
        m->counters.state_bytes += bytes;
        return r;
}

int manager_save_seal(Manager *m, SlotId slot, TpError *err) {
        uint64_t bytes = 0;
        int r = seal_save(m->files[slot].seal, &m->seals[slot], &bytes, err);
        m->counters.state_bytes += bytes;
        return r;
}

void manager_use_slot_kind(Manager *m, bool directory) {
        for (SlotId s = 0; s < _SLOT_ID_MAX; s++)
                m->files[s].path = directory ? m->files[s].dir_path : m->files[s].file_path;
}

int manager_open_slot(Manager *m, SlotId slot, int access, FileSet *ret, struct stat *ret_st, TpError *err) {
        const char *path = m->files[slot].path;
        struct stat st;
        int r;

        int fd = open(path, (m->ps.base.directory ? O_RDONLY | O_DIRECTORY : access) | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 || fstat(fd, &st) < 0) {
                r = tp_error(err, negative_errno(), "%s: %s", path, strerror(errno));
                safe_close(fd);
                return r;
        }
        if (m->ps.base.directory) {
                r = fileset_open_dir_access(fd, access, ret, err);
                safe_close(fd);
                if (r < 0)
                        return tp_error_prefix(err, r, "%s", path);
        } else if ((r = fileset_init_one(ret, fd, NULL, (uint64_t) st.st_size)) < 0) {
                safe_close(fd);
                return r;
        } else
                ret->owns_fds = true;
        if (ret_st)
                *ret_st = st;
        return 0;
}

int manager_seal_identity(Manager *m, SlotId slot, Seal *seal, TpError *err) {
        _cleanup_(fileset_done) FileSet set = FILESET_NULL;
        struct stat st;
        int r;

        if (!m->ps.base.directory) {
                if (stat(m->files[slot].path, &st) < 0)
                        return tp_error(err, negative_errno(), "%s: %s", m->files[slot].path, strerror(errno));
                seal_set_identity(seal, &st);
                seal->n_files = 0;
                return 0;
        }
        if ((r = manager_open_slot(m, slot, O_RDONLY, &set, &st, err)) < 0)
                return r;
        if ((r = seal_set_identity_files(seal, &st, &set)) < 0)
                return tp_error(err, r, "%s: %s", m->files[slot].path, strerror(-r));
        return 0;
}

/* Are slot @slot's files still the ones its seal describes? */
static bool slot_identity_holds(Manager *m, SlotId slot) {
        _cleanup_(fileset_done) FileSet set = FILESET_NULL;
        TpError err = {};
        struct stat st;

        if (m->seals[slot].n_files == 0)
                return !m->ps.base.directory && stat(m->files[slot].path, &st) == 0 &&
                       seal_identity_matches(&m->seals[slot], &st);
        if (!m->ps.base.directory || manager_open_slot(m, slot, O_RDONLY, &set, &st, &err) < 0)
                return false;
        return seal_identity_matches_files(&m->seals[slot], &st, &set);
}

int manager_new_base_info(Manager *m, SlotId slot, const Manifest *mf, BaseInfo *ret, TpError *err) {
        _cleanup_(fileset_done) FileSet set = FILESET_NULL;
        _cleanup_(artifact_freep) Artifact *art = NULL;
        BaseInfo b;
        int r;

        if ((r = manager_open_slot(m, slot, O_RDONLY, &set, NULL, err)) < 0)
                return r;
        if ((r = artifact_open_set(&set, &art, err)) < 0)
                return tp_error_prefix(err, r, "the new base (%s v%" PRIu64 ")", mf->task, mf->version);
        b = (BaseInfo) { .size = mf->target.size, .kind = art->kind, .chunk_size = mf->target.chunk_size,
                         .directory = mf->target.files.set.directory };
        memcpy(b.sha256, mf->target.sha256, SHA256_DIGEST_SIZE);
        memcpy(b.layout, art->layout, SHA256_DIGEST_SIZE);
        memcpy(b.chunk_root, mf->target.chunk_root, SHA256_DIGEST_SIZE);
        if (b.directory && (r = base_files_save(m->base_files_next_path, &mf->target.files, err)) < 0)
                return r;
        *ret = b;
        return 0;
}

void manager_check_slot(Manager *m, SlotId slot) {
        TpError err = {};

        m->sealed[slot] = false;
        if (seal_load(m->files[slot].seal, &m->seals[slot], &err) < 0) {
                if (err.code != -ENOENT)
                        mlog_warning(m, "slot %s: %s: it will be rebuilt", slot_id_to_string(slot), err.message);
                m->seals[slot] = (Seal) { .dirty = true };
                return;
        }
        if (m->seals[slot].dirty)
                return;
        if (!slot_identity_holds(m, slot)) {
                mlog_warning(m, "slot %s: the %s not the one sealed (changed or replaced): it will be rebuilt",
                             slot_id_to_string(slot), m->ps.base.directory ? "directory's files are" : "file is");
                return;
        }
        /* Of the provisioned base's family, or the new base on trial in that slot. */
        const TrialInfo *t = &m->ps.trial;
        const uint8_t *family = t->on && t->new_base && t->slot == slot ? t->base.sha256 : m->ps.base.sha256;
        if (m->ps.provisioned && memcmp(m->seals[slot].base_sha256, family, SHA256_DIGEST_SIZE) != 0)
                return;
        m->sealed[slot] = true;
}

int manager_point_model_path(Manager *m, SlotId slot, TpError *err) {
        const char *mp = m->config->model_path;
        _cleanup_free_ char *tmp = NULL, *copy = strdup(mp), *copy2 = strdup(mp);
        int r;

        if (!copy || !copy2 || asprintf(&tmp, "%s/.%s" MODEL_PATH_LINK_SUFFIX, dirname(copy), basename(copy2)) < 0)
                return -ENOMEM;
        (void) unlink(tmp);
        if (symlink(m->files[slot].path, tmp) < 0)
                return tp_error(err, negative_errno(), "%s: %s", tmp, strerror(errno));
        if (rename(tmp, mp) < 0) {
                r = tp_error(err, negative_errno(), "%s: %s", mp, strerror(errno));
                (void) unlink(tmp);
                return r;
        }
        /* The rename was the switch (see atomic_file_commit()): a failed fsync of the directory does not undo it. */
        m->active = slot;
        r = fsync_parent_dir(mp);
        if (r < 0)
                mlog_warning(m, "fsync of the directory of %s: %s (the next change in it makes the link durable)", mp,
                             strerror(-r));
        return 0;
}

/* The blocks under the directory @fd (taken), not following symlinks; @skip: an entry not counted. */
static uint64_t dir_usage(int fd, const char *skip) {
        DIR *d = fdopendir(fd);
        struct dirent *de;
        uint64_t n = 0;

        if (!d) {
                safe_close(fd);
                return 0;
        }
        while ((de = readdir(d))) {
                struct stat st;
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
                    (skip && strcmp(de->d_name, skip) == 0) ||
                    fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                        continue;
                n += (uint64_t) st.st_blocks * 512;
                if (S_ISDIR(st.st_mode)) {
                        int sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        if (sub >= 0)
                                n += dir_usage(sub, NULL);
                }
        }
        closedir(d);
        return n;
}

uint64_t manager_disk_usage(Manager *m) {
        int fd = open(m->config->state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        /* The "default" model's state is state_dir itself: the other models' are not its. */
        return fd < 0 ? 0 : dir_usage(fd, strcmp(m->model, CONFIG_DEFAULT_MODEL) == 0 ? "models" : NULL);
}

int64_t manager_free_space(Manager *m) {
        struct statvfs sv;

        m->space_note[0] = '\0';
        if (statvfs(m->config->state_dir, &sv) < 0)
                return negative_errno();
        int64_t avail = (int64_t) ((uint64_t) sv.f_bavail * sv.f_frsize);
        uint64_t budget = m->config->disk_budget;
        if (budget > 0) {
                uint64_t used = manager_disk_usage(m);
                int64_t room = used >= budget ? 0 : (int64_t) (budget - used);
                if (room < avail) {
                        avail = room;
                        snprintf(m->space_note, sizeof(m->space_note),
                                 " (model %s's disk_budget: %" PRIu64 " bytes, %" PRIu64 " in use)", m->model, budget,
                                 used);
                }
        }
        return avail;
}

void manager_seal_event_fields(json_t *ev, const Seal *s) {
        char h[SHA256_HEX_SIZE];
        sha256_to_hex(s->sha256, h);
        json_object_set_new(ev, "task", s->task[0] ? json_string(s->task) : json_null());
        json_object_set_new(ev, "version", json_integer((json_int_t) s->version));
        json_object_set_new(ev, "sha256", json_string(h));
}

json_t *manager_slot_changed_event(Manager *m, const char *reason) {
        json_t *ev = json_pack("{s:s, s:s, s:s, s:s, s:s}", "event", "slot-changed", "model", m->model, "slot",
                               slot_id_to_string(m->active), "model_path", m->config->model_path, "reason", reason);
        manager_seal_event_fields(ev, &m->seals[m->active]);
        return ev;
}

void manager_emit_slot_changed(Manager *m, const char *transaction, const char *reason) {
        json_t *ev = manager_slot_changed_event(m, reason);
        notifier_slot_changed(m->notifier, ev);
        manager_emit(m, transaction, ev);
}

void manager_lifecycle(Manager *m, const char *event, SlotId slot, const char *transaction, const char *detail) {
        char h[SHA256_HEX_SIZE];
        sha256_to_hex(m->seals[slot].sha256, h);
        log_lifecycle(m->model, m->log_prefix, event, m->seals[slot].task, (unsigned long long) m->seals[slot].version,
                      slot_id_to_string(slot), h, transaction, detail);
}

/* ---- operations ---- */

void operation_free(Operation *op) {
        if (!op)
                return;
        if (op->free_data)
                op->free_data(op->data);
        client_unref(op->client);
        free(op);
}

static const char *code_for_errno(int r) {
        switch (r) {
        case -ENOSPC:
        case -EDQUOT:
                return "no-space";
        case -EBADMSG:
        case -EKEYREJECTED:
        case -EPERM:
                return "refused";
        case -ENOMEM:
                return "internal";
        default:
                return "io";
        }
}

static void operation_finish(Manager *m, int r) {
        Operation *op = TAKE_PTR(m->op);
        m->op_source = sd_event_source_disable_unref(m->op_source);

        /* An operation that put a task on trial has left its busy state already; the others end here. */
        if (manager_state_busy(manager_state(m)))
                (void) manager_fire(m, r >= 0 ? EVENT_DONE : m->ps.provisioned ? EVENT_FAILED : EVENT_LOST);
        bool own_trial = manager_on_trial(m) && strcmp(m->ps.trial.transaction, op->transaction) == 0;
        if (r < 0) {
                const char *code = op->err_code ? op->err_code : code_for_errno(r);
                const char *msg = tp_error_message(&op->err, r);
                mlog_error(m, "%s failed: %s", op->cmd, msg);
                manager_report_error(m, op->transaction, code, msg, op->cmd);
                if (op->client)
                        client_reply_error(op->client, code, "%s", msg);
        } else if (op->client) {
                json_t *resp = json_pack("{s:s}", "transaction", op->transaction);
                if (own_trial && manager_health_configured(m)) {
                        /* The outcome is the trial's: answer when it commits or rolls back. */
                        json_decref(resp);
                        m->trial_client = TAKE_PTR(op->client);
                } else {
                        json_object_set_new(resp, "state", json_string(own_trial ? "trial" : "committed"));
                        json_object_set_new(resp, "slot", json_string(slot_id_to_string(m->active)));
                        if (m->ps.provisioned)
                                manager_seal_event_fields(resp, &m->seals[m->active]);
                        if (op->task[0] && strcmp(op->cmd, "install") == 0) {
                                json_object_set_new(resp, "task", json_string(op->task));
                                json_object_set_new(resp, "version", json_integer((json_int_t) op->version));
                        }
                        client_reply(op->client, resp);
                }
        }
        manager_sources_operation_done(m, op, r, own_trial);
        /* A failed re-provisioning (no room, a read error) is tried again later, not at once. */
        bool retry = r < 0 && strcmp(op->cmd, "reprovision") == 0;
        operation_free(op);
        manager_want_idle_work(m, retry ? REPROVISION_RETRY_USEC : 0);
        for (size_t i = 0; i < m->n_peers; i++)
                if (m->peers[i] != m)
                        manager_want_idle_work(m->peers[i], 0);       /* one that waited for this operation */
        /* A large manifest's parse is freed now: give the pages back, do not keep them as the peak. */
        (void) malloc_trim(0);
}

static int on_operation(sd_event_source *s, void *userdata) {
        Manager *m = userdata;
        (void) s;

        int r = m->op->step(m->op);
        if (r != 1)
                operation_finish(m, r);
        return 0;
}

void manager_reply_unwritable(Manager *m, Client *c, const char *cmd) {
        client_reply_error(c, "no-space", "%s refused: the state directory %s cannot be written (%s); the daemon "
                           "serves status only until it can", cmd, m->config->state_dir, strerror(-m->write_error));
}

void manager_log(const Manager *m, int priority, const char *fmt, ...) {
        char line[2048];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(line, sizeof(line), fmt, ap);
        va_end(ap);
        log_full(priority, "%s%s", m->log_prefix, line);
}

const char *manager_log_prefix(const Manager *m) {
        return m->log_prefix;
}

const Manager *manager_peer_busy(const Manager *m) {
        for (size_t i = 0; i < m->n_peers; i++)
                if (m->peers[i] != m && m->peers[i]->op && m->peers[i]->op->start >= 0)
                        return m->peers[i];
        return NULL;
}

void manager_start(Manager *m, Operation *op, Client *c, bool wait) {
        const Manager *peer = op->start >= 0 ? manager_peer_busy(m) : NULL;
        sd_id128_t id;
        int r;

        op->m = m;
        if (peer) {
                if (c)
                        client_reply_error(c, "busy", "%s cannot start: model %s is running %s (operations run one at "
                                           "a time across models)", op->cmd, peer->model, peer->op->cmd);
                operation_free(op);
                return;
        }
        if (m->write_error && op->start >= 0) {
                if (c)
                        manager_reply_unwritable(m, c, op->cmd);
                operation_free(op);
                return;
        }
        if (m->op || (op->start >= 0 && !machine_can(&m->machine, op->start))) {
                if (c)
                        client_reply_error(c, "busy", "%s cannot start: %s%s%s", op->cmd,
                                           m->op ? m->op->cmd : manager_state_to_string(manager_state(m)),
                                           m->op ? " is running" : "",
                                           manager_on_trial(m) ? " ('tpctl mark-good' or 'tpctl rollback' first)" : "");
                operation_free(op);
                return;
        }
        if (sd_id128_randomize(&id) >= 0)
                sd_id128_to_string(id, op->transaction);
        r = sd_event_add_defer(m->event, &m->op_source, on_operation, m);
        if (r >= 0) {
                /* Below every socket: requests are answered between slices. */
                (void) sd_event_source_set_priority(m->op_source, SD_EVENT_PRIORITY_IDLE);
                (void) sd_event_source_set_enabled(m->op_source, SD_EVENT_ON);
                (void) sd_event_source_set_description(m->op_source, op->cmd);
        }
        if (r < 0) {
                if (c)
                        client_reply_error(c, "internal", "cannot schedule the operation: %s", strerror(-r));
                operation_free(op);
                return;
        }
        m->op = op;
        if (op->start >= 0)
                (void) manager_fire(m, op->start);
        mlog_info(m, "%s started (transaction %s)", op->cmd, op->transaction);
        if (!c)
                return;         /* the daemon's own work (a scrub): nobody waits */
        if (wait)
                op->client = client_defer(c);
        else
                client_reply(c, json_pack("{s:s}", "transaction", op->transaction));
}

/*
 * A technician's request does not wait for the daemon's own background work: a running scrub
 * is stopped (each slot it judged stays judged) and runs again a minute later; a running
 * re-provisioning is stopped (its slot stays dirty) and starts again once the daemon is idle.
 * Returns whether one was stopped.
 */
bool manager_stop_background(Manager *m) {
        if (!m->op || m->op->start >= 0)
                return false;
        Operation *op = TAKE_PTR(m->op);
        m->op_source = sd_event_source_disable_unref(m->op_source);
        bool scrub = strcmp(op->cmd, "scrub") == 0;
        if (scrub)
                mlog_info(m, "the scrub in progress is stopped for a request; it runs again in a minute");
        else
                mlog_info(m, "the %s in progress is stopped for a request; it starts again once the daemon is idle",
                          op->cmd);
        operation_free(op);
        if (scrub)
                (void) manager_schedule_scrub(m, 60 * UINT64_C(1000000));
        else
                manager_want_idle_work(m, 0);
        return true;
}

static int on_idle_work(sd_event_source *s, uint64_t usec, void *userdata) {
        Manager *m = userdata;
        Operation *op = NULL;
        TpError err = {};
        (void) s;
        (void) usec;

        m->reprovision_source = sd_event_source_disable_unref(m->reprovision_source);
        if (m->revoked_active[0] && manager_replace_revoked(m))
                return 0;
        /* Busy (an operation, a trial, a peer's operation): the end of that asks again. */
        if (!m->ps.reprovision || !manager_can_start(m))
                return 0;
        if (reprovision_new(m, &op, &err) < 0) {
                mlog_error(m, "cannot re-provision the inactive slot: %s", err.message);
                manager_want_idle_work(m, REPROVISION_RETRY_USEC);
                return 0;
        }
        manager_start(m, op, NULL, false);
        return 0;
}

void manager_want_idle_work(Manager *m, uint64_t after_usec) {
        if ((!m->ps.reprovision && !m->revoked_active[0]) || m->reprovision_source)
                return;
        if (sd_event_add_time_relative(m->event, &m->reprovision_source, CLOCK_BOOTTIME, after_usec, 0, on_idle_work,
                                       m) < 0)
                return;
        (void) sd_event_source_set_priority(m->reprovision_source, SD_EVENT_PRIORITY_IDLE);
        (void) sd_event_source_set_description(m->reprovision_source, "idle-work");
}

/* ---- requests that need no operation ---- */

int manager_mark_good(Manager *m, Client *c) {
        if (!manager_on_trial(m)) {
                client_reply_error(c, "not-found", "no task is on trial");
                return 0;
        }
        char how[64];
        snprintf(how, sizeof(how), "marked good by uid %u", (unsigned) client_uid(c));
        int r = manager_trial_commit(m, how);
        if (r < 0)
                client_reply_error(c, "io", "%s", m->last.reason);
        else
                client_reply(c, json_pack("{s:s, s:s}", "state", "committed", "slot", slot_id_to_string(m->active)));
        return 0;
}

static const char *task_label(const char *task) {
        return task && task[0] ? task : "the base";
}

void manager_rollback(Manager *m, Client *c, bool allow_downgrade, bool wait) {
        char reason[64];

        snprintf(reason, sizeof(reason), "requested by uid %u", (unsigned) client_uid(c));
        if (manager_on_trial(m)) {
                if (manager_trial_rollback(m, reason, false) < 0)
                        client_reply_error(c, "io", "%s", m->last.reason);
                else
                        client_reply(c, json_pack("{s:s, s:s}", "state", "committed", "slot",
                                                  slot_id_to_string(m->active)));
                return;
        }
        (void) manager_stop_background(m);
        if (m->op || manager_state(m) != STATE_IDLE) {
                client_reply_error(c, "busy", "%s is running", m->op ? m->op->cmd : manager_state_to_string(manager_state(m)));
                return;
        }
        /* Committed: back to what was committed before, through a trial like any switch. */
        const Seal *now = &m->seals[m->active];
        const TaskRef *prev = state_previous(&m->ps);
        if (!prev) {
                client_reply_error(c, "not-found", "nothing to roll back to: nothing was committed before %s v%" PRIu64,
                                   task_label(now->task), now->version);
                return;
        }
        if (state_failed(&m->ps, prev->task, prev->version)) {
                client_reply_error(c, "refused", "not rolling back to %s v%" PRIu64 ": it failed its trial "
                                   "('tpctl switch' to try it again)", task_label(prev->task), prev->version);
                return;
        }
        uint64_t floor = prev->task[0] ? state_accepted(&m->ps, prev->task) : 0;
        if (prev->version < floor && !allow_downgrade) {
                client_reply_error(c, "refused", "not rolling back to %s v%" PRIu64 ": this device has accepted v%" PRIu64
                                   " (--allow-downgrade to roll back anyway)", prev->task, prev->version, floor);
                return;
        }
        Operation *op = NULL;
        const char *code = NULL;
        TpError err = {};
        int r = switch_new(m, prev->task[0] ? prev->task : NULL, prev->version, &op, &code, &err);
        if (r < 0) {
                client_reply_error(c, code ? code : "io", "cannot roll back to %s v%" PRIu64 ": %s",
                                   task_label(prev->task), prev->version, tp_error_message(&err, r));
                return;
        }
        if (!op) {
                client_reply_error(c, "not-found", "nothing to roll back to: %s v%" PRIu64 " is what runs",
                                   task_label(prev->task), prev->version);
                return;
        }
        op->cmd = "rollback";
        op->rollback = true;
        manager_start(m, op, c, wait);
}

/* ---- scrub ---- */

static int on_scrub_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        Manager *m = userdata;
        Operation *op = NULL;
        uint64_t next = m->config->scrub_interval * 3600 * UINT64_C(1000000);
        (void) usec;

        if (m->op || !m->ps.provisioned || (manager_state(m) != STATE_IDLE && manager_state(m) != STATE_TRIAL))
                next = 60 * UINT64_C(1000000);         /* busy: try again in a minute */
        else if (scrub_new(&op) >= 0)
                manager_start(m, op, NULL, false);
        if (next > 0) {
                (void) sd_event_source_set_time_relative(s, next);
                (void) sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
        }
        return 0;
}

int manager_schedule_scrub(Manager *m, uint64_t after_usec) {
        int r;

        if (!m->scrub_timer) {
                r = sd_event_add_time_relative(m->event, &m->scrub_timer, CLOCK_BOOTTIME, after_usec, 0, on_scrub_timer,
                                               m);
                if (r >= 0)
                        (void) sd_event_source_set_description(m->scrub_timer, "scrub");
                return r;
        }
        r = sd_event_source_set_time_relative(m->scrub_timer, after_usec);
        if (r >= 0)
                r = sd_event_source_set_enabled(m->scrub_timer, SD_EVENT_ONESHOT);
        return r;
}
