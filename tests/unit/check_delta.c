/* SPDX-License-Identifier: MIT */
/* common/codec/delta.c: a bijection on arbitrary bytes for every layout, names and mappings, the pinned wire format. */

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "check-main.h"
#include "delta-test.h"
#include "delta.h"
#include "ggml.h"
#include "sha256.h"

/* fp16 patterns that break naive arithmetic: infinities, NaNs, zeros, subnormals, extremes. */
static const uint16_t odd_halves[] = { 0x7c00, 0xfc00, 0x7e00, 0xfe01, 0x7fff, 0x0000, 0x8000,
                                       0x0001, 0x8001, 0x03ff, 0x0400, 0x7bff, 0xfbff, 0x3c00 };

/* Random bytes, and at some words' offsets the odd fp16 patterns above. */
static void fill_nasty(DeltaLayout l, uint8_t *p, size_t len) {
        size_t unit = delta_unit(l);

        fill_random(p, len);
        for (size_t at = 0; unit >= 2 && at + 2 <= len; at += unit)
                if (rng() % 3 == 0) {
                        uint16_t h = odd_halves[rng() % ELEMENTSOF(odd_halves)];
                        size_t off = (size_t) (rng() % (unit - 1));
                        p[at + off] = (uint8_t) h;
                        p[at + off + 1] = (uint8_t) (h >> 8);
                }
}

/* A target made from @base: a few bytes changed, or runs of them, or all of them. */
static void derive(const uint8_t *base, uint8_t *target, size_t len) {
        memcpy(target, base, len);
        switch (rng() % 4) {
        case 0:
                fill_random(target, len);
                break;
        case 1:
                for (size_t k = 0, n = len ? rng() % 16 : 0; k < n; k++)
                        target[rng() % len] ^= (uint8_t) (1u << (rng() % 8));
                break;
        case 2:
                for (size_t k = 0, n = len ? rng() % (len / 4 + 1) : 0; k < n; k++)
                        target[rng() % len] += (uint8_t) (rng() % 3) - 1;
                break;
        default:
                break;
        }
}

START_TEST(test_names) {
        DeltaLayout l = (DeltaLayout) _i;
        const char *name = delta_layout_to_string(l);

        ck_assert_ptr_nonnull(name);
        ck_assert_int_eq(delta_layout_from_string(name), l);
        for (int m = 0; m < _DELTA_LAYOUT_MAX; m++)
                if (m != _i)
                        ck_assert_str_ne(name, delta_layout_to_string((DeltaLayout) m));
}
END_TEST

START_TEST(test_names_invalid) {
        static const char *const bad[] = { "", "Q4_0", "q4_k", "q4_0 ", "raw", "nope" };

        /* The names a manifest carries. */
        static const char *const names[] = { "bytes", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_K",
                                              "q3_K",  "q4_K", "q5_K", "q6_K", "f16",  "bf16", "f32",  "i8",
                                              "i8ac",  "i8acp" };
        ck_assert_int_eq(ELEMENTSOF(names), _DELTA_LAYOUT_MAX);
        for (size_t i = 0; i < ELEMENTSOF(names); i++)
                ck_assert_str_eq(delta_layout_to_string((DeltaLayout) i), names[i]);
        for (size_t i = 0; i < ELEMENTSOF(bad); i++)
                ck_assert_int_eq(delta_layout_from_string(bad[i]), _DELTA_LAYOUT_INVALID);
        ck_assert_int_eq(delta_layout_from_string(NULL), -EINVAL);
        ck_assert_ptr_null(delta_layout_to_string(_DELTA_LAYOUT_MAX));
        ck_assert_ptr_null(delta_layout_to_string(_DELTA_LAYOUT_INVALID));
        ck_assert_uint_eq(delta_unit(_DELTA_LAYOUT_MAX), 0);
        ck_assert_uint_eq(delta_group_bytes(_DELTA_LAYOUT_INVALID), 0);

        /* An out-of-range layout codes as bytes. */
        uint8_t base[300], target[300], want[300], got[300];
        rng_state = 99;
        fill_random(base, sizeof(base));
        fill_random(target, sizeof(target));
        delta_encode(DELTA_BYTES, base, target, sizeof(base), want);
        delta_encode(_DELTA_LAYOUT_MAX, base, target, sizeof(base), got);
        ck_assert_mem_eq(got, want, sizeof(want));
        delta_encode(_DELTA_LAYOUT_INVALID, base, target, sizeof(base), got);
        ck_assert_mem_eq(got, want, sizeof(want));
        delta_decode(_DELTA_LAYOUT_MAX, base, want, sizeof(base), got);
        ck_assert_mem_eq(got, target, sizeof(target));
}
END_TEST

