/* SPDX-License-Identifier: MIT */
/* A lora span's residual range-coded with the prediction's floats (predict-ac.h): gain, round trips, hostile groups. */

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check-main.h"
#include "delta-test.h"
#include "dequant.h"
#include "ggml.h"
#include "predict-ac.h"
#include "predict.h"
#include "quant.h"
#include "sha256.h"

static const uint32_t types[] = { GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q8_0,
                                  GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K };

/* A group as a lora span has it: the base quantized, the task's floats quantized, the prediction and its floats. */
typedef struct Case {
        size_t len, nblocks;
        uint8_t *pred, *target;
        float *w;
} Case;

static void case_free(Case *c) {
        free(c->pred);
        free(c->target);
        free(c->w);
}

/*
 * @nblocks blocks of weights 0.02 · s · N(0, 1) (s per block in [0.75, 1.25)), the task's the same
 * plus a change of @rel times 0.02 · N(0, 1): the base quantized and dequantized, the change added
 * (the device's floats), quantized (the prediction); the task's floats quantized (the target).
 */
static Case make_case(uint32_t type, size_t nblocks, double rel) {
        const GgmlType *t = ggml_type(type);
        size_t n = nblocks * t->block_size;
        float *wb = malloc(n * sizeof(float)), *wt = malloc(n * sizeof(float)), *w = malloc(n * sizeof(float));
        uint8_t *base = malloc(nblocks * t->type_size);
        Case c = { nblocks * t->type_size, nblocks, malloc(nblocks * t->type_size), malloc(nblocks * t->type_size), w };

        ck_assert(wb && wt && w && base && c.pred && c.target);
        double s = 1;
        for (size_t i = 0; i < n; i++) {
                if (i % t->block_size == 0)
                        s = 0.75 + 0.5 * (double) (rng() >> 11) / 9007199254740992.0;
                double change = rel * 0.02 * gauss();
                wb[i] = (float) (0.02 * s * gauss());
                wt[i] = (float) (wb[i] + change);
                w[i] = (float) change;          /* the base's dequantized floats are added below */
        }
        quantize_rows(type, wb, base, nblocks, t->block_size);
        quantize_rows(type, wt, c.target, nblocks, t->block_size);
        dequantize_blocks(type, base, wb, nblocks);
        for (size_t i = 0; i < n; i++)
                w[i] += wb[i];
        quantize_rows(type, w, c.pred, nblocks, t->block_size);
        free(wb);
        free(wt);
        free(base);
        return c;
}

static void check_ac_round_trip(uint32_t type, const float *w, const uint8_t *pred, const uint8_t *target, size_t len,
                                const uint8_t *coded) {
        uint8_t *back = malloc(len + 16);

        ck_assert_ptr_nonnull(back);
        memset(back + len, 0x5a, 16);
        predict_ac_decode(type, w, pred, coded, len, back);
        ck_assert_msg(memcmp(back, target, len) == 0, "%s: the group does not round-trip", ggml_type(type)->name);
        for (int i = 0; i < 16; i++)
                ck_assert_uint_eq(back[len + i], 0x5a);
        free(back);
}

/*
 * What it gains: on a change of a tenth of the weights' spread, the residual against the
 * prediction, through zstd -19, against the type's planes (delta.h) through zstd -19. The range
 * coder knows where each predicted float falls within its step; it must save a fifth or more.
 */
START_TEST(test_ac_gain) {
        uint32_t type = types[_i];
        DeltaLayout l = delta_layout_for_ggml(type);
        size_t nblocks = delta_group_bytes(l) / ggml_type(type)->type_size;

        rng_state = 7000 + (uint64_t) _i;
        Case c = make_case(type, nblocks, 0.1);
        uint8_t *planes = malloc(c.len), *coded = malloc(c.len + 16);
        ck_assert(planes && coded);
        memset(coded + c.len, 0xa5, 16);
        ck_assert(delta_encode(l, c.pred, c.target, c.len, planes));
        ck_assert(predict_ac_encode(type, c.w, c.pred, c.target, c.len, coded));
        for (int i = 0; i < 16; i++)
                ck_assert_uint_eq(coded[c.len + i], 0xa5);
        check_ac_round_trip(type, c.w, c.pred, c.target, c.len, coded);
        size_t zp = zstd_size(planes, c.len), za = zstd_size(coded, c.len);
        ck_assert_msg(za * 5 < zp * 4, "%s: ac %zu bytes, planes %zu", ggml_type(type)->name, za, zp);

        /* Nothing to predict: the stream does not fit, and says so. */
        fill_random(c.target, c.len);
        ck_assert(!predict_ac_encode(type, c.w, c.pred, c.target, c.len, coded));
        free(planes);
        free(coded);
        case_free(&c);
}
END_TEST

