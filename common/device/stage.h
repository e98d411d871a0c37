/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Staging a task into a slot in place, in slices (so a daemon's event loop
 * stays responsive between them). The slot is a FileSet (fileset.h): its
 * one file, or its files back to back as one space; offsets, spans, undo
 * records and chunk tables all speak of that space.
 *
 * The slot holds some content (the base, or the base with task A's spans)
 * described by a clean seal and, for a task, its undo record. Staging task
 * B is one pass in space order: where A wrote and B does not, the undo
 * record's base bytes are written back; where B writes, its spans are
 * decoded against the base bytes (the slot's, or the undo record's where A
 * changed them) by span.h's decoder, checked against the manifest's per-span
 * hashes (the same checks and messages as bundle_apply()), and the
 * base bytes they replace go into B's new undo record. Bytes written are
 * O(patch): A's spans outside B's plus B's spans.
 *
 * Verification: VERIFY_FULL hashes every byte of the result (unchanged
 * bytes read, written bytes as they go out), each file on its own, and
 * compares the slot's digest (fileset_digest(): a single file's SHA-256, a
 * directory's set digest, as the manifest's target.sha256 holds them) with
 * the target's sha256; with a chunk table it also recomputes every chunk
 * digest.
 * VERIFY_INCREMENTAL reads and hashes only the chunks the pass touched and
 * takes the other digests from the source's sealed chunk table: the new
 * table's root must equal the target's chunk root (which the manifest
 * signs). Either way nothing is reported done until the result matches.
 *
 * The caller marks the slot dirty before the first stager_step() and seals
 * it after the last; a failure leaves the slot dirty.
 */

#include <stdint.h>

#include "bundle.h"
#include "config.h"
#include "error.h"
#include "fileset.h"
#include "slot.h"

typedef struct StageSource {
        const Seal *seal;               /* clean: what the slot holds */
        UndoRecord *undo;               /* its undo record; NULL when it holds the base. One whose
                                         * check is deferred (undo_record_open_deferred()) is checked
                                         * only when the pass fails, and its damage then reported as
                                         * the cause (StageProgress.source_damaged) */
        const uint8_t *chunks;          /* its chunk table at seal->chunk_size; NULL when none */
} StageSource;

typedef struct StageTarget {
        Bundle *bundle;                 /* verified (signature and manifest); NULL: return to the base */
        uint8_t sha256[SHA256_DIGEST_SIZE];     /* the slot's digest when it holds the target (see above) */
        uint64_t size;                          /* of the slot's space */
        uint64_t chunk_size;            /* 0: keep no chunk table */
        uint8_t chunk_root[SHA256_DIGEST_SIZE];
        bool new_base;                  /* a base bundle's target: it becomes the base, so no undo record is kept */
} StageTarget;

typedef struct StageProgress {
        uint64_t done, total;           /* bytes of the slot's space the pass covers */
        uint64_t write_total;           /* of those, up to the end of the last span written: past it, the
                                         * pass only verifies (for progress: "write", then "verify") */
        uint64_t slot_bytes;            /* bytes written into the slot */
        uint64_t undo_bytes;            /* bytes of the new undo record */
        uint64_t read_bytes;            /* bytes of the slot read: from the slot, or from the source
                                         * undo record where it holds them */
        uint64_t ahead_bytes;           /* of the slot bytes, those the hashing thread's pipe wrote (after a delta
                                         * piece's decode) while the pass read on (incremental mode) */
        bool incremental;               /* the pass ran in incremental mode */
        bool target_mismatch;           /* the pass ended with every span written, but the slot's SHA-256
                                         * (or chunk-hash root) is not the target's: a damaged slot, or a
                                         * bundle whose manifest names a target it does not make */
        bool source_damaged;            /* the source undo record is not what its seal says (its SHA-256,
                                         * checked after a failure: undo_record_open_deferred()) */
} StageProgress;

typedef struct Stager Stager;

/*
 * @slot: the slot's files, each open read-write, borrowed until
 * stager_free(); its size (the files' sizes on disk) must be the target's
 * and the seal's (-EBADMSG otherwise: a task does not change the model's
 * size in place). @undo_path: where the new undo record goes (replaced
 * atomically when the pass succeeds; removed when the target is the base).
 * VERIFY_INCREMENTAL falls back to a full pass when the source has no chunk
 * table at the target's chunk size.
 */
_warn_unused_result_ int stager_new(const FileSet *slot, const StageSource *src, const StageTarget *tgt,
                                    VerifyMode mode, const char *undo_path, Stager **ret, TpError *err);
Stager *stager_free(Stager *s);
DEFINE_POINTER_CLEANUP(Stager, stager_free)

/*
 * Process about @budget bytes: 1 while there is more, 0 when the result is
 * verified, every file fdatasync'ed and the undo record committed. With a time
 * cap (stager_set_time_cap()), a step also ends once that much CLOCK_MONOTONIC
 * time has passed after a window, so that windows dear to decode (predicted lora
 * spans) do not stretch it; the wait for the slot's writeback before its
 * fdatasync is cut into steps under the same cap (fileset_wait_writeback()). After 0:
 * stager_result() gives the new chunk table (NULL when none is kept; owned
 * by the stager) and the undo record's span count and digest.
 */
_warn_unused_result_ int stager_step(Stager *s, uint64_t budget, TpError *err);
/* The most time a step takes before it returns 1 (a window may overrun it); 0: none (the default). */
void stager_set_time_cap(Stager *s, uint64_t ns);
const StageProgress *stager_progress(const Stager *s);
void stager_result(const Stager *s, const uint8_t **ret_chunks, uint64_t *ret_undo_spans,
                   uint8_t ret_undo_sha256[SHA256_DIGEST_SIZE]);
