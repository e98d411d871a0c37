/* SPDX-License-Identifier: MIT */
/*
 * The trial: a newly active task stays on trial until mark-good or a passing health check
 * commits it; its timeout, a failing check, a technician's rollback or a damaged slot roll
 * it back. Activation (manager_activate) starts it. The state changes go through
 * manager_fire() like every other (taskpatchd-machine.c).
 */

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "clock.h"
#include "taskpatchd-log.h"
#include "taskpatchd-manager.h"
#include "yaml-doc.h"

/* The journal entry of a rollback: the task that was rolled back, and the slot active again. */
static void rolled_back_entry(Manager *m, const char *task, uint64_t version, SlotId from, const char *transaction,
                              const char *reason) {
        char h[SHA256_HEX_SIZE], detail[TP_ERROR_MAX + 64];
        const Seal *now = &m->seals[m->active];

        sha256_to_hex(m->seals[from].sha256, h);
        snprintf(detail, sizeof(detail), "%s; slot %s (%s v%" PRIu64 ") is active again", reason,
                 slot_id_to_string(m->active), now->task[0] ? now->task : "base", now->version);
        log_lifecycle(m->model, m->log_prefix, "rolled-back", task, (unsigned long long) version,
                      slot_id_to_string(m->active), h, transaction, detail);
}

/* ---- trial ---- */

static void trial_stop(Manager *m) {
        m->trial_timer = sd_event_source_disable_unref(m->trial_timer);
        m->probe_timer = sd_event_source_disable_unref(m->probe_timer);
        m->health = health_check_free(m->health);
}

static void reply_trial_client(Manager *m, bool committed, const char *reason) {
        Client *c = TAKE_PTR(m->trial_client);
        if (!c)
                return;
        if (committed) {
                json_t *resp = json_pack("{s:s, s:s}", "transaction", m->ps.trial.transaction, "state", "committed");
                manager_seal_event_fields(resp, &m->seals[m->active]);
                json_object_set_new(resp, "slot", json_string(slot_id_to_string(m->active)));
                client_reply(c, resp);
        } else
                client_reply_error(c, "rolled-back", "%s", reason);
        client_unref(c);
}

/* The active task's bundle is kept whatever its age: it is what the running model was made from. */
static bool keep_in_use(void *userdata, const char *task, uint64_t version) {
        Manager *m = userdata;
        return strcmp(m->seals[m->active].task, task) == 0 && m->seals[m->active].version == version;
}

static void collect_garbage(Manager *m, const char *task) {
        int n = store_gc(&m->store, task, m->config->keep_versions, keep_in_use, m);
        if (n > 0)
                mlog_info(m, "removed %d old version(s) of %s (keep_versions: %" PRIu64 ")", n, task,
                          m->config->keep_versions);
}

/* A new base committed: the bundles are listed again for it (the old base's are kept aside until re-provisioned). */
static void base_changed(Manager *m, const TrialInfo *t) {
        char h[SHA256_HEX_SIZE];
        _cleanup_free_ char *tasks = strdup(m->store.dir);
        TpError err = {};

        /* A directory's list of files: the new one, written before the trial, goes in place. */
        if (m->ps.base.directory) {
                manifest_files_done(&m->base_files);
                if (base_files_load_either(m->base_files_path, m->base_files_next_path, &m->ps.base, &m->base_files,
                                           &err) < 0)
                        mlog_error(m, "%s (a restart tries again)", err.message);
        }
        if (!tasks || manager_scan_store(m, tasks, NULL) < 0)
                mlog_warning(m, "cannot list the installed bundles in %s", tasks ? tasks : m->store.dir);
        sha256_to_hex(m->ps.base.sha256, h);
        mlog_info(m, "the base is now %s v%" PRIu64 " (%" PRIu64 " bytes, SHA-256 %s); %zu installed bundle(s) for it, "
                  "%zu of the old base; re-provisioning slot %s from it", t->task, t->version, m->ps.base.size, h,
                  m->store.n, m->store.n_stranded, slot_id_to_string(slot_other(m->active)));
}

