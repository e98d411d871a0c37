/* SPDX-License-Identifier: MIT */

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "ggml.h"
#include "quant-mix.h"

/* llama_ftype values (include/llama.h). */
enum {
        FTYPE_ALL_F32 = 0,
        FTYPE_F16 = 1,
        FTYPE_Q4_0 = 2,
        FTYPE_Q4_1 = 3,
        FTYPE_Q8_0 = 7,
        FTYPE_Q5_0 = 8,
        FTYPE_Q5_1 = 9,
        FTYPE_Q2_K = 10,
        FTYPE_Q3_K_S = 11,
        FTYPE_Q3_K_M = 12,
        FTYPE_Q3_K_L = 13,
        FTYPE_Q4_K_S = 14,
        FTYPE_Q4_K_M = 15,
        FTYPE_Q5_K_S = 16,
        FTYPE_Q5_K_M = 17,
        FTYPE_Q6_K = 18,
        FTYPE_Q2_K_S = 21,
        FTYPE_BF16 = 32,
};

static const QuantFtype ftypes[] = {
        { "Q4_0", FTYPE_Q4_0, GGML_TYPE_Q4_0 },
        { "Q4_1", FTYPE_Q4_1, GGML_TYPE_Q4_1 },
        { "Q5_0", FTYPE_Q5_0, GGML_TYPE_Q5_0 },
        { "Q5_1", FTYPE_Q5_1, GGML_TYPE_Q5_1 },
        { "Q2_K", FTYPE_Q2_K, GGML_TYPE_Q2_K },
        { "Q2_K_S", FTYPE_Q2_K_S, GGML_TYPE_Q2_K },
        { "Q3_K_S", FTYPE_Q3_K_S, GGML_TYPE_Q3_K },
        { "Q3_K_M", FTYPE_Q3_K_M, GGML_TYPE_Q3_K },
        { "Q3_K_L", FTYPE_Q3_K_L, GGML_TYPE_Q3_K },
        { "Q4_K_S", FTYPE_Q4_K_S, GGML_TYPE_Q4_K },
        { "Q4_K_M", FTYPE_Q4_K_M, GGML_TYPE_Q4_K },
        { "Q5_K_S", FTYPE_Q5_K_S, GGML_TYPE_Q5_K },
        { "Q5_K_M", FTYPE_Q5_K_M, GGML_TYPE_Q5_K },
        { "Q6_K", FTYPE_Q6_K, GGML_TYPE_Q6_K },
        { "Q8_0", FTYPE_Q8_0, GGML_TYPE_Q8_0 },
        { "F16", FTYPE_F16, GGML_TYPE_F16 },
        { "BF16", FTYPE_BF16, GGML_TYPE_BF16 },
        { "F32", FTYPE_ALL_F32, GGML_TYPE_F32 },
};

const QuantFtype *quant_ftypes(size_t *ret_n) {
        *ret_n = ELEMENTSOF(ftypes);
        return ftypes;
}

const QuantFtype *quant_ftype_from_name(const char *name) {
        for (size_t i = 0; name && i < ELEMENTSOF(ftypes); i++)
                if (strcasecmp(ftypes[i].name, name) == 0)
                        return &ftypes[i];
        return NULL;
}

/* ---- which tensors are quantized --------------------------------------------------------- */

static bool contains(const char *s, const char *part) {
        return strstr(s, part) != NULL;
}

static bool is_quantized(uint32_t type) {
        return type != GGML_TYPE_F32 && type != GGML_TYPE_F16 && type != GGML_TYPE_BF16 && type != GGML_TYPE_F64 &&
               type != GGML_TYPE_I8 && type != GGML_TYPE_I16 && type != GGML_TYPE_I32 && type != GGML_TYPE_I64;
}

static uint32_t n_dims_of(const uint64_t ne[4]) {
        uint32_t n = 1;
        for (uint32_t d = 1; d < 4; d++)
                if (ne[d] > 1)
                        n = d + 1;
        return n;
}

