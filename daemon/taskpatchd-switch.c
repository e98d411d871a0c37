/* SPDX-License-Identifier: MIT */
/*
 * Switching to a task: stage it into the inactive slot, verify, seal, activate. In place when
 * the slot's seal holds and no other process has the file open (a write lease says so);
 * otherwise into a fresh copy of the active slot that is renamed over the slot, so that a
 * service still mapping the old file keeps its old inode. A target whose layout is not the
 * slot's (a relocating bundle, or leaving a slot that holds one) is built into a fresh file
 * from base bytes instead (build.h): from the inactive slot when its seal holds, else from the
 * active one. A slot that does not hash to the target is staged again into a fresh copy, then
 * blamed on the bundle (manager_reject_bundle()).
 *
 * A directory model's slot is a directory of files, staged as one space
 * (fileset.h): in place only when every file can be leased (one busy file
 * means a fresh copy of the whole directory), and a fresh copy or a build
 * is a temporary directory swapped in with one rename (atomicdir.h).
 */

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "atomicdir.h"
#include "build.h"
#include "fileio.h"
#include "filejob.h"
#include "stage.h"
#include "taskpatchd-log.h"
#include "taskpatchd-manager.h"

#define SPACE_MARGIN (1u << 20)
#define STAGE_SLICE (2u << 20)          /* staging decodes as it goes: smaller slices keep requests quick */

typedef enum SwitchStage {
        SWITCH_PREPARE,
        SWITCH_COPY,                    /* fresh mode: the active slot into a temporary */
        SWITCH_STAGE,                   /* undo the old task, write the new one, verify (or build) */
        SWITCH_CHECK,                   /* the slot already holds the task: verify it */
        SWITCH_SEAL,
        SWITCH_ACTIVATE,
        _SWITCH_STAGE_MAX,              /* done: only for the timing log */
} SwitchStage;

typedef struct Switch {
        SwitchStage stage;
        Bundle *bundle;                 /* NULL: back to the base */
        StageTarget target;
        SlotId slot;
        const ManifestFiles *layout;    /* the target's files (the bundle's or the base's); none for one file */
        FileSet slot_set;               /* the slot's files: open read-write and leased (in place), or read-only (check) */
        const FileSet *dest;            /* what is staged into: &slot_set, or the fresh temporary's files */
        bool fresh;
        AtomicModel fresh_tmp;          /* a fresh copy or a build: a file or directory beside the slot */
        Builder *builder;               /* a build from base bytes into fresh_tmp, instead of the stager */
        FileSet view;                   /* the slot the builder reads base bytes from */
        FileSet copy_src;               /* the active slot, copied into fresh_tmp */
        FileSet old;                    /* the slot's files fresh_tmp replaced, being retired (filejob.h) */
        SetCopy copy;
        Seal source;                    /* what fd holds before staging */
        UndoRecord *undo;
        uint8_t *chunks;
        Stager *stager;
        FileHash *check;
        uint64_t copied;
        bool new_base;                  /* a base bundle: the slot gets a new base (its family, no undo record) */
        bool full;                      /* ... built from the bundle alone (a full base bundle: no base bytes) */
        BaseInfo base;                  /* the new base, once staged (for the trial and its commit) */
        bool reprovision;               /* the base into the inactive slot after a base change: no activation */
        SwitchStage logged;             /* the stage whose start was last timed */
        uint64_t t0, t_stage;           /* CLOCK_MONOTONIC µs: the switch's start, the stage's start */
} Switch;

static const char *const stage_names[] = {
        [SWITCH_PREPARE] = "prepare", [SWITCH_COPY] = "copy",   [SWITCH_STAGE] = "stage",
        [SWITCH_CHECK] = "check",     [SWITCH_SEAL] = "seal",   [SWITCH_ACTIVATE] = "activate",
        [_SWITCH_STAGE_MAX] = "done",
};

/* Debug timing of each stage (TASKPATCHD_LOG_LEVEL=debug): where a switch spends its time. */
static void time_stage(Switch *sw) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t now = (uint64_t) ts.tv_sec * 1000000 + (uint64_t) ts.tv_nsec / 1000;
        if (sw->t0 == 0)
                sw->t0 = sw->t_stage = now;
        if (sw->stage != sw->logged) {
                log_debug("switch: %s took %.1f ms (%.1f ms since the start)", stage_names[sw->logged],
                          (now - sw->t_stage) / 1000.0, (now - sw->t0) / 1000.0);
                sw->logged = sw->stage;
                sw->t_stage = now;
        }
}

