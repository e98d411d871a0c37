/* SPDX-License-Identifier: MIT */
/* Bringing the manager up: paths, the state file, the slots' seals, and the repairs a crash may need. */

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "artifact.h"
#include "atomicdir.h"
#include "fileio.h"
#include "taskpatchd-log.h"
#include "taskpatchd-manager.h"
#include "yaml-doc.h"

static int slot_files_init(Manager *m, SlotId s) {
        const char *mp = m->config->model_path, *slash = strrchr(mp, '/'), *dot = strrchr(mp, '.');
        const char *ext = dot && dot > slash && dot[1] ? dot : "";
        const char *id = slot_id_to_string(s), *dir = m->config->state_dir;
        SlotFiles *f = &m->files[s];

        if (asprintf(&f->file_path, "%s/slots/%s%s", dir, id, ext) < 0 ||
            asprintf(&f->dir_path, "%s/slots/%s.dir", dir, id) < 0 || asprintf(&f->seal, "%s/slots/%s.seal", dir, id) < 0 ||
            asprintf(&f->undo, "%s/slots/%s.undo", dir, id) < 0 || asprintf(&f->chunks, "%s/slots/%s.chunks", dir, id) < 0)
                return -ENOMEM;
        f->path = f->file_path;
        return 0;
}

/*
 * Temporaries a crash left behind in @dir: our own only (atomic_file_is_temporary(), and
 * @link, the name model_path's new symlink is made under). Partial downloads are not ours to
 * touch; in model_path's directory nothing but @link is ours.
 */
static void remove_litter(const char *dir, bool temporaries, const char *link) {
        DIR *d = opendir(dir);
        struct dirent *de;
        int removed = 0;

        if (!d)
                return;
        while ((de = readdir(d))) {
                bool ours = (temporaries && atomic_file_is_temporary(de->d_name)) ||
                            (link && strcmp(de->d_name, link) == 0);
                if (!ours)
                        continue;
                /* A directory model's temporary is a tree. */
                bool tree = de->d_type == DT_DIR;
                _cleanup_free_ char *path = NULL;
                if (tree && asprintf(&path, "%s/%s", dir, de->d_name) < 0)
                        continue;
                if (tree ? remove_tree(path) == 0 : unlinkat(dirfd(d), de->d_name, 0) == 0) {
                        log_info("removed %s/%s, left by an interrupted write", dir, de->d_name);
                        removed++;
                }
        }
        if (removed)
                (void) fsync(dirfd(d));
        closedir(d);
}

static void remove_all_litter(Manager *m) {
        char *p;
        DIR *d;
        struct dirent *de;

        remove_litter(m->config->state_dir, true, NULL);
        if (asprintf(&p, "%s/slots", m->config->state_dir) >= 0) {
                remove_litter(p, true, NULL);
                free(p);
        }
        _cleanup_free_ char *mp = strdup(m->config->model_path), *link = NULL;
        char *slash = mp ? strrchr(mp, '/') : NULL;
        if (slash && asprintf(&link, ".%s" MODEL_PATH_LINK_SUFFIX, slash + 1) >= 0) {
                *slash = 0;
                remove_litter(mp[0] ? mp : "/", false, link);
        }
        if (asprintf(&p, "%s/tasks", m->config->state_dir) < 0)
                return;
        d = opendir(p);
        while (d && (de = readdir(d))) {
                char *t;
                if (de->d_name[0] != '.' && asprintf(&t, "%s/%s", p, de->d_name) >= 0) {
                        remove_litter(t, true, NULL);
                        free(t);
                }
        }
        if (d)
                closedir(d);
        free(p);
}

/* Which slot model_path points at, or -ENOENT / -EINVAL (it points elsewhere or is not a symlink). */
static int read_model_path(Manager *m, SlotId *ret) {
        char target[4096];
        ssize_t n = readlink(m->config->model_path, target, sizeof(target) - 1);

        if (n < 0)
                return errno == EINVAL ? -EINVAL : negative_errno();
        target[n] = 0;
        for (SlotId s = 0; s < _SLOT_ID_MAX; s++)
                if (strcmp(target, m->files[s].path) == 0) {
                        *ret = s;
                        return 0;
                }
        return -EINVAL;
}