/* Substrings that keep a tensor as it is (llama-quant.cpp, tensor_allows_quantization). */
static const char *const keep_parts[] = {
        "_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel", "per_layer_model_proj",
        "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight", "indexer.q_proj.weight",
        "time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight", "time_mix_w2.weight",
        "time_mix_v0.weight", "time_mix_v1.weight", "time_mix_v2.weight", "time_mix_a0.weight",
        "time_mix_a1.weight", "time_mix_a2.weight", "time_mix_g1.weight", "time_mix_g2.weight",
        "time_mix_decay_w1.weight", "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight", "attn_rel_b.weight",
        ".position_embd", "sam.pos_embd", "sam.neck.", "sam.net_", ".rel_pos", ".patch_embd", ".patch_merger",
        "a.rvq.codebook", "mm.a.code_embd",
};

bool quant_tensor_allowed(const char *name, const uint64_t ne[4]) {
        size_t len = strlen(name);
        const char *last = NULL;

        if (n_dims_of(ne) < 2)
                return false;
        /* name.rfind("weight") == name.size() - 6, with std::string's unsigned arithmetic. */
        for (const char *p = strstr(name, "weight"); p; p = strstr(p + 1, "weight"))
                last = p;
        size_t found = last ? (size_t) (last - name) : SIZE_MAX;
        if (found != len - 6)
                return false;
        for (size_t i = 0; i < ELEMENTSOF(keep_parts); i++)
                if (contains(name, keep_parts[i]))
                        return false;
        return strcmp(name, "position_embd.weight") != 0 && strcmp(name, "token_types.weight") != 0;
}

/* ---- type selection ------------------------------------------------------------------------ */

typedef enum Category {
        CAT_TOKEN_EMBD,
        CAT_ATTN_Q,
        CAT_ATTN_V,
        CAT_ATTN_K,
        CAT_ATTN_QKV,
        CAT_ATTN_KV_B,
        CAT_ATTN_OUTPUT,
        CAT_FFN_UP,
        CAT_FFN_GATE,
        CAT_FFN_DOWN,
        CAT_OUTPUT,
        CAT_OTHER,
} Category;

static Category category(const char *name) {
        if (strcmp(name, "output.weight") == 0)
                return CAT_OUTPUT;
        if (strcmp(name, "token_embd.weight") == 0 || strcmp(name, "per_layer_token_embd.weight") == 0)
                return CAT_TOKEN_EMBD;
        static const struct {
                const char *part;
                Category cat;
        } parts[] = {
                { "attn_qkv.weight", CAT_ATTN_QKV }, { "attn_kv_b.weight", CAT_ATTN_KV_B },
                { "attn_v.weight", CAT_ATTN_V },     { "attn_k.weight", CAT_ATTN_K },
                { "attn_q.weight", CAT_ATTN_Q },     { "attn_output.weight", CAT_ATTN_OUTPUT },
                { "ffn_up", CAT_FFN_UP },            { "ffn_gate", CAT_FFN_GATE },
                { "ffn_down", CAT_FFN_DOWN },
        };
        for (size_t i = 0; i < ELEMENTSOF(parts); i++)
                if (contains(name, parts[i].part))
                        return parts[i].cat;
        return CAT_OTHER;
}

typedef struct MixState {
        const QuantFtype *ft;
        uint32_t n_layer, n_expert, n_gqa;     /* n_gqa: heads per KV head (0 without KV heads) */
        bool is_70b, tied_embeddings, imatrix;
        int n_attention_wv, i_attention_wv, i_ffn_down;
        size_t n_fallback;
} MixState;

