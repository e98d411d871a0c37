/* SPDX-License-Identifier: MIT */
/*
 * common/codec/predict.c: the shape's refusals; a prediction made group by group from any block
 * equals the whole tensor's; token_embd's swapped factors; the fold's arithmetic element by
 * element; and golden digests of every type's prediction, so that x86-64 and aarch64 (and
 * every quantizer implementation) are held to the same bytes; with an importance row, whole
 * rows through ggml's weighted quantizers, and the row's refusals.
 */

#include <check.h>
#include <errno.h>
#include <math.h>
#include <string.h>

#include "check-main.h"
#include "dequant.h"
#include "dispatch.h"
#include "ggml.h"
#include "predict.h"
#include "quant.h"
#include "sha256.h"

#define IN 512
#define OUT 6
#define RANK 4

/* A fixed pseudo-random stream (xorshift), the same on every machine. */
static uint32_t rnd_state;
static float rnd(void) {
        rnd_state ^= rnd_state << 13;
        rnd_state ^= rnd_state >> 17;
        rnd_state ^= rnd_state << 5;
        return (float) (int32_t) (rnd_state % 2001) / 1000.0f - 1.0f;   /* -1 .. 1 in steps of 0.001 */
}

/* The base tensor of @type (quantized from floats), and factors P, Q stored as F32 (not embd). */
static LoraFactors *fixture(uint32_t type, float factor, uint8_t *base) {
        float x[IN * OUT], a[IN * RANK], b[RANK * OUT];
        LoraShape s = { .type = type, .in = IN, .out = OUT, .rank = RANK, .a_type = GGML_TYPE_F32,
                        .b_type = GGML_TYPE_F32, .factor = factor };
        LoraFactors *f = NULL;
        TpError err = {};

        rnd_state = 2463534242u;
        for (size_t i = 0; i < IN * OUT; i++)
                x[i] = rnd() * 0.05f;
        for (size_t i = 0; i < IN * RANK; i++)
                a[i] = rnd() * 0.02f;
        for (size_t i = 0; i < RANK * OUT; i++)
                b[i] = rnd() * 0.02f;
        quantize_rows(type, x, base, OUT, IN);
        ck_assert_msg(lora_shape_check(&s, &err) == 0, "%s", err.message);
        ck_assert_int_eq(lora_factors_new(&s, &f), 0);
        lora_factors_load(f, false, 0, (const uint8_t *) a, IN * RANK);
        lora_factors_load(f, true, 0, (const uint8_t *) b, RANK * OUT);
        ck_assert_int_eq(lora_factors_check(f, &err), 0);
        return f;
}

static const uint32_t types[] = {
        GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1,
        GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K,
};

/* The digest of each type's prediction of the whole fixture tensor, on every machine (x86-64 made them). */
static const char *const golden[] = {
        "94343f4cfae1d3dfcc41dac027f7988c7954ed64ab5ef077fdb90254942cc944",
        "27e5ee669a6910145e5d7e38abe69087c36b1c0bc89f34b03c3facc821eff024",
        "1e6aa7011c885eb2cde04ff534dd3d5051aa755c687cd778ab76dbaa71bb5a83",
        "940fee331cc2dce536114b2e90783d3d0fd5ea75cb652252cd04682b5578ed97",
        "852d1eec4ae78aa22b1bebe1d8dc79021a2fe33bc2c089946cb872223e3a160d",
        "0b2749e3247a01b8bff1f9786e233fad58883723f92d3a949f70d429bcefa0dc",
        "36baa781e249162c1a29fb1745d56739822fc54b04e2ddaa27b6c30666e803b9",
        "18f626d32f5dce886f22968a66fcdc067b33fb328288967a3a2669cda7729b7b",
        "fae4a2a570375d6bd21f09973357653094480b737ea6b2c894ce19a58fa23555",
        "8665c4167a8f38e04ce205dd177f0857143d1ffcadfde0443e3bfc8be67059c4",
        "38e0271200d095f3d436c3e468de9ee403bead51f6cc85bc8ea4e407cd82e071",
};

