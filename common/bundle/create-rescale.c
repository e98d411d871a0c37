/* SPDX-License-Identifier: MIT */
/*
 * The rescale candidate of a changed 8-bit tensor (create-impl.h, codec/rescale.h): per
 * channel, the ratio and offset that predict the task's values from the base's best.
 *
 * Where the values come from. A fine-tune moves a quantized tensor in two ways: its values
 * change a little, and its scale changes, which moves every value of a channel in proportion
 * (a per-tensor scale whose maximum grew, a folded BatchNorm whose statistics moved). The graph
 * names the tensor's scale and zero point (onnx_quant_use_of()), so the producer knows its
 * axis, its zero points, and the ratio of the base's scale to the task's. That ratio is what
 * re-quantizing the base's values would give; where the float values themselves moved in
 * proportion (a BatchNorm folded into per-tensor scaled weights), the ratio the values show is
 * another. So each channel gets the best of three, counted on the values themselves:
 *   - unchanged (R = 1, O = 0): the plain delta, never worse than it;
 *   - the scales' ratio: r = scale_base / scale_task, offset z_task - r * z_base;
 *   - the least-squares ratio of (task - z_task) to (base - z_base), the same offset form.
 * Channels are tried along the scale's axis, the first and the last (a per-tensor scale says
 * nothing of where a conv's output channels are), and the cheapest layout is kept.
 */

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "create-impl.h"
#include "dequant.h"
#include "fileio.h"
#include "ggml.h"
#include "onnx.h"

#define CANDIDATES 3                    /* unchanged, the scales' ratio, the fitted ratio */
#define CHUNK (1u << 20)

/* What the graph says about one tensor: per quantization channel, scale and zero point. */
typedef struct QuantValues {
        uint64_t count;                 /* 1 (per tensor) or the dims[axis] of the tensor */
        double *scale;                  /* NULL when unreadable */
        int32_t *zero;                  /* [count]: zeros when the node has none */
} QuantValues;

static void quant_values_done(QuantValues *v) {
        free(v->scale);
        free(v->zero);
        *v = (QuantValues) {};
}

static const Site *site_named(const Artifact *a, const char *name) {
        for (size_t i = 0; name && i < a->n_sites; i++)
                if (strcmp(a->sites[i].name, name) == 0)
                        return &a->sites[i];
        return NULL;
}

/* The product of dims [from, n_dims), UINT64_MAX when it overflows. */
static uint64_t dims_product(const ArtifactQuant *q, uint32_t from) {
        uint64_t n = 1;
        for (uint32_t k = from; k < q->n_dims; k++)
                if (__builtin_mul_overflow(n, q->dims[k], &n))
                        return UINT64_MAX;
        return n;
}

/* The scale and zero point sites of @q in @a, as numbers. Returns 0 with v->count 0 when unusable. */
static int quant_values(const FileSet *files, const Artifact *a, const ArtifactQuant *q, bool is_signed,
                        QuantValues *v) {
        const Site *scale = site_named(a, q->scale), *zero = site_named(a, q->zero_point);
        uint64_t per_axis = q->n_dims ? q->dims[q->axis] : 1;
        uint32_t ggml = scale && scale->type == ONNX_TYPE_FLOAT ? GGML_TYPE_F32 :
                        scale && scale->type == ONNX_TYPE_FLOAT16 ? GGML_TYPE_F16 : UINT32_MAX;
        int r;

        *v = (QuantValues) {};
        if (q->zero_point && !zero)
                return 0;
        /* The count from the zero point, else the scale; each must be 1 or the axis's length. */
        uint64_t count = zero ? zero->length : ggml != UINT32_MAX ? scale->length / ggml_type(ggml)->type_size : 1;
        if (count != 1 && count != per_axis)
                return 0;
        v->count = count;
        v->zero = calloc(count, sizeof(int32_t));
        if (!v->zero)
                return -ENOMEM;
        if (zero) {
                if (zero->type != (is_signed ? ONNX_TYPE_INT8 : ONNX_TYPE_UINT8)) {
                        quant_values_done(v);
                        return 0;
                }
                _cleanup_free_ uint8_t *raw = malloc(count);
                if (!raw)
                        return -ENOMEM;
                if ((r = fileset_pread(files, raw, count, zero->offset)) < 0)
                        return r == -ENODATA ? -EIO : r;
                for (uint64_t i = 0; i < count; i++)
                        v->zero[i] = is_signed ? (int8_t) raw[i] : raw[i];
        }
        if (ggml == UINT32_MAX || scale->length != count * ggml_type(ggml)->type_size)
                return 0;       /* no usable scale: the fitted ratio still works */
        _cleanup_free_ uint8_t *raw = malloc(scale->length);
        _cleanup_free_ float *f = malloc(count * sizeof(float));
        v->scale = malloc(count * sizeof(double));
        if (!raw || !f || !v->scale)
                return -ENOMEM;
        if ((r = fileset_pread(files, raw, scale->length, scale->offset)) < 0)
                return r == -ENODATA ? -EIO : r;
        dequantize_blocks(ggml, raw, f, count);
        for (uint64_t i = 0; i < count; i++) {
                if (!isfinite(f[i]) || f[i] == 0.0f) {
                        free(v->scale);
                        v->scale = NULL;
                        break;
                }
                v->scale[i] = f[i];
        }
        return 0;
}