START_TEST(test_units) {
        DeltaLayout l = (DeltaLayout) _i;
        size_t unit = delta_unit(l), group = delta_group_bytes(l);

        ck_assert_uint_gt(unit, 0);
        ck_assert_uint_eq(group % unit, 0);
        ck_assert_uint_le(group, DELTA_GROUP_TARGET);
        ck_assert_uint_gt(group + unit, DELTA_GROUP_TARGET);
}
END_TEST

/* Every ggml type id: its own layout, whose unit is ggml's block size in bytes, or bytes. */
START_TEST(test_ggml_types) {
        static const struct {
                uint32_t type;
                const char *layout;
        } own[] = {
                { GGML_TYPE_F32, "f32" },   { GGML_TYPE_F16, "f16" },   { GGML_TYPE_BF16, "bf16" },
                { GGML_TYPE_Q4_0, "q4_0" }, { GGML_TYPE_Q4_1, "q4_1" }, { GGML_TYPE_Q5_0, "q5_0" },
                { GGML_TYPE_Q5_1, "q5_1" }, { GGML_TYPE_Q8_0, "q8_0" }, { GGML_TYPE_Q2_K, "q2_K" },
                { GGML_TYPE_Q3_K, "q3_K" }, { GGML_TYPE_Q4_K, "q4_K" }, { GGML_TYPE_Q5_K, "q5_K" },
                { GGML_TYPE_Q6_K, "q6_K" },
        };

        for (uint32_t t = 0; t < GGML_TYPE_COUNT + 8; t++) {
                DeltaLayout l = delta_layout_for_ggml(t);
                const char *want = "bytes";

                for (size_t i = 0; i < ELEMENTSOF(own); i++)
                        if (own[i].type == t)
                                want = own[i].layout;
                ck_assert_msg(strcmp(delta_layout_to_string(l), want) == 0, "ggml type %u: %s, want %s", t,
                              delta_layout_to_string(l), want);
                if (l != DELTA_BYTES) {
                        ck_assert_ptr_nonnull(ggml_type(t));
                        ck_assert_uint_eq(delta_unit(l), ggml_type(t)->type_size);
                        ck_assert_str_eq(delta_layout_to_string(l), ggml_type(t)->name);
                }
        }
        ck_assert_int_eq(delta_layout_for_ggml(UINT32_MAX), DELTA_BYTES);
}
END_TEST

START_TEST(test_onnx_types) {
        /* TensorProto.DataType */
        ck_assert_int_eq(delta_layout_for_onnx(1), DELTA_F32);
        ck_assert_int_eq(delta_layout_for_onnx(10), DELTA_F16);
        ck_assert_int_eq(delta_layout_for_onnx(16), DELTA_BF16);
        for (int32_t t = -2; t < 40; t++)
                if (t != 1 && t != 10 && t != 16)
                        ck_assert_int_eq(delta_layout_for_onnx(t), DELTA_BYTES);
        ck_assert_int_eq(delta_layout_for_onnx(INT32_MIN), DELTA_BYTES);
}
END_TEST

/* A whole group of arbitrary bytes, with NaN/Inf/zero/subnormal halves sprinkled in. */
START_TEST(test_round_trip_random) {
        DeltaLayout l = (DeltaLayout) _i;
        size_t len = delta_group_bytes(l);
        uint8_t *base = malloc(len), *target = malloc(len);

        rng_state = 1000 + (uint64_t) _i;
        for (int k = 0; k < 8; k++) {
                fill_nasty(l, base, len);
                fill_nasty(l, target, len);
                check_round_trip(l, base, target, len, "random");
                derive(base, target, len);
                check_round_trip(l, base, target, len, "derived");
        }
        free(base);
        free(target);
}
END_TEST

