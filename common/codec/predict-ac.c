/* SPDX-License-Identifier: MIT */
/*
 * A lora span's residual, range-coded with the prediction's floats as context (predict-ac.h, the
 * definition). Encoding and decoding walk one model in one function, so they cannot drift apart.
 * Compiled with -ffp-contract=off: an element's place y must round the same on every machine.
 */

#include <limits.h>
#include <math.h>
#include <string.h>

#include "dequant.h"
#include "ggml.h"
#include "le.h"
#include "macro.h"
#include "predict-ac.h"
#include "rangecoder.h"


#define STEPS 32        /* elements a block */
#define PLACES 32       /* where y falls within its step */
#define EDGE PLACES     /* no place: no usable scale, or y outside the type's steps */
#define UNARY 8         /* |r| = 2 .. 9 in unary; 10 and up: 8 plain bits of |r| - 10 */
#define WORD_BITS 16

typedef struct Kind {
        uint32_t type;
        uint8_t unit;           /* bytes a block */
        uint8_t n_words;        /* fp16 words at its head: d, then m */
        uint8_t bits;           /* a step's */
        uint8_t zero;           /* the step of 0 (z) */
        uint8_t qh_at;          /* q5: the fifth bits' 32-bit word (0: none) */
        uint8_t qs_at;          /* the low bits (nibbles), or q8_0's bytes */
} Kind;

static const Kind kinds[] = {
        { GGML_TYPE_Q4_0, 18, 1, 4, 8, 0, 2 },
        { GGML_TYPE_Q4_1, 20, 2, 4, 0, 0, 4 },
        { GGML_TYPE_Q5_0, 22, 1, 5, 16, 2, 6 },
        { GGML_TYPE_Q5_1, 24, 2, 5, 0, 4, 8 },
        { GGML_TYPE_Q8_0, 34, 1, 8, 128, 0, 2 },
};

static const Kind *kind_of(uint32_t type) {
        for (size_t i = 0; i < ELEMENTSOF(kinds); i++)
                if (kinds[i].type == type)
                        return &kinds[i];
        return NULL;
}

bool predict_ac_supported(uint32_t type) {
        return kind_of(type) != NULL;
}

typedef struct Model {
        RcProb word_zero[2], word_sign[2], word_len[2][WORD_BITS - 1];
        RcProb zero[PLACES + 1], sign[PLACES + 1], one[PLACES + 1], unary[UNARY];
} Model;

static void model_init(Model *m) {
        RcProb *p = &m->word_zero[0];
        for (size_t i = 0; i < sizeof(*m) / sizeof(RcProb); i++)
                p[i] = RC_PROB_INIT;
}

/* One coder for both directions: encoding codes @bit and returns it, decoding returns the bit it reads. */
typedef struct Ac {
        RcEncoder e;
        RcDecoder d;
} Ac;

_inline_ unsigned ac_bit(Ac *a, bool dec, RcProb *p, unsigned bit) {
        if (dec)
                return rc_decode(&a->d, p);
        rc_encode(&a->e, p, bit);
        return bit;
}

/* @bits plain bits of @v (rangecoder.h). */
_inline_ unsigned ac_plain(Ac *a, bool dec, unsigned v, unsigned bits) {
        if (dec)
                return rc_decode_plain(&a->d, bits);
        rc_encode_plain(&a->e, v, bits);
        return v & ((1u << bits) - 1);
}

/* Word @k's difference @v (step 1 of predict-ac.h). */
_inline_ int ac_word(Ac *a, bool dec, Model *m, unsigned k, int v) {
        if (!ac_bit(a, dec, &m->word_zero[k], v != 0))
                return 0;
        unsigned neg = ac_bit(a, dec, &m->word_sign[k], v < 0);
        unsigned mag = (unsigned) (v < 0 ? -v : v), b = bitlen(mag), len = 1;
        while (len < WORD_BITS && ac_bit(a, dec, &m->word_len[k][len - 1], b > len))
                len++;
        mag = 1u << (len - 1) | ac_plain(a, dec, mag, len - 1);
        return neg ? -(int) mag : (int) mag;
}