/* One channel layout's statistics and its candidates' parameters and costs. */
typedef struct Fit {
        uint32_t axis;
        RescaleShape shape;
        double *sxx, *sxy;              /* [channels]: sums over the channel of x·x and x·y */
        int32_t (*params)[CANDIDATES][2];       /* [channels]: R, O per candidate */
        uint64_t (*cost)[CANDIDATES];   /* [channels] */
} Fit;

static void fit_done(Fit *f) {
        free(f->sxx);
        free(f->sxy);
        free(f->params);
        free(f->cost);
        *f = (Fit) {};
}

/* The whole work of one tensor: what is read where, and the graph's values for both sides. */
typedef struct Tensor {
        const FileSet *bf, *tf;
        uint64_t base_at, target_at;    /* file offsets of the range's first element */
        uint64_t first, length;         /* the range: elements [first, first + length) of the tensor */
        const ArtifactQuant *q;         /* the target's */
        bool is_signed;
        QuantValues vb, vt;
        uint64_t z_inner;               /* elements per run of one zero point (along the scale's axis) */
        bool z_uniform;                 /* one zero point per side for the whole tensor */
        uint8_t *b, *t;                 /* CHUNK each */
} Tensor;

static int32_t fixed(double v) {
        double x = nearbyint(v * RESCALE_ONE);
        return x >= INT32_MAX ? INT32_MAX : x <= INT32_MIN ? INT32_MIN : (int32_t) x;
}

/* The residual of target value @t against the prediction of base value @v, as the span codes it (flipped or not). */
static int64_t residual_one(int32_t ratio, int32_t offset, int64_t v, int64_t t, bool is_signed) {
        bool flip;
        int64_t q = rescale_predict_value(ratio, offset, v, is_signed, &flip);
        return flip ? q - t : t - q;
}

/* Roughly the bits zstd spends on a residual of @d in the i8 layout's planes (+1, the leaning
 * side, cheaper than -1). */
static unsigned residual_cost(int64_t d) {
        uint64_t a = (uint64_t) (d < 0 ? -d : d);
        return a == 0 ? 0 : d == 1 ? 2 : d == -1 ? 3 : 5 + 2 * bitlen(a);
}

static int64_t value(const Tensor *x, uint8_t byte) {
        return x->is_signed ? (int8_t) byte : byte;
}

/* The zero point of element @e: per the scale's axis, or one for the tensor. */
static int32_t zero_of(const Tensor *x, const QuantValues *v, uint64_t e) {
        return x->z_uniform ? v->zero[0] : v->zero[e / x->z_inner % v->count];
}

typedef void (*ChunkFn)(Tensor *x, Fit *f, uint64_t e, size_t n);

/* The range's chunk at @pos, both sides, into x->b and x->t; its length in *@n. */
static int read_chunk(Tensor *x, uint64_t pos, size_t *n) {
        *n = x->length - pos < CHUNK ? (size_t) (x->length - pos) : CHUNK;
        int r = fileset_pread(x->bf, x->b, *n, x->base_at + pos);
        if (r >= 0)
                r = fileset_pread(x->tf, x->t, *n, x->target_at + pos);
        return r == -ENODATA ? -EIO : r < 0 ? r : 0;
}

/* Read the range chunk by chunk into x->b, x->t and call @fn with each chunk's first element. */
static int for_chunks(Tensor *x, Fit *f, ChunkFn fn) {
        size_t n;
        for (uint64_t pos = 0; pos < x->length; pos += n) {
                int r = read_chunk(x, pos, &n);
                if (r < 0)
                        return r;
                fn(x, f, x->first + pos, n);
        }
        return 0;
}

