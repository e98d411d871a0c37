/* SPDX-License-Identifier: MIT */
/* daemon/taskpatchd-store.c: the caps of the state file (its size, the tasks whose versions it keeps). */

#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check-main.h"
#include "taskpatchd-store.h"

#define STATE_FILE_CAP (64u << 10)      /* STATE_MAX_BYTES, private to the store */

static char dir[64], path[128];

static void setup(void) {
        snprintf(dir, sizeof(dir), "/tmp/check-store-XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(dir));
        snprintf(path, sizeof(path), "%s/state.json", dir);
}

static void teardown(void) {
        (void) unlink(path);
        (void) rmdir(dir);
}

static void task_name(unsigned i, char buf[static TASK_NAME_MAX + 1]) {
        /* The longest names, so that the file is as big as STATE_MAX_TASKS entries can make it. */
        snprintf(buf, TASK_NAME_MAX + 1, "%04u%0*u", i, TASK_NAME_MAX - 4, 0);
}

START_TEST(test_accepted_tasks_cap) {
        static PersistentState s, back;
        char name[TASK_NAME_MAX + 1];
        TpError err = {};

        setup();
        for (unsigned i = 0; i < STATE_MAX_TASKS; i++) {
                task_name(i, name);
                ck_assert_int_eq(state_accept(&s, name, MANIFEST_MAX_VERSION - 1), 1);
        }
        task_name(STATE_MAX_TASKS, name);
        ck_assert_int_eq(state_accept(&s, name, 1), -E2BIG);
        ck_assert_uint_eq(s.n_accepted, STATE_MAX_TASKS);
        task_name(7, name);
        ck_assert_int_eq(state_accept(&s, name, MANIFEST_MAX_VERSION), 1);    /* a known task still rises */

        /* The fullest state still fits the file cap, and reads back. */
        ck_assert_msg(state_save(path, &s, NULL, &err) == 0, "%s", err.message);
        ck_assert_msg(state_load(path, &back, &err) == 0, "%s", err.message);
        ck_assert_uint_eq(back.n_accepted, STATE_MAX_TASKS);

        /* A file that names one task more is refused. */
        json_error_t je;
        json_t *o = json_load_file(path, 0, &je);
        ck_assert_ptr_nonnull(o);
        task_name(STATE_MAX_TASKS, name);
        ck_assert_int_eq(json_object_set_new(json_object_get(o, "accepted"), name, json_integer(1)), 0);
        ck_assert_int_eq(json_dump_file(o, path, JSON_COMPACT), 0);
        json_decref(o);
        ck_assert_int_eq(state_load(path, &back, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "not a valid state file"), "%s", err.message);
        teardown();
}
END_TEST

START_TEST(test_file_size_cap) {
        PersistentState s = { 0 };
        TpError err = {};
        FILE *f;

        setup();
        ck_assert_int_eq(state_save(path, &s, NULL, &err), 0);
        /* Padded with spaces to exactly the cap: loads. */
        f = fopen(path, "ae");
        ck_assert_ptr_nonnull(f);
        ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
        for (long i = ftell(f); i < (long) STATE_FILE_CAP; i++)
                fputc(' ', f);
        ck_assert_int_eq(fclose(f), 0);
        ck_assert_msg(state_load(path, &s, &err) == 0, "%s", err.message);
        /* One byte more: refused, naming the cap. */
        f = fopen(path, "ae");
        ck_assert_ptr_nonnull(f);
        fputc(' ', f);
        ck_assert_int_eq(fclose(f), 0);
        ck_assert_int_eq(state_load(path, &s, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "state.json: larger than 65536 bytes"), "%s", err.message);
        teardown();
}
END_TEST

static Suite *store_suite(void) {
        Suite *s = suite_create("store");
        TCase *tc = tcase_create("caps");

        tcase_add_test(tc, test_accepted_tasks_cap);
        tcase_add_test(tc, test_file_size_cap);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(store_suite)
