/* SPDX-License-Identifier: MIT */
/* The lora candidate of a changed tensor (create-impl.h): its shape, factors and prediction, and the
 * form of its factors that makes it smallest. */

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "create-impl.h"
#include "fileio.h"
#include "dequant.h"
#include "ggml.h"
#include "lowrank.h"
#include "match.h"
#include "predict-ac.h"
#include "quant.h"

void code_lora_done(CodeLora *l) {
        free(l->a);
        free(l->b);
        lora_factors_free(l->factors);
        free(l->source[0]);
        free(l->source[1]);
        free(l->alt.a);
        free(l->alt.b);
        lora_factors_free(l->alt.factors);
        free(l->predicted);
        free(l->scratch);
        *l = (CodeLora) {};
}

static int read_factor(const Lora *lora, const GgufTensor *t, uint8_t **ret, TpError *err) {
        _cleanup_free_ uint8_t *buf = malloc(t->size ? t->size : 1);
        int r;

        if (!buf)
                return -ENOMEM;
        if ((r = pread_full(lora->fd, buf, t->size, t->offset)) < 0)
                return tp_error(err, r == -ENODATA ? -EIO : r, "%s: reading '%s': %s", lora->path, t->name,
                                strerror(r == -ENODATA ? EIO : -r));
        *ret = TAKE_PTR(buf);
        return 0;
}

/* The site of @a whose bytes are [@offset, +@length), or NULL. */
static const Site *site_around(const Artifact *a, uint64_t offset, uint64_t length) {
        for (size_t i = 0; i < a->n_sites; i++) {
                const Site *s = &a->sites[i];
                if (s->offset <= offset && offset - s->offset <= s->length && length <= s->length - (offset - s->offset))
                        return s;
        }
        return NULL;
}

/* The ggml float type of a site's values (any kind of model), or -1 when they are not F32, F16 or BF16. */
static int float_type(const Artifact *a, const Site *s) {
        switch (site_delta_layout(a, s)) {
        case DELTA_F32: return GGML_TYPE_F32;
        case DELTA_F16: return GGML_TYPE_F16;
        case DELTA_BF16: return GGML_TYPE_BF16;
        default: return -1;
        }
}

/*
 * An F32 factor of @n values stored as F16 instead, when the tensor it predicts is quantized: a step
 * of a quantized type is far coarser than F16's rounding of the factors, so the prediction barely
 * moves (the residual takes what does), and the factor costs half. Kept as F32 when a value is
 * beyond F16's range or more than 1 in 100 of the nonzero ones would lose precision as a subnormal.
 */
#define F16_MAX 65504.0f
#define F16_NORMAL_MIN 0x1p-14f
static int narrow_factor(uint32_t tensor_type, uint32_t *type, uint8_t **bytes, uint64_t *size) {
        uint64_t n = *size / sizeof(float), nonzero = 0, tiny = 0;

        if (*type != GGML_TYPE_F32 || ggml_type(tensor_type)->block_size == 1)
                return 0;
        _cleanup_free_ float *v = malloc(n ? n * sizeof(float) : 1);
        if (!v)
                return -ENOMEM;
        memcpy(v, *bytes, n * sizeof(float));  /* the adapter's F32: little-endian, as this machine's floats */
        for (uint64_t i = 0; i < n; i++) {
                float a = fabsf(v[i]);
                if (!(a <= F16_MAX))
                        return 0;
                nonzero += a != 0.0f;
                tiny += a != 0.0f && a < F16_NORMAL_MIN;
        }
        if (tiny > nonzero / 100)
                return 0;
        uint8_t *half = malloc(n ? n * 2 : 1);
        if (!half)
                return -ENOMEM;
        quantize_rows(GGML_TYPE_F16, v, half, 1, n);
        free(*bytes);
        *bytes = half;
        *size = n * 2;
        *type = GGML_TYPE_F16;
        return 0;
}

/* The adapter's factors of @pair, as it stores them (F32 ones maybe as F16: narrow_factor()); make_form()
 * makes others. 0 when they do not fit @ts. */