static void sums(Tensor *x, Fit *f, uint64_t e, size_t n) {
        for (size_t i = 0; i < n; i++, e++) {
                uint64_t c = e / f->shape.inner % f->shape.channels;
                double bx = (double) (value(x, x->b[i]) - zero_of(x, &x->vb, e));
                double ty = (double) (value(x, x->t[i]) - zero_of(x, &x->vt, e));
                f->sxx[c] += bx * bx;
                f->sxy[c] += bx * ty;
        }
}

static void costs(Tensor *x, Fit *f, uint64_t e, size_t n) {
        for (size_t i = 0; i < n; i++, e++) {
                uint64_t c = e / f->shape.inner % f->shape.channels;
                int64_t v = value(x, x->b[i]), t = value(x, x->t[i]);
                for (int k = 0; k < CANDIDATES; k++)
                        f->cost[c][k] += residual_cost(residual_one(f->params[c][k][0], f->params[c][k][1], v, t,
                                                                    x->is_signed));
        }
}

/*
 * Fit channels along @axis: the candidates' parameters and costs per channel. 0 when the layout
 * cannot carry the zero points (they vary along another axis).
 */
static int fit_axis(Tensor *x, uint32_t axis, Fit *f) {
        const ArtifactQuant *q = x->q;
        int r;

        *f = (Fit) { .axis = axis, .shape = { .is_signed = x->is_signed, .channels = q->n_dims ? q->dims[axis] : 1,
                                             .inner = dims_product(q, axis + 1) } };
        if (!x->z_uniform && axis != q->axis)
                return 0;       /* zero points that vary along another axis: one offset per channel cannot follow */
        if (rescale_shape_check(&f->shape, NULL) < 0)
                return 0;
        uint64_t n = f->shape.channels;
        f->sxx = calloc(n, sizeof(double));
        f->sxy = calloc(n, sizeof(double));
        f->params = calloc(n, sizeof(*f->params));
        f->cost = calloc(n, sizeof(*f->cost));
        if (!f->sxx || !f->sxy || !f->params || !f->cost)
                return -ENOMEM;
        if ((r = for_chunks(x, f, sums)) < 0)
                return r;
        for (uint64_t c = 0; c < n; c++) {
                /* The channel's zero points: along the scale's axis when they vary, so c indexes them. */
                int32_t zb = x->vb.zero[x->z_uniform ? 0 : c], zt = x->vt.zero[x->z_uniform ? 0 : c];
                double ratio = f->sxx[c] > 0 ? f->sxy[c] / f->sxx[c] : 1.0;
                f->params[c][0][0] = RESCALE_ONE;
                f->params[c][2][0] = fixed(ratio);
                f->params[c][2][1] = fixed(zt - ratio * zb);
                /* The scales' ratio, where they are known along this layout. */
                f->params[c][1][0] = RESCALE_ONE;
                if (x->vb.scale && x->vt.scale && (x->vb.count == 1 || axis == q->axis)) {
                        uint64_t k = x->vb.count == 1 ? 0 : c;
                        double s = x->vb.scale[k] / x->vt.scale[x->vt.count == 1 ? 0 : k];
                        f->params[c][1][0] = fixed(s);
                        f->params[c][1][1] = fixed(zt - s * zb);
                }
        }
        return for_chunks(x, f, costs);
}

/* Each channel's cheapest candidate into @p; returns the total cost in bits, parameters included. */
static uint64_t fit_choose(const Fit *f, RescaleParams *p) {
        uint64_t total = 0;
        for (uint64_t c = 0; c < f->shape.channels; c++) {
                int best = 0;
                for (int k = 1; k < CANDIDATES; k++)
                        if (f->cost[c][k] < f->cost[c][best])
                                best = k;
                if (p) {
                        p->ratio[c] = f->params[c][best][0];
                        p->offset[c] = f->params[c][best][1];
                }
                total += f->cost[c][best] + (best ? 64 : 0);
        }
        return total;
}

static uint64_t fit_unchanged(const Fit *f) {
        uint64_t total = 0;
        for (uint64_t c = 0; c < f->shape.channels; c++)
                total += f->cost[c][0];
        return total;
}

/*
 * The best parameters for the range of @x: NULL in *@ret when none beats the plain delta.
 * *@ret_gain: the estimated bits it saves.
 */
