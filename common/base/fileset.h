/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * A model's bytes as one space: its files back to back, in path order
 * (bytewise strcmp). A model of one file is a set of one, and its space is
 * the file. A model directory (a split GGUF, sharded safetensors, ONNX
 * with external data files, plus any side files such as config.json) is a
 * set of its regular files, found by walking the directory: sites, diffs
 * and spans all speak of offsets in that space, and only the edges (reading
 * the files, writing them, hashing them) see the files.
 *
 * A directory's walk is strict: symlinks, devices, sockets and FIFOs are
 * refused (a model cannot point outside itself), as are paths that
 * fileset_path_valid() refuses and more than FILESET_MAX_FILES files or
 * FILESET_MAX_DEPTH levels. Every other regular file is part of the model.
 *
 * Digests: a single file's is its SHA-256. A directory's is the SHA-256 of
 * "taskpatch-set-v1\0" followed, per file in order, by its path and a NUL,
 * its size (8 bytes, little-endian) and its SHA-256: it binds every name,
 * size and byte of the set.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "macro.h"
#include "sha256.h"

#define FILESET_MAX_FILES 4096u
#define FILESET_MAX_PATH 1024u          /* bytes of one relative path */
#define FILESET_MAX_DEPTH 8u            /* directory levels below the model directory */

typedef struct FileSetFile {
        char *path;             /* relative to the model directory; a single file: its base name */
        int fd;                 /* open for reading, or -1 (a set described by a manifest) */
        uint64_t offset;        /* of its first byte in the set's space */
        uint64_t size;
} FileSetFile;

typedef struct FileSet {
        FileSetFile *files;     /* sorted by path */
        size_t n_files;
        uint64_t size;          /* the sum of the files' sizes */
        bool directory;         /* false: one file, the model itself */
        bool owns_fds;          /* fileset_done() closes the fds (fileset_open_dir()) */
} FileSet;

#define FILESET_NULL ((FileSet) { .files = NULL })

/*
 * A set of the one file @fd of @size bytes as a compound literal (it lives in the enclosing
 * block): the fd is borrowed and nothing is allocated, so never fileset_done() it.
 */
#define FILESET_ONE(fd_, size_)                                                                          \
        ((FileSet) { .files = (FileSetFile[]) { { .path = (char *) "model", .fd = (fd_), .size = (size_) } }, \
                     .n_files = 1, .size = (size_) })

/* Relative, at most FILESET_MAX_PATH bytes, '/'-separated nonempty components, none "." or "..". */
bool fileset_path_valid(const char *path);

/* A set of the one file @fd (@size bytes, named @name or "model"): the fd is borrowed, not closed. */
_warn_unused_result_ int fileset_init_one(FileSet *s, int fd, const char *name, uint64_t size);

/*
 * Walk the directory open on @dirfd (borrowed) and open every regular file in it for reading
 * (O_NOFOLLOW, so a symlink is refused, not followed). @err names the path that was refused.
 */
_warn_unused_result_ int fileset_open_dir(int dirfd, FileSet *ret, TpError *err);
/* The same with every file opened @access (O_RDONLY or O_RDWR): a slot staged into. */
_warn_unused_result_ int fileset_open_dir_access(int dirfd, int access, FileSet *ret, TpError *err);

/*
 * Does @have list the files of @want, by name and size? -EBADMSG naming the first file that
 * differs: "'x.bin' is missing", "'y' is not one of the model's files", "'z' is 10 bytes, expected 12".
 */
_warn_unused_result_ int fileset_same_files(const FileSet *have, const FileSet *want, TpError *err);

/*
 * The model on @fd, which this takes (closed on failure too): a regular file is a set of one
 * named @name; a directory is walked (fileset_open_dir()).
 */
_warn_unused_result_ int fileset_open(int fd, const char *name, FileSet *ret, TpError *err);

/* Append a file to a set being described (fd -1): paths must come in order, each valid. */
_warn_unused_result_ int fileset_add(FileSet *s, const char *path, uint64_t size);

/* Close the fds this set opened (not a fileset_init_one() fd) and free it. */
void fileset_done(FileSet *s);

