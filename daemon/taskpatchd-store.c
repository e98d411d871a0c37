/* SPDX-License-Identifier: MIT */

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bundle.h"
#include "fileio.h"
#include "jsonline.h"
#include "taskpatchd-store.h"
#include "yaml-doc.h"

#define STATE_FORMAT 1
#define STATE_MAX_BYTES (64u << 10)

/* ---- the state file ---- */

static json_t *task_refs_json(const TaskRef *refs, size_t n) {
        json_t *a = json_array();
        for (size_t i = 0; i < n; i++)
                json_array_append_new(a, json_pack("{s:o, s:I}", "task",
                                                   refs[i].task[0] ? json_string(refs[i].task) : json_null(),
                                                   "version", (json_int_t) refs[i].version));
        return a;
}

static json_t *base_json(const BaseInfo *b) {
        json_t *o = json_pack("{s:o, s:I, s:o, s:s, s:I, s:o}", "sha256", json_sha256(b->sha256), "size",
                              (json_int_t) b->size, "layout", json_sha256(b->layout), "kind",
                              artifact_kind_to_string(b->kind), "chunk_size", (json_int_t) b->chunk_size,
                              "chunk_root", json_sha256(b->chunk_root));
        /* Only a directory model says so: a one-file device's state reads as it always did. */
        if (o && b->directory)
                json_object_set_new(o, "directory", json_true());
        return o;
}

int state_save(const char *path, const PersistentState *s, uint64_t *ret_bytes, TpError *err) {
        json_t *o = json_pack("{s:i, s:b, s:b, s:s}", "format", STATE_FORMAT, "provisioned", s->provisioned,
                              "provisioning", s->provisioning, "committed", slot_id_to_string(s->committed));

        if (!o)
                return -ENOMEM;
        if (s->provisioned || s->provisioning)
                json_object_set_new(o, "base", base_json(&s->base));
        if (s->reprovision)
                json_object_set_new(o, "reprovision", json_true());
        if (s->n_accepted > 0) {
                json_t *acc = json_object();
                for (size_t i = 0; i < s->n_accepted; i++)
                        json_object_set_new(acc, s->accepted[i].task, json_integer((json_int_t) s->accepted[i].version));
                json_object_set_new(o, "accepted", acc);
        }
        if (s->time_floor > 0)
                json_object_set_new(o, "time_floor", json_integer((json_int_t) s->time_floor));
        if (s->have_channel) {
                json_t *ch = json_pack("{s:I}", "serial", (json_int_t) s->channel_serial);
                if (s->pinned)
                        json_object_set_new(ch, "pinned_serial", json_integer((json_int_t) s->pinned_serial));
                json_object_set_new(o, "channel", ch);
        }
        if (s->trial.on)
                json_object_set_new(o, "trial",
                                    json_pack("{s:s, s:o, s:I, s:s, s:I, s:b}", "slot", slot_id_to_string(s->trial.slot),
                                              "task", s->trial.task[0] ? json_string(s->trial.task) : json_null(),
                                              "version", (json_int_t) s->trial.version, "transaction",
                                              s->trial.transaction, "started", (json_int_t) s->trial.started,
                                              "rollback", s->trial.rollback));
        if (s->trial.on && s->trial.new_base)
                json_object_set_new(json_object_get(o, "trial"), "new_base", base_json(&s->trial.base));
        if (s->n_history > 0)
                json_object_set_new(o, "history", task_refs_json(s->history, s->n_history));
        if (s->n_failed > 0)
                json_object_set_new(o, "failed", task_refs_json(s->failed, s->n_failed));
        return json_save_atomic(path, o, JSON_INDENT(2) | JSON_SORT_KEYS, ret_bytes, err);
}

static int get_hex(json_t *o, const char *key, uint8_t ret[SHA256_DIGEST_SIZE]) {
        const char *s = json_string_value(json_object_get(o, key));
        return s ? parse_sha256_hex(s, ret) : -EBADMSG;
}

static int get_uint(json_t *o, const char *key, uint64_t *ret) {
        json_t *v = json_object_get(o, key);
        if (!json_is_integer(v) || json_integer_value(v) < 0)
                return -EBADMSG;
        *ret = (uint64_t) json_integer_value(v);
        return 0;
}

