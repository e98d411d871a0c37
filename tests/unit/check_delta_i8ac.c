/* SPDX-License-Identifier: MIT */
/* The range-coded byte layouts (delta.h: i8ac, i8acp): what they gain, their rules, hostile groups. */

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check-main.h"
#include "delta-test.h"
#include "sha256.h"

/*
 * i8ac against i8, both through zstd -19, on what a per-channel requantization leaves: a third of
 * the values moved by a step, at random, as many in some channels as in others. zstd's Huffman
 * stage spends whole bits on each byte of four values; the range coder must do clearly better. Random targets do not fit and say so.
 */
START_TEST(test_i8ac_requantized) {
        size_t len = delta_group_bytes(DELTA_I8AC);
        uint8_t *base = malloc(len), *target = malloc(len), *planes = malloc(len), *coded = malloc(len);

        rng_state = 11000;
        /* Channels of 1152 values, each with its own noise (0.1 to 0.4 steps). */
        double sigma = 0;
        for (size_t i = 0; i < len; i++) {
                if (i % 1152 == 0)
                        sigma = 0.1 + 0.3 * (double) (rng() % 1024) / 1024.0;
                double x = 30 * gauss(), y = x + sigma * gauss();
                base[i] = (uint8_t) (int8_t) fmax(-127, fmin(127, nearbyint(x)));
                target[i] = (uint8_t) (int8_t) fmax(-127, fmin(127, nearbyint(y)));
        }
        delta_encode(DELTA_I8, base, target, len, planes);
        ck_assert(delta_encode(DELTA_I8AC, base, target, len, coded));
        check_round_trip(DELTA_I8AC, base, target, len, "requantized");
        size_t zi8 = zstd_size(planes, len), zac = zstd_size(coded, len);
        ck_assert_msg(zac * 100 < zi8 * 97, "i8ac %zu bytes, i8 %zu", zac, zi8);

        fill_random(target, len);
        ck_assert(!delta_encode(DELTA_I8AC, base, target, len, coded));
        free(base);
        free(target);
        free(planes);
        free(coded);
}
END_TEST

#define I8ACP_RULE_GOLDEN "ffd1fa1f35f4fb659dd0e99a645c7dd9bcf503787c2445207688f55ef8d548f1"

/* A float32 into @p, little-endian. */
static void put_float(uint8_t *p, float f) {
        uint32_t bits;

        memcpy(&bits, &f, sizeof(bits));
        for (int k = 0; k < 4; k++)
                p[k] = (uint8_t) (bits >> 8 * k);
}

/*
 * i8acp: a group of int8 values holding two float32 runs at odd offsets, the second the first
 * times a constant (as an ONNX bias scale is the input scale times the weight's), both changed
 * by a fine-tune. Told where the floats are, the encoder finds the rule and the second run costs
 * next to nothing; untold, it codes as i8ac. A NaN and an infinity among the sources round-trip
 * (a NaN product predicts the base bytes).
 */