START_TEST(test_groups_and_golden) {
        uint32_t type = types[_i];
        const GgmlType *t = ggml_type(type);
        size_t nblocks = IN * OUT / t->block_size, bytes = nblocks * t->type_size;
        uint8_t base[IN * OUT * 4], whole[IN * OUT * 4], pieces[IN * OUT * 4];
        float scratch[IN * OUT + IN];
        _cleanup_(lora_factors_freep) LoraFactors *f = fixture(type, 0.75f, base);

        ck_assert_uint_le(lora_predict_scratch(f, nblocks), ELEMENTSOF(scratch));
        lora_predict(f, 0, base, nblocks, scratch, whole);
        /* Pieces of 1, 2, 3, ... blocks from every start: rows are crossed at any block. */
        for (size_t at = 0, k = 1; at < nblocks; at += k, k = k % 5 + 1) {
                size_t n = nblocks - at < k ? nblocks - at : k;
                lora_predict(f, at, base + at * t->type_size, n, scratch, pieces + at * t->type_size);
        }
        ck_assert_mem_eq(whole, pieces, bytes);

        /* The same bytes from every quantizer implementation this CPU runs. */
        for (size_t i = 0; kernel_impl(KERNEL_QUANT, i, NULL); i++) {
                bool ok;
                const char *impl = kernel_impl(KERNEL_QUANT, i, &ok);
                if (!ok)
                        continue;
                ck_assert_int_eq(kernels_force(impl), 0);
                lora_predict(f, 0, base, nblocks, scratch, pieces);
                ck_assert_msg(memcmp(whole, pieces, bytes) == 0, "%s: %s differs", t->name, impl);
        }
        ck_assert_int_eq(kernels_force(NULL), 0);

        char hex[SHA256_HEX_SIZE];
        uint8_t d[SHA256_DIGEST_SIZE];
        sha256_digest(whole, bytes, d);
        sha256_to_hex(d, hex);
        ck_assert_msg(strcmp(hex, golden[_i]) == 0, "%s: prediction digest %s, golden %s", t->name, hex, golden[_i]);
}
END_TEST

/* Element by element, the fold's arithmetic before the quantizer: checked through F32, which stores it. */
START_TEST(test_fold_arithmetic) {
        uint8_t base[IN * OUT * 4], out[IN * OUT * 4];
        float scratch[IN * OUT + IN], x[IN * OUT], w[IN * OUT];
        _cleanup_(lora_factors_freep) LoraFactors *f = fixture(GGML_TYPE_F32, -1.5f, base);

        lora_predict(f, 0, base, IN * OUT, scratch, out);
        memcpy(x, base, sizeof(x));
        memcpy(w, out, sizeof(w));
        for (size_t o = 0; o < OUT; o++)
                for (size_t i = 0; i < IN; i++) {
                        float acc = 0.0f;
                        for (size_t k = 0; k < RANK; k++) {
                                volatile float prod = f->p[o * RANK + k] * f->q[k * IN + i];
                                acc = acc + prod;
                        }
                        volatile float dd = -1.5f * acc;
                        float want = x[o * IN + i] + dd;
                        ck_assert_msg(memcmp(&want, &w[o * IN + i], 4) == 0, "element %zu, %zu: %a, want %a", o, i,
                                      (double) w[o * IN + i], (double) want);
                }
}
END_TEST

/* Rounds *v to F16 in place; returns its F16 bits. */
static uint16_t round_to_f16(float *v) {
        uint16_t h;
        quantize_rows(GGML_TYPE_F16, v, &h, 1, 1);
        dequantize_blocks(GGML_TYPE_F16, &h, v, 1);
        return h;
}

