/* SPDX-License-Identifier: MIT */
#pragma once

/* For unit tests that build input files byte by byte: a growable buffer, and a memfd holding bytes. */

#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct Buf {
        uint8_t *p;
        size_t n, cap;
} Buf;

static inline void put(Buf *b, const void *d, size_t n) {
        if (b->n + n > b->cap) {
                b->cap = (b->n + n) * 2 + 64;
                b->p = realloc(b->p, b->cap);
                ck_assert_ptr_nonnull(b->p);
        }
        if (n)
                memcpy(b->p + b->n, d, n);
        b->n += n;
}

/* A memfd holding exactly @n bytes of @p (the caller closes it). */
static inline int memfd_with(const void *p, size_t n) {
        int fd = memfd_create("check", MFD_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write(fd, p, n), (ssize_t) n);
        return fd;
}