/* An unchanged span codes to zeros only: nothing for zstd to store. */
START_TEST(test_identical) {
        DeltaLayout l = (DeltaLayout) _i;
        size_t len = delta_group_bytes(l);
        uint8_t *base = malloc(len), *delta = malloc(len), *back = malloc(len);

        rng_state = 2000 + (uint64_t) _i;
        for (int k = 0; k < 4; k++) {
                fill_nasty(l, base, len);
                if (k == 3)
                        memset(base, 0, len);
                memset(delta, 0xee, len);
                ck_assert(delta_encode(l, base, base, len, delta));
                /* i8ac: the coded stream's length and a few bytes, then zeros (i8acp: a rule count of 0 before them). */
                size_t from = bijective(l) ? 0 : (l == DELTA_I8ACP ? 5 : 4) + (size_t) (delta[0] | delta[1] << 8);
                ck_assert_uint_le(from, 64);
                for (size_t i = from; i < len; i++)
                        ck_assert_quiet(delta[i] == 0, "%s: identical input, delta byte %zu is %u",
                                        delta_layout_to_string(l), i, delta[i]);
                delta_decode(l, base, delta, len, back);
                ck_assert(memcmp(back, base, len) == 0);
        }
        free(base);
        free(delta);
        free(back);
}
END_TEST

/* Short and partial groups, and lengths that are not whole units (a tail, coded as bytes). */
START_TEST(test_lengths) {
        DeltaLayout l = (DeltaLayout) _i;
        size_t unit = delta_unit(l), group = delta_group_bytes(l);
        size_t lengths[] = { 0, 1, unit, 2 * unit, 3 * unit, 7 * unit, group - unit, group, unit + 1, 2 * unit - 1,
                             group + unit, 2 * group + 3 };
        size_t max = 2 * group + unit + 3;
        uint8_t *base = malloc(max), *target = malloc(max);

        rng_state = 3000 + (uint64_t) _i;
        for (size_t i = 0; i < ELEMENTSOF(lengths); i++) {
                fill_nasty(l, base, lengths[i]);
                derive(base, target, lengths[i]);
                check_round_trip(l, base, target, lengths[i], "length");
                fill_nasty(l, target, lengths[i]);
                check_round_trip(l, base, target, lengths[i], "length, random");
        }
        free(base);
        free(target);
}
END_TEST

/*
 * Property: for random (base, target) of random whole-unit lengths,
 * decode(encode(t)) == t; and for random deltas, encode(decode(d)) == d.
 * Both together make the transform a bijection for every base.
 */
START_TEST(test_property) {
        DeltaLayout l = (DeltaLayout) _i;
        size_t unit = delta_unit(l), units = delta_group_bytes(l) / unit, max = delta_group_bytes(l);
        uint8_t *base = malloc(max), *target = malloc(max), *delta = malloc(max), *back = malloc(max);

        rng_state = 4000 + (uint64_t) _i;
        for (int k = 0; k < 1000; k++) {
                /* Mostly short, so that a thousand cases stay quick; some whole groups. */
                size_t n = k % 10 == 0 ? units : 1 + (size_t) (rng() % (k % 3 == 0 ? units : 64 < units ? 64 : units));
                size_t len = n * unit;

                fill_nasty(l, base, len);
                derive(base, target, len);
                check_round_trip(l, base, target, len, "property");

                /* i8ac's coded groups are not every byte string: decoding any is still a function of it. */
                fill_random(delta, len);
                delta_decode(l, base, delta, len, target);
                if (!bijective(l))
                        continue;
                ck_assert(delta_encode(l, base, target, len, back));
                ck_assert_msg(memcmp(back, delta, len) == 0, "%s case %d, %zu units: encode(decode(d)) != d",
                              delta_layout_to_string(l), k, n);
        }
        free(base);
        free(target);
        free(delta);
        free(back);
}
END_TEST

/* ---- requantization: what the transform is for ---- */

static uint16_t half_from_float(float f) {
        /* Round to nearest even, normal range only: enough for test scales. */
        uint32_t x;
        memcpy(&x, &f, sizeof(x));
        uint32_t sign = (x >> 16) & 0x8000, mant = x & 0x7fffff;
        int exp = (int) ((x >> 23) & 0xff) - 127 + 15;
        uint32_t h = sign | (uint32_t) exp << 10 | mant >> 13, rest = mant & 0x1fff;
        if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
                h++;
        return (uint16_t) h;
}