/* An element's residual @r in context @c (step 2). */
_inline_ int ac_step(Ac *a, bool dec, Model *m, unsigned c, int r) {
        if (!ac_bit(a, dec, &m->zero[c], r != 0))
                return 0;
        unsigned neg = ac_bit(a, dec, &m->sign[c], r < 0);
        unsigned mag = (unsigned) (r < 0 ? -r : r), got = 1;
        if (ac_bit(a, dec, &m->one[c], mag > 1)) {
                got = 2;
                while (got < 2 + UNARY && ac_bit(a, dec, &m->unary[got - 2], mag > got))
                        got++;
                if (got == 2 + UNARY)
                        got += ac_plain(a, dec, mag - got, 8);
        }
        return neg ? -(int) got : (int) got;
}

/* The steps of a block, and back (the element bytes only). */
static void steps_get(const Kind *K, const uint8_t *blk, unsigned q[STEPS]) {
        const uint8_t *qs = blk + K->qs_at;
        uint32_t qh = K->qh_at ? get_le32(blk + K->qh_at) : 0;

        for (unsigned e = 0; e < STEPS; e++) {
                if (K->bits == 8)
                        q[e] = qs[e] ^ 0x80u;
                else
                        q[e] = (e < 16 ? qs[e] & 15u : qs[e - 16] >> 4) | (qh >> e & 1) << 4;
        }
}

static void steps_put(const Kind *K, const unsigned q[STEPS], uint8_t *blk) {
        uint8_t *qs = blk + K->qs_at;
        uint32_t qh = 0;

        if (K->bits == 8) {
                for (unsigned e = 0; e < STEPS; e++)
                        qs[e] = (uint8_t) (q[e] ^ 0x80u);
                return;
        }
        for (unsigned e = 0; e < 16; e++)
                qs[e] = (uint8_t) ((q[e] & 15u) | (q[e + 16] & 15u) << 4);
        for (unsigned e = 0; e < STEPS; e++)
                qh |= (uint32_t) (q[e] >> 4 & 1) << e;
        if (K->qh_at)
                put_le32(blk + K->qh_at, qh);
}

static float fp16_at(const uint8_t *p) {
        float f;
        dequantize_blocks(GGML_TYPE_F16, p, &f, 1);
        return f;
}

#define FALLBACK UINT_MAX    /* a guess that is the predicted block's step */

/* Element @w's context (step 2), its guess into @guess: a step, or FALLBACK; @i is 1/d of a usable d. */
_inline_ unsigned place(const Kind *K, float i, float m, float w, unsigned *guess) {
        const unsigned top = (1u << K->bits) - 1;
        float y = (w - m) * i + (float) K->zero;

        if (!(fabsf(y) <= 0x1p20f)) {           /* NaN too */
                *guess = FALLBACK;
                return EDGE;
        }
        /* f = floor(y + 1/2), without a libm call: |u| <= 2^20 + 1/2, so the conversion is exact and defined. */
        float u = y + 0.5f;
        int fi = (int) u;
        fi -= (float) fi > u;
        if (fi < 0 || (unsigned) fi > top) {
                *guess = fi < 0 ? 0 : top;
                return EDGE;
        }
        *guess = (unsigned) fi;
        unsigned c = (unsigned) ((u - (float) fi) * (float) PLACES);
        return c < PLACES ? c : PLACES - 1;
}