static int adapter_factors(Coder *c, const CreateOptions *o, const LoraPair *pair, const Site *ts, CodeLora *l) {
        int r;

        l->shape = (LoraShape) {
                .type = (uint32_t) ts->type,
                .in = pair->embd ? pair->b->ne[1] : pair->a->ne[0],
                .out = pair->embd ? pair->a->ne[1] : pair->b->ne[1],
                .rank = pair->rank,
                .a_type = pair->a->type,
                .b_type = pair->b->type,
                .embd = pair->embd,
                .factor = lora_factor(o->lora, o->lora_scale, pair->rank),
        };
        l->na = pair->a->size;
        l->nb = pair->b->size;
        if (l->na != lora_shape_elems(&l->shape, false) * ggml_type(l->shape.a_type)->type_size ||
            l->nb != lora_shape_elems(&l->shape, true) * ggml_type(l->shape.b_type)->type_size)
                return 0;
        if ((r = read_factor(o->lora, pair->a, &l->a, c->err)) < 0 || (r = read_factor(o->lora, pair->b, &l->b, c->err)) < 0 ||
            (r = narrow_factor(l->shape.type, &l->shape.a_type, &l->a, &l->na)) < 0 ||
            (r = narrow_factor(l->shape.type, &l->shape.b_type, &l->b, &l->nb)) < 0)
                return r;
        return 1;
}

/* @s's values as floats (a float type, @type). */
static int site_floats(const FileSet *set, const Site *s, uint32_t type, float **ret, TpError *err) {
        const GgmlType *t = ggml_type(type);
        uint64_t n = s->length / t->type_size;
        _cleanup_free_ uint8_t *raw = malloc(s->length ? s->length : 1);
        _cleanup_free_ float *f = malloc((n ? n : 1) * sizeof(float));
        int r;

        if (!raw || !f)
                return -ENOMEM;
        if ((r = fileset_pread(set, raw, s->length, s->offset)) < 0)
                return tp_error(err, r == -ENODATA ? -EIO : r, "reading '%s' at %" PRIu64, s->name, s->offset);
        dequantize_blocks(type, raw, f, n);
        *ret = TAKE_PTR(f);
        return 0;
}

/* Factors found in the change itself (lowrank.h), stored as F32: lora_a = Q, lora_b = P, factor 1. */
static int found_factors(Coder *c, const Site *bs, const Site *ts, uint32_t type, CodeLora *l) {
        _cleanup_free_ float *b = NULL, *t = NULL;
        float *p = NULL, *q = NULL;
        unsigned rank;
        int r;

        uint64_t n = ts->length / ggml_type(type)->type_size, cols = ts->row, rows = cols ? n / cols : 0;
        if (rows < 2 || cols < 2 || rows * cols != n || n > LOWRANK_MAX_ELEMENTS)
                return 0;
        if ((r = site_floats(c->base_files, bs, type, &b, c->err)) < 0 ||
            (r = site_floats(c->target_files, ts, type, &t, c->err)) < 0)
                return r;
        double ulp = type == GGML_TYPE_F32 ? 0x1p-23 : type == GGML_TYPE_F16 ? 0x1p-10 : 0x1p-7;
        if ((r = lowrank_find(b, t, rows, cols, LOWRANK_MAX_RANK, ulp, &p, &q, &rank)) <= 0)
                return r == -E2BIG ? 0 : r;
        l->shape = (LoraShape) { .type = type, .in = cols, .out = rows, .rank = rank, .a_type = GGML_TYPE_F32,
                                 .b_type = GGML_TYPE_F32, .factor = 1.0f };
        l->a = (uint8_t *) q;
        l->b = (uint8_t *) p;
        l->na = (uint64_t) rank * cols * sizeof(float);
        l->nb = rows * (uint64_t) rank * sizeof(float);
        return 1;
}

/*
 * The importance row of tensor @name for a span of @length bytes at @rel in it, when the target
 * was quantized with one (o->importance) and the span can carry it: a row of @s's length, a
 * quantizer that takes it, and whole rows of at most one group (predict.h). Else NULL: the span
 * is predicted without one (the residual makes up the difference).
 */