/*
 * state.json is missing or damaged: say again what the device holds from what cannot lie
 * about it -- model_path's symlink and the slots' seals (each checked against its file) --
 * and the installed bundles (store_scan later). 1 when rebuilt, 0 when there is nothing to
 * rebuild from (a fresh device). The floor comes from floor.json (the caller's job).
 */
static int rebuild_state(Manager *m) {
        SlotId link = _SLOT_ID_INVALID;
        PersistentState ps = { 0 };

        /* Unprovisioned as far as memory knows: manager_check_slot() compares no base yet. */
        struct stat st;
        for (SlotId s = 0; s < _SLOT_ID_MAX; s++)
                if (lstat(m->files[s].dir_path, &st) == 0 && S_ISDIR(st.st_mode))
                        ps.base.directory = true;       /* slots of a directory model */
        m->ps.base.directory = ps.base.directory;
        manager_use_slot_kind(m, ps.base.directory);
        for (SlotId s = 0; s < _SLOT_ID_MAX; s++)
                manager_check_slot(m, s);
        if (read_model_path(m, &link) < 0 || !m->sealed[link])
                return 0;
        const Seal *a = &m->seals[link];
        ps.provisioned = true;
        ps.committed = link;
        ps.base = (BaseInfo) { .size = a->size, .directory = ps.base.directory };
        memcpy(ps.base.sha256, a->base_sha256, SHA256_DIGEST_SIZE);
        memcpy(ps.base.layout, a->base_layout, SHA256_DIGEST_SIZE);
        /* A slot that holds the base itself gives its chunk table; otherwise switches back verify in full. */
        for (SlotId s = 0; s < _SLOT_ID_MAX; s++)
                if (m->sealed[s] && !m->seals[s].task[0] &&
                    memcmp(m->seals[s].base_sha256, a->base_sha256, SHA256_DIGEST_SIZE) == 0) {
                        ps.base.chunk_size = m->seals[s].chunk_size;
                        memcpy(ps.base.chunk_root, m->seals[s].chunk_root, SHA256_DIGEST_SIZE);
                }
        _cleanup_(artifact_freep) Artifact *art = NULL;
        _cleanup_(fileset_done) FileSet set = FILESET_NULL;
        TpError ignored = {};
        if (manager_open_slot(m, link, O_RDONLY, &set, NULL, &ignored) < 0 || artifact_open_set(&set, &art, &ignored) < 0)
                return 0;
        ps.base.kind = art->kind;
        /* A directory base's size and files: base-files.json outlives state.json (it is checked against the seal). */
        if (ps.base.directory) {
                manifest_files_done(&m->base_files);
                ps.base.size = 0;
                for (SlotId s = 0; s < _SLOT_ID_MAX; s++)
                        if (m->sealed[s] && !m->seals[s].task[0])
                                ps.base.size = m->seals[s].size;
                if (ps.base.size == 0 || base_files_load_either(m->base_files_path, m->base_files_next_path, &ps.base,
                                                                &m->base_files, &ignored) < 0)
                        return 0;
        }
        state_committed(&ps, a->task, a->version);
        m->ps = ps;
        return 1;
}

static void report_bundle(const char *path, const char *why) {
        log_warning("ignoring %s: %s", path, why);
}

static int on_startup_notify(sd_event_source *s, void *userdata) {
        Manager *m = userdata;
        (void) s;

        if (m->startup_slot_changed)
                notifier_slot_changed(m->notifier, m->startup_slot_changed);
        json_decref(m->startup_slot_changed);
        m->startup_slot_changed = NULL;
        return 0;
}

/*
 * A rollback at start-up happens before the socket listens: the events a
 * service would have seen are kept for the first subscriber (after its
 * snapshot), with the time they happened.
 */
