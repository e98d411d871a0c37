/* SPDX-License-Identifier: MIT */

#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "fileio.h"
#include "fold.h"
#include "ggml.h"

#define SUFFIX_A ".lora_a"
#define SUFFIX_B ".lora_b"
#define NAME_A "lora_a" /* the suffixes without their dot, for messages */
#define NAME_B "lora_b"

static bool ends_with(const char *s, const char *suffix) {
        size_t n = strlen(s), k = strlen(suffix);
        return n >= k && strcmp(s + n - k, suffix) == 0;
}

static bool is_float(uint32_t type) {
        return type == GGML_TYPE_F32 || type == GGML_TYPE_F16 || type == GGML_TYPE_BF16;
}

Lora *lora_free(Lora *l) {
        if (!l)
                return NULL;
        for (size_t i = 0; i < l->n_pairs; i++)
                free(l->pairs[i].target);
        free(l->pairs);
        gguf_free(l->g);
        safe_close(l->fd);
        free(l->path);
        free(l->arch);
        free(l);
        return NULL;
}

static const char *kv_string(const Gguf *g, const char *key) {
        const GgufKv *kv = gguf_find(g, key);
        return kv && kv->type == GGUF_TYPE_STRING ? kv->str : NULL;
}

static int pair_compare(const void *a, const void *b) {
        return strcmp(((const LoraPair *) a)->target, ((const LoraPair *) b)->target);
}

static LoraPair *find_pair(const Lora *l, const char *target) {
        LoraPair key = { .target = (char *) target };
        return l->n_pairs ? bsearch(&key, l->pairs, l->n_pairs, sizeof(key), pair_compare) : NULL;
}

static int check_keys(Lora *l, TpError *err) {
        const char *type = kv_string(l->g, "general.type"), *atype = kv_string(l->g, "adapter.type");
        const char *arch = kv_string(l->g, "general.architecture");
        const GgufKv *alpha = gguf_find(l->g, "adapter.lora.alpha");

        if (!type || strcmp(type, "adapter") != 0)
                return tp_error(err, -EBADMSG, "general.type is '%s', expected 'adapter' (not a LoRA adapter)",
                                type ? type : "(none)");
        if (!atype || strcmp(atype, "lora") != 0)
                return tp_error(err, -EOPNOTSUPP, "adapter.type is '%s', expected 'lora'", atype ? atype : "(none)");
        if (!arch)
                return tp_error(err, -EBADMSG, "no general.architecture string");
        if (gguf_find(l->g, "adapter.alora.invocation_tokens"))
                return tp_error(err, -EOPNOTSUPP,
                                "an activated LoRA (adapter.alora.invocation_tokens) acts only after its invocation "
                                "tokens: folding it into the weights would change what it does");
        if (alpha && alpha->type != GGUF_TYPE_FLOAT32)
                return tp_error(err, -EBADMSG, "adapter.lora.alpha is a %s, expected a float32",
                                gguf_value_type_to_string(alpha->type) ? gguf_value_type_to_string(alpha->type) : "?");
        l->alpha = alpha ? (float) alpha->v.f : 0.0f;
        if (!isfinite(l->alpha))
                return tp_error(err, -EBADMSG, "adapter.lora.alpha is not finite");
        if (!(l->arch = strdup(arch)))
                return -ENOMEM;
        return 0;
}

/* Add @t (a lora_a or lora_b) to the pair of its target. */
static int add_half(Lora *l, const GgufTensor *t, bool is_b, TpError *err) {
        size_t n = strlen(t->name) - strlen(SUFFIX_A);
        _cleanup_free_ char *target = strndup(t->name, n);
        LoraPair *p = NULL;

        if (!target)
                return -ENOMEM;
        if (!is_float(t->type))
                return tp_error(err, -EOPNOTSUPP, "tensor '%s' is %s: only F32, F16 and BF16 factors can be folded",
                                t->name, ggml_type(t->type)->name);
        if (t->ne[2] != 1 || t->ne[3] != 1)
                return tp_error(err, -EBADMSG, "tensor '%s' has %" PRIu32 " dimensions, expected 2", t->name,
                                t->n_dims);
        for (size_t i = 0; i < l->n_pairs; i++)
                if (strcmp(l->pairs[i].target, target) == 0)
                        p = &l->pairs[i];
        if (!p) {
                LoraPair *v = realloc(l->pairs, (l->n_pairs + 1) * sizeof(*v));
                if (!v)
                        return -ENOMEM;
                l->pairs = v;
                p = &l->pairs[l->n_pairs++];
                *p = (LoraPair) { .target = TAKE_PTR(target), .embd = ends_with(t->name, "token_embd.weight" SUFFIX_A) ||
                                                                  ends_with(t->name, "token_embd.weight" SUFFIX_B) };
        }
        if (is_b)
                p->b = t;
        else
                p->a = t;
        return 0;
}