/* q8_0 and q4_0 as ggml's reference quantizers make them. */
static void quantize(DeltaLayout l, const float *x, size_t blocks, uint8_t *out) {
        for (size_t i = 0; i < blocks; i++, x += 32) {
                float amax = 0, max = 0;
                for (int j = 0; j < 32; j++)
                        if (fabsf(x[j]) > amax) {
                                amax = fabsf(x[j]);
                                max = x[j];
                        }
                if (l == DELTA_Q8_0) {
                        uint8_t *b = out + 34 * i;
                        float d = amax / 127, id = d ? 1 / d : 0;
                        uint16_t h = half_from_float(d);
                        b[0] = (uint8_t) h;
                        b[1] = (uint8_t) (h >> 8);
                        for (int j = 0; j < 32; j++)
                                b[2 + j] = (uint8_t) (int8_t) roundf(x[j] * id);
                } else {
                        uint8_t *b = out + 18 * i;
                        float d = max / -8, id = d ? 1 / d : 0;
                        uint16_t h = half_from_float(d);
                        b[0] = (uint8_t) h;
                        b[1] = (uint8_t) (h >> 8);
                        for (int j = 0; j < 16; j++) {
                                int lo = (int) (x[j] * id + 8.5f), hi = (int) (x[16 + j] * id + 8.5f);
                                b[2 + j] = (uint8_t) ((lo > 15 ? 15 : lo) | (hi > 15 ? 15 : hi) << 4);
                        }
                }
        }
}

/*
 * Weights nudged by a small delta and quantized again change most blocks'
 * scale but few quantized values: the delta must compress clearly better
 * than the plain byte-wise difference, and its scale differences are small.
 */
START_TEST(test_requantized) {
        static const DeltaLayout ls[] = { DELTA_Q8_0, DELTA_Q4_0 };
        DeltaLayout l = ls[_i];
        size_t unit = delta_unit(l), blocks = delta_group_bytes(l) / unit, len = blocks * unit;
        float *w = malloc(blocks * 32 * sizeof(float)), *w2 = malloc(blocks * 32 * sizeof(float));
        uint8_t *base = malloc(len), *target = malloc(len), *delta = malloc(len), *diff = malloc(len);
        size_t z_delta, z_diff;

        rng_state = 5000;
        for (size_t i = 0; i < blocks * 32; i++) {
                w[i] = (float) (0.02 * gauss());
                w2[i] = w[i] + (float) (0.0004 * gauss());
        }
        quantize(l, w, blocks, base);
        quantize(l, w2, blocks, target);
        delta_encode(l, base, target, len, delta);
        for (size_t i = 0; i < len; i++)
                diff[i] = (uint8_t) (target[i] - base[i]);
        z_delta = zstd_size(delta, len);
        z_diff = zstd_size(diff, len);
        /* (q8_0 changes densely at this size of delta: there the win over bsdiff & co. is the modelling.) */
        ck_assert_msg(z_delta * 10 < z_diff * (l == DELTA_Q8_0 ? 10 : 9),
                      "%s: zstd of the delta %zu, of the byte-wise difference %zu", delta_layout_to_string(l), z_delta,
                      z_diff);
        /* Word planes come first, low bytes then high bytes: most scales moved by less than 256 ulps. */
        size_t small = 0;
        for (size_t i = 0; i < blocks; i++)
                small += delta[blocks + i] < 2;
        ck_assert_uint_gt(small * 100, blocks * 95);
        check_round_trip(l, base, target, len, "requantized");
        free(w);
        free(w2);
        free(base);
        free(target);
        free(delta);
        free(diff);
}
END_TEST

/* ---- decoding: the inverse of encoding, on any input ---- */

/*
 * The decoder is fast and the encoder is the reference: for a bijection,
 * encode(decode(d)) == d says that decode(d) is the one right answer for d,
 * and decode(encode(t)) == t that decoding undoes encoding.
 */
static void check_inverse(DeltaLayout l, const uint8_t *base, const uint8_t *target, const uint8_t *delta, size_t len,
                          const char *what) {
        uint8_t *got = malloc(len + 1), *again = malloc(len + 1);

        ck_assert_ptr_nonnull(got);
        ck_assert_ptr_nonnull(again);
        delta_decode(l, base, delta, len, got);
        if (bijective(l)) {
                ck_assert(delta_encode(l, base, got, len, again));
                ck_assert_msg(memcmp(again, delta, len) == 0, "%s, %s, %zu bytes: encode(decode(d)) != d",
                              delta_layout_to_string(l), what, len);
        } else {
                check_round_trip(l, base, got, len, what);
        }
        if (target)
                check_round_trip(l, base, target, len, what);
        free(got);
        free(again);
}

