/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * fdatasync behind a writer, on a second thread. A caller writing a set in
 * its space's order asks, as it goes, that what it has written be synced, and
 * writes on while a worker fdatasyncs it: an fdatasync costs about what was
 * written since the last one (the disk's cache is flushed: ~130 ms for a
 * 350 MB file here), so one at the end of a whole model would stall an event
 * loop that long, and each fdatasync on the loop's own thread stops the writing
 * meanwhile. Piece by piece behind the writer, the caller's own fdatasync at the
 * end (still needed: only it makes the last bytes and the metadata durable)
 * finds little left to flush.
 *
 * No queue: the worker fdatasyncs the files holding [synced, wanted), where
 * wanted is the newest position asked for; a request while one is in flight
 * only moves wanted, and the worker's next round covers all of it.
 *
 * Linux reports a file's writeback error to an open file once, so an error the
 * worker saw would be lost to the caller's own fdatasync: the first failed
 * fdatasync's -errno is kept, and every call after returns it.
 */

#include <stdint.h>

#include "fileset.h"
#include "macro.h"

/* Bytes written between two requests: each fdatasync flushes about this much. */
#define SYNCER_PIECE (32u << 20)

typedef struct Syncer Syncer;

/*
 * A worker for the files of @set: borrowed until syncer_free() (its fds stay open and its files
 * and sizes unchanged until then). -errno when the thread cannot start.
 */
_warn_unused_result_ int syncer_new(const FileSet *set, Syncer **ret);
/*
 * Stops the worker, after the fdatasync in flight, if any, returns (one round: what was asked for
 * when it began); the rounds asked for after it are dropped. Only then may the set's files be
 * closed. NULL-safe.
 */
Syncer *syncer_free(Syncer *s);
DEFINE_POINTER_CLEANUP(Syncer, syncer_free)

/*
 * The set is written up to @pos: once @pos is SYNCER_PIECE bytes past the last position asked
 * for, the worker is asked to fdatasync up to @pos. Never waits. 0, or the first failed
 * fdatasync's -errno.
 */
_warn_unused_result_ int syncer_behind(Syncer *s, uint64_t pos);

/*
 * The same without the piece: the worker is asked to fdatasync up to @pos now (for a writer whose
 * writes are sparse in the space, which counts its own bytes). Never waits. 0, or the first failed
 * fdatasync's -errno.
 */
_warn_unused_result_ int syncer_ask(Syncer *s, uint64_t pos);

/*
 * Wait for every round asked for, until CLOCK_MONOTONIC reaches @deadline_ns (0: no deadline):
 * 0 when they are done, 1 when the deadline came first (call again), or the first failed
 * fdatasync's -errno. The caller's own fdatasync comes after 0.
 */
_warn_unused_result_ int syncer_finish(Syncer *s, uint64_t deadline_ns);

/*
 * The end of a writer's syncing: syncer_finish(*@s, @deadline_ns), and once it returns 0 the worker
 * stopped and *@s NULL (0 at once when *@s is NULL). 1: call again; or the error. What the copy,
 * the builder and the stager each do before their own writeback wait and fdatasync.
 */
_warn_unused_result_ int syncer_end(Syncer **s, uint64_t deadline_ns);
