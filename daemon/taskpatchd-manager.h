/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The update manager. One Manager per daemon: it owns the slots, the
 * persistent state, the installed bundles, the running operation and the
 * trial, answers the socket's requests, and tells subscribers what happens.
 * Its state changes only through manager_fire(), which the table in
 * taskpatchd-machine.c checks.
 *
 * Long operations (provision, install, switch) run in slices from a
 * low-priority event source, so requests are answered between slices.
 * Files:
 *   taskpatchd-machine.c    the state machine's table
 *   taskpatchd-manager.c    state, events, the operation runner, mark-good and rollback requests
 *   taskpatchd-trial.c      activation, the trial (timer, health checks), commit and rollback
 *   taskpatchd-startup.c    manager_new(): loading and repairing the state at start
 *   taskpatchd-requests.c   the socket requests and the status
 *   taskpatchd-provision.c  provision and install
 *   taskpatchd-switch.c     staging a task into the inactive slot
 *   taskpatchd-scrub.c      the periodic full verification of both slots
 *   taskpatchd-host.c       the update sources' host (taskpatchd-source.h): what they may
 *                           ask and read, what they are told; the channel's serial and pin
 */

#include <jansson.h>
#include <systemd/sd-event.h>

#include "bundle.h"
#include "config.h"
#include "slot.h"
#include "taskpatchd-fetch.h"
#include "taskpatchd-hawkbit.h"
#include "taskpatchd-notify.h"
#include "taskpatchd-health.h"
#include "taskpatchd-log.h"
#include "taskpatchd-machine.h"
#include "taskpatchd-server.h"
#include "taskpatchd-source.h"
#include "taskpatchd-spool.h"
#include "taskpatchd-store.h"
#include "taskpatchd-trust.h"

#define OPERATION_SLICE (8u << 20)
#define STAGE_SLICE_NS (20u * 1000000)  /* a staging slice of dear windows (predicted lora spans) ends after 20 ms */
#define MODEL_PATH_LINK_SUFFIX ".taskpatchd-new"  /* model_path's new symlink: "." + its name + this, renamed over it */      /* bytes of copying, hashing or staging per event-loop turn */

typedef struct Manager Manager;
typedef struct Operation Operation;

/* A long operation: its step() runs once per loop turn until it returns 0 (done) or < 0 (failed, see err). */
struct Operation {
        Manager *m;
        const char *cmd;                /* "provision", "install", "switch", "rollback", "scrub", "reprovision" */
        UpdateOrigin origin;            /* who asked for it (the socket unless an update source did) */
        ManagerEvent start;             /* fired when it starts (EVENT_PROVISION, ...); _EVENT_INVALID: none (scrub) */
        bool rollback;                  /* a switch back to the previously committed task ('tpctl rollback') */
        char transaction[TRANSACTION_ID_SIZE];
        Client *client;                 /* waiting for the outcome ("wait": true), or NULL */
        const char *phase;              /* for status and staging events: copy, write, verify, ... */
        uint64_t done, total;           /* bytes of this phase */
        char task[TASK_NAME_MAX + 1];   /* what it is about, for events */
        uint64_t version;
        const BaseInfo *new_base;       /* a switch to a new base (a base bundle): that base once staged; else NULL */
        int (*step)(Operation *op);
        void (*free_data)(void *data);
        void *data;
        TpError err;
        const char *err_code;           /* protocol error code when step() fails; NULL: from the errno */
        uint64_t last_event_usec;
};

typedef struct SlotFiles {
        const char *path;               /* the slot: file_path, or dir_path for a directory model */
        char *file_path;                /* <state_dir>/slots/<id><model_path's extension> */
        char *dir_path;                 /* <state_dir>/slots/<id>.dir */
        char *seal, *undo, *chunks;
} SlotFiles;

typedef struct Counters {
        uint64_t switches;
        uint64_t slot_bytes, undo_bytes, state_bytes;
        uint64_t last_switch_slot_bytes;
} Counters;

#define MANAGER_SOURCES_MAX 4

/* An update source told how operations and trials end (taskpatchd-host.c). */
typedef struct RegisteredSource {
        const UpdateSource *source;
        void *userdata;
} RegisteredSource;

/* What happened last, for status: it replaces what came before, errors included. */
typedef struct LastEvent {
        char kind[24];                  /* "committed", "rolled-back", "error", ...; "" = nothing yet */
        char code[16];                  /* the protocol error code of an error, else "" */
        char reason[TP_ERROR_MAX];
        int64_t time;
        bool failure;                   /* an update failed: also shown as last_error */
} LastEvent;

