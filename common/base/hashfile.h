/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Streaming SHA-256 of files and descriptors, with large sequential reads
 * and read-ahead hints. Memory use is one fixed read buffer, whatever the
 * file size (64-bit offsets: files over 4 GiB work).
 */

#include <stdint.h>

#include "macro.h"
#include "sha256.h"

/* Read size: large enough to amortise syscalls, small enough to stay in L2 cache. */
#define HASHFILE_BUFFER_SIZE (256 * 1024)

/*
 * Hash everything readable from @fd, from its current position to EOF
 * (pipes and terminals too). On success returns 0 and fills @ret_digest
 * and, when not NULL, @ret_size with the bytes hashed; on failure returns
 * -errno (read errors, -ENOMEM) and leaves both untouched.
 */
_warn_unused_result_ int hash_fd(int fd, uint8_t ret_digest[SHA256_DIGEST_SIZE], uint64_t *ret_size);

/* Open @path (O_RDONLY|O_CLOEXEC) and hash it; -EISDIR for a directory. Same returns as hash_fd(). */
_warn_unused_result_ int hash_file(const char *path, uint8_t ret_digest[SHA256_DIGEST_SIZE], uint64_t *ret_size);