/* Where each quantized layout keeps its fp16 words (d, then dmin or m): delta.h's table. */
static const struct {
        DeltaLayout l;
        size_t off[2];
        unsigned n;
} quant_words[] = {
        { DELTA_Q4_0, { 0 }, 1 },     { DELTA_Q4_1, { 0, 2 }, 2 },   { DELTA_Q5_0, { 0 }, 1 },
        { DELTA_Q5_1, { 0, 2 }, 2 },  { DELTA_Q8_0, { 0 }, 1 },      { DELTA_Q2_K, { 80, 82 }, 2 },
        { DELTA_Q3_K, { 108 }, 1 },   { DELTA_Q4_K, { 0, 2 }, 2 },   { DELTA_Q5_K, { 0, 2 }, 2 },
        { DELTA_Q6_K, { 208 }, 1 },
};

static void put_half(uint8_t *p, uint16_t h) {
        p[0] = (uint8_t) h;
        p[1] = (uint8_t) (h >> 8);
}

/*
 * Quantizer-like blocks: random elements and sub-scales, words that are
 * typical weight scales (about 1e-4 .. 1e-2, either sign for mins and
 * offsets); the target keeps most elements and moves its words a few ulps,
 * as requantizing after a small weight update does.
 */
static void fill_plausible(size_t w, uint8_t *base, uint8_t *target, size_t len) {
        size_t unit = delta_unit(quant_words[w].l);

        fill_random(base, len);
        for (size_t at = 0; at + unit <= len; at += unit)
                for (unsigned k = 0; k < quant_words[w].n; k++) {
                        float v = (float) (0.0001 + 0.01 * (double) (rng() % 1000) / 1000.0);
                        put_half(base + at + quant_words[w].off[k], half_from_float(k && rng() % 2 ? -v : v));
                }
        memcpy(target, base, len);
        for (size_t at = 0; at + unit <= len; at += unit) {
                for (unsigned k = 0; k < quant_words[w].n; k++) {
                        uint8_t *p = target + at + quant_words[w].off[k];
                        put_half(p, (uint16_t) (p[0] + (p[1] << 8) + (int) (rng() % 9) - 4));
                }
                for (size_t i = 0, n = rng() % 4; i < n; i++)
                        target[at + rng() % unit] ^= (uint8_t) (1u << (rng() % 8));
        }
}

/* Real-looking groups of every quantized layout, every length from 1 to 40 blocks (each batch and tail), and a tail. */
START_TEST(test_decode_plausible) {
        DeltaLayout l = quant_words[_i].l;
        size_t unit = delta_unit(l), max = delta_group_bytes(l);
        uint8_t *base = malloc(max), *target = malloc(max), *delta = malloc(max);

        rng_state = 7000 + (uint64_t) _i;
        for (size_t n = 1; n <= 40; n++) {
                size_t len = n * unit + (n == 40 ? unit / 2 : 0);
                fill_plausible((size_t) _i, base, target, len);
                fill_random(delta, len);
                check_inverse(l, base, target, delta, len, "plausible");
        }
        fill_plausible((size_t) _i, base, target, max);
        delta_encode(l, base, target, max, delta);
        check_inverse(l, base, target, delta, max, "plausible group");
        free(base);
        free(target);
        free(delta);
}
END_TEST

/*
 * Every pair of odd fp16 words (NaN, infinities, zeros, subnormals, the
 * largest finite) as base and target scales: unchanged, zero and clamped
 * predictors, the 46-bit normalisation of the K-quants' wide products.
 */
