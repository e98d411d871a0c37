/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Bounded, buffered sequential reader over a file descriptor (pread, so
 * the descriptor's own offset is not used or moved). Every read is checked
 * against a hard end offset: a parser built on it cannot read past the
 * range it was given, whatever lengths the input claims. Memory is one
 * fixed buffer. Offsets are 64-bit: files over 4 GiB work.
 *
 * Reading past the end returns -EBADMSG ("truncated"); I/O errors return
 * -errno. On failure, output parameters are untouched and the position is
 * unchanged.
 */

#include <stddef.h>
#include <stdint.h>

#include "macro.h"

#define READER_BUFFER_SIZE (64 * 1024)

typedef struct Reader {
        int fd;
        uint64_t pos;           /* absolute offset of the next byte to read */
        uint64_t end;           /* reads may not pass this absolute offset */
        uint8_t *buf;           /* holds bytes [buf_start, buf_start + buf_len) of the file */
        uint64_t buf_start;
        size_t buf_len;
} Reader;

/* Read [start, end) of @fd. Allocates the buffer: -ENOMEM. @fd stays owned by the caller. */
_warn_unused_result_ int reader_init(Reader *r, int fd, uint64_t start, uint64_t end);
void reader_done(Reader *r);

static inline uint64_t reader_remaining(const Reader *r) {
        return r->end - r->pos;
}

_warn_unused_result_ int reader_read(Reader *r, void *dst, size_t n);
_warn_unused_result_ int reader_skip(Reader *r, uint64_t n);
/* Move to absolute offset @pos, which must lie in [start, end]. */
_warn_unused_result_ int reader_seek(Reader *r, uint64_t pos);

/*
 * A pointer to the next @n bytes (n <= READER_BUFFER_SIZE) without
 * consuming them; valid until the next call on @r.
 */
_warn_unused_result_ int reader_peek(Reader *r, size_t n, const uint8_t **ret);

_warn_unused_result_ int reader_u8(Reader *r, uint8_t *ret);
_warn_unused_result_ int reader_u16le(Reader *r, uint16_t *ret);
_warn_unused_result_ int reader_u32le(Reader *r, uint32_t *ret);
_warn_unused_result_ int reader_u64le(Reader *r, uint64_t *ret);
