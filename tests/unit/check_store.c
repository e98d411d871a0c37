/* SPDX-License-Identifier: MIT */
/*
 * daemon/taskpatchd-store.c: the caps of the state file (its size, the tasks whose versions it
 * keeps); the history of commits 'tpctl rollback' walks back; the floor kept a second time.
 */

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

/* Commits push, a rollback's commit pops, failed tasks are remembered until committed again. */
START_TEST(test_history) {
        PersistentState s = { 0 }, back = { 0 };
        TpError err = {};

        setup();
        ck_assert_ptr_null(state_previous(&s));
        state_committed(&s, NULL, 0);
        state_committed(&s, "json", 1);
        state_committed(&s, "json", 1);         /* the same again: one entry */
        state_committed(&s, "shout", 1);
        ck_assert_uint_eq(s.n_history, 3);
        ck_assert_str_eq(state_previous(&s)->task, "json");
        state_history_pop(&s);                  /* rolled back to json, committed */
        ck_assert_str_eq(s.history[s.n_history - 1].task, "json");
        ck_assert_str_eq(state_previous(&s)->task, "");
        for (unsigned v = 1; v <= STATE_HISTORY_MAX + 3; v++)
                state_committed(&s, "json", v);
        ck_assert_uint_eq(s.n_history, STATE_HISTORY_MAX);  /* the oldest dropped */
        ck_assert_uint_eq(s.history[s.n_history - 1].version, STATE_HISTORY_MAX + 3);

        state_failed_add(&s, "shout", 2);
        state_failed_add(&s, "shout", 2);
        ck_assert_uint_eq(s.n_failed, 1);
        ck_assert(state_failed(&s, "shout", 2));
        ck_assert(!state_failed(&s, "shout", 1));
        state_committed(&s, "shout", 2);        /* a technician switched to it and it passed */
        ck_assert(!state_failed(&s, "shout", 2));
        for (unsigned v = 1; v <= STATE_FAILED_MAX + 1; v++)
                state_failed_add(&s, "bad", v);
        ck_assert_uint_eq(s.n_failed, STATE_FAILED_MAX);
        ck_assert(!state_failed(&s, "bad", 1));

        s.committed = SLOT_A;
        ck_assert_int_eq(state_save(path, &s, NULL, &err), 0);
        ck_assert_int_eq(state_load(path, &back, &err), 0);
        ck_assert_uint_eq(back.n_history, s.n_history);
        ck_assert_mem_eq(back.history, s.history, s.n_history * sizeof(TaskRef));
        ck_assert_uint_eq(back.n_failed, s.n_failed);
        ck_assert_mem_eq(back.failed, s.failed, s.n_failed * sizeof(TaskRef));
        teardown();
}
END_TEST

