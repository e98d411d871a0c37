/* SPDX-License-Identifier: MIT */

#include <fcntl.h>
#include <sys/stat.h>

#include "hashfile.h"

int hash_fd(int fd, uint8_t ret_digest[SHA256_DIGEST_SIZE], uint64_t *ret_size) {
        _cleanup_free_ uint8_t *buf = NULL;
        uint64_t total = 0;
        Sha256 s;

        buf = malloc(HASHFILE_BUFFER_SIZE);
        if (!buf)
                return -ENOMEM;

        /* A hint only: fails harmlessly on pipes and terminals. */
        (void) posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);

        sha256_init(&s);
        for (;;) {
                ssize_t n = read(fd, buf, HASHFILE_BUFFER_SIZE);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return negative_errno();
                }
                if (n == 0)
                        break;
                sha256_update(&s, buf, (size_t) n);
                total += (uint64_t) n;
        }

        sha256_final(&s, ret_digest);
        if (ret_size)
                *ret_size = total;
        return 0;
}

int hash_file(const char *path, uint8_t ret_digest[SHA256_DIGEST_SIZE], uint64_t *ret_size) {
        _cleanup_close_ int fd = -1;
        struct stat st;

        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return negative_errno();
        if (fstat(fd, &st) < 0)
                return negative_errno();
        if (S_ISDIR(st.st_mode))
                return -EISDIR;
        return hash_fd(fd, ret_digest, ret_size);
}
