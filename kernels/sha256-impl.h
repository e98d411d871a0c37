/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Internal contract between the SHA-256 front end (sha256.c), the per-ISA
 * compression kernels (one file each, compiled with its own target flags)
 * and the dispatcher (dispatch.c). Not installed, not used outside kernels/
 * and the tests.
 */

#include <stddef.h>
#include <stdint.h>

/* The initial hash value H(0) and the round constants K (FIPS 180-4, 5.3.3 and 4.2.2). */
extern const uint32_t sha256_h0[8];
extern const uint32_t sha256_k[64];

/*
 * Single-buffer compression: fold @nblocks consecutive 64-byte blocks at
 * @data into @state (native-endian words a..h). @data need not be aligned.
 */
typedef void (*Sha256BlocksFn)(uint32_t state[8], const uint8_t *data, size_t nblocks);

/*
 * Multi-buffer compression over L lanes: fold @nblocks consecutive blocks
 * of each lane's @data[l] into that lane's state. @state is word-major,
 * state[w * L + l] is word w of lane l, so one vector load gives word w of
 * every lane. The lanes' data pointers are independent and unaligned.
 */
/*
 * Two states at once: fold @nblocks blocks at @data1 into @state1 and as many at @data2 into
 * @state2 (two hashes of one stretch of input, whose blocks may start at different offsets of
 * it). NULL in a kernel table means "call the single-buffer kernel twice".
 */
typedef void (*Sha256Blocks2Fn)(uint32_t state1[8], const uint8_t *data1, uint32_t state2[8], const uint8_t *data2,
                                size_t nblocks);

typedef void (*Sha256MultiBlocksFn)(uint32_t *state, const uint8_t *const *data, size_t nblocks);

/* The kernels chosen by dispatch.c (lazily, best available, if kernels_init() was not called). */
Sha256BlocksFn sha256_dispatch_blocks(void);
Sha256Blocks2Fn sha256_dispatch_blocks2(void);   /* may be NULL */
Sha256MultiBlocksFn sha256_dispatch_multi(unsigned *ret_lanes);

/* Maximum lanes of any multi-buffer kernel. */
#define SHA256_MAX_LANES 8

void sha256_blocks_generic(uint32_t state[8], const uint8_t *data, size_t nblocks);

#if defined(__x86_64__)
void sha256_blocks_shani(uint32_t state[8], const uint8_t *data, size_t nblocks);  /* SHA-NI + SSE4.1 */
void sha256_blocks_shani_x2(uint32_t state1[8], const uint8_t *data1, uint32_t state2[8], const uint8_t *data2,
                            size_t nblocks);
void sha256_x8_avx2(uint32_t state[8 * 8], const uint8_t *const data[8], size_t nblocks);
#endif

#if defined(__aarch64__)
void sha256_blocks_armv8ce(uint32_t state[8], const uint8_t *data, size_t nblocks); /* ARMv8 SHA2 */
void sha256_blocks_armv8ce_x2(uint32_t state1[8], const uint8_t *data1, uint32_t state2[8], const uint8_t *data2,
                              size_t nblocks);
void sha256_x4_neon(uint32_t state[8 * 4], const uint8_t *const data[4], size_t nblocks);
#endif