static int parse_accepted(json_t *acc, PersistentState *s) {
        const char *task;
        json_t *v;

        if (!acc)
                return 0;
        if (!json_is_object(acc) || json_object_size(acc) > STATE_MAX_TASKS)
                return -EBADMSG;
        json_object_foreach(acc, task, v) {
                if (!task_name_valid(task) || !json_is_integer(v) || json_integer_value(v) < 0 ||
                    state_accept(s, task, (uint64_t) json_integer_value(v)) < 0)
                        return -EBADMSG;
        }
        return 0;
}

static int parse_task_refs(json_t *a, TaskRef *refs, size_t max, size_t *ret_n) {
        size_t i;
        json_t *v;

        if (!a)
                return 0;
        if (!json_is_array(a) || json_array_size(a) > max)
                return -EBADMSG;
        json_array_foreach(a, i, v) {
                json_t *task = json_object_get(v, "task");
                if (!json_is_object(v) || get_uint(v, "version", &refs[i].version) < 0)
                        return -EBADMSG;
                if (json_is_string(task) && task_name_valid(json_string_value(task)))
                        snprintf(refs[i].task, sizeof(refs[i].task), "%s", json_string_value(task));
                else if (!json_is_null(task))
                        return -EBADMSG;
        }
        *ret_n = json_array_size(a);
        return 0;
}

static int parse_base(json_t *o, BaseInfo *b) {
        if (!json_is_object(o) || get_hex(o, "sha256", b->sha256) < 0 || get_uint(o, "size", &b->size) < 0 ||
            get_hex(o, "layout", b->layout) < 0 || get_uint(o, "chunk_size", &b->chunk_size) < 0 ||
            get_hex(o, "chunk_root", b->chunk_root) < 0)
                return -EBADMSG;
        b->kind = artifact_kind_from_string(json_string_value(json_object_get(o, "kind")));
        if (b->kind < 0)
                return -EBADMSG;
        json_t *dir = json_object_get(o, "directory");
        if (dir && !json_is_boolean(dir))
                return -EBADMSG;
        b->directory = json_is_true(dir);
        return 0;
}

static int parse_state(json_t *o, PersistentState *s) {
        json_t *base = json_object_get(o, "base"), *trial = json_object_get(o, "trial");
        uint64_t format, u = 0;

        if (get_uint(o, "format", &format) < 0 || format != STATE_FORMAT)
                return -EPROTONOSUPPORT;
        s->provisioned = json_is_true(json_object_get(o, "provisioned"));
        s->provisioning = json_is_true(json_object_get(o, "provisioning"));
        s->committed = slot_id_from_string(json_string_value(json_object_get(o, "committed")));
        if (s->committed < 0)
                return -EBADMSG;
        if ((s->provisioned || s->provisioning) && parse_base(base, &s->base) < 0)
                return -EBADMSG;
        json_t *reprovision = json_object_get(o, "reprovision");
        if (reprovision && !json_is_boolean(reprovision))
                return -EBADMSG;
        s->reprovision = json_is_true(reprovision);
        if (json_is_object(trial)) {
                json_t *task = json_object_get(trial, "task");
                const char *tx = json_string_value(json_object_get(trial, "transaction"));
                s->trial.on = true;
                s->trial.slot = slot_id_from_string(json_string_value(json_object_get(trial, "slot")));
                if (s->trial.slot < 0 || get_uint(trial, "version", &s->trial.version) < 0 ||
                    get_uint(trial, "started", &u) < 0 || !tx || strlen(tx) >= TRANSACTION_ID_SIZE)
                        return -EBADMSG;
                s->trial.started = (int64_t) u;
                s->trial.rollback = json_is_true(json_object_get(trial, "rollback"));
                json_t *nb = json_object_get(trial, "new_base");
                s->trial.new_base = nb != NULL;
                if (nb && parse_base(nb, &s->trial.base) < 0)
                        return -EBADMSG;
                snprintf(s->trial.transaction, sizeof(s->trial.transaction), "%s", tx);
                if (json_is_string(task)) {
                        if (!task_name_valid(json_string_value(task)))
                                return -EBADMSG;
                        snprintf(s->trial.task, sizeof(s->trial.task), "%s", json_string_value(task));
                } else if (!json_is_null(task))
                        return -EBADMSG;
        } else if (trial && !json_is_null(trial))
                return -EBADMSG;
        if (json_object_get(o, "time_floor") && get_uint(o, "time_floor", &u) < 0)
                return -EBADMSG;
        s->time_floor = json_object_get(o, "time_floor") ? (int64_t) u : 0;
        json_t *ch = json_object_get(o, "channel");
        if (ch) {
                if (!json_is_object(ch) || get_uint(ch, "serial", &s->channel_serial) < 0)
                        return -EBADMSG;
                s->have_channel = true;
                s->pinned = json_object_get(ch, "pinned_serial") != NULL;
                if (s->pinned && get_uint(ch, "pinned_serial", &s->pinned_serial) < 0)
                        return -EBADMSG;
        }
        if (parse_task_refs(json_object_get(o, "history"), s->history, STATE_HISTORY_MAX, &s->n_history) < 0 ||
            parse_task_refs(json_object_get(o, "failed"), s->failed, STATE_FAILED_MAX, &s->n_failed) < 0)
                return -EBADMSG;
        return parse_accepted(json_object_get(o, "accepted"), s);
}