static int check_pairs(Lora *l, TpError *err) {
        for (size_t i = 0; i < l->n_pairs; i++) {
                LoraPair *p = &l->pairs[i];
                if (!p->a || !p->b)
                        return tp_error(err, -EBADMSG, "'%s%s' has no matching '%s%s'", p->target,
                                        p->a ? SUFFIX_A : SUFFIX_B, p->target, p->a ? SUFFIX_B : SUFFIX_A);
                /* lora_b's first dimension is the rank in both layouts; lora_a's is the second (token_embd: the first). */
                uint64_t rank_a = p->embd ? p->a->ne[0] : p->a->ne[1];
                p->rank = p->b->ne[0];
                if (rank_a != p->rank)
                        return tp_error(err, -EBADMSG,
                                        "'%s': rank mismatch: %s has rank %" PRIu64 " (ne = [%" PRIu64 ", %" PRIu64
                                        "]), %s rank %" PRIu64 " (ne = [%" PRIu64 ", %" PRIu64 "])%s",
                                        p->target, NAME_A, rank_a, p->a->ne[0], p->a->ne[1], NAME_B,
                                        p->rank, p->b->ne[0], p->b->ne[1],
                                        p->embd ? "" : " (lora_a must be ne = [in, rank], lora_b ne = [rank, out])");
                if (p->rank == 0)
                        return tp_error(err, -EBADMSG, "'%s': rank 0", p->target);
        }
        if (l->n_pairs > 1)
                qsort(l->pairs, l->n_pairs, sizeof(*l->pairs), pair_compare);
        return 0;
}

static int lora_parse(Lora *l, TpError *err) {
        int r = gguf_read(l->fd, &l->g, err);
        if (r < 0)
                return r;
        r = check_keys(l, err);
        for (uint64_t i = 0; r >= 0 && i < l->g->n_tensors; i++) {
                const GgufTensor *t = &l->g->tensors[i];
                if (ends_with(t->name, SUFFIX_A) || ends_with(t->name, SUFFIX_B))
                        r = add_half(l, t, ends_with(t->name, SUFFIX_B), err);
                else if (ends_with(t->name, "_norm.weight"))
                        l->n_ignored++;
                else
                        r = tp_error(err, -EBADMSG, "tensor '%s' is neither a %s nor a %s", t->name, NAME_A,
                                     NAME_B);
        }
        if (r >= 0)
                r = check_pairs(l, err);
        if (r >= 0 && l->n_pairs == 0)
                r = tp_error(err, -EBADMSG, "the adapter holds no lora_a/lora_b pair");
        return r;
}

int lora_open(const char *path, Lora **ret, TpError *err) {
        _cleanup_(lora_freep) Lora *l = calloc(1, sizeof(*l));

        if (!l || !(l->path = strdup(path)))
                return tp_error(err, -ENOMEM, "%s: out of memory", path);
        l->fd = open(path, O_RDONLY | O_CLOEXEC);
        if (l->fd < 0) {
                int r = negative_errno();
                return tp_error(err, r, "%s: %s", path, strerror(-r));
        }
        int r = lora_parse(l, err);
        if (r < 0)
                return tp_error_prefix(err, r, "%s", path);
        *ret = TAKE_PTR(l);
        return 0;
}

int lora_check_base(const Lora *l, const Gguf *base, TpError *err) {
        const char *arch = kv_string(base, "general.architecture");

        if (!arch || strcmp(arch, l->arch) != 0)
                return tp_error(err, -EINVAL, "%s: the adapter is for architecture '%s', the base model is '%s'",
                                l->path, l->arch, arch ? arch : "(none)");
        for (size_t i = 0; i < l->n_pairs; i++) {
                const LoraPair *p = &l->pairs[i];
                const GgufTensor *w = gguf_find_tensor(base, p->target);
                if (!w)
                        return tp_error(err, -EINVAL,
                                        "%s: tensor '%s' does not exist in the base model (an adapter for another model?)",
                                        l->path, p->target);
                if (!is_float(w->type))
                        return tp_error(err, -EINVAL,
                                        "base tensor '%s' is %s: folding needs the float (F32, F16 or BF16) base model",
                                        w->name, ggml_type(w->type)->name);
                if (w->ne[2] != 1 || w->ne[3] != 1 || w->ne[1] == 1)
                        return tp_error(err, -EINVAL, "base tensor '%s' is not a matrix", w->name);
                uint64_t in = p->embd ? p->b->ne[1] : p->a->ne[0], out = p->embd ? p->a->ne[1] : p->b->ne[1];
                if (w->ne[0] != in || w->ne[1] != out)
                        return tp_error(err, -EINVAL,
                                        "%s: '%s' is [%" PRIu64 ", %" PRIu64 "] in the base model but the adapter's "
                                        "factors make [%" PRIu64 ", %" PRIu64 "] (an adapter for another model?)",
                                        l->path, p->target, w->ne[0], w->ne[1], in, out);
        }
        return 0;
}

/* ---- the fold: quantize hooks ---------------------------------------------------------------- */

typedef struct Fold {
        const Lora *l;
        float scale, factor;
        const LoraPair *cur;
        float *p;   /* [out][rank] */
        float *q;   /* [rank][in] */
} Fold;

