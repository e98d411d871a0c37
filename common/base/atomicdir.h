/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Writing a model directory atomically: its files are written, in the
 * set's order, into a temporary directory beside the final path
 * ("<dir>/.<name>.taskpatch.XXXXXX", so atomic_file_is_temporary() knows
 * it), each fsynced, then the temporary is renamed into place and the
 * parent fsynced. A path that already holds a directory (or a file) is
 * swapped with the new one by one renameat2(RENAME_EXCHANGE) and the old
 * tree then removed: at every instant the path holds the old model or the
 * new one, never a mix. A failed write leaves no temporary behind.
 *
 * The bytes come as one stream in the set's space (fileset.h): the writer
 * cuts it at the files' ends.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fileio.h"
#include "fileset.h"
#include "macro.h"

typedef struct AtomicDir {
        char *path, *tmp_path;
        int dirfd;              /* the temporary directory */
        const FileSet *layout;  /* the files to write (paths and sizes); borrowed */
        size_t file;            /* the file being written */
        int fd;                 /* open on it, or -1 */
        uint64_t pos;           /* bytes of the stream written */
        bool no_sync;           /* skip the fsyncs (scratch output): atomic, not durable */
} AtomicDir;

#define ATOMIC_DIR_NULL ((AtomicDir) { .dirfd = -1, .fd = -1 })

/* Create the temporary directory beside @path for the files of @layout (borrowed until commit or abort). */
_warn_unused_result_ int atomic_dir_open(const char *path, const FileSet *layout, bool no_sync, AtomicDir *ret);
/* The next @n bytes of the stream: -EFBIG past the set's size. */
_warn_unused_result_ int atomic_dir_write(AtomicDir *d, const void *buf, size_t n);
/*
 * Instead of a stream: create every file of the layout, empty, and give them as a set open
 * read-write (sizes from the layout; the caller writes them at any offset, fdatasyncs them,
 * then commits). For a slot staged into a fresh directory.
 */
_warn_unused_result_ int atomic_dir_create_files(AtomicDir *d, FileSet *ret);
/* Every byte written (else -EBADMSG): fsync, rename or exchange into place, remove the old tree. */
_warn_unused_result_ int atomic_dir_commit(AtomicDir *d);
/* Remove the temporary tree (if still there) and free; safe after commit and on ATOMIC_DIR_NULL. */
void atomic_dir_abort(AtomicDir *d);

/* Remove the tree at @path (not following symlinks): for a temporary or a replaced model. */
_warn_unused_result_ int remove_tree(const char *path);

/*
 * A model written in place of @path whatever its shape: one file (an AtomicFile) or a directory
 * (an AtomicDir whose files are created up front). Either way the caller gets the files as a
 * set open read-write, writes them at any offset, and commits: fdatasync of every file, then
 * the rename (or exchange) that makes the new model appear whole.
 */
typedef struct AtomicModel {
        bool directory;
        AtomicFile file;
        AtomicDir dir;
        FileSet set;            /* the files being written (owned; a single file: the AtomicFile's fd) */
} AtomicModel;

#define ATOMIC_MODEL_NULL ((AtomicModel) { .file = ATOMIC_FILE_NULL, .dir = ATOMIC_DIR_NULL })

/*
 * @layout: the files to make (a directory's paths and sizes, borrowed until commit or abort), or
 * one file of @size bytes when NULL or not a directory. atomic_file_open()'s and
 * atomic_dir_open()'s errors.
 */
_warn_unused_result_ int atomic_model_open(const char *path, const FileSet *layout, uint64_t size, AtomicModel *ret);
_warn_unused_result_ int atomic_model_commit(AtomicModel *m);
void atomic_model_abort(AtomicModel *m);
