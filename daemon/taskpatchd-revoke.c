/* SPDX-License-Identifier: MIT */
/*
 * Revocation on the device: which installed bundles and which running model a revoked signer
 * made, what replaces the model, and the revocation list a technician gives (`tpctl trust
 * update`). The list itself is taskpatchd-trust.c's; its checks are sign.c's.
 */

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "parse.h"
#include "taskpatchd-log.h"
#include "taskpatchd-manager.h"
#include "taskpatchd-models.h"

#define REVOKED_RETRY_USEC (60 * UINT64_C(1000000))

/* Set m->revoked_active from what the active slot holds now: whether it is revoked. */
static bool update_revoked(Manager *m) {
        const Seal *a = &m->seals[m->active];
        const RevokedTask *rt;

        m->revoked_active[0] = '\0';
        if (!m->ps.provisioned || !a->task[0] || !(rt = store_find_revoked(&m->store, a->task, a->version)))
                return false;
        snprintf(m->revoked_active, sizeof(m->revoked_active), "%s v%" PRIu64 " is signed by a revoked signer: %.400s",
                 a->task, a->version, rt->why);
        return true;
}

void manager_check_revoked(Manager *m) {
        if (update_revoked(m))
                manager_want_idle_work(m, 0);
}

/* The newest installed version of @task other than @not that did not fail its trial, or 0. */
static uint64_t replacement_version(const Manager *m, const char *task, uint64_t not) {
        uint64_t best = 0;

        for (size_t i = 0; i < m->store.n; i++) {
                const InstalledTask *t = &m->store.tasks[i];
                if (strcmp(t->task, task) == 0 && t->version != not && t->role == MANIFEST_ROLE_TASK &&
                    !state_failed(&m->ps, t->task, t->version) && t->version > best)
                        best = t->version;
        }
        return best;
}

static bool start_replacement(Manager *m, const char *task, uint64_t version) {
        const Seal *a = &m->seals[m->active];
        Operation *op = NULL;
        const char *code = NULL;
        TpError err = {};
        char what[TP_ERROR_MAX];

        if (switch_new(m, task, version, &op, &code, &err) < 0 || !op) {
                if (op)
                        operation_free(op);
                mlog_warning(m, "cannot replace the revoked %s v%" PRIu64 " with %s v%" PRIu64 ": %s", a->task,
                             a->version, task ? task : "the base", version, err.message[0] ? err.message :
                             "it is what runs");
                return false;
        }
        snprintf(what, sizeof(what), "%.440s: replaced by %s v%" PRIu64 " through a trial", m->revoked_active,
                 task ? task : "the base", version);
        mlog_warning(m, "%s", what);
        manager_record(m, "revoked", "refused", true, what);
        json_t *ev = json_pack("{s:s, s:s, s:I, s:s, s:o, s:I}", "event", "revoked", "task", a->task, "version",
                               (json_int_t) a->version, "reason", m->revoked_active, "replacement",
                               task ? json_string(task) : json_null(), "replacement_version", (json_int_t) version);
        op->origin = ORIGIN_DAEMON;    /* not a technician's choice: the channel's task is not pinned */
        manager_start(m, op, NULL, false);
        manager_emit(m, m->op == op ? op->transaction : NULL, ev);
        return true;
}

bool manager_replace_revoked(Manager *m) {
        uint64_t now = 0;

        /* What runs may have changed since it was found revoked (the replacement is on trial now). */
        if (!update_revoked(m))
                return false;
        if (m->op && m->op->start >= 0)
                return true;                    /* its end asks again */
        (void) manager_stop_background(m);      /* a scrub or re-provisioning waits for this */
        if (manager_on_trial(m)) {
                char why[TP_ERROR_MAX];
                snprintf(why, sizeof(why), "%s", m->revoked_active);
                (void) manager_trial_rollback(m, why, true);
                return true;            /* the rollback asks for the idle work again: the committed one next */
        }
        if (!manager_can_start(m))
                return true;                    /* a peer's operation, a blocked write: their end asks again */
        (void) sd_event_now(m->event, CLOCK_BOOTTIME, &now);
        if (m->revoked_tried_usec && now < m->revoked_tried_usec + REVOKED_RETRY_USEC) {
                manager_want_idle_work(m, m->revoked_tried_usec + REVOKED_RETRY_USEC - now);
                return true;
        }
        m->revoked_tried_usec = now;
        const Seal *a = &m->seals[m->active];
        char task[TASK_NAME_MAX + 1];
        uint64_t revoked = a->version;
        snprintf(task, sizeof(task), "%s", a->task);
        uint64_t v = replacement_version(m, task, revoked);
        if (v && start_replacement(m, task, v))
                return true;
        if (start_replacement(m, NULL, 0))
                return true;
        manager_want_idle_work(m, REVOKED_RETRY_USEC);
        return true;
}

/* ---- tpctl trust update: the revocation list from a technician ---- */

static int read_fd(int fd, uint8_t **ret, size_t *ret_len, TpError *err) {
        _cleanup_free_ uint8_t *buf = malloc(REVOCATIONS_MAX_FILE + 1);
        size_t len = 0;
        ssize_t n;

        if (!buf)
                return -ENOMEM;
        while (len <= REVOCATIONS_MAX_FILE && (n = pread(fd, buf + len, REVOCATIONS_MAX_FILE + 1 - len, (off_t) len)) != 0) {
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return tp_error(err, negative_errno(), "the file: %s", strerror(errno));
                len += (size_t) n;
        }
        if (len > REVOCATIONS_MAX_FILE)
                return tp_error(err, -EFBIG, "the file: larger than a revocation list can be (%u bytes)",
                                (unsigned) REVOCATIONS_MAX_FILE);
        *ret = TAKE_PTR(buf);
        *ret_len = len;
        return 0;
}

