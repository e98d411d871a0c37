/* SPDX-License-Identifier: MIT */
/*
 * The manager as the update sources' host (taskpatchd-source.h): the SourceHost it lends
 * them, the registry it tells how operations and trials end, and the channel's serial and
 * pin policy (taskpatchd-policy.h) applied to its state.
 */

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "taskpatchd-log.h"
#include "taskpatchd-manager.h"
#include "taskpatchd-policy.h"

/* ---- the host ---- */

bool manager_can_start(Manager *m) {
        return !m->op && manager_state(m) == STATE_IDLE && m->ps.provisioned && !m->write_error &&
               !manager_peer_busy(m);
}

int manager_submit(Manager *m, Operation *op, UpdateOrigin origin, char ret_transaction[TRANSACTION_ID_SIZE],
                   TpError *err) {
        int r;

        if (m->op || m->write_error || (op->start >= 0 && !machine_can(&m->machine, op->start))) {
                const char *why = m->write_error ? "the state directory cannot be written" :
                                  m->op ? m->op->cmd : manager_state_to_string(manager_state(m));
                r = tp_error(err, -EBUSY, "%s cannot start: %s%s", op->cmd, why,
                             !m->write_error && m->op ? " is running" : "");
                operation_free(op);
                return r;
        }
        const Manager *peer = op->start >= 0 ? manager_peer_busy(m) : NULL;
        if (peer) {
                r = tp_error(err, -EBUSY, "%s cannot start: model %s is running %s", op->cmd, peer->model,
                             peer->op->cmd);
                operation_free(op);
                return r;
        }
        op->origin = origin;
        manager_start(m, op, NULL, false);
        if (!m->op)     /* could not be scheduled (and freed) */
                return tp_error(err, -ENOMEM, "cannot schedule the operation");
        memcpy(ret_transaction, m->op->transaction, TRANSACTION_ID_SIZE);
        return 1;
}

int manager_submit_install(Manager *m, int fd, const InstallRequest *req, Client *c, bool wait,
                           char ret_transaction[TRANSACTION_ID_SIZE], const char **ret_code, TpError *err) {
        Operation *op = NULL;
        int r = install_new(m, fd, req, &op, ret_code, err);

        if (r < 0)
                return r;
        if (c) {
                op->origin = req->origin;
                manager_start(m, op, c, wait);
                return 0;
        }
        return manager_submit(m, op, req->origin, ret_transaction, err);
}

static bool host_can_start(const SourceHost *h) {
        return manager_can_start(h->userdata);
}

static int host_submit_install(const SourceHost *h, int fd, const InstallRequest *req,
                               char ret_transaction[TRANSACTION_ID_SIZE], TpError *err) {
        const char *code = NULL;
        return manager_submit_install(h->userdata, fd, req, NULL, false, ret_transaction, &code, err);
}

static int host_submit_switch(const SourceHost *h, const char *task, uint64_t version, UpdateOrigin origin,
                              char ret_transaction[TRANSACTION_ID_SIZE], TpError *err) {
        Manager *m = h->userdata;
        Operation *op = NULL;
        const char *code = NULL;
        int r = switch_new(m, task, version, &op, &code, err);

        if (r < 0)
                return r;
        if (!op)
                return 0;       /* what runs already */
        return manager_submit(m, op, origin, ret_transaction, err);
}

static void host_device(const SourceHost *h, DeviceView *ret) {
        const Manager *m = h->userdata;
        const Seal *a = &m->seals[m->active];

        *ret = (DeviceView) { .provisioned = m->ps.provisioned, .base_kind = m->ps.base.kind,
                              .active_version = a->version };
        memcpy(ret->base_sha256, m->ps.base.sha256, SHA256_DIGEST_SIZE);
        snprintf(ret->active_task, sizeof(ret->active_task), "%s", a->task);
}

static const Revocations *host_revocations(const SourceHost *h) {
        const Manager *m = h->userdata;
        return trust_store_list(m->trust);
}

static const TrustRoot *host_trust_root(const SourceHost *h) {
        const Manager *m = h->userdata;
        return m->trust ? m->trust->root : NULL;
}

static int host_take_trust(const SourceHost *h, const uint8_t *data, size_t len, const char *what, TpError *err) {
        return manager_take_trust(h->userdata, data, len, what, err);
}