struct Manager {
        sd_event *event;
        const DaemonConfig *config;
        const char *model;              /* the model's name: bundles name it (MANIFEST_DEFAULT_MODEL on a one-model device) */
        Manager *const *peers;          /* every model's manager (this one too): operations run one at a time */
        size_t n_peers;
        Server *server;
        Machine machine;                /* the state: manager_fire() changes it */

        char *state_path;
        char *floor_path;               /* the anti-rollback floor, kept a second time */
        char *floor_written;            /* its text as last written (floor_text()) */
        PersistentState ps;
        SlotFiles files[_SLOT_ID_MAX];
        char *base_files_path;          /* <state_dir>/base-files.json */
        char *base_files_next_path;     /* <state_dir>/base-files.next.json: a new base's, before its commit */
        ManifestFiles base_files;       /* a directory base's files; an empty list for a one-file base */
        Seal seals[_SLOT_ID_MAX];
        bool sealed[_SLOT_ID_MAX];      /* seal loaded, clean, and the file is the one sealed */
        SlotId active;                  /* what model_path points at (valid once provisioned) */
        Store store;
        TrustStore *trust;              /* the device's revocation list (Models owns it), NULL when none */
        /* What runs (or is on trial) is signed by a revoked signer: why, for status; "" when not. */
        char revoked_active[TP_ERROR_MAX];
        uint64_t revoked_tried_usec;    /* CLOCK_BOOTTIME of the last replacement started, 0: none */

        Operation *op;
        sd_event_source *op_source;

        sd_event_source *trial_timer, *probe_timer, *scrub_timer;
        HealthCheck *health;
        Client *trial_client;           /* a switch waiting for the trial's outcome */

        int lease_signal;               /* lease breaks on slot files arrive as this signal */
        sd_event_source *lease_source;
        bool lease_broken;

        FetchModel *fetch;              /* its side of the channel's poller (Models owns it), NULL when none */
        Hawkbit *hawkbit;               /* the hawkBit DDI client (Models owns it), NULL when none */
        Notifier *notifier;             /* units and a command told of slot changes, NULL when none */
        SourceHost host;                /* lent to the update sources */
        RegisteredSource sources[MANAGER_SOURCES_MAX];
        size_t n_sources;

        int lock_fd;                    /* flock on <state_dir>/taskpatchd.lock: one daemon per state dir */
        char log_prefix[TASK_NAME_MAX + 4];     /* "[MODEL] " with several models, else "" */
        char space_note[192];           /* why manager_free_space() said less than the file system has */
        Counters counters;
        LastEvent last;
        /*
         * Writes blocked at start-up (a full disk, say): the error, and the state as loaded, so
         * that the repair can be done again from the start once space returns; 0 when writable.
         */
        int write_error;
        PersistentState loaded;
        sd_event_source *retry_timer;
        /* A rollback made at start-up, before anyone could listen: told to the first subscriber. */
        json_t *startup_events;
        json_t *startup_slot_changed;   /* ... and to the notifier (units, command) once the loop runs */
        sd_event_source *notify_source;
        sd_event_source *reprovision_source;    /* the deferred idle work: a revoked model replaced, re-provisioning */
};

static inline ManagerState manager_state(const Manager *m) {
        return m->machine.state;
}
static inline bool manager_on_trial(const Manager *m) {
        return manager_state_on_trial(m->machine.state);
}

/* @trust (the device's revocation list; shared by the models, may be NULL) must outlive the manager. */
_warn_unused_result_ int manager_new(sd_event *e, const DaemonConfig *config, TrustStore *trust, Manager **ret,
                                     TpError *err);
Manager *manager_free(Manager *m);
DEFINE_POINTER_CLEANUP(Manager, manager_free)

/* The socket server's request handler (RequestHandler). */
void manager_handle_request(void *userdata, Client *c, json_t *req, int fd);
void manager_set_server(Manager *m, Server *s);

/* ---- shared with the operation files ---- */

/*
 * Apply @e to the state machine: logged, sd_notify STATUS= updated; a
 * transition the table lacks is refused (-EPROTO; an abort in debug builds).
 */