START_TEST(test_i8acp_rules) {
        size_t len = delta_group_bytes(DELTA_I8ACP);
        uint8_t *base = malloc(len), *target = malloc(len), *coded = malloc(len), *plain = malloc(len);
        DeltaFloatRun runs[] = { { 1001, 128 }, { 3003, 128 }, { 5001, 7 } };
        const float c = 0.0123f;

        rng_state = 12000;
        for (size_t i = 0; i < len; i++) {
                base[i] = (uint8_t) (int8_t) (30 * gauss());
                target[i] = (uint8_t) (base[i] + (rng() % 3 == 0 ? (rng() % 3) - 1 : 0));
        }
        for (uint32_t k = 0; k < 128; k++) {
                float wb = (float) (0.001 + 0.01 * (double) (rng() % 1000) / 1000.0);
                float wt = wb * (float) (1.0 + 0.01 * gauss());
                if (k == 5)
                        wt = NAN;
                if (k == 6)
                        wt = INFINITY;
                put_float(base + 1001 + 4 * k, wb);
                put_float(target + 1001 + 4 * k, wt);
                put_float(base + 3003 + 4 * k, wb * c);
                put_float(target + 3003 + 4 * k, k == 5 ? 1.5f : wt * c);
        }
        ck_assert(delta_encode_floats(DELTA_I8ACP, base, target, len, runs, ELEMENTSOF(runs), coded));
        ck_assert_uint_eq(coded[4], 1);                         /* one rule: 3003 from 1001 */
        check_round_trip(DELTA_I8ACP, base, target, len, "no rules");
        uint8_t *back = malloc(len);
        delta_decode(DELTA_I8ACP, base, coded, len, back);
        ck_assert(memcmp(back, target, len) == 0);
        ck_assert(delta_encode(DELTA_I8ACP, base, target, len, plain));
        ck_assert_uint_eq(plain[4], 0);
        size_t with = 5 + 16 + (coded[0] | (size_t) coded[1] << 8), without = 5 + (plain[0] | (size_t) plain[1] << 8);
        ck_assert_msg(with + 300 < without, "with the rule %zu bytes, without %zu", with, without);

        /* Pinned: the rule's wire format (delta.h). Never update; add a layout instead. */
        uint8_t digest[SHA256_DIGEST_SIZE];
        char hex[SHA256_HEX_SIZE];
        sha256_digest(coded, len, digest);
        sha256_to_hex(digest, hex);
        ck_assert_msg(strcmp(hex, I8ACP_RULE_GOLDEN) == 0, "i8acp: wire format changed: %s", hex);
        free(base);
        free(target);
        free(coded);
        free(plain);
        free(back);
}
END_TEST

/*
 * i8acp groups whose rules are not a valid list decode to their base bytes (the span's digest
 * then refuses them), never reading or writing outside the group.
 */
START_TEST(test_i8acp_bad_rules) {
        enum { LEN = 256 };
        static const uint32_t bad[][4] = {
                { 64, 0, 0, 0x3f800000 },       /* no floats */
                { 64, 4, 60, 0x3f800000 },      /* source overlaps the destination */
                { 64, 4, 64, 0x3f800000 },      /* source is the destination */
                { 250, 4, 0, 0x3f800000 },      /* past the group */
                { 0xfffffff0u, 8, 0, 0x3f800000 },     /* offsets that wrap */
                { 64, 0x40000001u, 0, 0x3f800000 },    /* a count that wraps */
        };
        uint8_t base[LEN], delta[LEN], out[LEN];

        for (size_t i = 0; i < LEN; i++)
                base[i] = (uint8_t) (i * 7);
        for (size_t b = 0; b < ELEMENTSOF(bad); b++) {
                memset(delta, 0x33, sizeof(delta));
                delta[4] = 1;
                for (int w = 0; w < 4; w++)
                        for (int k = 0; k < 4; k++)
                                delta[5 + 4 * w + k] = (uint8_t) (bad[b][w] >> 8 * k);
                delta_decode(DELTA_I8ACP, base, delta, LEN, out);
                ck_assert_msg(memcmp(out, base, LEN) == 0, "bad rule %zu decoded", b);
        }
        /* Too many rules, and rules out of order. */
        memset(delta, 0, sizeof(delta));
        delta[4] = DELTA_I8ACP_RULES_MAX + 1;
        delta_decode(DELTA_I8ACP, base, delta, LEN, out);
        ck_assert(memcmp(out, base, LEN) == 0);
        memset(delta, 0, sizeof(delta));
        delta[4] = 2;
        uint32_t two[2][4] = { { 128, 4, 0, 0x3f800000 }, { 100, 4, 0, 0x3f800000 } };
        for (int r = 0; r < 2; r++)
                for (int w = 0; w < 4; w++)
                        for (int k = 0; k < 4; k++)
                                delta[5 + 16 * r + 4 * w + k] = (uint8_t) (two[r][w] >> 8 * k);
        delta_decode(DELTA_I8ACP, base, delta, LEN, out);
        ck_assert(memcmp(out, base, LEN) == 0);
}
END_TEST

static Suite *delta_i8ac_suite(void) {
        Suite *s = suite_create("delta_i8ac");
        TCase *tc = tcase_create("i8ac");

        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_i8ac_requantized);
        tcase_add_test(tc, test_i8acp_rules);
        tcase_add_test(tc, test_i8acp_bad_rules);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(delta_i8ac_suite)