static const float *importance_row(const CreateOptions *o, const char *name, const LoraShape *s, uint64_t rel,
                                   uint64_t length) {
        const ImportanceRow *row = NULL;

        for (size_t i = 0; i < o->n_importance && !row; i++)
                if (strcmp(o->importance[i].name, name) == 0)
                        row = &o->importance[i];
        if (!row || row->n != s->in || !quant_weighted_supported(s->type))
                return NULL;
        LoraShape with = *s;
        with.importance = true;
        TpError ignored = {};
        uint64_t row_bytes = lora_shape_row_bytes(s);
        if (rel % row_bytes != 0 || length % row_bytes != 0 || lora_shape_check(&with, &ignored) < 0)
                return NULL;
        return row->values;
}

/* The exponent of the smallest power-of-two step that keeps @max within @k_max steps. */
static int step_exponent(float max, unsigned k_max) {
        int e;

        if (max == 0.0f)
                return 0;
        frexpf(max, &e);        /* max < 2^e, and k_max >= 1: the step is at most 2^e */
        e -= 8;                 /* k_max <= 127 < 2^7: at least 2^(e - 8) */
        while (ldexpf((float) k_max, e) < max)
                e++;
        return e;
}

/* @n elements @v of lora_b (@b) or lora_a as I8 units into @out: the steps, then the ks. 0 when a
 * step is beyond 2^127. */
static int to_i8(const LoraShape *s, bool b, const float *v, uint64_t n, unsigned k_max, uint8_t *out) {
        _cleanup_free_ float *max = calloc(s->rank, sizeof(float));
        _cleanup_free_ int *e = malloc(s->rank * sizeof(int));

        if (!max || !e)
                return -ENOMEM;
        for (uint64_t i = 0; i < n; i++) {
                uint64_t c = lora_shape_component(s, b, i);
                max[c] = fmaxf(max[c], fabsf(v[i]));
        }
        for (uint64_t c = 0; c < s->rank; c++) {
                e[c] = step_exponent(max[c], k_max);
                if (e[c] > 127)
                        return 0;
                e[c] = e[c] < -126 ? -126 : e[c];       /* a normal float (predict.h): tinier values round to fewer steps */
                out[c] = (uint8_t) (int8_t) e[c];
        }
        for (uint64_t i = 0; i < n; i++)
                out[s->rank + i] = (uint8_t) (int8_t) rintf(ldexpf(v[i], -e[lora_shape_component(s, b, i)]));
        return 1;
}

/*
 * Make CodeLora.alt @l's factors in another form, from its source: BF16, or I8 (predict.h) with
 * steps that keep every |k| <= @k_max (1 .. 127; the smaller, the coarser). A quantized tensor's
 * step is far coarser than such rounding while the change is small against the weights: the
 * residual takes the elements that move, and the factors cost less. 1 when made; 0 when there is
 * no such form: a float tensor's factors (its prediction must stay near exact), factors already
 * in @type, or ones that do not survive the rounding. -ENOMEM.
 */
static int make_form(CodeLora *l, uint32_t type, unsigned k_max) {
        LoraShape s = l->shape;
        _cleanup_free_ uint8_t *a = NULL, *b = NULL;
        uint8_t **bytes[2] = { &a, &b };
        uint64_t size[2];
        _cleanup_(lora_factors_freep) LoraFactors *f = NULL;
        TpError ignored = {};
        int r;

        if (!l->source[0] || (type == GGML_TYPE_BF16 && l->source_bf16))
                return 0;
        s.a_type = s.b_type = type;
        for (int k = 0; k < 2; k++) {
                uint64_t n = lora_shape_elems(&s, k);
                size[k] = lora_shape_units(&s, k) * ggml_type(type)->type_size;
                if (!(*bytes[k] = malloc(size[k])))
                        return -ENOMEM;
                if (type == GGML_TYPE_BF16)
                        quantize_rows(GGML_TYPE_BF16, l->source[k], *bytes[k], 1, n);
                else if ((r = to_i8(&s, k, l->source[k], n, k_max, *bytes[k])) <= 0)
                        return r;
        }
        if (lora_factors_new(&s, &f) < 0)
                return -ENOMEM;
        lora_factors_load(f, false, 0, a, lora_shape_units(&s, false));
        lora_factors_load(f, true, 0, b, lora_shape_units(&s, true));
        if (s.importance)
                memcpy(f->w, l->factors->w, s.in * sizeof(float));
        if (lora_factors_check(f, &ignored) < 0)
                return 0;
        free(l->alt.a);
        free(l->alt.b);
        lora_factors_free(l->alt.factors);
        l->alt.a = TAKE_PTR(a);
        l->alt.b = TAKE_PTR(b);
        l->alt.na = size[0];
        l->alt.nb = size[1];
        l->alt.a_type = l->alt.b_type = type;
        l->alt.factors = TAKE_PTR(f);
        return 1;
}

