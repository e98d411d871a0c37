/* SPDX-License-Identifier: MIT */
/*
 * The i8ac delta layout (delta.h): each byte's difference from its base byte, range-coded
 * (rangecoder.h) with a model that both sides keep from what they have already seen. The model
 * and its contexts are wire format; encode and decode below walk it in the same order.
 */

#include <math.h>
#include <stdlib.h>
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

/* A rule of an i8acp group (delta.h): floats [dst, dst + 4n) predicted from the floats at src, times c. */
typedef struct FloatRule {
        uint32_t dst, n, src;
        uint32_t c;                             /* a float32's bits */
} FloatRule;

/*
 * Rule @r's prediction into @pred[dst, +4n): float k is float32(c * the float at @values + src + 4k),
 * little-endian, or @base's bytes where that product is a NaN (whose bits machines do not agree on).
 */
static void rule_predict(const FloatRule *r, const uint8_t *values, const uint8_t *base, uint8_t *pred) {
        float c;

        memcpy(&c, &r->c, sizeof(c));
        for (size_t k = 0; k < r->n; k++) {
                size_t at = r->dst + 4 * k;
                uint32_t v = get_le32(values + r->src + 4 * k), bits;
                float x, p;
                memcpy(&x, &v, sizeof(x));
                p = c * x;
                if (isnan(p)) {
                        memmove(pred + at, base + at, 4);
                        continue;
                }
                memcpy(&bits, &p, sizeof(bits));
                put_le32(pred + at, bits);
        }
}

/*
 * The coded stream of a group: the differences of @target from @pred (the base bytes, or i8acp's
 * prediction), into @out at @at (after the group's header); the stream's length goes at @out.
 */
static bool stream_encode(const uint8_t *pred, const uint8_t *target, size_t len, uint8_t *out, size_t at) {
        Model m;
        RcEncoder e;

        model_init(&m);
        rc_encoder_init(&e, out + at, len - at);
        for (size_t i = 0; i < len; i++) {
                Site s = site_of(&m, pred[i]);
                int r = (int8_t) (uint8_t) (target[i] - pred[i]);
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
                                rc_encode_plain(&e, mag - (2 + UNARY), 7);
                }
                model_update(&m, &s, r);
        }
        size_t n = rc_encoder_finish(&e);
        if (n > len - at)
                return false;
        put_le32(out, (uint32_t) n);
        memset(out + at + n, 0, len - at - n);
        return true;
}

bool delta_i8ac_encode(const uint8_t *base, const uint8_t *target, size_t len, uint8_t *out) {
        if (len < DELTA_I8AC_MIN) {
                delta_i8_encode(base, target, len, out);
                return true;
        }
        return stream_encode(base, target, len, out, 4);
}

/* Elements [@from, @to) of a group, each predicted by @pred[i] (which may be @out itself: it is read first). */
static inline __attribute__((always_inline)) void decode_range(Model *m, RcDecoder *d, const uint8_t *pred,
                                                                uint8_t *out, size_t from, size_t to) {
        for (size_t i = from; i < to; i++) {
                uint8_t p = pred[i];
                Site s = site_of(m, p);
                int r = 0;
                if (rc_decode(d, s.zero)) {
                        bool negative = rc_decode(d, s.sign);
                        unsigned mag = 1;
                        if (rc_decode(d, s.one))
                                for (mag = 2; mag < 2 + UNARY && rc_decode(d, &m->unary[mag - 2]); mag++)
                                        ;
                        if (mag == 2 + UNARY)
                                mag += rc_decode_plain(d, 7);
                        r = negative ? -(int) mag : (int) mag;
                }
                out[i] = (uint8_t) (p + (unsigned) r);
                model_update(m, &s, (int8_t) (uint8_t) r);
        }
}

/*
 * The inverse of stream_encode(), the stream at @delta + @at. Elements are predicted by @base, but
 * for each rule's destination: there the rule's prediction is written into @out first (its source
 * lies wholly before, so it is decoded already), and read back as each element's prediction
 * before the element overwrites it.
 */