/* token_embd: lora_a is P ([rank, out]) and lora_b is Qᵀ ([rank, in]): the same prediction. */
START_TEST(test_embd) {
        uint8_t base[IN * OUT * 2], plain[IN * OUT * 2], swapped[IN * OUT * 2];
        float scratch[IN * OUT + IN];
        _cleanup_(lora_factors_freep) LoraFactors *f = fixture(GGML_TYPE_F16, 2.0f, base);
        LoraShape s = f->shape;
        LoraFactors *g = NULL;
        uint16_t pa[RANK * OUT], qb[RANK * IN];
        TpError err = {};

        s.embd = true;
        s.a_type = s.b_type = GGML_TYPE_F16;
        /* The same factors in F16, swapped: f's own are rounded to F16 first, so both hold the same values. */
        ck_assert_int_eq(lora_factors_new(&s, &g), 0);
        for (size_t o = 0; o < OUT; o++)
                for (size_t k = 0; k < RANK; k++)
                        pa[o * RANK + k] = round_to_f16(&f->p[o * RANK + k]);
        for (size_t k = 0; k < RANK; k++)
                for (size_t i = 0; i < IN; i++)
                        qb[i * RANK + k] = round_to_f16(&f->q[k * IN + i]);
        lora_factors_load(g, false, 0, (const uint8_t *) pa, RANK * OUT);
        /* lora_b in two pieces, split inside a row: the transposition is by element. */
        lora_factors_load(g, true, 0, (const uint8_t *) qb, 7);
        lora_factors_load(g, true, 7, (const uint8_t *) (qb + 7), RANK * IN - 7);
        ck_assert_int_eq(lora_factors_check(g, &err), 0);
        lora_predict(f, 0, base, IN * OUT, scratch, plain);
        lora_predict(g, 0, base, IN * OUT, scratch, swapped);
        ck_assert_mem_eq(plain, swapped, IN * OUT * 2);
        lora_factors_free(g);
}
END_TEST

/* The types whose quantizers take an importance row, and each one's prediction digest with the fixture's row. */
static const uint32_t weighted_types[] = {
        GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K,
        GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K,
};
static const char *const weighted_golden[] = {
        "40b97d09ea625ce6163f37e99c4ca6fc5f5a57a7faf8108c21596fce55331f85",
        "037db9082779e375019d3512759a37e7ada1978a82be91da6c392c0260105c97",
        "4f8e0f0167f1849851ecb88072b89072d14acaa3a3829bb5ac8c0d88f6976bd7",
        "074387b8aaf15ba3d175e9595d0141b952e16b4ca6bc167a5a9b73d143c59d23",
        "2225d1aab9a649466b86fdd8ff5e62ed536eb6f4233f960e72e19dd4218ceb98",
        "067a74454a51d5a2c429a34cf7031c3237cd9862ba89aa884c540657e0b4b384",
        "79dfbef6cf426abea397a049f8140ee19714728e02f9221c0f38a161ab3975cb",
        "dfe9e41f13458f92237ef05d4f625841f35634427942b445e936dd1970145a37",
        "859058490b04a7bf0ad63f0988d65ff309ee3f606ac90415053f321851fccb76",
};

/*
 * With an importance row: the prediction is ggml's weighted quantizer over the fold's floats,
 * whole rows at a time (Q4_0 .. Q5_1 weigh each block by its row's mean square): row by row
 * equals all rows at once, both equal quantize_rows_weighted() of dequantize + f·P·Q, and differ
 * from the prediction without the row. Golden digests hold every machine to the same bytes.
 */