/* CodeLora.source: the factors as adapter_factors() stored them, as floats, for the other forms (make_form()). */
static int factor_source(CodeLora *l) {
        const uint8_t *from[2] = { l->a, l->b };
        const uint32_t types[2] = { l->shape.a_type, l->shape.b_type };

        for (int b = 0; b < 2; b++) {
                uint64_t n = lora_shape_elems(&l->shape, b);
                if (!(l->source[b] = malloc(n * sizeof(float))))
                        return -ENOMEM;
                dequantize_blocks(types[b], from[b], l->source[b], n);
        }
        l->source_bf16 = types[0] == GGML_TYPE_BF16 && types[1] == GGML_TYPE_BF16;
        return 0;
}

#define SWAP(x, y)                               \
        do {                                     \
                __typeof__(x) _t_ = (x);         \
                (x) = (y);                       \
                (y) = _t_;                       \
        } while (0)

/* Trade @l's factors for their other form (CodeLora.alt), and back. */
static void swap_form(CodeLora *l) {
        SWAP(l->a, l->alt.a);
        SWAP(l->b, l->alt.b);
        SWAP(l->na, l->alt.na);
        SWAP(l->nb, l->alt.nb);
        SWAP(l->shape.a_type, l->alt.a_type);
        SWAP(l->shape.b_type, l->alt.b_type);
        SWAP(l->factors, l->alt.factors);
}

/* @l's frame counted at the current level into @size: UINT64_MAX when a group does not fit its layout. */
static int count(Coder *c, const Plan *p, const CodeLora *l, uint64_t *size, uint8_t base_sha[32],
                 uint8_t new_sha[32]) {
        int r = code_span(c, p, true, false, l, NULL, -1, size, base_sha, new_sha);

        if (r == -E2BIG) {
                *size = UINT64_MAX;
                return 0;
        }
        return r;
}

/* Count @l's factors in @type (make_form()); keep them when they make it smaller than @best. 1
 * when kept, 0 when not (or there is no such form). */
static int try_form(Coder *c, const Plan *p, CodeLora *l, uint32_t type, unsigned k_max, uint64_t *best,
                    uint8_t base_sha[32], uint8_t new_sha[32]) {
        uint64_t size;
        int r;

        if ((r = make_form(l, type, k_max)) <= 0)
                return r;
        swap_form(l);
        if ((r = count(c, p, l, &size, base_sha, new_sha)) < 0)
                return r;
        if (size < *best) {
                *best = size;
                return 1;
        }
        swap_form(l);
        return 0;
}

/* The residual's coder: range-coded (shape.ac) or the layout's planes, whichever is smaller; its size into @best. */
static int pick_coder(Coder *c, const Plan *p, CodeLora *l, uint64_t *best, uint8_t base_sha[32], uint8_t new_sha[32]) {
        bool can_ac = l->shape.ac, ac = false;
        uint64_t size;
        int r;

        *best = UINT64_MAX;
        for (int k = 0; k < (can_ac ? 2 : 1); k++) {
                l->shape.ac = k == 1;
                if ((r = count(c, p, l, &size, base_sha, new_sha)) < 0)
                        return r;
                if (size < *best) {
                        *best = size;
                        ac = l->shape.ac;
                }
        }
        l->shape.ac = ac;
        return 0;
}

/* The factors' form: as stored (of size @best), BF16, then I8 ever coarser while each is the
 * smallest yet; its size into @best. */
