/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Building a slot's next content into a fresh file, from base bytes: the
 * staging for a target whose layout is not the slot's. That is a relocated
 * task (a format-2 bundle: tensors moved, resized or added), and any target
 * when the slot it starts from holds a relocated task.
 *
 * The base bytes come from a "base view": a sealed slot file and its undo
 * record (slot.h), which between them give back every base byte wherever
 * the slot's task left it. A task is always built from base bytes, never
 * from another task's bytes.
 *
 * One pass in target order, in slices: copied runs come from the base view
 * (copy_file_range where they lie in the slot file, so a filesystem that can
 * shares or copies them in the kernel; the record's own bytes where it
 * stored them), then are read back for the hash; decoded spans come from
 * the bundle through span.h's decoder, each checked against its own digest.
 * Every byte of the result goes into the target's SHA-256, which must match
 * before anything is committed: the new file is fdatasync'ed, then its
 * record is written (TPUNDO2 for a relocated task: where each base range
 * now lies and the base bytes it no longer holds; TPUNDO1 for an in-layout
 * task; none for the base) and renamed into place. The caller renames the
 * file over the slot and seals it; until then the slot is marked dirty.
 *
 * A relocated result keeps no chunk table: it is never staged in place, so
 * incremental verification has nothing to reuse it for.
 */

#include <stdbool.h>
#include <stdint.h>

#include "error.h"
#include "stage.h"

typedef struct Builder Builder;

/*
 * Plan the build of @tgt (its bundle of format 1 or 2, or NULL for the base
 * of @base_size bytes) from the base view @view_fd + @view. Writes nothing:
 * builder_space() then says what the build needs, and builder_output()
 * gives the file to write.
 */
_warn_unused_result_ int builder_new(int view_fd, const StageSource *view, const StageTarget *tgt, uint64_t base_size,
                                     const char *undo_path, Builder **ret, TpError *err);
Builder *builder_free(Builder *b);
DEFINE_POINTER_CLEANUP(Builder, builder_free)

/* Bytes of disk the result and its record take. */
uint64_t builder_space(const Builder *b);
/* The empty file the result goes into (not owned). */
void builder_output(Builder *b, int out_fd);

/* Process about @budget bytes: 1 while there is more, 0 when verified, synced and the record committed. */
_warn_unused_result_ int builder_step(Builder *b, uint64_t budget, TpError *err);
const StageProgress *builder_progress(const Builder *b);
/* After 0: the record's span count and digest (0 spans: the base, no record) and whether it is relocated. */
void builder_result(const Builder *b, uint64_t *ret_undo_spans, uint8_t ret_undo_sha256[SHA256_DIGEST_SIZE],
                    bool *ret_relocated);
