/* SPDX-License-Identifier: MIT */
/* The i8 delta layout (delta.h): zigzag byte differences in four planes of 2 bits. */

#include "delta-i8.h"

static inline uint8_t zz8(uint8_t d) {
        return (uint8_t) (d << 1 ^ (0u - (d >> 7)));
}

static inline uint8_t unzz8(uint8_t z) {
        return (uint8_t) (z >> 1 ^ (0u - (z & 1u)));
}

/* Codes 4i .. 4i + 3 go to byte i of each of the four planes of @q bytes, bits 2k, 2k + 1 to plane k. */
void delta_i8_encode(const uint8_t *base, const uint8_t *target, size_t len, uint8_t *out) {
        size_t q = len / 4;

        for (size_t i = 0; i < q; i++) {
                uint8_t z[4], p[4] = { 0 };
                for (unsigned j = 0; j < 4; j++)
                        z[j] = zz8((uint8_t) (target[4 * i + j] - base[4 * i + j]));
                for (unsigned k = 0; k < 4; k++)
                        for (unsigned j = 0; j < 4; j++)
                                p[k] |= (uint8_t) ((z[j] >> 2 * k & 3) << 2 * j);
                for (unsigned k = 0; k < 4; k++)
                        out[k * q + i] = p[k];
        }
        for (size_t i = 4 * q; i < len; i++)
                out[i] = zz8((uint8_t) (target[i] - base[i]));
}

void delta_i8_decode(const uint8_t *base, const uint8_t *delta, size_t len, uint8_t *out) {
        size_t q = len / 4;

        for (size_t i = 0; i < q; i++) {
                uint8_t z[4] = { 0 };
                for (unsigned k = 0; k < 4; k++)
                        for (unsigned j = 0; j < 4; j++)
                                z[j] |= (uint8_t) ((delta[k * q + i] >> 2 * j & 3) << 2 * k);
                for (unsigned j = 0; j < 4; j++)
                        out[4 * i + j] = (uint8_t) (base[4 * i + j] + unzz8(z[j]));
        }
        for (size_t i = 4 * q; i < len; i++)
                out[i] = (uint8_t) (base[i] + unzz8(delta[i]));
}