static void announce_rollback(Manager *m, const TrialInfo *t, const char *reason) {
        char time[21];

        format_time_utc((int64_t) clock_wall(), time);
        json_decref(m->startup_events);
        json_decref(m->startup_slot_changed);
        m->startup_slot_changed = NULL;
        m->notify_source = sd_event_source_disable_unref(m->notify_source);
        json_t *changed = manager_slot_changed_event(m, "rollback");
        json_t *back = json_pack("{s:s, s:o, s:I, s:s, s:s}", "event", "rolled-back", "task",
                                 t->task[0] ? json_string(t->task) : json_null(), "version", (json_int_t) t->version,
                                 "slot", slot_id_to_string(m->active), "reason", reason);
        m->startup_events = json_array();
        json_array_append_new(m->startup_events, changed);      /* NULL-safe: then nothing is added */
        json_array_append_new(m->startup_events, back);
        for (size_t i = 0; i < json_array_size(m->startup_events); i++) {
                json_t *ev = json_array_get(m->startup_events, i);
                json_object_set_new(ev, "time", json_string(time));
                json_object_set_new(ev, "transaction", json_string(t->transaction));
        }
        /* Units and the command are told too, once the loop runs (the notifier exists by then). */
        if (m->startup_events && !m->notify_source &&
            sd_event_add_defer(m->event, &m->notify_source, on_startup_notify, m) >= 0) {
                (void) sd_event_source_set_enabled(m->notify_source, SD_EVENT_ONESHOT);
                (void) sd_event_source_set_description(m->notify_source, "startup-notify");
                m->startup_slot_changed = json_incref(json_array_get(m->startup_events, 0));
        }
}

/* After a crash or a power cut: make the state agree with the symlink, finish or undo what was cut short. */
static int repair(Manager *m, TpError *err) {
        SlotId link = _SLOT_ID_INVALID;
        int r;

        if (m->ps.provisioning) {
                mlog_warning(m, "a provisioning was interrupted: provision the base model again");
                /* The floor outlives a base (provision_commit() keeps it too). */
                PersistentState fresh = { .n_accepted = m->ps.n_accepted, .have_channel = m->ps.have_channel,
                                          .channel_serial = m->ps.channel_serial, .time_floor = m->ps.time_floor };
                memcpy(fresh.accepted, m->ps.accepted, sizeof(fresh.accepted));
                m->ps = fresh;
                return manager_save_state(m, err);
        }
        if (!m->ps.provisioned)
                return 0;
        for (SlotId s = 0; s < _SLOT_ID_MAX; s++)
                manager_check_slot(m, s);

        r = read_model_path(m, &link);
        if (r < 0) {
                SlotId c = m->ps.committed;
                mlog_warning(m, "%s does not point at a slot: pointing it at the committed slot %s",
                             m->config->model_path, slot_id_to_string(c));
                if ((r = manager_point_model_path(m, c, err)) < 0)
                        return r;
                link = c;
        }
        m->active = link;

        if (m->ps.trial.on) {
                TrialInfo t = m->ps.trial;
                m->ps.trial.on = false;
                if (t.new_base)
                        manager_check_slot(m, t.slot);  /* the new base's slot is of another base now */
                if (link == t.slot && link != m->ps.committed) {
                        mlog_warning(m,
                                     "the daemon stopped while %s v%" PRIu64 " was on trial: rolling back to slot %s",
                                     t.task[0] ? t.task : "the base", t.version, slot_id_to_string(m->ps.committed));
                        if ((r = manager_point_model_path(m, m->ps.committed, err)) < 0)
                                return r;
                        char h[SHA256_HEX_SIZE], why[TP_ERROR_MAX];
                        const char *reason = "the daemon restarted during its trial";
                        sha256_to_hex(m->seals[t.slot].sha256, h);
                        log_lifecycle(m->model, m->log_prefix, "rolled-back", t.task, (unsigned long long) t.version,
                                      slot_id_to_string(m->ps.committed), h, t.transaction, reason);
                        snprintf(why, sizeof(why), "%s v%" PRIu64 " rolled back: %s", t.task[0] ? t.task : "base",
                                 t.version, reason);
                        manager_record(m, "rolled-back", "rolled-back", true, why);
                        state_failed_add(&m->ps, t.task, t.version);
                        announce_rollback(m, &t, reason);
                }
                if ((r = manager_save_state(m, err)) < 0)
                        return r;
        } else if (link != m->ps.committed) {
                mlog_warning(m, "the state said slot %s, %s points at slot %s: the symlink wins",
                             slot_id_to_string(m->ps.committed), m->config->model_path, slot_id_to_string(link));
                m->ps.committed = link;
                if ((r = manager_save_state(m, err)) < 0)
                        return r;
        }
        if (!m->sealed[m->active])
                mlog_warning(m, "the active slot %s is not the file that was sealed: verifying it in full",
                             slot_id_to_string(m->active));
        return 0;
}

