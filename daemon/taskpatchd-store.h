/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * What the daemon keeps on disk besides the slots:
 *
 *   <state_dir>/state.json                 the persistent state (below)
 *   <state_dir>/floor.json                 the anti-rollback floor again (accepted versions, channel serial)
 *   <state_dir>/base-files.json            a directory model's files (path, size, SHA-256), whose set
 *                                          digest is the base's sha256: what a slot directory holds
 *   <state_dir>/tasks/<task>/<version>.tpb installed bundles
 *
 * The state file says which base is provisioned, which slot is committed
 * and whether a task is on trial. The model_path symlink is the truth about
 * which slot is active; the manager repairs the state from it at start.
 * Every write is atomic (AtomicFile).
 */

#include <stdbool.h>
#include <stdint.h>

#include "artifact.h"
#include "bundle.h"
#include "error.h"
#include "manifest.h"
#include "slot.h"

#define TRANSACTION_ID_SIZE 33          /* 32 hex digits and a NUL */

typedef struct BaseInfo {
        uint8_t sha256[SHA256_DIGEST_SIZE];
        uint64_t size;
        uint8_t layout[SHA256_DIGEST_SIZE];
        ArtifactKind kind;
        uint64_t chunk_size;            /* 0: no chunk table kept */
        uint8_t chunk_root[SHA256_DIGEST_SIZE];
        bool directory;                 /* a model of several files: slots are directories (base-files.json lists them) */
} BaseInfo;

typedef struct TrialInfo {
        bool on;
        SlotId slot;
        char task[TASK_NAME_MAX + 1];   /* "" = the base */
        uint64_t version;
        char transaction[TRANSACTION_ID_SIZE];
        int64_t started;                /* seconds since the epoch */
        bool rollback;                  /* a rollback outside a trial: its commit pops the history */
        /* A base bundle on trial (task, version: its line): the slot holds @base, which its commit makes the base. */
        bool new_base;
        BaseInfo base;
} TrialInfo;

/* A task at a version; task "" is the base (version 0). */
typedef struct TaskRef {
        char task[TASK_NAME_MAX + 1];
        uint64_t version;
} TaskRef;

#define STATE_HISTORY_MAX 8             /* committed tasks remembered for 'tpctl rollback' */
#define STATE_FAILED_MAX 32             /* tasks that failed their trial, never rolled back to */

/*
 * Rollback protection: the newest version of each task this device has
 * accepted (signature and payload verified). An older one is refused even
 * after its newer bundles are gone; a bundle whose payload fails never
 * raises it. Kept across provisioning.
 */
#define STATE_MAX_TASKS 256

typedef struct AcceptedVersion {
        char task[TASK_NAME_MAX + 1];
        uint64_t version;
} AcceptedVersion;

typedef struct PersistentState {
        bool provisioned;               /* base is valid */
        bool provisioning;              /* a provisioning began and did not finish */
        BaseInfo base;
        SlotId committed;
        /* A new base was committed: the other slot, of the old base, is re-provisioned from the active one. */
        bool reprovision;
        TrialInfo trial;
        AcceptedVersion accepted[STATE_MAX_TASKS];      /* sorted by task */
        size_t n_accepted;
        /* The fleet channel: the highest serial accepted (a lower one is a replay), and a technician's pin. */
        bool have_channel;
        uint64_t channel_serial;
        /* The newest accepted channel's created time: a clock that reads earlier is not trusted for dates. */
        int64_t time_floor;
        bool pinned;                    /* a technician switched: the channel's desired task waits ... */
        uint64_t pinned_serial;         /* ... until a channel with another serial than this one arrives */
        /* What was committed, oldest first; the last entry is what is committed now. */
        TaskRef history[STATE_HISTORY_MAX];
        size_t n_history;
        /* Tasks whose trial failed (rolled back): a rollback never returns to them. Oldest dropped first. */
        TaskRef failed[STATE_FAILED_MAX];
        size_t n_failed;
} PersistentState;

/* -ENOENT when there is no state file (a fresh device). */
_warn_unused_result_ int state_load(const char *path, PersistentState *ret, TpError *err);
_warn_unused_result_ int state_save(const char *path, const PersistentState *s, uint64_t *ret_bytes, TpError *err);
/*
 * The anti-rollback floor is kept twice: in state.json and in floor.json, written first
 * whenever it rises, so that losing or damaging state.json never reopens a downgrade.
 * floor_text(): its JSON text (malloc'ed; NULL on ENOMEM), to compare with what was written.
 * floor_load() raises @s's accepted versions and channel serial to the file's (never lowers
 * them); -ENOENT when there is none.
 */
char *floor_text(const PersistentState *s);
_warn_unused_result_ int floor_load(const char *path, PersistentState *s, TpError *err);