START_TEST(test_decode_odd_scales) {
        DeltaLayout l = quant_words[_i].l;
        size_t unit = delta_unit(l), n = ELEMENTSOF(odd_halves), len = n * n * unit;
        uint8_t *base = malloc(len), *target = malloc(len), *delta = malloc(len);

        rng_state = 8000 + (uint64_t) _i;
        for (int round = 0; round < 4; round++) {
                fill_random(base, len);
                fill_random(target, len);
                /* Mostly 0 or mostly all-ones bytes in rounds 2 and 3: predictions at both ends of the range. */
                for (size_t i = 0; round >= 2 && i < len; i++)
                        if (rng() % 4)
                                base[i] = round == 2 ? 0 : 0xff;
                for (size_t i = 0; i < n * n; i++)
                        for (unsigned k = 0; k < quant_words[_i].n; k++) {
                                size_t off = i * unit + quant_words[_i].off[k];
                                put_half(base + off, odd_halves[(i / n + k * round) % n]);
                                put_half(target + off, odd_halves[(i % n + k) % n]);
                        }
                fill_random(delta, len);
                check_inverse(l, base, target, delta, len, "odd scales");
                memcpy(target, base, len);
                check_inverse(l, base, target, delta, len, "odd scales, unchanged");
        }
        free(base);
        free(target);
        free(delta);
}
END_TEST

/* All-zero and all-ones bases; deltas of zeros, of ones, and random ones. */
START_TEST(test_decode_constant) {
        DeltaLayout l = (DeltaLayout) _i;
        size_t len = delta_group_bytes(l);
        uint8_t *base = malloc(len), *delta = malloc(len);

        rng_state = 9000 + (uint64_t) _i;
        for (int k = 0; k < 9; k++) {
                memset(base, k % 3 == 0 ? 0 : 0xff, len);
                if (k % 3 == 2)
                        fill_random(base, len);
                if (k / 3 == 2)
                        fill_random(delta, len);
                else
                        memset(delta, k / 3 == 0 ? 0 : 0xff, len);
                check_inverse(l, base, NULL, delta, len, "constant");
        }
        free(base);
        free(delta);
}
END_TEST

/* Decoding writes every byte it owns: what the output buffer held before does not matter. */
START_TEST(test_decode_output_unread) {
        DeltaLayout l = (DeltaLayout) _i;
        size_t len = delta_group_bytes(l) - delta_unit(l) + 3;
        /* fill_nasty may write a word past a partial unit's end. */
        uint8_t *base = malloc(len + delta_unit(l)), *delta = malloc(len), *a = malloc(len), *b = malloc(len);

        rng_state = 9500 + (uint64_t) _i;
        fill_nasty(l, base, len);
        fill_random(delta, len);
        memset(a, 0, len);
        fill_random(b, len);
        delta_decode(l, base, delta, len, a);
        delta_decode(l, base, delta, len, b);
        ck_assert_msg(memcmp(a, b, len) == 0, "%s: the output depends on the buffer's old bytes",
                      delta_layout_to_string(l));
        free(base);
        free(delta);
        free(a);
        free(b);
}
END_TEST

/* ---- the wire format, pinned ---- */

/*
 * SHA-256 of the concatenated deltas of fixed inputs (the seed below, a
 * whole group, a partial group, a short one). A change here is a change of
 * the wire format: signed bundles in the field decode with the old one.
 * Never update these digests; add a layout instead.
 */