static void switch_free(void *data) {
        Switch *sw = data;
        if (!sw)
                return;
        bundle_free(sw->bundle);
        stager_free(sw->stager);
        builder_free(sw->builder);
        set_copy_done(&sw->copy);       /* before the files it writes are closed, as the builder */
        file_hash_free(sw->check);
        fileset_done(&sw->slot_set);    /* releases the leases */
        atomic_model_abort(&sw->fresh_tmp);
        fileset_done(&sw->copy_src);
        fileset_done(&sw->old);
        undo_record_free(sw->undo);
        free(sw->chunks);
        fileset_done(&sw->view);
        free(sw);
}

/*
 * Slot @from's seal, undo record and chunk table as what staging starts from. With @deferred the
 * record's SHA-256 is checked only if the stager's pass fails (undo_record_open_deferred()): the
 * pass checks what it reads from the record anyway, so only a stager may take such a source.
 */
static int load_source(Manager *m, Switch *sw, SlotId from, bool deferred, TpError *err) {
        TpError ignored = {};
        int r;

        sw->source = m->seals[from];
        sw->undo = undo_record_free(sw->undo);
        free(sw->chunks);
        sw->chunks = NULL;
        if (sw->source.undo_spans &&
            (r = (deferred ? undo_record_open_deferred : undo_record_open)(m->files[from].undo,
                                                                          sw->source.undo_spans,
                                                                          sw->source.undo_sha256, sw->source.size,
                                                                          &sw->undo, err)) < 0)
                return r;
        if (m->config->verify == VERIFY_INCREMENTAL && sw->source.chunk_size &&
            chunk_table_load(m->files[from].chunks, sw->source.size, sw->source.chunk_size, sw->source.chunk_root,
                             &sw->chunks, &ignored) < 0)
                mlog_warning(m, "slot %s: %s: verifying this switch in full", slot_id_to_string(from), ignored.message);
        return 0;
}

static uint64_t undo_size(const Switch *sw) {
        uint64_t n = 48;
        for (size_t i = 0; sw->bundle && i < sw->bundle->manifest->n_spans; i++)
                n += 16 + sw->bundle->manifest->spans[i].length;
        return n;
}

/* "3 files: a.gguf, b.gguf, c.gguf" (the first few) for a message about a directory model. */
static void name_files(const FileSet *set, char *buf, size_t size) {
        int n = snprintf(buf, size, "%zu file%s: ", set->n_files, set->n_files == 1 ? "" : "s");
        for (size_t i = 0; i < set->n_files && n >= 0 && (size_t) n < size; i++)
                n += snprintf(buf + n, size - (size_t) n, "%s%s", i ? ", " : "", i < 3 ? set->files[i].path : "...");
}

/* Refused before anything is written: what staging (or a planned build) takes in state_dir. */
static int check_space(Manager *m, Switch *sw, TpError *err) {
        uint64_t need = SPACE_MARGIN + (sw->builder ? builder_space(sw->builder)
                                                    : undo_size(sw) + (sw->fresh ? sw->target.size : 0));
        char files[160] = "";
        if (sw->layout->set.directory) {
                files[0] = ';';
                files[1] = ' ';
                name_files(&sw->layout->set, files + 2, sizeof(files) - 2);
        }
        const char *what = sw->builder ? "a slot built from base bytes and its undo record"
                           : sw->fresh ? "a fresh slot copy and an undo record"
                                       : "an undo record";
        int64_t avail = manager_free_space(m);
        if (avail >= 0 && (uint64_t) avail < need)
                return tp_error(err, -ENOSPC, "staging needs %" PRIu64 " bytes in %s (%s%s), %" PRId64 " are free%s",
                                need, m->config->state_dir, what, files, avail, m->space_note);
        return 0;
}

/* Forget a staging begun into the slot or a temporary: the next one starts into a fresh file. */
static void reset_to_fresh(Switch *sw) {
        sw->stager = stager_free(sw->stager);
        sw->builder = builder_free(sw->builder);
        set_copy_done(&sw->copy);
        fileset_done(&sw->slot_set);
        atomic_model_abort(&sw->fresh_tmp);
        sw->dest = NULL;
        sw->fresh = true;
}

/* The temporary a fresh copy or a build writes beside the slot, renamed over it when sealed: a
 * file of @size bytes, or a directory of @files' files. */
static int open_fresh_tmp(Operation *op, Switch *sw, const FileSet *files, uint64_t size) {
        const char *path = op->m->files[sw->slot].path;
        int r = atomic_model_open(path, files, size, &sw->fresh_tmp);

        if (r < 0)
                return tp_error(&op->err, r, "%s: cannot create a temporary beside it: %s", path,
                                atomic_file_strerror(r));
        sw->dest = &sw->fresh_tmp.set;
        return 0;
}