START_TEST(test_importance) {
        uint32_t type = weighted_types[_i];
        const GgmlType *t = ggml_type(type);
        size_t nblocks = IN * OUT / t->block_size, bytes = nblocks * t->type_size, row_blocks = IN / t->block_size;
        uint8_t base[IN * OUT * 4], whole[IN * OUT * 4], rows[IN * OUT * 4], want[IN * OUT * 4], plain[IN * OUT * 4];
        float scratch[IN * OUT + IN], x[IN * OUT], w[IN];
        _cleanup_(lora_factors_freep) LoraFactors *f = fixture(type, 0.75f, base);
        _cleanup_(lora_factors_freep) LoraFactors *g = NULL;
        LoraShape s = f->shape;
        TpError err = {};

        lora_predict(f, 0, base, nblocks, scratch, plain);
        s.importance = true;
        ck_assert_msg(lora_shape_check(&s, &err) == 0, "%s", err.message);
        ck_assert_uint_eq(lora_shape_factor_bytes(&s), lora_shape_factor_bytes(&f->shape) + IN * sizeof(float));
        ck_assert_int_eq(lora_factors_new(&s, &g), 0);
        memcpy(g->p, f->p, OUT * RANK * sizeof(float));
        memcpy(g->q, f->q, RANK * IN * sizeof(float));
        for (size_t i = 0; i < IN; i++)         /* importances over three decades, as real activations spread */
                g->w[i] = powf(10.0f, 1.5f * rnd());
        ck_assert_int_eq(lora_factors_check(g, &err), 0);

        lora_predict(g, 0, base, nblocks, scratch, whole);
        for (size_t o = 0; o < OUT; o++)
                lora_predict(g, o * row_blocks, base + o * row_blocks * t->type_size, row_blocks, scratch,
                             rows + o * row_blocks * t->type_size);
        ck_assert_mem_eq(whole, rows, bytes);

        /* The fold's floats (test_fold_arithmetic checks them element by element), then ggml's weighted quantizer. */
        dequantize_blocks(type, base, x, nblocks);
        for (size_t o = 0; o < OUT; o++)
                for (size_t i = 0; i < IN; i++) {
                        float acc = 0.0f;
                        for (size_t k = 0; k < RANK; k++) {
                                volatile float prod = g->p[o * RANK + k] * g->q[k * IN + i];
                                acc = acc + prod;
                        }
                        volatile float d = 0.75f * acc;
                        x[o * IN + i] = x[o * IN + i] + d;
                }
        memcpy(w, g->w, sizeof(w));
        quantize_rows_weighted(type, x, want, OUT, IN, w);
        ck_assert_mem_eq(whole, want, bytes);
        ck_assert_msg(memcmp(whole, plain, bytes) != 0, "%s: the row changed nothing", t->name);

        char hex[SHA256_HEX_SIZE];
        uint8_t dg[SHA256_DIGEST_SIZE];
        sha256_digest(whole, bytes, dg);
        sha256_to_hex(dg, hex);
        ck_assert_msg(strcmp(hex, weighted_golden[_i]) == 0, "%s: prediction digest %s, golden %s", t->name, hex,
                      weighted_golden[_i]);
}
END_TEST

/* Groups of a span with an importance row: the most whole rows in the layout's group, at least one. */
START_TEST(test_importance_groups) {
        LoraShape s = { .type = GGML_TYPE_Q4_0, .in = 1024, .out = 300, .rank = 4, .a_type = GGML_TYPE_F32,
                        .b_type = GGML_TYPE_F32, .factor = 1.0f };
        TpError err = {};

        ck_assert_uint_eq(lora_shape_row_bytes(&s), 1024 / 32 * 18);
        ck_assert_uint_eq(lora_shape_group_bytes(&s, 65520), 65520);
        s.importance = true;
        ck_assert_int_eq(lora_shape_check(&s, &err), 0);
        ck_assert_uint_eq(lora_shape_group_bytes(&s, 65520), 113 * 576);
        /* A row of 65,520 bytes (3,640 blocks) is one group; one block more is refused. */
        s.in = 3640 * 32;
        ck_assert_int_eq(lora_shape_check(&s, &err), 0);
        ck_assert_uint_eq(lora_shape_group_bytes(&s, 65520), 65520);
        s.in += 32;
        ck_assert_int_eq(lora_shape_check(&s, &err), -EBADMSG);
        ck_assert_ptr_nonnull(strstr(err.message, "more than one group"));
}
END_TEST