/* @t's floats (F32/F16/BF16) into @dst. */
static int read_floats(const Lora *l, const GgufTensor *t, float *dst, TpError *err) {
        uint64_t n = t->ne[0] * t->ne[1];
        _cleanup_free_ uint8_t *raw = malloc(t->size ? t->size : 1);

        if (!raw)
                return tp_error(err, -ENOMEM, "'%s': cannot allocate %" PRIu64 " bytes", t->name, t->size);
        int r = pread_full(l->fd, raw, t->size, t->offset);
        if (r < 0)
                return tp_error(err, r, "%s: reading '%s' at offset %" PRIu64 ": %s", l->path, t->name, t->offset,
                                strerror(-r));
        quantize_to_float(t->type, raw, dst, n);
        for (uint64_t i = 0; i < n; i++)
                if (!isfinite(dst[i]))
                        return tp_error(err, -EDOM, "%s: '%s' holds NaN or infinity at element %" PRIu64, l->path,
                                        t->name, i);
        return 0;
}

static int fold_begin(void *userdata, const GgufTensor *t, uint32_t type, TpError *err) {
        Fold *f = userdata;
        const LoraPair *p = find_pair(f->l, t->name);
        (void) type;

        f->cur = NULL;
        if (!p)
                return 0;
        uint64_t in = t->ne[0], out = t->ne[1], rank = p->rank;
        free(f->p);
        free(f->q);
        f->p = malloc(out * rank * sizeof(float));
        f->q = malloc(rank * in * sizeof(float));
        if (!f->p || !f->q)
                return tp_error(err, -ENOMEM, "'%s': cannot allocate its LoRA factors (rank %" PRIu64 ")", t->name, rank);
        int r;
        if (!p->embd) {
                /* lora_b ne = [rank, out] is P row by row; lora_a ne = [in, rank] is Q row by row. */
                r = read_floats(f->l, p->b, f->p, err);
                if (r >= 0)
                        r = read_floats(f->l, p->a, f->q, err);
        } else {
                /* token_embd: lora_a ne = [rank, vocab] is P; lora_b ne = [rank, dim] is Qᵀ. */
                _cleanup_free_ float *bt = malloc(in * rank * sizeof(float));
                if (!bt)
                        return tp_error(err, -ENOMEM, "'%s': cannot allocate its LoRA factors", t->name);
                r = read_floats(f->l, p->a, f->p, err);
                if (r >= 0)
                        r = read_floats(f->l, p->b, bt, err);
                for (uint64_t i = 0; r >= 0 && i < in; i++)
                        for (uint64_t k = 0; k < rank; k++)
                                f->q[k * in + i] = bt[i * rank + k];
        }
        if (r < 0)
                return r;
        /* llama.cpp's scale: adapter_scale * alpha / rank, in float; alpha 0 means no alpha/rank. */
        f->factor = f->l->alpha != 0.0f ? f->scale * f->l->alpha / (float) rank : f->scale;
        f->cur = p;
        return 1;
}

static int fold_rows(void *userdata, const GgufTensor *t, uint64_t row0, size_t nrows, float *rows, TpError *err) {
        const Fold *f = userdata;
        uint64_t in = t->ne[0], rank = f->cur->rank;
        /* Its own accumulator: calls for other rows run at the same time (common/model/quantize.h). */
        _cleanup_free_ float *acc = malloc(in * sizeof(float));

        if (!acc)
                return tp_error(err, -ENOMEM, "'%s': cannot allocate a row of %" PRIu64 " floats", t->name, in);
        for (size_t r = 0; r < nrows; r++) {
                const float *p = f->p + (row0 + r) * rank;
                float *w = rows + r * in;

                for (uint64_t i = 0; i < in; i++)
                        acc[i] = 0.0f;
                for (uint64_t k = 0; k < rank; k++) {
                        const float pk = p[k], *q = f->q + k * in;
                        for (uint64_t i = 0; i < in; i++) {
                                /* Separate statements: each product and sum rounds to float (no FMA). */
                                float prod = pk * q[i];
                                acc[i] = acc[i] + prod;
                        }
                }
                for (uint64_t i = 0; i < in; i++) {
                        float d = f->factor * acc[i];
                        w[i] = w[i] + d;
                }
        }
        return 0;
}

int model_fold(int base_fd, const Gguf *base, const Lora *l, float scale, const char *out_path,
               const QuantizeOptions *o, QuantizeResult *ret, TpError *err) {
        Fold f = { .l = l, .scale = scale };
        QuantizeHooks hooks = { .begin = fold_begin, .rows = fold_rows, .userdata = &f };
        QuantizeOptions qo = *o;
        QuantizeResult res;

        if (!isfinite(scale))
                return tp_error(err, -EINVAL, "the scale is not finite");
        if (o->hooks)
                return tp_error(err, -EINVAL, "model_fold() sets its own hooks");
        int r = lora_check_base(l, base, err);
        if (r < 0)
                return r;
        qo.hooks = &hooks;
        r = model_quantize(base_fd, base, out_path, &qo, &res, err);
        free(f.p);
        free(f.q);
        if (r < 0)
                return r;
        if (ret)
                *ret = res;
        return 0;
}