/* The inactive slot's files, open read-write and each leased: 0, -EBUSY when another process has
 * one of them open or mapped (a directory's every file counts), another -errno when the slot
 * cannot be opened or leased, -EBADMSG when its files are not the target's. */
static int open_in_place(Manager *m, Switch *sw, TpError *err) {
        int r = manager_open_slot(m, sw->slot, O_RDWR, &sw->slot_set, NULL, err);

        if (r >= 0 && sw->layout->set.directory)
                r = fileset_same_files(&sw->slot_set, &sw->layout->set, err);
        for (size_t i = 0; r >= 0 && i < sw->slot_set.n_files; i++)
                if ((r = file_lease_take(sw->slot_set.files[i].fd, m->lease_signal)) < 0)
                        tp_error(err, r, "%s%s%s: %s", m->files[sw->slot].path, sw->slot_set.directory ? "/" : "",
                                 sw->slot_set.directory ? sw->slot_set.files[i].path : "",
                                 r == -EBUSY ? "another process has it open or mapped" : strerror(-r));
        if (r < 0) {
                fileset_done(&sw->slot_set);    /* closing the files releases the leases taken */
                return r;
        }
        sw->dest = &sw->slot_set;
        return 0;
}

static bool relocating(const Switch *sw) {
        return sw->bundle && sw->bundle->manifest->format == MANIFEST_FORMAT_RELOCATING;
}

/* Plan a build from the base view of slot @from; refused (nothing written) when the disk lacks the room. */
static int plan_build(Operation *op, Switch *sw, SlotId from) {
        Manager *m = op->m;
        int r;

        reset_to_fresh(sw);
        fileset_done(&sw->view);
        if (sw->full)
                sw->source = (Seal) { 0 };      /* no base bytes: an empty view */
        else if ((r = load_source(m, sw, from, false, &op->err)) < 0 ||
                 (r = manager_open_slot(m, from, O_RDONLY, &sw->view, NULL, &op->err)) < 0)
                return r;
        StageSource src = { .seal = &sw->source, .undo = sw->undo };
        if ((r = builder_new(&sw->view, &src, &sw->target, sw->full ? 0 : m->ps.base.size, m->files[sw->slot].undo,
                             &sw->builder, &op->err)) < 0) {
                op->err_code = r == -EBADMSG ? "refused" : NULL;
                return r;
        }
        builder_set_time_cap(sw->builder, STAGE_SLICE_NS);
        if ((r = check_space(m, sw, &op->err)) < 0)
                return r;
        if (sw->full)
                mlog_info(m, "slot %s: building the new base (%s v%" PRIu64 ") from its full bundle",
                          slot_id_to_string(sw->slot), sw->bundle->manifest->task, sw->bundle->manifest->version);
        else
                mlog_info(m, "slot %s: building %s%s from the base bytes of slot %s (%s)", slot_id_to_string(sw->slot),
                          sw->new_base ? "the new base " : "", sw->bundle ? sw->bundle->manifest->task : "the base",
                          slot_id_to_string(from),
                          sw->new_base      ? "a base delta"
                          : relocating(sw) ? "the task has its own layout"
                                           : "that slot holds a relocated task");
        return 0;
}

/* After plan_build() and the slot marked dirty: the fresh file (or files) the build writes. */
static int start_build(Operation *op, Switch *sw) {
        /* Empty now; the builder writes them up to the target's sizes. */
        int r = open_fresh_tmp(op, sw, &sw->layout->set, sw->target.size);

        if (r < 0)
                return r;
        if ((r = builder_output(sw->builder, sw->dest, &op->err)) < 0)
                return r;
        sw->stage = SWITCH_STAGE;
        return 0;
}

/* Stage into a fresh copy of the active slot (slot busy, seal broken, or a lease broke mid-way). */
static int start_fresh(Operation *op, Switch *sw) {
        Manager *m = op->m;
        int r;

        /* A copy of a relocated task is no place to stage into: build from its base bytes. */
        if (m->seals[m->active].relocated || relocating(sw)) {
                if ((r = plan_build(op, sw, m->active)) < 0)
                        return r;
                return start_build(op, sw);
        }

        reset_to_fresh(sw);
        if ((r = load_source(m, sw, m->active, false, &op->err)) < 0)
                return r;
        fileset_done(&sw->copy_src);
        if ((r = manager_open_slot(m, m->active, O_RDONLY, &sw->copy_src, NULL, &op->err)) < 0)
                return r;
        if (sw->copy_src.size != sw->source.size)
                return tp_error(&op->err, -EIO, "%s: %" PRIu64 " bytes, its seal says %" PRIu64,
                                m->files[m->active].path, sw->copy_src.size, sw->source.size);
        /* A task in the base's layout has the base's files: the copy is the new slot's every file. */
        if (sw->layout->set.directory && (r = fileset_same_files(&sw->copy_src, &sw->layout->set, &op->err)) < 0)
                return tp_error_prefix(&op->err, r, "%s", m->files[m->active].path);
        if ((r = open_fresh_tmp(op, sw, &sw->layout->set, sw->source.size)) < 0)
                return r;
        set_copy_init(&sw->copy, &sw->copy_src, sw->dest);
        sw->stage = SWITCH_COPY;
        return 0;
}