static int choose(Tensor *x, RescaleParams **ret, uint64_t *ret_gain, uint64_t *ret_unchanged) {
        const ArtifactQuant *q = x->q;
        uint32_t axes[3] = { q->axis, 0, q->n_dims ? q->n_dims - 1 : 0 };
        Fit best = {};
        uint64_t best_cost = UINT64_MAX, unchanged = UINT64_MAX;
        int r = 0;

        *ret = NULL;
        *ret_gain = 0;
        if (ret_unchanged)
                *ret_unchanged = 0;
        for (int i = 0; i < 3; i++) {
                if ((i == 1 && axes[1] == axes[0]) || (i == 2 && (axes[2] == axes[0] || axes[2] == axes[1])))
                        continue;
                Fit f;
                if ((r = fit_axis(x, axes[i], &f)) < 0 || !f.cost) {
                        fit_done(&f);
                        if (r < 0)
                                break;
                        continue;
                }
                uint64_t cost = fit_choose(&f, NULL);
                if (unchanged == UINT64_MAX) {
                        unchanged = fit_unchanged(&f);
                        if (ret_unchanged)
                                *ret_unchanged = unchanged;
                }
                if (cost < best_cost) {
                        fit_done(&best);
                        best = f;
                        best_cost = cost;
                } else
                        fit_done(&f);
        }
        if (r >= 0 && best.cost && best_cost < unchanged) {
                r = rescale_params_new(&best.shape, ret);
                if (r >= 0) {
                        fit_choose(&best, *ret);
                        *ret_gain = unchanged - best_cost;
                }
        }
        fit_done(&best);
        return r;
}

/*
 * The tensor behind a plan of @ts's elements [@first, +@length) whose base bytes are at
 * @base_at: 1 and @x set up when both sides are the same quantized 8-bit tensor, else 0.
 */
static int tensor_open(const FileSet *bf, const Artifact *base, const FileSet *tf, const Artifact *target,
                       const Site *ts, uint64_t first, uint64_t length, uint64_t base_at, Tensor *x) {
        const ArtifactQuant *tq = artifact_quant(target, ts->name), *bq = artifact_quant(base, ts->name);
        const Site *bs = bq ? site_named(base, ts->name) : NULL;
        int r;

        *x = (Tensor) {};
        if (!tq || !bq || !bs || bs->type != ts->type || bs->length != ts->length || tq->n_dims != bq->n_dims ||
            memcmp(tq->dims, bq->dims, tq->n_dims * sizeof(uint64_t)) != 0 || tq->axis != bq->axis ||
            (ts->type != ONNX_TYPE_INT8 && ts->type != ONNX_TYPE_UINT8) || dims_product(tq, 0) != ts->length ||
            base_at != bs->offset + first)
                return 0;
        *x = (Tensor) { .bf = bf, .tf = tf, .base_at = base_at, .target_at = ts->offset + first, .first = first,
                        .length = length, .q = tq, .is_signed = ts->type == ONNX_TYPE_INT8 };
        if ((r = quant_values(bf, base, bq, x->is_signed, &x->vb)) < 0 ||
            (r = quant_values(tf, target, tq, x->is_signed, &x->vt)) < 0)
                return r;
        if (x->vb.count == 0 || x->vt.count == 0 || x->vb.count != x->vt.count)
                return 0;
        x->z_inner = dims_product(tq, tq->axis + 1);
        x->z_uniform = true;
        for (uint64_t i = 1; i < x->vb.count; i++)
                x->z_uniform &= x->vb.zero[i] == x->vb.zero[0] && x->vt.zero[i] == x->vt.zero[0];
        x->b = malloc(CHUNK);
        x->t = malloc(CHUNK);
        return x->b && x->t ? 1 : -ENOMEM;
}

static void tensor_done(Tensor *x) {
        quant_values_done(&x->vb);
        quant_values_done(&x->vt);
        free(x->b);
        free(x->t);
        *x = (Tensor) {};
}

int code_rescale_prepare(Coder *c, const Artifact *base, const Artifact *target, const Plan *p, CodeRescale *ret) {
        Tensor x = {};
        uint64_t gain;
        int r;

        *ret = (CodeRescale) {};
        if (p->site < 0 || p->copy || p->ref_length > 0 || (p->layout != DELTA_I8 && p->layout != DELTA_I8AC) ||
            target->kind != ARTIFACT_ONNX)
                return 0;
        const Site *ts = &target->sites[p->site];
        if (p->offset < ts->offset || p->length > ts->length - (p->offset - ts->offset))
                return 0;
        r = tensor_open(c->base_files, base, c->target_files, target, ts, p->offset - ts->offset, p->length,
                        p->base_offset, &x);
        if (r > 0)
                r = choose(&x, &ret->params, &gain, NULL);
        tensor_done(&x);
        if (r < 0) {
                code_rescale_done(ret);
                return tp_error(c->err, r, "'%s': reading the tensor: %s", ts->name, strerror(-r));
        }
        if (!ret->params)
                return 0;
        ret->first = p->offset - ts->offset;
        ret->predicted = malloc(c->group_max);
        ret->flip = malloc(c->group_max);
        ret->leaned = malloc(c->group_max);
        if (!ret->predicted || !ret->flip || !ret->leaned) {
                code_rescale_done(ret);
                return -ENOMEM;
        }
        return 1;
}

