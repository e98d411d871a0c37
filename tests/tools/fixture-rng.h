/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The fixtures' deterministic randomness (gguf-fixture.c): splitmix64 seeding, xoshiro256**,
 * Box–Muller. One independent stream per (seed, purpose, tensor name), so tensors can be made
 * in any order and the same arguments always give the same bytes.
 */

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct Rng {
        uint64_t s[4];
        double spare;
        bool has_spare;
} Rng;

static inline uint64_t splitmix64(uint64_t *x) {
        uint64_t z = (*x += UINT64_C(0x9e3779b97f4a7c15));
        z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
        return z ^ (z >> 31);
}

/* One independent stream per (seed, purpose, tensor name): tensors can be made in any order. */
static inline void rng_init(Rng *r, uint64_t seed, const char *purpose, const char *name) {
        uint64_t h = UINT64_C(0xcbf29ce484222325); /* FNV-1a over "purpose/name" */

        for (const char *p = purpose; *p; p++)
                h = (h ^ (uint8_t) *p) * UINT64_C(0x100000001b3);
        h = (h ^ '/') * UINT64_C(0x100000001b3);
        for (const char *p = name; *p; p++)
                h = (h ^ (uint8_t) *p) * UINT64_C(0x100000001b3);
        seed ^= h;
        *r = (Rng) {};
        for (int i = 0; i < 4; i++)
                r->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k) {
        return (x << k) | (x >> (64 - k));
}

static inline uint64_t rng_next(Rng *r) {
        uint64_t *s = r->s, result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;

        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = rotl(s[3], 45);
        return result;
}

static inline double rng_uniform(Rng *r) { /* [0, 1) */
        return (double) (rng_next(r) >> 11) * 0x1.0p-53;
}

/* Standard normal, Box–Muller, both values used. */
static inline double rng_normal(Rng *r) {
        if (r->has_spare) {
                r->has_spare = false;
                return r->spare;
        }
        double u1 = ((double) (rng_next(r) >> 11) + 1.0) * 0x1.0p-53; /* (0, 1] */
        double u2 = rng_uniform(r), m = sqrt(-2.0 * log(u1));
        r->spare = m * sin(2.0 * M_PI * u2);
        r->has_spare = true;
        return m * cos(2.0 * M_PI * u2);
}
