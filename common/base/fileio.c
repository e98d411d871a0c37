/* SPDX-License-Identifier: MIT */

#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "fileio.h"

int fd_regular_size(int fd, uint64_t *ret, TpError *err) {
        struct stat st;

        if (fstat(fd, &st) < 0) {
                int k = negative_errno();
                return tp_error(err, k, "cannot stat the file: %s", strerror(-k));
        }
        if (!S_ISREG(st.st_mode))
                return tp_error(err, -EINVAL, "not a regular file");
        *ret = (uint64_t) st.st_size;
        return 0;
}

int pread_full(int fd, void *buf, size_t n, uint64_t off) {
        uint8_t *p = buf;

        while (n > 0) {
                ssize_t k = pread(fd, p, n, (off_t) off);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return negative_errno();
                }
                if (k == 0)
                        return -ENODATA;
                p += k;
                n -= (size_t) k;
                off += (uint64_t) k;
        }
        return 0;
}

int pwrite_full(int fd, const void *buf, size_t n, uint64_t off) {
        const uint8_t *p = buf;

        while (n > 0) {
                ssize_t k = pwrite(fd, p, n, (off_t) off);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return negative_errno();
                }
                p += k;
                n -= (size_t) k;
                off += (uint64_t) k;
        }
        return 0;
}

int write_full(int fd, const void *buf, size_t n) {
        const uint8_t *p = buf;

        while (n > 0) {
                ssize_t k = write(fd, p, n);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return negative_errno();
                }
                p += k;
                n -= (size_t) k;
        }
        return 0;
}

int fsync_parent_dir(const char *path) {
        _cleanup_free_ char *copy = strdup(path);
        _cleanup_close_ int fd = -1;

        if (!copy)
                return -ENOMEM;
        fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        if (fsync(fd) < 0)
                return negative_errno();
        return 0;
}

int mkdir_durable(const char *path, mode_t mode) {
        int r;

        if (mkdir(path, mode) < 0)
                return errno == EEXIST ? 0 : negative_errno();
        r = fsync_parent_dir(path);
        return r < 0 ? r : 1;
}

int atomic_file_open(const char *path, AtomicFile *ret) {
        _cleanup_free_ char *copy1 = strdup(path), *copy2 = strdup(path), *final = strdup(path);
        _cleanup_free_ char *tmp = NULL;
        int fd;

        if (!copy1 || !copy2 || !final)
                return -ENOMEM;
        /*
         * The rename replaces whatever @path names: never a device, fifo, socket or directory
         * (as root, "-o /dev/null" would otherwise replace the device with a regular file).
         * A symbolic link is replaced itself, not its target.
         */
        struct stat st;
        if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode))
                return S_ISDIR(st.st_mode) ? -EISDIR : -EEXIST;
        if (asprintf(&tmp, "%s/.%s" ATOMIC_FILE_TAG "XXXXXX", dirname(copy1), basename(copy2)) < 0) {
                tmp = NULL;
                return -ENOMEM;
        }
        fd = mkostemp(tmp, O_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        /* mkostemp() makes 0600; give the file the mode a plain creat() would have. */
        mode_t mask = umask(0);
        umask(mask);
        (void) fchmod(fd, 0644 & ~mask);
        *ret = (AtomicFile){.fd = fd, .path = TAKE_PTR(final), .tmp_path = TAKE_PTR(tmp)};
        return 0;
}

const char *atomic_file_strerror(int r) {
        if (r == -EEXIST)
                return "exists and is not a regular file: not replacing it";
        if (r == -EISDIR)
                return "is a directory: not replacing it";
        return strerror(-r);
}

int atomic_file_commit(AtomicFile *f) {
        int r = 0;

        if (!f->no_sync && fsync(f->fd) < 0)
                r = negative_errno();
        if (r >= 0 && rename(f->tmp_path, f->path) < 0)
                r = negative_errno();
        if (r >= 0) {
                free(f->tmp_path);
                f->tmp_path = NULL; /* renamed: nothing left to remove */
                /*
                 * The rename was the commit: every reader now sees the new file, so failing here
                 * would have the caller believe the old one is still in place. A power cut before
                 * the entry is durable leaves the old file or the new one, as a crash would; the
                 * next fsync of this directory (any later commit in it) makes it durable.
                 */
                if (!f->no_sync && fsync_parent_dir(f->path) < 0)
                        r = 0; /* the commit stands (see above) */
        }
        atomic_file_abort(f);
        return r;
}

void atomic_file_abort(AtomicFile *f) {
        if (f->tmp_path)
                (void) unlink(f->tmp_path);
        if (f->fd >= 0)
                safe_close(f->fd);
        free(f->tmp_path);
        free(f->path);
        *f = (AtomicFile){.fd = -1};
}

int atomic_file_write(const char *path, const void *data, size_t len) {
        AtomicFile f = ATOMIC_FILE_NULL;
        int r = atomic_file_open(path, &f);

        if (r < 0)
                return r;
        r = write_full(f.fd, data, len);
        if (r < 0) {
                atomic_file_abort(&f);
                return r;
        }
        return atomic_file_commit(&f);
}

bool atomic_file_is_temporary(const char *name) {
        size_t n = strlen(name), tag = strlen(ATOMIC_FILE_TAG);

        if (n < 1 + 1 + tag + 6 || name[0] != '.' || memcmp(name + n - 6 - tag, ATOMIC_FILE_TAG, tag) != 0)
                return false;
        for (size_t i = n - 6; i < n; i++)
                if (!((name[i] >= 'a' && name[i] <= 'z') || (name[i] >= 'A' && name[i] <= 'Z') ||
                      (name[i] >= '0' && name[i] <= '9')))
                        return false;
        return true;
}
