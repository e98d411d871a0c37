/* SPDX-License-Identifier: MIT */

#include <pthread.h>
#include <string.h>

#include "le.h"
#include "sign-memo.h"

#define MEMO_MAX 16

static struct {
        pthread_mutex_t lock;
        uint8_t key[MEMO_MAX][SHA256_DIGEST_SIZE];
        unsigned n, next;               /* entries held; the one replaced next */
} memo = { .lock = PTHREAD_MUTEX_INITIALIZER };

void signature_memo_key(const uint8_t *spki, size_t spki_len, const uint8_t hash[SHA256_DIGEST_SIZE],
                        const uint8_t *sig, size_t sig_len, uint8_t ret_key[SHA256_DIGEST_SIZE]) {
        uint8_t n[8];
        Sha256 h;

        sha256_init(&h);
        put_le64(n, spki_len);          /* lengths first: the three fields cannot be shifted into each other */
        sha256_update(&h, n, sizeof(n));
        sha256_update(&h, spki, spki_len);
        sha256_update(&h, hash, SHA256_DIGEST_SIZE);
        put_le64(n, sig_len);
        sha256_update(&h, n, sizeof(n));
        sha256_update(&h, sig, sig_len);
        sha256_final(&h, ret_key);
}

bool signature_memo_find(const uint8_t key[SHA256_DIGEST_SIZE]) {
        bool found = false;

        pthread_mutex_lock(&memo.lock);
        for (unsigned i = 0; i < memo.n && !found; i++)
                found = memcmp(memo.key[i], key, SHA256_DIGEST_SIZE) == 0;
        pthread_mutex_unlock(&memo.lock);
        return found;
}

void signature_memo_add(const uint8_t key[SHA256_DIGEST_SIZE]) {
        pthread_mutex_lock(&memo.lock);
        memcpy(memo.key[memo.next], key, SHA256_DIGEST_SIZE);
        memo.next = (memo.next + 1) % MEMO_MAX;
        if (memo.n < MEMO_MAX)
                memo.n++;
        pthread_mutex_unlock(&memo.lock);
}
