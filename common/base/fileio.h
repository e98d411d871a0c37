/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * File I/O the rest of the library builds on: whole reads and writes that
 * retry EINTR and short transfers, and atomic replacement of a file
 * (write a temporary in the same directory, fsync, rename, fsync the
 * directory): after a crash the path holds the old file or the new one,
 * never a mix, and a failed write leaves no file behind.
 */

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"
#include "macro.h"

/*
 * The size of the regular file open on @fd, for the readers of untrusted files: -EINVAL ("not a
 * regular file") for a pipe, device, directory or socket, or the -errno of a failed fstat
 * ("cannot stat the file: ..."); @err (may be NULL) says which, and *@ret is untouched.
 */
_warn_unused_result_ int fd_regular_size(int fd, uint64_t *ret, TpError *err);

/* Read exactly @n bytes at @off: -EIO ... or -ENODATA when the file ends first. */
_warn_unused_result_ int pread_full(int fd, void *buf, size_t n, uint64_t off);
_warn_unused_result_ int pwrite_full(int fd, const void *buf, size_t n, uint64_t off);
_warn_unused_result_ int write_full(int fd, const void *buf, size_t n);

/* fsync the directory holding @path (so a rename or create in it is durable). */
_warn_unused_result_ int fsync_parent_dir(const char *path);
/*
 * mkdir(@path, @mode), and when it created the directory, fsync its parent: a file later
 * renamed into @path and fsynced there is lost in a power cut if @path's own entry is not
 * durable. Returns 1 when created, 0 when it already existed, or a negative errno.
 */
_warn_unused_result_ int mkdir_durable(const char *path, mode_t mode);

typedef struct AtomicFile {
        int fd;         /* the temporary, open for writing */
        char *path;     /* final path */
        char *tmp_path; /* "<dir>/.<name>.taskpatch.XXXXXX" (ATOMIC_FILE_TAG): atomic_file_is_temporary() */
        bool no_sync;   /* skip the fsyncs (scratch output, benchmarks): atomic, not durable */
} AtomicFile;

#define ATOMIC_FILE_NULL ((AtomicFile){.fd = -1})
#define ATOMIC_FILE_TAG  ".taskpatch."

/*
 * Whether @name (a file name, no directory) is a temporary atomic_file_open() makes:
 * "." + a name + ".taskpatch." + six characters. A crash may leave one behind; nothing else
 * has this shape, so a clean-up that removes only these never removes another program's file.
 */
bool atomic_file_is_temporary(const char *name);

/*
 * Create a temporary beside @path (mode 0644 before umask) to be renamed over it by
 * atomic_file_commit(). -EEXIST when @path is a device, fifo or socket, -EISDIR when it is a
 * directory: those are never replaced.
 */
_warn_unused_result_ int atomic_file_open(const char *path, AtomicFile *ret);
/* What an atomic_file_open() error means, for a message that names the path first. */
const char *atomic_file_strerror(int r);
/*
 * fsync, rename onto the final path, fsync the directory. A negative errno means the path still
 * holds the old file (the fsync or the rename failed) and the temporary is removed; once the rename
 * is done the commit succeeds, even if the directory's fsync then fails (see fileio.c).
 */
_warn_unused_result_ int atomic_file_commit(AtomicFile *f);
/* Remove the temporary (if still there) and free; safe after commit and on ATOMIC_FILE_NULL. */
void atomic_file_abort(AtomicFile *f);
/* Replace @path with @len bytes of @data: open, write, commit. */
_warn_unused_result_ int atomic_file_write(const char *path, const void *data, size_t len);