static bool holds_target(const Manager *m, const Switch *sw, SlotId s) {
        bool task_bundle = sw->bundle && !sw->new_base;         /* a slot holding a base is sealed as "the base" */
        const char *task = task_bundle ? sw->bundle->manifest->task : "";
        uint64_t version = task_bundle ? sw->bundle->manifest->version : 0;
        return m->sealed[s] && strcmp(m->seals[s].task, task) == 0 && m->seals[s].version == version &&
               memcmp(m->seals[s].sha256, sw->target.sha256, SHA256_DIGEST_SIZE) == 0;
}

static int prepare(Operation *op, Switch *sw) {
        Manager *m = op->m;
        int r;

        sw->slot = slot_other(m->active);
        manager_check_slot(m, sw->slot);
        if (holds_target(m, sw, sw->slot)) {
                /* A sibling switch back: the slot already holds the task. */
                if (m->config->verify == VERIFY_INCREMENTAL) {
                        sw->stage = SWITCH_ACTIVATE;
                        return 0;
                }
                if ((r = manager_open_slot(m, sw->slot, O_RDONLY, &sw->slot_set, NULL, &op->err)) < 0)
                        return r;
                if ((r = file_hash_new_set(&sw->slot_set, 0, &sw->check)) < 0)
                        return tp_error(&op->err, r, "hashing: %s", strerror(-r));
                op->total = sw->target.size;
                sw->stage = SWITCH_CHECK;
                return 0;
        }

        /* The build path: planned (and its space checked) before the slot is marked dirty. */
        SlotId view = m->sealed[sw->slot] ? sw->slot : m->active;
        bool build = relocating(sw) || m->seals[view].relocated || sw->new_base;
        if (build && (r = plan_build(op, sw, view)) < 0) {
                if (view == m->active || r == -ENOSPC)
                        return r;
                /* The inactive slot cannot give its base bytes back (a damaged record): the active one can. */
                mlog_warning(m, "slot %s: %s: building from slot %s instead", slot_id_to_string(view), op->err.message,
                             slot_id_to_string(m->active));
                op->err = (TpError) {};
                op->err_code = NULL;
                view = m->active;
                if ((r = plan_build(op, sw, view)) < 0)
                        return r;
        }

        bool in_place = m->sealed[sw->slot] && !build;
        if (in_place) {
                TpError why = {};
                r = open_in_place(m, sw, &why);
                if (r < 0) {
                        mlog_notice(m, "slot %s: %s: staging into a fresh copy so its users keep the old %s",
                                    slot_id_to_string(sw->slot), why.message,
                                    sw->layout->set.directory ? "files" : "file");
                        in_place = false;
                }
        }
        /* Refused before anything is written: the slot stays as it was. */
        sw->fresh = !in_place;
        if (!build && (r = check_space(m, sw, &op->err)) < 0) {
                fileset_done(&sw->slot_set);
                return r;
        }
        /* In place, the slot's own seal, undo record and chunk table describe what it holds. */
        int source = in_place ? load_source(m, sw, sw->slot, true, &op->err) : 0;
        /* The slot is dirty from the first byte written until it is sealed again. */
        Seal kept = m->seals[sw->slot];
        bool was_sealed = m->sealed[sw->slot];
        m->seals[sw->slot].dirty = true;
        m->sealed[sw->slot] = false;
        if ((r = manager_save_seal(m, sw->slot, &op->err)) < 0) {
                /* Not a byte written, the old seal still on disk: the slot is what it was. */
                m->seals[sw->slot] = kept;
                m->sealed[sw->slot] = was_sealed;
                return r;
        }
        m->lease_broken = false;
        if (build)
                return start_build(op, sw);
        if (!in_place)
                return start_fresh(op, sw);
        if (source < 0)
                return source;
        sw->stage = SWITCH_STAGE;
        return 0;
}

/* The slot's hash is not the target's: staged again into a fresh copy, then blamed on the bundle. */
static int target_mismatch(Operation *op, Switch *sw) {
        Manager *m = op->m;

        if (!sw->fresh && !sw->builder) {
                mlog_warning(m, "%s: staging again into a fresh copy of slot %s, in case slot %s is damaged",
                             op->err.message, slot_id_to_string(m->active), slot_id_to_string(sw->slot));
                op->err = (TpError) {};
                m->sealed[sw->slot] = false;
                int r = check_space(m, sw, &op->err);
                return r < 0 ? r : start_fresh(op, sw);
        }
        op->err_code = "refused";
        /* Of the base itself the slot copy is what is wrong, not a bundle. */
        return sw->bundle ? manager_reject_bundle(m, sw->bundle->manifest, &op->err) : -EBADMSG;
}

