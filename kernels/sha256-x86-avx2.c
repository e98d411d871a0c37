/* SPDX-License-Identifier: MIT */
/* 8-lane multi-buffer SHA-256 with AVX2, one lane per 32-bit element. Build with -mavx2. */

#include <immintrin.h>

#include "sha256-impl.h"

#define LANES 8

/* No vector rotate before AVX-512; each rotation is two shifts. The three
 * rotations of a sigma are XORed together as six disjoint shifts. */
#define SHL(x, n) _mm256_slli_epi32((x), (n))
#define SHR(x, n) _mm256_srli_epi32((x), (n))
#define XOR(x, y) _mm256_xor_si256((x), (y))
#define ADD(x, y) _mm256_add_epi32((x), (y))

static inline __m256i big_sigma0(__m256i x) {
        return XOR(XOR(XOR(SHR(x, 2), SHL(x, 30)), XOR(SHR(x, 13), SHL(x, 19))),
                   XOR(SHR(x, 22), SHL(x, 10)));
}

static inline __m256i big_sigma1(__m256i x) {
        return XOR(XOR(XOR(SHR(x, 6), SHL(x, 26)), XOR(SHR(x, 11), SHL(x, 21))),
                   XOR(SHR(x, 25), SHL(x, 7)));
}

static inline __m256i small_sigma0(__m256i x) {
        return XOR(XOR(XOR(SHR(x, 7), SHL(x, 25)), XOR(SHR(x, 18), SHL(x, 14))), SHR(x, 3));
}

static inline __m256i small_sigma1(__m256i x) {
        return XOR(XOR(XOR(SHR(x, 17), SHL(x, 15)), XOR(SHR(x, 19), SHL(x, 13))), SHR(x, 10));
}

/* Load 8 consecutive big-endian words of every lane at byte @off and transpose
 * them, so that w[j] holds word j of all lanes. */
static inline void load_words8(__m256i w[8], const uint8_t *const data[LANES], size_t off) {
        const __m256i bswap = _mm256_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL,
                                                0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
        __m256i r[8], s[8], t[8];

        for (unsigned l = 0; l < LANES; l++)
                r[l] = _mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i *) (data[l] + off)),
                                           bswap);

        /* 32-bit then 64-bit interleave within each 128-bit half, then swap halves. */
        for (unsigned l = 0; l < LANES; l += 2) {
                s[l] = _mm256_unpacklo_epi32(r[l], r[l + 1]);
                s[l + 1] = _mm256_unpackhi_epi32(r[l], r[l + 1]);
        }
        for (unsigned l = 0; l < LANES; l += 4) {
                t[l + 0] = _mm256_unpacklo_epi64(s[l + 0], s[l + 2]); /* words 0, 4 */
                t[l + 1] = _mm256_unpackhi_epi64(s[l + 0], s[l + 2]); /* words 1, 5 */
                t[l + 2] = _mm256_unpacklo_epi64(s[l + 1], s[l + 3]); /* words 2, 6 */
                t[l + 3] = _mm256_unpackhi_epi64(s[l + 1], s[l + 3]); /* words 3, 7 */
        }
        for (unsigned j = 0; j < 4; j++) {
                w[j] = _mm256_permute2x128_si256(t[j], t[j + 4], 0x20);
                w[j + 4] = _mm256_permute2x128_si256(t[j], t[j + 4], 0x31);
        }
}

/*
 * One round. Maj(a,b,c) = b ^ ((a ^ b) & (b ^ c)), and this round's a ^ b is
 * the next round's b ^ c, carried in the caller's bc. h + K + W does not depend
 * on e, so it is summed first, off the critical path.
 */
#define ROUND(a, b, c, d, e, f, g, h, wt, t) do {                                       \
                __m256i hkw = ADD(ADD((h), (wt)), _mm256_set1_epi32((int) sha256_k[t]));    \
                __m256i ch = XOR(_mm256_and_si256(XOR((f), (g)), (e)), (g));                \
                __m256i t1 = ADD(ADD(hkw, ch), big_sigma1(e));                              \
                __m256i ab = XOR((a), (b));                                                 \
                __m256i maj = XOR((b), _mm256_and_si256(ab, bc));                           \
                bc = ab;                                                                    \
                (d) = ADD((d), t1);                                                         \
                (h) = ADD(ADD(t1, maj), big_sigma0(a));                                     \
        } while (0)

