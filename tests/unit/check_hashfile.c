/* SPDX-License-Identifier: MIT */
/* common/base/hashfile.c: streaming file hashing at buffer boundaries, errors, pipes. */

#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check-main.h"
#include "hashfile.h"

static char dir[64];

static void setup(void) {
        snprintf(dir, sizeof(dir), "/tmp/check_hashfile.XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void) {
        char cmd[256];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        ck_assert_int_eq(system(cmd), 0);
}

static void write_file(const char *path, const uint8_t *data, size_t len) {
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write(fd, data, len), (ssize_t) len);
        close(fd);
}

/* Sizes around the read buffer, where a streaming bug would show. */
START_TEST(test_boundaries) {
        static const size_t sizes[] = { 0, 1, 63, 64, 65, HASHFILE_BUFFER_SIZE - 1, HASHFILE_BUFFER_SIZE,
                                        HASHFILE_BUFFER_SIZE + 1, 2 * HASHFILE_BUFFER_SIZE + 7 };
        size_t max = 2 * HASHFILE_BUFFER_SIZE + 7;
        uint8_t *data = malloc(max);
        char path[300];

        ck_assert_ptr_nonnull(data);
        for (size_t i = 0; i < max; i++)
                data[i] = (uint8_t) (i * 2654435761u >> 13);
        snprintf(path, sizeof(path), "%s/f", dir);

        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
                uint8_t want[SHA256_DIGEST_SIZE], got[SHA256_DIGEST_SIZE];
                uint64_t size = 12345;

                write_file(path, data, sizes[i]);
                sha256_digest(data, sizes[i], want);
                ck_assert_int_eq(hash_file(path, got, &size), 0);
                ck_assert_uint_eq(size, sizes[i]);
                ck_assert_msg(memcmp(got, want, sizeof(want)) == 0, "size %zu differs", sizes[i]);
        }
        free(data);
}
END_TEST

START_TEST(test_errors_leave_outputs) {
        uint8_t digest[SHA256_DIGEST_SIZE], before[SHA256_DIGEST_SIZE];
        uint64_t size = 77;
        char path[300];

        memset(digest, 0x5a, sizeof(digest));
        memcpy(before, digest, sizeof(digest));
        snprintf(path, sizeof(path), "%s/missing", dir);
        ck_assert_int_eq(hash_file(path, digest, &size), -ENOENT);
        ck_assert_int_eq(hash_file(dir, digest, &size), -EISDIR);
        ck_assert_int_eq(hash_fd(-1, digest, &size), -EBADF);
        ck_assert_uint_eq(size, 77);
        ck_assert(memcmp(digest, before, sizeof(digest)) == 0);
}
END_TEST

/* A pipe delivers short reads; the result must not depend on them. */
START_TEST(test_pipe) {
        int p[2];
        uint8_t want[SHA256_DIGEST_SIZE], got[SHA256_DIGEST_SIZE];
        uint64_t size;
        static uint8_t data[200000];

        for (size_t i = 0; i < sizeof(data); i++)
                data[i] = (uint8_t) i;
        sha256_digest(data, sizeof(data), want);

        ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                close(p[0]);
                for (size_t off = 0; off < sizeof(data); off += 777) {
                        size_t n = sizeof(data) - off < 777 ? sizeof(data) - off : 777;
                        if (write(p[1], data + off, n) != (ssize_t) n)
                                _exit(1);
                }
                _exit(0);
        }
        close(p[1]);
        ck_assert_int_eq(hash_fd(p[0], got, &size), 0);
        close(p[0]);
        ck_assert_uint_eq(size, sizeof(data));
        ck_assert(memcmp(got, want, sizeof(want)) == 0);
}
END_TEST

static Suite *hashfile_suite(void) {
        Suite *s = suite_create("hashfile");
        TCase *tc = tcase_create("hash");

        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_boundaries);
        tcase_add_test(tc, test_errors_leave_outputs);
        tcase_add_test(tc, test_pipe);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(hashfile_suite)