/* A base bundle on trial keeps the base it brings, and a committed base change its re-provisioning. */
START_TEST(test_new_base) {
        PersistentState s = { .provisioned = true, .committed = SLOT_A, .reprovision = true }, back = { 0 };
        TpError err = {};
        FILE *f;

        setup();
        s.base = (BaseInfo) { .size = 100, .kind = ARTIFACT_GGUF, .chunk_size = 4096 };
        memset(s.base.sha256, 0x11, sizeof(s.base.sha256));
        s.trial = (TrialInfo) { .on = true, .slot = SLOT_B, .version = 2, .started = 7, .new_base = true };
        snprintf(s.trial.task, sizeof(s.trial.task), "base");
        snprintf(s.trial.transaction, sizeof(s.trial.transaction), "0123");
        s.trial.base = (BaseInfo) { .size = 200, .kind = ARTIFACT_GGUF, .chunk_size = 65536 };
        memset(s.trial.base.sha256, 0x22, sizeof(s.trial.base.sha256));
        memset(s.trial.base.layout, 0x33, sizeof(s.trial.base.layout));
        memset(s.trial.base.chunk_root, 0x44, sizeof(s.trial.base.chunk_root));
        ck_assert_int_eq(state_save(path, &s, NULL, &err), 0);
        ck_assert_int_eq(state_load(path, &back, &err), 0);
        ck_assert(back.reprovision);
        ck_assert(back.trial.on && back.trial.new_base);
        ck_assert_str_eq(back.trial.task, "base");
        ck_assert_mem_eq(&back.trial.base, &s.trial.base, sizeof(BaseInfo));
        ck_assert_mem_eq(&back.base, &s.base, sizeof(BaseInfo));

        ck_assert_int_eq(back.time_floor, 0);
        /* The newest accepted channel's time: kept in state.json and in floor.json, which only raises it. */
        s.time_floor = 1764000000;
        ck_assert_int_eq(state_save(path, &s, NULL, &err), 0);
        back = (PersistentState) { 0 };
        ck_assert_int_eq(state_load(path, &back, &err), 0);
        ck_assert_int_eq(back.time_floor, 1764000000);
        _cleanup_free_ char *text = floor_text(&s);
        ck_assert_ptr_nonnull(strstr(text, "\"time_floor\": 1764000000"));
        f = fopen(path, "we");
        fputs(text, f);
        fclose(f);
        back.time_floor = 5;
        ck_assert_int_eq(floor_load(path, &back, &err), 0);
        ck_assert_int_eq(back.time_floor, 1764000000);
        back.time_floor = 1764000001;
        ck_assert_int_eq(floor_load(path, &back, &err), 0);
        ck_assert_int_eq(back.time_floor, 1764000001);             /* never lowered */
        s.time_floor = 0;

        /* A task's trial says nothing of a base, and a state without a base change re-provisions nothing. */
        s.trial.new_base = s.reprovision = false;
        ck_assert_int_eq(state_save(path, &s, NULL, &err), 0);
        back = (PersistentState) { 0 };
        ck_assert_int_eq(state_load(path, &back, &err), 0);
        ck_assert(!back.reprovision && !back.trial.new_base);

        /* A new base that is not a base: the state file is refused. */
        f = fopen(path, "we");
        fputs("{\"format\": 1, \"provisioned\": false, \"committed\": \"a\", \"trial\": {\"slot\": \"b\", "
              "\"task\": \"base\", \"version\": 2, \"transaction\": \"x\", \"started\": 1, \"new_base\": {}}}", f);
        fclose(f);
        ck_assert_int_eq(state_load(path, &back, &err), -EBADMSG);
        teardown();
}
END_TEST

/* floor_load() only raises: the accepted versions and the channel serial survive state.json. */
START_TEST(test_floor) {
        PersistentState s = { 0 }, into = { 0 };
        TpError err = {};

        setup();
        ck_assert_int_eq(state_accept(&s, "json", 7), 1);
        ck_assert_int_eq(state_accept(&s, "shout", 2), 1);
        s.have_channel = true;
        s.channel_serial = 41;
        _cleanup_free_ char *text = floor_text(&s);
        ck_assert_ptr_nonnull(text);
        FILE *f = fopen(path, "we");
        ck_assert_ptr_nonnull(f);
        fputs(text, f);
        fclose(f);

        ck_assert_int_eq(state_accept(&into, "json", 9), 1);     /* higher already: kept */
        into.have_channel = true;
        into.channel_serial = 3;
        ck_assert_int_eq(floor_load(path, &into, &err), 0);
        ck_assert_uint_eq(state_accepted(&into, "json"), 9);
        ck_assert_uint_eq(state_accepted(&into, "shout"), 2);
        ck_assert_uint_eq(into.channel_serial, 41);

        f = fopen(path, "we");
        fputs("{\"format\": 2, \"accepted\": {}}", f);
        fclose(f);
        ck_assert_int_eq(floor_load(path, &into, &err), -EBADMSG);
        ck_assert_ptr_nonnull(strstr(err.message, "not a floor file"));
        ck_assert_uint_eq(state_accepted(&into, "json"), 9);
        unlink(path);
        ck_assert_int_eq(floor_load(path, &into, &err), -ENOENT);
        teardown();
}
END_TEST

static Suite *store_suite(void) {
        Suite *s = suite_create("store");
        TCase *tc = tcase_create("caps");

        tcase_add_test(tc, test_accepted_tasks_cap);
        tcase_add_test(tc, test_file_size_cap);
        tcase_add_test(tc, test_history);
        tcase_add_test(tc, test_floor);
        tcase_add_test(tc, test_new_base);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(store_suite)