/* W[t] for t >= 16, in place in the 16-word ring; j = t mod 16. */
#define EXPAND(w, j) ((w)[(j)] = ADD(ADD((w)[(j)], small_sigma0((w)[((j) + 1) & 15])),  \
                                     ADD((w)[((j) + 9) & 15], small_sigma1((w)[((j) + 14) & 15]))))

#define WORD(w, j, expand) ((expand) ? EXPAND(w, j) : (w)[(j)])

/* Rounds t..t+7 on ring words j..j+7; renaming the variables replaces the rotation of a..h. */
#define ROUNDS8(w, j, t, expand) do {                                                   \
                ROUND(a, b, c, d, e, f, g, h, WORD(w, (j) + 0, expand), (t) + 0);           \
                ROUND(h, a, b, c, d, e, f, g, WORD(w, (j) + 1, expand), (t) + 1);           \
                ROUND(g, h, a, b, c, d, e, f, WORD(w, (j) + 2, expand), (t) + 2);           \
                ROUND(f, g, h, a, b, c, d, e, WORD(w, (j) + 3, expand), (t) + 3);           \
                ROUND(e, f, g, h, a, b, c, d, WORD(w, (j) + 4, expand), (t) + 4);           \
                ROUND(d, e, f, g, h, a, b, c, WORD(w, (j) + 5, expand), (t) + 5);           \
                ROUND(c, d, e, f, g, h, a, b, WORD(w, (j) + 6, expand), (t) + 6);           \
                ROUND(b, c, d, e, f, g, h, a, WORD(w, (j) + 7, expand), (t) + 7);           \
        } while (0)

void sha256_x8_avx2(uint32_t state[8 * LANES], const uint8_t *const data[LANES], size_t nblocks) {
        __m256i a = _mm256_loadu_si256((const __m256i *) &state[0 * LANES]);
        __m256i b = _mm256_loadu_si256((const __m256i *) &state[1 * LANES]);
        __m256i c = _mm256_loadu_si256((const __m256i *) &state[2 * LANES]);
        __m256i d = _mm256_loadu_si256((const __m256i *) &state[3 * LANES]);
        __m256i e = _mm256_loadu_si256((const __m256i *) &state[4 * LANES]);
        __m256i f = _mm256_loadu_si256((const __m256i *) &state[5 * LANES]);
        __m256i g = _mm256_loadu_si256((const __m256i *) &state[6 * LANES]);
        __m256i h = _mm256_loadu_si256((const __m256i *) &state[7 * LANES]);

        for (size_t off = 0; off < nblocks * 64; off += 64) {
                const __m256i a_in = a, b_in = b, c_in = c, d_in = d;
                const __m256i e_in = e, f_in = f, g_in = g, h_in = h;
                __m256i w[16], bc = XOR(b, c);

                load_words8(&w[0], data, off);
                load_words8(&w[8], data, off + 32);

                ROUNDS8(w, 0, 0, 0);
                ROUNDS8(w, 8, 8, 0);
                for (unsigned t = 16; t < 64; t += 16) {
                        ROUNDS8(w, 0, t, 1);
                        ROUNDS8(w, 8, t + 8, 1);
                }

                a = ADD(a, a_in);
                b = ADD(b, b_in);
                c = ADD(c, c_in);
                d = ADD(d, d_in);
                e = ADD(e, e_in);
                f = ADD(f, f_in);
                g = ADD(g, g_in);
                h = ADD(h, h_in);
        }

        _mm256_storeu_si256((__m256i *) &state[0 * LANES], a);
        _mm256_storeu_si256((__m256i *) &state[1 * LANES], b);
        _mm256_storeu_si256((__m256i *) &state[2 * LANES], c);
        _mm256_storeu_si256((__m256i *) &state[3 * LANES], d);
        _mm256_storeu_si256((__m256i *) &state[4 * LANES], e);
        _mm256_storeu_si256((__m256i *) &state[5 * LANES], f);
        _mm256_storeu_si256((__m256i *) &state[6 * LANES], g);
        _mm256_storeu_si256((__m256i *) &state[7 * LANES], h);
}