static bool task_ref_is(const TaskRef *r, const char *task, uint64_t version) {
        return strcmp(r->task, task ? task : "") == 0 && r->version == version;
}

static void task_refs_append(TaskRef *refs, size_t max, size_t *n, const char *task, uint64_t version) {
        if (*n == max) {
                memmove(refs, refs + 1, (max - 1) * sizeof(TaskRef));
                (*n)--;
        }
        refs[*n] = (TaskRef) { .version = version };
        snprintf(refs[*n].task, sizeof(refs[*n].task), "%s", task ? task : "");
        (*n)++;
}

void state_committed(PersistentState *s, const char *task, uint64_t version) {
        for (size_t i = 0; i < s->n_failed; i++)
                if (task_ref_is(&s->failed[i], task, version)) {
                        memmove(s->failed + i, s->failed + i + 1, (s->n_failed - i - 1) * sizeof(TaskRef));
                        s->n_failed--;
                        break;
                }
        if (s->n_history > 0 && task_ref_is(&s->history[s->n_history - 1], task, version))
                return;
        task_refs_append(s->history, STATE_HISTORY_MAX, &s->n_history, task, version);
}

const TaskRef *state_previous(const PersistentState *s) {
        return s->n_history >= 2 ? &s->history[s->n_history - 2] : NULL;
}

void state_history_pop(PersistentState *s) {
        if (s->n_history > 0)
                s->n_history--;
}

void state_failed_add(PersistentState *s, const char *task, uint64_t version) {
        if (!state_failed(s, task, version))
                task_refs_append(s->failed, STATE_FAILED_MAX, &s->n_failed, task, version);
}

bool state_failed(const PersistentState *s, const char *task, uint64_t version) {
        for (size_t i = 0; i < s->n_failed; i++)
                if (task_ref_is(&s->failed[i], task, version))
                        return true;
        return false;
}

/* ---- the floor, kept twice ---- */

#define FLOOR_FORMAT 1

char *floor_text(const PersistentState *s) {
        json_t *o = json_pack("{s:i}", "format", FLOOR_FORMAT), *acc = json_object();
        char *text;

        for (size_t i = 0; o && acc && i < s->n_accepted; i++)
                json_object_set_new(acc, s->accepted[i].task, json_integer((json_int_t) s->accepted[i].version));
        json_object_set_new(o, "accepted", acc);
        if (s->have_channel)
                json_object_set_new(o, "channel_serial", json_integer((json_int_t) s->channel_serial));
        if (s->time_floor > 0)
                json_object_set_new(o, "time_floor", json_integer((json_int_t) s->time_floor));
        text = json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS);
        json_decref(o);
        return text;
}