static int stage_step(Operation *op, Switch *sw) {
        Manager *m = op->m;
        int r;

        if (!sw->fresh && m->lease_broken) {
                mlog_notice(m, "slot %s was opened by another process during staging: restarting into a fresh copy",
                            slot_id_to_string(sw->slot));
                sw->fresh = true;
                if ((r = check_space(m, sw, &op->err)) < 0)
                        return r;
                return start_fresh(op, sw);
        }
        if (sw->builder) {
                if ((r = builder_step(sw->builder, STAGE_SLICE, &op->err)) < 0 &&
                    builder_progress(sw->builder)->target_mismatch)
                        return target_mismatch(op, sw);
                if (r < 0) {
                        op->err_code = r == -EBADMSG ? "refused" : NULL;
                        return r;
                }
                const StageProgress *p = builder_progress(sw->builder);
                op->phase = "write";
                op->done = p->done;
                op->total = p->total;
                manager_progress(m, op, "staging");
                if (r == 0)
                        sw->stage = SWITCH_SEAL;
                return 0;
        }
        if (!sw->stager) {
                StageSource src = { .seal = &sw->source, .undo = sw->undo, .chunks = sw->chunks };
                /* A fresh copy is a new file: verified in full before its seal is first trusted. */
                VerifyMode mode = sw->fresh ? VERIFY_FULL : m->config->verify;
                /* The stager refuses a slot whose size (its files' sizes as opened) is not the target's. */
                if ((r = stager_new(sw->dest, &src, &sw->target, mode, m->files[sw->slot].undo, &sw->stager,
                                    &op->err)) < 0)
                        return r;
                stager_set_time_cap(sw->stager, STAGE_SLICE_NS);
        }
        r = stager_step(sw->stager, STAGE_SLICE, &op->err);
        /* A damaged undo record (checked once the pass failed) cannot give the base back: a fresh copy can. */
        if (r < 0 && (stager_progress(sw->stager)->target_mismatch || stager_progress(sw->stager)->source_damaged))
                return target_mismatch(op, sw);
        if (r < 0) {
                op->err_code = r == -EBADMSG ? "refused" : NULL;
                return r;
        }
        /* One pass writes the spans and hashes as it goes: "write" up to the last span, then "verify". */
        const StageProgress *p = stager_progress(sw->stager);
        bool writing = p->done < p->write_total;
        op->phase = writing ? "write" : "verify";
        op->done = writing ? p->done : p->done - p->write_total;
        op->total = writing ? p->write_total : p->total - p->write_total;
        manager_progress(m, op, "staging");
        if (r == 0)
                sw->stage = SWITCH_SEAL;
        return 0;
}