void code_rescale_done(CodeRescale *l) {
        rescale_params_free(l->params);
        free(l->predicted);
        free(l->flip);
        free(l->leaned);
        *l = (CodeRescale) {};
}

int code_rescale_params(Coder *c, const CodeRescale *l, int fd, uint64_t *written) {
        uint64_t n = rescale_shape_param_bytes(&l->params->shape);
        _cleanup_free_ uint8_t *planes = malloc(n);

        if (!planes)
                return -ENOMEM;
        rescale_params_store(l->params, planes);
        return code_frame_prefix(c, planes, n, fd, written);
}

bool code_rescale_residual(const CodeRescale *l, DeltaLayout layout, uint64_t pos, const uint8_t *base,
                           const uint8_t *target, size_t n, uint8_t *out) {
        rescale_predict(l->params, l->first + pos, base, n, l->predicted, l->flip);
        memcpy(l->leaned, target, n);
        rescale_flip(l->predicted, l->flip, l->leaned, n);
        return delta_encode(layout, l->predicted, l->leaned, n, out);
}

/* Whether @x's two sides hold the same bytes (1), or not (0). */
static int same_bytes(Tensor *x) {
        size_t n;
        for (uint64_t pos = 0; pos < x->length; pos += n) {
                int r = read_chunk(x, pos, &n);
                if (r < 0)
                        return r;
                if (memcmp(x->b, x->t, n) != 0)
                        return 0;
        }
        return 1;
}

bool create_rescale_alone(const FileSet *bf, const Artifact *base, const FileSet *tf, const Artifact *target,
                          const Site *ts) {
        const Site *bs = site_named(base, ts->name);
        _cleanup_(rescale_params_freep) RescaleParams *p = NULL;
        uint64_t gain = 0, plain = 0;
        Tensor x;

        if (!bs)
                return false;
        int r = tensor_open(bf, base, tf, target, ts, 0, ts->length, bs->offset, &x);
        if (r > 0 && (r = same_bytes(&x)) == 0)
                r = choose(&x, &p, &gain, &plain);
        else if (r > 0)
                r = 0, plain = 0;       /* unchanged */
        tensor_done(&x);
        return r >= 0 && p && gain > 0 && gain >= plain / RESCALE_ALONE_SHARE;
}

/* Changed 8-bit bytes from which the i8 layout (about 0.8 bits a changed value against 1 as bytes,
 * delta.h) pays for a relocating bundle's copy spans, rescale or not. */
#define I8_RELOCATE_MIN (32u << 10)

int create_prefers_relocating(const FileSet *bf, const Artifact *base, const FileSet *tf, const Artifact *target,
                              const Diff *diff, bool *ret, TpError *err) {
        uint64_t changed = 0;

        *ret = false;
        if (base->kind != ARTIFACT_ONNX || target->kind != ARTIFACT_ONNX)
                return 0;
        for (size_t i = 0; i < diff->n_regions; i++) {
                const Site *ts = diff->regions[i].site >= 0 ? &target->sites[diff->regions[i].site] : NULL;
                if (ts && (ts->type == ONNX_TYPE_INT8 || ts->type == ONNX_TYPE_UINT8))
                        changed += diff->regions[i].length;
        }
        if (changed >= I8_RELOCATE_MIN) {
                *ret = true;
                return 0;
        }
        for (size_t i = 0; i < diff->n_regions && !*ret; i++) {
                const Site *ts = diff->regions[i].site >= 0 ? &target->sites[diff->regions[i].site] : NULL;
                const Site *bs = ts && artifact_quant(target, ts->name) ? site_named(base, ts->name) : NULL;
                _cleanup_(rescale_params_freep) RescaleParams *p = NULL;
                uint64_t gain = 0;
                Tensor x;
                if (!bs)
                        continue;
                int r = tensor_open(bf, base, tf, target, ts, 0, ts->length, bs->offset, &x);
                if (r > 0)
                        r = choose(&x, &p, &gain, NULL);
                tensor_done(&x);
                if (r < 0)
                        return tp_error(err, r, "'%s': reading the tensor: %s", ts->name, strerror(-r));
                /* Worth a relocating bundle's copy spans: more than a few hundred bytes saved. */
                *ret = gain > 8 * 512;
        }
        return 0;
}