/* Read @path (at most STATE_MAX_BYTES) as one JSON value. */
static int load_json(const char *path, json_t **ret, TpError *err) {
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        _cleanup_free_ char *buf = malloc(STATE_MAX_BYTES + 1);    /* one more: a file of exactly the cap is fine */
        json_error_t je;
        ssize_t n;

        if (fd < 0)
                return tp_error(err, negative_errno(), "%s: %s", path, strerror(errno));
        if (!buf)
                return -ENOMEM;
        n = read(fd, buf, STATE_MAX_BYTES + 1);
        if (n < 0)
                return tp_error(err, negative_errno(), "%s: %s", path, strerror(errno));
        if ((size_t) n > STATE_MAX_BYTES)
                return tp_error(err, -EBADMSG, "%s: larger than %u bytes", path, STATE_MAX_BYTES);
        *ret = json_loadb(buf, (size_t) n, JSON_REJECT_DUPLICATES, &je);
        if (!*ret)
                return tp_error(err, -EBADMSG, "%s: line %d: %s", path, je.line, je.text);
        return 0;
}

int floor_load(const char *path, PersistentState *s, TpError *err) {
        PersistentState f = { 0 };
        uint64_t format, serial;
        json_t *o = NULL;
        int r;

        if ((r = load_json(path, &o, err)) < 0)
                return r;
        r = json_is_object(o) && get_uint(o, "format", &format) == 0 && format == FLOOR_FORMAT
                    ? parse_accepted(json_object_get(o, "accepted"), &f)
                    : -EBADMSG;
        bool have_serial = r == 0 && json_object_get(o, "channel_serial");
        if (have_serial && get_uint(o, "channel_serial", &serial) < 0)
                r = -EBADMSG;
        uint64_t time_floor = 0;
        if (r == 0 && json_object_get(o, "time_floor") && get_uint(o, "time_floor", &time_floor) < 0)
                r = -EBADMSG;
        json_decref(o);
        if (r < 0)
                return tp_error(err, r, "%s: not a floor file this daemon can read", path);
        for (size_t i = 0; i < f.n_accepted; i++)
                if (state_accept(s, f.accepted[i].task, f.accepted[i].version) == -E2BIG)
                        return tp_error(err, -E2BIG, "%s: more than %u tasks", path, STATE_MAX_TASKS);
        if ((int64_t) time_floor > s->time_floor)
                s->time_floor = (int64_t) time_floor;
        if (have_serial && (!s->have_channel || serial > s->channel_serial)) {
                s->have_channel = true;
                s->channel_serial = serial;
        }
        return 0;
}

int state_load(const char *path, PersistentState *ret, TpError *err) {
        PersistentState s = { 0 };
        json_t *o = NULL;
        int r;

        if ((r = load_json(path, &o, err)) < 0)
                return r;
        r = parse_state(o, &s);
        json_decref(o);
        if (r < 0)
                return tp_error(err, r, "%s: %s", path,
                                r == -EPROTONOSUPPORT ? "written by another version (format)" : "not a valid state file");
        *ret = s;
        return 0;
}

static int compare_accepted(const void *a, const void *b) {
        return strcmp(((const AcceptedVersion *) a)->task, ((const AcceptedVersion *) b)->task);
}

static AcceptedVersion *find_accepted(const PersistentState *s, const char *task) {
        AcceptedVersion key = { 0 };
        snprintf(key.task, sizeof(key.task), "%s", task);
        return bsearch(&key, s->accepted, s->n_accepted, sizeof(AcceptedVersion), compare_accepted);
}

uint64_t state_accepted(const PersistentState *s, const char *task) {
        const AcceptedVersion *a = find_accepted(s, task);
        return a ? a->version : 0;
}

void state_accept_undo(PersistentState *s, const char *task, uint64_t before) {
        AcceptedVersion *a = find_accepted(s, task);

        if (!a)
                return;
        if (before) {
                a->version = before;
                return;
        }
        size_t i = (size_t) (a - s->accepted);
        memmove(a, a + 1, (s->n_accepted - i - 1) * sizeof(AcceptedVersion));
        s->n_accepted--;
}

int state_accept(PersistentState *s, const char *task, uint64_t version) {
        AcceptedVersion *a = find_accepted(s, task);

        if (a) {
                if (a->version >= version)
                        return 0;
                a->version = version;
                return 1;
        }
        if (s->n_accepted >= STATE_MAX_TASKS)
                return -E2BIG;
        a = &s->accepted[s->n_accepted++];
        snprintf(a->task, sizeof(a->task), "%s", task);
        a->version = version;
        qsort(s->accepted, s->n_accepted, sizeof(AcceptedVersion), compare_accepted);
        return 1;
}

