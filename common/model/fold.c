/* SPDX-License-Identifier: MIT */

#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "fileio.h"
#include "fold.h"
#include "lora.h"
#include "product.h"
#include "ggml.h"

int lora_check_base(const Lora *l, const Gguf *base, TpError *err) {
        const char *arch = gguf_find_string(base, "general.architecture");

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
                if (!lora_factor_type(w->type))
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
        const LoraPair *p = lora_find(f->l, t->name);
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
        f->factor = lora_factor(f->l, f->scale, rank);
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

                /* Each product and sum rounds to float, in k order (kernels/product.h). */
                rank_product(p, f->q, in, rank, acc, in);
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