static int pick_form(Coder *c, const Plan *p, CodeLora *l, uint64_t *best, uint8_t base_sha[32], uint8_t new_sha[32]) {
        int r;

        if ((r = try_form(c, p, l, GGML_TYPE_BF16, 0, best, base_sha, new_sha)) < 0)
                return r;
        for (unsigned k_max = 127; k_max >= 1; k_max /= 2)
                if ((r = try_form(c, p, l, GGML_TYPE_I8, k_max, best, base_sha, new_sha)) <= 0)
                        break;
        return r < 0 ? r : 0;
}

int code_lora_decide(Coder *c, const Plan *p, CodeLora *l, uint64_t *ret_size, uint8_t base_sha[32], uint8_t new_sha[32]) {
        int r;

        if ((r = pick_coder(c, p, l, ret_size, base_sha, new_sha)) < 0 || !l->source[0])    /* no other form */
                return r;
        /* The forms are compared at the level asked for: screening's fast one misjudges them against
         * each other (BF16's planes gain more from zstd -19 than int8s do: some 5% of a span). */
        if (c->screening) {
                ZSTD_CCtx_setParameter(c->cctx, ZSTD_c_compressionLevel, c->level);
                if ((r = count(c, p, l, ret_size, base_sha, new_sha)) < 0)
                        return r;
        }
        r = pick_form(c, p, l, ret_size, base_sha, new_sha);
        if (!c->screening || r < 0)
                return r;
        /* Screening compares the other candidates' counts at its level: the chosen form's too. */
        ZSTD_CCtx_setParameter(c->cctx, ZSTD_c_compressionLevel, c->screen_level);
        return count(c, p, l, ret_size, base_sha, new_sha);
}

int code_lora_prepare(Coder *c, const CreateOptions *o, const Artifact *base, const Artifact *target, const Plan *p,
                      bool importance, CodeLora *ret) {
        CodeLora l = {};
        int r;

        *ret = l;
        if ((!o->lora && !o->lowrank) || (importance && o->n_importance == 0) || p->site < 0 || p->copy ||
            p->ref_length > 0 || p->layout == _DELTA_LAYOUT_INVALID)
                return 0;
        const Site *ts = &target->sites[p->site];
        if (p->offset < ts->offset || p->length > ts->length - (p->offset - ts->offset))
                return 0;
        /* The base tensor of the same name and type under the plan's base bytes, at the same place. */
        const Site *bs = site_around(base, p->base_offset, p->length);
        if (!bs || strcmp(bs->name, ts->name) != 0 || bs->type != ts->type || bs->length != ts->length ||
            p->base_offset - bs->offset != p->offset - ts->offset)
                return 0;

        /* The adapter's factors for a GGUF tensor it adapts; else, asked for, those the change itself has. */
        const LoraPair *pair = o->lora && target->kind == ARTIFACT_GGUF ? lora_find(o->lora, ts->name) : NULL;
        int ftype = float_type(target, ts);
        if (pair && ts->type >= 0 && ggml_type((uint32_t) ts->type))
                r = adapter_factors(c, o, pair, ts, &l);
        else if (!pair && o->lowrank && ftype >= 0)
                r = found_factors(c, bs, ts, (uint32_t) ftype, &l);
        else
                r = 0;
        if (r <= 0)
                goto fail;

        const GgmlType *gt = ggml_type(l.shape.type);
        TpError ignored = {};
        uint64_t rel = p->offset - ts->offset;
        if (lora_shape_check(&l.shape, &ignored) < 0 || delta_layout_for_ggml(l.shape.type) != p->layout ||
            l.shape.in * l.shape.out / gt->block_size * gt->type_size != ts->length || rel % gt->type_size != 0 ||
            p->length % gt->type_size != 0) {
                r = 0;
                goto fail;
        }
        l.first_block = rel / gt->type_size;
        const float *w = importance ? importance_row(o, ts->name, &l.shape, rel, p->length) : NULL;
        if (importance && !w) {
                r = 0;
                goto fail;
        }
        l.shape.importance = w != NULL;
        l.shape.ac = predict_ac_supported(l.shape.type);
        if ((r = lora_factors_new(&l.shape, &l.factors)) < 0)
                goto fail;
        lora_factors_load(l.factors, false, 0, l.a, lora_shape_elems(&l.shape, false));
        lora_factors_load(l.factors, true, 0, l.b, lora_shape_elems(&l.shape, true));
        if (w)
                memcpy(l.factors->w, w, l.shape.in * sizeof(float));
        if ((r = lora_factors_check(l.factors, c->err)) < 0) {
                r = tp_error_prefix(c->err, r, "%s: '%s'", pair ? o->lora->path : "the change found", ts->name);
                goto fail;
        }
        if (gt->block_size > 1 && (r = factor_source(&l)) < 0)
                goto fail;
        l.predicted = malloc(c->group_max);
        l.scratch = malloc(lora_predict_scratch(l.factors, c->group_max / gt->type_size) * sizeof(float));
        if (!l.predicted || !l.scratch) {
                r = -ENOMEM;
                goto fail;
        }
        *ret = l;
        return 1;
fail:
        code_lora_done(&l);
        return r;
}