static void stream_decode(const uint8_t *base, const uint8_t *delta, size_t len, size_t at, const FloatRule *rules,
                          size_t n_rules, uint8_t *out) {
        Model m;
        RcDecoder d;
        size_t i = 0;

        uint32_t n = get_le32(delta);
        model_init(&m);
        /* A length past the group is not the encoder's: decoded all the same, the span's digest refuses it. */
        rc_decoder_init(&d, delta + at, n < len - at ? n : len - at);
        for (size_t k = 0; k < n_rules; k++) {
                size_t end = rules[k].dst + 4 * (size_t) rules[k].n;
                decode_range(&m, &d, base, out, i, rules[k].dst);
                rule_predict(&rules[k], out, base, out);
                decode_range(&m, &d, out, out, rules[k].dst, end);
                i = end;
        }
        decode_range(&m, &d, base, out, i, len);
}

void delta_i8ac_decode(const uint8_t *base, const uint8_t *delta, size_t len, uint8_t *out) {
        if (len < DELTA_I8AC_MIN) {
                delta_i8_decode(base, delta, len, out);
                return;
        }
        stream_decode(base, delta, len, 4, NULL, 0, out);
}

/* ---- i8acp: floats predicted from floats before them --------------------------------------------- */

#define RULE_BYTES 16
#define HEADER(n) (5 + RULE_BYTES * (size_t) (n))      /* the stream's length, the rule count, the rules */

static void rule_store(const FloatRule *r, uint8_t *p) {
        put_le32(p, r->dst);
        put_le32(p + 4, r->n);
        put_le32(p + 8, r->src);
        put_le32(p + 12, r->c);
}

/*
 * The rules at the head of a group of @len bytes: their count, or -1 when they are not a valid
 * list (too many, past the group, a source not wholly before its destination, destinations out
 * of order or overlapping). The decoder does not decode such a group: the span's digest refuses it.
 */
static int rules_load(const uint8_t *delta, size_t len, FloatRule rules[DELTA_I8ACP_RULES_MAX]) {
        unsigned n = delta[4];
        uint64_t end = 0;

        if (n > DELTA_I8ACP_RULES_MAX || HEADER(n) > len)
                return -1;
        for (unsigned k = 0; k < n; k++) {
                const uint8_t *p = delta + HEADER(k);
                FloatRule r = { get_le32(p), get_le32(p + 4), get_le32(p + 8), get_le32(p + 12) };
                if (r.n == 0 || r.dst < end || (uint64_t) r.src + 4 * (uint64_t) r.n > r.dst ||
                    (uint64_t) r.dst + 4 * (uint64_t) r.n > len)
                        return -1;
                end = (uint64_t) r.dst + 4 * (uint64_t) r.n;
                rules[k] = r;
        }
        return (int) n;
}

void delta_i8acp_decode(const uint8_t *base, const uint8_t *delta, size_t len, uint8_t *out) {
        FloatRule rules[DELTA_I8ACP_RULES_MAX];

        if (len < DELTA_I8AC_MIN) {
                delta_i8_decode(base, delta, len, out);
                return;
        }
        int n = rules_load(delta, len, rules);
        if (n < 0) {
                memcpy(out, base, len);
                return;
        }
        stream_decode(base, delta, len, HEADER(n), rules, (size_t) n, out);
}

static float float_at(const uint8_t *p) {
        uint32_t bits = get_le32(p);
        float f;

        memcpy(&f, &bits, sizeof(f));
        return f;
}

static float float_of(uint32_t bits) {
        float f;

        memcpy(&f, &bits, sizeof(f));
        return f;
}

/* How many floats of @dst equal float32(@c * the float of @src at the same index), bit for bit. */
static size_t rule_matches(const uint8_t *src, const uint8_t *dst, size_t n, uint32_t c) {
        size_t hits = 0;

        for (size_t k = 0; k < n; k++) {
                float p = float_of(c) * float_at(src + 4 * k);
                uint32_t bits;
                memcpy(&bits, &p, sizeof(bits));
                hits += !isnan(p) && bits == get_le32(dst + 4 * k);
        }
        return hits;
}

