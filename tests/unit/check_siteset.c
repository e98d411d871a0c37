/* SPDX-License-Identifier: MIT */
/* common/artifact/siteset.c: a site list file, its line and file caps. */

#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check-main.h"
#include "siteset.h"

#define LINE_CAP (64u << 10)    /* SITE_LINE_MAX_BYTES */
#define FILE_CAP (16u << 20)    /* SITE_LIST_MAX_BYTES */

static char path[64];

static void write_file(const void *data, size_t n) {
        int fd;

        snprintf(path, sizeof(path), "/tmp/check-siteset-XXXXXX");
        fd = mkostemp(path, O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write(fd, data, n), (ssize_t) n);
        close(fd);
}

/* Load @n bytes of @data: 0 and the set, or the error with its message in @err. */
static int load(const void *data, size_t n, SiteSet *ret, TpError *err) {
        write_file(data, n);
        int r = site_set_load(path, ret, err);
        unlink(path);
        return r;
}

START_TEST(test_text) {
        static const char text[] = "# sites\n\n  blk.1.ffn_up \r\nblk.0.attn_q\nblk.0.attn_q\n\tlast";
        SiteSet s = {};
        TpError err = {};

        ck_assert_msg(load(text, sizeof(text) - 1, &s, &err) == 0, "%s", err.message);
        ck_assert_uint_eq(s.n, 3);
        ck_assert_str_eq(s.names[0], "blk.0.attn_q");
        ck_assert_str_eq(s.names[2], "last");
        site_set_done(&s);

        ck_assert_int_eq(load("a\nb\0c\n", 6, &s, &err), -EINVAL);
        ck_assert_msg(strstr(err.message, "line 2 holds a NUL byte"), "%s", err.message);
}
END_TEST

START_TEST(test_line_cap) {
        char *text = malloc(LINE_CAP + 2);
        SiteSet s = {};
        TpError err = {};

        ck_assert_ptr_nonnull(text);
        /* A name and its newline: exactly the cap, then one byte more -- with and without a newline. */
        memset(text, 'n', LINE_CAP + 1);
        text[LINE_CAP - 1] = '\n';
        ck_assert_msg(load(text, LINE_CAP, &s, &err) == 0, "%s", err.message);
        ck_assert_uint_eq(strlen(s.names[0]), LINE_CAP - 1);
        site_set_done(&s);
        ck_assert_msg(load(text, LINE_CAP - 1, &s, &err) == 0, "%s", err.message);
        site_set_done(&s);

        text[LINE_CAP - 1] = 'n';
        text[LINE_CAP] = '\n';
        ck_assert_int_eq(load(text, LINE_CAP + 1, &s, &err), -EFBIG);
        ck_assert_msg(strstr(err.message, "line 1 is longer than 65536 bytes"), "%s", err.message);
        memset(text, 'n', LINE_CAP + 1);
        ck_assert_int_eq(load(text, LINE_CAP + 1, &s, &err), -EFBIG);   /* no newline at all */
        free(text);
}
END_TEST

START_TEST(test_file_cap) {
        char *text = malloc(FILE_CAP + 1);
        SiteSet s = {};
        TpError err = {};

        ck_assert_ptr_nonnull(text);
        /* Comment lines of 64 bytes up to exactly the cap, then one byte more. */
        for (size_t i = 0; i < FILE_CAP; i += 64) {
                memset(text + i, '#', 63);
                text[i + 63] = '\n';
        }
        ck_assert_msg(load(text, FILE_CAP, &s, &err) == 0, "%s", err.message);
        ck_assert_uint_eq(s.n, 0);
        site_set_done(&s);
        text[FILE_CAP] = 'x';
        ck_assert_int_eq(load(text, FILE_CAP + 1, &s, &err), -EFBIG);
        ck_assert_msg(strstr(err.message, "larger than 16777216 bytes"), "%s", err.message);
        free(text);
}
END_TEST

static Suite *siteset_suite(void) {
        Suite *s = suite_create("siteset");
        TCase *tc = tcase_create("text");

        tcase_add_test(tc, test_text);
        tcase_add_test(tc, test_line_cap);
        tcase_add_test(tc, test_file_cap);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(siteset_suite)