/* A block's contexts and guesses (step 2), apart from the coder's serial chain: it runs faster so. */
_inline_ void places(const Kind *K, const uint8_t *blk, const uint8_t *pb, const float *w, unsigned c[STEPS],
                     unsigned g[STEPS]) {
        float d = fp16_at(blk), m = K->n_words > 1 ? fp16_at(blk + 2) : 0.0f;
        bool fallback = d == 0.0f || !isfinite(d);

        if (!fallback) {
                float i = 1.0f / d;
                for (unsigned e = 0; e < STEPS; e++) {
                        c[e] = place(K, i, m, w[e], &g[e]);
                        fallback |= g[e] == FALLBACK;
                }
        } else {
                for (unsigned e = 0; e < STEPS; e++) {
                        c[e] = EDGE;
                        g[e] = FALLBACK;
                }
        }
        if (fallback) {                         /* rare: the predicted block's steps are needed */
                unsigned pq[STEPS];
                steps_get(K, pb, pq);
                for (unsigned e = 0; e < STEPS; e++)
                        if (g[e] == FALLBACK)
                                g[e] = pq[e];
        }
}

/*
 * Code (or, with @dec, decode into @out) one group: @pred and @w, the prediction; @target the
 * bytes to code (encoding only).
 */
_inline_ void walk(Ac *a, bool dec, const Kind *K, const float *w, const uint8_t *pred, const uint8_t *target,
                   size_t len, uint8_t *out) {
        const unsigned mask = (1u << K->bits) - 1;
        size_t n = len / K->unit;
        Model m;

        model_init(&m);
        for (size_t b = 0; b < n; b++, w += STEPS) {
                const uint8_t *pb = pred + b * K->unit, *tb = dec ? NULL : target + b * K->unit;
                uint8_t blk[64];
                unsigned tq[STEPS] = { 0 }, q[STEPS], c[STEPS], g[STEPS];

                if (!dec)
                        memcpy(blk, tb, K->unit);
                for (unsigned k = 0; k < K->n_words; k++) {
                        uint16_t p = get_le16(pb + 2 * k), t = dec ? 0 : get_le16(tb + 2 * k);
                        int v = ac_word(a, dec, &m, k, (int16_t) (uint16_t) (t - p));
                        put_le16(blk + 2 * k, (uint16_t) (p + (unsigned) v));
                }
                places(K, blk, pb, w, c, g);
                if (!dec)
                        steps_get(K, tb, tq);
                for (unsigned e = 0; e < STEPS; e++) {
                        int r = ac_step(a, dec, &m, c[e], (int) tq[e] - (int) g[e]);
                        q[e] = (g[e] + (unsigned) r) & mask;
                }
                if (dec) {
                        steps_put(K, q, blk);
                        memcpy(out + b * K->unit, blk, K->unit);
                }
        }
        for (size_t i = n * K->unit; i < len; i++) {
                unsigned v = ac_plain(a, dec, dec ? 0 : (unsigned) (target[i] - pred[i]) & 255u, 8);
                if (dec)
                        out[i] = (uint8_t) (pred[i] + v);
        }
}

bool predict_ac_encode(uint32_t type, const float *w, const uint8_t *pred, const uint8_t *target, size_t len,
                       uint8_t *out) {
        const Kind *K = kind_of(type);
        Ac a;

        if (!K || len < 4)
                return false;
        rc_encoder_init(&a.e, out + 4, len - 4);
        walk(&a, false, K, w, pred, target, len, NULL);
        size_t n = rc_encoder_finish(&a.e);
        if (n > len - 4)
                return false;
        put_le32(out, (uint32_t) n);
        memset(out + 4 + n, 0, len - 4 - n);
        return true;
}

void predict_ac_decode(uint32_t type, const float *w, const uint8_t *pred, const uint8_t *delta, size_t len,
                       uint8_t *out) {
        const Kind *K = kind_of(type);
        Ac a;

        if (!K || len < 4) {            /* never coded so: the prediction stands (the span's digest judges it) */
                memcpy(out, pred, len);
                return;
        }
        size_t stream = len - 4;
        if (get_le32(delta) < stream)
                stream = get_le32(delta);
        rc_decoder_init(&a.d, delta + 4, stream);
        walk(&a, true, K, w, pred, NULL, len, out);
}