static int seal_slot(Operation *op, Switch *sw) {
        Manager *m = op->m;
        const StageProgress *p = sw->builder ? builder_progress(sw->builder) : stager_progress(sw->stager);
        const uint8_t *chunks = NULL;
        Seal seal = { .size = sw->target.size, .version = sw->bundle ? sw->bundle->manifest->version : 0 };
        uint64_t bytes = 0;
        char h[SHA256_HEX_SIZE];
        TpError ignored = {};
        int r;

        /* Staged, synced: the fresh file or directory goes in, or the leases on the slot's files go. */
        sw->dest = NULL;
        if (sw->fresh) {
                /* The old files, held across the rename, are freed a piece at a time after it. */
                fileset_done(&sw->view);        /* done with; it may be those very files */
                if (manager_open_slot(m, sw->slot, O_RDWR, &sw->old, NULL, &ignored) >= 0)
                        file_retire_hold(&sw->old, m->lease_signal);
                if ((r = atomic_model_commit(&sw->fresh_tmp)) < 0)
                        return tp_error(&op->err, r, "%s: %s", m->files[sw->slot].path, strerror(-r));
        }
        fileset_done(&sw->slot_set);
        const BaseInfo *family = &m->ps.base;
        if (sw->new_base) {
                /* The slot holds a base now, of its own family: sealed as the base. */
                seal.version = 0;
                if ((r = manager_new_base_info(m, sw->slot, sw->bundle->manifest, &sw->base, &op->err)) < 0)
                        return r;
                family = &sw->base;
        } else if (sw->bundle) {
                snprintf(seal.task, sizeof(seal.task), "%s", sw->bundle->manifest->task);
                memcpy(seal.sites_fingerprint, sw->bundle->manifest->sites_fingerprint, SHA256_DIGEST_SIZE);
        }
        memcpy(seal.sha256, sw->target.sha256, SHA256_DIGEST_SIZE);
        memcpy(seal.base_sha256, family->sha256, SHA256_DIGEST_SIZE);
        memcpy(seal.base_layout, family->layout, SHA256_DIGEST_SIZE);
        if (sw->builder)
                builder_result(sw->builder, &seal.undo_spans, seal.undo_sha256, &seal.relocated);
        else
                stager_result(sw->stager, &chunks, &seal.undo_spans, seal.undo_sha256);
        if (chunks) {
                seal.chunk_size = sw->target.chunk_size;
                memcpy(seal.chunk_root, sw->target.chunk_root, SHA256_DIGEST_SIZE);
                if ((r = chunk_table_save(m->files[sw->slot].chunks, chunks,
                                          chunk_count(seal.size, seal.chunk_size), &bytes, &op->err)) < 0)
                        return r;
                m->counters.state_bytes += bytes;
        }
        if ((r = manager_seal_identity(m, sw->slot, &seal, &op->err)) < 0)
                return r;
        Seal dirty = m->seals[sw->slot];
        m->seals[sw->slot] = seal;
        if ((r = manager_save_seal(m, sw->slot, &op->err)) < 0) {
                m->seals[sw->slot] = dirty;     /* as the seal on disk still says */
                return r;
        }
        m->sealed[sw->slot] = true;
        fileset_done(&sw->view);

        m->counters.slot_bytes += p->slot_bytes + sw->copied;
        m->counters.undo_bytes += p->undo_bytes;
        m->counters.last_switch_slot_bytes = p->slot_bytes + sw->copied;
        sha256_to_hex(seal.sha256, h);
        log_lifecycle(m->model, m->log_prefix, "staged", seal.task, (unsigned long long) seal.version,
                      slot_id_to_string(sw->slot), h, op->transaction,
                      sw->builder ? "built from base bytes"
                      : sw->fresh ? "into a fresh copy"
                                  : "in place");
        mlog_info(m,
                  "staged %s v%" PRIu64 ": %" PRIu64 " bytes written into the slot%s, %" PRIu64
                  " into its undo record, %s verification (%" PRIu64 " bytes read)",
                  seal.task[0] ? seal.task : "base", seal.version, p->slot_bytes + sw->copied,
                  sw->builder ? " (a fresh file built from base bytes)"
                  : sw->fresh ? " (a full copy)"
                              : "",
                  p->undo_bytes, p->incremental ? "incremental" : "full", p->read_bytes);
        json_t *ev = json_pack("{s:s, s:o, s:I, s:s, s:s, s:I, s:I, s:b, s:b, s:s}", "event", "staged", "task",
                               seal.task[0] ? json_string(seal.task) : json_null(), "version",
                               (json_int_t) seal.version, "slot", slot_id_to_string(sw->slot), "sha256", h,
                               "slot_bytes_written", (json_int_t) (p->slot_bytes + sw->copied), "undo_bytes_written",
                               (json_int_t) p->undo_bytes, "fresh_copy", sw->fresh && !sw->builder, "relocated",
                               seal.relocated, "verify",
                               p->incremental ? "incremental" : "full");
        manager_emit(m, op->transaction, ev);
        sw->stage = SWITCH_ACTIVATE;
        return 0;
}

/* The inactive slot holds the base again (re-provisioned, or it already did): the state says so. */
static int reprovision_done(Operation *op, Switch *sw) {
        Manager *m = op->m;
        int r;

        m->ps.reprovision = false;
        if ((r = manager_save_state(m, &op->err)) < 0)
                return r;
        int n = store_remove_stranded(&m->store);
        mlog_info(m, "slot %s holds the base again%s; %d bundle(s) of the old base removed",
                  slot_id_to_string(sw->slot), sw->stager || sw->builder ? " (re-provisioned from the active slot)" : "",
                  n);
        manager_record(m, "reprovisioned", NULL, false, "both slots hold the new base's family again");
        sw->stage = _SWITCH_STAGE_MAX;
        return 0;
}

