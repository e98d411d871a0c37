/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Hashing on a second thread: the caller reads, decodes and writes while a
 * worker folds the same buffers into SHA-256 states (and runs what the caller
 * hands it in order with them: hash_pipe_call()). Buffers live in the
 * caller's ring of HASH_PIPE_SLOTS slots; hash_pipe_slot() hands out the
 * next slot once every job that used it is done, so a slot's buffers may be
 * refilled exactly then. States fed to the pipe may be read only after
 * hash_pipe_sync().
 *
 * Each state gets its jobs in feeding order; jobs on different states may
 * run at once. A caller that would wait (in hash_pipe_slot(), a full queue,
 * hash_pipe_sync()) runs such a job itself, beside the worker's, rather than
 * idle. Either thread runs two single-state feeds on different states that may
 * both run as one two-state hash (sha256_update_pair()).
 */

#include "macro.h"
#include "sha256.h"

#define HASH_PIPE_SLOTS 8

typedef struct HashPipe HashPipe;

_warn_unused_result_ int hash_pipe_new(HashPipe **ret);
/* Waits for the queued work, stops the worker. NULL-safe. */
HashPipe *hash_pipe_free(HashPipe *p);
DEFINE_POINTER_CLEANUP(HashPipe, hash_pipe_free)

/* The next slot (0..HASH_PIPE_SLOTS-1), once no queued job still reads its buffers. */
unsigned hash_pipe_slot(HashPipe *p);
/* Queue: hash @len bytes at @data (in slot @slot's buffers) into @a, and into @b too unless NULL. */
void hash_pipe_feed(HashPipe *p, unsigned slot, Sha256 *a, Sha256 *b, const void *data, size_t len);
/*
 * Queue: run @fn(@arg) in order with the jobs on @a (and @b unless NULL), as if it hashed into
 * them: it runs after the jobs fed on them before it and before those fed after it. It may read
 * and write slot @slot's buffers (a decode that fills the buffer the next job hashes), and runs
 * on either thread.
 */
void hash_pipe_call(HashPipe *p, unsigned slot, Sha256 *a, Sha256 *b, void (*fn)(void *arg), void *arg);
/* Wait until everything queued is hashed (or run). */
void hash_pipe_sync(HashPipe *p);
/* How many times two single-state feeds on different states ran together, as one two-state hash. */
uint64_t hash_pipe_pairs(HashPipe *p);