/* ---- installed bundles ---- */

void store_done(Store *s) {
        for (size_t i = 0; i < s->n; i++)
                free(s->tasks[i].path);
        for (size_t i = 0; i < s->n_stranded; i++)
                free(s->stranded[i]);
        free(s->stranded);
        free(s->revoked);
        free(s->tasks);
        free(s->dir);
        *s = (Store) { 0 };
}

static int compare_tasks(const void *a, const void *b) {
        const InstalledTask *x = a, *y = b;
        int c = strcmp(x->task, y->task);
        return c ? c : (x->version > y->version) - (x->version < y->version);
}

int store_add(Store *s, const Manifest *m, const char *path, uint64_t bundle_size, const char *signer) {
        InstalledTask t = { .version = m->version, .bundle_size = bundle_size, .created = m->created,
                            .role = m->role };

        for (size_t i = 0; i < s->n; i++)
                if (strcmp(s->tasks[i].task, m->task) == 0 && s->tasks[i].version == m->version) {
                        free(s->tasks[i].path);
                        memmove(&s->tasks[i], &s->tasks[i + 1], (s->n - i - 1) * sizeof(InstalledTask));
                        s->n--;
                        break;
                }
        InstalledTask *p = realloc(s->tasks, (s->n + 1) * sizeof(InstalledTask));
        if (!p)
                return -ENOMEM;
        s->tasks = p;
        snprintf(t.task, sizeof(t.task), "%s", m->task);
        snprintf(t.signer, sizeof(t.signer), "%s", signer ? signer : "");
        memcpy(t.target_sha256, m->target.sha256, SHA256_DIGEST_SIZE);
        for (size_t i = 0; i < m->n_spans; i++)
                t.span_bytes += m->spans[i].length;
        t.path = strdup(path);
        if (!t.path)
                return -ENOMEM;
        s->tasks[s->n++] = t;
        qsort(s->tasks, s->n, sizeof(InstalledTask), compare_tasks);
        return 0;
}

char *store_bundle_path(const Store *s, const char *task, uint64_t version) {
        char *p;
        if (asprintf(&p, "%s/%s/%" PRIu64 ".tpb", s->dir, task, version) < 0)
                return NULL;
        return p;
}

static void add_revoked(Store *s, const char *task, uint64_t version, const char *why) {
        RevokedTask *p = realloc(s->revoked, (s->n_revoked + 1) * sizeof(RevokedTask));
        if (!p)
                return;
        s->revoked = p;
        p = &s->revoked[s->n_revoked++];
        snprintf(p->task, sizeof(p->task), "%s", task);
        p->version = version;
        snprintf(p->why, sizeof(p->why), "%s", why);
}

const RevokedTask *store_find_revoked(const Store *s, const char *task, uint64_t version) {
        for (size_t i = 0; i < s->n_revoked; i++)
                if (strcmp(s->revoked[i].task, task) == 0 && s->revoked[i].version == version)
                        return &s->revoked[i];
        return NULL;
}