/* The newest accepted version of @task, 0 if none. */
uint64_t state_accepted(const PersistentState *s, const char *task);
/* Raise @task's accepted version to @version: 1 if raised, 0 if already there, -E2BIG when STATE_MAX_TASKS are kept. */
int state_accept(PersistentState *s, const char *task, uint64_t version);
/* Undo a state_accept() that raised @task's version from @before (0: it had none), when the state was not written. */
void state_accept_undo(PersistentState *s, const char *task, uint64_t before);

/* A commit of @task (NULL or "" = the base) at @version: pushed on the history, no longer failed. */
void state_committed(PersistentState *s, const char *task, uint64_t version);
/* What was committed before the current one, or NULL. */
const TaskRef *state_previous(const PersistentState *s);
/* A rollback outside a trial committed: the current entry is dropped, the previous one is current. */
void state_history_pop(PersistentState *s);
/* @task at @version failed its trial. */
void state_failed_add(PersistentState *s, const char *task, uint64_t version);
bool state_failed(const PersistentState *s, const char *task, uint64_t version);

/* One installed bundle. */
typedef struct InstalledTask {
        char task[TASK_NAME_MAX + 1];
        uint64_t version;
        char *path;
        uint8_t target_sha256[SHA256_DIGEST_SIZE];
        uint64_t bundle_size;
        uint64_t span_bytes;            /* bytes its spans write */
        int64_t created;
        char signer[256];
        ManifestRole role;              /* a task, or a base bundle (task: its line of bases) */
} InstalledTask;

/* A bundle whose signer is revoked (a CRL, the revocation list): listed, never used. */
typedef struct RevokedTask {
        char task[TASK_NAME_MAX + 1];
        uint64_t version;
        char why[TP_ERROR_MAX];         /* "certificate 'CN=...' is revoked by ..." */
} RevokedTask;

typedef struct Store {
        char *dir;                      /* <state_dir>/tasks */
        InstalledTask *tasks;           /* sorted by task, then version */
        size_t n;
        RevokedTask *revoked;           /* in the order found */
        size_t n_revoked;
        char **stranded;                /* bundles made for another base (the one before a base change): not listed */
        size_t n_stranded;
} Store;

void store_done(Store *s);
/*
 * List <dir>: every <task>/<version>.tpb whose bundle opens, verifies
 * against @trust (its CA, CRLs and revocation list; dates are not checked
 * here) and was made for @base (NULL: not checked; a full base bundle is
 * made for any base). Files that fail are skipped and reported through
 * @report (may be NULL); those whose signer is revoked are kept in
 * s->revoked; those made for another base, and base bundles that make
 * @base (it is the base now), in s->stranded.
 */
_warn_unused_result_ int store_scan(Store *s, const char *dir, const BundleTrust *trust, const BaseInfo *base,
                                    void (*report)(const char *path, const char *why));
/* @task at @version is installed but revoked: why, else NULL. */
const RevokedTask *store_find_revoked(const Store *s, const char *task, uint64_t version);
/* Remove the stranded bundles store_scan() found: how many were removed. */
int store_remove_stranded(Store *s);
/* @version 0: the newest. NULL when not installed. */
const InstalledTask *store_find(const Store *s, const char *task, uint64_t version);
/* The newest installed version of @task, 0 if none. */
uint64_t store_newest(const Store *s, const char *task);
/* Record a bundle already renamed into place at its path (from its verified manifest). */
_warn_unused_result_ int store_add(Store *s, const Manifest *m, const char *path, uint64_t bundle_size,
                                   const char *signer);
/* <dir>/<task>/<version>.tpb (malloc'ed). */
char *store_bundle_path(const Store *s, const char *task, uint64_t version);
/* Remove @task v@version's bundle from the store and from disk: 1 removed, 0 not there, < 0 an unlink error. */
int store_remove(Store *s, const char *task, uint64_t version);
/*
 * Remove all but the newest @keep versions of @task, never the versions
 * for which @keep_also returns true. Returns the number removed.
 */
int store_gc(Store *s, const char *task, uint64_t keep, bool (*keep_also)(void *userdata, const char *task,
                                                                          uint64_t version), void *userdata);

/*
 * A directory base's files: written at provisioning, loaded at start and checked against
 * @base (their set digest is its sha256, their sizes add up to its size).
 */
_warn_unused_result_ int base_files_save(const char *path, const ManifestFiles *f, TpError *err);
_warn_unused_result_ int base_files_load(const char *path, const BaseInfo *base, ManifestFiles *ret, TpError *err);
/*
 * A directory base replaced from a bundle: the new base's list is written to @next_path before
 * its trial and renamed over @path after the commit's state write. This loads @path, else
 * @next_path when that is the list of @base (and renames it into place: a crash came between
 * the two); else the error of @path.
 */
_warn_unused_result_ int base_files_load_either(const char *path, const char *next_path, const BaseInfo *base,
                                                ManifestFiles *ret, TpError *err);