static bool use_more_bits(int i, int n) {
        return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

/* The layer of an ffn_down tensor: its position among them, or its blk.N with experts. */
static int ffn_layer(const MixState *s, const char *name, int counter, TpError *err) {
        int layer = counter;

        if (s->n_expert > 1) {
                if (sscanf(name, "blk.%d.", &layer) != 1)
                        return tp_error(err, -EINVAL, "tensor '%s': no layer number (blk.N.) in its name", name);
                if (layer < 0 || (uint32_t) layer >= s->n_layer)
                        return tp_error(err, -EINVAL, "tensor '%s': layer %d is not below block_count %" PRIu32, name,
                                        layer, s->n_layer);
        }
        return layer;
}

/* llama_tensor_get_type_impl for the file types of ftypes[] (no imatrix, not Falcon). */
static int mix_type(MixState *s, const char *name, const uint64_t ne[4], uint32_t *type, TpError *err) {
        uint32_t ft = s->ft->ftype, t = s->ft->base_type;
        Category cat = category(name);

        if (cat == CAT_OUTPUT || (s->tied_embeddings && cat == CAT_TOKEN_EMBD)) {
                if (ne[0] % ggml_type(t)->block_size != 0)
                        t = GGML_TYPE_Q8_0;
                else if (t != GGML_TYPE_Q8_0)
                        t = GGML_TYPE_Q6_K;
        } else if (cat == CAT_ATTN_V || cat == CAT_ATTN_QKV || cat == CAT_ATTN_KV_B) {
                if (ft == FTYPE_Q2_K)
                        t = s->n_gqa >= 4 ? GGML_TYPE_Q4_K : GGML_TYPE_Q3_K;
                else if (ft == FTYPE_Q2_K_S && s->n_gqa >= 4)
                        t = GGML_TYPE_Q4_K;
                else if (ft == FTYPE_Q3_K_M)
                        t = s->i_attention_wv < 2 ? GGML_TYPE_Q5_K : GGML_TYPE_Q4_K;
                else if (ft == FTYPE_Q3_K_L)
                        t = GGML_TYPE_Q5_K;
                else if ((ft == FTYPE_Q4_K_M || ft == FTYPE_Q5_K_M) && use_more_bits(s->i_attention_wv, s->n_attention_wv))
                        t = GGML_TYPE_Q6_K;
                else if (ft == FTYPE_Q4_K_S && s->i_attention_wv < 4)
                        t = GGML_TYPE_Q5_K;
                if (s->is_70b && (t == GGML_TYPE_Q3_K || t == GGML_TYPE_Q4_K))
                        t = GGML_TYPE_Q5_K;
                if (s->n_expert == 8)
                        t = GGML_TYPE_Q8_0;
                s->i_attention_wv++;
        } else if (cat == CAT_ATTN_K) {
                if (s->n_expert == 8)
                        t = GGML_TYPE_Q8_0;
        } else if (cat == CAT_FFN_DOWN) {
                int i = ffn_layer(s, name, s->i_ffn_down, err), n = (int) s->n_layer;
                if (i < 0)
                        return i;
                if (ft == FTYPE_Q2_K)
                        t = GGML_TYPE_Q3_K;
                else if (ft == FTYPE_Q2_K_S && i < n / 8)
                        t = GGML_TYPE_Q4_K;
                else if (ft == FTYPE_Q3_K_M)
                        t = i < n / 16 ? GGML_TYPE_Q5_K : GGML_TYPE_Q4_K;
                else if (ft == FTYPE_Q3_K_L)
                        t = GGML_TYPE_Q5_K;
                else if ((ft == FTYPE_Q4_K_M || ft == FTYPE_Q5_K_M) && use_more_bits(i, n))
                        t = GGML_TYPE_Q6_K;
                else if (ft == FTYPE_Q4_K_S && i < n / 8)
                        t = GGML_TYPE_Q5_K;
                else if ((ft == FTYPE_Q4_0 || ft == FTYPE_Q5_0) && s->imatrix && i < n / 8)
                        t = ft == FTYPE_Q4_0 ? GGML_TYPE_Q4_1 : GGML_TYPE_Q5_1;
                s->i_ffn_down++;
        } else if (cat == CAT_ATTN_OUTPUT) {
                if (s->n_expert == 8) {
                        if (ft == FTYPE_Q2_K || ft == FTYPE_Q3_K_S || ft == FTYPE_Q3_K_M || ft == FTYPE_Q4_K_S ||
                            ft == FTYPE_Q4_K_M)
                                t = GGML_TYPE_Q5_K;
                } else if (ft == FTYPE_Q2_K) {
                        t = GGML_TYPE_Q3_K;
                } else if (ft == FTYPE_Q3_K_M) {
                        t = GGML_TYPE_Q4_K;
                } else if (ft == FTYPE_Q3_K_L) {
                        t = GGML_TYPE_Q5_K;
                }
        }
        *type = t;
        return 0;
}

/* tensor_type_fallback: a type whose block does not divide the row length. */
static uint32_t fallback(MixState *s, const uint64_t ne[4], uint32_t t) {
        uint32_t block = ggml_type(t)->block_size;

        if (ne[0] % block == 0)
                return t;
        s->n_fallback++;
        switch (t) {
        case GGML_TYPE_Q2_K:
        case GGML_TYPE_Q3_K:
                t = GGML_TYPE_Q4_0;
                break;
        case GGML_TYPE_Q4_K:
                t = GGML_TYPE_Q5_0;
                break;
        case GGML_TYPE_Q5_K:
                t = GGML_TYPE_Q5_1;
                break;
        case GGML_TYPE_Q6_K:
                t = GGML_TYPE_Q8_0;
                break;
        default:
                break; /* a 32-block type: F16 below */
        }
        return ne[0] % ggml_type(t)->block_size == 0 ? t : GGML_TYPE_F16;
}

/* ---- the model's parameters and order ----------------------------------------------------- */

static int get_u32(const Gguf *g, const char *key, bool required, uint32_t *ret, TpError *err) {
        const GgufKv *kv = gguf_find(g, key);

        if (!kv) {
                if (required)
                        return tp_error(err, -EOPNOTSUPP, "the model has no '%s' key", key);
                return 0;
        }
        switch (kv->type) {
        case GGUF_TYPE_UINT8:
        case GGUF_TYPE_UINT16:
        case GGUF_TYPE_UINT32:
                *ret = (uint32_t) kv->v.u;
                return 1;
        case GGUF_TYPE_INT8:
        case GGUF_TYPE_INT16:
        case GGUF_TYPE_INT32:
                if (kv->v.i >= 0) {
                        *ret = (uint32_t) kv->v.i;
                        return 1;
                }
                break;
        default:
                break;
        }
        return tp_error(err, -EOPNOTSUPP, "key '%s' is not a non-negative 32-bit integer (per-layer arrays are not "
                        "supported)", key);
}

static int model_params(const Gguf *g, MixState *s, TpError *err) {
        const GgufKv *arch = gguf_find(g, "general.architecture");
        uint32_t heads = 0, heads_kv = 0;
        int r;

        if (!arch || arch->type != GGUF_TYPE_STRING)
                return tp_error(err, -EOPNOTSUPP, "the model has no general.architecture string");
        if (strcmp(arch->str, "llama") != 0)
                return tp_error(err, -EOPNOTSUPP,
                                "architecture '%s': only llama's type mixes are implemented (llama.cpp's rules differ "
                                "per architecture)", arch->str);
        if ((r = get_u32(g, "llama.block_count", true, &s->n_layer, err)) < 0)
                return r;
        if (s->n_layer == 0 || s->n_layer > 512)
                return tp_error(err, -EOPNOTSUPP, "llama.block_count %" PRIu32 " is not in 1..512", s->n_layer);
        if ((r = get_u32(g, "llama.expert_count", false, &s->n_expert, err)) < 0)
                return r;
        if (s->n_expert <= 1)
                s->n_expert = 0;
        /* The head counts: Q2_K's attn_v by n_gqa, and LLM_TYPE_70B (80 layers, grouped-query attention). */
        if ((r = get_u32(g, "llama.attention.head_count", s->n_layer == 80, &heads, err)) < 0)
                return r;
        heads_kv = heads;
        if ((r = get_u32(g, "llama.attention.head_count_kv", false, &heads_kv, err)) < 0)
                return r;
        s->n_gqa = heads_kv ? heads / heads_kv : 0;
        s->is_70b = s->n_layer == 80 && s->n_expert != 8 && heads != heads_kv;
        return 0;
}

static int layer_of(const char *name) {
        int layer = -1;
        (void) sscanf(name, "blk.%d.", &layer);
        return layer;
}

/* llama_model_loader's weight_name_comparer: by layer (none = -1 first), then by name. */
typedef struct OrderKey {
        int layer;
        const char *name;
        size_t index;
} OrderKey;

static int order_compare(const void *a, const void *b) {
        const OrderKey *x = a, *y = b;
        if (x->layer != y->layer)
                return x->layer < y->layer ? -1 : 1;
        return strcmp(x->name, y->name);
}

int quant_plan(const Gguf *g, const QuantFtype *ft, bool imatrix, QuantPlan *ret, TpError *err) {
        MixState s = { .ft = ft, .tied_embeddings = true, .imatrix = imatrix };
        size_t n = g->n_tensors;
        int r;

        r = model_params(g, &s, err);
        if (r < 0)
                return r;
        _cleanup_free_ size_t *order = calloc(n ? n : 1, sizeof(*order));
        _cleanup_free_ uint32_t *types = calloc(n ? n : 1, sizeof(*types));
        if (!order || !types)
                return tp_error(err, -ENOMEM, "cannot allocate the plan for %zu tensors", n);
        _cleanup_free_ OrderKey *keys = calloc(n ? n : 1, sizeof(*keys));
        if (!keys)
                return tp_error(err, -ENOMEM, "cannot allocate the plan for %zu tensors", n);
        for (size_t i = 0; i < n; i++)
                keys[i] = (OrderKey) { layer_of(g->tensors[i].name), g->tensors[i].name, i };
        qsort(keys, n, sizeof(*keys), order_compare);
        for (size_t i = 0; i < n; i++)
                order[i] = keys[i].index;

        for (size_t i = 0; i < n; i++) {
                Category c = category(g->tensors[i].name);
                if (c == CAT_ATTN_V || c == CAT_ATTN_QKV || c == CAT_ATTN_KV_B)
                        s.n_attention_wv++;
                if (c == CAT_OUTPUT)
                        s.tied_embeddings = false;
        }

        bool quantized_ftype = is_quantized(ft->base_type);
        for (size_t j = 0; j < n; j++) {
                const GgufTensor *t = &g->tensors[order[j]];
                uint32_t type = t->type;

                if (quant_tensor_allowed(t->name, t->ne)) {
                        type = ft->base_type;
                        if (quantized_ftype) {
                                r = mix_type(&s, t->name, t->ne, &type, err);
                                if (r < 0)
                                        return r;
                                type = fallback(&s, t->ne, type);
                        }
                }
                if (type != t->type && is_quantized(t->type))
                        return tp_error(err, -EOPNOTSUPP,
                                        "tensor '%s' is %s already: requantizing is not supported (start from the "
                                        "F32, F16 or BF16 model)",
                                        t->name, ggml_type(t->type)->name);
                if (type != t->type && t->type != GGML_TYPE_F32 && t->type != GGML_TYPE_F16 &&
                    t->type != GGML_TYPE_BF16)
                        return tp_error(err, -EOPNOTSUPP, "tensor '%s': cannot convert %s to %s", t->name,
                                        ggml_type(t->type)->name, ggml_type(type)->name);
                if (!imatrix && quant_needs_imatrix(ft, t->name, type) && type != t->type)
                        return tp_error(err, -EINVAL, "%s needs an importance matrix (--imatrix), as llama.cpp "
                                        "requires: tensor '%s' would be %s", ft->name, t->name,
                                        ggml_type(type)->name);
                types[order[j]] = type;
        }
        *ret = (QuantPlan) { .n = n, .order = TAKE_PTR(order), .types = TAKE_PTR(types), .n_fallback = s.n_fallback };
        return 0;
}

bool quant_needs_imatrix(const QuantFtype *ft, const char *name, uint32_t type) {
        Category c = category(name);
        return ft->ftype == FTYPE_Q2_K_S && type == GGML_TYPE_Q2_K && c != CAT_TOKEN_EMBD && c != CAT_OUTPUT;
}

void quant_plan_done(QuantPlan *p) {
        free(p->order);
        free(p->types);
        *p = (QuantPlan) {};
}
