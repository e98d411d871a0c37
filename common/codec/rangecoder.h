/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * A binary adaptive range coder (the carry-propagating kind LZMA uses), for entropy-coded delta
 * layouts (delta-i8ac.c). Every bit is coded with a probability the model keeps, so a bit that
 * is nearly always 0 costs a small fraction of a bit: what zstd's Huffman stage cannot do for
 * single symbols.
 *
 * THE ARITHMETIC (wire format: must never change). A probability of a 0 is a pair of 16-bit
 * estimates (fast, slow), each in units of 2^-16, starting at 2^15, and the count n of bits
 * coded with it (at most 128); the bit is coded with P = (fast + slow) / 2 (integer division),
 * then each estimate e moves toward what was seen by k = 65536 / min(n + 2, w) (integer
 * division; w = 32 for fast, 128 for slow): after a 0, e += ((2^16 - e) * k) >> 16, after a 1,
 * e -= (e * k) >> 16; then n grows. So an estimate starts as the running average of what it saw
 * and settles into a moving one over its window. Each estimate stays within [1, 65535], and so
 * does P: every bit has a bound strictly inside the range.
 *
 * Encoder: low (33 bits, with its carry), range (32 bits) = 2^32 - 1, a cached byte 0 and one
 * pending byte. A bit: bound = (range >> 16) * P; a 0 keeps [low, low + bound), a 1 takes
 * [low + bound, low + range). While range < 2^24: range <<= 8 and the top byte of low is shifted
 * out, a carry into it rippling through the pending 0xff bytes. The end flushes five bytes. The
 * decoder mirrors it: the first five bytes are the code (the first is always 0), a bit is 0 when
 * code < bound; bytes past the end of the coded stream read as 0.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RC_TOP (UINT32_C(1) << 24)

typedef struct RcProb {
        uint16_t fast, slow;
        uint8_t seen;                   /* bits coded with it, up to RC_SLOW */
} RcProb;

#define RC_FAST 32                      /* the fast estimate's window */
#define RC_SLOW 128                     /* the slow one's */
#define RC_PROB_INIT ((RcProb) { 32768, 32768, 0 })

static inline uint32_t rc_p0(const RcProb *p) {
        return ((uint32_t) p->fast + p->slow) >> 1;
}

/* 65536 / d for d = 2 .. RC_SLOW (a table: a division per bit would cost more than the rest of it). */
static const uint16_t rc_recip[RC_SLOW + 1] = {
        0, 0, 32768, 21845, 16384, 13107, 10922, 9362, 8192, 7281, 6553, 5957,
        5461, 5041, 4681, 4369, 4096, 3855, 3640, 3449, 3276, 3120, 2978, 2849,
        2730, 2621, 2520, 2427, 2340, 2259, 2184, 2114, 2048, 1985, 1927, 1872,
        1820, 1771, 1724, 1680, 1638, 1598, 1560, 1524, 1489, 1456, 1424, 1394,
        1365, 1337, 1310, 1285, 1260, 1236, 1213, 1191, 1170, 1149, 1129, 1110,
        1092, 1074, 1057, 1040, 1024, 1008, 992, 978, 963, 949, 936, 923,
        910, 897, 885, 873, 862, 851, 840, 829, 819, 809, 799, 789,
        780, 771, 762, 753, 744, 736, 728, 720, 712, 704, 697, 689,
        682, 675, 668, 661, 655, 648, 642, 636, 630, 624, 618, 612,
        606, 601, 595, 590, 585, 579, 574, 569, 564, 560, 555, 550,
        546, 541, 537, 532, 528, 524, 520, 516, 512,
};

/* An estimate moves by 1 / (bits seen + 2) of the way, at least 1 / window. */
static inline uint32_t rc_step(unsigned seen, unsigned window) {
        return rc_recip[seen + 2 < window ? seen + 2 : window];
}

