/* SPDX-License-Identifier: MIT */
/* The prediction of lora spans (predict.h). Compiled with -ffp-contract=off: the sums round as written. */

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "delta.h"
#include "dequant.h"
#include "ggml.h"
#include "predict.h"
#include "predict-ac.h"
#include "product.h"
#include "quant.h"

static bool factor_type(uint32_t t) {
        return t == GGML_TYPE_F32 || t == GGML_TYPE_F16 || t == GGML_TYPE_BF16 || t == GGML_TYPE_I8;
}

/* An I8 factor's steps: 2^e, a normal float, so k · 2^e is exact (predict.h). */
#define STEP_EXP_MIN (-126)

int lora_shape_check(const LoraShape *s, TpError *err) {
        const GgmlType *t = ggml_type(s->type);

        if (!t || !dequant_supported(s->type) || !quant_supported(s->type))
                return tp_error(err, -EBADMSG, "a lora span of ggml type %" PRIu32 " (%s): no predictor for it", s->type,
                                t ? t->name : "unknown");
        if (s->in == 0 || s->out == 0 || s->in % t->block_size != 0)
                return tp_error(err, -EBADMSG, "a lora span's tensor of %" PRIu64 " rows of %" PRIu64 " %s elements: "
                                "a row must be whole %u-element blocks", s->out, s->in, t->name, t->block_size);
        if (s->rank == 0 || s->rank > PREDICT_MAX_RANK)
                return tp_error(err, -EBADMSG, "a lora span of rank %" PRIu64 " (expected 1 .. %d)", s->rank,
                                PREDICT_MAX_RANK);
        if (!factor_type(s->a_type) || !factor_type(s->b_type))
                return tp_error(err, -EBADMSG, "a lora span's factors must be F32, F16, BF16 or I8");
        if (!isfinite(s->factor))
                return tp_error(err, -EBADMSG, "a lora span's factor is not finite");
        /* rank <= 1024: the products cannot overflow before the comparison says no. */
        if (s->in > PREDICT_MAX_FACTOR_FLOATS || s->out > PREDICT_MAX_FACTOR_FLOATS ||
            (s->in + s->out) * s->rank > PREDICT_MAX_FACTOR_FLOATS)
                return tp_error(err, -EBADMSG, "a lora span's factors of (%" PRIu64 " + %" PRIu64 ") x rank %" PRIu64
                                " floats exceed the cap of %u", s->in, s->out, s->rank, PREDICT_MAX_FACTOR_FLOATS);
        if (s->ac && !predict_ac_supported(s->type))
                return tp_error(err, -EBADMSG, "a lora span of %s has its residual coded 'ac', which only the "
                                "quantized types have", t->name);
        if (s->importance && !quant_weighted_supported(s->type))
                return tp_error(err, -EBADMSG, "a lora span of %s carries an importance row, but its quantizer "
                                "takes none", t->name);
        if (s->importance && lora_shape_row_bytes(s) > delta_group_bytes(delta_layout_for_ggml(s->type)))
                return tp_error(err, -EBADMSG, "a lora span with an importance row has rows of %" PRIu64 " bytes, "
                                "more than one group (%zu)", lora_shape_row_bytes(s),
                                delta_group_bytes(delta_layout_for_ggml(s->type)));
        return 0;
}

uint64_t lora_shape_row_bytes(const LoraShape *s) {
        const GgmlType *t = ggml_type(s->type);
        return s->in / t->block_size * t->type_size;
}

size_t lora_shape_group_bytes(const LoraShape *s, size_t group) {
        if (!s->importance)
                return group;
        size_t row = (size_t) lora_shape_row_bytes(s), rows = group / row;
        return (rows ? rows : 1) * row;
}

/* lora_a is ne [in, rank] (token_embd: [rank, out]); lora_b ne [rank, out] (token_embd: [rank, in]). */
static uint64_t a_elems(const LoraShape *s) {
        return (s->embd ? s->out : s->in) * s->rank;
}

static uint64_t b_elems(const LoraShape *s) {
        return (s->embd ? s->in : s->out) * s->rank;
}

uint64_t lora_shape_units(const LoraShape *s, bool b) {
        return (b ? b_elems(s) : a_elems(s)) + ((b ? s->b_type : s->a_type) == GGML_TYPE_I8 ? s->rank : 0);
}

uint64_t lora_shape_a_bytes(const LoraShape *s) {
        return lora_shape_units(s, false) * ggml_type(s->a_type)->type_size;
}

uint64_t lora_shape_factor_bytes(const LoraShape *s) {
        return lora_shape_a_bytes(s) + lora_shape_units(s, true) * ggml_type(s->b_type)->type_size +
               (s->importance ? s->in * sizeof(float) : 0);
}

LoraFactors *lora_factors_free(LoraFactors *f) {
        if (!f)
                return NULL;
        free(f->p);
        free(f->q);
        free(f->w);
        free(f);
        return NULL;
}

