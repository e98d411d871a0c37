/* SPDX-License-Identifier: MIT */

#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "clock.h"
#include "filejob.h"
#include "fileio.h"
#include "slot.h"

#define FILEJOB_BUFFER (1u << 20)
#define RETIRE_PIECE (16u << 20)        /* bytes freed per ftruncate: ~7 ms on ext4 */
#define SET_COPY_WAIT_NS (10u * 1000000) /* a step waits this long at most for the copy's last fdatasyncs */

void file_copy_init(FileCopy *c, int src, int dst, uint64_t size) {
        *c = (FileCopy) { .src = src, .dst = dst, .size = size };
}

int file_copy_step(FileCopy *c, uint64_t budget) {
        uint64_t end;

        if (c->pos == 0 && !c->cloned && ioctl(c->dst, FICLONE, c->src) == 0) {
                c->cloned = true;
                c->pos = c->size;
        }
        end = c->size - c->pos < budget ? c->size : c->pos + budget;
        while (c->pos < end && !c->plain) {
                loff_t in = (loff_t) c->pos, out = (loff_t) c->pos;
                ssize_t k = copy_file_range(c->src, &in, c->dst, &out, end - c->pos, 0);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno != EXDEV && errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP)
                                return negative_errno();
                        c->plain = true;
                        break;
                }
                if (k == 0)
                        return -EIO;    /* the source ended early */
                c->pos += (uint64_t) k;
        }
        if (c->pos < end) {
                _cleanup_free_ uint8_t *buf = malloc(FILEJOB_BUFFER);
                if (!buf)
                        return -ENOMEM;
                while (c->pos < end) {
                        size_t n = end - c->pos < FILEJOB_BUFFER ? (size_t) (end - c->pos) : FILEJOB_BUFFER;
                        int r = pread_full(c->src, buf, n, c->pos);
                        if (r < 0)
                                return r == -ENODATA ? -EIO : r;
                        r = pwrite_full(c->dst, buf, n, c->pos);
                        if (r < 0)
                                return r;
                        c->pos += n;
                }
        }
        return c->pos < c->size;
}

void set_copy_init(SetCopy *c, const FileSet *src, const FileSet *dst) {
        *c = (SetCopy) { .src = src, .dst = dst };
        if (src->n_files > 0)
                file_copy_init(&c->cur, src->files[0].fd, dst->files[0].fd, src->files[0].size);
}

static int set_copy_run(SetCopy *c, uint64_t budget) {
        while (c->file < c->src->n_files) {
                uint64_t before = c->cur.pos;
                int r = file_copy_step(&c->cur, budget);
                if (r < 0)
                        return r;
                c->pos += c->cur.pos - before;
                budget -= budget < c->cur.pos - before ? budget : c->cur.pos - before;
                if (r > 0)
                        return 1;
                if (++c->file < c->src->n_files)
                        file_copy_init(&c->cur, c->src->files[c->file].fd, c->dst->files[c->file].fd,
                                       c->src->files[c->file].size);
                if (budget == 0)
                        return c->file < c->src->n_files;
        }
        return 0;
}

int set_copy_step(SetCopy *c, uint64_t budget) {
        uint64_t start = c->pos;
        int r;

        /* Writeback starts as the copy goes, and the copy is synced piece by piece behind it: the
         * caller's fdatasync at the end would otherwise flush a whole model at once (syncer.h). */
        if (c->file < c->src->n_files) {
                int more = set_copy_run(c, budget);
                if (more < 0)
                        return more;
                if (c->pos > start) {
                        fileset_start_writeback(c->dst, start, c->pos - start);
                        if (!c->syncer && c->pos >= SYNCER_PIECE && (r = syncer_new(c->dst, &c->syncer)) < 0)
                                return r;
                        if (c->syncer && (r = syncer_behind(c->syncer, c->pos)) < 0)
                                return r;
                }
                if (more > 0)
                        return 1;
        }
        /* Copied: done once the fdatasyncs asked for are, and the worker is stopped. */
        return syncer_end(&c->syncer, clock_mono_ns() + SET_COPY_WAIT_NS);
}

void set_copy_done(SetCopy *c) {
        c->syncer = syncer_free(c->syncer);
}

void file_retire_hold(FileSet *set, int lease_signal) {
        for (size_t i = 0; i < set->n_files; i++)
                if (file_lease_take(set->files[i].fd, lease_signal) < 0) {
                        fileset_done(set);
                        return;
                }
}

void file_retire_step(FileSet *set, uint64_t time_cap) {
        uint64_t t0 = clock_mono_ns();

        for (size_t i = set->n_files; i-- > 0;) {
                FileSetFile *f = &set->files[i];
                while (f->size > 0 && file_lease_held(f->fd)) {
                        uint64_t to = f->size > RETIRE_PIECE ? f->size - RETIRE_PIECE : 0;
                        if (ftruncate(f->fd, (off_t) to) < 0)
                                break;  /* the close frees the rest */
                        f->size = to;
                        if (clock_mono_ns() - t0 >= time_cap)
                                return;
                }
        }
        fileset_done(set);
}

