/* SPDX-License-Identifier: MIT */
/* common/model/quant-mix.c: llama.cpp's type mixes on synthetic models, tensor by tensor — the output
 * order, the "more bits" layers, Q4_K_S, tied embeddings, fallbacks, which tensors are
 * quantized at all — and the refusals. (tests/oracle/file-oracle.sh compares whole files with
 * llama.cpp itself; this runs offline.) */

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "check-main.h"
#include "ggml.h"
#include "quant-mix.h"

#define MAX_T 256

/* A model in memory: what quant_plan() reads. */
typedef struct Fake {
        Gguf g;
        GgufKv kv[4];
        GgufTensor t[MAX_T];
        char names[MAX_T][64];
} Fake;

static void fake_kv_str(Fake *f, const char *key, const char *v) {
        GgufKv *k = &f->kv[f->g.n_kv++];
        *k = (GgufKv) { .key = (char *) key, .type = GGUF_TYPE_STRING, .str = (char *) v, .str_len = strlen(v) };
}

static void fake_kv_u32(Fake *f, const char *key, uint32_t v) {
        GgufKv *k = &f->kv[f->g.n_kv++];
        *k = (GgufKv) { .key = (char *) key, .type = GGUF_TYPE_UINT32, .v.u = v };
}

static void fake_tensor(Fake *f, const char *name, uint64_t ne0, uint64_t ne1, uint32_t type) {
        size_t i = f->g.n_tensors++;
        ck_assert_uint_lt(i, MAX_T);
        snprintf(f->names[i], sizeof(f->names[i]), "%s", name);
        f->t[i] = (GgufTensor) { .name = f->names[i], .n_dims = ne1 > 1 ? 2 : 1, .ne = { ne0, ne1, 1, 1 }, .type = type };
}

