/* SPDX-License-Identifier: MIT */
/*
 * 4-lane multi-buffer SHA-256 with base Advanced SIMD only, for cores without
 * the SHA2 instructions (Cortex-A72). Each vector element is one lane's word.
 */

#include <arm_neon.h>

#include "sha256-impl.h"

/* There is no vector rotate in base NEON: shift left, then insert the right shift. */
#define ROR(x, n) vsriq_n_u32(vshlq_n_u32((x), 32 - (n)), (x), (n))

static inline uint32x4_t big_sigma0(uint32x4_t x) {
        return veorq_u32(veorq_u32(ROR(x, 2), ROR(x, 13)), ROR(x, 22));
}

static inline uint32x4_t big_sigma1(uint32x4_t x) {
        return veorq_u32(veorq_u32(ROR(x, 6), ROR(x, 11)), ROR(x, 25));
}

static inline uint32x4_t small_sigma0(uint32x4_t x) {
        return veorq_u32(veorq_u32(ROR(x, 7), ROR(x, 18)), vshrq_n_u32(x, 3));
}

static inline uint32x4_t small_sigma1(uint32x4_t x) {
        return veorq_u32(veorq_u32(ROR(x, 17), ROR(x, 19)), vshrq_n_u32(x, 10));
}

static inline uint32x4_t load_be(const uint8_t *p) {
        return vreinterpretq_u32_u8(vrev32q_u8(vld1q_u8(p)));
}

/*
 * Load words 4j..4j+3 (at byte @off) of each lane and transpose the 4x4 block,
 * so that w[i] holds word 4j+i of lanes 0..3.
 */
static inline void load_transpose(uint32x4_t w[4], const uint8_t *const p[4], size_t off) {
        uint32x4_t r0 = load_be(p[0] + off), r1 = load_be(p[1] + off);
        uint32x4_t r2 = load_be(p[2] + off), r3 = load_be(p[3] + off);

        /* trn pairs the 32-bit elements, zip on 64-bit halves then gathers the pairs. */
        uint32x4x2_t t01 = vtrnq_u32(r0, r1);
        uint32x4x2_t t23 = vtrnq_u32(r2, r3);
        uint64x2_t e01 = vreinterpretq_u64_u32(t01.val[0]), o01 = vreinterpretq_u64_u32(t01.val[1]);
        uint64x2_t e23 = vreinterpretq_u64_u32(t23.val[0]), o23 = vreinterpretq_u64_u32(t23.val[1]);

        w[0] = vreinterpretq_u32_u64(vzip1q_u64(e01, e23));
        w[1] = vreinterpretq_u32_u64(vzip1q_u64(o01, o23));
        w[2] = vreinterpretq_u32_u64(vzip2q_u64(e01, e23));
        w[3] = vreinterpretq_u32_u64(vzip2q_u64(o01, o23));
}

/*
 * One round; the callers rotate the names a..h instead of moving registers.
 * Ch and Maj are single bit-selects: Ch = e ? f : g, Maj = (a ^ b) ? c : b.
 */
#define ROUND(a, b, c, d, e, f, g, h, t, wt)                                                   \
        do {                                                                                   \
                uint32x4_t kw = vaddq_u32(vld1q_dup_u32(&sha256_k[(t)]), (wt));                \
                uint32x4_t ch = vbslq_u32((e), (f), (g));                                      \
                uint32x4_t maj = vbslq_u32(veorq_u32((a), (b)), (c), (b));                     \
                uint32x4_t t1 = vaddq_u32(vaddq_u32((h), big_sigma1(e)), vaddq_u32(ch, kw));   \
                (d) = vaddq_u32((d), t1);                                                      \
                (h) = vaddq_u32(t1, vaddq_u32(big_sigma0(a), maj));                            \
        } while (0)

/* Rounds 0..15 use the message words as loaded. */
#define ROUND_LOAD(a, b, c, d, e, f, g, h, i) ROUND(a, b, c, d, e, f, g, h, i, w[(i)])