struct FileHash {
        FileSetFile one_file;           /* file_hash_new(): its fd as a set of one */
        FileSet one;
        const FileSet *set;
        SetHash files;
        uint64_t size, pos, chunk_size;
        Sha256 chunk;
        uint8_t *chunks;
        uint8_t *buf;
};

FileHash *file_hash_free(FileHash *h) {
        if (!h)
                return NULL;
        set_hash_done(&h->files);
        free(h->chunks);
        free(h->buf);
        free(h);
        return NULL;
}

static int hash_new(FileHash *h, uint64_t chunk_size, FileHash **ret) {
        _cleanup_(file_hash_freep) FileHash *owned = h;

        h->size = h->set->size;
        h->chunk_size = chunk_size;
        h->buf = malloc(FILEJOB_BUFFER);
        if (!h->buf)
                return -ENOMEM;
        if (chunk_size) {
                if (chunk_size < CHUNK_MIN_SIZE || chunk_count(h->size, chunk_size) > CHUNK_MAX_ENTRIES)
                        return -EINVAL;
                h->chunks = malloc(chunk_count(h->size, chunk_size) * SHA256_DIGEST_SIZE + 1);
                if (!h->chunks)
                        return -ENOMEM;
        }
        int r = set_hash_init(&h->files, h->set);
        if (r < 0)
                return r;
        sha256_init(&h->chunk);
        for (size_t i = 0; i < h->set->n_files; i++)
                (void) posix_fadvise(h->set->files[i].fd, 0, 0, POSIX_FADV_SEQUENTIAL);
        *ret = TAKE_PTR(owned);
        return 0;
}

int file_hash_new(int fd, uint64_t size, uint64_t chunk_size, FileHash **ret) {
        FileHash *h = calloc(1, sizeof(*h));

        if (!h)
                return -ENOMEM;
        h->one_file = (FileSetFile) { .path = (char *) "model", .fd = fd, .size = size };
        h->one = (FileSet) { .files = &h->one_file, .n_files = 1, .size = size };
        h->set = &h->one;
        return hash_new(h, chunk_size, ret);
}

int file_hash_new_set(const FileSet *set, uint64_t chunk_size, FileHash **ret) {
        FileHash *h = calloc(1, sizeof(*h));

        if (!h)
                return -ENOMEM;
        h->set = set;
        return hash_new(h, chunk_size, ret);
}

int file_hash_step(FileHash *h, uint64_t budget) {
        uint64_t end = h->size - h->pos < budget ? h->size : h->pos + budget;

        while (h->pos < end) {
                uint64_t room;
                Sha256 *file = set_hash_at(&h->files, h->pos, &room);
                size_t n = end - h->pos < FILEJOB_BUFFER ? (size_t) (end - h->pos) : FILEJOB_BUFFER;
                if (n > room)
                        n = (size_t) room;      /* no read across a file's end: each file has its own digest */
                int r = fileset_pread(h->set, h->buf, n, h->pos);
                if (r < 0)
                        return r == -ENODATA ? -EIO : r;
                if (!h->chunks) {
                        sha256_update(file, h->buf, n);
                        h->pos += n;
                        continue;
                }
                for (size_t i = 0; i < n;) {
                        uint64_t c = h->chunk_size, stop = (h->pos / c + 1) * c;
                        size_t k = stop - h->pos < n - i ? (size_t) (stop - h->pos) : n - i;
                        sha256_update2(file, &h->chunk, h->buf + i, k);
                        h->pos += k;
                        i += k;
                        if (h->pos % c == 0 || h->pos == h->size) {
                                sha256_final(&h->chunk, h->chunks + (h->pos - 1) / c * SHA256_DIGEST_SIZE);
                                sha256_init(&h->chunk);
                        }
                }
        }
        return h->pos < h->size;
}

uint64_t file_hash_done(const FileHash *h) {
        return h->pos;
}

void file_hash_result_files(FileHash *h, uint8_t (*ret_files)[SHA256_DIGEST_SIZE], uint8_t ret_sha256[SHA256_DIGEST_SIZE],
                            uint8_t **ret_chunks) {
        set_hash_final_files(&h->files, ret_files, ret_sha256);
        if (ret_chunks)
                *ret_chunks = TAKE_PTR(h->chunks);
}

void file_hash_result(FileHash *h, uint8_t ret_sha256[SHA256_DIGEST_SIZE], uint8_t **ret_chunks) {
        file_hash_result_files(h, NULL, ret_sha256, ret_chunks);
}
