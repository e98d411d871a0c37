/* SPDX-License-Identifier: MIT */

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "fileio.h"
#include "fileset.h"

bool fileset_path_valid(const char *path) {
        size_t n = path ? strlen(path) : 0;

        if (n == 0 || n > FILESET_MAX_PATH || path[0] == '/')
                return false;
        for (const char *c = path; *c;) {
                size_t len = strcspn(c, "/");
                if (len == 0 || (len == 1 && c[0] == '.') || (len == 2 && c[0] == '.' && c[1] == '.'))
                        return false;
                c += len;
                if (*c == '/' && *++c == '\0')
                        return false;   /* a trailing slash */
        }
        return true;
}

static int grow(FileSet *s) {
        if (s->n_files >= FILESET_MAX_FILES)
                return -E2BIG;
        if ((s->n_files & (s->n_files - 1)) == 0) {     /* 0, 1, 2, 4, ...: double */
                FileSetFile *f = reallocarray(s->files, s->n_files ? 2 * s->n_files : 1, sizeof(*f));
                if (!f)
                        return -ENOMEM;
                s->files = f;
        }
        return 0;
}

int fileset_init_one(FileSet *s, int fd, const char *name, uint64_t size) {
        *s = FILESET_NULL;
        s->files = calloc(1, sizeof(*s->files));
        if (!s->files)
                return -ENOMEM;
        s->files[0] = (FileSetFile) { .path = strdup(name ? name : "model"), .fd = fd, .size = size };
        if (!s->files[0].path) {
                free(s->files);
                return -ENOMEM;
        }
        s->n_files = 1;
        s->size = size;
        return 0;
}

int fileset_add(FileSet *s, const char *path, uint64_t size) {
        if (!fileset_path_valid(path) || (s->n_files > 0 && strcmp(s->files[s->n_files - 1].path, path) >= 0))
                return -EINVAL;
        if (size > UINT64_MAX - s->size)
                return -EOVERFLOW;
        int r = grow(s);
        if (r < 0)
                return r;
        char *p = strdup(path);
        if (!p)
                return -ENOMEM;
        s->files[s->n_files++] = (FileSetFile) { .path = p, .fd = -1, .offset = s->size, .size = size };
        s->size += size;
        s->directory = true;
        return 0;
}

void fileset_done(FileSet *s) {
        for (size_t i = 0; i < s->n_files; i++) {
                if (s->owns_fds && s->files[i].fd >= 0)
                        close(s->files[i].fd);
                free(s->files[i].path);
        }
        free(s->files);
        *s = FILESET_NULL;
}