/*
 * Groups no quantizer makes still round-trip when they fit: floats that are NaN, infinite or huge;
 * target scales of 0, infinity and NaN; steps past the type's range; a tail of part of a block;
 * groups shorter than the stream's length word.
 */
START_TEST(test_ac_hostile_round_trip) {
        uint32_t type = types[_i];
        const GgmlType *t = ggml_type(type);
        static const float odd[] = { NAN, INFINITY, -INFINITY, 1e30f, -1e30f, 0.0f, 1e-30f };
        static const uint16_t words[] = { 0x0000, 0x7c00, 0x7e00, 0xfc00, 0x0001, 0x8000 };

        rng_state = 7100 + (uint64_t) _i;
        Case c = make_case(type, 64, 0.1);
        uint8_t *coded = malloc(c.len);
        ck_assert_ptr_nonnull(coded);
        DeltaBlocks B;
        ck_assert(delta_blocks(delta_layout_for_ggml(type), &B));
        for (size_t b = 0; b < c.nblocks; b += 3) {
                c.w[b * t->block_size + b % t->block_size] = odd[b % ELEMENTSOF(odd)];
                uint16_t word = words[b % ELEMENTSOF(words)];
                c.target[b * t->type_size + B.word_off[0]] = (uint8_t) word;
                c.target[b * t->type_size + B.word_off[0] + 1] = (uint8_t) (word >> 8);
        }
        /* The K types: sub-blocks whose scale stands for 0, and others at the scale's extremes. */
        for (size_t b = 2; B.n_s && b < c.nblocks; b += 4) {
                uint8_t q[256], sub[32];
                uint8_t *blk = c.target + b * t->type_size;
                delta_blocks_unpack(delta_layout_for_ggml(type), blk, q, sub);
                sub[b % (B.n_q / B.q_sub)] = B.s_zero;
                sub[(b + 1) % B.n_s] = (uint8_t) ((1u << B.s_bits) - 1);
                sub[(b + 2) % B.n_s] = 0;
                delta_blocks_pack(delta_layout_for_ggml(type), q, sub, blk);
        }
        for (size_t b = 1; b < c.nblocks; b += 5)
                c.target[b * t->type_size + t->type_size - 1] ^= 0x88;
        ck_assert(predict_ac_encode(type, c.w, c.pred, c.target, c.len, coded));
        check_ac_round_trip(type, c.w, c.pred, c.target, c.len, coded);
        /* A tail: the last block cut short. */
        size_t cut = c.len - t->type_size / 2;
        ck_assert(predict_ac_encode(type, c.w, c.pred, c.target, cut, coded));
        check_ac_round_trip(type, c.w, c.pred, c.target, cut, coded);
        /* Too short for a stream: not coded so, and a decoder gives the prediction. */
        uint8_t out[3];
        ck_assert(!predict_ac_encode(type, c.w, c.pred, c.target, 3, coded));
        predict_ac_decode(type, c.w, c.pred, coded, 3, out);
        ck_assert(memcmp(out, c.pred, 3) == 0);
        free(coded);
        case_free(&c);
}
END_TEST