int manager_fire(Manager *m, ManagerEvent e);
/* The initial state, once at start-up. */
void manager_init_state(Manager *m, ManagerState s);
void manager_send_status(Manager *m);
/* Send an event (reference stolen) to subscribers and to the operation's waiting client; adds time and transaction. */
void manager_emit(Manager *m, const char *transaction, json_t *ev);
/* Record an error for status (last_event, last_error) and send an "error" event. */
void manager_report_error(Manager *m, const char *transaction, const char *code, const char *msg, const char *cmd);
/* Record what happened last for status (last_event); @failure: an update failed (last_error too). */
void manager_record(Manager *m, const char *kind, const char *code, bool failure, const char *reason);
/* Emit a progress event for the running operation at most a few times per second. */
void manager_progress(Manager *m, Operation *op, const char *event_name);
/* floor.json (when the floor changed), then state.json. */
_warn_unused_result_ int manager_save_state(Manager *m, TpError *err);
_warn_unused_result_ int manager_save_seal(Manager *m, SlotId slot, TpError *err);
/* Slot paths for a one-file model or a directory model (files[].path). */
void manager_use_slot_kind(Manager *m, bool directory);
/*
 * Slot @slot's files as a set, each opened @access (O_RDONLY or O_RDWR): its one file, or the
 * files of its directory (walked as fileset_open_dir() does: no symlinks, nothing special).
 * *@ret_st (may be NULL): the stat of the file or the directory.
 */
_warn_unused_result_ int manager_open_slot(Manager *m, SlotId slot, int access, FileSet *ret, struct stat *ret_st,
                                           TpError *err);
/* Record what slot @slot's files are now as its seal's identity (the seal itself is not saved). */
_warn_unused_result_ int manager_seal_identity(Manager *m, SlotId slot, Seal *seal, TpError *err);
/* Reload a slot's seal and check it against the file: sets m->sealed[slot]. */
void manager_check_slot(Manager *m, SlotId slot);
/*
 * Slot @slot holds the new base of base bundle @mf, staged: what the state will say of it once
 * its trial commits, into *@ret (its layout read from the slot). A directory's list of files is
 * saved, durable before the trial (base_files_next_path: the commit puts it in place).
 */
_warn_unused_result_ int manager_new_base_info(Manager *m, SlotId slot, const Manifest *mf, BaseInfo *ret,
                                               TpError *err);
/* Point model_path at @slot: a symlink renamed over it, then an fsync of its directory. */
_warn_unused_result_ int manager_point_model_path(Manager *m, SlotId slot, TpError *err);
/* After staging: activate @slot and start its trial (or commit at once with @trial false). */
_warn_unused_result_ int manager_activate(Manager *m, Operation *op, SlotId slot, bool trial, TpError *err);
/* Another model's manager running an operation (its scrubs aside), or NULL. */
const Manager *manager_peer_busy(const Manager *m);
/*
 * Room in the state directory in bytes, or -errno: the file system's free space, or less when
 * the model's disk_budget leaves less (then m->space_note says so, for the refusal's message;
 * else it is "").
 */
int64_t manager_free_space(Manager *m);
/* The bytes the model's state takes on disk (its state directory; "default": without models/). */
uint64_t manager_disk_usage(Manager *m);

/* Shared by the manager's files: an event's task, version and sha256 from a seal; slot-changed
 * for the active slot (subscribers and the notifier); a lifecycle journal entry. */
void manager_seal_event_fields(json_t *ev, const Seal *s);
void manager_emit_slot_changed(Manager *m, const char *transaction, const char *reason);
/* The slot-changed event for the active slot, not sent (a new reference). */
json_t *manager_slot_changed_event(Manager *m, const char *reason);
/* Answer @c that @cmd is refused while the state directory cannot be written (writable: false). */
void manager_reply_unwritable(Manager *m, Client *c, const char *cmd);
void manager_lifecycle(Manager *m, const char *event, SlotId slot, const char *transaction, const char *detail);

/* The trial (taskpatchd-trial.c). Commit: the slot on trial becomes the committed one. */
int manager_trial_commit(Manager *m, const char *how);
/* Back to the committed slot; @failure: the task failed (not a technician's choice). < 0: still on trial. */
int manager_trial_rollback(Manager *m, const char *reason, bool failure);
bool manager_health_configured(const Manager *m);

/* mark-good: immediate, answered at once. */
int manager_mark_good(Manager *m, Client *c);
/*
 * rollback: during a trial, back to the committed slot at once. Outside a
 * trial, a switch back to the previously committed task (state.json's
 * history), through a normal trial; refused, saying why, when nothing was
 * committed before, when that task failed its trial, or when its version is
 * below the anti-rollback floor and @allow_downgrade is false.
 */
