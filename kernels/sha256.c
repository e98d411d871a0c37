/* SPDX-License-Identifier: MIT */
/* SHA-256 front end: buffering and padding around the dispatched compression kernels. */

#include <string.h>

#include "sha256-impl.h"
#include "sha256.h"

static void store_be32(uint8_t *p, uint32_t v) {
        p[0] = v >> 24;
        p[1] = v >> 16;
        p[2] = v >> 8;
        p[3] = v;
}

static void store_be64(uint8_t *p, uint64_t v) {
        store_be32(p, v >> 32);
        store_be32(p + 4, (uint32_t) v);
}

/*
 * Write the padding of a message of @length bytes whose last @tail bytes
 * (tail < 64) are at @data into @ret_blocks; returns the number of blocks
 * (1 or 2) it took.
 */
static size_t sha256_pad(const uint8_t *data, size_t tail, uint64_t length, uint8_t ret_blocks[2 * SHA256_BLOCK_SIZE]) {
        size_t nblocks = tail < SHA256_BLOCK_SIZE - 8 ? 1 : 2;

        memcpy(ret_blocks, data, tail);
        ret_blocks[tail] = 0x80;
        memset(ret_blocks + tail + 1, 0, nblocks * SHA256_BLOCK_SIZE - tail - 1 - 8);
        store_be64(ret_blocks + nblocks * SHA256_BLOCK_SIZE - 8, length * 8);
        return nblocks;
}

void sha256_init(Sha256 *s) {
        memcpy(s->state, sha256_h0, sizeof(s->state));
        s->length = 0;
        s->buf_len = 0;
}

void sha256_update(Sha256 *s, const void *data, size_t len) {
        Sha256BlocksFn blocks = sha256_dispatch_blocks();
        const uint8_t *p = data;

        if (len == 0)
                return;         /* @data may be NULL then */
        s->length += len;

        if (s->buf_len > 0) {
                size_t n = SHA256_BLOCK_SIZE - s->buf_len;
                if (n > len)
                        n = len;
                memcpy(s->buf + s->buf_len, p, n);
                s->buf_len += n;
                p += n;
                len -= n;
                if (s->buf_len < SHA256_BLOCK_SIZE)
                        return;
                blocks(s->state, s->buf, 1);
                s->buf_len = 0;
        }

        if (len >= SHA256_BLOCK_SIZE) {
                size_t n = len / SHA256_BLOCK_SIZE;
                blocks(s->state, p, n);
                p += n * SHA256_BLOCK_SIZE;
                len -= n * SHA256_BLOCK_SIZE;
        }

        memcpy(s->buf, p, len);
        s->buf_len = len;
}

void sha256_update_pair(Sha256 *a, const void *data_a, Sha256 *b, const void *data_b, size_t len) {
        Sha256Blocks2Fn blocks2 = sha256_dispatch_blocks2();
        const uint8_t *pa = data_a, *pb = data_b;

        if (!blocks2) {
                sha256_update(a, pa, len);
                sha256_update(b, pb, len);
                return;
        }
        /*
         * Each state first fills its pending block (the two may hold different lengths), then the
         * whole blocks both have left go through the two-state kernel, each from its own offset.
         */
        size_t na = a->buf_len ? SHA256_BLOCK_SIZE - a->buf_len : 0, nb = b->buf_len ? SHA256_BLOCK_SIZE - b->buf_len : 0;
        if (na > len)
                na = len;
        if (nb > len)
                nb = len;
        sha256_update(a, pa, na);
        sha256_update(b, pb, nb);
        size_t la = len - na, lb = len - nb, n = (la < lb ? la : lb) / SHA256_BLOCK_SIZE;
        if (n > 0) {
                blocks2(a->state, pa + na, b->state, pb + nb, n);
                a->length += n * SHA256_BLOCK_SIZE;
                b->length += n * SHA256_BLOCK_SIZE;
        }
        sha256_update(a, pa + na + n * SHA256_BLOCK_SIZE, la - n * SHA256_BLOCK_SIZE);
        sha256_update(b, pb + nb + n * SHA256_BLOCK_SIZE, lb - n * SHA256_BLOCK_SIZE);
}

void sha256_update2(Sha256 *a, Sha256 *b, const void *data, size_t len) {
        sha256_update_pair(a, data, b, data, len);
}

void sha256_final(Sha256 *s, uint8_t ret_digest[SHA256_DIGEST_SIZE]) {
        uint8_t pad[2 * SHA256_BLOCK_SIZE];
        size_t n = sha256_pad(s->buf, s->buf_len, s->length, pad);

        sha256_dispatch_blocks()(s->state, pad, n);
        for (unsigned i = 0; i < 8; i++)
                store_be32(ret_digest + 4 * i, s->state[i]);
}

void sha256_digest(const void *data, size_t len, uint8_t ret_digest[SHA256_DIGEST_SIZE]) {
        Sha256 s;

        sha256_init(&s);
        sha256_update(&s, data, len);
        sha256_final(&s, ret_digest);
}

/* Hash @lanes chunks at once (lanes >= 1) with one multi-buffer kernel call per stage. */
static void sha256_multi_group(Sha256MultiBlocksFn fn, unsigned lanes, const uint8_t *const *data, size_t len,
                               uint8_t (*ret_digests)[SHA256_DIGEST_SIZE]) {
        uint32_t state[8 * SHA256_MAX_LANES];
        uint8_t pad[SHA256_MAX_LANES][2 * SHA256_BLOCK_SIZE];
        const uint8_t *tails[SHA256_MAX_LANES];
        size_t full = len / SHA256_BLOCK_SIZE, tail = len % SHA256_BLOCK_SIZE, ntail = 0;

        for (unsigned w = 0; w < 8; w++)
                for (unsigned l = 0; l < lanes; l++)
                        state[w * lanes + l] = sha256_h0[w];

        if (full > 0)
                fn(state, data, full);

        /* Equal lengths give every lane the same padding layout, so one call finishes them all. */
        for (unsigned l = 0; l < lanes; l++) {
                ntail = sha256_pad(data[l] + full * SHA256_BLOCK_SIZE, tail, len, pad[l]);
                tails[l] = pad[l];
        }
        fn(state, tails, ntail);

        for (unsigned l = 0; l < lanes; l++)
                for (unsigned w = 0; w < 8; w++)
                        store_be32(ret_digests[l] + 4 * w, state[w * lanes + l]);
}

void sha256_multi(const uint8_t *const *data, size_t n, size_t len, uint8_t (*ret_digests)[SHA256_DIGEST_SIZE]) {
        unsigned lanes;
        Sha256MultiBlocksFn fn = sha256_dispatch_multi(&lanes);
        size_t i = 0;

        for (; i + lanes <= n; i += lanes)
                sha256_multi_group(fn, lanes, data + i, len, ret_digests + i);
        for (; i < n; i++)
                sha256_digest(data[i], len, ret_digests[i]);
}

void sha256_to_hex(const uint8_t digest[SHA256_DIGEST_SIZE], char ret_hex[SHA256_HEX_SIZE]) {
        static const char hex[] = "0123456789abcdef";

        for (unsigned i = 0; i < SHA256_DIGEST_SIZE; i++) {
                ret_hex[2 * i] = hex[digest[i] >> 4];
                ret_hex[2 * i + 1] = hex[digest[i] & 15];
        }
        ret_hex[2 * SHA256_DIGEST_SIZE] = '\0';
}