static const char *const golden[_DELTA_LAYOUT_MAX] = {
        [DELTA_BYTES] = "9ece0ddd1295a0f98dfb470653780057ff441596faec5c64578e430a8507f9a4",
        [DELTA_Q4_0] = "29aeb9aeeedf375b47023e1ca721dd2477e6461545638693dab316f45280f4ba",
        [DELTA_Q4_1] = "3b5ec4735239520c294393cac718c8274ae18e4ea5351d2577b92824f0b03fce",
        [DELTA_Q5_0] = "7e898fadbcaeaf148354e0b50d4a879d49eee71aba6f729b2c785d613c3a2d16",
        [DELTA_Q5_1] = "d694ea27c20a77fd9e218922b9402ac32546a229da78ba568da32ab45af2adde",
        [DELTA_Q8_0] = "bf979792b120717fd7fb669475494363e029e2e8e6a32b80fc5c7d3eaa74a3df",
        [DELTA_Q2_K] = "2fcb4a7d25b6d0dfc2abd4b268948df3af3b186f1951b960145c05e6c13d4e5f",
        [DELTA_Q3_K] = "52e124e301a235fd9d2c5d96d6e8600fab4216c597b2bbc21acf7185fa27a221",
        [DELTA_Q4_K] = "a1209609485f4042af99e9ef1b284e06c12ded54278617d51c732bfaf51d931a",
        [DELTA_Q5_K] = "0935269d9dcd211d2520bc694ed1eaaf95fc8742e6cb895b7474225bfb2483d1",
        [DELTA_Q6_K] = "07e50a0c144487ab2ff9e59a3ed06eab849f75bc2caf9ceb2fb4f8d4a8267932",
        [DELTA_F16] = "da3da57b4376c516ccfa4fb52c90211160725f85c529dfc48b1cdba1b4da5d01",
        [DELTA_BF16] = "fcce76808bfead2cc0ba5febc9f64b6c0e821b9c8634dbda71da645b1b2aed95",
        [DELTA_F32] = "728e7c0a276a06e0d2d9c64aed0f135821d5ff8dfe499ee9c25b7526d87eb6aa",
        [DELTA_I8] = "8b607897b1eeaed1f5a1af89f348b5c248b0c3f70f7bac55af90de7fbc36e82a",
        [DELTA_I8AC] = "e3ad5a9cecc0fca8d5b979d3c3e0943b7419a4584b76c778741ad140a1b957ed",
        [DELTA_I8ACP] = "c201cb778b090df8ffe7fe3b30d7f21e00e88116ee65693379a9e2deec6fdba7",
};

START_TEST(test_golden) {
        DeltaLayout l = (DeltaLayout) _i;
        size_t unit = delta_unit(l), group = delta_group_bytes(l);
        size_t lengths[] = { group, 37 * unit, unit };
        uint8_t *base = malloc(group), *target = malloc(group), *delta = malloc(group);
        uint8_t digest[SHA256_DIGEST_SIZE];
        char hex[SHA256_HEX_SIZE];
        Sha256 s;

        rng_state = 6000 + (uint64_t) _i;
        sha256_init(&s);
        for (size_t i = 0; i < ELEMENTSOF(lengths); i++) {
                /* Half nearby values (most of the format's paths), half arbitrary bytes. */
                fill_nasty(l, base, lengths[i]);
                derive(base, target, lengths[i]);
                if (i == 1)
                        for (size_t k = 0; k < lengths[i]; k++)
                                target[k] = (uint8_t) (base[k] + (rng() % 8 == 0 ? (rng() % 5) - 2 : 0));
                if (!delta_encode(l, base, target, lengths[i], delta))
                        memset(delta, 0, lengths[i]);   /* i8ac: did not fit */
                sha256_update(&s, delta, lengths[i]);
        }
        sha256_final(&s, digest);
        sha256_to_hex(digest, hex);
        ck_assert_msg(strcmp(hex, golden[l]) == 0, "%s: wire format changed: delta digest %s, pinned %s",
                      delta_layout_to_string(l), hex, golden[l]);
        free(base);
        free(target);
        free(delta);
}
END_TEST

/*
 * SHA-256 of decoded random deltas (whole group, a partial one with a tail,
 * one unit) against odd bases, as the first decoder wrote them: a faster
 * decoder must give the same bytes for every input, not only for deltas
 * that encoding makes.
 */