int manager_trial_commit(Manager *m, const char *how) {
        TpError err = {};
        PersistentState kept = m->ps;
        TrialInfo t = m->ps.trial;
        int r;

        m->ps.committed = t.slot;
        m->ps.trial.on = false;
        if (t.new_base) {
                /*
                 * One write makes the slot the base: the family changes, what ran on the old base is no
                 * place to roll back to, and the other slot is re-provisioned from this one.
                 */
                m->ps.base = t.base;
                m->ps.n_history = 0;
                state_committed(&m->ps, NULL, 0);
                m->ps.reprovision = true;
        } else {
                if (t.rollback)
                        state_history_pop(&m->ps);      /* back where it was: never a toggle */
                state_committed(&m->ps, t.task, t.version);
        }
        r = manager_save_state(m, &err);
        if (r < 0) {
                /* Still on trial, as the state file says: mark-good can be retried, the timeout still runs. */
                m->ps = kept;
                mlog_error(m, "cannot record the commit: %s", err.message);
                manager_record(m, "error", "io", true, err.message);
                return r;
        }
        trial_stop(m);
        manager_lifecycle(m, "committed", t.slot, t.transaction, how);
        json_t *ev = json_pack("{s:s, s:s, s:s}", "event", "committed", "slot", slot_id_to_string(t.slot), "how", how);
        manager_seal_event_fields(ev, &m->seals[t.slot]);
        manager_emit(m, t.transaction, ev);
        char what[TP_ERROR_MAX];
        snprintf(what, sizeof(what), "%s v%" PRIu64 " committed: %s", t.task[0] ? t.task : "base", t.version, how);
        manager_record(m, "committed", NULL, false, what);
        (void) manager_fire(m, EVENT_COMMIT);
        reply_trial_client(m, true, NULL);
        if (t.new_base)
                base_changed(m, &t);
        else if (t.task[0])
                collect_garbage(m, t.task);
        manager_sources_trial_done(m, t.transaction, true, how);
        manager_want_idle_work(m, 0);
        return 0;
}

/* Back to the committed slot; @reason says why; @failure: the task failed (not a technician's choice). */
int manager_trial_rollback(Manager *m, const char *reason, bool failure) {
        TpError err = {};
        TrialInfo t = m->ps.trial;
        int r;

        r = manager_point_model_path(m, m->ps.committed, &err);
        if (r < 0) {
                /* model_path did not move: still on trial (its timeout tries again; a restart rolls back). */
                mlog_error(m, "rollback failed: %s", err.message);
                manager_record(m, "error", "io", true, err.message);
                return r;
        }
        trial_stop(m);
        m->ps.trial.on = false;
        if (t.new_base)
                manager_check_slot(m, t.slot);  /* a slot of another base now: never switched back to as is */
        state_failed_add(&m->ps, t.task, t.version);
        if (manager_save_state(m, &err) < 0)
                mlog_error(m, "cannot record the rollback: %s (the symlink is the truth; a restart repairs it)",
                           err.message);
        rolled_back_entry(m, t.task, t.version, t.slot, t.transaction, reason);
        manager_emit_slot_changed(m, t.transaction, "rollback");
        json_t *ev = json_pack("{s:s, s:o, s:I, s:s, s:s}", "event", "rolled-back", "task",
                               t.task[0] ? json_string(t.task) : json_null(), "version", (json_int_t) t.version,
                               "slot", slot_id_to_string(m->active), "reason", reason);
        manager_emit(m, t.transaction, ev);
        char what[TP_ERROR_MAX];
        snprintf(what, sizeof(what), "%s v%" PRIu64 " rolled back: %s", t.task[0] ? t.task : "base", t.version, reason);
        manager_record(m, "rolled-back", "rolled-back", failure, what);
        (void) manager_fire(m, EVENT_ROLLBACK);
        reply_trial_client(m, false, reason);
        manager_sources_trial_done(m, t.transaction, false, reason);
        manager_want_idle_work(m, 0);
        return 0;
}

