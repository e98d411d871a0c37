/* SPDX-License-Identifier: MIT */

#include <dirent.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomicdir.h"
#include "fileio.h"

#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

static int remove_at(int at, const char *name, unsigned depth) {
        struct stat st;
        int r = 0;

        if (fstatat(at, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return errno == ENOENT ? 0 : negative_errno();
        if (!S_ISDIR(st.st_mode))
                return unlinkat(at, name, 0) < 0 && errno != ENOENT ? negative_errno() : 0;
        if (depth > 2 * FILESET_MAX_DEPTH)
                return -ELOOP;
        int fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        DIR *d = fdopendir(fd);
        if (!d) {
                r = negative_errno();
                close(fd);
                return r;
        }
        for (struct dirent *e; r >= 0 && (e = readdir(d));)
                if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
                        r = remove_at(dirfd(d), e->d_name, depth + 1);
        closedir(d);
        if (r >= 0 && unlinkat(at, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
                r = negative_errno();
        return r;
}

int remove_tree(const char *path) {
        return remove_at(AT_FDCWD, path, 0);
}

int atomic_dir_open(const char *path, const FileSet *layout, bool no_sync, AtomicDir *ret) {
        _cleanup_free_ char *copy1 = strdup(path), *copy2 = strdup(path), *final = strdup(path), *tmp = NULL;
        struct stat st;

        if (!copy1 || !copy2 || !final)
                return -ENOMEM;
        if (lstat(path, &st) == 0 && !S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
                return -EEXIST;
        if (asprintf(&tmp, "%s/.%s" ATOMIC_FILE_TAG "XXXXXX", dirname(copy1), basename(copy2)) < 0) {
                tmp = NULL;
                return -ENOMEM;
        }
        if (!mkdtemp(tmp))
                return negative_errno();
        /* mkdtemp() makes 0700; give it the mode a plain mkdir() would have. */
        mode_t mask = umask(0);
        umask(mask);
        (void) chmod(tmp, 0755 & ~mask);
        int fd = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0) {
                int r = negative_errno();
                (void) rmdir(tmp);
                return r;
        }
        *ret = (AtomicDir) { .path = TAKE_PTR(final), .tmp_path = TAKE_PTR(tmp), .dirfd = fd, .layout = layout,
                             .fd = -1, .no_sync = no_sync };
        return 0;
}

/* Make the directories above @path (relative) inside the temporary. */
static int make_parents(AtomicDir *d, const char *path) {
        _cleanup_free_ char *p = strdup(path);
        if (!p)
                return -ENOMEM;
        for (char *slash = strchr(p, '/'); slash; slash = strchr(slash + 1, '/')) {
                *slash = '\0';
                if (mkdirat(d->dirfd, p, 0755) < 0 && errno != EEXIST)
                        return negative_errno();
                *slash = '/';
        }
        return 0;
}

/* Finish the file being written (fsync it) and open the next. */
static int next_file(AtomicDir *d) {
        if (d->fd >= 0) {
                if (!d->no_sync && fsync(d->fd) < 0)
                        return negative_errno();
                safe_close(d->fd);
                d->fd = -1;
                d->file++;
        }
        if (d->file >= d->layout->n_files)
                return 0;
        const char *path = d->layout->files[d->file].path;
        int r = make_parents(d, path);
        if (r < 0)
                return r;
        d->fd = openat(d->dirfd, path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        return d->fd < 0 ? negative_errno() : 0;
}

int atomic_dir_create_files(AtomicDir *d, FileSet *ret) {
        FileSet s = FILESET_NULL;
        int r = 0;

        if (d->fd >= 0 || d->pos > 0 || d->file > 0)
                return -EBUSY;          /* already being written as a stream */
        s.directory = true;
        s.owns_fds = true;
        for (size_t i = 0; r >= 0 && i < d->layout->n_files; i++) {
                const FileSetFile *f = &d->layout->files[i];
                if ((r = fileset_add(&s, f->path, f->size)) < 0 || (r = make_parents(d, f->path)) < 0)
                        break;
                s.files[i].fd = openat(d->dirfd, f->path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
                if (s.files[i].fd < 0)
                        r = negative_errno();
        }
        if (r < 0) {
                fileset_done(&s);
                return r;
        }
        /* Written through the set now: the stream's bookkeeping says every file is there. */
        d->file = d->layout->n_files;
        d->pos = d->layout->size;
        *ret = s;
        return 0;
}

int atomic_dir_write(AtomicDir *d, const void *buf, size_t n) {
        const uint8_t *p = buf;
        int r;

        if (n > d->layout->size - d->pos)
                return -EFBIG;
        while (n > 0) {
                if (d->fd < 0 && (r = next_file(d)) < 0)
                        return r;
                const FileSetFile *f = &d->layout->files[d->file];
                uint64_t room = f->offset + f->size - d->pos;
                if (room == 0) {
                        if ((r = next_file(d)) < 0)
                                return r;
                        continue;
                }
                size_t k = room < n ? (size_t) room : n;
                if ((r = write_full(d->fd, p, k)) < 0)
                        return r;
                p += k;
                n -= k;
                d->pos += k;
        }
        return 0;
}

/* fsync every directory of the temporary tree, deepest first is not needed: each holds its entries. */
static int sync_dirs(AtomicDir *d) {
        if (d->no_sync)
                return 0;
        for (size_t i = 0; i < d->layout->n_files; i++) {
                _cleanup_free_ char *p = strdup(d->layout->files[i].path);
                if (!p)
                        return -ENOMEM;
                for (char *slash = strrchr(p, '/'); slash; slash = strrchr(p, '/')) {
                        *slash = '\0';
                        int fd = openat(d->dirfd, p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        if (fd < 0)
                                return negative_errno();
                        int r = fsync(fd) < 0 ? negative_errno() : 0;
                        close(fd);
                        if (r < 0)
                                return r;
                }
        }
        return fsync(d->dirfd) < 0 ? negative_errno() : 0;
}

int atomic_dir_commit(AtomicDir *d) {
        struct stat st;
        int r = 0;

        /* The rest of the files: empty ones after the last byte, or all of them for an empty stream. */
        while (r >= 0 && (d->fd >= 0 || d->file < d->layout->n_files))
                r = next_file(d);
        if (r >= 0 && d->pos != d->layout->size)
                r = -EBADMSG;
        if (r >= 0)
                r = sync_dirs(d);
        if (r < 0) {
                atomic_dir_abort(d);
                return r;
        }
        if (lstat(d->path, &st) == 0) {
                /* Swap, then the old tree sits at the temporary's name and goes. */
                if (renameat2(AT_FDCWD, d->tmp_path, AT_FDCWD, d->path, RENAME_EXCHANGE) < 0)
                        r = negative_errno();
        } else if (rename(d->tmp_path, d->path) < 0)
                r = negative_errno();
        if (r >= 0) {
                /* As atomic_file_commit(): the rename was the commit; a failed fsync here does not undo it. */
                if (!d->no_sync && fsync_parent_dir(d->path) < 0)
                        r = 0;          /* the commit stands */
        }
        atomic_dir_abort(d);
        return r;
}

void atomic_dir_abort(AtomicDir *d) {
        if (d->fd >= 0)
                safe_close(d->fd);
        if (d->dirfd >= 0)
                safe_close(d->dirfd);
        /*
         * After an exchange this is the old model: a whole tree, so one failed unlink must not
         * leave it all. A second pass retries what the first could not remove; whatever still
         * stays is recognisable (atomic_file_is_temporary()) and removed at the daemon's next start.
         */
        if (d->tmp_path && remove_tree(d->tmp_path) < 0 && remove_tree(d->tmp_path) < 0) {
                /* Left for the next start. */
        }
        free(d->tmp_path);
        free(d->path);
        *d = ATOMIC_DIR_NULL;
}

int atomic_model_open(const char *path, const FileSet *layout, uint64_t size, AtomicModel *ret) {
        AtomicModel m = ATOMIC_MODEL_NULL;
        int r;

        m.directory = layout && layout->directory;
        if (m.directory) {
                if ((r = atomic_dir_open(path, layout, false, &m.dir)) < 0)
                        return r;
                if ((r = atomic_dir_create_files(&m.dir, &m.set)) < 0) {
                        atomic_dir_abort(&m.dir);
                        return r;
                }
        } else {
                if ((r = atomic_file_open(path, &m.file)) < 0)
                        return r;
                if ((r = fileset_init_one(&m.set, m.file.fd, NULL, size)) < 0) {
                        atomic_file_abort(&m.file);
                        return r;
                }
        }
        *ret = m;
        return 0;
}

int atomic_model_commit(AtomicModel *m) {
        TpError ignored = {};
        int r = fileset_fdatasync(&m->set, "model", &ignored);

        /* The set's fds are the AtomicFile's or about to be done with: only the set's names go. */
        if (!m->directory)
                m->set.files[0].fd = -1;
        fileset_done(&m->set);
        if (r < 0) {
                atomic_model_abort(m);
                return r;
        }
        r = m->directory ? atomic_dir_commit(&m->dir) : atomic_file_commit(&m->file);
        atomic_model_abort(m);
        return r;
}

void atomic_model_abort(AtomicModel *m) {
        if (!m->directory && m->set.n_files)
                m->set.files[0].fd = -1;        /* the AtomicFile's, closed by its abort */
        fileset_done(&m->set);
        atomic_file_abort(&m->file);
        atomic_dir_abort(&m->dir);
        bool directory = m->directory;
        *m = ATOMIC_MODEL_NULL;
        m->directory = directory;
}
