/* SPDX-License-Identifier: MIT */
/*
 * Scrubbing: a full SHA-256 of both slots against their seals, every
 * scrub_interval hours and at start when the active slot's seal does not
 * match its file. Incremental verification trusts a sealed slot's untouched
 * chunks; the scrub is what keeps that trust honest on storage that rots.
 *
 *   - a slot whose bytes match its seal is re-sealed if only its identity
 *     changed (a touched mtime, a restored backup) and trusted again;
 *   - an inactive slot that does not match is marked dirty (rebuilt when
 *     next needed);
 *   - an active slot that does not match is reported (status, event, log),
 *     and when the other slot matched its seal in the same scrub, the daemon
 *     moves model_path to it (manager_replace_damaged(): a trial rolls back,
 *     a committed slot is replaced with reason "active slot damaged"); with
 *     no clean slot to go to, it stays where it is and says so.
 */

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "filejob.h"
#include "taskpatchd-log.h"
#include "taskpatchd-manager.h"

typedef struct Scrub {
        SlotId slot;                    /* the one being hashed */
        FileSet set;                    /* its files */
        struct stat st;                 /* of its file or directory, when opened */
        FileHash *hash;
        unsigned bad;
        bool active_damaged;
} Scrub;

static void scrub_free(void *data) {
        Scrub *sc = data;
        file_hash_free(sc->hash);
        fileset_done(&sc->set);
        free(sc);
}

/* Compare what slot @s hashed to with its seal, and act on it. */
static int scrub_judge(Operation *op, Scrub *sc, const uint8_t digest[SHA256_DIGEST_SIZE]) {
        Manager *m = op->m;
        SlotId s = sc->slot;
        Seal *seal = &m->seals[s];
        struct stat st;
        int r;

        if (memcmp(digest, seal->sha256, SHA256_DIGEST_SIZE) == 0) {
                bool touched = seal->n_files ? !seal_identity_matches_files(seal, &sc->st, &sc->set)
                                             : fstat(sc->set.files[0].fd, &st) == 0 && !seal_identity_matches(seal, &st);
                if (touched) {
                        mlog_notice(m, "slot %s: its bytes match the seal but the %s touched: sealing it again",
                                    slot_id_to_string(s), seal->n_files ? "files were" : "file was");
                        if ((r = manager_seal_identity(m, s, seal, &op->err)) < 0 ||
                            (r = manager_save_seal(m, s, &op->err)) < 0)
                                return r;
                }
                m->sealed[s] = true;
                return 0;
        }
        sc->bad++;
        m->sealed[s] = false;
        if (s != m->active) {
                mlog_error(m, "slot %s does not hash to its seal: marking it dirty, it will be rebuilt",
                           slot_id_to_string(s));
                seal->dirty = true;
                return manager_save_seal(m, s, &op->err);
        }
        char msg[160];
        snprintf(msg, sizeof(msg), "the active slot %s does not hash to its seal (%s v%" PRIu64 "): damaged storage?",
                 slot_id_to_string(s), seal->task[0] ? seal->task : "base", seal->version);
        mlog_error(m, "%s", msg);
        manager_report_error(m, op->transaction, "io", msg, "scrub");
        sc->active_damaged = true;
        return 0;
}

/* Open slot sc->slot's files and start hashing them. */
static int scrub_open(Manager *m, Scrub *sc, const Seal *seal, TpError *err) {
        int r = manager_open_slot(m, sc->slot, O_RDONLY, &sc->set, &sc->st, err);

        if (r < 0)
                return r;
        if (sc->set.size != seal->size)
                return tp_error(err, -EIO, "%s: %" PRIu64 " bytes, its seal says %" PRIu64, m->files[sc->slot].path,
                                sc->set.size, seal->size);
        if ((r = file_hash_new_set(&sc->set, 0, &sc->hash)) < 0)
                return tp_error(err, r, "hashing: %s", strerror(-r));
        return 0;
}

static int scrub_step(Operation *op) {
        Scrub *sc = op->data;
        Manager *m = op->m;
        uint8_t d[SHA256_DIGEST_SIZE];
        int r;

        while (!sc->hash) {
                if (sc->slot >= _SLOT_ID_MAX) {
                        mlog_info(m, "scrub done: %u slot(s) did not match their seal", sc->bad);
                        if (sc->active_damaged && m->sealed[slot_other(m->active)])
                                return manager_replace_damaged(m, op);
                        if (sc->active_damaged)
                                mlog_error(m,
                                           "no clean slot to move to: the damaged slot %s stays active until a switch "
                                           "rebuilds the other slot",
                                           slot_id_to_string(m->active));
                        return 0;
                }
                const Seal *seal = &m->seals[sc->slot];
                if (seal->dirty || seal->size == 0) {
                        sc->slot++;             /* nothing is promised about a dirty slot */
                        continue;
                }
                TpError why = {};
                if (scrub_open(m, sc, seal, &why) < 0) {
                        mlog_error(m, "slot %s: cannot read it: %s", slot_id_to_string(sc->slot), why.message);
                        fileset_done(&sc->set);
                        sc->slot++;
                        sc->bad++;
                        continue;
                }
                op->total += seal->size;
        }
        op->phase = "verify";
        r = file_hash_step(sc->hash, OPERATION_SLICE);
        op->done = op->total - m->seals[sc->slot].size + file_hash_done(sc->hash);
        if (r > 0)
                return 1;
        if (r < 0) {
                mlog_error(m, "slot %s: reading: %s", slot_id_to_string(sc->slot), strerror(-r));
                memset(d, 0, sizeof(d));        /* a short or unreadable file does not match */
        } else
                file_hash_result(sc->hash, d, NULL);
        sc->hash = file_hash_free(sc->hash);
        if ((r = scrub_judge(op, sc, d)) < 0)
                return r;
        fileset_done(&sc->set);
        sc->slot++;
        return 1;
}

int scrub_new(Operation **ret) {
        Operation *op = calloc(1, sizeof(Operation));
        Scrub *sc = calloc(1, sizeof(Scrub));

        if (!op || !sc) {
                free(op);
                free(sc);
                return -ENOMEM;
        }
        sc->set = FILESET_NULL;
        op->data = sc;
        op->free_data = scrub_free;
        op->cmd = "scrub";
        op->start = _EVENT_INVALID;     /* the daemon's own check: no state of its own */
        op->step = scrub_step;
        op->phase = "verify";
        *ret = op;
        return 0;
}
