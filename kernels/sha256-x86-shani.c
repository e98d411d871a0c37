/* SPDX-License-Identifier: MIT */
/* SHA-256 compression with the x86 SHA extensions. Build with -msse4.1 -msha. */

#include <immintrin.h>

#include "sha256-impl.h"

/* Four rounds: sha256rnds2 takes W+K for two rounds in the low 64 bits of @wk. */
static inline void shani_rounds4(__m128i *abef, __m128i *cdgh, __m128i w, unsigned i) {
        __m128i wk = _mm_add_epi32(w, _mm_loadu_si128((const __m128i *) &sha256_k[4 * i]));

        *cdgh = _mm_sha256rnds2_epu32(*cdgh, *abef, wk);
        *abef = _mm_sha256rnds2_epu32(*abef, *cdgh, _mm_shuffle_epi32(wk, 0x0e));
}

/* W[t..t+3] from W[t-16..t-1], given as the four previous quadruples, oldest first. */
static inline __m128i shani_schedule(__m128i w16, __m128i w12, __m128i w8, __m128i w4) {
        __m128i x = _mm_sha256msg1_epu32(w16, w12);

        x = _mm_add_epi32(x, _mm_alignr_epi8(w4, w8, 4));
        return _mm_sha256msg2_epu32(x, w4);
}

/*
 * Rounds i..i+15 (i >= 4), expanding the schedule in w0..w3. Each step
 * overwrites the oldest quadruple, so the ring needs no moves. A macro
 * rather than a loop because gcc -O2 keeps a 3-trip loop rolled.
 */
#define SHANI_ROUNDS16(i) do {                                            \
                w0 = shani_schedule(w0, w1, w2, w3);                    \
                shani_rounds4(&abef, &cdgh, w0, (i) + 0);               \
                w1 = shani_schedule(w1, w2, w3, w0);                    \
                shani_rounds4(&abef, &cdgh, w1, (i) + 1);               \
                w2 = shani_schedule(w2, w3, w0, w1);                    \
                shani_rounds4(&abef, &cdgh, w2, (i) + 2);               \
                w3 = shani_schedule(w3, w0, w1, w2);                    \
                shani_rounds4(&abef, &cdgh, w3, (i) + 3);               \
        } while (0)

void sha256_blocks_shani(uint32_t state[8], const uint8_t *data, size_t nblocks) {
        const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
        __m128i abcd, efgh, abef, cdgh;

        if (nblocks == 0)
                return;

        /* The round instructions want {a,b,e,f} and {c,d,g,h}, high word first;
         * convert once here and back once at the end, not per block. */
        abcd = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *) &state[0]), 0xb1); /* b a d c */
        efgh = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *) &state[4]), 0x1b); /* h g f e */
        abef = _mm_alignr_epi8(abcd, efgh, 8);                                         /* f e b a */
        cdgh = _mm_blend_epi16(efgh, abcd, 0xf0);                                      /* h g d c */

        for (; nblocks > 0; nblocks--, data += 64) {
                const __m128i abef_in = abef, cdgh_in = cdgh;
                __m128i w0, w1, w2, w3;

                w0 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *) (data + 0)), bswap);
                w1 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *) (data + 16)), bswap);
                w2 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *) (data + 32)), bswap);
                w3 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *) (data + 48)), bswap);

                shani_rounds4(&abef, &cdgh, w0, 0);
                shani_rounds4(&abef, &cdgh, w1, 1);
                shani_rounds4(&abef, &cdgh, w2, 2);
                shani_rounds4(&abef, &cdgh, w3, 3);

                SHANI_ROUNDS16(4);
                SHANI_ROUNDS16(8);
                SHANI_ROUNDS16(12);

                abef = _mm_add_epi32(abef, abef_in);
                cdgh = _mm_add_epi32(cdgh, cdgh_in);
        }

        abcd = _mm_shuffle_epi32(abef, 0x1b);      /* a b e f */
        efgh = _mm_shuffle_epi32(cdgh, 0xb1);      /* g h c d */
        _mm_storeu_si128((__m128i *) &state[0], _mm_blend_epi16(abcd, efgh, 0xf0));
        _mm_storeu_si128((__m128i *) &state[4], _mm_alignr_epi8(efgh, abcd, 8));
}

/*
 * Two hashes at once (apply hashes the unchanged bytes as base and as result; a span's bytes go
 * into its own digest and a chunk's): the two states' round chains interleave, which hides most
 * of sha256rnds2's latency. Their messages may be the same bytes or not, and may sit at different
 * offsets of their blocks, so each has its own schedule. Same layout conversion as above, twice.
 */