static int schedule_write_retry(Manager *m);

static int on_write_retry(sd_event_source *s, uint64_t usec, void *userdata) {
        Manager *m = userdata;
        TpError err = {};
        (void) s;
        (void) usec;

        m->retry_timer = sd_event_source_disable_unref(m->retry_timer);
        m->ps = m->loaded;              /* the repair again from the start: it is idempotent from there */
        int r = repair(m, &err);
        if (r < 0) {
                mlog_debug(m, "still cannot write: %s", err.message);
                (void) schedule_write_retry(m);
                return 0;
        }
        m->write_error = 0;
        mlog_notice(m, "the state directory is writable again: repaired, changes are accepted");
        manager_record(m, "repaired", NULL, false, "the state directory is writable again");
        manager_send_status(m);
        manager_sources_idle(m);        /* a bundle waiting in the spool may go in now */
        manager_want_idle_work(m, 0);
        return 0;
}

static int schedule_write_retry(Manager *m) {
        int r = sd_event_add_time_relative(m->event, &m->retry_timer, CLOCK_BOOTTIME, 2 * UINT64_C(1000000), 0,
                                           on_write_retry, m);
        if (r >= 0)
                (void) sd_event_source_set_description(m->retry_timer, "write-retry");
        return r;
}

static int on_lease_break(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata) {
        Manager *m = userdata;
        (void) s;

        mlog_warning(m, "another process opened the slot being staged (fd %d): abandoning it", (int) si->ssi_fd);
        m->lease_broken = true;
        /* Let the opener in at once: it must not wait for the lease-break timeout. */
        file_lease_release((int) si->ssi_fd);
        return 0;
}