static int switch_step(Operation *op) {
        Switch *sw = op->data;
        Manager *m = op->m;
        uint8_t d[SHA256_DIGEST_SIZE];
        int r = 0;

        time_stage(sw);
        if (sw->old.files) {
                file_retire_step(&sw->old, STAGE_SLICE_NS);     /* before going on, as the rename did */
                return 1;
        }
        switch (sw->stage) {
        case SWITCH_PREPARE:
                r = prepare(op, sw);
                break;
        case SWITCH_COPY:
                op->phase = "copy";
                r = set_copy_step(&sw->copy, OPERATION_SLICE);
                if (r < 0)
                        return tp_error(&op->err, r, "copying slot %s: %s", slot_id_to_string(m->active), strerror(-r));
                sw->copied = sw->copy.pos;
                op->done = sw->copied;
                op->total = sw->source.size;
                manager_progress(m, op, "staging");
                if (r == 0) {
                        fileset_done(&sw->copy_src);
                        sw->stage = SWITCH_STAGE;
                }
                r = 0;
                break;
        case SWITCH_STAGE:
                r = stage_step(op, sw);
                break;
        case SWITCH_CHECK:
                op->phase = "verify";
                r = file_hash_step(sw->check, OPERATION_SLICE);
                if (r < 0)
                        return tp_error(&op->err, r, "reading slot %s: %s", slot_id_to_string(sw->slot), strerror(-r));
                op->done = file_hash_done(sw->check);
                manager_progress(m, op, "staging");
                if (r > 0)
                        return 1;
                file_hash_result(sw->check, d, NULL);
                sw->check = file_hash_free(sw->check);
                fileset_done(&sw->slot_set);
                if (memcmp(d, sw->target.sha256, SHA256_DIGEST_SIZE) != 0) {
                        mlog_error(m, "slot %s does not hash to what its seal says: rebuilding it",
                                   slot_id_to_string(sw->slot));
                        m->sealed[sw->slot] = false;
                        sw->stage = SWITCH_PREPARE;
                        return 1;
                }
                sw->stage = SWITCH_ACTIVATE;
                break;
        case SWITCH_SEAL:
                r = seal_slot(op, sw);
                break;
        case SWITCH_ACTIVATE:
                time_stage(sw);
                if (sw->reprovision)
                        return reprovision_done(op, sw);
                if (!sw->stager && !sw->builder)
                        m->counters.last_switch_slot_bytes = 0;         /* the slot already held the task */
                r = manager_activate(m, op, sw->slot, true, &op->err);
                sw->stage = _SWITCH_STAGE_MAX;
                time_stage(sw);
                return r < 0 ? r : 0;
        default:
                abort();
        }
        return r < 0 ? r : 1;
}

/* Find, open and verify what to switch to; NULL task = the base. Returns 0 with *ret_sw NULL when it is already active. */
static int switch_setup(Manager *m, const char *task, uint64_t version, Switch **ret_sw, const char **ret_code,
                        TpError *err) {
        Switch *sw = calloc(1, sizeof(Switch));
        char signer[256];
        int r;

        if (!sw)
                return -ENOMEM;
        *sw = (Switch) { .slot_set = FILESET_NULL, .fresh_tmp = ATOMIC_MODEL_NULL, .view = FILESET_NULL,
                         .copy_src = FILESET_NULL, .layout = &m->base_files };
        sw->target = (StageTarget) { .size = m->ps.base.size };
        if (!task) {
                memcpy(sw->target.sha256, m->ps.base.sha256, SHA256_DIGEST_SIZE);
                if (m->config->verify == VERIFY_INCREMENTAL) {
                        sw->target.chunk_size = m->ps.base.chunk_size;
                        memcpy(sw->target.chunk_root, m->ps.base.chunk_root, SHA256_DIGEST_SIZE);
                }
        } else {
                const InstalledTask *t = task_name_valid(task) ? store_find(&m->store, task, version) : NULL;
                if (!t) {
                        switch_free(sw);
                        *ret_code = task_name_valid(task) ? "not-found" : "usage";
                        if (!task_name_valid(task))
                                return tp_error(err, -EINVAL, "'%.80s' is not a valid task name", task);
                        const RevokedTask *rt = store_find_revoked(&m->store, task, version);
                        for (size_t i = 0; !version && !rt && i < m->store.n_revoked; i++)
                                if (strcmp(m->store.revoked[i].task, task) == 0)
                                        rt = &m->store.revoked[i];
                        if (rt) {
                                *ret_code = "refused";
                                return tp_error(err, -EKEYREVOKED, "%s v%" PRIu64 " is installed but revoked: %s%s",
                                                task, rt->version, rt->why, version ? "" : " (and no other version is "
                                                "installed)");
                        }
                        if (version)
                                return tp_error(err, -ENOENT, "%s v%" PRIu64 " is not installed", task, version);
                        return tp_error(err, -ENOENT, "no version of task '%s' is installed", task);
                }
                int fd = open(t->path, O_RDONLY | O_CLOEXEC);
                if (fd < 0) {
                        switch_free(sw);
                        return tp_error(err, negative_errno(), "%s: %s", t->path, strerror(errno));
                }
                if ((r = manager_open_bundle(m, fd, t->path, &sw->bundle, signer, ret_code, err)) < 0) {
                        switch_free(sw);
                        return r;
                }
                const Manifest *mf = sw->bundle->manifest;
                sw->layout = &mf->target.files;
                if (sw->layout->set.directory != m->ps.base.directory) {
                        switch_free(sw);
                        *ret_code = "refused";
                        return tp_error(err, -EBADMSG, "%s v%" PRIu64 " makes %s, this device's model is %s",
                                        task, mf->version, mf->target.files.set.directory ? "a model directory" : "one file",
                                        m->ps.base.directory ? "a directory" : "one file");
                }
                sw->target.size = mf->target.size;
                memcpy(sw->target.sha256, mf->target.sha256, SHA256_DIGEST_SIZE);
                if (m->config->verify == VERIFY_INCREMENTAL) {
                        sw->target.chunk_size = mf->target.chunk_size;
                        memcpy(sw->target.chunk_root, mf->target.chunk_root, SHA256_DIGEST_SIZE);
                }
                sw->target.bundle = sw->bundle;
                sw->new_base = sw->target.new_base = mf->role == MANIFEST_ROLE_BASE;
                sw->full = sw->new_base && mf->base.size == 0;
        }
        if (!manager_on_trial(m) && holds_target(m, sw, m->active)) {
                switch_free(sw);
                *ret_sw = NULL;
                return 0;
        }
        *ret_sw = sw;
        return 0;
}