void manager_rollback(Manager *m, Client *c, bool allow_downgrade, bool wait);
/* The status object (without "ok"). */
json_t *manager_status(Manager *m);
/* The list reply: {"tasks": [...]} (without "ok"). */
json_t *manager_list(Manager *m);
/*
 * A subscription starts with a snapshot of what is true now, so that a service that
 * (re)connects never has to guess what it missed; then what happened at start-up before
 * anyone could listen (a rollback), once. Sends both to @c (subscribed already).
 */
void manager_send_snapshot(Manager *m, Client *c);

/*
 * The time signatures' dates are checked at, under trust.clock (policy_dates_now() with the
 * wall clock, the build and the newest accepted channel's time as the floor): 0, or < 0 and
 * @err when strict refuses to verify anything now.
 */
_warn_unused_result_ int manager_dates_now(const Manager *m, time_t *ret, TpError *err);
/* What a bundle is verified against: the CA, the manifest caps, and dates at @now (from manager_dates_now()). */
BundleTrust manager_bundle_trust(const Manager *m, time_t now);
/*
 * A bundle that does not make its manifest's target (staged into a fresh copy, the slot's
 * hash wrong: taskpatchd-switch.c): marked failed, removed from the store and from disk, so it
 * is never the newest version again. Returns -EBADMSG with @err saying so (prefixed to the
 * staging's own message); the accepted version is not touched.
 */
_warn_unused_result_ int manager_reject_bundle(Manager *m, const Manifest *mf, TpError *err);
/*
 * List the installed bundles again (store_scan() of @tasks against the bundle trust: CA, CRLs,
 * the revocation list), then manager_check_revoked().
 */
_warn_unused_result_ int manager_scan_store(Manager *m, const char *tasks,
                                            void (*report)(const char *path, const char *why));
/*
 * Whether what runs, or is on trial, was signed by a revoked signer (its bundle is in
 * store.revoked): sets m->revoked_active and asks for the daemon's idle work, which rolls a
 * trial of it back, or replaces the committed one through a trial (manager_replace_revoked()).
 */
void manager_check_revoked(Manager *m);
/*
 * Take a revocation list or a trust root for the whole device (taskpatchd-revoke.c):
 * trust_store_update() at the clock manager_dates_now() gives, then, when it was taken (1),
 * every model (@m's peers) lists its bundles again and replaces what is no longer trusted.
 */
_warn_unused_result_ int manager_take_trust(Manager *m, const uint8_t *data, size_t len, const char *what,
                                            TpError *err);
/*
 * Status's "trust": {revocations: {version, created, entries} | null,
 * root: {version, created, expires, expired} | null, crl, revoked_active}.
 */
json_t *trust_status_json(const Manager *m);
/*
 * Open and verify a bundle (takes @fd): signature to the CA, manifest, made
 * for the provisioned base, same size. *@ret_code is the protocol error code on failure.
 */
_warn_unused_result_ int manager_open_bundle(Manager *m, int fd, const char *what, Bundle **ret, char signer[256],
                                             const char **ret_code, TpError *err);

/*
 * Start an operation: fires op->start (refused, with a busy error to @c,
 * when the state does not allow it) and replies to @c (accepted, or at the
 * end when it waits). Takes @op in every case.
 */
void manager_start(Manager *m, Operation *op, Client *c, bool wait);
/* Free @op and what it holds (an operation that never started). NULL-safe. */
void operation_free(Operation *op);

/*
 * A log line of @m's (taskpatchd-log.h): on a device of several models it starts with
 * "[MODEL] ", so the journal says which model it is about.
 */
_printf_(3, 4) void manager_log(const Manager *m, int priority, const char *fmt, ...);
#define mlog_debug(m, ...) manager_log(m, LOG_DEBUG, __VA_ARGS__)
#define mlog_info(m, ...) manager_log(m, LOG_INFO, __VA_ARGS__)
#define mlog_notice(m, ...) manager_log(m, LOG_NOTICE, __VA_ARGS__)
#define mlog_warning(m, ...) manager_log(m, LOG_WARNING, __VA_ARGS__)
#define mlog_error(m, ...) manager_log(m, LOG_ERR, __VA_ARGS__)
/* What manager_log() puts first: "[MODEL] ", or "" on a device of one model. */
const char *manager_log_prefix(const Manager *m);

