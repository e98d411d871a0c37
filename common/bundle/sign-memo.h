/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Signatures this process verified, by the SHA-256 of (public key, hash, signature). An ECDSA
 * verification is a function of those three alone, so a remembered one answers as the
 * computation would; signature_verify_trust() still checks the chain, its dates and the
 * revocations every time. The daemon verifies a stored bundle again at every switch: this spares
 * it one of the two ECDSA verifications (the chain keeps the other). Thread-safe; the last 16.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sha256.h"

/* The key of a signature @sig by the SubjectPublicKeyInfo @spki over the SHA-256 @hash. */
void signature_memo_key(const uint8_t *spki, size_t spki_len, const uint8_t hash[SHA256_DIGEST_SIZE],
                        const uint8_t *sig, size_t sig_len, uint8_t ret_key[SHA256_DIGEST_SIZE]);
/* Whether a signature with this key verified before. */
bool signature_memo_find(const uint8_t key[SHA256_DIGEST_SIZE]);
/* Remember a signature that verified (the oldest of 16 goes). */
void signature_memo_add(const uint8_t key[SHA256_DIGEST_SIZE]);