int code_lora_factors(Coder *c, const CodeLora *l, int fd, uint64_t *written) {
        uint64_t nw = l->shape.importance ? l->shape.in : 0;
        _cleanup_free_ uint8_t *w = malloc(nw ? nw * sizeof(float) : 1);
        const uint8_t *parts[3] = { l->a, l->b, w };
        const uint64_t sizes[3] = { l->na, l->nb, nw * sizeof(float) };
        const size_t widths[3] = { ggml_type(l->shape.a_type)->type_size, ggml_type(l->shape.b_type)->type_size,
                                   sizeof(float) };
        int r;

        if (!w)
                return -ENOMEM;
        /* The importance row's floats as little-endian bytes, as a device gathers them. */
        for (uint64_t i = 0; i < nw; i++) {
                uint32_t bits;
                memcpy(&bits, &l->factors->w[i], sizeof(bits));
                for (unsigned k = 0; k < sizeof(bits); k++)
                        w[i * sizeof(bits) + k] = (uint8_t) (bits >> (8 * k));
        }
        for (int k = 0; k < 3; k++) {
                /* As byte planes (predict.h): the factors' bytes, rearranged. */
                size_t width = widths[k];
                _cleanup_free_ uint8_t *planes = malloc(sizes[k] ? sizes[k] : 1);
                if (!planes)
                        return -ENOMEM;
                byte_planes_split(parts[k], sizes[k] / width, width, planes);
                if ((r = code_frame_prefix(c, planes, sizes[k], fd, written)) < 0)
                        return r;
        }
        return 0;
}

void code_lora_predict(const CodeLora *l, uint64_t pos, const uint8_t *base, size_t n) {
        const GgmlType *t = ggml_type(l->shape.type);
        lora_predict(l->factors, l->first_block + pos / t->type_size, base, n / t->type_size, l->scratch, l->predicted);
}

int create_check_lora(const Lora *lora, const Artifact *target, TpError *err) {
        for (size_t i = 0; i < lora->n_pairs; i++) {
                const LoraPair *pair = &lora->pairs[i];
                const Site *t = NULL;
                for (size_t k = 0; k < target->n_sites && !t; k++)
                        if (strcmp(target->sites[k].name, pair->target) == 0)
                                t = &target->sites[k];
                if (!t)
                        return tp_error(err, -EINVAL, "%s: the task model has no tensor '%s' (an adapter for another "
                                        "model?)", lora->path, pair->target);
                const GgmlType *gt = t->type >= 0 ? ggml_type((uint32_t) t->type) : NULL;
                uint64_t in = pair->embd ? pair->b->ne[1] : pair->a->ne[0], out = pair->embd ? pair->a->ne[1] : pair->b->ne[1];
                if (!gt || in == 0 || in > UINT32_MAX || out > UINT32_MAX || in % gt->block_size != 0 ||
                    in * out / gt->block_size * gt->type_size != t->length)
                        return tp_error(err, -EINVAL, "%s: '%s' is %" PRIu64 " bytes of %s in the task model, but the "
                                        "adapter's factors make [%" PRIu64 ", %" PRIu64 "] (an adapter for another model?)",
                                        lora->path, pair->target, t->length, gt ? gt->name : "an unknown type", in, out);
        }
        return 0;
}
