/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The slot store's records. A slot is a full model file; beside it live
 *
 *   <slot>.seal    what the file holds (JSON): the base family, the task
 *                  and version, the whole file's SHA-256, the chunk-hash
 *                  root, the undo record's digest, and the file's identity
 *                  (dev, ino, size, mtime) when it was sealed. A seal whose
 *                  identity does not match the file on disk, or that is
 *                  marked dirty, is not trusted: the slot is rebuilt.
 *   <slot>.undo    the base bytes the slot's task overwrote (below), so the
 *                  slot can return to the base without a copy of the base;
 *                  for a relocated task (a format-2 bundle: tensors moved or
 *                  resized), where in the slot each base range now lies, and
 *                  the base bytes the slot no longer holds anywhere.
 *   <slot>.chunks  the SHA-256 of every chunk_size chunk of the file, back
 *                  to back; its SHA-256 is the seal's chunk_root (which is
 *                  the target.chunk_root a manifest signs).
 *
 * Every record is written with AtomicFile (temporary, fsync, rename, fsync
 * of the directory).
 *
 * Undo record format (little-endian):
 *
 *   "TPUNDO1\0"                    magic
 *   u64 n                          spans, sorted by offset, not overlapping
 *   n x { u64 offset, u64 length } where the bytes go
 *   the bytes of span 0, 1, ... n-1
 *   32 bytes                       SHA-256 of everything above
 *
 * Base bytes outside the spans are the slot's own bytes at the same offset.
 * A relocated slot's record maps the whole base instead:
 *
 *   "TPUNDO2\0"                    magic
 *   u64 n                          entries, tiling the base [0, base_size) in order
 *   u64 base_size
 *   n x { u64 base_offset, u64 length, u64 slot_offset }
 *                                  slot_offset = UNDO_STORED: the bytes are in this record
 *   the stored entries' bytes, in entry order
 *   32 bytes                       SHA-256 of everything above
 *
 * Either way undo_read_base() gives any base byte back, and the slot plus its
 * record are a "base view" a new task is built from.
 */

#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "error.h"
#include "fileset.h"
#include "manifest.h"
#include "sha256.h"

typedef enum SlotId {
        SLOT_A,
        SLOT_B,
        _SLOT_ID_MAX,
        _SLOT_ID_INVALID = -EINVAL,
} SlotId;

const char *slot_id_to_string(SlotId s);       /* "a", "b" */
SlotId slot_id_from_string(const char *s);
static inline SlotId slot_other(SlotId s) {
        return s == SLOT_A ? SLOT_B : SLOT_A;
}

typedef struct Seal {
        bool dirty;                             /* a staging began and did not finish */
        char task[TASK_NAME_MAX + 1];           /* "" = the base */
        uint64_t version;                       /* 0 for the base */
        uint8_t sites_fingerprint[SHA256_DIGEST_SIZE];
        uint8_t sha256[SHA256_DIGEST_SIZE];     /* of the whole file */
        uint64_t size;
        uint64_t chunk_size;                    /* granularity of <slot>.chunks */
        uint8_t chunk_root[SHA256_DIGEST_SIZE];
        uint8_t base_sha256[SHA256_DIGEST_SIZE];/* the base family: the provisioned base */
        uint8_t base_layout[SHA256_DIGEST_SIZE];
        bool relocated;                         /* the file has the task's own layout (TPUNDO2 record) */
        uint64_t undo_spans;                    /* 0: the slot holds the base, no undo record */
        uint8_t undo_sha256[SHA256_DIGEST_SIZE];
        uint64_t dev, ino;                      /* file identity when sealed (a directory slot: the directory's) */
        int64_t mtime_ns;
        /* A directory slot: how many files, and a digest of each one's path, size, dev, ino and mtime. */
        uint32_t n_files;                       /* 0: the slot is one file */
        uint8_t files_identity[SHA256_DIGEST_SIZE];
} Seal;

#define SEAL_MAX_BYTES (16u << 10)

