/* SPDX-License-Identifier: MIT */
#pragma once

/* What the delta tests share (check_delta.c, check_delta_i8ac.c): a deterministic generator, round trips. */

#include <check.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "delta.h"

/* splitmix64: deterministic on every platform, unlike rand(). */
static uint64_t rng_state;

static inline uint64_t rng(void) {
        uint64_t z = (rng_state += UINT64_C(0x9e3779b97f4a7c15));
        z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
        return z ^ (z >> 31);
}

static inline void fill_random(uint8_t *p, size_t len) {
        for (size_t i = 0; i < len; i++)
                p[i] = (uint8_t) rng();
}

static inline double gauss(void) {
        double u = ((double) (rng() >> 11) + 0.5) / 9007199254740992.0, v = (double) (rng() >> 11) / 9007199254740992.0;
        return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}

static inline size_t zstd_size(const uint8_t *p, size_t len) {
        size_t cap = ZSTD_compressBound(len), r;
        void *buf = malloc(cap);

        ck_assert_ptr_nonnull(buf);
        r = ZSTD_compress(buf, cap, p, len, 19);
        ck_assert(!ZSTD_isError(r));
        free(buf);
        return r;
}

/* Every layout but i8ac and i8acp maps a group onto every byte string of its length (delta.h). */
static inline bool bijective(DeltaLayout l) {
        return l != DELTA_I8AC && l != DELTA_I8ACP;
}

static inline void check_round_trip(DeltaLayout l, const uint8_t *base, const uint8_t *target, size_t len, const char *what) {
        uint8_t *delta = malloc(len + 16), *back = malloc(len + 16);

        ck_assert_ptr_nonnull(delta);
        ck_assert_ptr_nonnull(back);
        /* Canaries: neither side writes past len. */
        memset(delta + len, 0xa5, 16);
        memset(back + len, 0x5a, 16);
        if (delta_encode(l, base, target, len, delta)) {
                delta_decode(l, base, delta, len, back);
                ck_assert_msg(memcmp(back, target, len) == 0, "%s, %s, %zu bytes: decode(encode(x)) != x",
                              delta_layout_to_string(l), what, len);
        } else {
                ck_assert_msg(!bijective(l), "%s, %s: a bijective layout did not fit", delta_layout_to_string(l),
                              what);
        }
        for (size_t i = 0; i < 16; i++) {
                ck_assert_uint_eq(delta[len + i], 0xa5);
                ck_assert_uint_eq(back[len + i], 0x5a);
        }
        free(delta);
        free(back);
}
