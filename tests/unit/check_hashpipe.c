/* SPDX-License-Identifier: MIT */
/* common/base/hashpipe.c: hashing on a worker thread gives the same digests as hashing inline. */

#include <check.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include "check-main.h"
#include "hashpipe.h"

START_TEST(test_same_digests) {
        enum { CHUNK = 4096 + 7, ROUNDS = 200 };
        static uint8_t slots[HASH_PIPE_SLOTS][CHUNK];
        HashPipe *p = NULL;
        Sha256 a, b, c, ra, rb, rc;
        uint8_t d1[32], d2[32];

        ck_assert_int_eq(hash_pipe_new(&p), 0);
        sha256_init(&a), sha256_init(&b), sha256_init(&c);
        sha256_init(&ra), sha256_init(&rb), sha256_init(&rc);
        srand(5);
        for (int i = 0; i < ROUNDS; i++) {
                unsigned s = hash_pipe_slot(p);
                size_t n = (size_t) rand() % CHUNK;
                /* Refill the slot only now: the pipe guarantees no queued job still reads it. */
                for (size_t k = 0; k < n; k++)
                        slots[s][k] = (uint8_t) rand();
                hash_pipe_feed(p, s, &a, &b, slots[s], n);      /* one message into two states */
                hash_pipe_feed(p, s, &c, NULL, slots[s], n / 2);
                sha256_update(&ra, slots[s], n);
                sha256_update(&rb, slots[s], n);
                sha256_update(&rc, slots[s], n / 2);
        }
        hash_pipe_sync(p);
        sha256_final(&a, d1);
        sha256_final(&ra, d2);
        ck_assert_mem_eq(d1, d2, 32);
        sha256_final(&b, d1);
        sha256_final(&rb, d2);
        ck_assert_mem_eq(d1, d2, 32);
        sha256_final(&c, d1);
        sha256_final(&rc, d2);
        ck_assert_mem_eq(d1, d2, 32);
        hash_pipe_free(p);
}
END_TEST

/* Freeing with work queued drains it first (the states stay valid). */
START_TEST(test_free_drains) {
        static uint8_t buf[1 << 16];
        HashPipe *p = NULL;
        Sha256 a, r;
        uint8_t d1[32], d2[32];

        memset(buf, 0x5a, sizeof(buf));
        sha256_init(&a);
        sha256_init(&r);
        ck_assert_int_eq(hash_pipe_new(&p), 0);
        for (int i = 0; i < 3; i++) {
                unsigned s = hash_pipe_slot(p);
                hash_pipe_feed(p, s, &a, NULL, buf, sizeof(buf));
                sha256_update(&r, buf, sizeof(buf));
        }
        hash_pipe_free(p);
        sha256_final(&a, d1);
        sha256_final(&r, d2);
        ck_assert_mem_eq(d1, d2, 32);
}
END_TEST

/* The pipe's states and their inline references start empty. */
static void states_init(Sha256 *st, Sha256 *ref, int n) {
        for (int k = 0; k < n; k++) {
                sha256_init(&st[k]);
                sha256_init(&ref[k]);
        }
}

/* Drains and frees the pipe, then each state must hold its reference's digest. */
static void states_check(HashPipe *p, Sha256 *st, Sha256 *ref, int n) {
        uint8_t d1[32], d2[32];

        hash_pipe_sync(p);
        for (int k = 0; k < n; k++) {
                sha256_final(&st[k], d1);
                sha256_final(&ref[k], d2);
                ck_assert_mem_eq(d1, d2, 32);
        }
        hash_pipe_free(p);
}

/*
 * Jobs on random pairs of five states, the caller refilling slots as fast as the pipe hands
 * them out: whichever thread runs a job (the caller takes one while it would wait), each
 * state sees its bytes in feeding order.
 */
START_TEST(test_order_per_state) {
        enum { CHUNK = 3000, ROUNDS = 2000, STATES = 5 };
        static uint8_t slots[HASH_PIPE_SLOTS][CHUNK];
        Sha256 st[STATES], ref[STATES];
        HashPipe *p = NULL;

        ck_assert_int_eq(hash_pipe_new(&p), 0);
        states_init(st, ref, STATES);
        srand(11);
        for (int i = 0; i < ROUNDS; i++) {
                unsigned s = hash_pipe_slot(p);
                size_t n = 1 + (size_t) rand() % CHUNK;
                for (size_t k = 0; k < n; k++)
                        slots[s][k] = (uint8_t) rand();
                for (int jobs = 1 + rand() % 2; jobs > 0; jobs--) {
                        int a = rand() % STATES, b = rand() % (STATES + 1);    /* STATES: no second state */
                        if (b == a)
                                b = STATES;
                        size_t len = (size_t) rand() % (n + 1);
                        hash_pipe_feed(p, s, &st[a], b < STATES ? &st[b] : NULL, slots[s], len);
                        sha256_update(&ref[a], slots[s], len);
                        if (b < STATES)
                                sha256_update(&ref[b], slots[s], len);
                }
        }
        states_check(p, st, ref, STATES);
}
END_TEST