/* Load and validate a seal. -ENOENT when absent. Errors name the file and field. */
_warn_unused_result_ int seal_load(const char *path, Seal *ret, TpError *err);
/* Write @s atomically; *@ret_bytes (may be NULL) = bytes written. */
_warn_unused_result_ int seal_save(const char *path, const Seal *s, uint64_t *ret_bytes, TpError *err);
/* Record @st (dev, ino, size, mtime) as the sealed identity. */
void seal_set_identity(Seal *s, const struct stat *st);
/* Does @st still look like the file that was sealed? */
bool seal_identity_matches(const Seal *s, const struct stat *st);
/*
 * A directory slot: the directory (@dir_st) and every file of @set (its fds fstat'ed) as the
 * sealed identity; matching compares the same, so a file changed, replaced, added or removed
 * breaks the seal. -errno when a file cannot be stat'ed.
 */
_warn_unused_result_ int seal_set_identity_files(Seal *s, const struct stat *dir_st, const FileSet *set);
bool seal_identity_matches_files(const Seal *s, const struct stat *dir_st, const FileSet *set);

/* ---- chunk tables ---- */

#define CHUNK_MIN_SIZE (4u << 10)
#define CHUNK_MAX_ENTRIES (1u << 24)

static inline uint64_t chunk_count(uint64_t size, uint64_t chunk_size) {
        return (size + chunk_size - 1) / chunk_size;
}
/* SHA-256 of the concatenated digests (the manifest's chunk_root). */
void chunk_table_root(const uint8_t *table, uint64_t n, uint8_t ret[SHA256_DIGEST_SIZE]);
/* Load @path, which must hold chunk_count(size, chunk_size) digests whose root is @root. */
_warn_unused_result_ int chunk_table_load(const char *path, uint64_t size, uint64_t chunk_size,
                                          const uint8_t root[SHA256_DIGEST_SIZE], uint8_t **ret_table,
                                          TpError *err);
_warn_unused_result_ int chunk_table_save(const char *path, const uint8_t *table, uint64_t n, uint64_t *ret_bytes,
                                          TpError *err);

/* ---- undo records ---- */

#define UNDO_MAGIC "TPUNDO1"
#define UNDO_MAGIC_RELOCATED "TPUNDO2"
#define UNDO_STORED UINT64_MAX          /* slot_offset of a relocated record's entry whose bytes it holds */
#define UNDO_MAX_ENTRIES (2u * MANIFEST_MAX_SPANS + 1)

typedef struct UndoSpan {
        uint64_t offset;                /* in the slot's space (fileset.h); in the base for a relocated record */
        uint64_t length;
        uint64_t data_offset;           /* of its bytes in the undo file (stored entries) */
        uint64_t slot_offset;           /* relocated records: where the bytes are in the slot's space, or UNDO_STORED */
} UndoSpan;

typedef struct UndoCheck UndoCheck;

typedef struct UndoRecord {
        int fd;                         /* owned, read-only */
        UndoSpan *spans;
        uint64_t n;
        bool relocated;                 /* TPUNDO2 */
        uint64_t base_size;             /* the base it maps (relocated records) */
        UndoCheck *check;               /* undo_record_open_deferred(): its SHA-256, not yet checked */
} UndoRecord;

/*
 * Open @path and check it against the seal: @n spans, the file's SHA-256
 * is @sha256, spans sorted, inside @file_size (a relocated record: tiling
 * its base, slot ranges inside @file_size). Reads the whole record once.
 */
_warn_unused_result_ int undo_record_open(const char *path, uint64_t n, const uint8_t sha256[SHA256_DIGEST_SIZE],
                                          uint64_t file_size, UndoRecord **ret, TpError *err);

/*
 * The same checks, but the file's SHA-256 is left until undo_record_checked() asks for it. For a
 * caller whose every use of the record's bytes is checked again anyway (a stager: each span's base
 * bytes against the manifest, the bytes it restores in the verified result), which asks only to
 * name the cause of a failure: a record in good order is then never hashed at all.
 */