/* The best rule for run @d from the earlier run @s (same count): its constant and how many it predicts. */
static size_t rule_fit(const uint8_t *target, const DeltaFloatRun *s, const DeltaFloatRun *d, uint32_t *ret_c) {
        const uint8_t *sp = target + s->offset, *dp = target + d->offset;
        size_t best = 0;

        for (size_t k = 0; k < d->count; k++) {
                float a = float_at(sp + 4 * k), b = float_at(dp + 4 * k);
                if (!isfinite(a) || !isfinite(b) || a == 0 || b == 0)
                        continue;
                /* The quotient, and its float neighbours: the constant the producer multiplied by is among them. */
                float c0 = (float) ((double) b / (double) a), c = c0;
                for (int step = 0; step < 5; step++) {
                        c = step == 0 ? c0 : step == 1 ? nextafterf(c0, INFINITY) : step == 2 ? nextafterf(c0, -INFINITY)
                            : step == 3 ? nextafterf(nextafterf(c0, INFINITY), INFINITY)
                                        : nextafterf(nextafterf(c0, -INFINITY), -INFINITY);
                        uint32_t bits;
                        memcpy(&bits, &c, sizeof(bits));
                        size_t hits = rule_matches(sp, dp, d->count, bits);
                        if (hits > best) {
                                best = hits;
                                *ret_c = bits;
                        }
                }
                break;
        }
        return best;
}

/*
 * The rules worth their 16 bytes: for each run, in order, the earlier run of the same count that
 * lies wholly before it and predicts most of its floats exactly (at least half, and 8).
 */
static size_t rules_find(const uint8_t *target, size_t len, const DeltaFloatRun *runs, size_t n_runs,
                         FloatRule rules[DELTA_I8ACP_RULES_MAX]) {
        size_t n = 0;
        uint64_t end = 0;

        for (size_t i = 0; i < n_runs && n < DELTA_I8ACP_RULES_MAX; i++) {
                const DeltaFloatRun *d = &runs[i];
                FloatRule best = {};
                size_t best_hits = 0;

                if (d->count == 0 || d->offset < end || (uint64_t) d->offset + 4 * (uint64_t) d->count > len)
                        continue;
                for (size_t j = 0; j < i; j++) {
                        const DeltaFloatRun *s = &runs[j];
                        uint32_t c = 0;
                        if (s->count != d->count || (uint64_t) s->offset + 4 * (uint64_t) s->count > d->offset)
                                continue;
                        size_t hits = rule_fit(target, s, d, &c);
                        if (hits > best_hits) {
                                best_hits = hits;
                                best = (FloatRule) { d->offset, d->count, s->offset, c };
                        }
                }
                if (best_hits >= 8 && 2 * best_hits >= d->count) {
                        rules[n++] = best;
                        end = (uint64_t) d->offset + 4 * (uint64_t) d->count;
                }
        }
        return n;
}

bool delta_i8acp_encode(const uint8_t *base, const uint8_t *target, size_t len, const DeltaFloatRun *runs,
                        size_t n_runs, uint8_t *out) {
        FloatRule rules[DELTA_I8ACP_RULES_MAX];

        if (len < DELTA_I8AC_MIN) {
                delta_i8_encode(base, target, len, out);
                return true;
        }
        size_t n = rules_find(target, len, runs, n_runs, rules);
        while (n > 0 && HEADER(n) + 16 > len)
                n--;                    /* a short group: no room for them */
        uint8_t *pred = malloc(len);
        if (!pred)
                return false;
        memcpy(pred, base, len);
        for (size_t k = 0; k < n; k++)
                rule_predict(&rules[k], target, base, pred);
        out[4] = (uint8_t) n;
        for (size_t k = 0; k < n; k++)
                rule_store(&rules[k], out + HEADER(k));
        bool fits = stream_encode(pred, target, len, out, HEADER(n));
        free(pred);
        return fits;
}
