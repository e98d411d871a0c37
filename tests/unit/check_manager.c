/* SPDX-License-Identifier: MIT */
/*
 * daemon/taskpatchd-machine.c: the update state machine's table, driven
 * through a fake host (no sockets, no files). The expected table is
 * written out here independently, as a matrix: every (state, event) pair
 * is checked, those the daemon may take and those it must refuse.
 */

#include <check.h>
#include <signal.h>
#include <string.h>

#include "check-main.h"
#include "taskpatchd-machine.h"

#define X _STATE_INVALID
#define UNP STATE_UNPROVISIONED
#define PRO STATE_PROVISIONING
#define IDL STATE_IDLE
#define INS STATE_INSTALLING
#define STG STATE_STAGING
#define TRI STATE_TRIAL
#define TIN STATE_TRIAL_INSTALLING

/* expected[state][event]: the next state, or X (refused). */
static const ManagerState expected[_STATE_MAX][_EVENT_MAX] = {
        /*            provision install switch trial done failed lost commit rollback repair */
        [UNP] = { PRO, X, X, X, X, X, X, X, X, X },
        [PRO] = { X, X, X, X, IDL, IDL, UNP, X, X, X },
        [IDL] = { PRO, INS, STG, X, X, X, X, X, X, IDL },
        [INS] = { X, X, STG, X, IDL, IDL, X, X, X, X },
        [STG] = { X, X, X, TRI, IDL, IDL, X, X, X, X },
        [TRI] = { X, TIN, X, X, X, X, X, IDL, IDL, X },
        [TIN] = { X, X, X, X, TRI, TRI, X, INS, INS, X },
};

START_TEST(test_matrix) {
        unsigned allowed = 0;

        for (ManagerState s = 0; s < _STATE_MAX; s++)
                for (ManagerEvent e = 0; e < _EVENT_MAX; e++) {
                        ManagerState got = machine_next(s, e);
                        ck_assert_msg(got == expected[s][e], "%s on %s: got %s, expected %s",
                                      manager_state_to_string(s), manager_event_to_string(e),
                                      got < 0 ? "refused" : manager_state_to_string(got),
                                      expected[s][e] < 0 ? "refused" : manager_state_to_string(expected[s][e]));
                        allowed += got >= 0;
                }
        /* The table has no duplicate rows: each allowed pair is one row. */
        ck_assert_uint_eq(allowed, machine_transitions());
}
END_TEST

START_TEST(test_names) {
        for (ManagerState s = 0; s < _STATE_MAX; s++) {
                const char *n = manager_state_to_string(s);
                ck_assert_ptr_nonnull(n);
                ck_assert_int_eq(manager_state_from_string(n), s);
        }
        for (ManagerEvent e = 0; e < _EVENT_MAX; e++)
                ck_assert_ptr_nonnull(manager_event_to_string(e));
        ck_assert_ptr_null(manager_state_to_string(_STATE_MAX));
        ck_assert_ptr_null(manager_state_to_string(_STATE_INVALID));
        ck_assert_int_eq(manager_state_from_string("rolling-back"), _STATE_INVALID);
        ck_assert_int_eq(manager_state_from_string(NULL), _STATE_INVALID);
        /* What the status shows: "trial" and "trial-installing" are the states on trial, and only they. */
        for (ManagerState s = 0; s < _STATE_MAX; s++)
                ck_assert(manager_state_on_trial(s) == (s == TRI || s == TIN));
        for (ManagerState s = 0; s < _STATE_MAX; s++)
                ck_assert(manager_state_busy(s) == (s == PRO || s == INS || s == STG || s == TIN));
}
END_TEST

/* ---- the fake host: records every change it is told ---- */

typedef struct Change {
        ManagerState from, to;
        ManagerEvent event;
} Change;

typedef struct FakeHost {
        Change changes[32];
        unsigned n;
} FakeHost;

static void fake_changed(void *userdata, ManagerState from, ManagerEvent e, ManagerState to) {
        FakeHost *h = userdata;
        ck_assert_uint_lt(h->n, 32);
        h->changes[h->n++] = (Change) { from, to, e };
}

static const MachineHost fake = { .changed = fake_changed };

/* Run @events from @start; every one must be allowed; the host must see each change in order. */
static ManagerState run(ManagerState start, const ManagerEvent *events, unsigned n) {
        FakeHost h = {};
        Machine mc;

        machine_init(&mc, start, &fake, &h);
        for (unsigned i = 0; i < n; i++) {
                ManagerState before = mc.state;
                ck_assert_msg(machine_can(&mc, events[i]), "%s on %s", manager_state_to_string(before),
                              manager_event_to_string(events[i]));
                ck_assert_int_eq(machine_fire(&mc, events[i]), 0);
                ck_assert_uint_eq(h.n, i + 1);
                ck_assert_int_eq(h.changes[i].from, before);
                ck_assert_int_eq(h.changes[i].event, events[i]);
                ck_assert_int_eq(h.changes[i].to, mc.state);
        }
        return mc.state;
}

