/* SPDX-License-Identifier: MIT */
/* common/device/slot.c: the caps of the daemon's per-slot files (seal, chunk table, undo record) and their messages. */

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check-main.h"
#include "fileio.h"
#include "filejob.h"
#include "slot.h"

static char dir[64];

static const char *path_of(const char *name) {
        static char bufs[4][128];
        static unsigned i;
        char *b = bufs[i++ % 4];

        if (!dir[0]) {
                snprintf(dir, sizeof(dir), "/tmp/check-slot-XXXXXX");
                ck_assert_ptr_nonnull(mkdtemp(dir));
        }
        snprintf(b, sizeof(bufs[0]), "%s/%s", dir, name);
        return b;
}

static void cleanup(void) {
        char cmd[128];

        if (!dir[0])
                return;
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        ck_assert_int_eq(system(cmd), 0);
        dir[0] = '\0';         /* the next test (CK_FORK=no: in this process) makes its own */
}

static Seal sample(void) {
        Seal s = { .version = 3, .size = 1 << 20, .chunk_size = 64 << 10 };

        snprintf(s.task, sizeof(s.task), "json");
        memset(s.sha256, 0x11, sizeof(s.sha256));
        return s;
}

/* Load @s saved as is: 0, or the error with its message in @err. */
static int round_trip(const Seal *s, TpError *err) {
        Seal back;

        ck_assert_int_eq(seal_save(path_of("seal"), s, NULL, err), 0);
        return seal_load(path_of("seal"), &back, err);
}

START_TEST(test_seal_size_cap) {
        Seal s = sample(), back;
        TpError err = {};
        char *text;
        FILE *f;

        ck_assert_msg(round_trip(&s, &err) == 0, "%s", err.message);

        /* The same seal padded with whitespace (still valid JSON) to exactly the cap, then one byte over. */
        text = malloc(SEAL_MAX_BYTES + 1);
        ck_assert_ptr_nonnull(text);
        for (size_t size = SEAL_MAX_BYTES; size <= SEAL_MAX_BYTES + 1; size++) {
                int fd = open(path_of("seal"), O_RDONLY | O_CLOEXEC);
                ssize_t n = read(fd, text, SEAL_MAX_BYTES);
                close(fd);
                ck_assert_int_gt(n, 0);
                memset(text + n, ' ', size - (size_t) n);
                f = fopen(path_of("padded"), "we");
                ck_assert_ptr_nonnull(f);
                ck_assert_uint_eq(fwrite(text, 1, size, f), size);
                ck_assert_int_eq(fclose(f), 0);
                int r = seal_load(path_of("padded"), &back, &err);
                if (size == SEAL_MAX_BYTES)
                        ck_assert_msg(r == 0, "%s", err.message);
                else {
                        ck_assert_int_eq(r, -EBADMSG);
                        ck_assert_msg(strstr(err.message, "padded: larger than the 16384-byte cap of a seal"), "%s",
                                      err.message);
                }
        }
        free(text);
        cleanup();
}
END_TEST

START_TEST(test_chunk_caps) {
        Seal s = sample();
        TpError err = {};
        uint8_t root[SHA256_DIGEST_SIZE] = { 0 }, *table = NULL;

        /* CHUNK_MAX_ENTRIES chunks exactly, then one more. */
        s.chunk_size = CHUNK_MIN_SIZE;
        s.size = (uint64_t) CHUNK_MAX_ENTRIES * CHUNK_MIN_SIZE;
        ck_assert_msg(round_trip(&s, &err) == 0, "%s", err.message);
        s.size++;
        ck_assert_int_eq(round_trip(&s, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "68719476737 bytes in chunks of 4096 make 16777217 chunks, more than the cap "
                                          "of 16777216"), "%s", err.message);
        s.chunk_size = CHUNK_MIN_SIZE - 1;
        ck_assert_int_eq(round_trip(&s, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "chunk_size 4095 is below the minimum of 4096"), "%s", err.message);

        /* A chunk table that would need more entries is refused before its size is even looked at. */
        ck_assert_int_eq(seal_save(path_of("chunks"), &s, NULL, &err), 0);
        ck_assert_int_eq(chunk_table_load(path_of("chunks"), (uint64_t) CHUNK_MAX_ENTRIES * CHUNK_MIN_SIZE + 1,
                                          CHUNK_MIN_SIZE, root, &table, &err), -EINVAL);
        ck_assert_ptr_null(table);
        ck_assert_msg(strstr(err.message, "16777217 chunks of 4096 bytes, more than the cap of 16777216"), "%s",
                      err.message);
        cleanup();
}
END_TEST