/* ---- the update sources (taskpatchd-host.c) ---- */

/* The SourceHost the manager lends its sources (m->host); manager_new() does it. */
void manager_init_host(Manager *m);
/* Tell @source (with @userdata) how operations and trials end, after those registered before; -E2BIG. */
_warn_unused_result_ int manager_register_source(Manager *m, const UpdateSource *source, void *userdata);
/* Idle, provisioned, writable, no operation and no trial: an update source may start. */
bool manager_can_start(Manager *m);
/*
 * Start @op (taken) for @origin, nobody waiting: 1 and its transaction, or -EBUSY (@err
 * says what runs or why not) when it cannot start now.
 */
_warn_unused_result_ int manager_submit(Manager *m, Operation *op, UpdateOrigin origin,
                                        char ret_transaction[TRANSACTION_ID_SIZE], TpError *err);
/*
 * An install of the bundle @fd (taken) as @req asks; < 0 with @ret_code and @err when the
 * bundle is refused at once. For a client @c (the socket): 0, and manager_start() replies
 * (accepted, busy, or at the end with @wait); @ret_transaction is not used (may be NULL).
 * Without one (an update source): manager_submit(), 1 and @ret_transaction.
 */
_warn_unused_result_ int manager_submit_install(Manager *m, int fd, const InstallRequest *req, Client *c, bool wait,
                                                char ret_transaction[TRANSACTION_ID_SIZE], const char **ret_code,
                                                TpError *err);
/*
 * What the sources are told: an operation ended (@on_trial: it put its task on trial;
 * first the pin policy), a trial ended, the manager is idle.
 */
void manager_sources_operation_done(Manager *m, const Operation *op, int r, bool on_trial);
void manager_sources_trial_done(Manager *m, const char *transaction, bool committed, const char *reason);
void manager_sources_idle(Manager *m);

/* Operation constructors (taskpatchd-provision.c, taskpatchd-switch.c). They reply with errors themselves. */
_warn_unused_result_ int provision_new(Manager *m, int fd, const uint8_t *expected_sha256, Operation **ret,
                                       TpError *err);
_warn_unused_result_ int install_new(Manager *m, int fd, const InstallRequest *req, Operation **ret,
                                     const char **ret_code, TpError *err);
_warn_unused_result_ int switch_new(Manager *m, const char *task, uint64_t version, Operation **ret,
                                    const char **ret_code, TpError *err);

/*
 * The active slot failed its scrub and the other one passed: move model_path to the other
 * (reason "active slot damaged"): a trial is rolled back; a committed slot is replaced and
 * the other slot committed. 0, or a negative errno in op->err (model_path did not move).
 */
_warn_unused_result_ int manager_replace_damaged(Manager *m, Operation *op);
/* A full verification of both slots against their seals (taskpatchd-scrub.c). */
_warn_unused_result_ int scrub_new(Operation **ret);
/*
 * Stop the daemon's own background work for a request (a scrub runs again in a minute, a
 * re-provisioning once the daemon is idle): whether one was stopped.
 */
bool manager_stop_background(Manager *m);
/* Run a scrub after @after_usec (and then every scrub_interval hours). */
int manager_schedule_scrub(Manager *m, uint64_t after_usec);
/*
 * After a base change (ps.reprovision): the base into the inactive slot, from the active one, in the
 * background like a scrub (a request stops it; it starts again once the daemon is idle), without
 * activating it; then ps.reprovision is cleared and the old base's bundles removed.
 */
_warn_unused_result_ int reprovision_new(Manager *m, Operation **ret, TpError *err);
/*
 * The daemon's own work once it is idle, from the event loop after @after_usec: replacing a
 * model signed by a revoked signer (m->revoked_active), then the re-provisioning when due.
 */
#define REPROVISION_RETRY_USEC (60 * UINT64_C(1000000))
void manager_want_idle_work(Manager *m, uint64_t after_usec);
/*
 * What runs is revoked (taskpatchd-revoke.c): a trial of it is rolled back; a committed one is
 * replaced through a trial by the newest installed version of its task that is neither revoked
 * nor failed, else by the base. True when it did something or waits (an operation runs, a try
 * less than a minute ago), so the rest of the idle work waits too.
 */
bool manager_replace_revoked(Manager *m);
/* Turn a running install into a switch to what it installed (install --switch): 1, or 0 when it is already active. */
_warn_unused_result_ int switch_continue(Operation *op, const char *task, uint64_t version, TpError *err);
