/* SPDX-License-Identifier: MIT */
/* common/device/slot.c: the caps of the daemon's per-slot files (seal, chunk table, undo record) and their messages. */

#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check-main.h"
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
        ck_assert_int_eq(undo_record_open(path_of("undo"), (uint64_t) MANIFEST_MAX_SPANS + 1, digest, 1 << 20, &u, &err),
                         -EBADMSG);
        ck_assert_ptr_null(u);
        ck_assert_msg(strstr(err.message, "undo: 1048577 spans, more than the cap of 1048576"), "%s", err.message);
        cleanup();
}
END_TEST

static Suite *slot_suite(void) {
        Suite *s = suite_create("slot");
        TCase *tc = tcase_create("caps");

        tcase_add_test(tc, test_seal_size_cap);
        tcase_add_test(tc, test_chunk_caps);
        tcase_add_test(tc, test_undo_span_cap);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(slot_suite)
