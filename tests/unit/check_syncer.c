/* SPDX-License-Identifier: MIT */
/*
 * common/base/syncer.c: fdatasync behind a writer on a worker thread. Requests made while a
 * round is in flight coalesce into the next one; a failed fdatasync is kept and returned by every
 * call after; finishing waits for every round asked for, within a deadline; freeing waits for the
 * round in flight and drops the rest.
 *
 * This binary defines its own fdatasync(), which the library's calls link to: it records each
 * call, can hold calls at a gate (a round "in flight" for as long as a test likes) and fail one fd
 * with EIO (a writeback error, which a real disk will not make on demand).
 */

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "check-main.h"
#include "clock.h"
#include "fileset.h"
#include "syncer.h"

#define MIB (1u << 20)

static struct {
        pthread_mutex_t lock;
        pthread_cond_t changed;
        bool closed;                    /* calls wait at the gate */
        int fail_fd;                    /* this fd fails with EIO */
        unsigned calls, returned;
        int fds[16];                    /* the fds of the first calls, in order */
} fake = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, .fail_fd = -1 };

int fdatasync(int fd) {
        pthread_mutex_lock(&fake.lock);
        if (fake.calls < sizeof(fake.fds) / sizeof(*fake.fds))
                fake.fds[fake.calls] = fd;
        fake.calls++;
        pthread_cond_broadcast(&fake.changed);
        while (fake.closed)
                pthread_cond_wait(&fake.changed, &fake.lock);
        bool fail = fd == fake.fail_fd;
        fake.returned++;
        pthread_cond_broadcast(&fake.changed);
        pthread_mutex_unlock(&fake.lock);
        if (fail) {
                errno = EIO;
                return -1;
        }
        return (int) syscall(SYS_fdatasync, fd);
}

static void gate(bool closed) {
        pthread_mutex_lock(&fake.lock);
        fake.closed = closed;
        pthread_cond_broadcast(&fake.changed);
        pthread_mutex_unlock(&fake.lock);
}

/* Wait until @n calls have begun. */
static void wait_calls(unsigned n) {
        pthread_mutex_lock(&fake.lock);
        while (fake.calls < n)
                pthread_cond_wait(&fake.changed, &fake.lock);
        pthread_mutex_unlock(&fake.lock);
}

static unsigned calls(void) {
        pthread_mutex_lock(&fake.lock);
        unsigned n = fake.calls;
        pthread_mutex_unlock(&fake.lock);
        return n;
}

static unsigned returned(void) {
        pthread_mutex_lock(&fake.lock);
        unsigned n = fake.returned;
        pthread_mutex_unlock(&fake.lock);
        return n;
}

/* The fd of call @i (from 0). */
static int call_fd(unsigned i) {
        pthread_mutex_lock(&fake.lock);
        int fd = fake.fds[i];
        pthread_mutex_unlock(&fake.lock);
        return fd;
}