/* gguf-fixture's llama model (its file order), F32, @layers layers, rows of @dim. */
static void fake_llama(Fake *f, unsigned layers, uint64_t dim, bool with_output) {
        static const char *const kinds[] = { "attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                                             "ffn_norm",  "ffn_gate", "ffn_up", "ffn_down" };
        char name[64];

        memset(f, 0, sizeof(*f));
        f->g.kv = f->kv;
        f->g.tensors = f->t;
        fake_kv_str(f, "general.architecture", "llama");
        fake_kv_u32(f, "llama.block_count", layers);
        fake_tensor(f, "token_embd.weight", dim, 512, GGML_TYPE_F32);
        for (unsigned l = 0; l < layers; l++)
                for (size_t k = 0; k < ELEMENTSOF(kinds); k++) {
                        snprintf(name, sizeof(name), "blk.%u.%s.weight", l, kinds[k]);
                        fake_tensor(f, name, dim, strstr(kinds[k], "norm") ? 1 : dim, GGML_TYPE_F32);
                }
        fake_tensor(f, "output_norm.weight", dim, 1, GGML_TYPE_F32);
        if (with_output)
                fake_tensor(f, "output.weight", dim, 512, GGML_TYPE_F32);
}

static uint32_t type_of(const Fake *f, const QuantPlan *p, const char *name) {
        for (size_t i = 0; i < f->g.n_tensors; i++)
                if (strcmp(f->t[i].name, name) == 0)
                        return p->types[i];
        ck_abort_msg("no tensor %s", name);
        return 0;
}

static QuantPlan plan_of(const Fake *f, const char *ftype) {
        QuantPlan p = {};
        TpError err = {};
        const QuantFtype *ft = quant_ftype_from_name(ftype);

        ck_assert_ptr_nonnull(ft);
        /* Q2_K_S is planned only with an importance matrix (test_q2_k_s_needs_imatrix). */
        ck_assert_msg(quant_plan(&f->g, ft, strcmp(ftype, "Q2_K_S") == 0, &p, &err) == 0, "%s", err.message);
        ck_assert_uint_eq(p.n, f->g.n_tensors);
        return p;
}

START_TEST(test_ftype_names) {
        ck_assert_uint_eq(quant_ftype_from_name("q4_k_m")->ftype, 15);
        ck_assert_uint_eq(quant_ftype_from_name("Q4_K_M")->base_type, GGML_TYPE_Q4_K);
        ck_assert_uint_eq(quant_ftype_from_name("F32")->ftype, 0);
        ck_assert_uint_eq(quant_ftype_from_name("BF16")->ftype, 32);
        ck_assert_uint_eq(quant_ftype_from_name("Q8_0")->ftype, 7);
        ck_assert_uint_eq(quant_ftype_from_name("q3_k_m")->ftype, 12);
        ck_assert_uint_eq(quant_ftype_from_name("Q3_K_L")->base_type, GGML_TYPE_Q3_K);
        ck_assert_uint_eq(quant_ftype_from_name("Q2_K")->ftype, 10);
        ck_assert_uint_eq(quant_ftype_from_name("Q2_K_S")->ftype, 21);
        ck_assert_uint_eq(quant_ftype_from_name("Q2_K_S")->base_type, GGML_TYPE_Q2_K);
        ck_assert_ptr_null(quant_ftype_from_name("q4_k"));
        ck_assert_ptr_null(quant_ftype_from_name(NULL));
}
END_TEST

/* Output order: no layer first, then blk.N by number (blk.10 after blk.9), names sorted within. */
START_TEST(test_order) {
        Fake f;
        fake_llama(&f, 12, 256, true);
        QuantPlan p = plan_of(&f, "Q4_0");
        static const char *const first[] = { "output.weight", "output_norm.weight", "token_embd.weight",
                                             "blk.0.attn_k.weight", "blk.0.attn_norm.weight",
                                             "blk.0.attn_output.weight", "blk.0.attn_q.weight", "blk.0.attn_v.weight",
                                             "blk.0.ffn_down.weight", "blk.0.ffn_gate.weight", "blk.0.ffn_norm.weight",
                                             "blk.0.ffn_up.weight", "blk.1.attn_k.weight" };
        for (size_t i = 0; i < ELEMENTSOF(first); i++)
                ck_assert_str_eq(f.t[p.order[i]].name, first[i]);
        ck_assert_str_eq(f.t[p.order[3 + 9 * 9]].name, "blk.9.attn_k.weight");
        ck_assert_str_eq(f.t[p.order[3 + 9 * 10]].name, "blk.10.attn_k.weight");
        ck_assert_str_eq(f.t[p.order[p.n - 1]].name, "blk.11.ffn_up.weight");
        quant_plan_done(&p);
}
END_TEST

/* Q4_K_M / Q5_K_M: Q6_K for attn_v and ffn_down of layers i < n/8, i >= 7n/8, (i - n/8) % 3 == 2. */
START_TEST(test_more_bits) {
        const char *ft = _i == 0 ? "Q4_K_M" : "Q5_K_M";
        uint32_t base = _i == 0 ? GGML_TYPE_Q4_K : GGML_TYPE_Q5_K;
        static const bool more[12] = { 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 1, 1 }; /* n = 12: n/8 = 1, 7n/8 = 10 */
        char name[64];
        Fake f;

        fake_llama(&f, 12, 256, true);
        QuantPlan p = plan_of(&f, ft);
        ck_assert_uint_eq(type_of(&f, &p, "output.weight"), GGML_TYPE_Q6_K);
        ck_assert_uint_eq(type_of(&f, &p, "token_embd.weight"), base);
        ck_assert_uint_eq(type_of(&f, &p, "output_norm.weight"), GGML_TYPE_F32);
        for (unsigned l = 0; l < 12; l++) {
                snprintf(name, sizeof(name), "blk.%u.attn_v.weight", l);
                ck_assert_msg(type_of(&f, &p, name) == (more[l] ? GGML_TYPE_Q6_K : base), "%s", name);
                snprintf(name, sizeof(name), "blk.%u.ffn_down.weight", l);
                ck_assert_msg(type_of(&f, &p, name) == (more[l] ? GGML_TYPE_Q6_K : base), "%s", name);
                snprintf(name, sizeof(name), "blk.%u.attn_q.weight", l);
                ck_assert_uint_eq(type_of(&f, &p, name), base);
                snprintf(name, sizeof(name), "blk.%u.ffn_norm.weight", l);
                ck_assert_uint_eq(type_of(&f, &p, name), GGML_TYPE_F32);
        }
        quant_plan_done(&p);
}
END_TEST

START_TEST(test_q4_k_s) {
        char name[64];
        Fake f;

        fake_llama(&f, 16, 256, true);
        QuantPlan p = plan_of(&f, "Q4_K_S");
        for (unsigned l = 0; l < 16; l++) {
                snprintf(name, sizeof(name), "blk.%u.attn_v.weight", l);
                ck_assert_uint_eq(type_of(&f, &p, name), l < 4 ? GGML_TYPE_Q5_K : GGML_TYPE_Q4_K);
                snprintf(name, sizeof(name), "blk.%u.ffn_down.weight", l);
                ck_assert_uint_eq(type_of(&f, &p, name), l < 2 ? GGML_TYPE_Q5_K : GGML_TYPE_Q4_K);
        }
        quant_plan_done(&p);
}
END_TEST

/* Q2_K, Q2_K_S and Q3_K_S/M/L on 16 layers (n/16 = 1, n/8 = 2), with 1 and 4 heads per KV head. */
START_TEST(test_q2_q3) {
        enum { Q2 = GGML_TYPE_Q2_K, Q3 = GGML_TYPE_Q3_K, Q4 = GGML_TYPE_Q4_K, Q5 = GGML_TYPE_Q5_K };
        static const struct {
                const char *ft;
                uint32_t heads_kv, base;
                uint32_t v1, v2, down0, down1, out; /* attn_v of layers 1 and 2, ffn_down of 0 and 1, attn_output */
        } v[] = {
                { "Q2_K", 8, Q2, Q3, Q3, Q3, Q3, Q3 },   { "Q2_K", 2, Q2, Q4, Q4, Q3, Q3, Q3 },
                { "Q3_K_S", 8, Q3, Q3, Q3, Q3, Q3, Q3 }, { "Q3_K_M", 2, Q3, Q5, Q4, Q5, Q4, Q4 },
                { "Q3_K_L", 8, Q3, Q5, Q5, Q5, Q5, Q5 },
                /* Q2_K_S: attn_v Q4_K with 4 heads per KV head, ffn_down Q4_K below n/8 (layers 0 and 1). */
                { "Q2_K_S", 8, Q2, Q2, Q2, Q4, Q4, Q2 }, { "Q2_K_S", 2, Q2, Q4, Q4, Q4, Q4, Q2 },
        };
        Fake f;

        for (size_t i = 0; i < ELEMENTSOF(v); i++) {
                fake_llama(&f, 16, 256, true);
                fake_kv_u32(&f, "llama.attention.head_count", 8);
                fake_kv_u32(&f, "llama.attention.head_count_kv", v[i].heads_kv);
                QuantPlan p = plan_of(&f, v[i].ft);
                const struct {
                        const char *name;
                        uint32_t want;
                } at[] = {
                        { "blk.1.attn_v.weight", v[i].v1 },      { "blk.2.attn_v.weight", v[i].v2 },
                        { "blk.15.attn_v.weight", v[i].v2 },     { "blk.0.ffn_down.weight", v[i].down0 },
                        { "blk.1.ffn_down.weight", v[i].down1 }, { "blk.5.attn_output.weight", v[i].out },
                        { "blk.5.attn_q.weight", v[i].base },    { "token_embd.weight", v[i].base },
                        { "output.weight", GGML_TYPE_Q6_K },
                };
                for (size_t k = 0; k < ELEMENTSOF(at); k++) {
                        uint32_t got = type_of(&f, &p, at[k].name);
                        ck_assert_msg(got == at[k].want, "%s, %u KV heads: %s is %s, want %s", v[i].ft,
                                      v[i].heads_kv, at[k].name, ggml_type(got)->name, ggml_type(at[k].want)->name);
                }
                quant_plan_done(&p);
        }
}
END_TEST

/* Q2_K_S's Q2_K tensors need an importance matrix (token_embd and output do not): planned without one, refused. */
START_TEST(test_q2_k_s_needs_imatrix) {
        const QuantFtype *ft = quant_ftype_from_name("Q2_K_S");
        QuantPlan p = {};
        TpError err = {};
        Fake f;

        fake_llama(&f, 4, 256, true);
        ck_assert_int_eq(quant_plan(&f.g, ft, false, &p, &err), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err.message, "Q2_K_S needs an importance matrix"));
        ck_assert(quant_needs_imatrix(ft, "blk.0.attn_q.weight", GGML_TYPE_Q2_K));
        ck_assert(!quant_needs_imatrix(ft, "blk.0.ffn_down.weight", GGML_TYPE_Q4_K));
        ck_assert(!quant_needs_imatrix(ft, "token_embd.weight", GGML_TYPE_Q2_K));
        ck_assert(!quant_needs_imatrix(ft, "output.weight", GGML_TYPE_Q2_K));
        ck_assert(!quant_needs_imatrix(quant_ftype_from_name("Q2_K"), "blk.0.attn_q.weight", GGML_TYPE_Q2_K));
}
END_TEST