int manager_new(sd_event *e, const DaemonConfig *config, TrustStore *trust, Manager **ret, TpError *err) {
        _cleanup_(manager_freep) Manager *m = calloc(1, sizeof(*m));
        char *slots;
        int r;

        if (!m)
                return -ENOMEM;
        m->trust = trust;
        m->lock_fd = -1;
        m->event = sd_event_ref(e);
        m->config = config;
        m->model = config->model ? config->model : MANIFEST_DEFAULT_MODEL;
        if (config->n_models > 1)
                snprintf(m->log_prefix, sizeof(m->log_prefix), "[%s] ", m->model);
        machine_init(&m->machine, STATE_UNPROVISIONED, NULL, NULL);
        if (asprintf(&m->state_path, "%s/state.json", config->state_dir) < 0 ||
            asprintf(&m->floor_path, "%s/floor.json", config->state_dir) < 0 ||
            asprintf(&m->base_files_path, "%s/base-files.json", config->state_dir) < 0 ||
            asprintf(&m->base_files_next_path, "%s/base-files.next.json", config->state_dir) < 0)
                return -ENOMEM;
        for (SlotId s = 0; s < _SLOT_ID_MAX; s++)
                if ((r = slot_files_init(m, s)) < 0)
                        return r;
        /* Durable entries: the state file, the slots and the symlink are all named through them. */
        if ((r = mkdir_durable(config->state_dir, 0750)) < 0)
                return tp_error(err, r, "%s: %s", config->state_dir, strerror(-r));
        /* First of all: nothing in the state directory is touched while another daemon owns it. */
        {
                _cleanup_free_ char *lock = NULL;
                if (asprintf(&lock, "%s/taskpatchd.lock", config->state_dir) < 0)
                        return -ENOMEM;
                m->lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
                if (m->lock_fd < 0)
                        return tp_error(err, negative_errno(), "%s: %s", lock, strerror(errno));
                if (flock(m->lock_fd, LOCK_EX | LOCK_NB) < 0)
                        return tp_error(err, errno == EWOULDBLOCK ? -EBUSY : negative_errno(),
                                        "%s is in use by another taskpatchd (%s)", config->state_dir, lock);
        }
        if (asprintf(&slots, "%s/slots", config->state_dir) < 0)
                return -ENOMEM;
        r = mkdir_durable(slots, 0755);
        free(slots);
        if (r < 0)
                return tp_error(err, r, "%s/slots: %s", config->state_dir, strerror(-r));

        m->lease_signal = SIGRTMIN + 4 + (int) config->model_index;    /* one per model: 4 + 16 <= 30 */
        sigset_t mask;
        sigemptyset(&mask);
        sigaddset(&mask, m->lease_signal);
        (void) sigprocmask(SIG_BLOCK, &mask, NULL);
        r = sd_event_add_signal(e, &m->lease_source, m->lease_signal, on_lease_break, m);
        if (r < 0)
                return tp_error(err, r, "cannot watch for lease breaks: %s", strerror(-r));
        (void) sd_event_source_set_description(m->lease_source, "lease-break");

        remove_all_litter(m);
        r = state_load(m->state_path, &m->ps, err);
        if (r == -ENOENT || r == -EBADMSG) {
                bool damaged = r == -EBADMSG;
                char why[TP_ERROR_MAX];
                snprintf(why, sizeof(why), "%s", damaged ? err->message : "state.json is missing");
                *err = (TpError) { 0 };
                if (damaged) {
                        /* Kept for whoever looks into it; nothing is lost. */
                        _cleanup_free_ char *aside = NULL;
                        if (asprintf(&aside, "%s.damaged", m->state_path) < 0)
                                return -ENOMEM;
                        (void) rename(m->state_path, aside);
                }
                if (rebuild_state(m) > 0) {
                        mlog_warning(m, "%s: rebuilt from %s, the slots' seals and the installed bundles", why,
                                     config->model_path);
                        manager_record(m, "error", "io", true, "state.json was rebuilt: it was missing or damaged");
                } else if (damaged)
                        mlog_warning(m,
                                     "%s (moved to state.json.damaged): nothing to rebuild it from: waiting to be "
                                     "provisioned",
                                     why);
                else
                        mlog_info(m, "no state yet in %s: waiting to be provisioned", config->state_dir);
        } else if (r < 0)
                return r;
        manager_use_slot_kind(m, m->ps.base.directory);
        if ((m->ps.provisioned || m->ps.provisioning) && m->ps.base.directory && !m->base_files.set.n_files &&
            (r = base_files_load_either(m->base_files_path, m->base_files_next_path, &m->ps.base, &m->base_files,
                                        err)) < 0) {
                /* The slots cannot be checked without it: what they hold is provisioned again. */
                mlog_error(m, "%s: provision the base model again", err->message);
                manager_record(m, "error", "io", true, err->message);
                m->ps.provisioned = false;
                m->ps.provisioning = true;
                *err = (TpError) { 0 };
        }
        r = floor_load(m->floor_path, &m->ps, err);
        if (r < 0 && r != -ENOENT)
                mlog_warning(m, "%s (the floor in state.json is used)", err->message);
        *err = (TpError) { 0 };
        m->loaded = m->ps;
        r = repair(m, err);
        if (r == -ENOSPC || r == -EDQUOT || r == -EROFS) {
                /* Serve status and refuse writes until the repair can be made (retried every few seconds). */
                mlog_error(m, "%s: the daemon serves status only and refuses changes until this is fixed",
                           err->message);
                manager_record(m, "error", "no-space", true, err->message);
                m->write_error = r;
                *err = (TpError) { 0 };
                if ((r = schedule_write_retry(m)) < 0)
                        return tp_error(err, r, "cannot schedule the retry: %s", strerror(-r));
        } else if (r < 0)
                return r;
        else if (m->ps.provisioned && (r = manager_save_state(m, err)) < 0) {
                /* The floor file may be new (an upgrade): write it now, not at the next change. */
                mlog_warning(m, "%s (written at the next change)", err->message);
                *err = (TpError) { 0 };
        }
        {
                char *tasks;
                if (asprintf(&tasks, "%s/tasks", config->state_dir) < 0)
                        return -ENOMEM;
                r = manager_scan_store(m, tasks, report_bundle);
                free(tasks);
                if (r < 0)
                        return tp_error(err, r, "%s/tasks: %s", config->state_dir, strerror(-r));
        }
        manager_init_state(m, m->ps.provisioned ? STATE_IDLE : STATE_UNPROVISIONED);
        manager_init_host(m);
        /* A full verification now when the active slot's seal did not hold, else every scrub_interval hours. */
        if (m->ps.provisioned && !m->sealed[m->active])
                r = manager_schedule_scrub(m, 1);
        else if (config->scrub_interval > 0)
                r = manager_schedule_scrub(m, config->scrub_interval * 3600 * UINT64_C(1000000));
        if (r < 0)
                return tp_error(err, r, "cannot schedule the scrub: %s", strerror(-r));
        manager_want_idle_work(m, 0);         /* a base change whose other slot is not re-provisioned yet */
        if (m->ps.provisioned)
                mlog_info(m, "slot %s active: %s v%" PRIu64 ", %zu installed bundle(s)", slot_id_to_string(m->active),
                          m->seals[m->active].task[0] ? m->seals[m->active].task : "base", m->seals[m->active].version,
                          m->store.n);
        *ret = TAKE_PTR(m);
        return 0;
}

