/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Small helpers used everywhere: scope-bound cleanup, ownership transfer,
 * attributes. Destructors used with _cleanup_ accept NULL / -1.
 */

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#define _cleanup_(f) __attribute__((cleanup(f)))
#define _warn_unused_result_ __attribute__((warn_unused_result))
#define _printf_(a, b) __attribute__((format(printf, a, b)))
#define _noreturn_ __attribute__((noreturn))
#define _unused_ __attribute__((unused))
#define _inline_ static inline __attribute__((always_inline))   /* hot paths specialized per call */

#define ELEMENTSOF(x) (sizeof(x) / sizeof((x)[0]))

/* The bits @v takes: 0 for 0, else one more than the place of its top bit. */
static inline unsigned bitlen(uint64_t v) {
        return v ? 64 - (unsigned) __builtin_clzll(v) : 0;
}

static inline void freep(void *p) {
        free(*(void **) p);
}
#define _cleanup_free_ _cleanup_(freep)

/* Close preserving errno, so a cleanup never clobbers the error being returned. */
static inline int safe_close(int fd) {
        if (fd >= 0) {
                int saved = errno;
                close(fd);
                errno = saved;
        }
        return -1;
}

static inline void closep(int *fd) {
        safe_close(*fd);
}
#define _cleanup_close_ _cleanup_(closep)

/* Take ownership: return the value and leave the variable empty, so its cleanup does nothing. */
#define TAKE_PTR(p)                              \
        ({                                       \
                __typeof__(p) _p_ = (p);         \
                (p) = NULL;                      \
                _p_;                             \
        })
#define TAKE_FD(fd)                              \
        ({                                       \
                int _fd_ = (fd);                 \
                (fd) = -1;                       \
                _fd_;                            \
        })

/* Define a cleanup function xp(X **p) from a destructor x(X *) that accepts NULL. */
#define DEFINE_POINTER_CLEANUP(type, func)       \
        static inline void func##p(type **p) {   \
                func(*p);                        \
        }

/* -errno of the last failed call, never 0 (so "r < 0" always holds for failures). */
static inline int negative_errno(void) {
        return errno > 0 ? -errno : -EIO;
}