static inline void shani_rounds4_x2(__m128i *abef, __m128i *cdgh, __m128i *abef2, __m128i *cdgh2, __m128i w,
                                    __m128i w2, unsigned i) {
        __m128i k = _mm_loadu_si128((const __m128i *) &sha256_k[4 * i]);
        __m128i wk = _mm_add_epi32(w, k), wk2 = _mm_add_epi32(w2, k);

        *cdgh = _mm_sha256rnds2_epu32(*cdgh, *abef, wk);
        *cdgh2 = _mm_sha256rnds2_epu32(*cdgh2, *abef2, wk2);
        *abef = _mm_sha256rnds2_epu32(*abef, *cdgh, _mm_shuffle_epi32(wk, 0x0e));
        *abef2 = _mm_sha256rnds2_epu32(*abef2, *cdgh2, _mm_shuffle_epi32(wk2, 0x0e));
}

static inline void shani_load_state(const uint32_t state[8], __m128i *abef, __m128i *cdgh) {
        __m128i abcd = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *) &state[0]), 0xb1);
        __m128i efgh = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *) &state[4]), 0x1b);
        *abef = _mm_alignr_epi8(abcd, efgh, 8);
        *cdgh = _mm_blend_epi16(efgh, abcd, 0xf0);
}

static inline void shani_store_state(uint32_t state[8], __m128i abef, __m128i cdgh) {
        __m128i abcd = _mm_shuffle_epi32(abef, 0x1b);
        __m128i efgh = _mm_shuffle_epi32(cdgh, 0xb1);
        _mm_storeu_si128((__m128i *) &state[0], _mm_blend_epi16(abcd, efgh, 0xf0));
        _mm_storeu_si128((__m128i *) &state[4], _mm_alignr_epi8(efgh, abcd, 8));
}

static inline __m128i shani_load_message(const uint8_t *p) {
        const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
        return _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *) p), bswap);
}

#define SHANI_ROUNDS16_X2(i) do {                                                         \
                w0 = shani_schedule(w0, w1, w2, w3);                                    \
                v0 = shani_schedule(v0, v1, v2, v3);                                    \
                shani_rounds4_x2(&abef, &cdgh, &abef2, &cdgh2, w0, v0, (i) + 0);        \
                w1 = shani_schedule(w1, w2, w3, w0);                                    \
                v1 = shani_schedule(v1, v2, v3, v0);                                    \
                shani_rounds4_x2(&abef, &cdgh, &abef2, &cdgh2, w1, v1, (i) + 1);        \
                w2 = shani_schedule(w2, w3, w0, w1);                                    \
                v2 = shani_schedule(v2, v3, v0, v1);                                    \
                shani_rounds4_x2(&abef, &cdgh, &abef2, &cdgh2, w2, v2, (i) + 2);        \
                w3 = shani_schedule(w3, w0, w1, w2);                                    \
                v3 = shani_schedule(v3, v0, v1, v2);                                    \
                shani_rounds4_x2(&abef, &cdgh, &abef2, &cdgh2, w3, v3, (i) + 3);        \
        } while (0)

void sha256_blocks_shani_x2(uint32_t state1[8], const uint8_t *data1, uint32_t state2[8], const uint8_t *data2,
                            size_t nblocks) {
        __m128i abef, cdgh, abef2, cdgh2;

        if (nblocks == 0)
                return;
        shani_load_state(state1, &abef, &cdgh);
        shani_load_state(state2, &abef2, &cdgh2);

        for (; nblocks > 0; nblocks--, data1 += 64, data2 += 64) {
                const __m128i abef_in = abef, cdgh_in = cdgh, abef2_in = abef2, cdgh2_in = cdgh2;
                __m128i w0 = shani_load_message(data1), w1 = shani_load_message(data1 + 16);
                __m128i w2 = shani_load_message(data1 + 32), w3 = shani_load_message(data1 + 48);
                __m128i v0 = shani_load_message(data2), v1 = shani_load_message(data2 + 16);
                __m128i v2 = shani_load_message(data2 + 32), v3 = shani_load_message(data2 + 48);

                shani_rounds4_x2(&abef, &cdgh, &abef2, &cdgh2, w0, v0, 0);
                shani_rounds4_x2(&abef, &cdgh, &abef2, &cdgh2, w1, v1, 1);
                shani_rounds4_x2(&abef, &cdgh, &abef2, &cdgh2, w2, v2, 2);
                shani_rounds4_x2(&abef, &cdgh, &abef2, &cdgh2, w3, v3, 3);

                SHANI_ROUNDS16_X2(4);
                SHANI_ROUNDS16_X2(8);
                SHANI_ROUNDS16_X2(12);

                abef = _mm_add_epi32(abef, abef_in);
                cdgh = _mm_add_epi32(cdgh, cdgh_in);
                abef2 = _mm_add_epi32(abef2, abef2_in);
                cdgh2 = _mm_add_epi32(cdgh2, cdgh2_in);
        }
        shani_store_state(state1, abef, cdgh);
        shani_store_state(state2, abef2, cdgh2);
}
