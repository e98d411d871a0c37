/* SPDX-License-Identifier: MIT */
/* llama.cpp's GGUF LoRA adapters (lora.h). */

#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fileio.h"
#include "ggml.h"
#include "lora.h"

#define SUFFIX_A ".lora_a"
#define SUFFIX_B ".lora_b"
#define NAME_A "lora_a" /* the suffixes without their dot, for messages */
#define NAME_B "lora_b"

static bool ends_with(const char *s, const char *suffix) {
        size_t n = strlen(s), k = strlen(suffix);
        return n >= k && strcmp(s + n - k, suffix) == 0;
}

bool lora_factor_type(uint32_t type) {
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

static int pair_compare(const void *a, const void *b) {
        return strcmp(((const LoraPair *) a)->target, ((const LoraPair *) b)->target);
}

const LoraPair *lora_find(const Lora *l, const char *target) {
        LoraPair key = { .target = (char *) target };
        return l->n_pairs ? bsearch(&key, l->pairs, l->n_pairs, sizeof(key), pair_compare) : NULL;
}

static int check_keys(Lora *l, TpError *err) {
        const char *type = gguf_find_string(l->g, "general.type"), *atype = gguf_find_string(l->g, "adapter.type");
        const char *arch = gguf_find_string(l->g, "general.architecture");
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
        if (!lora_factor_type(t->type))
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

float lora_factor(const Lora *l, float scale, uint64_t rank) {
        /* llama.cpp's scale: adapter_scale * alpha / rank, in float; alpha 0 means no alpha/rank. */
        return l->alpha != 0.0f ? scale * l->alpha / (float) rank : scale;
}