/* An importance value that is negative, NaN or infinite: refused (the weighted quantizers take none of them). */
START_TEST(test_bad_importance) {
        static const float bad[] = { -1.0f, NAN, INFINITY };
        uint8_t base[IN * OUT * 2];
        _cleanup_(lora_factors_freep) LoraFactors *f = fixture(GGML_TYPE_Q4_K, 1.0f, base);
        _cleanup_(lora_factors_freep) LoraFactors *g = NULL;
        LoraShape s = f->shape;
        TpError err = {};

        s.importance = true;
        ck_assert_int_eq(lora_factors_new(&s, &g), 0);
        memcpy(g->p, f->p, OUT * RANK * sizeof(float));
        memcpy(g->q, f->q, RANK * IN * sizeof(float));
        for (size_t i = 0; i < IN; i++)
                g->w[i] = 1.0f;
        g->w[5] = -0.0f;        /* zero is an importance; -0 is zero */
        ck_assert_int_eq(lora_factors_check(g, &err), 0);
        g->w[5] = bad[_i];
        ck_assert_int_eq(lora_factors_check(g, &err), -EDOM);
        ck_assert_ptr_nonnull(strstr(err.message, "importance row's value 5"));
}
END_TEST

static const struct {
        LoraShape s;
        const char *message;
} bad_shapes[] = {
        { { GGML_TYPE_IQ4_NL, 256, 4, 4, GGML_TYPE_F32, GGML_TYPE_F32, false, 1.0f }, "no predictor" },
        { { GGML_TYPE_Q8_0, 48, 4, 4, GGML_TYPE_F32, GGML_TYPE_F32, false, 1.0f }, "whole 32-element blocks" },
        { { GGML_TYPE_Q8_0, 0, 4, 4, GGML_TYPE_F32, GGML_TYPE_F32, false, 1.0f }, "whole" },
        { { GGML_TYPE_Q8_0, 64, 4, 0, GGML_TYPE_F32, GGML_TYPE_F32, false, 1.0f }, "rank 0" },
        { { GGML_TYPE_Q8_0, 64, 4, 1025, GGML_TYPE_F32, GGML_TYPE_F32, false, 1.0f }, "rank 1025" },
        { { GGML_TYPE_Q8_0, 64, 4, 4, GGML_TYPE_Q8_0, GGML_TYPE_F32, false, 1.0f }, "F32, F16, BF16 or I8" },
        { { GGML_TYPE_Q8_0, 64, 4, 4, GGML_TYPE_F32, GGML_TYPE_I16, false, 1.0f }, "F32, F16, BF16 or I8" },
        { { GGML_TYPE_Q8_0, 64, 4, 4, GGML_TYPE_F32, GGML_TYPE_F32, false, INFINITY }, "not finite" },
        { { GGML_TYPE_Q8_0, 64, 4, 4, GGML_TYPE_F32, GGML_TYPE_F32, false, NAN }, "not finite" },
        { { GGML_TYPE_Q8_0, 1u << 22, 1u << 22, 4, GGML_TYPE_F32, GGML_TYPE_F32, false, 1.0f }, "exceed the cap" },
        { { GGML_TYPE_F16, UINT64_MAX / 2, 4, 4, GGML_TYPE_F32, GGML_TYPE_F32, false, 1.0f }, "exceed the cap" },
        { { GGML_TYPE_Q8_0, 64, 4, 4, GGML_TYPE_F32, GGML_TYPE_F32, false, 1.0f, true }, "takes none" },
        { { GGML_TYPE_F16, 64, 4, 4, GGML_TYPE_F32, GGML_TYPE_F32, false, 1.0f, true }, "takes none" },
};

START_TEST(test_bad_shapes) {
        TpError err = {};
        ck_assert_int_eq(lora_shape_check(&bad_shapes[_i].s, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, bad_shapes[_i].message), "row %d: '%s' lacks '%s'", _i, err.message,
                      bad_shapes[_i].message);
}
END_TEST

START_TEST(test_bad_factors) {
        uint8_t base[IN * OUT * 2];
        _cleanup_(lora_factors_freep) LoraFactors *f = fixture(GGML_TYPE_Q8_0, 1.0f, base);
        float nan = NAN;
        TpError err = {};

        lora_factors_load(f, true, 3, (const uint8_t *) &nan, 1);
        ck_assert_int_eq(lora_factors_check(f, &err), -EDOM);
        ck_assert_ptr_nonnull(strstr(err.message, "lora_b holds NaN or infinity"));
}
END_TEST

