/* SPDX-License-Identifier: MIT */
/*
 * common/base/fileset.c and atomicdir.c: a model directory as one space (the walk and what it
 * refuses, reads across files and empty files, the digest) and writing one atomically (a new
 * path, a replaced directory, a failed write that leaves nothing), or as files made up front
 * (AtomicModel: a directory or one file, written at any offset, committed whole).
 */

#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomicdir.h"
#include "check-main.h"
#include "fileio.h"
#include "fileset.h"

static char root[64];

static void setup(void) {
        snprintf(root, sizeof(root), "/tmp/check_fileset.XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(root));
}

static void teardown(void) {
        ck_assert_int_eq(remove_tree(root), 0);
}

static const char *at(const char *rel) {
        static char buf[4][256];
        static unsigned k;
        char *p = buf[k++ % 4];
        snprintf(p, 256, "%s/%s", root, rel);
        return p;
}

static void put(const char *rel, const char *bytes) {
        ck_assert_int_eq(atomic_file_write(at(rel), bytes, strlen(bytes)), 0);
}

static int open_dir(const char *rel, FileSet *s, TpError *err) {
        int fd = open(at(rel), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        return fileset_open(fd, "model", s, err);
}

START_TEST(test_path_valid) {
        static const char *const good[] = { "a", "model.onnx", "w/x.bin", ".gitattributes", "a/b/c", "..x", "x.." };
        static const char *const bad[] = { "", "/a", "a/", "a//b", ".", "..", "a/../b", "./a", "a/.", "../a" };
        for (size_t i = 0; i < sizeof(good) / sizeof(*good); i++)
                ck_assert_msg(fileset_path_valid(good[i]), "%s", good[i]);
        for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++)
                ck_assert_msg(!fileset_path_valid(bad[i]), "%s", bad[i]);
        char long_path[FILESET_MAX_PATH + 2];
        memset(long_path, 'a', sizeof(long_path) - 1);
        long_path[sizeof(long_path) - 1] = '\0';
        ck_assert(!fileset_path_valid(long_path));
        long_path[FILESET_MAX_PATH] = '\0';
        ck_assert(fileset_path_valid(long_path));
}
END_TEST

START_TEST(test_walk_and_read) {
        FileSet s = FILESET_NULL;
        TpError err = {};
        char buf[16];

        ck_assert_int_eq(mkdir(at("m"), 0755), 0);
        ck_assert_int_eq(mkdir(at("m/sub"), 0755), 0);
        put("m/b.bin", "BBB");
        put("m/a.txt", "aa");
        put("m/empty", "");
        put("m/sub/c", "cccc");
        ck_assert_msg(open_dir("m", &s, &err) == 0, "%s", err.message);
        ck_assert(s.directory);
        ck_assert_uint_eq(s.n_files, 4);
        ck_assert_str_eq(s.files[0].path, "a.txt");
        ck_assert_str_eq(s.files[1].path, "b.bin");
        ck_assert_str_eq(s.files[2].path, "empty");
        ck_assert_str_eq(s.files[3].path, "sub/c");
        ck_assert_uint_eq(s.size, 9);
        ck_assert_uint_eq(s.files[3].offset, 5);
        /* Across files and over the empty one. */
        ck_assert_int_eq(fileset_pread(&s, buf, 9, 0), 0);
        ck_assert_int_eq(memcmp(buf, "aaBBBcccc", 9), 0);
        ck_assert_int_eq(fileset_pread(&s, buf, 3, 4), 0);
        ck_assert_int_eq(memcmp(buf, "Bcc", 3), 0);
        ck_assert_int_eq(fileset_pread(&s, buf, 2, 8), -ENODATA);
        ck_assert_uint_eq(fileset_locate(&s, 0), 0);
        ck_assert_uint_eq(fileset_locate(&s, 4), 1);
        ck_assert_uint_eq(fileset_locate(&s, 5), 3);    /* not the empty file that also starts there */
        ck_assert(fileset_in_one_file(&s, 2, 3));
        ck_assert(!fileset_in_one_file(&s, 1, 2));
        ck_assert(!fileset_in_one_file(&s, 8, 2));
        ck_assert_int_eq(fileset_find(&s, "sub/c"), 3);
        ck_assert_int_eq(fileset_find(&s, "sub"), -1);

        /* The digest binds names: the same bytes under another name differ. */
        uint8_t sha[4][32] = {}, d1[32], d2[32];
        fileset_digest(&s, (const uint8_t (*)[32]) sha, d1);
        free(s.files[0].path);
        s.files[0].path = strdup("a.tx");
        fileset_digest(&s, (const uint8_t (*)[32]) sha, d2);
        ck_assert_int_ne(memcmp(d1, d2, 32), 0);
        fileset_done(&s);
}
END_TEST

START_TEST(test_walk_refuses) {
        FileSet s = FILESET_NULL;
        TpError err = {};

        ck_assert_int_eq(mkdir(at("l"), 0755), 0);
        put("l/a", "x");
        ck_assert_int_eq(symlink("/etc/passwd", at("l/link")), 0);
        ck_assert_int_eq(open_dir("l", &s, &err), -ELOOP);
        ck_assert_msg(strstr(err.message, "link: a symbolic link"), "%s", err.message);

        ck_assert_int_eq(mkdir(at("f"), 0755), 0);
        ck_assert_int_eq(mkfifo(at("f/pipe"), 0600), 0);
        ck_assert_int_eq(open_dir("f", &s, &err), -EINVAL);
        ck_assert_msg(strstr(err.message, "pipe: not a regular file"), "%s", err.message);

        ck_assert_int_eq(mkdir(at("e"), 0755), 0);
        ck_assert_int_eq(open_dir("e", &s, &err), -ENOENT);

        /* Too deep. */
        char rel[256] = "d";
        ck_assert_int_eq(mkdir(at(rel), 0755), 0);
        for (unsigned i = 0; i <= FILESET_MAX_DEPTH; i++) {
                strcat(rel, "/d");
                ck_assert_int_eq(mkdir(at(rel), 0755), 0);
        }
        strcat(rel, "/x");
        put(rel, "x");
        ck_assert_int_eq(open_dir("d", &s, &err), -E2BIG);
        ck_assert_msg(strstr(err.message, "directory levels"), "%s", err.message);
}
END_TEST

START_TEST(test_add_order) {
        FileSet s = FILESET_NULL;

        ck_assert_int_eq(fileset_add(&s, "b", 4), 0);
        ck_assert_int_eq(fileset_add(&s, "a", 1), -EINVAL);     /* out of order */
        ck_assert_int_eq(fileset_add(&s, "b", 1), -EINVAL);     /* twice */
        ck_assert_int_eq(fileset_add(&s, "../c", 1), -EINVAL);
        ck_assert_int_eq(fileset_add(&s, "c", UINT64_MAX), -EOVERFLOW);
        ck_assert_int_eq(fileset_add(&s, "c", 2), 0);
        ck_assert_uint_eq(s.size, 6);
        ck_assert_uint_eq(s.files[1].offset, 4);
        fileset_done(&s);
}
END_TEST

static void describe(FileSet *s) {
        *s = FILESET_NULL;
        ck_assert_int_eq(fileset_add(s, "a", 2), 0);
        ck_assert_int_eq(fileset_add(s, "e", 0), 0);
        ck_assert_int_eq(fileset_add(s, "w/x", 3), 0);
}

/* describe()'s layout with its files created empty and open for reading and writing. */
static void describe_opened(FileSet *s) {
        describe(s);    /* a: 2 bytes, e: 0, w/x: 3 */
        ck_assert_int_eq(mkdir(at("w"), 0755), 0);
        for (size_t i = 0; i < s->n_files; i++) {
                s->files[i].fd = open(at(s->files[i].path), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
                ck_assert_int_ge(s->files[i].fd, 0);
        }
}

static void read_back(const char *rel, const char *want) {
        char buf[64] = {};
        int fd = open(at(rel), O_RDONLY | O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        ck_assert_int_eq(n, (ssize_t) strlen(want));
        ck_assert_str_eq(buf, want);
}

START_TEST(test_atomic_dir) {
        FileSet layout;
        AtomicDir d = ATOMIC_DIR_NULL;
        struct stat st;

        describe(&layout);
        /* A new path, written in pieces that cross the files' ends. */
        ck_assert_int_eq(atomic_dir_open(at("out"), &layout, false, &d), 0);
        ck_assert_int_eq(atomic_dir_write(&d, "a", 1), 0);
        ck_assert_int_eq(atomic_dir_write(&d, "bxy", 3), 0);
        ck_assert_int_eq(stat(at("out"), &st), -1);     /* nothing at the path until the commit */
        ck_assert_int_eq(atomic_dir_write(&d, "z", 1), 0);
        ck_assert_int_eq(atomic_dir_write(&d, "!", 1), -EFBIG);
        ck_assert_int_eq(atomic_dir_commit(&d), 0);
        read_back("out/a", "ab");
        read_back("out/e", "");
        read_back("out/w/x", "xyz");

        /* Replacing a directory: exchanged, the old tree gone, no temporary left. */
        put("out/stale", "old");
        ck_assert_int_eq(atomic_dir_open(at("out"), &layout, true, &d), 0);
        ck_assert_int_eq(atomic_dir_write(&d, "12345", 5), 0);
        ck_assert_int_eq(atomic_dir_commit(&d), 0);
        read_back("out/a", "12");
        read_back("out/w/x", "345");
        ck_assert_int_eq(stat(at("out/stale"), &st), -1);

        /* Short: refused, the old directory stays, the temporary goes. */
        ck_assert_int_eq(atomic_dir_open(at("out"), &layout, true, &d), 0);
        ck_assert_int_eq(atomic_dir_write(&d, "ab", 2), 0);
        ck_assert_int_eq(atomic_dir_commit(&d), -EBADMSG);
        read_back("out/a", "12");
        ck_assert_int_eq(atomic_dir_open(at("out"), &layout, true, &d), 0);
        ck_assert_int_eq(atomic_dir_write(&d, "ab", 2), 0);
        atomic_dir_abort(&d);
        FileSet s = FILESET_NULL;
        TpError err = {};
        int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ck_assert_int_eq(fileset_open(fd, "root", &s, &err), 0);
        for (size_t i = 0; i < s.n_files; i++)
                ck_assert_msg(strncmp(s.files[i].path, "out/", 4) == 0, "left behind: %s", s.files[i].path);
        fileset_done(&s);
        fileset_done(&layout);
}
END_TEST

START_TEST(test_set_hash) {
        FileSet layout;
        SetHash h;
        uint64_t room;
        uint8_t d[32], want[32], per[3][32];

        describe(&layout);      /* a: 2 bytes, e: 0, w/x: 3 */
        ck_assert_int_eq(set_hash_init(&h, &layout), 0);
        ck_assert_ptr_eq(set_hash_at(&h, 0, &room), &h.files[0]);
        ck_assert_uint_eq(room, 2);
        ck_assert_ptr_eq(set_hash_at(&h, 3, &room), &h.files[2]);
        ck_assert_uint_eq(room, 2);
        sha256_update(set_hash_at(&h, 0, NULL), "ab", 2);
        sha256_update(set_hash_at(&h, 2, NULL), "xyz", 3);
        set_hash_final(&h, d);
        set_hash_done(&h);
        sha256_digest("ab", 2, per[0]);
        sha256_digest("", 0, per[1]);
        sha256_digest("xyz", 3, per[2]);
        fileset_digest(&layout, (const uint8_t (*)[32]) per, want);
        ck_assert_mem_eq(d, want, 32);

        /* A manifest's empty list is one file: its digest is that file's SHA-256. */
        FileSet one = FILESET_NULL;
        ck_assert_int_eq(set_hash_init(&h, &one), 0);
        sha256_update(set_hash_at(&h, 7, &room), "ab", 2);
        ck_assert_uint_eq(room, UINT64_MAX - 7);
        set_hash_final(&h, d);
        set_hash_done(&h);
        ck_assert_mem_eq(d, per[0], 32);
        fileset_done(&layout);
}
END_TEST

/* Writes across files (over the empty one), refused past a directory's end; fdatasync names the file that failed. */
START_TEST(test_pwrite_and_sync) {
        FileSet layout;
        TpError err = {};

        describe_opened(&layout);
        ck_assert_int_eq(fileset_pwrite(&layout, "12345", 5, 0), 0);
        ck_assert_int_eq(fileset_pwrite(&layout, "ZY", 2, 1), 0);
        ck_assert_int_eq(fileset_pwrite(&layout, "!!", 2, 4), -EFBIG);
        ck_assert_int_eq(fileset_pwrite(&layout, "!", 1, 5), -EFBIG);
        ck_assert_int_eq(fileset_pwrite(&layout, "", 0, 5), 0);
        read_back("a", "1Z");
        read_back("e", "");
        read_back("w/x", "Y45");
        char buf[5];
        ck_assert_int_eq(fileset_pread(&layout, buf, 5, 0), 0);
        ck_assert_int_eq(memcmp(buf, "1ZY45", 5), 0);
        ck_assert_int_eq(fileset_fdatasync(&layout, "out", &err), 0);

        /* The first file that fails stops the pass, and the message names it. */
        int e_fd = layout.files[1].fd;
        layout.files[1].fd = -1;
        ck_assert_int_eq(fileset_fdatasync(&layout, "out", &err), -EBADF);
        ck_assert_str_eq(err.message, "out, file 'e': fdatasync: Bad file descriptor");
        layout.files[1].fd = e_fd;
        for (size_t i = 0; i < layout.n_files; i++)
                close(layout.files[i].fd);
        fileset_done(&layout);

        /* One file is the file: it grows past its size, and its message is the caller's alone. */
        int fd = open(at("one"), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(fileset_pwrite(&FILESET_ONE(fd, 0), "abc", 3, 1), 0);
        char got[5];
        ck_assert_int_eq(pread(fd, got, sizeof(got), 0), 4);
        ck_assert_int_eq(memcmp(got, "\0abc", 4), 0);
        close(fd);
        ck_assert_int_eq(fileset_fdatasync(&FILESET_ONE(-1, 4), "slot", &err), -EBADF);
        ck_assert_str_eq(err.message, "slot: fdatasync: Bad file descriptor");
}
END_TEST

/* Waiting for writeback range by range. */
START_TEST(test_writeback) {
        FileSet layout;
        TpError err = {};
        uint64_t pos = 0;

        describe_opened(&layout);
        ck_assert_int_eq(fileset_pwrite(&layout, "12345", 5, 0), 0);
        /* A deadline passed: one range a call (here a file's), then 1 while bytes are left. */
        ck_assert_int_eq(fileset_wait_writeback(&layout, &pos, layout.size, 1, "out", &err), 1);
        ck_assert_uint_eq(pos, 2);
        ck_assert_int_eq(fileset_wait_writeback(&layout, &pos, layout.size, 1, "out", &err), 0);
        ck_assert_uint_eq(pos, 5);
        pos = 0;
        ck_assert_int_eq(fileset_wait_writeback(&layout, &pos, layout.size, 0, "out", &err), 0);
        ck_assert_uint_eq(pos, 5);
        /* Only up to @end (the end of what was written; past the space's end: its end). */
        pos = 0;
        ck_assert_int_eq(fileset_wait_writeback(&layout, &pos, 1, 0, "out", &err), 0);
        ck_assert_uint_eq(pos, 1);
        ck_assert_int_eq(fileset_wait_writeback(&layout, &pos, 3, 0, "out", &err), 0);
        ck_assert_uint_eq(pos, 3);
        ck_assert_int_eq(fileset_wait_writeback(&layout, &pos, 3, 0, "out", &err), 0);
        ck_assert_uint_eq(pos, 3);
        ck_assert_int_eq(fileset_wait_writeback(&layout, &pos, 100, 0, "out", &err), 0);
        ck_assert_uint_eq(pos, 5);

        /* A failed range stops the wait where it is, and the message names the file. */
        int x_fd = layout.files[2].fd;
        layout.files[2].fd = -1;
        pos = 0;
        ck_assert_int_eq(fileset_wait_writeback(&layout, &pos, layout.size, 0, "out", &err), -EBADF);
        ck_assert_uint_eq(pos, 2);
        ck_assert_str_eq(err.message, "out, file 'w/x': writeback: Bad file descriptor");
        layout.files[2].fd = x_fd;
        for (size_t i = 0; i < layout.n_files; i++)
                close(layout.files[i].fd);
        fileset_done(&layout);
}
END_TEST

START_TEST(test_same_files) {
        FileSet want, have = FILESET_NULL;
        TpError err = {};

        describe(&want);        /* a: 2, e: 0, w/x: 3 */
        ck_assert_int_eq(fileset_add(&have, "a", 2), 0);
        ck_assert_int_eq(fileset_add(&have, "e", 0), 0);
        ck_assert_int_eq(fileset_same_files(&have, &want, &err), -EBADMSG);
        ck_assert_str_eq(err.message, "'w/x' is missing");
        ck_assert_int_eq(fileset_add(&have, "w/x", 4), 0);
        ck_assert_int_eq(fileset_same_files(&have, &want, &err), -EBADMSG);
        ck_assert_str_eq(err.message, "'w/x' is 4 bytes, expected 3");
        have.files[2].size = 3;
        ck_assert_int_eq(fileset_same_files(&have, &want, &err), 0);
        ck_assert_int_eq(fileset_add(&have, "z", 1), 0);
        ck_assert_int_eq(fileset_same_files(&have, &want, &err), -EBADMSG);
        ck_assert_str_eq(err.message, "'z' is not one of the model's files");
        fileset_done(&have);
        have = FILESET_NULL;
        ck_assert_int_eq(fileset_add(&have, "a", 2), 0);
        ck_assert_int_eq(fileset_add(&have, "b", 0), 0);
        ck_assert_int_eq(fileset_add(&have, "w/x", 3), 0);
        ck_assert_int_eq(fileset_same_files(&have, &want, &err), -EBADMSG);
        ck_assert_str_eq(err.message, "'b' is not one of the model's files");
        fileset_done(&have);
        fileset_done(&want);
}
END_TEST

START_TEST(test_atomic_model) {
        FileSet layout, s = FILESET_NULL;
        AtomicModel m = ATOMIC_MODEL_NULL;
        TpError err = {};
        struct stat st;

        /* A directory: every file made up front, written through the set, nothing at the path before the commit. */
        describe(&layout);
        ck_assert_int_eq(mkdir(at("out"), 0755), 0);
        put("out/stale", "old");
        ck_assert_int_eq(atomic_model_open(at("out"), &layout, layout.size, &m), 0);
        ck_assert_uint_eq(m.set.n_files, 3);
        ck_assert(m.set.directory);
        ck_assert_int_eq(fileset_pwrite(&m.set, "xyz", 3, 2), 0);
        ck_assert_int_eq(fileset_pwrite(&m.set, "ab", 2, 0), 0);
        read_back("out/stale", "old");
        ck_assert_int_eq(atomic_model_commit(&m), 0);
        read_back("out/a", "ab");
        read_back("out/e", "");
        read_back("out/w/x", "xyz");
        ck_assert_int_eq(stat(at("out/stale"), &st), -1);

        /* Its files open read-write through the walk: a write lands in the file. */
        int fd = open(at("out"), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(fileset_open_dir_access(fd, O_RDWR, &s, &err), 0);
        close(fd);
        ck_assert_int_eq(fileset_pwrite(&s, "Q", 1, 4), 0);
        fileset_done(&s);
        read_back("out/w/x", "xyQ");

        /* Aborted: the old directory stays, no temporary is left. */
        ck_assert_int_eq(atomic_model_open(at("out"), &layout, layout.size, &m), 0);
        ck_assert_int_eq(fileset_pwrite(&m.set, "12345", 5, 0), 0);
        atomic_model_abort(&m);
        read_back("out/a", "ab");
        fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ck_assert_int_eq(fileset_open(fd, "root", &s, &err), 0);
        for (size_t i = 0; i < s.n_files; i++)
                ck_assert_msg(strncmp(s.files[i].path, "out/", 4) == 0, "left behind: %s", s.files[i].path);
        fileset_done(&s);

        /* One file: the AtomicFile's fd as a set of one, of the size given. */
        ck_assert_int_eq(atomic_model_open(at("one"), NULL, 3, &m), 0);
        ck_assert(!m.set.directory);
        ck_assert_uint_eq(m.set.size, 3);
        ck_assert_int_eq(fileset_pwrite(&m.set, "one", 3, 0), 0);
        ck_assert_int_eq(atomic_model_commit(&m), 0);
        read_back("one", "one");
        fileset_done(&layout);
}
END_TEST

static Suite *fileset_suite(void) {
        Suite *s = suite_create("fileset");
        TCase *tc = tcase_create("core");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_path_valid);
        tcase_add_test(tc, test_walk_and_read);
        tcase_add_test(tc, test_walk_refuses);
        tcase_add_test(tc, test_add_order);
        tcase_add_test(tc, test_atomic_dir);
        tcase_add_test(tc, test_set_hash);
        tcase_add_test(tc, test_pwrite_and_sync);
        tcase_add_test(tc, test_writeback);
        tcase_add_test(tc, test_same_files);
        tcase_add_test(tc, test_atomic_model);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(fileset_suite)
