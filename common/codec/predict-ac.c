/* SPDX-License-Identifier: MIT */
/*
 * A lora span's residual, range-coded with the prediction's floats as context (predict-ac.h, the
 * definition). Encoding and decoding walk one model in one function, so they cannot drift apart.
 * Compiled with -ffp-contract=off: an element's place y must round the same on every machine.
 */

#include <limits.h>
#include <math.h>
#include <string.h>

#include "delta.h"
#include "dequant.h"
#include "ggml.h"
#include "le.h"
#include "macro.h"
#include "predict-ac.h"
#include "rangecoder.h"

#define STEPS_MAX 256   /* elements a block (q*_K) */
#define SUBS_MAX 32     /* sub-scales a block (q2_K: 16 scales, 16 mins) */
#define PLACES 32       /* where y falls within its step */
#define EDGE PLACES     /* no place: no usable scale, or y outside the type's steps */
#define UNARY 8         /* |r| = 2 .. 9 in unary; 10 and up: 8 plain bits of |r| - 10 */
#define WORD_BITS 16

/* Wire format: the fields ac_word() codes, each with contexts of its own. */
enum { WORD_D, WORD_M, WORD_SCALE, WORD_MIN, _WORD_MAX };

static bool blocks_of(uint32_t type, DeltaLayout *l, DeltaBlocks *B) {
        *l = delta_layout_for_ggml(type);
        return delta_blocks(*l, B);
}

bool predict_ac_supported(uint32_t type) {
        DeltaLayout l;
        DeltaBlocks B;
        return blocks_of(type, &l, &B);
}

