/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Whole-file work in slices, for callers that must stay responsive between
 * them (the daemon's event loop): copying a model into a slot and hashing
 * one. Each *_step() does about @budget bytes and returns 1 while there is
 * more, 0 when done, or a negative errno.
 */

#include <stdbool.h>
#include <stdint.h>

#include "fileset.h"
#include "macro.h"
#include "sha256.h"
#include "syncer.h"

typedef struct FileCopy {
        int src, dst;                   /* not owned */
        uint64_t size, pos;
        bool cloned;                    /* FICLONE shared the extents: nothing to copy */
        bool plain;                     /* copy_file_range is unavailable: read/write */
} FileCopy;

/* Copy @size bytes of @src into the empty @dst: a reflink when the filesystem can, else copy_file_range. */
void file_copy_init(FileCopy *c, int src, int dst, uint64_t size);
_warn_unused_result_ int file_copy_step(FileCopy *c, uint64_t budget);

/*
 * The same for a model of several files: every file of @src into the empty file of the same
 * index in @dst (both borrowed; the caller has checked they list the same files and sizes).
 * pos counts the bytes of the space copied so far. The copy is made durable as it goes, a piece
 * at a time on a worker thread (syncer.h), so that the caller's fdatasync at the end (still
 * needed) is short: set_copy_step() returns 0 only once those fdatasyncs are done (1 meanwhile,
 * each call waiting 10 ms at most), and returns the error of one that failed.
 * set_copy_done() stops the worker: call it before closing @dst's files when the copy ends
 * early (a copy that returned 0 has stopped it already), and before set_copy_init() again.
 */
typedef struct SetCopy {
        const FileSet *src, *dst;
        size_t file;                    /* the file being copied */
        FileCopy cur;
        uint64_t pos;
        Syncer *syncer;                 /* fdatasyncs dst behind the copy, from its first piece on */
} SetCopy;

void set_copy_init(SetCopy *c, const FileSet *src, const FileSet *dst);
_warn_unused_result_ int set_copy_step(SetCopy *c, uint64_t budget);
void set_copy_done(SetCopy *c);

/*
 * Retiring a slot's files that a rename is about to replace. Else the rename (or the last close)
 * frees all their blocks in one call: ~105 ms for 350 MB on ext4, with an event loop waiting.
 * file_retire_hold() leases every file of @set (open read-write; the set owns its fds), so that
 * they are the caller's alone to empty; when another process has one open or mapped, the set is
 * closed at once instead, as before (a service still mapping the old model keeps it whole).
 * After the rename, file_retire_step() truncates them from their ends, a piece at a time (one at
 * least), until @time_cap ns have passed, or they are empty and the set is closed (its files
 * NULL again). A lease broken meanwhile (someone opened one after all) ends the truncating: the
 * close frees what is left. Neither can fail: at worst the blocks go all at once, as before.
 */
void file_retire_hold(FileSet *set, int lease_signal);
void file_retire_step(FileSet *set, uint64_t time_cap);

typedef struct FileHash FileHash;

/* Hash the first @size bytes of @fd; with @chunk_size > 0 also the chunk table (slot.h). */
_warn_unused_result_ int file_hash_new(int fd, uint64_t size, uint64_t chunk_size, FileHash **ret);
/*
 * Hash the files of @set (borrowed until freed) file by file: the result is fileset_digest()'s
 * (a single file's own SHA-256), and the chunk table runs over the set's space.
 */
_warn_unused_result_ int file_hash_new_set(const FileSet *set, uint64_t chunk_size, FileHash **ret);
FileHash *file_hash_free(FileHash *h);
DEFINE_POINTER_CLEANUP(FileHash, file_hash_free)
/* -EIO when the file ends early. */
_warn_unused_result_ int file_hash_step(FileHash *h, uint64_t budget);
uint64_t file_hash_done(const FileHash *h);
/* After the last step: the digest, and the chunk table (ownership passes; NULL without chunks). */
void file_hash_result(FileHash *h, uint8_t ret_sha256[SHA256_DIGEST_SIZE], uint8_t **ret_chunks);
/* The same, and each file's SHA-256 into @ret_files (set->n_files entries). */
void file_hash_result_files(FileHash *h, uint8_t (*ret_files)[SHA256_DIGEST_SIZE], uint8_t ret_sha256[SHA256_DIGEST_SIZE],
                            uint8_t **ret_chunks);