uint64_t lora_shape_elems(const LoraShape *s, bool b) {
        return b ? b_elems(s) : a_elems(s);
}

uint64_t lora_shape_component(const LoraShape *s, bool b, uint64_t e) {
        return !b && !s->embd ? e / s->in : e % s->rank;
}

int lora_factors_new(const LoraShape *s, LoraFactors **ret) {
        _cleanup_(lora_factors_freep) LoraFactors *f = calloc(1, sizeof(*f));

        if (!f)
                return -ENOMEM;
        f->shape = *s;
        f->p = malloc(s->out * s->rank * sizeof(float));
        f->q = malloc(s->rank * s->in * sizeof(float));
        if (!f->p || !f->q || (s->importance && !(f->w = malloc(s->in * sizeof(float)))))
                return -ENOMEM;
        *ret = TAKE_PTR(f);
        return 0;
}

/* Where element @e of lora_b (@b) or lora_a goes: P row by row, Q row by row, token_embd's lora_b transposed. */
static float *factor_slot(LoraFactors *f, bool b, uint64_t e) {
        const LoraShape *s = &f->shape;
        if (s->embd && b)
                return &f->q[(e % s->rank) * s->in + e / s->rank];
        return (b != s->embd ? f->p : f->q) + e;
}

/* Unit @u of I8 factor lora_b (@b) or lora_a, @byte: a step's exponent, or an element's k, whose
 * value is k · its component's step (predict.h). */
static void load_i8(LoraFactors *f, bool b, uint64_t u, uint8_t byte) {
        const LoraShape *s = &f->shape;

        if (u < s->rank) {
                f->steps[b][u] = (int8_t) byte;
                return;
        }
        uint64_t e = u - s->rank;
        int x = f->steps[b][lora_shape_component(s, b, e)];
        /* 2^x from its bits; an x below the normal floats' is refused by lora_factors_check(). */
        uint32_t bits = (uint32_t) ((x < STEP_EXP_MIN ? STEP_EXP_MIN : x) + 127) << 23;
        float step;

        memcpy(&step, &bits, sizeof(step));
        *factor_slot(f, b, e) = (float) (int8_t) byte * step;
}

void lora_factors_load(LoraFactors *f, bool b, uint64_t first, const uint8_t *bytes, size_t n) {
        const LoraShape *s = &f->shape;
        uint32_t type = b ? s->b_type : s->a_type;
        float buf[256];

        if (type == GGML_TYPE_I8) {
                for (size_t j = 0; j < n; j++)
                        load_i8(f, b, first + j, bytes[j]);
                return;
        }

        /* Not embd: lora_b ne [rank, out] is P row by row, lora_a ne [in, rank] is Q row by row.
         * token_embd: lora_a ne [rank, out] is P; lora_b ne [rank, in] is Qᵀ. */
        if (!(s->embd && b)) {
                dequantize_blocks(type, bytes, (b != s->embd ? f->p : f->q) + first, n);
                return;
        }
        for (size_t done = 0; done < n;) {
                size_t k = n - done < 256 ? n - done : 256;
                dequantize_blocks(type, bytes + done * ggml_type(type)->type_size, buf, k);
                for (size_t j = 0; j < k; j++) {
                        uint64_t e = first + done + j, i = e / s->rank, r = e % s->rank;
                        f->q[r * s->in + i] = buf[j];
                }
                done += k;
        }
}

/* Byte @plane of a value whose bits @slot gathers. */
static void load_byte(float *slot, unsigned plane, uint8_t byte) {
        uint32_t bits = 0;
        if (plane > 0)
                memcpy(&bits, slot, sizeof(bits));
        bits |= (uint32_t) byte << (8 * plane);
        memcpy(slot, &bits, sizeof(bits));
}

void lora_factors_load_plane(LoraFactors *f, bool b, unsigned plane, uint64_t first, const uint8_t *bytes, size_t n) {
        if ((b ? f->shape.b_type : f->shape.a_type) == GGML_TYPE_I8) {
                /* One plane: the bytes themselves. Its steps come first, so its elements' values are known at once. */
                for (size_t j = 0; j < n; j++)
                        load_i8(f, b, first + j, bytes[j]);
                return;
        }
        for (size_t j = 0; j < n; j++)
                load_byte(factor_slot(f, b, first + j), plane, bytes[j]);
}

void lora_factors_load_importance_plane(LoraFactors *f, unsigned plane, uint64_t first, const uint8_t *bytes, size_t n) {
        for (size_t j = 0; j < n; j++)
                load_byte(&f->w[first + j], plane, bytes[j]);
}

/* @n slots of @v hold the bits of @type elements (lora_factors_load_plane()): now their values.
 * I8 elements have theirs already. */