static inline void rc_adapt(RcProb *p, unsigned bit) {
        uint32_t f = rc_step(p->seen, RC_FAST), s = rc_step(p->seen, RC_SLOW);
        if (bit) {
                p->fast = (uint16_t) (p->fast - ((p->fast * f) >> 16));
                p->slow = (uint16_t) (p->slow - ((p->slow * s) >> 16));
        } else {
                p->fast = (uint16_t) (p->fast + (((65536u - p->fast) * f) >> 16));
                p->slow = (uint16_t) (p->slow + (((65536u - p->slow) * s) >> 16));
        }
        if (p->seen < RC_SLOW)
                p->seen++;
}

typedef struct RcEncoder {
        uint64_t low;
        uint32_t range;
        uint8_t cache;
        uint64_t pending;       /* bytes owed: the cached one and the 0xff ones after it */
        uint8_t *out;
        size_t pos, cap;        /* bytes that would have been written; more than cap: it did not fit */
} RcEncoder;

static inline void rc_encoder_init(RcEncoder *e, uint8_t *out, size_t cap) {
        *e = (RcEncoder) { .range = UINT32_MAX, .pending = 1, .out = out, .cap = cap };
}

static inline void rc_put(RcEncoder *e, uint8_t b) {
        if (e->pos < e->cap)
                e->out[e->pos] = b;
        e->pos++;
}

static inline void rc_shift_low(RcEncoder *e) {
        if ((uint32_t) e->low < UINT32_C(0xff000000) || (e->low >> 32) != 0) {
                uint8_t carry = (uint8_t) (e->low >> 32), b = e->cache;
                do {
                        rc_put(e, (uint8_t) (b + carry));
                        b = 0xff;
                } while (--e->pending != 0);
                e->cache = (uint8_t) (e->low >> 24);
        }
        e->pending++;
        e->low = (e->low & UINT32_C(0x00ffffff)) << 8;
}

static inline void rc_encode(RcEncoder *e, RcProb *p, unsigned bit) {
        uint32_t bound = (e->range >> 16) * rc_p0(p);
        if (bit) {
                e->low += bound;
                e->range -= bound;
        } else {
                e->range = bound;
        }
        rc_adapt(p, bit);
        while (e->range < RC_TOP) {
                e->range <<= 8;
                rc_shift_low(e);
        }
}

/* The end of the stream; returns the bytes it takes (more than the capacity: it did not fit). */
static inline size_t rc_encoder_finish(RcEncoder *e) {
        for (int i = 0; i < 5; i++)
                rc_shift_low(e);
        return e->pos;
}

typedef struct RcDecoder {
        uint32_t code, range;
        const uint8_t *in;
        size_t pos, len;
} RcDecoder;

static inline uint8_t rc_get(RcDecoder *d) {
        return d->pos < d->len ? d->in[d->pos++] : 0;
}

static inline void rc_decoder_init(RcDecoder *d, const uint8_t *in, size_t len) {
        *d = (RcDecoder) { .range = UINT32_MAX, .in = in, .len = len };
        for (int i = 0; i < 5; i++)
                d->code = d->code << 8 | rc_get(d);
}

static inline unsigned rc_decode(RcDecoder *d, RcProb *p) {
        uint32_t bound = (d->range >> 16) * rc_p0(p);
        unsigned bit = d->code >= bound;
        if (bit) {
                d->code -= bound;
                d->range -= bound;
        } else {
                d->range = bound;
        }
        rc_adapt(p, bit);
        while (d->range < RC_TOP) {
                d->range <<= 8;
                d->code = d->code << 8 | rc_get(d);
        }
        return bit;
}

/* @bits plain bits of @v, most significant first, each with a fresh even probability. */
static inline void rc_encode_plain(RcEncoder *e, unsigned v, unsigned bits) {
        for (unsigned k = bits; k-- > 0;) {
                RcProb even = RC_PROB_INIT;
                rc_encode(e, &even, v >> k & 1);
        }
}

static inline unsigned rc_decode_plain(RcDecoder *d, unsigned bits) {
        unsigned v = 0;
        for (unsigned k = 0; k < bits; k++) {
                RcProb even = RC_PROB_INIT;
                v = v << 1 | rc_decode(d, &even);
        }
        return v;
}