/* With an importance matrix, Q4_0 and Q5_0 give ffn_down of layers i < n/8 Q4_1 / Q5_1. */
START_TEST(test_imatrix_rule) {
        Fake f;
        TpError err = {};

        fake_llama(&f, 16, 256, true);
        for (int q5 = 0; q5 < 2; q5++)
                for (int with = 0; with < 2; with++) {
                        QuantPlan p = {};
                        uint32_t base = q5 ? GGML_TYPE_Q5_0 : GGML_TYPE_Q4_0, raised = q5 ? GGML_TYPE_Q5_1 : GGML_TYPE_Q4_1;
                        ck_assert_int_eq(quant_plan(&f.g, quant_ftype_from_name(q5 ? "Q5_0" : "Q4_0"), with, &p, &err), 0);
                        ck_assert_uint_eq(type_of(&f, &p, "blk.0.ffn_down.weight"), with ? raised : base);
                        ck_assert_uint_eq(type_of(&f, &p, "blk.1.ffn_down.weight"), with ? raised : base);
                        ck_assert_uint_eq(type_of(&f, &p, "blk.2.ffn_down.weight"), base);
                        ck_assert_uint_eq(type_of(&f, &p, "blk.0.attn_v.weight"), base);
                        quant_plan_done(&p);
                }
}
END_TEST

