/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Building a slot's next content into fresh files, from base bytes: the
 * staging for a target whose layout is not the slot's. That is a relocated
 * task (a format-2 bundle: tensors moved, resized or added), and any target
 * when the slot it starts from holds a relocated task.
 *
 * Both ends are FileSets (fileset.h): a slot's one file, or its files back
 * to back as one space; offsets, spans and records speak of that space.
 * The base bytes come from a "base view": a sealed slot's files and its
 * undo record (slot.h), which between them give back every base byte
 * wherever the slot's task left it. A task is always built from base
 * bytes, never from another task's bytes.
 *
 * One pass in target order, in slices: copied runs come from the base view
 * (copy_file_range where they lie in the slot's files, cut where a file of
 * the view or of the output ends, so a filesystem that can shares or
 * copies them in the kernel; the record's own bytes where it stored them),
 * then are read back for the hash; decoded spans come from the bundle
 * through span.h's decoder, each checked against its own digest. Every
 * byte of the result is hashed, each output file on its own, and the
 * result's digest (fileset_digest(): a single file's SHA-256, a directory's
 * set digest) must be the target's sha256 before anything is committed:
 * every output file is fdatasync'ed, then its record is written (TPUNDO2
 * for a relocated task: where each base range now lies and the base bytes
 * it no longer holds; TPUNDO1 for an in-layout task; none for the base)
 * and renamed into place. The caller renames the output over the slot and
 * seals it; until then the slot is marked dirty.
 *
 * A relocated result keeps no chunk table: it is never staged in place, so
 * incremental verification has nothing to reuse it for.
 */

#include <stdbool.h>
#include <stdint.h>

#include "error.h"
#include "fileset.h"
#include "stage.h"

typedef struct Builder Builder;

/*
 * Plan the build of @tgt (its bundle of format 1 or 2, or NULL for the base
 * of @base_size bytes) from the base view @view_files (the slot's files,
 * open for reading, sizes as on disk; borrowed until builder_free()) +
 * @view. Writes nothing: builder_space() then says what the build needs,
 * and builder_output() gives the files to write.
 */
_warn_unused_result_ int builder_new(const FileSet *view_files, const StageSource *view, const StageTarget *tgt,
                                     uint64_t base_size, const char *undo_path, Builder **ret, TpError *err);
Builder *builder_free(Builder *b);
DEFINE_POINTER_CLEANUP(Builder, builder_free)

/* Bytes of disk the result and its record take. */
uint64_t builder_space(const Builder *b);
/*
 * The files the result goes into, once, before the first builder_step(): empty, open read-write,
 * laid out as the target (@out->size is the target's size, else -EINVAL; -EBUSY a second time);
 * borrowed until builder_free() (a worker thread fdatasyncs them behind the pass: syncer.h).
 * A set of one file grows as it is written; a directory's files are written in place, each up to
 * its size.
 */
_warn_unused_result_ int builder_output(Builder *b, const FileSet *out, TpError *err);

/*
 * Process about @budget bytes: 1 while there is more, 0 when verified, every file synced and the
 * record committed. With a time cap (builder_set_time_cap(), as stager_set_time_cap()), a step
 * also ends once that much time has passed, the wait for the result's writeback before its
 * fdatasync included.
 */
_warn_unused_result_ int builder_step(Builder *b, uint64_t budget, TpError *err);
void builder_set_time_cap(Builder *b, uint64_t ns);
const StageProgress *builder_progress(const Builder *b);
/* After 0: the record's span count and digest (0 spans: the base, no record) and whether it is relocated. */
void builder_result(const Builder *b, uint64_t *ret_undo_spans, uint8_t ret_undo_sha256[SHA256_DIGEST_SIZE],
                    bool *ret_relocated);