static const char *const golden_decode[_DELTA_LAYOUT_MAX] = {
        [DELTA_BYTES] = "5f6cdeff09ce0607d5df10addfe5171b0dac676d779d587171c31993454c2ccd",
        [DELTA_Q4_0] = "f96136169a437c8fb61cff62adea3e07d60700450a8af2e40f9a9ce00d1e92eb",
        [DELTA_Q4_1] = "95a073daf3b0b1f14b03617e8af029c62bc42f747e7a8a15c5976bbf82b69429",
        [DELTA_Q5_0] = "aeb45f51a709bdd5dd5390f5ad40cf9ddd5c93fbf4cf555efd4ddf0400d0e1b1",
        [DELTA_Q5_1] = "7b18f6a5feaab30e59c35afdd3d6d1c075e6a56799eeaae45c5400d835fbfefe",
        [DELTA_Q8_0] = "7db87ae280b250c123564f6a528e51816d380c436f63774c906a4b7b8d4f1461",
        [DELTA_Q2_K] = "6edbe79d8a89aa86b28396e21ef2d89b775a6913d0194d44e8aee13b49ca13e8",
        [DELTA_Q3_K] = "74b346426573d92d591856a86f64acfec433d25ff589b9091da68c74e94cb60d",
        [DELTA_Q4_K] = "402d92f607a6adabf8a411d2ab4f18173e74f7444c6b20de42271ea75020006b",
        [DELTA_Q5_K] = "cb1b47a92f78af9d534eece220664179639399dbf4d68d6e2b46629df7f6cb88",
        [DELTA_Q6_K] = "965dafc6ae894afd0e60ec42caa63553792946b6c5e714a20758673cbe82a3ee",
        [DELTA_F16] = "5fcf8e7909108cc3d2b1cacf428258f3ce1ee07bc1892b234a0ef08003d142b9",
        [DELTA_BF16] = "d327b418e5b366a7af397eb4cd635ab3252863612b6f10a5bfd75b2655ac5d89",
        [DELTA_F32] = "e7304e008e92bc6b00866a041e9b38e102c41154a4001273009fa0dcb14c065e",
        [DELTA_I8] = "cfe61c7a7cf2c39da4833d411f34f687ab2c6054428f04c9f61d9b21b83f9f30",
        [DELTA_I8AC] = "a197f6964766769bb2191bf89251cf2decf7c97d5925bff4458c286aaa903268",
        [DELTA_I8ACP] = "c331c13a9622541a4a5b8bbb704d7b09f54b4e8b1b22947202bd2a843168927b",
};

START_TEST(test_golden_decode) {
        DeltaLayout l = (DeltaLayout) _i;
        size_t unit = delta_unit(l), group = delta_group_bytes(l);
        size_t lengths[] = { group, 37 * unit + unit / 2, unit };
        uint8_t *base = malloc(group), *delta = malloc(group), *out = malloc(group);
        uint8_t digest[SHA256_DIGEST_SIZE];
        char hex[SHA256_HEX_SIZE];
        Sha256 s;

        rng_state = 10000 + (uint64_t) _i;
        sha256_init(&s);
        for (size_t i = 0; i < ELEMENTSOF(lengths); i++) {
                fill_nasty(l, base, lengths[i]);
                fill_random(delta, lengths[i]);
                delta_decode(l, base, delta, lengths[i], out);
                sha256_update(&s, out, lengths[i]);
        }
        sha256_final(&s, digest);
        sha256_to_hex(digest, hex);
        ck_assert_msg(strcmp(hex, golden_decode[l]) == 0, "%s: decoded bytes changed: digest %s, pinned %s",
                      delta_layout_to_string(l), hex, golden_decode[l]);
        free(base);
        free(delta);
        free(out);
}
END_TEST

static Suite *delta_suite(void) {
        Suite *s = suite_create("delta");
        TCase *tc = tcase_create("layouts");

        tcase_set_timeout(tc, 120);     /* the property test under ASan or qemu-user */
        tcase_add_loop_test(tc, test_names, 0, _DELTA_LAYOUT_MAX);
        tcase_add_test(tc, test_names_invalid);
        tcase_add_loop_test(tc, test_units, 0, _DELTA_LAYOUT_MAX);
        tcase_add_test(tc, test_ggml_types);
        tcase_add_test(tc, test_onnx_types);
        tcase_add_loop_test(tc, test_round_trip_random, 0, _DELTA_LAYOUT_MAX);
        tcase_add_loop_test(tc, test_identical, 0, _DELTA_LAYOUT_MAX);
        tcase_add_loop_test(tc, test_lengths, 0, _DELTA_LAYOUT_MAX);
        tcase_add_loop_test(tc, test_property, 0, _DELTA_LAYOUT_MAX);
        tcase_add_loop_test(tc, test_requantized, 0, 2);
        tcase_add_loop_test(tc, test_golden, 0, _DELTA_LAYOUT_MAX);
        tcase_add_loop_test(tc, test_decode_plausible, 0, ELEMENTSOF(quant_words));
        tcase_add_loop_test(tc, test_decode_odd_scales, 0, ELEMENTSOF(quant_words));
        tcase_add_loop_test(tc, test_decode_constant, 0, _DELTA_LAYOUT_MAX);
        tcase_add_loop_test(tc, test_decode_output_unread, 0, _DELTA_LAYOUT_MAX);
        tcase_add_loop_test(tc, test_golden_decode, 0, _DELTA_LAYOUT_MAX);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(delta_suite)