/* @n units of a factor of @type: F32 values; F16, BF16 rounded from them; I8 steps 2^-9 .. 2^-4, then any k. */
static void stored_units(uint32_t type, unsigned rank, size_t n, uint8_t *out) {
        for (size_t i = 0; i < n; i++) {
                float v = rnd() * 0.3f;
                uint16_t h;
                if (type == GGML_TYPE_F32)
                        memcpy(&out[4 * i], &v, 4);
                else if (type == GGML_TYPE_I8)
                        out[i] = (uint8_t) (int8_t) (i < rank ? -9 + (int) (rnd_state % 6) : (int) (rnd_state % 256) - 128);
                else {
                        quantize_rows(type, &v, &h, 1, 1);
                        memcpy(&out[2 * i], &h, 2);
                }
        }
}

/*
 * Byte planes, as a bundle carries the factors: split, loaded plane by plane in uneven pieces and
 * settled, they give the very floats lora_factors_load() gives from the stored bytes, for every
 * factor type, token_embd's transposed lora_b too.
 */
START_TEST(test_byte_planes) {
        static const uint32_t ft[] = { GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_I8 };
        const uint32_t at = ft[_i % 4], bt = ft[(_i + 1) % 4];
        const bool embd = _i >= 4;
        LoraShape s = { .type = GGML_TYPE_Q8_0, .in = 64, .out = 6, .rank = 3, .a_type = at, .b_type = bt,
                        .embd = embd, .factor = 1.0f };
        _cleanup_(lora_factors_freep) LoraFactors *want = NULL;
        _cleanup_(lora_factors_freep) LoraFactors *got = NULL;
        uint8_t stored[2][64 * 3 * 4 + 3], planes[64 * 3 * 4 + 3];

        ck_assert_int_eq(lora_factors_new(&s, &want), 0);
        ck_assert_int_eq(lora_factors_new(&s, &got), 0);
        rnd_state = 88675123u;
        for (int b = 0; b < 2; b++) {
                size_t n = lora_shape_units(&s, b), width = ggml_type(b ? bt : at)->type_size;
                stored_units(b ? bt : at, 3, n, stored[b]);
                lora_factors_load(want, b, 0, stored[b], n);
                byte_planes_split(stored[b], n, width, planes);
                for (unsigned plane = 0; plane < width; plane++)
                        for (size_t at0 = 0, k; at0 < n; at0 += k) {
                                k = n - at0 < 7 ? n - at0 : 7;
                                lora_factors_load_plane(got, b, plane, at0, planes + plane * n + at0, k);
                        }
        }
        lora_factors_settle(got);
        ck_assert_mem_eq(got->p, want->p, s.out * s.rank * sizeof(float));
        ck_assert_mem_eq(got->q, want->q, s.rank * s.in * sizeof(float));
}
END_TEST

/*
 * I8 factors (predict.h): element e of a factor is k · 2^(its component's exponent), exactly, its
 * component a row of lora_a ([in, rank]) or e mod rank for the others, landing where P and Q
 * have it; the bytes are the exponents, then the ks. Not embd, and token_embd's swapped factors.
 */