static uint64_t host_newest_installed(const SourceHost *h, const char *task) {
        const Manager *m = h->userdata;
        return store_newest(&m->store, task);
}

static bool host_installed(const SourceHost *h, const char *task, uint64_t version) {
        const Manager *m = h->userdata;
        return store_find(&m->store, task, version) != NULL;
}

static uint64_t host_accepted(const SourceHost *h, const char *task) {
        const Manager *m = h->userdata;
        return state_accepted(&m->ps, task);
}

static void host_channel(const SourceHost *h, ChannelView *ret) {
        const Manager *m = h->userdata;
        *ret = (ChannelView) { .have_serial = m->ps.have_channel, .serial = m->ps.channel_serial,
                               .pinned = m->ps.pinned };
}

static int host_channel_accept_serial(const SourceHost *h, uint64_t serial, int64_t created, TpError *err) {
        Manager *m = h->userdata;
        TpError save = {};
        bool unpinned;
        int r = policy_channel_serial(&m->ps, serial, &unpinned, err);

        if (r <= 0)
                return r;
        if (created > m->ps.time_floor)
                m->ps.time_floor = created;     /* the clock never goes back behind an accepted channel */
        if (unpinned)
                mlog_info(m, "the technician's switch no longer pins the task: the channel's serial changed");
        if (manager_save_state(m, &save) < 0)
                return tp_error(err, -EIO, "%s", save.message);
        return 1;
}

static int host_dates_now(const SourceHost *h, time_t *ret, TpError *err) {
        return manager_dates_now(h->userdata, ret, err);
}

static void host_emit(const SourceHost *h, json_t *event) {
        manager_emit(h->userdata, NULL, event);
}

static void host_report_error(const SourceHost *h, const char *code, const char *message, const char *cmd) {
        manager_report_error(h->userdata, NULL, code, message, cmd);
}

/* ---- the registry ---- */

int manager_register_source(Manager *m, const UpdateSource *source, void *userdata) {
        if (m->n_sources >= MANAGER_SOURCES_MAX)
                return -E2BIG;
        m->sources[m->n_sources++] = (RegisteredSource) { .source = source, .userdata = userdata };
        return 0;
}

void manager_sources_operation_done(Manager *m, const Operation *op, int r, bool on_trial) {
        /* A technician's switch pins its task until the channel's serial changes. */
        if (m->fetch && policy_pin(&m->ps, op->origin, op->cmd, r)) {
                TpError err = {};
                if (manager_save_state(m, &err) < 0)
                        mlog_warning(m, "cannot record the pin: %s", err.message);
                mlog_info(m, "%s is pinned by the technician's switch until the channel's serial changes",
                          op->task[0] ? op->task : "the base");
        }
        OperationOutcome o = { .transaction = op->transaction, .cmd = op->cmd, .task = op->task,
                               .version = op->version, .r = r, .error = r < 0 ? tp_error_message(&op->err, r) : NULL,
                               .on_trial = on_trial };
        for (size_t i = 0; i < m->n_sources; i++)
                if (m->sources[i].source->operation_done)
                        m->sources[i].source->operation_done(m->sources[i].userdata, &o);
}

void manager_sources_trial_done(Manager *m, const char *transaction, bool committed, const char *reason) {
        for (size_t i = 0; i < m->n_sources; i++)
                if (m->sources[i].source->trial_done)
                        m->sources[i].source->trial_done(m->sources[i].userdata, transaction, committed, reason);
}

void manager_sources_idle(Manager *m) {
        for (size_t i = 0; i < m->n_sources; i++)
                if (m->sources[i].source->idle)
                        m->sources[i].source->idle(m->sources[i].userdata);
}

void manager_init_host(Manager *m) {
        m->host = (SourceHost) {
                .can_start = host_can_start,
                .submit_install = host_submit_install,
                .submit_switch = host_submit_switch,
                .device = host_device,
                .revocations = host_revocations,
                .trust_root = host_trust_root,
                .take_trust = host_take_trust,
                .newest_installed = host_newest_installed,
                .installed = host_installed,
                .accepted = host_accepted,
                .channel = host_channel,
                .channel_accept_serial = host_channel_accept_serial,
                .dates_now = host_dates_now,
                .emit = host_emit,
                .report_error = host_report_error,
                .userdata = m,
        };
}