int manager_replace_damaged(Manager *m, Operation *op) {
        static const char reason[] = "active slot damaged";
        SlotId from = m->active, to = slot_other(from);
        const Seal *bad = &m->seals[from];
        char what[TP_ERROR_MAX];
        int r;

        if (manager_on_trial(m))
                return manager_trial_rollback(m, reason, true) < 0 ? tp_error(&op->err, -EIO, "%s", m->last.reason) : 0;
        SlotId kept = m->ps.committed;
        m->ps.committed = to;
        if ((r = manager_save_state(m, &op->err)) < 0 || (r = manager_point_model_path(m, to, &op->err)) < 0) {
                m->ps.committed = kept;
                return r;
        }
        state_committed(&m->ps, m->seals[to].task, m->seals[to].version);
        TpError ignored = {};
        if (manager_save_state(m, &ignored) < 0)
                mlog_warning(m, "%s (the history is written at the next change)", ignored.message);
        snprintf(what, sizeof(what), "slot %s (%s v%" PRIu64 ") does not hash to its seal: slot %s (%s v%" PRIu64
                 ") is active instead", slot_id_to_string(from), bad->task[0] ? bad->task : "base", bad->version,
                 slot_id_to_string(to), m->seals[to].task[0] ? m->seals[to].task : "base", m->seals[to].version);
        mlog_warning(m, "%s", what);
        manager_lifecycle(m, "activated", to, op->transaction, reason);
        manager_emit_slot_changed(m, op->transaction, reason);
        manager_record(m, "repaired", "io", true, what);
        return manager_fire(m, EVENT_REPAIR);
}

static int on_trial_timeout(sd_event_source *s, uint64_t usec, void *userdata) {
        Manager *m = userdata;
        char reason[128];
        (void) s;
        (void) usec;

        snprintf(reason, sizeof(reason), "not confirmed within %" PRIu64 " s", m->config->trial.timeout);
        if (manager_trial_rollback(m, reason, true) < 0) {
                /* Still on trial: try again in a while. */
                (void) sd_event_source_set_time_relative(s, 10 * UINT64_C(1000000));
                (void) sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
        }
        return 0;
}

static int schedule_probe(Manager *m);

/* What a waiting tpctl draws: the last probe's result and how long the trial has left. */
static void emit_health(Manager *m, HealthResult result, const char *detail) {
        int64_t left = m->ps.trial.started + (int64_t) m->config->trial.timeout - (int64_t) clock_wall();
        json_t *ev = json_pack("{s:s, s:s, s:s, s:I}", "event", "health", "result", health_result_to_string(result),
                               "detail", detail, "left", (json_int_t) (left > 0 ? left : 0));
        manager_emit(m, m->ps.trial.transaction, ev);
}

static void on_health(void *userdata, HealthResult result, const char *detail) {
        Manager *m = userdata;
        char reason[256];

        if (!manager_on_trial(m))
                return;
        mlog_info(m, "health check: %s (%s)", health_result_to_string(result), detail);
        emit_health(m, result, detail);
        switch (result) {
        case HEALTH_OK:
                if (manager_trial_commit(m, "health check passed") < 0)
                        (void) schedule_probe(m);       /* still on trial: the next pass commits */
                break;
        case HEALTH_FAILING:
                snprintf(reason, sizeof(reason), "health check failed: %s", detail);
                (void) manager_trial_rollback(m, reason, true);
                break;
        default:
                (void) schedule_probe(m);
                break;
        }
}

static int on_probe_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        Manager *m = userdata;
        (void) s;
        (void) usec;

        m->probe_timer = sd_event_source_disable_unref(m->probe_timer);
        if (health_check_probe(m->health, on_health, m) < 0)
                (void) schedule_probe(m);
        return 0;
}

static int schedule_probe(Manager *m) {
        m->probe_timer = sd_event_source_disable_unref(m->probe_timer);
        int r = sd_event_add_time_relative(m->event, &m->probe_timer, CLOCK_BOOTTIME,
                                           m->config->trial.health_interval * 1000000, 0, on_probe_timer, m);
        if (r >= 0)
                (void) sd_event_source_set_description(m->probe_timer, "health-probe");
        return r;
}

bool manager_health_configured(const Manager *m) {
        return m->config->trial.health_command || m->config->trial.health_url;
}