void manager_set_server(Manager *m, Server *s) {
        m->server = s;
}

Manager *manager_free(Manager *m) {
        if (!m)
                return NULL;
        m->notifier = notifier_free(m->notifier);
        if (m->op) {
                /* Stopping mid-operation: the slot stays dirty and is redone when next needed. */
                if (m->op->free_data)
                        m->op->free_data(m->op->data);
                client_unref(m->op->client);
                free(m->op);
        }
        sd_event_source_disable_unref(m->op_source);
        sd_event_source_disable_unref(m->trial_timer);
        sd_event_source_disable_unref(m->probe_timer);
        sd_event_source_disable_unref(m->scrub_timer);
        sd_event_source_disable_unref(m->lease_source);
        health_check_free(m->health);
        client_unref(m->trial_client);
        json_decref(m->startup_events);
        json_decref(m->startup_slot_changed);
        sd_event_source_disable_unref(m->notify_source);
        sd_event_source_disable_unref(m->reprovision_source);
        store_done(&m->store);
        for (SlotId s = 0; s < _SLOT_ID_MAX; s++) {
                free(m->files[s].file_path);
                free(m->files[s].dir_path);
                free(m->files[s].seal);
                free(m->files[s].undo);
                free(m->files[s].chunks);
        }
        free(m->state_path);
        free(m->floor_path);
        free(m->base_files_path);
        free(m->base_files_next_path);
        manifest_files_done(&m->base_files);
        free(m->floor_written);
        sd_event_source_disable_unref(m->retry_timer);
        safe_close(m->lock_fd);
        sd_event_unref(m->event);
        free(m);
        return NULL;
}