/* Every model lists its bundles again and replaces what the list revokes. */
static void trust_changed(Manager *m) {
        for (size_t i = 0; i < m->n_peers; i++) {
                Manager *p = m->peers[i];
                _cleanup_free_ char *tasks = NULL;
                /* A copy: the scan frees the store's own before it starts. */
                if (asprintf(&tasks, "%s/tasks", p->config->state_dir) < 0 || manager_scan_store(p, tasks, NULL) < 0)
                        mlog_warning(p, "cannot list the installed bundles in %s/tasks", p->config->state_dir);
                for (size_t j = 0; j < p->store.n_revoked; j++)
                        mlog_warning(p, "%s v%" PRIu64 ": %s", p->store.revoked[j].task, p->store.revoked[j].version,
                                     p->store.revoked[j].why);
        }
}

int manager_take_trust(Manager *m, const uint8_t *data, size_t len, const char *what, TpError *err) {
        bool root;
        time_t now;
        int r;

        if (!m->trust)
                return tp_error(err, -EOPNOTSUPP, "%s: this daemon keeps no revocation list", what);
        if ((r = manager_dates_now(m, &now, err)) < 0 ||
            (r = trust_store_update(m->trust, m->config, now, data, len, what, &root, err)) <= 0)
                return r;
        if (root) {
                const TrustRoot *t = m->trust->root;
                log_notice("trust root version %" PRIu64 " accepted from %s: root %u of %zu CA%s, bundle %u of %zu, "
                           "channel %u of %zu", t->version, what, t->roles[TRUST_ROLE_ROOT].threshold,
                           t->roles[TRUST_ROLE_ROOT].n_certs, t->roles[TRUST_ROLE_ROOT].n_certs == 1 ? "" : "s",
                           t->roles[TRUST_ROLE_BUNDLE].threshold, t->roles[TRUST_ROLE_BUNDLE].n_certs,
                           t->roles[TRUST_ROLE_CHANNEL].threshold, t->roles[TRUST_ROLE_CHANNEL].n_certs);
        } else
                log_notice("revocation list version %" PRIu64 " accepted from %s (%zu entries)",
                           m->trust->list->version, what, m->trust->list->n);
        trust_changed(m);
        return 1;
}

void models_trust_update(Models *s, Client *c, int passed) {
        _cleanup_free_ uint8_t *data = NULL;
        _cleanup_close_ int fd = passed;        /* taken */
        TpError err = {};
        size_t len = 0;
        int r;

        if (fd < 0) {
                client_reply_error(c, "usage", "trust-update: pass the file's descriptor (tpctl trust update FILE)");
                return;
        }
        if ((r = read_fd(fd, &data, &len, &err)) < 0 ||
            (r = manager_take_trust(s->managers[0], data, len, "the file", &err)) < 0) {
                client_reply_error(c, r == -ENOMEM || r == -EIO || r == -ENOSPC ? "io" : "refused", "%s",
                                   tp_error_message(&err, r));
                return;
        }
        size_t revoked = 0;
        for (size_t i = 0; i < s->n; i++)
                revoked += s->managers[i]->store.n_revoked;
        bool root = len >= sizeof(TRUST_ROOT_MAGIC) && memcmp(data, TRUST_ROOT_MAGIC, sizeof(TRUST_ROOT_MAGIC)) == 0;
        if (root)
                client_reply(c, json_pack("{s:s, s:I, s:b, s:I}", "kind", "root", "version",
                                          (json_int_t) s->trust.root->version, "changed", r > 0, "revoked_bundles",
                                          (json_int_t) revoked));
        else
                client_reply(c, json_pack("{s:s, s:I, s:I, s:b, s:I}", "kind", "revocations", "version",
                                          (json_int_t) s->trust.list->version, "entries", (json_int_t) s->trust.list->n,
                                          "changed", r > 0, "revoked_bundles", (json_int_t) revoked));
}

json_t *trust_status_json(const Manager *m) {
        const Revocations *rl = trust_store_list(m->trust);
        char created[21];
        json_t *o = json_object();

        if (rl) {
                format_time_utc(rl->created, created);
                json_object_set_new(o, "revocations", json_pack("{s:I, s:s, s:I}", "version", (json_int_t) rl->version,
                                                                "created", created, "entries", (json_int_t) rl->n));
        } else
                json_object_set_new(o, "revocations", json_null());
        const TrustRoot *t = m->trust ? m->trust->root : NULL;
        if (t) {
                char expires[21];
                format_time_utc(t->created, created);
                format_time_utc(t->expires, expires);
                time_t now = clock_wall();
                json_object_set_new(o, "root", json_pack("{s:I, s:s, s:s, s:b}", "version", (json_int_t) t->version,
                                                         "created", created, "expires", expires, "expired",
                                                         now > 0 && (int64_t) now > t->expires));
        } else
                json_object_set_new(o, "root", json_null());
        json_object_set_new(o, "crl", m->config->trust.crl ? json_string(m->config->trust.crl) : json_null());
        json_object_set_new(o, "revoked_active", m->revoked_active[0] ? json_string(m->revoked_active) : json_null());
        return o;
}