/* Any bytes decode to some group, reading and writing nothing outside it (ASan watches the reads). */
START_TEST(test_ac_garbage) {
        uint32_t type = types[_i];

        rng_state = 7200 + (uint64_t) _i;
        Case c = make_case(type, 32, 0.1);
        uint8_t *delta = malloc(c.len), *out = malloc(c.len + 16);
        ck_assert(delta && out);
        for (int round = 0; round < 8; round++) {
                fill_random(delta, c.len);
                uint32_t stream = round == 0 ? UINT32_MAX : round == 1 ? 0 : (uint32_t) (rng() % c.len);
                for (int k = 0; k < 4; k++)
                        delta[k] = (uint8_t) (stream >> 8 * k);
                memset(out + c.len, 0x5a, 16);
                predict_ac_decode(type, c.w, c.pred, delta, c.len, out);
                for (int i = 0; i < 16; i++)
                        ck_assert_uint_eq(out[c.len + i], 0x5a);
        }
        free(delta);
        free(out);
        case_free(&c);
}
END_TEST

/*
 * The wire format, pinned: a Q4_0, a Q8_0, a Q4_K and a Q6_K group's coded bytes. The same digests on aarch64
 * (make check-arm) prove that an element's place rounds alike there.
 */
#define GOLDEN_Q4_0 "a4fcf9af689a1aab3d8de6819af9e9d23d96bf9ba9da3c9528a517a650a0be83"
#define GOLDEN_Q8_0 "487ba05f9fd05e6cea352b80191e0095c2fc37c1c20258632f3ec71c41172c77"
#define GOLDEN_Q4_K "45fc776a1931c974cbbff24656f87e30d645bd447750eb18b4069a8b6edc235d"
#define GOLDEN_Q6_K "dd5dd9bfe6c1d4c7dfb92c907c2a2c93e5fa170f3e6dba4b78fa2f10667ad9e9"

START_TEST(test_ac_golden) {
        static const struct {
                uint32_t type;
                const char *digest;
        } golden[] = { { GGML_TYPE_Q4_0, GOLDEN_Q4_0 }, { GGML_TYPE_Q8_0, GOLDEN_Q8_0 }, { GGML_TYPE_Q4_K, GOLDEN_Q4_K },
                       { GGML_TYPE_Q6_K, GOLDEN_Q6_K } };

        for (size_t g = 0; g < ELEMENTSOF(golden); g++) {
                rng_state = 7300;
                Case c = make_case(golden[g].type, 8192 / ggml_type(golden[g].type)->block_size, 0.2);
                uint8_t *coded = malloc(c.len), digest[SHA256_DIGEST_SIZE];
                char hex[2 * SHA256_DIGEST_SIZE + 1];
                ck_assert_ptr_nonnull(coded);
                ck_assert(predict_ac_encode(golden[g].type, c.w, c.pred, c.target, c.len, coded));
                sha256_digest(coded, c.len, digest);
                sha256_to_hex(digest, hex);
                ck_assert_msg(strcmp(hex, golden[g].digest) == 0, "%s: coded digest %s",
                              ggml_type(golden[g].type)->name, hex);
                check_ac_round_trip(golden[g].type, c.w, c.pred, c.target, c.len, coded);
                free(coded);
                case_free(&c);
        }
}
END_TEST

/* Only the types with the coder may say so in a span's shape: the quantized ones, not the floats. */
START_TEST(test_ac_shape) {
        LoraShape s = { .type = GGML_TYPE_Q4_K, .in = 256, .out = 4, .rank = 2, .a_type = GGML_TYPE_F16,
                        .b_type = GGML_TYPE_F16, .factor = 1.0f, .ac = true };
        TpError err = {};

        ck_assert_int_eq(lora_shape_check(&s, &err), 0);
        s.type = GGML_TYPE_F16;
        ck_assert_int_eq(lora_shape_check(&s, &err), -EBADMSG);
        ck_assert_ptr_nonnull(strstr(err.message, "'ac'"));
        ck_assert(!predict_ac_supported(GGML_TYPE_F16));
}
END_TEST

static Suite *predict_ac_suite(void) {
        Suite *s = suite_create("predict_ac");
        TCase *tc = tcase_create("predict_ac");

        tcase_set_timeout(tc, 120);
        tcase_add_loop_test(tc, test_ac_gain, 0, ELEMENTSOF(types));
        tcase_add_loop_test(tc, test_ac_hostile_round_trip, 0, ELEMENTSOF(types));
        tcase_add_loop_test(tc, test_ac_garbage, 0, ELEMENTSOF(types));
        tcase_add_test(tc, test_ac_golden);
        tcase_add_test(tc, test_ac_shape);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(predict_ac_suite)