/* output.weight: Q6_K, except Q8_0 in Q8_0; tied embeddings give token_embd that treatment. */
START_TEST(test_output_and_tied) {
        Fake f;

        fake_llama(&f, 2, 256, true);
        QuantPlan p = plan_of(&f, "Q8_0");
        ck_assert_uint_eq(type_of(&f, &p, "output.weight"), GGML_TYPE_Q8_0);
        quant_plan_done(&p);
        p = plan_of(&f, "Q4_0");
        ck_assert_uint_eq(type_of(&f, &p, "output.weight"), GGML_TYPE_Q6_K);
        ck_assert_uint_eq(type_of(&f, &p, "token_embd.weight"), GGML_TYPE_Q4_0);
        quant_plan_done(&p);

        fake_llama(&f, 2, 256, false);
        p = plan_of(&f, "Q4_0");
        ck_assert_uint_eq(type_of(&f, &p, "token_embd.weight"), GGML_TYPE_Q6_K);
        quant_plan_done(&p);
        p = plan_of(&f, "F16");
        ck_assert_uint_eq(type_of(&f, &p, "token_embd.weight"), GGML_TYPE_F16);
        ck_assert_uint_eq(type_of(&f, &p, "blk.0.attn_norm.weight"), GGML_TYPE_F32);
        quant_plan_done(&p);
}
END_TEST