typedef struct Model {
        RcProb word_zero[_WORD_MAX], word_sign[_WORD_MAX], word_len[_WORD_MAX][WORD_BITS - 1];
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

/* Field @k's difference @v: a word or a sub-scale (steps 1 and 2 of predict-ac.h). */
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

/* An element's residual @r in context @c (step 3). */
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

static float fp16_at(const uint8_t *p) {
        float f;
        dequantize_blocks(GGML_TYPE_F16, p, &f, 1);
        return f;
}

#define FALLBACK UINT_MAX    /* a guess that is the predicted block's step */

/* Element @w's context (step 3), its guess into @guess: a step, or FALLBACK; @i is 1/D of a usable D. */
_inline_ unsigned place(const DeltaBlocks *B, float i, float m, float w, unsigned *guess) {
        const unsigned top = (1u << B->q_bits) - 1;
        float y = (w - m) * i + (float) B->q_zero;

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

/*
 * A block's contexts and guesses (step 3), apart from the coder's serial chain: it runs faster so.
 * @blk holds the target block's words, @s its sub-scales; @pq the predicted block's steps, unpacked
 * here (with @ps) only when a guess falls back to them and @have_pq says they are not yet.
 */
_inline_ void places(DeltaLayout l, const DeltaBlocks *B, const uint8_t *blk, const uint8_t *s, const uint8_t *pb,
                     const float *w, bool have_pq, uint8_t *pq, uint8_t *ps, unsigned *c, unsigned *g) {
        const unsigned n_sub = B->n_q / B->q_sub;
        float d = fp16_at(blk + B->word_off[0]), m = B->n_words > 1 ? fp16_at(blk + B->word_off[1]) : 0.0f;
        bool fallback = false;

        for (unsigned j = 0, e = 0; j < n_sub; j++) {
                float dj = d, mj = B->n_s ? 0.0f : m;
                if (B->n_s) {
                        dj = d * (float) ((int) s[j] - (int) B->s_zero);
                        if (B->n_s > n_sub)
                                mj = -(m * (float) s[n_sub + j]);
                }
                if (dj == 0.0f || !isfinite(dj)) {
                        for (unsigned k = 0; k < B->q_sub; k++, e++) {
                                c[e] = EDGE;
                                g[e] = FALLBACK;
                        }
                        fallback = true;
                        continue;
                }
                float i = 1.0f / dj;
                for (unsigned k = 0; k < B->q_sub; k++, e++) {
                        c[e] = place(B, i, mj, w[e], &g[e]);
                        fallback |= g[e] == FALLBACK;
                }
        }
        if (fallback) {                         /* rare: the predicted block's steps are needed */
                if (!have_pq)
                        delta_blocks_unpack(l, pb, pq, ps);
                for (unsigned e = 0; e < B->n_q; e++)
                        if (g[e] == FALLBACK)
                                g[e] = pq[e];
        }
}

/*
 * Code (or, with @dec, decode into @out) one group: @pred and @w, the prediction; @target the
 * bytes to code (encoding only).
 */
_inline_ void walk(Ac *a, bool dec, DeltaLayout l, const DeltaBlocks *B, const float *w, const uint8_t *pred,
                   const uint8_t *target, size_t len, uint8_t *out) {
        const unsigned mask = (1u << B->q_bits) - 1, smask = (1u << B->s_bits) - 1;
        size_t n = len / B->unit;
        Model m;

        model_init(&m);
        for (size_t b = 0; b < n; b++, w += B->n_q) {
                const uint8_t *pb = pred + b * B->unit, *tb = dec ? NULL : target + b * B->unit;
                uint8_t blk[256], pq[STEPS_MAX], ps[SUBS_MAX], tq[STEPS_MAX] = { 0 }, ts[SUBS_MAX] = { 0 };
                uint8_t q[STEPS_MAX], sub[SUBS_MAX] = { 0 };
                unsigned c[STEPS_MAX], g[STEPS_MAX];

                memcpy(blk, dec ? pb : tb, B->unit);
                for (unsigned k = 0; k < B->n_words; k++) {
                        uint16_t p = get_le16(pb + B->word_off[k]), t = dec ? 0 : get_le16(tb + B->word_off[k]);
                        int v = ac_word(a, dec, &m, k, (int16_t) (uint16_t) (t - p));
                        put_le16(blk + B->word_off[k], (uint16_t) (p + (unsigned) v));
                }
                if (!dec)
                        delta_blocks_unpack(l, tb, tq, ts);
                if (B->n_s) {
                        delta_blocks_unpack(l, pb, pq, ps);
                        for (unsigned j = 0; j < B->n_s; j++) {
                                unsigned k = j < B->n_q / B->q_sub ? WORD_SCALE : WORD_MIN;
                                int v = ac_word(a, dec, &m, k, (int) ts[j] - (int) ps[j]);
                                sub[j] = (uint8_t) ((ps[j] + (unsigned) v) & smask);
                        }
                }
                places(l, B, blk, sub, pb, w, B->n_s > 0, pq, ps, c, g);
                for (unsigned e = 0; e < B->n_q; e++) {
                        int r = ac_step(a, dec, &m, c[e], (int) tq[e] - (int) g[e]);
                        q[e] = (uint8_t) ((g[e] + (unsigned) r) & mask);
                }
                if (dec) {
                        delta_blocks_pack(l, q, sub, blk);
                        memcpy(out + b * B->unit, blk, B->unit);
                }
        }
        for (size_t i = n * B->unit; i < len; i++) {
                unsigned v = ac_plain(a, dec, dec ? 0 : (unsigned) (target[i] - pred[i]) & 255u, 8);
                if (dec)
                        out[i] = (uint8_t) (pred[i] + v);
        }
}

bool predict_ac_encode(uint32_t type, const float *w, const uint8_t *pred, const uint8_t *target, size_t len,
                       uint8_t *out) {
        DeltaLayout l;
        DeltaBlocks B;
        Ac a;

        if (!blocks_of(type, &l, &B) || len < 4)
                return false;
        rc_encoder_init(&a.e, out + 4, len - 4);
        walk(&a, false, l, &B, w, pred, target, len, NULL);
        size_t n = rc_encoder_finish(&a.e);
        if (n > len - 4)
                return false;
        put_le32(out, (uint32_t) n);
        memset(out + 4 + n, 0, len - 4 - n);
        return true;
}

void predict_ac_decode(uint32_t type, const float *w, const uint8_t *pred, const uint8_t *delta, size_t len,
                       uint8_t *out) {
        DeltaLayout l;
        DeltaBlocks B;
        Ac a;

        if (!blocks_of(type, &l, &B) || len < 4) {            /* never coded so: the prediction stands (the span's digest judges it) */
                memcpy(out, pred, len);
                return;
        }
        size_t stream = len - 4;
        if (get_le32(delta) < stream)
                stream = get_le32(delta);
        rc_decoder_init(&a.d, delta + 4, stream);
        walk(&a, true, l, &B, w, pred, NULL, len, out);
}