static void settle(float *v, uint64_t n, uint32_t type) {
        const size_t width = ggml_type(type)->type_size;
        uint8_t raw[256 * 4];

        if (type == GGML_TYPE_I8)
                return;
        for (uint64_t done = 0; done < n;) {
                size_t k = n - done < 256 ? (size_t) (n - done) : 256;
                for (size_t j = 0; j < k; j++) {
                        uint32_t bits;
                        memcpy(&bits, &v[done + j], sizeof(bits));
                        for (size_t i = 0; i < width; i++)
                                raw[j * width + i] = (uint8_t) (bits >> (8 * i));
                }
                dequantize_blocks(type, raw, v + done, k);
                done += k;
        }
}

void lora_factors_settle(LoraFactors *f) {
        const LoraShape *s = &f->shape;
        settle(f->p, s->out * s->rank, s->embd ? s->a_type : s->b_type);
        settle(f->q, s->rank * s->in, s->embd ? s->b_type : s->a_type);
        /* The importance row is F32: its gathered bits are its values already. */
}

void byte_planes_split(const uint8_t *in, size_t n, size_t width, uint8_t *out) {
        for (size_t i = 0; i < width; i++)
                for (size_t j = 0; j < n; j++)
                        out[i * n + j] = in[j * width + i];
}

int lora_factors_check(const LoraFactors *f, TpError *err) {
        const LoraShape *s = &f->shape;

        for (int b = 0; b < 2; b++)
                for (uint64_t c = 0; (b ? s->b_type : s->a_type) == GGML_TYPE_I8 && c < s->rank; c++)
                        if (f->steps[b][c] < STEP_EXP_MIN)
                                return tp_error(err, -EDOM, "the lora factor %s's step %" PRIu64 " is 2^%d (expected "
                                                "2^%d .. 2^127)", b ? "lora_b" : "lora_a", c, f->steps[b][c],
                                                STEP_EXP_MIN);

        for (uint64_t i = 0; i < s->out * s->rank; i++)
                if (!isfinite(f->p[i]))
                        return tp_error(err, -EDOM, "the lora factor %s holds NaN or infinity",
                                        s->embd ? "lora_a" : "lora_b");
        for (uint64_t i = 0; i < s->rank * s->in; i++)
                if (!isfinite(f->q[i]))
                        return tp_error(err, -EDOM, "the lora factor %s holds NaN or infinity",
                                        s->embd ? "lora_b" : "lora_a");
        for (uint64_t i = 0; f->w && i < s->in; i++)
                if (!isfinite(f->w[i]) || f->w[i] < 0)
                        return tp_error(err, -EDOM, "the importance row's value %" PRIu64 " is %g (expected a finite "
                                        "number, not negative)", i, (double) f->w[i]);
        return 0;
}

size_t lora_predict_scratch(const LoraFactors *f, size_t nblocks) {
        /* The group's floats, and one row's accumulator. */
        return nblocks * ggml_type(f->shape.type)->block_size + f->shape.in;
}

/* Elements [i0, i1) of row @o: x += f · Σ_k P[o][k] · Q[k][i], in the fold's order. */
static void add_product(const LoraFactors *f, uint64_t o, uint64_t i0, uint64_t i1, float *x, float *acc) {
        const LoraShape *s = &f->shape;
        const float *p = f->p + o * s->rank;
        uint64_t n = i1 - i0;

        rank_product(p, f->q + i0, s->in, s->rank, acc, n);
        for (uint64_t i = 0; i < n; i++) {
                float d = s->factor * acc[i];
                float w = x[i] + d;
                x[i] = isfinite(w) ? w : 0.0f;  /* the quantizers take finite floats: see predict.h */
        }
}

void lora_predict(const LoraFactors *f, uint64_t block0, const uint8_t *base, size_t nblocks, float *scratch,
                  uint8_t *out) {
        const LoraShape *s = &f->shape;
        const GgmlType *t = ggml_type(s->type);
        uint64_t bs = t->block_size, e0 = block0 * bs, e1 = e0 + nblocks * bs;
        float *x = scratch, *acc = scratch + nblocks * bs;

        dequantize_blocks(s->type, base, x, nblocks);
        /* Row by row: a block never straddles two rows (rows are whole blocks). */
        for (uint64_t e = e0; e < e1;) {
                uint64_t o = e / s->in, i0 = e % s->in, i1 = e1 - e < s->in - i0 ? i0 + (e1 - e) : s->in;
                add_product(f, o, i0, i1, x + (e - e0), acc);
                e += i1 - i0;
        }
        /* Blocks are quantized each on its own: nblocks rows of one block give the row's bytes.
         * With the importance row, whole rows as llama-quantize quantizes them (predict.h). */
        if (f->w)
                quantize_rows_weighted(s->type, x, out, (e1 - e0) / s->in, s->in, f->w);
        else
                quantize_rows(s->type, x, out, nblocks, bs);
}
