/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * What this process verified, so that the daemon, which verifies a stored bundle again at every
 * switch, does not repeat the ECDSA verifications while nothing they depend on has changed (a
 * chain's took 2.75 ms on the x86-64 CI machine with mbedTLS 2.28, remembered 0.11 ms). Two
 * tables, each thread-safe and keeping the last 16:
 *
 * - Signatures, by the SHA-256 of (public key, hash, signature). An ECDSA verification is a
 *   function of those three alone, so a remembered one answers as the computation would.
 * - Certificate chains that verified, by the SHA-256 of everything their verdict depends on except
 *   the clock (sign.c, chain_memo_key()), with the times around which no certificate's validity
 *   begins or ends. Both clocks the verdict reads must still lie strictly inside those times.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "sha256.h"

/* Add @len bytes at @p to @h after their length (8 bytes, little-endian): a memo key's fields cannot be shifted
 * into each other. */
void memo_hash_sized(Sha256 *h, const void *p, size_t len);

/* The key of a signature @sig by the SubjectPublicKeyInfo @spki over the SHA-256 @hash. */
void signature_memo_key(const uint8_t *spki, size_t spki_len, const uint8_t hash[SHA256_DIGEST_SIZE],
                        const uint8_t *sig, size_t sig_len, uint8_t ret_key[SHA256_DIGEST_SIZE]);
/* Whether a signature with this key verified before. */
bool signature_memo_find(const uint8_t key[SHA256_DIGEST_SIZE]);
/* Remember a signature that verified (the oldest of 16 goes). */
void signature_memo_add(const uint8_t key[SHA256_DIGEST_SIZE]);

/*
 * The span of time around @t in which no certificate's validity begins or ends, with a second's
 * margin either side (so that "before" and "after" need no care): start it with
 * clock_window_start() and pass every boundary (notBefore, notAfter) to clock_window_add().
 * valid is false when a boundary lies within a second of @t: then nothing is remembered.
 */
typedef struct ClockWindow {
        time_t lo, hi;                  /* every boundary is <= lo or >= hi */
        bool valid;
} ClockWindow;

ClockWindow clock_window_start(time_t t);
void clock_window_add(ClockWindow *w, time_t t, time_t boundary);
/* Whether @t sees every boundary on the same side as the time the window was made for. */
bool clock_window_holds(const ClockWindow *w, time_t t);

/* Whether a chain with this key verified before, and @sys_now and @trust_now lie inside its windows. */
bool chain_memo_find(const uint8_t key[SHA256_DIGEST_SIZE], time_t sys_now, time_t trust_now);
/* Remember a chain that verified, for as long as the system clock and the caller's stay in their windows. */
void chain_memo_add(const uint8_t key[SHA256_DIGEST_SIZE], const ClockWindow *sys, const ClockWindow *trust);
