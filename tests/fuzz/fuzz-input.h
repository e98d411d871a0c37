/* SPDX-License-Identifier: MIT */
#pragma once

/* The parsers read file descriptors: each fuzz input goes into a memfd first. */

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* A memfd holding exactly @data; aborts on failure. A fresh one when @fresh (the caller takes it), else one reused per process. */
static inline int fuzz_input_fd(const uint8_t *data, size_t size, int fresh) {
        static int shared = -1;
        int fd = fresh ? -1 : shared;

        if (fd < 0) {
                fd = memfd_create("fuzz-input", MFD_CLOEXEC);
                if (fd < 0)
                        abort();
                if (!fresh)
                        shared = fd;
        }
        if (ftruncate(fd, 0) < 0)
                abort();
        for (size_t done = 0; done < size;) {
                ssize_t k = pwrite(fd, data + done, size - done, (off_t) done);
                if (k <= 0)
                        abort();
                done += (size_t) k;
        }
        return fd;
}