static void switch_attach(Operation *op, Switch *sw) {
        op->data = sw;
        op->free_data = switch_free;
        op->cmd = "switch";
        op->step = switch_step;
        op->done = op->total = 0;
        op->phase = "prepare";
        snprintf(op->task, sizeof(op->task), "%s", sw->bundle ? sw->bundle->manifest->task : "");
        op->version = sw->bundle ? sw->bundle->manifest->version : 0;
        op->new_base = sw->new_base ? &sw->base : NULL;
}

int switch_new(Manager *m, const char *task, uint64_t version, Operation **ret, const char **ret_code, TpError *err) {
        Switch *sw = NULL;
        int r = switch_setup(m, task, version, &sw, ret_code, err);

        if (r < 0)
                return r;
        *ret = NULL;
        if (!sw)
                return 0;
        Operation *op = calloc(1, sizeof(Operation));
        if (!op) {
                switch_free(sw);
                return -ENOMEM;
        }
        switch_attach(op, sw);
        op->start = EVENT_SWITCH;
        *ret = op;
        return 0;
}

int reprovision_new(Manager *m, Operation **ret, TpError *err) {
        Switch *sw = calloc(1, sizeof(Switch));
        Operation *op = calloc(1, sizeof(Operation));

        if (!sw || !op) {
                free(sw);
                free(op);
                return tp_error(err, -ENOMEM, "reprovision: %s", strerror(ENOMEM));
        }
        *sw = (Switch) { .slot_set = FILESET_NULL, .fresh_tmp = ATOMIC_MODEL_NULL, .view = FILESET_NULL,
                         .copy_src = FILESET_NULL, .layout = &m->base_files, .reprovision = true };
        sw->target = (StageTarget) { .size = m->ps.base.size };
        memcpy(sw->target.sha256, m->ps.base.sha256, SHA256_DIGEST_SIZE);
        if (m->config->verify == VERIFY_INCREMENTAL) {
                sw->target.chunk_size = m->ps.base.chunk_size;
                memcpy(sw->target.chunk_root, m->ps.base.chunk_root, SHA256_DIGEST_SIZE);
        }
        switch_attach(op, sw);
        op->cmd = "reprovision";
        op->start = _EVENT_INVALID;     /* the daemon's own background work, like a scrub */
        *ret = op;
        return 0;
}

int switch_continue(Operation *op, const char *task, uint64_t version, TpError *err) {
        const char *code = NULL;
        Switch *sw = NULL;
        int r;

        if (!machine_can(&op->m->machine, EVENT_SWITCH)) {
                op->err_code = "busy";
                return tp_error(err, -EBUSY, "%s v%" PRIu64 " is installed, not switched to: a task is on trial",
                                task, version);
        }
        r = switch_setup(op->m, task, version, &sw, &code, err);

        if (r < 0) {
                op->err_code = code;
                return r;
        }
        if (op->free_data)
                op->free_data(op->data);
        op->data = NULL;
        op->free_data = NULL;
        if (!sw)
                return 0;       /* already active: the install is all there was to do */
        switch_attach(op, sw);
        r = manager_fire(op->m, EVENT_SWITCH);
        return r < 0 ? tp_error(err, r, "cannot start the switch: %s", strerror(-r)) : 1;
}
