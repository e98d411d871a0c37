/* SPDX-License-Identifier: MIT */

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "le.h"
#include "sign-memo.h"

#define MEMO_MAX 16

static struct {
        pthread_mutex_t lock;
        uint8_t key[MEMO_MAX][SHA256_DIGEST_SIZE];
        unsigned n, next;               /* entries held; the one replaced next */
} memo = { .lock = PTHREAD_MUTEX_INITIALIZER };

static struct {
        pthread_mutex_t lock;
        struct {
                uint8_t key[SHA256_DIGEST_SIZE];
                ClockWindow sys, trust;
        } entry[MEMO_MAX];
        unsigned n, next;
} chains = { .lock = PTHREAD_MUTEX_INITIALIZER };

void memo_hash_sized(Sha256 *h, const void *p, size_t len) {
        uint8_t n[8];

        put_le64(n, len);
        sha256_update(h, n, sizeof(n));
        sha256_update(h, p, len);
}

void signature_memo_key(const uint8_t *spki, size_t spki_len, const uint8_t hash[SHA256_DIGEST_SIZE],
                        const uint8_t *sig, size_t sig_len, uint8_t ret_key[SHA256_DIGEST_SIZE]) {
        Sha256 h;

        sha256_init(&h);
        memo_hash_sized(&h, spki, spki_len);
        memo_hash_sized(&h, hash, SHA256_DIGEST_SIZE);
        memo_hash_sized(&h, sig, sig_len);
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

/* ---- certificate chains -------------------------------------------------------------------------- */

#define TIME_MIN ((time_t) INT64_MIN)
#define TIME_MAX ((time_t) INT64_MAX)

ClockWindow clock_window_start(time_t t) {
        return (ClockWindow) { .lo = TIME_MIN, .hi = TIME_MAX, .valid = t > TIME_MIN + 1 && t < TIME_MAX - 1 };
}

void clock_window_add(ClockWindow *w, time_t t, time_t boundary) {
        if (boundary < t - 1) {
                if (boundary > w->lo)
                        w->lo = boundary;
        } else if (boundary > t + 1) {
                if (boundary < w->hi)
                        w->hi = boundary;
        } else
                w->valid = false;
}

bool clock_window_holds(const ClockWindow *w, time_t t) {
        return w->valid && t > TIME_MIN + 1 && t < TIME_MAX - 1 && t - 1 > w->lo && t + 1 < w->hi;
}

bool chain_memo_find(const uint8_t key[SHA256_DIGEST_SIZE], time_t sys_now, time_t trust_now) {
        bool found = false;

        pthread_mutex_lock(&chains.lock);
        for (unsigned i = 0; i < chains.n && !found; i++)
                found = memcmp(chains.entry[i].key, key, SHA256_DIGEST_SIZE) == 0 &&
                        clock_window_holds(&chains.entry[i].sys, sys_now) &&
                        clock_window_holds(&chains.entry[i].trust, trust_now);
        pthread_mutex_unlock(&chains.lock);
        return found;
}

void chain_memo_add(const uint8_t key[SHA256_DIGEST_SIZE], const ClockWindow *sys, const ClockWindow *trust) {
        if (!sys->valid || !trust->valid)
                return;
        pthread_mutex_lock(&chains.lock);
        unsigned i = 0;
        while (i < chains.n && memcmp(chains.entry[i].key, key, SHA256_DIGEST_SIZE) != 0)
                i++;                    /* the same chain verified again: its windows move */
        if (i == chains.n) {
                i = chains.next;
                chains.next = (chains.next + 1) % MEMO_MAX;
                if (chains.n < MEMO_MAX)
                        chains.n++;
        }
        memcpy(chains.entry[i].key, key, SHA256_DIGEST_SIZE);
        chains.entry[i].sys = *sys;
        chains.entry[i].trust = *trust;
        pthread_mutex_unlock(&chains.lock);
}
