/* SPDX-License-Identifier: MIT */
/*
 * common/codec/lowrank.c: the rank of a folded low-rank change is found and its factors
 * predict the target (F32: nearly every element exactly); a change that is not low-rank, no
 * change, and tensors too small or too large give no factors.
 */

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check-main.h"
#include "lowrank.h"

#define ROWS 192
#define COLS 160

static uint64_t rnd_state;
static double gauss(void) {
        /* Box-Muller over a xorshift stream: the same numbers on every machine. */
        double u[2];
        for (int i = 0; i < 2; i++) {
                rnd_state ^= rnd_state << 13;
                rnd_state ^= rnd_state >> 7;
                rnd_state ^= rnd_state << 17;
                u[i] = ((double) (rnd_state >> 11) + 0.5) / 9007199254740992.0;
        }
        return sqrt(-2 * log(u[0])) * cos(6.283185307179586 * u[1]);
}

/* base ~ 0.02·N(0,1); target = float(base + A·B) of @rank (0: a random change instead), in double. */
static void fixture(float *base, float *target, unsigned rank, double rms) {
        static double a[ROWS * 16], b[16 * COLS];
        rnd_state = 88172645463325252u;
        for (size_t i = 0; i < ROWS * COLS; i++)
                base[i] = (float) (0.02 * gauss());
        for (size_t i = 0; i < ROWS * rank; i++)
                a[i] = gauss() * sqrt(rms);
        for (size_t i = 0; i < rank * COLS; i++)
                b[i] = gauss() * sqrt(rms) / sqrt((double) rank);
        for (size_t r = 0; r < ROWS; r++)
                for (size_t c = 0; c < COLS; c++) {
                        double d = 0;
                        for (unsigned k = 0; k < rank; k++)
                                d += a[r * rank + k] * b[k * COLS + c];
                        if (rank == 0)
                                d = rms * gauss();
                        target[r * COLS + c] = (float) ((double) base[r * COLS + c] + d);
                }
}

static const unsigned ranks[] = { 1, 4, 11 };

START_TEST(test_finds_the_rank) {
        static float base[ROWS * COLS], target[ROWS * COLS];
        float *p = NULL, *q = NULL;
        unsigned rank = 0, want = ranks[_i];

        fixture(base, target, want, 0.002);
        ck_assert_int_eq(lowrank_find(base, target, ROWS, COLS, LOWRANK_MAX_RANK, 0x1p-23, &p, &q, &rank), 1);
        ck_assert_uint_eq(rank, want);
        /* The fold's arithmetic with these factors: almost every element is the target's float. */
        size_t exact = 0;
        for (size_t r = 0; r < ROWS; r++)
                for (size_t c = 0; c < COLS; c++) {
                        float acc = 0.0f;
                        for (unsigned k = 0; k < rank; k++) {
                                volatile float prod = p[r * rank + k] * q[k * COLS + c];
                                acc = acc + prod;
                        }
                        float w = base[r * COLS + c] + acc;
                        exact += memcmp(&w, &target[r * COLS + c], sizeof(w)) == 0;
                }
        ck_assert_msg(exact * 10 >= (size_t) ROWS * COLS * 7, "rank %u: %zu of %d elements exact", want, exact,
                      ROWS * COLS);
        free(p);
        free(q);
}
END_TEST

START_TEST(test_none) {
        static float base[ROWS * COLS], target[ROWS * COLS];
        float *p = NULL, *q = NULL;
        unsigned rank = 0;

        fixture(base, target, 0, 0.002);        /* every element moved at random: full rank */
        ck_assert_int_eq(lowrank_find(base, target, ROWS, COLS, LOWRANK_MAX_RANK, 0x1p-23, &p, &q, &rank), 0);
        ck_assert_int_eq(lowrank_find(base, base, ROWS, COLS, LOWRANK_MAX_RANK, 0x1p-23, &p, &q, &rank), 0);
        /* A rank-11 change with at most 4 asked for: none fits. */
        fixture(base, target, 11, 0.002);
        ck_assert_int_eq(lowrank_find(base, target, ROWS, COLS, 4, 0x1p-23, &p, &q, &rank), 0);
        /* Factors as large as the tensor are no gain. */
        ck_assert_int_eq(lowrank_find(base, target, 4, ROWS * COLS / 4, LOWRANK_MAX_RANK, 0x1p-23, &p, &q, &rank), 0);
        ck_assert_int_eq(lowrank_find(base, target, 1u << 20, 1u << 20, 8, 0x1p-23, &p, &q, &rank), -E2BIG);
        ck_assert_ptr_null(p);
        ck_assert_ptr_null(q);
}
END_TEST

static Suite *lowrank_suite(void) {
        Suite *s = suite_create("lowrank");
        TCase *tc = tcase_create("lowrank");

        tcase_set_timeout(tc, 60);
        tcase_add_loop_test(tc, test_finds_the_rank, 0, (int) (sizeof(ranks) / sizeof(ranks[0])));
        tcase_add_test(tc, test_none);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(lowrank_suite)