/* Later rounds first expand W[t] into the ring slot of W[t-16]. */
#define ROUND_EXPAND(a, b, c, d, e, f, g, h, i)                                                \
        do {                                                                                   \
                uint32x4_t sg0 = small_sigma0(w[((i) + 1) & 15]);                              \
                uint32x4_t sg1 = small_sigma1(w[((i) + 14) & 15]);                             \
                w[(i)] = vaddq_u32(vaddq_u32(w[(i)], sg0), vaddq_u32(w[((i) + 9) & 15], sg1)); \
                ROUND(a, b, c, d, e, f, g, h, base + (i), w[(i)]);                             \
        } while (0)

/* 16 rounds, after which the names a..h are back in place. */
#define ROUNDS_16(R)                                                                           \
        do {                                                                                   \
                R(a, b, c, d, e, f, g, h, 0);                                                  \
                R(h, a, b, c, d, e, f, g, 1);                                                  \
                R(g, h, a, b, c, d, e, f, 2);                                                  \
                R(f, g, h, a, b, c, d, e, 3);                                                  \
                R(e, f, g, h, a, b, c, d, 4);                                                  \
                R(d, e, f, g, h, a, b, c, 5);                                                  \
                R(c, d, e, f, g, h, a, b, 6);                                                  \
                R(b, c, d, e, f, g, h, a, 7);                                                  \
                R(a, b, c, d, e, f, g, h, 8);                                                  \
                R(h, a, b, c, d, e, f, g, 9);                                                  \
                R(g, h, a, b, c, d, e, f, 10);                                                 \
                R(f, g, h, a, b, c, d, e, 11);                                                 \
                R(e, f, g, h, a, b, c, d, 12);                                                 \
                R(d, e, f, g, h, a, b, c, 13);                                                 \
                R(c, d, e, f, g, h, a, b, 14);                                                 \
                R(b, c, d, e, f, g, h, a, 15);                                                 \
        } while (0)

void sha256_x4_neon(uint32_t state[8 * 4], const uint8_t *const data[4], size_t nblocks) {
        const uint8_t *p[4] = { data[0], data[1], data[2], data[3] };
        uint32x4_t s0 = vld1q_u32(&state[0]), s1 = vld1q_u32(&state[4]);
        uint32x4_t s2 = vld1q_u32(&state[8]), s3 = vld1q_u32(&state[12]);
        uint32x4_t s4 = vld1q_u32(&state[16]), s5 = vld1q_u32(&state[20]);
        uint32x4_t s6 = vld1q_u32(&state[24]), s7 = vld1q_u32(&state[28]);

        for (; nblocks > 0; nblocks--) {
                uint32x4_t w[16];
                uint32x4_t a = s0, b = s1, c = s2, d = s3, e = s4, f = s5, g = s6, h = s7;

                load_transpose(&w[0], p, 0);
                load_transpose(&w[4], p, 16);
                load_transpose(&w[8], p, 32);
                load_transpose(&w[12], p, 48);

                ROUNDS_16(ROUND_LOAD);
                for (unsigned base = 16; base < 64; base += 16)
                        ROUNDS_16(ROUND_EXPAND);

                s0 = vaddq_u32(s0, a);
                s1 = vaddq_u32(s1, b);
                s2 = vaddq_u32(s2, c);
                s3 = vaddq_u32(s3, d);
                s4 = vaddq_u32(s4, e);
                s5 = vaddq_u32(s5, f);
                s6 = vaddq_u32(s6, g);
                s7 = vaddq_u32(s7, h);

                for (unsigned l = 0; l < 4; l++)
                        p[l] += 64;
        }

        vst1q_u32(&state[0], s0);
        vst1q_u32(&state[4], s1);
        vst1q_u32(&state[8], s2);
        vst1q_u32(&state[12], s3);
        vst1q_u32(&state[16], s4);
        vst1q_u32(&state[20], s5);
        vst1q_u32(&state[24], s6);
        vst1q_u32(&state[28], s7);
}