START_TEST(test_i8_factors) {
        const bool embd = _i == 1;
        LoraShape s = { .type = GGML_TYPE_Q4_0, .in = 64, .out = 6, .rank = 3, .a_type = GGML_TYPE_I8,
                        .b_type = GGML_TYPE_I8, .embd = embd, .factor = 1.0f };
        _cleanup_(lora_factors_freep) LoraFactors *f = NULL;
        uint8_t stored[64 * 3 + 3];
        TpError err = {};

        ck_assert_int_eq(lora_shape_check(&s, &err), 0);
        ck_assert_uint_eq(lora_shape_a_bytes(&s), (embd ? 6 : 64) * 3 + 3);
        ck_assert_uint_eq(lora_shape_factor_bytes(&s), (64 + 6) * 3 + 6);
        ck_assert_int_eq(lora_factors_new(&s, &f), 0);
        rnd_state = 521288629u;
        for (int b = 0; b < 2; b++) {
                uint64_t n = lora_shape_elems(&s, b), ne0 = !b && !embd ? s.in : s.rank;
                stored_units(GGML_TYPE_I8, 3, n + 3, stored);
                stored[3] = 0x80;       /* -128 */
                stored[4] = 0x7f;
                lora_factors_load(f, b, 0, stored, 2);          /* in pieces, the steps first */
                lora_factors_load(f, b, 2, stored + 2, n + 1);
                for (uint64_t e = 0; e < n; e++) {
                        /* ne [ne0, ne1]: lora_a [in, rank] has a component per row; the others' is the column. */
                        uint64_t c = ne0 == s.rank ? e % s.rank : e / s.in;
                        float want = ldexpf((float) (int8_t) stored[3 + e], (int8_t) stored[c]);
                        bool in_p = b != embd;
                        float got = in_p ? f->p[e] : !embd ? f->q[e] : f->q[(e % s.rank) * s.in + e / s.rank];
                        ck_assert_msg(got == want && lora_shape_component(&s, b, e) == c, "%s element %u: %g, expected %g",
                                      b ? "lora_b" : "lora_a", (unsigned) e, (double) got, (double) want);
                }
        }
        ck_assert_int_eq(lora_factors_check(f, &err), 0);
}
END_TEST

/* An I8 step below the normal floats, and one whose k · 2^e overflows: refused. */
START_TEST(test_bad_i8) {
        LoraShape s = { .type = GGML_TYPE_Q4_0, .in = 32, .out = 2, .rank = 1, .a_type = GGML_TYPE_I8,
                        .b_type = GGML_TYPE_I8, .factor = 1.0f };
        _cleanup_(lora_factors_freep) LoraFactors *f = NULL;
        uint8_t a[33] = { 0 }, b[3] = { (uint8_t) (int8_t) -126, 1, 0xff };
        TpError err = {};

        ck_assert_int_eq(lora_factors_new(&s, &f), 0);
        a[0] = (uint8_t) (int8_t) (_i == 0 ? -127 : _i == 1 ? -128 : 127);
        a[1] = _i == 2 ? 2 : 1;         /* 2 · 2^127: infinite */
        lora_factors_load(f, false, 0, a, sizeof(a));
        lora_factors_load(f, true, 0, b, sizeof(b));
        ck_assert_int_eq(lora_factors_check(f, &err), -EDOM);
        ck_assert_ptr_nonnull(strstr(err.message, (const char *[]) { "lora_a's step 0 is 2^-127", "lora_a's step 0 is 2^-128",
                                                                     "lora_a holds NaN or infinity" }[_i]));
        ck_assert_float_eq(f->p[0], 0x1p-126f);
        ck_assert_float_eq(f->p[1], -0x1p-126f);
}
END_TEST

static Suite *predict_suite(void) {
        Suite *s = suite_create("predict");
        TCase *tc = tcase_create("predict");

        tcase_add_loop_test(tc, test_groups_and_golden, 0, (int) ELEMENTSOF(types));
        tcase_add_test(tc, test_fold_arithmetic);
        tcase_add_test(tc, test_embd);
        tcase_add_loop_test(tc, test_bad_shapes, 0, (int) ELEMENTSOF(bad_shapes));
        tcase_add_test(tc, test_bad_factors);
        tcase_add_loop_test(tc, test_byte_planes, 0, 8);
        tcase_add_loop_test(tc, test_i8_factors, 0, 2);
        tcase_add_loop_test(tc, test_bad_i8, 0, 3);
        tcase_add_loop_test(tc, test_importance, 0, (int) ELEMENTSOF(weighted_types));
        tcase_add_test(tc, test_importance_groups);
        tcase_add_loop_test(tc, test_bad_importance, 0, 3);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(predict_suite)
