/* SPDX-License-Identifier: MIT */

#include <string.h>

#include "reader.h"

int reader_init(Reader *r, int fd, uint64_t start, uint64_t end) {
        if (fd < 0 || end < start)
                return -EINVAL;
        *r = (Reader) { .fd = fd, .pos = start, .end = end, .buf_start = start };
        r->buf = malloc(READER_BUFFER_SIZE);
        if (!r->buf)
                return -ENOMEM;
        return 0;
}

void reader_done(Reader *r) {
        free(r->buf);
        r->buf = NULL;
}

/* Make [pos, pos + n) resident in the buffer; n <= READER_BUFFER_SIZE, range already checked. */
static int reader_fill(Reader *r, size_t n) {
        if (r->pos >= r->buf_start && r->pos + n <= r->buf_start + r->buf_len)
                return 0;

        uint64_t want = r->end - r->pos < READER_BUFFER_SIZE ? r->end - r->pos : READER_BUFFER_SIZE;
        size_t got = 0;
        while (got < want) {
                ssize_t k = pread(r->fd, r->buf + got, want - got, (off_t) (r->pos + got));
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return negative_errno();
                }
                if (k == 0)
                        break;  /* the file is shorter than the range: caught below */
                got += (size_t) k;
        }
        r->buf_start = r->pos;
        r->buf_len = got;
        return got >= n ? 0 : -EBADMSG;
}

int reader_peek(Reader *r, size_t n, const uint8_t **ret) {
        if (n > READER_BUFFER_SIZE)
                return -EINVAL;
        if (n > reader_remaining(r))
                return -EBADMSG;
        int k = reader_fill(r, n);
        if (k < 0)
                return k;
        *ret = r->buf + (r->pos - r->buf_start);
        return 0;
}

int reader_read(Reader *r, void *dst, size_t n) {
        uint8_t *out = dst;
        uint64_t pos = r->pos;

        if (n > reader_remaining(r))
                return -EBADMSG;
        while (n > 0) {
                size_t step = n < READER_BUFFER_SIZE ? n : READER_BUFFER_SIZE;
                const uint8_t *p;
                int k = reader_peek(r, step, &p);
                if (k < 0) {
                        r->pos = pos;
                        return k;
                }
                memcpy(out, p, step);
                out += step;
                n -= step;
                r->pos += step;
        }
        return 0;
}

int reader_skip(Reader *r, uint64_t n) {
        if (n > reader_remaining(r))
                return -EBADMSG;
        r->pos += n;
        return 0;
}

int reader_seek(Reader *r, uint64_t pos) {
        if (pos > r->end)
                return -EBADMSG;
        r->pos = pos;
        return 0;
}

int reader_u8(Reader *r, uint8_t *ret) {
        return reader_read(r, ret, 1);
}

int reader_u16le(Reader *r, uint16_t *ret) {
        uint8_t b[2];
        int k = reader_read(r, b, sizeof(b));
        if (k < 0)
                return k;
        *ret = (uint16_t) (b[0] | b[1] << 8);
        return 0;
}

int reader_u32le(Reader *r, uint32_t *ret) {
        uint8_t b[4];
        int k = reader_read(r, b, sizeof(b));
        if (k < 0)
                return k;
        *ret = (uint32_t) b[0] | (uint32_t) b[1] << 8 | (uint32_t) b[2] << 16 | (uint32_t) b[3] << 24;
        return 0;
}

int reader_u64le(Reader *r, uint64_t *ret) {
        uint32_t lo, hi;
        uint64_t pos = r->pos;
        int k = reader_u32le(r, &lo);
        if (k >= 0)
                k = reader_u32le(r, &hi);
        if (k < 0) {
                r->pos = pos;
                return k;
        }
        *ret = (uint64_t) hi << 32 | lo;
        return 0;
}
