/* SPDX-License-Identifier: MIT */

#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "filejob.h"
#include "fileio.h"
#include "slot.h"

#define FILEJOB_BUFFER (1u << 20)

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

struct FileHash {
        int fd;
        uint64_t size, pos, chunk_size;
        Sha256 full, chunk;
        uint8_t *chunks;
        uint8_t *buf;
};

FileHash *file_hash_free(FileHash *h) {
        if (!h)
                return NULL;
        free(h->chunks);
        free(h->buf);
        free(h);
        return NULL;
}

int file_hash_new(int fd, uint64_t size, uint64_t chunk_size, FileHash **ret) {
        _cleanup_(file_hash_freep) FileHash *h = calloc(1, sizeof(*h));

        if (!h)
                return -ENOMEM;
        *h = (FileHash) { .fd = fd, .size = size, .chunk_size = chunk_size };
        h->buf = malloc(FILEJOB_BUFFER);
        if (!h->buf)
                return -ENOMEM;
        if (chunk_size) {
                if (chunk_size < CHUNK_MIN_SIZE || chunk_count(size, chunk_size) > CHUNK_MAX_ENTRIES)
                        return -EINVAL;
                h->chunks = malloc(chunk_count(size, chunk_size) * SHA256_DIGEST_SIZE + 1);
                if (!h->chunks)
                        return -ENOMEM;
        }
        sha256_init(&h->full);
        sha256_init(&h->chunk);
        (void) posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
        *ret = TAKE_PTR(h);
        return 0;
}

int file_hash_step(FileHash *h, uint64_t budget) {
        uint64_t end = h->size - h->pos < budget ? h->size : h->pos + budget;

        while (h->pos < end) {
                size_t n = end - h->pos < FILEJOB_BUFFER ? (size_t) (end - h->pos) : FILEJOB_BUFFER;
                int r = pread_full(h->fd, h->buf, n, h->pos);
                if (r < 0)
                        return r == -ENODATA ? -EIO : r;
                if (!h->chunks) {
                        sha256_update(&h->full, h->buf, n);
                        h->pos += n;
                        continue;
                }
                for (size_t i = 0; i < n;) {
                        uint64_t c = h->chunk_size, stop = (h->pos / c + 1) * c;
                        size_t k = stop - h->pos < n - i ? (size_t) (stop - h->pos) : n - i;
                        sha256_update2(&h->full, &h->chunk, h->buf + i, k);
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

void file_hash_result(FileHash *h, uint8_t ret_sha256[SHA256_DIGEST_SIZE], uint8_t **ret_chunks) {
        sha256_final(&h->full, ret_sha256);
        if (ret_chunks)
                *ret_chunks = TAKE_PTR(h->chunks);
}