static void scan_task(Store *s, const char *task, const BundleTrust *scan_trust, const BaseInfo *base,
                      void (*report)(const char *path, const char *why)) {
        _cleanup_free_ char *tdir = NULL;
        DIR *d;
        struct dirent *de;

        if (asprintf(&tdir, "%s/%s", s->dir, task) < 0)
                return;
        d = opendir(tdir);
        if (!d)
                return;
        while ((de = readdir(d))) {
                uint64_t version;
                char num[32];
                size_t len = strlen(de->d_name);
                if (len < 5 || len - 4 >= sizeof(num) || strcmp(de->d_name + len - 4, ".tpb") != 0)
                        continue;
                memcpy(num, de->d_name, len - 4);
                num[len - 4] = 0;
                if (parse_u64(num, &version) < 0)
                        continue;
                _cleanup_free_ char *path = store_bundle_path(s, task, version);
                _cleanup_(bundle_freep) Bundle *b = NULL;
                BundleTrust trust = *scan_trust;
                TpError err = {};
                if (!path)
                        continue;
                int r = bundle_open_verified(path, &trust, &b, &err);
                if (r == -EKEYREVOKED) {
                        if (report)
                                report(path, err.message);
                        size_t skip = strlen(path);     /* the message names the file: the entry says it */
                        bool prefixed = strncmp(err.message, path, skip) == 0 && err.message[skip] == ':';
                        add_revoked(s, task, version, err.message + (prefixed ? skip + 2 : 0));
                        continue;
                }
                if (r < 0) {
                        if (report)
                                report(path, tp_error_message(&err, -EBADMSG));
                        continue;
                }
                if (strcmp(b->manifest->task, task) != 0 || b->manifest->version != version) {
                        if (report)
                                report(path, "its manifest names another task or version than its file name");
                        continue;
                }
                const Manifest *mf = b->manifest;
                bool full_base = mf->role == MANIFEST_ROLE_BASE && mf->base.size == 0;
                /* The base it makes is the base now: nothing to switch to (removed with the old base's). */
                bool made = base && mf->role == MANIFEST_ROLE_BASE &&
                            memcmp(mf->target.sha256, base->sha256, SHA256_DIGEST_SIZE) == 0;
                if (made || (base && !full_base && memcmp(mf->base.sha256, base->sha256, SHA256_DIGEST_SIZE) != 0)) {
                        if (report && !made)
                                report(path, "made for another base (removed once the other slot holds this one)");
                        char **p = realloc(s->stranded, (s->n_stranded + 1) * sizeof(char *));
                        if (p) {
                                s->stranded = p;
                                if ((p[s->n_stranded] = strdup(path)))
                                        s->n_stranded++;
                        }
                        continue;
                }
                if (store_add(s, b->manifest, path, b->file_size, trust.signer) < 0)
                        break;
        }
        closedir(d);
}

int store_remove_stranded(Store *s) {
        int n = 0;

        for (size_t i = 0; i < s->n_stranded; i++) {
                /* Gone for good before anything that follows is announced (a crash may bring it back: harmless). */
                if (unlink(s->stranded[i]) == 0) {
                        int r = fsync_parent_dir(s->stranded[i]);
                        (void) r;       /* not durable yet: a crash brings it back, the next scan strands it again */
                        n++;
                }
                free(s->stranded[i]);
        }
        s->n_stranded = 0;
        return n;
}

int store_scan(Store *s, const char *dir, const BundleTrust *trust, const BaseInfo *base,
               void (*report)(const char *path, const char *why)) {
        DIR *d;
        struct dirent *de;

        store_done(s);
        s->dir = strdup(dir);
        if (!s->dir)
                return -ENOMEM;
        int r = mkdir_durable(dir, 0750);
        if (r < 0)
                return r;
        d = opendir(dir);
        if (!d)
                return negative_errno();
        while ((de = readdir(d)))
                if (task_name_valid(de->d_name))
                        scan_task(s, de->d_name, trust, base, report);
        closedir(d);
        return 0;
}

const InstalledTask *store_find(const Store *s, const char *task, uint64_t version) {
        const InstalledTask *best = NULL;
        for (size_t i = 0; i < s->n; i++)
                if (strcmp(s->tasks[i].task, task) == 0 && (version == 0 || s->tasks[i].version == version))
                        best = &s->tasks[i];    /* sorted: the last match is the newest */
        return best;
}

uint64_t store_newest(const Store *s, const char *task) {
        const InstalledTask *t = store_find(s, task, 0);
        return t ? t->version : 0;
}

int store_remove(Store *s, const char *task, uint64_t version) {
        for (size_t i = 0; i < s->n; i++) {
                InstalledTask *t = &s->tasks[i];
                if (strcmp(t->task, task) != 0 || t->version != version)
                        continue;
                if (unlink(t->path) < 0 && errno != ENOENT)
                        return negative_errno();
                int synced = fsync_parent_dir(t->path);
                (void) synced;  /* not durable yet: a crash brings it back, harmless */
                free(t->path);
                memmove(t, t + 1, (s->n - i - 1) * sizeof(InstalledTask));
                s->n--;
                return 1;
        }
        return 0;
}

