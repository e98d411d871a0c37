/* SPDX-License-Identifier: MIT */
#pragma once

/* The parsers read file descriptors: each fuzz input goes into a memfd first. */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
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

#include <dirent.h>
#include <stdio.h>

static char fuzz_scratch_dir[64];

static inline void fuzz_scratch_remove(void) {
        DIR *d = opendir(fuzz_scratch_dir);
        struct dirent *de;

        while (d && (de = readdir(d)))
                if (de->d_name[0] != '.' || (de->d_name[1] && strcmp(de->d_name, "..") != 0))
                        (void) unlinkat(dirfd(d), de->d_name, 0);
        if (d)
                closedir(d);
        (void) rmdir(fuzz_scratch_dir);
}

/*
 * @name inside a scratch directory made once per process (on /dev/shm when writable) and
 * removed at exit: for targets that also run the writers, whose atomic files want a real
 * directory. @prefix names it ("fuzz-seal").
 */
static inline const char *fuzz_scratch_path(const char *prefix, const char *name, char buf[static 128]) {
        char *dir = fuzz_scratch_dir;

        if (!dir[0]) {
                snprintf(dir, sizeof(fuzz_scratch_dir), "%s/%s-XXXXXX",
                         access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp", prefix);
                if (!mkdtemp(dir))
                        abort();
                atexit(fuzz_scratch_remove);
        }
        snprintf(buf, 128, "%s/%s", dir, name);
        return buf;
}