/* One directory level: its regular files added (unsorted), its subdirectories walked. */
static int walk(FileSet *s, int dirfd, const char *prefix, unsigned depth, int access, TpError *err) {
        _cleanup_close_ int dup_fd = dup(dirfd);
        DIR *d;
        struct dirent *e;
        int r = 0;

        if (dup_fd < 0 || !(d = fdopendir(dup_fd)))
                return tp_error(err, negative_errno(), "%s: %s", *prefix ? prefix : ".", strerror(errno));
        TAKE_FD(dup_fd);
        while (r >= 0 && (errno = 0, e = readdir(d))) {
                _cleanup_free_ char *path = NULL;
                _cleanup_close_ int fd = -1;
                struct stat st;

                if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                        continue;
                if (asprintf(&path, "%s%s%s", prefix, *prefix ? "/" : "", e->d_name) < 0) {
                        r = -ENOMEM;
                        break;
                }
                if (!fileset_path_valid(path)) {
                        r = tp_error(err, -EINVAL, "%.64s...: path longer than %u bytes", path, FILESET_MAX_PATH);
                        break;
                }
                fd = openat(dirfd, e->d_name, access | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
                if (fd < 0 && errno == EISDIR)  /* a directory is never opened for writing: walked read-only */
                        fd = openat(dirfd, e->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
                if (fd < 0) {
                        r = tp_error(err, negative_errno(), "%s: %s", path,
                                     errno == ELOOP ? "a symbolic link (a model directory holds only regular files "
                                                      "and directories)" : strerror(errno));
                        break;
                }
                if (fstat(fd, &st) < 0) {
                        r = tp_error(err, negative_errno(), "%s: %s", path, strerror(errno));
                        break;
                }
                if (S_ISDIR(st.st_mode)) {
                        if (depth + 1 > FILESET_MAX_DEPTH)
                                r = tp_error(err, -E2BIG, "%s: more than %u directory levels", path, FILESET_MAX_DEPTH);
                        else
                                r = walk(s, fd, path, depth + 1, access, err);
                        continue;
                }
                if (!S_ISREG(st.st_mode)) {
                        r = tp_error(err, -EINVAL, "%s: not a regular file (a model directory holds only regular files "
                                     "and directories)", path);
                        break;
                }
                if ((r = grow(s)) < 0) {
                        r = tp_error(err, r, "%s: more than %u files", path, FILESET_MAX_FILES);
                        break;
                }
                /* Reads from here on are plain blocking reads. */
                (void) fcntl(fd, F_SETFL, 0);
                s->files[s->n_files++] = (FileSetFile) { .path = TAKE_PTR(path), .fd = TAKE_FD(fd),
                                                         .size = (uint64_t) st.st_size };
        }
        if (r >= 0 && errno != 0)
                r = tp_error(err, negative_errno(), "%s: %s", *prefix ? prefix : ".", strerror(errno));
        closedir(d);
        return r;
}

static int path_cmp(const void *a, const void *b) {
        return strcmp(((const FileSetFile *) a)->path, ((const FileSetFile *) b)->path);
}

int fileset_open_dir_access(int dirfd, int access, FileSet *ret, TpError *err) {
        FileSet s = FILESET_NULL;

        if (access != O_RDONLY && access != O_RDWR)
                return -EINVAL;
        s.directory = true;
        s.owns_fds = true;
        int r = walk(&s, dirfd, "", 0, access, err);
        if (r >= 0 && s.n_files == 0)
                r = tp_error(err, -ENOENT, "the directory holds no files");
        if (r < 0) {
                fileset_done(&s);
                return r;
        }
        qsort(s.files, s.n_files, sizeof(*s.files), path_cmp);
        for (size_t i = 0; i < s.n_files; i++) {
                if (s.files[i].size > UINT64_MAX - s.size) {
                        fileset_done(&s);
                        return tp_error(err, -EOVERFLOW, "the files add up to more than 2^64 bytes");
                }
                s.files[i].offset = s.size;
                s.size += s.files[i].size;
        }
        *ret = s;
        return 0;
}

int fileset_open_dir(int dirfd, FileSet *ret, TpError *err) {
        return fileset_open_dir_access(dirfd, O_RDONLY, ret, err);
}

int fileset_same_files(const FileSet *have, const FileSet *want, TpError *err) {
        size_t n = have->n_files < want->n_files ? have->n_files : want->n_files;

        for (size_t i = 0; i < n; i++) {
                int c = strcmp(have->files[i].path, want->files[i].path);
                if (c != 0)
                        return tp_error(err, -EBADMSG, "'%s' %s", c < 0 ? have->files[i].path : want->files[i].path,
                                        c < 0 ? "is not one of the model's files" : "is missing");
                if (have->files[i].size != want->files[i].size)
                        return tp_error(err, -EBADMSG, "'%s' is %" PRIu64 " bytes, expected %" PRIu64,
                                        have->files[i].path, have->files[i].size, want->files[i].size);
        }
        if (have->n_files != want->n_files)
                return tp_error(err, -EBADMSG, "'%s' %s", have->n_files > n ? have->files[n].path : want->files[n].path,
                                have->n_files > n ? "is not one of the model's files" : "is missing");
        return 0;
}

int fileset_open(int fd, const char *name, FileSet *ret, TpError *err) {
        struct stat st;
        int r;

        if (fstat(fd, &st) < 0)
                r = tp_error(err, negative_errno(), "%s", strerror(errno));
        else if (S_ISDIR(st.st_mode))
                r = fileset_open_dir(fd, ret, err);
        else if (!S_ISREG(st.st_mode))
                r = tp_error(err, -EINVAL, "neither a regular file nor a directory");
        else if ((r = fileset_init_one(ret, fd, name, (uint64_t) st.st_size)) >= 0) {
                ret->owns_fds = true;
                return 0;
        }
        close(fd);
        return r;
}

size_t fileset_locate(const FileSet *s, uint64_t off) {
        size_t lo = 0, hi = s->n_files;

        /* The last file with offset <= off; then back over empty files that start there too. */
        while (hi - lo > 1) {
                size_t mid = lo + (hi - lo) / 2;
                if (s->files[mid].offset <= off)
                        lo = mid;
                else
                        hi = mid;
        }
        return lo;
}

ssize_t fileset_find(const FileSet *s, const char *path) {
        size_t lo = 0, hi = s->n_files;

        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                int c = strcmp(s->files[mid].path, path);
                if (c == 0)
                        return (ssize_t) mid;
                if (c < 0)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return -1;
}

/* Read or write @n bytes at @off of a directory's space, file by file. */
static int set_io(const FileSet *s, uint8_t *p, size_t n, uint64_t off, bool write) {
        for (size_t i = n > 0 ? fileset_locate(s, off) : 0; n > 0; i++) {
                const FileSetFile *f = &s->files[i];
                uint64_t rel = off - f->offset;
                size_t k = f->size - rel < n ? (size_t) (f->size - rel) : n;
                if (k == 0)
                        continue;
                int r = write ? pwrite_full(f->fd, p, k, rel) : pread_full(f->fd, p, k, rel);
                if (r < 0)
                        return r;
                p += k;
                off += k;
                n -= k;
        }
        return 0;
}

int fileset_pread(const FileSet *s, void *buf, size_t n, uint64_t off) {
        if (s->n_files == 1)
                return pread_full(s->files[0].fd, buf, n, off);
        if (n > 0 && (off >= s->size || n > s->size - off))
                return -ENODATA;
        return set_io(s, buf, n, off, false);
}

int fileset_pwrite(const FileSet *s, const void *buf, size_t n, uint64_t off) {
        if (s->n_files == 1)
                return pwrite_full(s->files[0].fd, buf, n, off);
        if (n > 0 && (off >= s->size || n > s->size - off))
                return -EFBIG;
        return set_io(s, (uint8_t *) buf, n, off, true);
}

int fileset_fdatasync(const FileSet *s, const char *what, TpError *err) {
        for (size_t i = 0; i < s->n_files; i++)
                if (fdatasync(s->files[i].fd) < 0) {
                        if (!s->directory)
                                return tp_error(err, negative_errno(), "%s: fdatasync: %s", what, strerror(errno));
                        return tp_error(err, negative_errno(), "%s, file '%s': fdatasync: %s", what, s->files[i].path,
                                        strerror(errno));
                }
        return 0;
}

void fileset_start_writeback(const FileSet *s, uint64_t off, uint64_t len) {
        if (s->n_files == 1) {
                (void) sync_file_range(s->files[0].fd, 0, 0, SYNC_FILE_RANGE_WRITE);
                return;
        }
        if (len == 0 || off >= s->size)
                return;
        uint64_t end = len > s->size - off ? s->size : off + len;
        for (size_t i = fileset_locate(s, off); i < s->n_files && s->files[i].offset < end; i++)
                if (s->files[i].size > 0)
                        (void) sync_file_range(s->files[i].fd, 0, 0, SYNC_FILE_RANGE_WRITE);
}

int fileset_wait_writeback(const FileSet *s, uint64_t *pos, uint64_t end, uint64_t deadline_ns, const char *what,
                           TpError *err) {
        if (end > s->size)
                end = s->size;
        while (*pos < end) {
                const FileSetFile *f = &s->files[fileset_locate(s, *pos)];
                uint64_t off = *pos - f->offset, left = end - *pos;
                uint64_t n = f->size - off < FILESET_WRITEBACK_RANGE ? f->size - off : FILESET_WRITEBACK_RANGE;
                if (n > left)
                        n = left;
                /*
                 * With WAIT_AFTER the call reports (and consumes, for this open file) a writeback error
                 * that the fdatasync after it would otherwise have reported: it is an error here too.
                 */
                if (sync_file_range(f->fd, (off_t) off, (off_t) n, SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                                                                     SYNC_FILE_RANGE_WAIT_AFTER) < 0) {
                        if (!s->directory)
                                return tp_error(err, negative_errno(), "%s: writeback: %s", what, strerror(errno));
                        return tp_error(err, negative_errno(), "%s, file '%s': writeback: %s", what, f->path,
                                        strerror(errno));
                }
                *pos += n;
                if (*pos < end && deadline_ns && clock_mono_ns() >= deadline_ns)
                        return 1;
        }
        return 0;
}

bool fileset_in_one_file(const FileSet *s, uint64_t off, uint64_t len) {
        if (off > s->size || len > s->size - off)
                return false;
        if (off == s->size)
                return len == 0;
        const FileSetFile *f = &s->files[fileset_locate(s, off)];
        return off + len <= f->offset + f->size;
}

static void le64(Sha256 *h, uint64_t v) {
        uint8_t b[8];
        for (unsigned i = 0; i < 8; i++)
                b[i] = (uint8_t) (v >> (8 * i));
        sha256_update(h, b, 8);
}

void fileset_digest(const FileSet *s, const uint8_t (*file_sha256)[SHA256_DIGEST_SIZE],
                    uint8_t ret[SHA256_DIGEST_SIZE]) {
        static const char tag[] = "taskpatch-set-v1";
        Sha256 h;

        if (!s->directory) {
                memcpy(ret, file_sha256[0], SHA256_DIGEST_SIZE);
                return;
        }
        sha256_init(&h);
        sha256_update(&h, tag, sizeof(tag));
        for (size_t i = 0; i < s->n_files; i++) {
                sha256_update(&h, s->files[i].path, strlen(s->files[i].path) + 1);
                le64(&h, s->files[i].size);
                sha256_update(&h, file_sha256[i], SHA256_DIGEST_SIZE);
        }
        sha256_final(&h, ret);
}

int set_hash_init(SetHash *h, const FileSet *set) {
        size_t n = set->n_files ? set->n_files : 1;

        h->set = set;
        h->files = calloc(n, sizeof(Sha256));
        if (!h->files)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++)
                sha256_init(&h->files[i]);
        return 0;
}

Sha256 *set_hash_at(const SetHash *h, uint64_t pos, uint64_t *ret_room) {
        const FileSet *s = h->set;

        if (s->n_files <= 1) {
                if (ret_room)
                        *ret_room = s->n_files && pos <= s->size ? s->size - pos : UINT64_MAX - pos;
                return &h->files[0];
        }
        size_t i = pos < s->size ? fileset_locate(s, pos) : s->n_files - 1;
        if (ret_room)
                *ret_room = s->files[i].offset + s->files[i].size - pos;
        return &h->files[i];
}

void set_hash_final_files(SetHash *h, uint8_t (*ret_files)[SHA256_DIGEST_SIZE], uint8_t ret[SHA256_DIGEST_SIZE]) {
        const FileSet *s = h->set;
        size_t n = s->n_files ? s->n_files : 1;
        uint8_t (*d)[SHA256_DIGEST_SIZE] = ret_files ? ret_files : calloc(n, sizeof(*d));

        if (!d) {
                memset(ret, 0, SHA256_DIGEST_SIZE);     /* matches no digest: reported as a mismatch */
                return;
        }
        for (size_t i = 0; i < n; i++)
                sha256_final(&h->files[i], d[i]);
        if (!s->directory)
                memcpy(ret, d[0], SHA256_DIGEST_SIZE);
        else
                fileset_digest(s, (const uint8_t (*)[SHA256_DIGEST_SIZE]) d, ret);
        if (d != ret_files)
                free(d);
}

void set_hash_final(SetHash *h, uint8_t ret[SHA256_DIGEST_SIZE]) {
        set_hash_final_files(h, NULL, ret);
}

void set_hash_done(SetHash *h) {
        free(h->files);
        h->files = NULL;
}