_warn_unused_result_ int undo_record_open_deferred(const char *path, uint64_t n,
                                                   const uint8_t sha256[SHA256_DIGEST_SIZE], uint64_t file_size,
                                                   UndoRecord **ret, TpError *err);

/*
 * Whether the record is what its seal says: 0, or -EBADMSG ("PATH: damaged ...") or a read error's
 * -errno, with @err set. Hashes the record the first time for undo_record_open_deferred() (0 at once
 * for a record undo_record_open() checked); the same answer on every call.
 */
_warn_unused_result_ int undo_record_checked(UndoRecord *u, TpError *err);
UndoRecord *undo_record_free(UndoRecord *u);
DEFINE_POINTER_CLEANUP(UndoRecord, undo_record_free)

/*
 * The base bytes [pos, pos + n) of a slot holding what @u describes (NULL:
 * the base itself), from the slot's files @slot (fileset_pread(), so a run
 * may cross from one file into the next) or the record.
 * undo_base_run() says where the base bytes from @pos lie: the length of the
 * run (at most @max) that lies in one place, and *@ret_slot_offset where it
 * starts in the slot's space, or UNDO_STORED when the record holds it; the
 * run is not cut at the slot's file ends.
 */
_warn_unused_result_ int undo_read_base(const UndoRecord *u, const FileSet *slot, uint64_t pos, size_t n, uint8_t *buf,
                                        TpError *err);
uint64_t undo_base_run(const UndoRecord *u, uint64_t pos, uint64_t max, uint64_t *ret_slot_offset);

/*
 * Write side: the span table is known up front (the new task's spans); the
 * bytes follow in span order. undo_writer_commit() appends the digest and
 * renames the record into place.
 */
typedef struct UndoWriter UndoWriter;
_warn_unused_result_ int undo_writer_new(const char *path, const UndoSpan *spans, uint64_t n, UndoWriter **ret,
                                         TpError *err);
/* A relocated record: @spans tile [0, @base_size); the stored entries' bytes follow, in order. */
_warn_unused_result_ int undo_writer_new_relocated(const char *path, const UndoSpan *spans, uint64_t n,
                                                   uint64_t base_size, UndoWriter **ret, TpError *err);
_warn_unused_result_ int undo_writer_append(UndoWriter *w, const void *data, size_t n, TpError *err);
/*
 * For callers that hash on another thread: append without hashing, and feed
 * the same bytes, in order, into undo_writer_hash() themselves (finished
 * before undo_writer_commit()).
 */
_warn_unused_result_ int undo_writer_append_unhashed(UndoWriter *w, const void *data, size_t n, TpError *err);
Sha256 *undo_writer_hash(UndoWriter *w);
/* Start writing back what was appended so far, without waiting: the commit's fsync then finds less to do. */
void undo_writer_start_writeback(UndoWriter *w);
/* Returns the digest and the bytes written. */
_warn_unused_result_ int undo_writer_commit(UndoWriter *w, uint8_t ret_sha256[SHA256_DIGEST_SIZE],
                                            uint64_t *ret_bytes, TpError *err);
/* Remove the temporary; NULL-safe. */
UndoWriter *undo_writer_free(UndoWriter *w);
DEFINE_POINTER_CLEANUP(UndoWriter, undo_writer_free)

/* ---- leases ---- */

/*
 * Take a write lease on @fd (open for writing, no other descriptor of ours
 * on the file): 0 when no other process has the file open or mapped,
 * -EBUSY when one has, another -errno when the filesystem offers no leases.
 * A lease break is announced with @sig (F_SETSIG), which the caller handles.
 */
_warn_unused_result_ int file_lease_take(int fd, int sig);
void file_lease_release(int fd);
/* Whether @fd still holds the write lease file_lease_take() took: false from the moment it is being broken. */
bool file_lease_held(int fd);