/* The service was told (slot-changed); now the trial is on, and the clock and the health checks start. */
static int trial_start(Manager *m) {
        uint64_t timeout = m->config->trial.timeout;
        char deadline[21];
        int r;

        if ((r = manager_fire(m, EVENT_TRIAL)) < 0)
                return r;
        format_time_utc(m->ps.trial.started + (int64_t) timeout, deadline);
        json_t *ev = json_pack("{s:s, s:o, s:I, s:s, s:I, s:s}", "event", "trial-started", "task",
                               m->ps.trial.task[0] ? json_string(m->ps.trial.task) : json_null(), "version",
                               (json_int_t) m->ps.trial.version, "slot", slot_id_to_string(m->ps.trial.slot),
                               "timeout", (json_int_t) timeout, "deadline", deadline);
        manager_emit(m, m->ps.trial.transaction, ev);
        r = sd_event_add_time_relative(m->event, &m->trial_timer, CLOCK_BOOTTIME, timeout * 1000000, 0,
                                       on_trial_timeout, m);
        if (r < 0)
                goto fail;
        (void) sd_event_source_set_description(m->trial_timer, "trial-timeout");
        if (manager_health_configured(m)) {
                uint64_t probe = m->config->trial.health_interval * 1000000;
                r = health_check_new(m->event, m->config->trial.health_command, m->config->trial.health_url,
                                     probe > 5000000 ? probe : 5000000, &m->health);
                if (r < 0 || (r = schedule_probe(m)) < 0)
                        goto fail;
        }
        return 0;
fail:;
        /* A trial nothing can end would be a trial for ever: back to the committed slot now. */
        char reason[128];
        snprintf(reason, sizeof(reason), "cannot run the trial: %s", strerror(-r));
        (void) manager_trial_rollback(m, reason, true);
        return r;
}

int manager_activate(Manager *m, Operation *op, SlotId slot, bool trial, TpError *err) {
        SlotId previous = m->active;
        int r;

        if (trial) {
                m->ps.trial = (TrialInfo) { .on = true, .slot = slot, .version = m->seals[slot].version,
                                            .started = (int64_t) clock_wall(), .rollback = op->rollback };
                memcpy(m->ps.trial.task, m->seals[slot].task, sizeof(m->ps.trial.task));
                memcpy(m->ps.trial.transaction, op->transaction, TRANSACTION_ID_SIZE);
                if (op->new_base) {
                        /* The slot is sealed as a base; the trial names the base bundle's line and version. */
                        snprintf(m->ps.trial.task, sizeof(m->ps.trial.task), "%s", op->task);
                        m->ps.trial.version = op->version;
                        m->ps.trial.new_base = true;
                        m->ps.trial.base = *op->new_base;
                }
        } else
                m->ps.committed = slot;
        /*
         * A version is accepted (the anti-rollback floor rises) when it first runs, in the state write
         * that starts its trial: staged, its every byte proven by the target's hash. Not at install: a
         * bundle that cannot rebuild its target must not block the versions below it.
         */
        char accept_task[TASK_NAME_MAX + 1] = "";
        uint64_t accept_before = 0;
        int raised = 0;
        if (trial && m->ps.trial.task[0] && m->ps.trial.version) {
                snprintf(accept_task, sizeof(accept_task), "%s", m->ps.trial.task);
                accept_before = state_accepted(&m->ps, accept_task);
                raised = state_accept(&m->ps, accept_task, m->ps.trial.version);
                if (raised == -E2BIG) {
                        m->ps.trial.on = false;
                        return tp_error(err, raised, "%s: this device keeps versions of at most %u tasks", accept_task,
                                        STATE_MAX_TASKS);
                }
        }
        /* The state names the trial before the symlink moves: a crash in between finds no trial started. */
        if ((r = manager_save_state(m, err)) < 0) {
                m->ps.trial.on = false;         /* as the state file still says */
                m->ps.committed = previous;
                if (raised > 0)
                        state_accept_undo(&m->ps, accept_task, accept_before);
                if (op->new_base)
                        manager_check_slot(m, slot);    /* a staged new base: a slot of another base */
                return r;
        }
        if ((r = manager_point_model_path(m, slot, err)) < 0) {
                m->ps.trial.on = false;
                m->ps.committed = previous;
                if (raised > 0)
                        state_accept_undo(&m->ps, accept_task, accept_before);
                if (op->new_base)
                        manager_check_slot(m, slot);
                TpError ignored = {};
                if (manager_save_state(m, &ignored) < 0)
                        mlog_error(m, "%s (a restart repairs the state from the symlink)", ignored.message);
                return r;
        }
        m->counters.switches++;
        manager_lifecycle(m, "activated", slot, op->transaction, NULL);
        manager_emit_slot_changed(m, op->transaction, op->rollback ? "rollback" : trial ? "switch" : op->cmd);
        if (trial && (r = trial_start(m)) < 0)
                return tp_error(err, r, "cannot start the trial: %s", strerror(-r));
        return 0;
}