/* An empty file of our own, unlinked: a real fd for the real fdatasync. */
static int scratch_fd(void) {
        char path[] = "/tmp/check_syncer.XXXXXX";
        int fd = mkostemp(path, O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(unlink(path), 0);
        return fd;
}

/* Each test gets a file of 1 GiB's space on a scratch fd, and a syncer for it. */
static int fd = -1;
static FileSetFile one_file;
static FileSet one;
static Syncer *syncer;

static void setup(void) {
        pthread_mutex_lock(&fake.lock);
        fake.closed = false;            /* (for CK_FORK=no: the fake as the last test left it) */
        fake.fail_fd = -1;
        fake.calls = fake.returned = 0;
        pthread_mutex_unlock(&fake.lock);
        fd = scratch_fd();
        one_file = (FileSetFile) { .path = (char *) "model", .fd = fd, .size = 1ull << 30 };
        one = (FileSet) { .files = &one_file, .n_files = 1, .size = one_file.size };
        ck_assert_int_eq(syncer_new(&one, &syncer), 0);
}

static void teardown(void) {
        syncer = syncer_free(syncer);
        close(fd);
}

/* Less than a piece behind: nothing to do, and finishing does not wait. */
START_TEST(test_below_a_piece) {
        ck_assert_int_eq(syncer_behind(syncer, SYNCER_PIECE - 1), 0);
        ck_assert_int_eq(syncer_finish(syncer, 0), 0);
        ck_assert_uint_eq(calls(), 0);
        /* A piece: one round, done by the time finishing returns 0. */
        ck_assert_int_eq(syncer_behind(syncer, SYNCER_PIECE), 0);
        ck_assert_int_eq(syncer_finish(syncer, 0), 0);
        ck_assert_uint_eq(returned(), 1);
        ck_assert_int_eq(call_fd(0), fd);
}
END_TEST

/* syncer_ask(): any position past the last one asked for is a round; the same or an earlier one is not. */
START_TEST(test_ask) {
        ck_assert_int_eq(syncer_ask(syncer, 1), 0);
        ck_assert_int_eq(syncer_finish(syncer, 0), 0);
        ck_assert_uint_eq(returned(), 1);
        ck_assert_int_eq(syncer_ask(syncer, 1), 0);
        ck_assert_int_eq(syncer_ask(syncer, 0), 0);
        ck_assert_int_eq(syncer_finish(syncer, 0), 0);
        ck_assert_uint_eq(calls(), 1);
        ck_assert_int_eq(syncer_ask(syncer, 4096), 0);
        ck_assert_int_eq(syncer_finish(syncer, 0), 0);
        ck_assert_uint_eq(returned(), 2);
        /* Then syncer_behind() counts its piece from there. */
        ck_assert_int_eq(syncer_behind(syncer, SYNCER_PIECE), 0);
        ck_assert_int_eq(syncer_finish(syncer, 0), 0);
        ck_assert_uint_eq(calls(), 2);
        ck_assert_int_eq(syncer_behind(syncer, SYNCER_PIECE + 4096), 0);
        ck_assert_int_eq(syncer_finish(syncer, 0), 0);
        ck_assert_uint_eq(returned(), 3);
}
END_TEST

/* syncer_end(): 1 while a round runs past the deadline, the worker kept; 0 once done, the worker stopped. */
START_TEST(test_end) {
        Syncer *none = NULL;
        ck_assert_int_eq(syncer_end(&none, 0), 0);
        gate(true);
        ck_assert_int_eq(syncer_ask(syncer, 1), 0);
        wait_calls(1);
        ck_assert_int_eq(syncer_end(&syncer, clock_mono_ns() + 1000000u), 1);
        ck_assert_ptr_nonnull(syncer);
        gate(false);
        ck_assert_int_eq(syncer_end(&syncer, 0), 0);
        ck_assert_ptr_null(syncer);
        ck_assert_uint_eq(returned(), 1);
}
END_TEST

/* Requests while a round is in flight are not queued: the next round covers them all. */
START_TEST(test_coalescing) {
        gate(true);
        ck_assert_int_eq(syncer_behind(syncer, SYNCER_PIECE), 0);
        wait_calls(1);
        for (uint64_t pos = 2 * (uint64_t) SYNCER_PIECE; pos <= 5 * (uint64_t) SYNCER_PIECE; pos += SYNCER_PIECE)
                ck_assert_int_eq(syncer_behind(syncer, pos), 0);     /* never waits */
        /* Not done by a deadline: 1, call again. */
        uint64_t t0 = clock_mono_ns();
        ck_assert_int_eq(syncer_finish(syncer, t0 + 20 * 1000000u), 1);
        ck_assert_uint_ge(clock_mono_ns() - t0, 20 * 1000000u);
        ck_assert_uint_eq(returned(), 0);
        gate(false);
        ck_assert_int_eq(syncer_finish(syncer, 0), 0);
        ck_assert_uint_eq(calls(), 2);  /* [0, 1 piece), then [1 piece, 5 pieces) at once */
        ck_assert_uint_eq(returned(), 2);
}
END_TEST

/* A set of several files: a round syncs the files holding its range, and only those. */
START_TEST(test_files_of_a_range) {
        FileSet set = FILESET_NULL;
        Syncer *s = NULL;

        ck_assert_int_eq(fileset_add(&set, "a", 16 * MIB), 0);  /* [0, 16 MiB) */
        ck_assert_int_eq(fileset_add(&set, "b", 32 * MIB), 0);  /* [16, 48) */
        ck_assert_int_eq(fileset_add(&set, "c", 0), 0);         /* at 48 */
        ck_assert_int_eq(fileset_add(&set, "d", 32 * MIB), 0);  /* [48, 80) */
        for (size_t i = 0; i < set.n_files; i++)
                set.files[i].fd = scratch_fd();
        int a = set.files[0].fd, b = set.files[1].fd, c = set.files[2].fd, d = set.files[3].fd;

        ck_assert_int_eq(syncer_new(&set, &s), 0);
        ck_assert_int_eq(syncer_behind(s, 32 * MIB), 0);
        ck_assert_int_eq(syncer_finish(s, 0), 0);
        ck_assert_int_eq(syncer_behind(s, 64 * MIB), 0);
        ck_assert_int_eq(syncer_finish(s, 0), 0);
        ck_assert_int_eq(syncer_behind(s, 80 * MIB), 0);        /* half a piece past: nothing */
        ck_assert_int_eq(syncer_finish(s, 0), 0);
        ck_assert_uint_eq(calls(), 5);
        ck_assert_int_eq(call_fd(0), a);
        ck_assert_int_eq(call_fd(1), b);
        ck_assert_int_eq(call_fd(2), b);        /* [32, 64): b's end, the empty c, d's start */
        ck_assert_int_eq(call_fd(3), c);
        ck_assert_int_eq(call_fd(4), d);
        syncer_free(s);
        for (size_t i = 0; i < set.n_files; i++)
                close(set.files[i].fd);
        set.owns_fds = false;
        fileset_done(&set);
}
END_TEST

/* A failed fdatasync is kept: the next calls return it, and no round runs after it. */
START_TEST(test_error_kept) {
        fake.fail_fd = fd;
        ck_assert_int_eq(syncer_behind(syncer, SYNCER_PIECE), 0);    /* asked; it fails on the worker */
        ck_assert_int_eq(syncer_finish(syncer, 0), -EIO);
        ck_assert_int_eq(syncer_behind(syncer, 2 * (uint64_t) SYNCER_PIECE), -EIO);
        ck_assert_int_eq(syncer_behind(syncer, 4 * (uint64_t) SYNCER_PIECE), -EIO);
        ck_assert_int_eq(syncer_finish(syncer, clock_mono_ns() + 1000000u), -EIO);
        ck_assert_uint_eq(calls(), 1);
}
END_TEST

/* An error that comes while the caller writes on is returned by its next request. */
START_TEST(test_error_on_next_request) {
        fake.fail_fd = fd;
        gate(true);
        ck_assert_int_eq(syncer_behind(syncer, SYNCER_PIECE), 0);
        wait_calls(1);
        gate(false);
        while (returned() < 1)
                usleep(1000);
        /* The worker records the error just after the call returns: the next requests see it. */
        int r = 0;
        for (unsigned i = 0; i < 1000 && r == 0; i++) {
                r = syncer_behind(syncer, SYNCER_PIECE + i);
                if (r == 0)
                        usleep(1000);
        }
        ck_assert_int_eq(r, -EIO);
}
END_TEST

static void *open_gate_later(void *arg) {
        (void) arg;
        usleep(50 * 1000);
        gate(false);
        return NULL;
}

/* Freeing with a round in flight waits for it (the fd stays the caller's to close after) and drops the next. */
START_TEST(test_free_in_flight) {
        pthread_t opener;

        gate(true);
        ck_assert_int_eq(syncer_behind(syncer, SYNCER_PIECE), 0);
        wait_calls(1);
        ck_assert_int_eq(syncer_behind(syncer, 3 * (uint64_t) SYNCER_PIECE), 0);     /* the next round, asked for */
        ck_assert_int_eq(pthread_create(&opener, NULL, open_gate_later, NULL), 0);
        syncer = syncer_free(syncer);
        ck_assert_uint_eq(returned(), 1);       /* the call in flight returned before the free did */
        ck_assert_uint_eq(calls(), 1);          /* and the round asked for after it never ran */
        pthread_join(opener, NULL);

        /* Freed idle, freed at once; NULL-safe. */
        ck_assert_int_eq(syncer_new(&one, &syncer), 0);
        syncer = syncer_free(syncer);
        ck_assert_ptr_null(syncer_free(NULL));
}
END_TEST

static Suite *syncer_suite(void) {
        Suite *s = suite_create("syncer");
        TCase *tc = tcase_create("syncer");

        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_below_a_piece);
        tcase_add_test(tc, test_ask);
        tcase_add_test(tc, test_end);
        tcase_add_test(tc, test_coalescing);
        tcase_add_test(tc, test_files_of_a_range);
        tcase_add_test(tc, test_error_kept);
        tcase_add_test(tc, test_error_on_next_request);
        tcase_add_test(tc, test_free_in_flight);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(syncer_suite)
