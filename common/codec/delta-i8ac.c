/* SPDX-License-Identifier: MIT */
/*
 * The i8ac delta layout (delta.h): each byte's difference from its base byte, range-coded
 * (rangecoder.h) with a model that both sides keep from what they have already seen. The model
 * and its contexts are wire format; encode and decode below walk it in the same order.
 */

#include <string.h>

#include "delta-i8.h"
#include "delta-i8ac.h"
#include "le.h"
#include "macro.h"
#include "rangecoder.h"

#define ZERO_CTX 13     /* nonzero differences among the last 64, halved, at most 12 */
#define MAG_CTX 5       /* |base value|: 0, 1..15, 16..47, 48..89, 90..128 */
#define DIR_CTX 3       /* the recent leaning of differences against their base's sign */
#define UNARY 8         /* magnitudes 2..9 in unary; 10 and up: 7 plain bits of magnitude - 10 */

typedef struct Model {
        RcProb zero[ZERO_CTX];                  /* is the difference 0? */
        RcProb sign[3][MAG_CTX][DIR_CTX];       /* is it negative? by the base value's sign and size, the leaning */
        RcProb one[4];                          /* is its magnitude more than 1? by activity */
        RcProb unary[UNARY];                    /* is it more than 2, 3, .., 9? */
        uint64_t recent;                        /* bit k: the difference k + 1 elements back was nonzero */
        unsigned active;                        /* bits set in recent */
        int32_t lean;                           /* in [-256, 256]: > 0 when differences follow their base's sign */
} Model;

/* Where one element is coded: its contexts, from the model and its base value. */
typedef struct Site {
        RcProb *zero, *sign, *one;
        int sv;                                 /* the base value's sign: -1, 0, 1 */
        unsigned size;                          /* and its magnitude */
} Site;

static void probs_init(RcProb *p, size_t n) {
        for (size_t i = 0; i < n; i++)
                p[i] = RC_PROB_INIT;
}

static void model_init(Model *m) {
        probs_init(m->zero, ZERO_CTX);
        probs_init(&m->sign[0][0][0], sizeof(m->sign) / sizeof(RcProb));
        probs_init(m->one, ELEMENTSOF(m->one));
        probs_init(m->unary, UNARY);
        m->recent = 0;
        m->active = 0;
        m->lean = 0;
}

static inline Site site_of(Model *m, uint8_t base) {
        int v = (int8_t) base;
        unsigned a = (unsigned) (v < 0 ? -v : v);
        unsigned act = m->active;
        unsigned z = act >> 1 < ZERO_CTX - 1 ? act >> 1 : ZERO_CTX - 1;
        unsigned mag = a == 0 ? 0 : a < 16 ? 1 : a < 48 ? 2 : a < 90 ? 3 : 4;
        unsigned dir = m->lean < -64 ? 0 : m->lean > 64 ? 2 : 1;
        int sv = (v > 0) - (v < 0);
        return (Site) { &m->zero[z], &m->sign[sv + 1][mag][dir], &m->one[act >> 3 < 3 ? act >> 3 : 3], sv, a };
}

/* After element with difference @r (-128..127) of a base value seen through @s. */
static inline void model_update(Model *m, const Site *s, int r) {
        if (r != 0 && s->size >= 16) {
                int follows = (r > 0 ? 1 : -1) * s->sv;
                m->lean += (follows * 256 - m->lean) / 16;
        }
        m->active += (unsigned) (r != 0) - (unsigned) (m->recent >> 63);
        m->recent = m->recent << 1 | (r != 0);
}

static inline void encode_direct(RcEncoder *e, unsigned v, unsigned bits) {
        for (unsigned k = bits; k-- > 0;) {
                RcProb even = RC_PROB_INIT;
                rc_encode(e, &even, v >> k & 1);
        }
}

static inline unsigned decode_direct(RcDecoder *d, unsigned bits) {
        unsigned v = 0;
        for (unsigned k = 0; k < bits; k++) {
                RcProb even = RC_PROB_INIT;
                v = v << 1 | rc_decode(d, &even);
        }
        return v;
}

bool delta_i8ac_encode(const uint8_t *base, const uint8_t *target, size_t len, uint8_t *out) {
        Model m;
        RcEncoder e;

        if (len < DELTA_I8AC_MIN) {
                delta_i8_encode(base, target, len, out);
                return true;
        }
        model_init(&m);
        rc_encoder_init(&e, out + 4, len - 4);
        for (size_t i = 0; i < len; i++) {
                Site s = site_of(&m, base[i]);
                int r = (int8_t) (uint8_t) (target[i] - base[i]);
                rc_encode(&e, s.zero, r != 0);
                if (r != 0) {
                        unsigned mag = (unsigned) (r < 0 ? -r : r);
                        rc_encode(&e, s.sign, r < 0);
                        rc_encode(&e, s.one, mag > 1);
                        for (unsigned k = 2; mag > 1 && k < 2 + UNARY; k++) {
                                rc_encode(&e, &m.unary[k - 2], mag > k);
                                if (mag == k)
                                        break;
                        }
                        if (mag >= 2 + UNARY)
                                encode_direct(&e, mag - (2 + UNARY), 7);
                }
                model_update(&m, &s, r);
        }
        size_t n = rc_encoder_finish(&e);
        if (n > len - 4)
                return false;
        put_le32(out, (uint32_t) n);
        memset(out + 4 + n, 0, len - 4 - n);
        return true;
}

void delta_i8ac_decode(const uint8_t *base, const uint8_t *delta, size_t len, uint8_t *out) {
        Model m;
        RcDecoder d;

        if (len < DELTA_I8AC_MIN) {
                delta_i8_decode(base, delta, len, out);
                return;
        }
        uint32_t n = get_le32(delta);
        model_init(&m);
        /* A length past the group is not the encoder's: decoded all the same, the span's digest refuses it. */
        rc_decoder_init(&d, delta + 4, n < len - 4 ? n : len - 4);
        for (size_t i = 0; i < len; i++) {
                Site s = site_of(&m, base[i]);
                int r = 0;
                if (rc_decode(&d, s.zero)) {
                        bool negative = rc_decode(&d, s.sign);
                        unsigned mag = 1;
                        if (rc_decode(&d, s.one))
                                for (mag = 2; mag < 2 + UNARY && rc_decode(&d, &m.unary[mag - 2]); mag++)
                                        ;
                        if (mag == 2 + UNARY)
                                mag += decode_direct(&d, 7);
                        r = negative ? -(int) mag : (int) mag;
                }
                out[i] = (uint8_t) (base[i] + (unsigned) r);
                model_update(&m, &s, (int8_t) (uint8_t) r);
        }
}