/*
 * hash_pipe_call(): a call queued on a state runs after the bytes fed to it before (it sees the
 * state's length at that point) and before those fed after, which may hash the buffer it filled.
 */
typedef struct Fill {
        uint8_t *buf;
        size_t n;
        uint32_t seed;
        Sha256 *state;
        uint64_t length_seen;
} Fill;

static void fill_pattern(uint8_t *buf, size_t n, uint32_t seed) {
        for (size_t k = 0; k < n; k++) {
                seed = seed * 1103515245u + 12345u;
                buf[k] = (uint8_t) (seed >> 16);
        }
}

static void fill_job(void *arg) {
        Fill *f = arg;
        f->length_seen = f->state->length;
        fill_pattern(f->buf, f->n, f->seed);
}

START_TEST(test_call_in_order) {
        enum { CHUNK = 3000, ROUNDS = 2000, STATES = 3 };
        static uint8_t slots[HASH_PIPE_SLOTS][CHUNK], mine[CHUNK];
        static Fill fills[HASH_PIPE_SLOTS];
        uint64_t want_seen[HASH_PIPE_SLOTS] = { 0 }, fed[STATES] = { 0 };
        Sha256 st[STATES], ref[STATES];
        HashPipe *p = NULL;

        ck_assert_int_eq(hash_pipe_new(&p), 0);
        states_init(st, ref, STATES);
        srand(29);
        for (int i = 0; i < ROUNDS; i++) {
                unsigned s = hash_pipe_slot(p);
                if (i >= HASH_PIPE_SLOTS)       /* the slot's previous call has run: what did it see? */
                        ck_assert_uint_eq(fills[s].length_seen, want_seen[s]);
                int a = rand() % STATES;
                size_t n = 1 + (size_t) rand() % CHUNK;
                fills[s] = (Fill) { slots[s], n, (uint32_t) rand(), &st[a], 0 };
                want_seen[s] = fed[a];
                hash_pipe_call(p, s, &st[a], NULL, fill_job, &fills[s]);
                hash_pipe_feed(p, s, &st[a], NULL, slots[s], n);
                fill_pattern(mine, n, fills[s].seed);
                sha256_update(&ref[a], mine, n);
                fed[a] += n;
        }
        states_check(p, st, ref, STATES);
}
END_TEST

/*
 * Two single-state feeds on different states, queued while the worker is held in a call: whichever
 * thread takes the first takes the second with it, as one two-state hash, and both digests come
 * out right.
 */
typedef struct Gate {
        pthread_mutex_t lock;
        pthread_cond_t open_cond;
        bool open;
} Gate;

static void gate_job(void *arg) {
        Gate *g = arg;

        pthread_mutex_lock(&g->lock);
        while (!g->open)
                pthread_cond_wait(&g->open_cond, &g->lock);
        pthread_mutex_unlock(&g->lock);
}

START_TEST(test_pairs) {
        static uint8_t slots[HASH_PIPE_SLOTS][5000];
        Gate gate = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false };
        Sha256 st[3], ref[3];
        HashPipe *p = NULL;

        ck_assert_int_eq(hash_pipe_new(&p), 0);
        states_init(st, ref, 3);
        unsigned s0 = hash_pipe_slot(p), s1 = hash_pipe_slot(p), s2 = hash_pipe_slot(p);
        fill_pattern(slots[s1], 5000, 3);
        fill_pattern(slots[s2], 4000, 4);
        hash_pipe_call(p, s0, &st[0], NULL, gate_job, &gate);
        hash_pipe_feed(p, s1, &st[1], NULL, slots[s1], 5000);      /* lengths differ: the longer one's tail */
        hash_pipe_feed(p, s2, &st[2], NULL, slots[s2], 4000);      /* ends on its own */
        sha256_update(&ref[1], slots[s1], 5000);
        sha256_update(&ref[2], slots[s2], 4000);
        pthread_mutex_lock(&gate.lock);
        gate.open = true;
        pthread_cond_signal(&gate.open_cond);
        pthread_mutex_unlock(&gate.lock);
        hash_pipe_sync(p);
        ck_assert_uint_eq(hash_pipe_pairs(p), 1);
        states_check(p, st, ref, 3);
}
END_TEST

static Suite *hashpipe_suite(void) {
        Suite *s = suite_create("hashpipe");
        TCase *tc = tcase_create("pipe");

        tcase_add_test(tc, test_same_digests);
        tcase_add_test(tc, test_free_drains);
        tcase_add_test(tc, test_order_per_state);
        tcase_add_test(tc, test_call_in_order);
        tcase_add_test(tc, test_pairs);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(hashpipe_suite)