/* The file holding byte @off of the space (off < s->size): the last nonempty file starting at or before it. */
size_t fileset_locate(const FileSet *s, uint64_t off);

/* The index of @path, or -1. */
ssize_t fileset_find(const FileSet *s, const char *path);

/* Read exactly @n bytes at @off of the space, across files: -ENODATA when the space ends first. */
_warn_unused_result_ int fileset_pread(const FileSet *s, void *buf, size_t n, uint64_t off);

/*
 * Write exactly @n bytes at @off of the space, across files, as fileset_pread() reads them. A set
 * of one file is the file: a write past its end extends it (pwrite_full()). A directory's space
 * is its files as they are: -EFBIG when [off, off + n) runs past its end (nothing written).
 */
_warn_unused_result_ int fileset_pwrite(const FileSet *s, const void *buf, size_t n, uint64_t off);

/*
 * fdatasync every file, in order, stopping at the first failure: its -errno, and @err says
 * "@what: fdatasync: ..." (a directory's file named too: "@what, file 'w/x.bin': ...").
 */
_warn_unused_result_ int fileset_fdatasync(const FileSet *s, const char *what, TpError *err);

/*
 * Start writing back the files holding [off, off + len) (sync_file_range(2), SYNC_FILE_RANGE_WRITE,
 * each file whole), without waiting: so that a later fdatasync is short. Best effort; a set of one
 * file starts its whole file whatever the range.
 */
void fileset_start_writeback(const FileSet *s, uint64_t off, uint64_t len);

/*
 * Wait for the writeback of the space's bytes [*@pos, @end), one range of FILESET_WRITEBACK_RANGE
 * bytes at a time (sync_file_range(2): WAIT_BEFORE, WRITE, WAIT_AFTER), moving *@pos past each
 * range done, until it reaches @end (0) or CLOCK_MONOTONIC reaches @deadline_ns (1: call again;
 * 0 means no deadline), one range at least. So a caller on an event loop drains what
 * fileset_start_writeback() began in slices, and the fdatasync it must still do after (only that
 * makes the bytes and their metadata durable) finds little left to write. @end: the end of what
 * the caller wrote (the space's size at most); asking for less than the whole space spares a
 * caller that wrote a few ranges the calls over the rest. A failed range: its -errno, and @err
 * says "@what: writeback: ..." (as fileset_fdatasync()).
 */
#define FILESET_WRITEBACK_RANGE (2u << 20)
_warn_unused_result_ int fileset_wait_writeback(const FileSet *s, uint64_t *pos, uint64_t end, uint64_t deadline_ns,
                                                const char *what, TpError *err);

/* Whether [off, off + len) lies inside one file (an empty range: inside the file holding off, or at the end). */
bool fileset_in_one_file(const FileSet *s, uint64_t off, uint64_t len);

/*
 * Hashing a model file by file while its bytes stream past in the space's order: one SHA-256
 * per file (one in all for a single file, or for a manifest's empty list, which means one file).
 * A caller feeds no piece across a file's end: set_hash_at() says how far the file goes.
 */
typedef struct SetHash {
        const FileSet *set;     /* borrowed */
        Sha256 *files;          /* per file */
} SetHash;

_warn_unused_result_ int set_hash_init(SetHash *h, const FileSet *set);
/* The context of the file holding byte @pos, and (unless NULL) the bytes from @pos to that file's end. */
Sha256 *set_hash_at(const SetHash *h, uint64_t pos, uint64_t *ret_room);
/* Every file's digest, then the set's (fileset_digest()); a single file's is its own. */
void set_hash_final(SetHash *h, uint8_t ret[SHA256_DIGEST_SIZE]);
/* The same, and each file's own digest into @ret_files (one per file; one for a single file). */
void set_hash_final_files(SetHash *h, uint8_t (*ret_files)[SHA256_DIGEST_SIZE], uint8_t ret[SHA256_DIGEST_SIZE]);
void set_hash_done(SetHash *h);

/* The set's digest from its files' SHA-256s (@file_sha256[i] for files[i]); see above. */
void fileset_digest(const FileSet *s, const uint8_t (*file_sha256)[SHA256_DIGEST_SIZE],
                    uint8_t ret[SHA256_DIGEST_SIZE]);