int store_gc(Store *s, const char *task, uint64_t keep, bool (*keep_also)(void *userdata, const char *task,
                                                                          uint64_t version), void *userdata) {
        uint64_t seen = 0;
        int removed = 0;

        for (size_t i = s->n; i-- > 0;) {
                InstalledTask *t = &s->tasks[i];
                if (strcmp(t->task, task) != 0)
                        continue;
                if (++seen <= keep || (keep_also && keep_also(userdata, t->task, t->version)))
                        continue;
                if (unlink(t->path) < 0 && errno != ENOENT)
                        continue;
                if (fsync_parent_dir(t->path) < 0) {
                        /* Not durable yet; the next scan lists it again if a crash brings it back. */
                }
                free(t->path);
                memmove(t, t + 1, (s->n - i - 1) * sizeof(InstalledTask));
                s->n--;
                removed++;
        }
        return removed;
}

/* ---- the base's files ---- */

#define BASE_FILES_FORMAT 1

int base_files_save(const char *path, const ManifestFiles *f, TpError *err) {
        json_t *list = json_array(), *o = NULL;
        char h[SHA256_HEX_SIZE];

        for (size_t i = 0; list && i < f->set.n_files; i++) {
                sha256_to_hex(f->sha256[i], h);
                if (json_array_append_new(list, json_pack("{s:s, s:I, s:s}", "path", f->set.files[i].path, "size",
                                                          (json_int_t) f->set.files[i].size, "sha256", h)) < 0) {
                        json_decref(list);
                        return -ENOMEM;
                }
        }
        o = list ? json_pack("{s:i, s:o}", "format", BASE_FILES_FORMAT, "files", list) : NULL;
        return json_save_atomic(path, o, JSON_INDENT(1), NULL, err);
}

int base_files_load_either(const char *path, const char *next_path, const BaseInfo *base, ManifestFiles *ret,
                           TpError *err) {
        TpError ignored = {};
        int r = base_files_load(path, base, ret, err);

        if (r != -EBADMSG && r != -ENOENT)
                return r;
        if (base_files_load(next_path, base, ret, &ignored) < 0)
                return r;
        *err = (TpError) {};
        /* Loaded. A rename or fsync that fails leaves @next_path, which the next start loads again. */
        int put = rename(next_path, path) < 0 ? -errno : fsync_parent_dir(path);
        (void) put;
        return 0;
}

int base_files_load(const char *path, const BaseInfo *base, ManifestFiles *ret, TpError *err) {
        _cleanup_(manifest_files_done) ManifestFiles f = { .set = FILESET_NULL };
        json_error_t je;
        uint8_t d[SHA256_DIGEST_SIZE];
        int r = 0;

        json_t *o = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
        if (!o)
                return tp_error(err, access(path, F_OK) < 0 ? -ENOENT : -EBADMSG, "%s: %s", path, je.text);
        json_t *list = json_object_get(o, "files");
        json_int_t format = json_integer_value(json_object_get(o, "format"));
        size_t n = json_array_size(list);
        if (format != BASE_FILES_FORMAT || n == 0 || n > FILESET_MAX_FILES) {
                r = tp_error(err, -EBADMSG, "%s: not a list of the base's files (format %d)", path, BASE_FILES_FORMAT);
                goto out;
        }
        f.sha256 = calloc(n, SHA256_DIGEST_SIZE);
        if (!f.sha256) {
                r = -ENOMEM;
                goto out;
        }
        for (size_t i = 0; i < n; i++) {
                json_t *e = json_array_get(list, i), *size = json_object_get(e, "size");
                const char *p = json_string_value(json_object_get(e, "path"));
                if (!p || !json_is_integer(size) || json_integer_value(size) < 0 ||
                    get_hex(e, "sha256", f.sha256[i]) < 0 || fileset_add(&f.set, p, (uint64_t) json_integer_value(size)) < 0) {
                        r = tp_error(err, -EBADMSG, "%s: file #%zu: expected a path (in order), a size and a sha256",
                                     path, i);
                        goto out;
                }
        }
        /* The list must be the base the state names: its set digest binds every path, size and byte. */
        fileset_digest(&f.set, (const uint8_t (*)[SHA256_DIGEST_SIZE]) f.sha256, d);
        if (f.set.size != base->size || memcmp(d, base->sha256, SHA256_DIGEST_SIZE) != 0) {
                r = tp_error(err, -EBADMSG, "%s: these files are not the provisioned base", path);
                goto out;
        }
        *ret = f;
        f = (ManifestFiles) { .set = FILESET_NULL };
out:
        json_decref(o);
        return r;
}