/* Rows of 160: no 256-block fits. Q4_K -> Q5_0, Q6_K -> Q8_0; output: Q8_0 (row not a multiple of 256). */
START_TEST(test_fallback) {
        Fake f;

        fake_llama(&f, 8, 160, true);
        QuantPlan p = plan_of(&f, "Q4_K_M");
        ck_assert_uint_eq(type_of(&f, &p, "output.weight"), GGML_TYPE_Q8_0);
        ck_assert_uint_eq(type_of(&f, &p, "blk.1.attn_q.weight"), GGML_TYPE_Q5_0);
        ck_assert_uint_eq(type_of(&f, &p, "blk.0.attn_v.weight"), GGML_TYPE_Q8_0); /* Q6_K's fallback */
        ck_assert_uint_gt(p.n_fallback, 0);
        quant_plan_done(&p);
        p = plan_of(&f, "Q5_K_S");
        ck_assert_uint_eq(type_of(&f, &p, "blk.1.attn_q.weight"), GGML_TYPE_Q5_1);
        quant_plan_done(&p);

        fake_llama(&f, 1, 48, true); /* not even a 32-block: F16 */
        p = plan_of(&f, "Q4_0");
        ck_assert_uint_eq(type_of(&f, &p, "blk.0.attn_q.weight"), GGML_TYPE_F16);
        ck_assert_uint_eq(type_of(&f, &p, "output.weight"), GGML_TYPE_F16); /* Q8_0, then F16 */
        quant_plan_done(&p);
}
END_TEST

START_TEST(test_allowed) {
        static const struct {
                const char *name;
                uint64_t ne1;
                bool allowed;
        } cases[] = {
                { "blk.0.attn_q.weight", 64, true },   { "blk.0.attn_q.bias", 64, false },
                { "blk.0.attn_norm.weight", 64, false }, { "blk.0.ffn_gate_inp.weight", 64, false },
                { "position_embd.weight", 64, false }, { "token_types.weight", 64, false },
                { "blk.0.ssm_conv1d.weight", 64, false }, { "blk.0.attn_q.weight", 1, false },
                { "v.blk.0.attn_q.weight", 64, true }, { "weight.x", 64, false },
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                const uint64_t ne[4] = { 64, cases[i].ne1, 1, 1 };
                ck_assert_msg(quant_tensor_allowed(cases[i].name, ne) == cases[i].allowed, "%s", cases[i].name);
        }
        const uint64_t ne3[4] = { 64, 1, 4, 1 }; /* 3-D experts: ggml_n_dims 3 */
        ck_assert(quant_tensor_allowed("blk.0.ffn_up_exps.weight", ne3));
}
END_TEST

START_TEST(test_refusals) {
        QuantPlan p = {};
        TpError err = {};
        Fake f;

        fake_llama(&f, 2, 256, true);
        f.kv[0].str = (char *) "gemma";
        ck_assert_int_eq(quant_plan(&f.g, quant_ftype_from_name("Q4_0"), false, &p, &err), -EOPNOTSUPP);
        ck_assert(strstr(err.message, "architecture 'gemma'"));

        fake_llama(&f, 2, 256, true);
        f.g.n_kv = 1; /* no llama.block_count */
        ck_assert_int_eq(quant_plan(&f.g, quant_ftype_from_name("Q4_0"), false, &p, &err), -EOPNOTSUPP);
        ck_assert(strstr(err.message, "llama.block_count"));

        fake_llama(&f, 2, 256, true);
        f.t[1].type = GGML_TYPE_Q8_0; /* blk.0.attn_norm is 1-D: kept, so allowed */
        f.t[2].type = GGML_TYPE_Q8_0; /* blk.0.attn_q would become Q4_0 */
        ck_assert_int_eq(quant_plan(&f.g, quant_ftype_from_name("Q4_0"), false, &p, &err), -EOPNOTSUPP);
        ck_assert(strstr(err.message, "requantizing"));
        ck_assert_int_eq(quant_plan(&f.g, quant_ftype_from_name("Q8_0"), false, &p, &err), 0); /* the same type: copied */
        quant_plan_done(&p);
}
END_TEST

static Suite *quant_mix_suite(void) {
        Suite *s = suite_create("quant_mix");
        TCase *tc = tcase_create("core");

        tcase_add_test(tc, test_ftype_names);
        tcase_add_test(tc, test_order);
        tcase_add_loop_test(tc, test_more_bits, 0, 2);
        tcase_add_test(tc, test_q4_k_s);
        tcase_add_test(tc, test_q2_q3);
        tcase_add_test(tc, test_imatrix_rule);
        tcase_add_test(tc, test_q2_k_s_needs_imatrix);
        tcase_add_test(tc, test_output_and_tied);
        tcase_add_test(tc, test_fallback);
        tcase_add_test(tc, test_allowed);
        tcase_add_test(tc, test_refusals);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(quant_mix_suite)
