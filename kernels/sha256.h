/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * SHA-256 (FIPS 180-4): streaming single-buffer hashing and multi-buffer
 * hashing of equal-length chunks.
 *
 * Pure compute: nothing here allocates, performs I/O or fails. The fastest
 * implementation the CPU supports is chosen once, on first use (see
 * dispatch.h); every implementation gives bit-identical results.
 */

#include <stddef.h>
#include <stdint.h>

#define SHA256_DIGEST_SIZE 32
#define SHA256_BLOCK_SIZE 64
#define SHA256_HEX_SIZE (2 * SHA256_DIGEST_SIZE + 1)

/* Streaming state. Treat as opaque; it may be copied to fork a hash. */
typedef struct Sha256 {
        uint32_t state[8];
        uint64_t length;                  /* bytes fed so far */
        uint8_t buf[SHA256_BLOCK_SIZE];   /* pending partial block */
        size_t buf_len;
} Sha256;

void sha256_init(Sha256 *s);

/* Feed @len bytes; any split of the input into updates gives the same digest. */
void sha256_update(Sha256 *s, const void *data, size_t len);

/*
 * Feed @len bytes at @data_a to @a and @len bytes at @data_b to @b: the same
 * result as two sha256_update() calls, faster where the CPU hashes two
 * messages at once (SHA-NI, ARMv8 CE: the two round chains interleave).
 */
void sha256_update_pair(Sha256 *a, const void *data_a, Sha256 *b, const void *data_b, size_t len);

/* Feed the same @len bytes to two hashes: sha256_update_pair() with one message. */
void sha256_update2(Sha256 *a, Sha256 *b, const void *data, size_t len);

/* Write the digest and leave @s in an unspecified state (init it to reuse). */
void sha256_final(Sha256 *s, uint8_t ret_digest[SHA256_DIGEST_SIZE]);

/* One-shot convenience: init, update, final. */
void sha256_digest(const void *data, size_t len, uint8_t ret_digest[SHA256_DIGEST_SIZE]);

/*
 * Multi-buffer hashing: hash @n independent chunks of the same @len bytes
 * each, chunk i at data[i], digest i into ret_digests[i]. Runs the chunks
 * through the SIMD lanes of the multi-buffer kernel (8 with AVX2, 4 with
 * NEON) so CPUs without SHA instructions still hash fast; any leftover
 * chunks fall back to the single-buffer kernel. Each digest is identical
 * to sha256_digest() of that chunk.
 */
void sha256_multi(const uint8_t *const *data, size_t n, size_t len,
                  uint8_t (*ret_digests)[SHA256_DIGEST_SIZE]);

/* Lowercase hex of a digest, NUL-terminated. */
void sha256_to_hex(const uint8_t digest[SHA256_DIGEST_SIZE], char ret_hex[SHA256_HEX_SIZE]);
