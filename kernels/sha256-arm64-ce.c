/* SPDX-License-Identifier: MIT */
/* SHA-256 compression with the ARMv8 Cryptography Extension (SHA256H/H2/SU0/SU1). */

#include <arm_neon.h>

#include "sha256-impl.h"

/* gcc 12 declares the SHA intrinsics under "+crypto"; without it they fail to inline. */
#if !defined(__ARM_FEATURE_CRYPTO) && !defined(__ARM_FEATURE_SHA2)
#error "sha256-arm64-ce.c must be compiled with -march=armv8-a+crypto"
#endif

/* Four rounds on W[4i..4i+3] (in @msg); both state halves advance together. */
#define QUAD_ROUND(i, msg)                                                     \
        do {                                                                   \
                uint32x4_t wk = vaddq_u32((msg), k##i);                        \
                uint32x4_t abcd_prev = abcd;                                   \
                abcd = vsha256hq_u32(abcd, efgh, wk);                          \
                efgh = vsha256h2q_u32(efgh, abcd_prev, wk);                    \
        } while (0)

/* W[t..t+3] from W[t-16..t-1], held in m0 (oldest) .. m3; the result replaces m0. */
#define SCHEDULE(m0, m1, m2, m3) (m0) = vsha256su1q_u32(vsha256su0q_u32((m0), (m1)), (m2), (m3))

void sha256_blocks_armv8ce(uint32_t state[8], const uint8_t *data, size_t nblocks) {
        /* Lane 0 is a (resp. e): the layout SHA256H/H2 expect, so state loads as is. */
        uint32x4_t abcd = vld1q_u32(&state[0]);
        uint32x4_t efgh = vld1q_u32(&state[4]);

        /*
         * K stays in registers across blocks: 16 + 4 message + 4 state + temps fit in 32.
         * Named, not an array, because gcc 12 bounces an array through the stack.
         */
        const uint32x4_t k0 = vld1q_u32(&sha256_k[0]), k1 = vld1q_u32(&sha256_k[4]);
        const uint32x4_t k2 = vld1q_u32(&sha256_k[8]), k3 = vld1q_u32(&sha256_k[12]);
        const uint32x4_t k4 = vld1q_u32(&sha256_k[16]), k5 = vld1q_u32(&sha256_k[20]);
        const uint32x4_t k6 = vld1q_u32(&sha256_k[24]), k7 = vld1q_u32(&sha256_k[28]);
        const uint32x4_t k8 = vld1q_u32(&sha256_k[32]), k9 = vld1q_u32(&sha256_k[36]);
        const uint32x4_t k10 = vld1q_u32(&sha256_k[40]), k11 = vld1q_u32(&sha256_k[44]);
        const uint32x4_t k12 = vld1q_u32(&sha256_k[48]), k13 = vld1q_u32(&sha256_k[52]);
        const uint32x4_t k14 = vld1q_u32(&sha256_k[56]), k15 = vld1q_u32(&sha256_k[60]);

        for (; nblocks > 0; nblocks--, data += 64) {
                uint32x4_t abcd_in = abcd, efgh_in = efgh;

                /* Message words are big-endian; byte-swap each 32-bit lane. */
                uint32x4_t m0 = vreinterpretq_u32_u8(vrev32q_u8(vld1q_u8(data + 0)));
                uint32x4_t m1 = vreinterpretq_u32_u8(vrev32q_u8(vld1q_u8(data + 16)));
                uint32x4_t m2 = vreinterpretq_u32_u8(vrev32q_u8(vld1q_u8(data + 32)));
                uint32x4_t m3 = vreinterpretq_u32_u8(vrev32q_u8(vld1q_u8(data + 48)));

                /* 48 rounds that also extend the schedule, rotating m0..m3 by hand. */
                QUAD_ROUND(0, m0);
                SCHEDULE(m0, m1, m2, m3);
                QUAD_ROUND(1, m1);
                SCHEDULE(m1, m2, m3, m0);
                QUAD_ROUND(2, m2);
                SCHEDULE(m2, m3, m0, m1);
                QUAD_ROUND(3, m3);
                SCHEDULE(m3, m0, m1, m2);
                QUAD_ROUND(4, m0);
                SCHEDULE(m0, m1, m2, m3);
                QUAD_ROUND(5, m1);
                SCHEDULE(m1, m2, m3, m0);
                QUAD_ROUND(6, m2);
                SCHEDULE(m2, m3, m0, m1);
                QUAD_ROUND(7, m3);
                SCHEDULE(m3, m0, m1, m2);
                QUAD_ROUND(8, m0);
                SCHEDULE(m0, m1, m2, m3);
                QUAD_ROUND(9, m1);
                SCHEDULE(m1, m2, m3, m0);
                QUAD_ROUND(10, m2);
                SCHEDULE(m2, m3, m0, m1);
                QUAD_ROUND(11, m3);
                SCHEDULE(m3, m0, m1, m2);
                QUAD_ROUND(12, m0);
                QUAD_ROUND(13, m1);
                QUAD_ROUND(14, m2);
                QUAD_ROUND(15, m3);

                abcd = vaddq_u32(abcd, abcd_in);
                efgh = vaddq_u32(efgh, efgh_in);
        }

        vst1q_u32(&state[0], abcd);
        vst1q_u32(&state[4], efgh);
}

/*
 * Two states at once (apply hashes unchanged bytes as base and as result; a span's bytes go into
 * its own digest and a chunk's): the two SHA256H/H2 chains interleave, hiding their latency. The
 * messages may be the same bytes or not, at any offsets, so each has its own schedule. K comes from
 * memory here: two states leave too few registers to pin it.
 */
#define QUAD_ROUND2(i, msg, msg2)                                              \
        do {                                                                   \
                uint32x4_t k = vld1q_u32(&sha256_k[4 * (i)]);                  \
                uint32x4_t wk = vaddq_u32((msg), k), wk2 = vaddq_u32((msg2), k); \
                uint32x4_t a_prev = abcd, a2_prev = abcd2;                     \
                abcd = vsha256hq_u32(abcd, efgh, wk);                          \
                abcd2 = vsha256hq_u32(abcd2, efgh2, wk2);                      \
                efgh = vsha256h2q_u32(efgh, a_prev, wk);                       \
                efgh2 = vsha256h2q_u32(efgh2, a2_prev, wk2);                   \
        } while (0)

static inline uint32x4_t ce_load_message(const uint8_t *p) {
        return vreinterpretq_u32_u8(vrev32q_u8(vld1q_u8(p)));
}

void sha256_blocks_armv8ce_x2(uint32_t state1[8], const uint8_t *data1, uint32_t state2[8], const uint8_t *data2,
                              size_t nblocks) {
        uint32x4_t abcd = vld1q_u32(&state1[0]), efgh = vld1q_u32(&state1[4]);
        uint32x4_t abcd2 = vld1q_u32(&state2[0]), efgh2 = vld1q_u32(&state2[4]);

        for (; nblocks > 0; nblocks--, data1 += 64, data2 += 64) {
                uint32x4_t abcd_in = abcd, efgh_in = efgh, abcd2_in = abcd2, efgh2_in = efgh2;
                uint32x4_t m0 = ce_load_message(data1), m1 = ce_load_message(data1 + 16);
                uint32x4_t m2 = ce_load_message(data1 + 32), m3 = ce_load_message(data1 + 48);
                uint32x4_t n0 = ce_load_message(data2), n1 = ce_load_message(data2 + 16);
                uint32x4_t n2 = ce_load_message(data2 + 32), n3 = ce_load_message(data2 + 48);

                for (unsigned q = 0; q < 12; q += 4) {
                        QUAD_ROUND2(q + 0, m0, n0);
                        SCHEDULE(m0, m1, m2, m3);
                        SCHEDULE(n0, n1, n2, n3);
                        QUAD_ROUND2(q + 1, m1, n1);
                        SCHEDULE(m1, m2, m3, m0);
                        SCHEDULE(n1, n2, n3, n0);
                        QUAD_ROUND2(q + 2, m2, n2);
                        SCHEDULE(m2, m3, m0, m1);
                        SCHEDULE(n2, n3, n0, n1);
                        QUAD_ROUND2(q + 3, m3, n3);
                        SCHEDULE(m3, m0, m1, m2);
                        SCHEDULE(n3, n0, n1, n2);
                }
                QUAD_ROUND2(12, m0, n0);
                QUAD_ROUND2(13, m1, n1);
                QUAD_ROUND2(14, m2, n2);
                QUAD_ROUND2(15, m3, n3);

                abcd = vaddq_u32(abcd, abcd_in);
                efgh = vaddq_u32(efgh, efgh_in);
                abcd2 = vaddq_u32(abcd2, abcd2_in);
                efgh2 = vaddq_u32(efgh2, efgh2_in);
        }
        vst1q_u32(&state1[0], abcd);
        vst1q_u32(&state1[4], efgh);
        vst1q_u32(&state2[0], abcd2);
        vst1q_u32(&state2[4], efgh2);
}