START_TEST(test_undo_span_cap) {
        UndoRecord *u = NULL;
        uint8_t digest[SHA256_DIGEST_SIZE] = { 0 };
        TpError err = {};
        int fd;

        fd = open(path_of("undo"), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        ck_assert_int_ge(fd, 0);
        close(fd);
        ck_assert_int_eq(undo_record_open(path_of("undo"), (uint64_t) UNDO_MAX_ENTRIES + 1, digest, 1 << 20, &u, &err),
                         -EBADMSG);
        ck_assert_ptr_null(u);
        ck_assert_msg(strstr(err.message, "undo: 2097154 spans, more than the cap of 2097153"), "%s", err.message);
        cleanup();
}
END_TEST

/* Write a relocated record of @n entries over a 64-byte base whose byte i is i; stored entries hold 0x80 | i. */
static int write_relocated(const UndoSpan *e, uint64_t n, uint64_t base_size, uint8_t digest[SHA256_DIGEST_SIZE]) {
        UndoWriter *w = NULL;
        TpError err = {};
        int r = undo_writer_new_relocated(path_of("undo2"), e, n, base_size, &w, &err);

        ck_assert_msg(r == 0, "%s", err.message);
        for (uint64_t i = 0; i < n; i++)
                for (uint64_t k = 0; e[i].slot_offset == UNDO_STORED && k < e[i].length; k++) {
                        uint8_t b = (uint8_t) (0x80 | (e[i].offset + k));
                        ck_assert_int_eq(undo_writer_append(w, &b, 1, &err), 0);
                }
        r = undo_writer_commit(w, digest, NULL, &err);
        undo_writer_free(w);
        return r;
}

START_TEST(test_undo_relocated) {
        /* A slot file of 100 bytes (byte i is i): base [0,16) is at slot 50, [16,24) stored, [24,64) at slot 0. */
        const UndoSpan e[] = {
                { .offset = 0, .length = 16, .slot_offset = 50 },
                { .offset = 16, .length = 8, .slot_offset = UNDO_STORED },
                { .offset = 24, .length = 40, .slot_offset = 0 },
        };
        uint8_t digest[SHA256_DIGEST_SIZE], slot[100], buf[64];
        UndoRecord *u = NULL;
        TpError err = {};
        uint64_t at;

        for (unsigned i = 0; i < sizeof(slot); i++)
                slot[i] = (uint8_t) i;
        int fd = open(path_of("slot"), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write(fd, slot, sizeof(slot)), (ssize_t) sizeof(slot));
        ck_assert_int_eq(write_relocated(e, 3, 64, digest), 0);
        ck_assert_msg(undo_record_open(path_of("undo2"), 3, digest, sizeof(slot), &u, &err) == 0, "%s", err.message);
        ck_assert(u->relocated);
        ck_assert_uint_eq(u->base_size, 64);

        /* Every base byte, from wherever it lies. */
        ck_assert_msg(undo_read_base(u, &FILESET_ONE(fd, sizeof(slot)), 0, 64, buf, &err) == 0, "%s", err.message);
        for (unsigned i = 0; i < 64; i++) {
                uint8_t want = i < 16 ? (uint8_t) (50 + i) : i < 24 ? (uint8_t) (0x80 | i) : (uint8_t) (i - 24);
                ck_assert_msg(buf[i] == want, "base byte %u: %u, want %u", i, buf[i], want);
        }
        /* The same slot as two files (bytes [0, 30) and [30, 100)): runs that cross the file end read the same. */
        {
                FileSetFile f[2] = { { .path = (char *) "s0", .size = 30 },
                                     { .path = (char *) "s1", .offset = 30, .size = 70 } };
                FileSet two = { .files = f, .n_files = 2, .size = sizeof(slot), .directory = true };
                uint8_t buf2[64];
                for (int i = 0; i < 2; i++) {
                        f[i].fd = open(path_of(f[i].path), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
                        ck_assert_int_ge(f[i].fd, 0);
                        ck_assert_int_eq(pwrite(f[i].fd, slot + f[i].offset, f[i].size, 0), (ssize_t) f[i].size);
                }
                ck_assert_msg(undo_read_base(u, &two, 0, 64, buf2, &err) == 0, "%s", err.message);
                ck_assert_int_eq(memcmp(buf, buf2, 64), 0);
                close(f[0].fd);
                close(f[1].fd);
        }
        ck_assert_uint_eq(undo_base_run(u, 4, 100, &at), 12);
        ck_assert_uint_eq(at, 54);
        ck_assert_uint_eq(undo_base_run(u, 20, 100, &at), 4);
        ck_assert_uint_eq(at, UNDO_STORED);
        ck_assert_uint_eq(undo_base_run(u, 64, 100, &at), 0);
        ck_assert_int_eq(undo_read_base(u, &FILESET_ONE(fd, sizeof(slot)), 60, 8, buf, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "base offset 64 lies outside the 64-byte base"), "%s", err.message);
        u = undo_record_free(u);

        /* The slot it maps is too small for an entry: refused at open. */
        ck_assert_int_eq(undo_record_open(path_of("undo2"), 3, digest, 60, &u, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "entry #0 points outside the 60-byte slot"), "%s", err.message);

        /* A hole in the tiling, and entries that stop short of the base. */
        const UndoSpan hole[] = { { .offset = 0, .length = 16, .slot_offset = 0 }, { .offset = 20, .length = 44, .slot_offset = 20 } };
        ck_assert_int_eq(write_relocated(hole, 2, 64, digest), 0);
        ck_assert_int_eq(undo_record_open(path_of("undo2"), 2, digest, sizeof(slot), &u, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "entry #1 (base offset 20) does not continue the base at 16"), "%s", err.message);
        ck_assert_int_eq(write_relocated(hole, 1, 64, digest), 0);
        ck_assert_int_eq(undo_record_open(path_of("undo2"), 1, digest, sizeof(slot), &u, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "the entries end at 16, the base is 64 bytes"), "%s", err.message);
        ck_assert_ptr_null(u);

        /* An in-layout record reads the same way: its spans from the record, the rest from the slot. */
        const UndoSpan v1[] = { { .offset = 8, .length = 4 } };
        UndoWriter *w = NULL;
        ck_assert_int_eq(undo_writer_new(path_of("undo1"), v1, 1, &w, &err), 0);
        ck_assert_int_eq(undo_writer_append(w, "ABCD", 4, &err), 0);
        ck_assert_int_eq(undo_writer_commit(w, digest, NULL, &err), 0);
        undo_writer_free(w);
        ck_assert_msg(undo_record_open(path_of("undo1"), 1, digest, sizeof(slot), &u, &err) == 0, "%s", err.message);
        ck_assert(!u->relocated);
        ck_assert_int_eq(undo_read_base(u, &FILESET_ONE(fd, sizeof(slot)), 6, 8, buf, &err), 0);
        ck_assert_int_eq(memcmp(buf, "\x06\x07" "ABCD" "\x0c\x0d", 8), 0);
        ck_assert_uint_eq(undo_base_run(u, 0, 100, &at), 8);
        ck_assert_uint_eq(at, 0);
        ck_assert_uint_eq(undo_base_run(u, 12, 100, &at), 100);
        ck_assert_uint_eq(at, 12);
        u = undo_record_free(u);
        close(fd);
        cleanup();
}
END_TEST

/*
 * undo_record_open_deferred(): the table is checked at once, the SHA-256 when asked; its verdict,
 * the same on every call, is what undo_record_open() says up front. A record damaged after it was
 * opened is still found out when asked (the digest is not taken at open).
 */
START_TEST(test_undo_deferred) {
        const UndoSpan v1[] = { { .offset = 8, .length = 4 } };
        uint8_t digest[SHA256_DIGEST_SIZE], wrong[SHA256_DIGEST_SIZE] = { 0 };
        UndoWriter *w = NULL;
        UndoRecord *u = NULL;
        TpError err = {};

        ck_assert_int_eq(undo_writer_new(path_of("undo1"), v1, 1, &w, &err), 0);
        ck_assert_int_eq(undo_writer_append(w, "ABCD", 4, &err), 0);
        ck_assert_int_eq(undo_writer_commit(w, digest, NULL, &err), 0);
        undo_writer_free(w);

        ck_assert_msg(undo_record_open_deferred(path_of("undo1"), 1, digest, 100, &u, &err) == 0, "%s", err.message);
        ck_assert_uint_eq(u->n, 1);
        ck_assert_uint_eq(u->spans[0].offset, 8);
        ck_assert_int_eq(undo_record_checked(u, &err), 0);
        ck_assert_int_eq(undo_record_checked(u, &err), 0);
        u = undo_record_free(u);
        ck_assert_int_eq(undo_record_open_deferred(path_of("undo1"), 1, digest, 100, &u, &err), 0);
        u = undo_record_free(u);        /* never asked */

        /* Not the seal's digest: opened (the table is sound), then refused, twice alike. */
        ck_assert_int_eq(undo_record_open(path_of("undo1"), 1, wrong, 100, &u, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "undo1: damaged (its SHA-256 does not match the seal)"), "%s", err.message);
        ck_assert_int_eq(undo_record_open_deferred(path_of("undo1"), 1, wrong, 100, &u, &err), 0);
        for (int i = 0; i < 2; i++) {
                err = (TpError) {};
                ck_assert_int_eq(undo_record_checked(u, &err), -EBADMSG);
                ck_assert_msg(strstr(err.message, "undo1: damaged (its SHA-256 does not match the seal)"), "%s",
                              err.message);
        }
        u = undo_record_free(u);
        ck_assert_int_eq(undo_record_open_deferred(path_of("undo1"), 1, wrong, 100, &u, &err), 0);
        u = undo_record_free(u);

        /* Damaged once open: found when asked. */
        ck_assert_int_eq(undo_record_open_deferred(path_of("undo1"), 1, digest, 100, &u, &err), 0);
        int fd = open(path_of("undo1"), O_WRONLY);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(pwrite(fd, "X", 1, 32), 1);
        close(fd);
        ck_assert_int_eq(undo_record_checked(u, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "undo1: damaged"), "%s", err.message);
        u = undo_record_free(u);

        /* A table that is wrong is refused at open, deferred or not. */
        ck_assert_int_eq(undo_record_open_deferred(path_of("undo1"), 2, digest, 100, &u, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "not an undo record of 2 spans"), "%s", err.message);
        ck_assert_ptr_null(u);
        cleanup();
}
END_TEST

START_TEST(test_seal_relocated) {
        Seal s = sample(), back;
        TpError err = {};

        /* Only a relocated slot writes the key: an in-layout seal reads as older daemons wrote it. */
        ck_assert_int_eq(seal_save(path_of("seal"), &s, NULL, &err), 0);
        ck_assert_int_eq(seal_load(path_of("seal"), &back, &err), 0);
        ck_assert(!back.relocated);
        s.relocated = true;
        ck_assert_int_eq(seal_save(path_of("seal"), &s, NULL, &err), 0);
        ck_assert_int_eq(seal_load(path_of("seal"), &back, &err), 0);
        ck_assert(back.relocated);
        cleanup();
}
END_TEST

/* A directory of two files, "m/a" (3 bytes) and "m/sub/b" (5), walked read-only into @set. */
static void two_files(FileSet *set, struct stat *dir_st) {
        TpError err = {};
        ck_assert_int_eq(mkdir(path_of("m"), 0755) == 0 || errno == EEXIST, 1);
        ck_assert_int_eq(mkdir(path_of("m/sub"), 0755) == 0 || errno == EEXIST, 1);
        ck_assert_int_eq(atomic_file_write(path_of("m/a"), "abc", 3), 0);
        ck_assert_int_eq(atomic_file_write(path_of("m/sub/b"), "defgh", 5), 0);
        int fd = open(path_of("m"), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(fstat(fd, dir_st), 0);
        ck_assert_int_eq(fileset_open_dir(fd, set, &err), 0);
        close(fd);
}

static void reopen(FileSet *set, struct stat *dir_st) {
        TpError err = {};
        fileset_done(set);
        int fd = open(path_of("m"), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(fstat(fd, dir_st), 0);
        ck_assert_int_eq(fileset_open_dir(fd, set, &err), 0);
        close(fd);
}

START_TEST(test_seal_files) {
        FileSet set;
        struct stat st;
        Seal s = sample(), back;
        TpError err = {};

        two_files(&set, &st);
        ck_assert_int_eq(seal_set_identity_files(&s, &st, &set), 0);
        ck_assert_uint_eq(s.n_files, 2);
        ck_assert_uint_eq(s.size, 8);
        ck_assert_int_eq(seal_save(path_of("seal"), &s, NULL, &err), 0);
        ck_assert_int_eq(seal_load(path_of("seal"), &back, &err), 0);
        ck_assert_uint_eq(back.n_files, 2);
        ck_assert(seal_identity_matches_files(&back, &st, &set));

        /* A file replaced (a new inode), then one added: neither matches. */
        ck_assert_int_eq(atomic_file_write(path_of("m/a"), "abc", 3), 0);
        reopen(&set, &st);
        ck_assert(!seal_identity_matches_files(&back, &st, &set));
        ck_assert_int_eq(seal_set_identity_files(&back, &st, &set), 0);
        ck_assert(seal_identity_matches_files(&back, &st, &set));
        ck_assert_int_eq(atomic_file_write(path_of("m/sub/c"), "", 0), 0);
        reopen(&set, &st);
        ck_assert(!seal_identity_matches_files(&back, &st, &set));
        fileset_done(&set);

        /* A one-file seal has no files key, and a bad one is refused. */
        s = sample();
        ck_assert_int_eq(seal_save(path_of("seal"), &s, NULL, &err), 0);
        ck_assert_int_eq(seal_load(path_of("seal"), &back, &err), 0);
        ck_assert_uint_eq(back.n_files, 0);
        const char *bad = "{\"format\": 1, \"dirty\": false, \"task\": null, \"files\": {\"count\": 0}}";
        ck_assert_int_eq(atomic_file_write(path_of("seal"), bad, strlen(bad)), 0);
        ck_assert_int_lt(seal_load(path_of("seal"), &back, &err), 0);
        cleanup();
}
END_TEST

START_TEST(test_set_jobs) {
        FileSet src, dst = FILESET_NULL;
        struct stat st;
        SetCopy c;
        FileHash *h = NULL;
        uint8_t d[SHA256_DIGEST_SIZE], files[2][SHA256_DIGEST_SIZE], want[SHA256_DIGEST_SIZE];
        uint8_t *chunks = NULL;

        two_files(&src, &st);
        /* Copied file by file into empty files, in slices smaller than a file. */
        for (size_t i = 0; i < src.n_files; i++) {
                char name[32];
                snprintf(name, sizeof(name), "copy%zu", i);
                ck_assert_int_eq(fileset_add(&dst, name, src.files[i].size), 0);
                dst.files[i].fd = open(path_of(name), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
                ck_assert_int_ge(dst.files[i].fd, 0);
        }
        dst.owns_fds = true;
        set_copy_init(&c, &src, &dst);
        int r;
        unsigned steps = 0;
        while ((r = set_copy_step(&c, 2)) > 0)
                steps++;
        ck_assert_int_eq(r, 0);
        ck_assert_uint_eq(c.pos, 8);
        char buf[8];
        ck_assert_int_eq(fileset_pread(&dst, buf, 8, 0), 0);
        ck_assert_int_eq(memcmp(buf, "abcdefgh", 8), 0);

        /* Hashed file by file: each file's own digest, and the set's from them. */
        ck_assert_int_eq(file_hash_new_set(&src, CHUNK_MIN_SIZE, &h), 0);
        while ((r = file_hash_step(h, 3)) > 0)
                ;
        ck_assert_int_eq(r, 0);
        file_hash_result_files(h, files, d, &chunks);
        file_hash_free(h);
        sha256_digest("abc", 3, want);
        ck_assert_int_eq(memcmp(files[0], want, sizeof(want)), 0);
        sha256_digest("defgh", 5, want);
        ck_assert_int_eq(memcmp(files[1], want, sizeof(want)), 0);
        fileset_digest(&src, (const uint8_t (*)[SHA256_DIGEST_SIZE]) files, want);
        ck_assert_int_eq(memcmp(d, want, sizeof(want)), 0);
        sha256_digest("abcdefgh", 8, want);     /* the one chunk runs across both files */
        ck_assert_int_eq(memcmp(chunks, want, sizeof(want)), 0);
        free(chunks);
        fileset_done(&src);
        fileset_done(&dst);
        cleanup();
}
END_TEST

/* A copy past a piece is synced behind on a worker: stopped when the copy ends, or early by set_copy_done(). */
START_TEST(test_set_copy_synced) {
        uint64_t size = SYNCER_PIECE + (4u << 20);
        int src = open(path_of("big"), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        int dst = open(path_of("big-copy"), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        FileSet from = FILESET_ONE(src, size), to = FILESET_ONE(dst, size);
        SetCopy c;
        struct stat st;
        int r;

        ck_assert_int_ge(src, 0);
        ck_assert_int_ge(dst, 0);
        ck_assert_int_eq(ftruncate(src, (off_t) size), 0);
        ck_assert_int_eq(pwrite(src, "end", 3, (off_t) size - 3), 3);
        set_copy_init(&c, &from, &to);
        bool worker = false;
        while ((r = set_copy_step(&c, 8u << 20)) > 0)
                worker |= c.syncer != NULL;
        ck_assert_int_eq(r, 0);
        ck_assert(worker);
        ck_assert_ptr_null(c.syncer);           /* stopped with the copy's end */
        ck_assert_int_eq(fstat(dst, &st), 0);
        ck_assert_int_eq(st.st_size, (off_t) size);
        ck_assert_int_eq(set_copy_step(&c, 8u << 20), 0);       /* and done stays done */

        /* Ended early: the worker stops before the files are closed. */
        ck_assert_int_eq(ftruncate(dst, 0), 0);
        set_copy_init(&c, &from, &to);
        while (!c.syncer)
                ck_assert_int_eq(set_copy_step(&c, 8u << 20), 1);
        set_copy_done(&c);
        ck_assert_ptr_null(c.syncer);
        set_copy_done(&c);                      /* twice: nothing */
        close(src);
        close(dst);
        cleanup();
}
END_TEST

/* Files being retired: emptied from the last file's end, a piece a call under a 1 ns cap, then closed. */
START_TEST(test_retire) {
        FileSet set = FILESET_NULL;
        struct stat st;
        unsigned calls = 0;

        for (int i = 0; i < 2; i++) {
                char name[32];
                snprintf(name, sizeof(name), "old%d", i);
                ck_assert_int_eq(fileset_add(&set, name, (uint64_t) (2 - i) * (20u << 20)), 0);
                set.files[i].fd = open(path_of(name), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
                ck_assert_int_ge(set.files[i].fd, 0);
                ck_assert_int_eq(ftruncate(set.files[i].fd, (off_t) set.files[i].size), 0);
        }
        set.owns_fds = true;
        file_retire_hold(&set, SIGRTMIN + 1);
        ck_assert_ptr_nonnull(set.files);
        file_retire_step(&set, 1);
        ck_assert_int_eq(stat(path_of("old1"), &st), 0);
        ck_assert_int_eq(st.st_size, 4 << 20);          /* 20 MiB less a 16 MiB piece */
        ck_assert_int_eq(stat(path_of("old0"), &st), 0);
        ck_assert_int_eq(st.st_size, 40 << 20);
        for (calls = 1; set.files; calls++)
                file_retire_step(&set, 1);
        ck_assert_uint_eq(calls, 6);                    /* 2 + 3 pieces, then the close */
        ck_assert_int_eq(stat(path_of("old0"), &st), 0);
        ck_assert_int_eq(st.st_size, 0);

        /* Another open file description (as a service's mapping holds): not leased, let go whole. */
        int other = open(path_of("old0"), O_RDONLY | O_CLOEXEC);
        ck_assert_int_ge(other, 0);
        ck_assert_int_eq(fileset_add(&set, "old0", 0), 0);
        set.files[0].fd = open(path_of("old0"), O_RDWR | O_CLOEXEC);
        set.owns_fds = true;
        file_retire_hold(&set, SIGRTMIN + 1);
        ck_assert_ptr_null(set.files);
        close(other);
        cleanup();
}
END_TEST

static Suite *slot_suite(void) {
        Suite *s = suite_create("slot");
        TCase *tc = tcase_create("caps");

        tcase_add_test(tc, test_seal_size_cap);
        tcase_add_test(tc, test_chunk_caps);
        tcase_add_test(tc, test_undo_span_cap);
        tcase_add_test(tc, test_undo_relocated);
        tcase_add_test(tc, test_undo_deferred);
        tcase_add_test(tc, test_seal_relocated);
        tcase_add_test(tc, test_seal_files);
        tcase_add_test(tc, test_set_jobs);
        tcase_add_test(tc, test_set_copy_synced);
        tcase_add_test(tc, test_retire);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(slot_suite)