START_TEST(test_paths) {
        /* Provision, install, switch, commit. */
        static const ManagerEvent happy[] = { EVENT_PROVISION, EVENT_DONE, EVENT_INSTALL, EVENT_DONE,
                                              EVENT_SWITCH, EVENT_TRIAL, EVENT_COMMIT };
        ck_assert_int_eq(run(UNP, happy, 7), IDL);
        /* Found from outside: an install during a trial keeps the trial; mark-good then commits it. */
        static const ManagerEvent install_in_trial[] = { EVENT_SWITCH, EVENT_TRIAL, EVENT_INSTALL, EVENT_DONE,
                                                         EVENT_COMMIT };
        ck_assert_int_eq(run(IDL, install_in_trial, 5), IDL);
        /* The trial ends while the install runs: the install goes on, then idle. */
        static const ManagerEvent commit_mid_install[] = { EVENT_SWITCH, EVENT_TRIAL, EVENT_INSTALL, EVENT_COMMIT,
                                                           EVENT_DONE };
        ck_assert_int_eq(run(IDL, commit_mid_install, 5), IDL);
        static const ManagerEvent rollback_mid_install[] = { EVENT_SWITCH, EVENT_TRIAL, EVENT_INSTALL,
                                                             EVENT_ROLLBACK, EVENT_FAILED };
        ck_assert_int_eq(run(IDL, rollback_mid_install, 5), IDL);
        /* install --switch; a failed staging leaves what was active. */
        static const ManagerEvent install_switch[] = { EVENT_INSTALL, EVENT_SWITCH, EVENT_FAILED };
        ck_assert_int_eq(run(IDL, install_switch, 3), IDL);
        /* A provisioning that gave up the old base and failed. */
        static const ManagerEvent lost[] = { EVENT_PROVISION, EVENT_LOST };
        ck_assert_int_eq(run(IDL, lost, 2), UNP);
        /* A damaged active slot replaced: a self-transition the host is told of. */
        static const ManagerEvent repair[] = { EVENT_REPAIR };
        ck_assert_int_eq(run(IDL, repair, 1), IDL);
}
END_TEST

/* A transition the table lacks: the daemon aborts in debug and test builds (release builds: -EPROTO). */
START_TEST(test_refused_switch_in_trial) {
        FakeHost h = {};
        Machine mc;

        machine_init(&mc, TRI, &fake, &h);
        ck_assert(!machine_can(&mc, EVENT_SWITCH));
        ck_assert_int_eq(machine_fire(&mc, EVENT_SWITCH), -EPROTO);
        ck_assert_int_eq(mc.state, TRI);
        ck_assert_uint_eq(h.n, 0);
}
END_TEST

START_TEST(test_refused_commit_idle) {
        Machine mc;

        machine_init(&mc, IDL, NULL, NULL);
        ck_assert(!machine_can(&mc, EVENT_COMMIT));
        ck_assert_int_eq(machine_fire(&mc, EVENT_COMMIT), -EPROTO);
        ck_assert_int_eq(mc.state, IDL);
}
END_TEST

START_TEST(test_refused_unchanged) {
        /* What can() refuses never reaches the host: checked without firing. */
        FakeHost h = {};
        Machine mc;

        machine_init(&mc, TIN, &fake, &h);
        for (ManagerEvent e = 0; e < _EVENT_MAX; e++)
                if (!machine_can(&mc, e))
                        ck_assert_int_eq(expected[TIN][e], X);
        ck_assert_uint_eq(h.n, 0);
        ck_assert_int_eq(mc.state, TIN);
}
END_TEST

static Suite *manager_suite(void) {
        Suite *s = suite_create("manager");
        TCase *tc = tcase_create("table");

        tcase_add_test(tc, test_matrix);
        tcase_add_test(tc, test_names);
        tcase_add_test(tc, test_paths);
        tcase_add_test(tc, test_refused_unchanged);
#ifdef NDEBUG
        tcase_add_test(tc, test_refused_switch_in_trial);
        tcase_add_test(tc, test_refused_commit_idle);
#else
        tcase_add_test_raise_signal(tc, test_refused_switch_in_trial, SIGABRT);
        tcase_add_test_raise_signal(tc, test_refused_commit_idle, SIGABRT);
#endif
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(manager_suite)
