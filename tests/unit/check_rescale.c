/* SPDX-License-Identifier: MIT */
/*
 * common/codec/rescale.c: an unchanged channel predicts its base bytes (none flipped); the
 * prediction's arithmetic and its flips against a reference written here with plain floor
 * division, over random and extreme ratios and offsets, every value, both signs, the clamps;
 * rescale_flip(); channel indexing from any first element, and in pieces; the parameters' byte
 * planes round trip; the shape's bounds; and golden digests of a fixed prediction and its flips,
 * so that x86-64 and aarch64 are held to the same bytes.
 */

#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "check-main.h"
#include "rescale.h"
#include "sha256.h"

/* A fixed pseudo-random stream (xorshift64), the same on every machine. */
static uint64_t rnd_state;
static uint64_t rnd(void) {
        rnd_state ^= rnd_state << 13;
        rnd_state ^= rnd_state >> 7;
        rnd_state ^= rnd_state << 17;
        return rnd_state;
}

/* A value in [-2^(bits-1), 2^(bits-1)), bits <= 32. */
static int32_t rnd_signed(unsigned bits) {
        return (int32_t) ((int64_t) (rnd() >> (64 - bits)) - (INT64_C(1) << (bits - 1)));
}

/*
 * The prediction of one value, as rescale.h states it: floor division written out, then the clamp;
 * and *@ret_flip, whether the exact value lies below the rounded one (the floor's remainder < 2^15).
 */
static uint8_t reference(bool is_signed, int32_t ratio, int32_t offset, uint8_t byte, uint8_t *ret_flip) {
        const int64_t v = is_signed ? (int64_t) (int8_t) byte : (int64_t) byte;
        const int64_t x = (int64_t) ratio * v + (int64_t) offset + 32768;
        int64_t q = x / 65536;

        if (x % 65536 != 0 && x < 0)    /* C division truncates toward zero: step down to the floor */
                q--;
        *ret_flip = x - q * 65536 < 32768;
        const int64_t lo = is_signed ? -128 : 0, hi = is_signed ? 127 : 255;
        return (uint8_t) (q < lo ? lo : q > hi ? hi : q);
}

static RescaleParams *params(bool is_signed, uint64_t channels, uint64_t inner) {
        RescaleShape s = { .is_signed = is_signed, .channels = channels, .inner = inner };
        RescaleParams *p = NULL;
        TpError err = {};

        ck_assert_msg(rescale_shape_check(&s, &err) == 0, "%s", err.message);
        ck_assert_int_eq(rescale_params_new(&s, &p), 0);
        return p;
}

/* R = 2^16, O = 0 in every channel: the base bytes, all 256 of them, in 1, 3 or 256 channels; none flipped. */
START_TEST(test_identity) {
        static const uint64_t layouts[][2] = { { 1, 1 }, { 1, 256 }, { 3, 5 }, { 256, 1 }, { 7, 300 } };
        static const uint8_t zeros[256];
        uint8_t base[256], out[256], flip[256];

        for (int i = 0; i < 256; i++)
                base[i] = (uint8_t) i;
        for (int is_signed = 0; is_signed < 2; is_signed++)
                for (size_t l = 0; l < ELEMENTSOF(layouts); l++) {
                        const uint64_t C = layouts[l][0], K = layouts[l][1];
                        _cleanup_(rescale_params_freep) RescaleParams *p = params(is_signed, C, K);
                        for (uint64_t c = 0; c < C; c++)
                                p->ratio[c] = RESCALE_ONE;
                        memset(out, 0x5a, sizeof(out));
                        memset(flip, 0x5a, sizeof(flip));
                        rescale_predict(p, 0, base, sizeof(base), out, flip);
                        ck_assert_msg(memcmp(out, base, sizeof(base)) == 0, "%s, %" PRIu64 " x %" PRIu64
                                      ": not the base", is_signed ? "int8" : "uint8", C, K);
                        ck_assert_mem_eq(flip, zeros, sizeof(flip));
                        rescale_predict(p, 12345, base, sizeof(base), out, flip);
                        ck_assert_mem_eq(out, base, sizeof(base));
                        ck_assert_mem_eq(flip, zeros, sizeof(flip));
                }
}
END_TEST

/* The values that sit at the edges of the arithmetic: the int32 extremes, 0, +-1, 2^15, 2^16. */
static const int32_t edges[] = {
        INT32_MIN, INT32_MIN + 1, -65537, -65536, -32769, -32768, -32767, -1, 0, 1, 32767, 32768, 32769,
        65535, 65536, 65537, INT32_MAX - 32768, INT32_MAX - 32767, INT32_MAX - 1, INT32_MAX,
};

#define ARITH_CHANNELS 64

/* A ratio and an offset: an edge value, uniform over int32, or near "unchanged" (most bytes unclamped). */
static int32_t draw(unsigned kind, bool offset) {
        switch (kind % 3) {
        case 0:
                return edges[rnd() % ELEMENTSOF(edges)];
        case 1:
                return rnd_signed(32);
        default:
                return offset ? rnd_signed(24) : RESCALE_ONE + rnd_signed(18);
        }
}

/*
 * Channel c of 64 holds every value v (inner 256: element c * 256 + v is v), under its own R[c]
 * and O[c]; each element must be the reference's. Both signs; the clamps are reached at both ends.
 * _i 0: random parameters (from the full int32 range too); 1: every pair of edge values once.
 */
START_TEST(test_arithmetic) {
        static uint8_t base[ARITH_CHANNELS * 256], out[ARITH_CHANNELS * 256], flip[ARITH_CHANNELS * 256];
        uint64_t clamped_lo = 0, clamped_hi = 0, inside = 0, flipped = 0;

        for (size_t i = 0; i < sizeof(base); i++)
                base[i] = (uint8_t) i;
        rnd_state = 0x9e3779b97f4a7c15u;
        for (int is_signed = 0; is_signed < 2; is_signed++) {
                const uint8_t lo = is_signed ? 0x80 : 0, hi = is_signed ? 0x7f : 0xff;
                _cleanup_(rescale_params_freep) RescaleParams *p = params(is_signed, ARITH_CHANNELS, 256);
                const unsigned rounds = _i == 0 ? 96 : ELEMENTSOF(edges) * ELEMENTSOF(edges) / ARITH_CHANNELS + 1;
                for (unsigned round = 0; round < rounds; round++) {
                        for (unsigned c = 0; c < ARITH_CHANNELS; c++) {
                                size_t k = (size_t) round * ARITH_CHANNELS + c;
                                if (_i == 0) {
                                        p->ratio[c] = draw(round + c, false);
                                        p->offset[c] = draw(round + c / 3, true);
                                } else {
                                        k %= ELEMENTSOF(edges) * ELEMENTSOF(edges);
                                        p->ratio[c] = edges[k / ELEMENTSOF(edges)];
                                        p->offset[c] = edges[k % ELEMENTSOF(edges)];
                                }
                        }
                        rescale_predict(p, 0, base, sizeof(base), out, flip);
                        for (size_t i = 0; i < sizeof(base); i++) {
                                const int32_t r = p->ratio[i / 256], o = p->offset[i / 256];
                                uint8_t want_flip;
                                const uint8_t want = reference(is_signed, r, o, base[i], &want_flip);
                                ck_assert_quiet(out[i] == want && flip[i] == want_flip, "%s: R %" PRId32 ", O %" PRId32
                                                ", v byte 0x%02x: predicted 0x%02x flip %u, want 0x%02x flip %u",
                                                is_signed ? "int8" : "uint8", r, o, base[i], out[i], flip[i], want,
                                                want_flip);
                                flipped += want_flip;
                                clamped_lo += want == lo;
                                clamped_hi += want == hi;
                                inside += want != lo && want != hi;
                        }
                }
        }
        ck_assert_uint_gt(clamped_lo, 1000);
        ck_assert_uint_gt(clamped_hi, 1000);
        ck_assert_uint_gt(inside, _i == 0 ? 100000 : 1000);
        ck_assert_uint_gt(flipped, _i == 0 ? 100000 : 1000);
}
END_TEST

/*
 * The rounding at a half: floor(x + 1/2), negative halves up too; and the flip, set where the exact
 * value x lies below the rounded one (every half, rounded up, is flipped; an exact integer is not).
 */
START_TEST(test_rounding) {
        static const struct {
                bool is_signed;
                int32_t ratio, offset;
                uint8_t v, want, flip;
        } cases[] = {
                { true, RESCALE_ONE, 0, 5, 5, 0 },              /* exact: not below */
                { true, RESCALE_ONE, 1, 5, 5, 0 },              /* 5.00002 */
                { true, RESCALE_ONE, -1, 5, 5, 1 },             /* 4.99998 */
                { true, RESCALE_ONE, 32767, 5, 5, 0 },          /* 5.49998 */
                { true, RESCALE_ONE, 32768, 5, 6, 1 },          /* 5.5 -> 6 */
                { true, RESCALE_ONE, -32768, 5, 5, 1 },         /* 4.5 -> 5 */
                { true, RESCALE_ONE, -32769, 5, 4, 0 },         /* 4.49998 */
                { true, RESCALE_ONE, -32768, 0xfb, 0xfb, 1 },   /* -5.5 -> -5 */
                { true, RESCALE_ONE, -32769, 0xfb, 0xfa, 0 },   /* -5.50002 -> -6 */
                { true, -RESCALE_ONE, 0, 0x80, 0x7f, 0 },       /* -(-128) = 128: clamped to 127 */
                { true, 2 * RESCALE_ONE, 0, 0xc0, 0x80, 0 },    /* -128 exactly */
                { true, 2 * RESCALE_ONE, -32769, 0xc0, 0x80, 0 }, /* -128.50002 -> -129: clamped */
                { true, 2 * RESCALE_ONE, -32768, 0xc0, 0x80, 1 }, /* -128.5 -> -128 */
                { false, RESCALE_ONE / 2, 0, 3, 2, 1 },         /* 1.5 -> 2 */
                { false, RESCALE_ONE / 2, 0, 1, 1, 1 },         /* 0.5 -> 1 */
                { false, -RESCALE_ONE, 0, 1, 0, 0 },            /* -1: clamped to 0 */
                { false, RESCALE_ONE, 255 << 16, 1, 255, 0 },   /* 256: clamped */
                { false, 0, 255 << 16, 0, 255, 0 },
                { false, 0, (255 << 16) + 32768, 0, 255, 1 },   /* 255.5 -> 256: clamped */
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_(rescale_params_freep) RescaleParams *p = params(cases[i].is_signed, 1, 1);
                uint8_t out, flip, ref_flip;
                p->ratio[0] = cases[i].ratio;
                p->offset[0] = cases[i].offset;
                rescale_predict(p, 0, &cases[i].v, 1, &out, &flip);
                ck_assert_msg(out == cases[i].want && flip == cases[i].flip, "case %zu: 0x%02x flip %u, want 0x%02x "
                              "flip %u", i, out, flip, cases[i].want, cases[i].flip);
                ck_assert_uint_eq(reference(cases[i].is_signed, cases[i].ratio, cases[i].offset, cases[i].v,
                                            &ref_flip), cases[i].want);
                ck_assert_uint_eq(ref_flip, cases[i].flip);
        }
}
END_TEST

/* rescale_flip(): 2 * predicted - byte (mod 256) where flipped, the byte elsewhere; twice is once undone. */
START_TEST(test_flip) {
        enum { N = 4096 };
        uint8_t predicted[N], flip[N], bytes[N], orig[N];

        rnd_state = 0xdeadbeefcafef00du;
        for (size_t i = 0; i < N; i++) {
                predicted[i] = (uint8_t) rnd();
                flip[i] = (uint8_t) (rnd() & 1);
                bytes[i] = orig[i] = (uint8_t) rnd();
        }
        predicted[0] = 0x80, bytes[0] = orig[0] = 0x7f, flip[0] = 1;   /* wraps: 0x100 - 0x7f = 0x81 */
        rescale_flip(predicted, flip, bytes, N);
        for (size_t i = 0; i < N; i++) {
                uint8_t want = flip[i] ? (uint8_t) ((2u * predicted[i] - orig[i]) & 0xff) : orig[i];
                ck_assert_quiet(bytes[i] == want, "element %zu: 0x%02x, want 0x%02x", i, bytes[i], want);
        }
        ck_assert_uint_eq(bytes[0], 0x81);
        rescale_flip(predicted, flip, bytes, N);
        ck_assert_mem_eq(bytes, orig, N);
        rescale_flip(predicted, flip, bytes, 0);
        ck_assert_mem_eq(bytes, orig, N);
}
END_TEST

/*
 * Element e is in channel (e / inner) % channels: a span from any first element (mid-run,
 * mid-cycle, past 2^40) predicts what the reference gives element by element, flips included,
 * and the same range predicted in two pieces, split anywhere, is the same bytes and flips.
 */
START_TEST(test_channels) {
        static const struct {
                uint64_t channels, inner, first;
        } cases[] = {
                { 5, 7, 5 * 7 + 2 * 7 + 3 },    /* the second cycle, channel 2, element 3 of its run */
                { 5, 7, 0 },
                { 1, 1, 9 },
                { 1, 64, 100 },
                { 64, 1, 63 },
                { 3, 1000, 2500 },              /* a run longer than the span */
                { 6, 11, (UINT64_C(1) << 40) * 3 + 17 },
                { 4, RESCALE_MAX_INNER, RESCALE_MAX_INNER * 6 - 5 },    /* the end of channel 1's run */
                { RESCALE_MAX_CHANNELS, 1, RESCALE_MAX_CHANNELS - 100 },  /* across the cycle's end */
        };
        enum { N = 701 };
        uint8_t base[N], whole[N], pieces[N], whole_flip[N], pieces_flip[N];

        rnd_state = 88172645463325252u;
        for (size_t i = 0; i < ELEMENTSOF(cases); i++)
                for (int is_signed = 0; is_signed < 2; is_signed++) {
                        const uint64_t C = cases[i].channels, K = cases[i].inner, first = cases[i].first;
                        _cleanup_(rescale_params_freep) RescaleParams *p = params(is_signed, C, K);
                        for (uint64_t c = 0; c < C; c++) {
                                p->ratio[c] = RESCALE_ONE + rnd_signed(17);
                                p->offset[c] = rnd_signed(22);
                        }
                        for (size_t k = 0; k < N; k++)
                                base[k] = (uint8_t) rnd();
                        rescale_predict(p, first, base, N, whole, whole_flip);
                        for (size_t k = 0; k < N; k++) {
                                uint64_t c = (first + k) / K % C;
                                uint8_t want_flip, want = reference(is_signed, p->ratio[c], p->offset[c], base[k],
                                                                    &want_flip);
                                ck_assert_quiet(whole[k] == want && whole_flip[k] == want_flip, "case %zu: element %"
                                                PRIu64 " (channel %" PRIu64 "): 0x%02x flip %u, want 0x%02x flip %u",
                                                i, first + k, c, whole[k], whole_flip[k], want, want_flip);
                        }
                        for (size_t cut = 0; cut <= N; cut += cut < 20 ? 1 : 37) {
                                memset(pieces, 0, sizeof(pieces));
                                memset(pieces_flip, 7, sizeof(pieces_flip));
                                rescale_predict(p, first, base, cut, pieces, pieces_flip);
                                rescale_predict(p, first + cut, base + cut, N - cut, pieces + cut, pieces_flip + cut);
                                ck_assert_msg(memcmp(whole, pieces, N) == 0 && memcmp(whole_flip, pieces_flip, N) == 0,
                                              "case %zu: cut at %zu differs", i, cut);
                        }
                }
}
END_TEST

/*
 * The frame's parameters: R then O as little-endian int32 in four byte planes. Stored, the bytes
 * are that layout; loaded plane by plane in uneven pieces over garbage, they are the values again.
 */
START_TEST(test_params_planes) {
        static const uint64_t channel_counts[] = { 1, 2, 37, 300 };

        rnd_state = 0x0123456789abcdefu;
        for (size_t t = 0; t < ELEMENTSOF(channel_counts); t++) {
                const uint64_t C = channel_counts[t], n = 2 * C;
                _cleanup_(rescale_params_freep) RescaleParams *want = params(true, C, 3);
                _cleanup_(rescale_params_freep) RescaleParams *got = params(true, C, 3);
                _cleanup_free_ uint8_t *bytes = malloc(8 * C);
                ck_assert_ptr_nonnull(bytes);
                ck_assert_uint_eq(rescale_shape_param_bytes(&want->shape), 8 * C);
                for (uint64_t c = 0; c < C; c++) {
                        want->ratio[c] = c == 0 ? INT32_MIN : c == 1 ? INT32_MAX : rnd_signed(32);
                        want->offset[c] = c == 0 ? -1 : rnd_signed(32);
                        got->ratio[c] = rnd_signed(32);
                        got->offset[c] = rnd_signed(32);
                }
                rescale_params_store(want, bytes);
                for (uint64_t i = 0; i < n; i++) {
                        uint32_t v = (uint32_t) (i < C ? want->ratio[i] : want->offset[i - C]);
                        for (unsigned plane = 0; plane < 4; plane++)
                                ck_assert_quiet(bytes[plane * n + i] == (uint8_t) (v >> 8 * plane),
                                                "%" PRIu64 " channels: value %" PRIu64 ", plane %u", C, i, plane);
                }
                for (unsigned plane = 0; plane < 4; plane++)
                        for (uint64_t at = 0, k = 1 + 2 * plane; at < n; at += k, k = k >= 9 ? 1 : k + 2) {
                                k = n - at < k ? n - at : k;
                                rescale_params_load_plane(got, plane, at, bytes + plane * n + at, (size_t) k);
                        }
                ck_assert_mem_eq(got->ratio, want->ratio, C * sizeof(int32_t));
                ck_assert_mem_eq(got->offset, want->offset, C * sizeof(int32_t));
        }
        ck_assert_ptr_null(rescale_params_free(NULL));
}
END_TEST

static const struct {
        uint64_t channels, inner;
        const char *refusal;    /* NULL: accepted */
} shapes[] = {
        { 1, 1, NULL },
        { RESCALE_MAX_CHANNELS, 1, NULL },
        { 1, RESCALE_MAX_INNER, NULL },
        { RESCALE_MAX_CHANNELS, RESCALE_MAX_INNER, NULL },
        { 0, 1, "a rescale span of 0 channels (expected 1 .. 1048576)" },
        { RESCALE_MAX_CHANNELS + 1, 1, "of 1048577 channels" },
        { UINT64_MAX, 1, "of 18446744073709551615 channels" },
        { 1, 0, "with 0 elements per channel run (expected 1 .. 2^40)" },
        { 1, RESCALE_MAX_INNER + 1, "with 1099511627777 elements per channel run" },
        { 1, UINT64_MAX, "elements per channel run" },
        { 0, 0, "channels" },
};

START_TEST(test_shape_check) {
        const RescaleShape s = { .is_signed = _i % 2, .channels = shapes[_i].channels, .inner = shapes[_i].inner };
        TpError err = {};
        int r = rescale_shape_check(&s, &err);

        if (!shapes[_i].refusal) {
                ck_assert_msg(r == 0, "row %d: %s", _i, err.message);
                return;
        }
        ck_assert_int_eq(r, -EBADMSG);
        ck_assert_msg(strstr(err.message, shapes[_i].refusal), "row %d: '%s' lacks '%s'", _i, err.message,
                      shapes[_i].refusal);
}
END_TEST

/*
 * Golden digests: SHA-256 of the prediction of GOLDEN_N random base bytes under random parameters
 * (xorshift64 from a fixed seed; ratios 2^16 +- 2^15, offsets +- 2^23, so that most bytes fall
 * between the clamps), followed by its GOLDEN_N flips (0 or 1), from element @first of each
 * layout, uint8 then int8. They pin the arithmetic, the flips and the channel indexing on every
 * machine: x86-64 computed them, a separate Python model of the same stream and of rescale.h's
 * formula (its floor division and remainder) gave the same eight, and make check-arm holds
 * aarch64 to them. Offsets stay far from the int32 ends, so the digests do not depend on how
 * O + 2^15 is summed there (test_arithmetic checks that).
 */
#define GOLDEN_N 6000
static const struct {
        uint64_t channels, inner, first;
        const char *golden[2];  /* uint8, int8 */
} golden[] = {
        { 1, 1, 0, {
                  "6b74b1d58e85eb8940f045a2ff6997cfee8451c1b45772bcf6149fb66efda428",
                  "171b7e409d4fb61cc29fd96913c318db50afcf54f1787b0ac3adddbbe427be0f" } },
        { 16, 9, 40, {
                  "b136341dc97954287a3b1425ec392ee6305947347803c097d4ff6bef247619c9",
                  "807d5559f36d56fd152e3cb74c1c05f8f1db3746cee41c81201134d50c7c6ce1" } },
        { 64, 1, 3, {
                  "50df58380f22240ebfb20f339154d18217f419c8926f7e66955bd6c3c1afdbc1",
                  "c2fdce11411404a9193c79ce3e49e46ab0eb23eb303f945816a635047dce561e" } },
        { 7, 13, 1000, {
                  "4cf1996a3c14eada7f7713ddd6873b24da7f608642bbf4787b56244687c5d395",
                  "651d556dfd50e7916c8664819b71d2e79fcdb535af1acfd27f80711dc4297e48" } },
};

START_TEST(test_golden) {
        static uint8_t base[GOLDEN_N], out[2 * GOLDEN_N];
        const size_t l = (size_t) _i / 2;
        const bool is_signed = _i % 2;
        const uint64_t C = golden[l].channels;
        _cleanup_(rescale_params_freep) RescaleParams *p = params(is_signed, C, golden[l].inner);

        rnd_state = 0x2545f4914f6cdd1du + (uint64_t) _i;
        for (uint64_t c = 0; c < C; c++) {
                p->ratio[c] = RESCALE_ONE + rnd_signed(16);
                p->offset[c] = rnd_signed(24);
        }
        for (size_t k = 0; k < GOLDEN_N; k++)
                base[k] = (uint8_t) (rnd() >> 32);
        rescale_predict(p, golden[l].first, base, GOLDEN_N, out, out + GOLDEN_N);

        char hex[SHA256_HEX_SIZE];
        uint8_t d[SHA256_DIGEST_SIZE];
        sha256_digest(out, sizeof(out), d);
        sha256_to_hex(d, hex);
        ck_assert_msg(strcmp(hex, golden[l].golden[is_signed]) == 0, "%s, %" PRIu64 " x %" PRIu64 " from %" PRIu64
                      ": prediction digest %s, golden %s", is_signed ? "int8" : "uint8", C, golden[l].inner,
                      golden[l].first, hex, golden[l].golden[is_signed]);
}
END_TEST

static Suite *rescale_suite(void) {
        Suite *s = suite_create("rescale");
        TCase *tc = tcase_create("rescale");

        tcase_set_timeout(tc, 60);      /* millions of elements against the reference, under qemu or ASan */
        tcase_add_test(tc, test_identity);
        tcase_add_loop_test(tc, test_arithmetic, 0, 2);
        tcase_add_test(tc, test_rounding);
        tcase_add_test(tc, test_flip);
        tcase_add_test(tc, test_channels);
        tcase_add_test(tc, test_params_planes);
        tcase_add_loop_test(tc, test_shape_check, 0, (int) ELEMENTSOF(shapes));
        tcase_add_loop_test(tc, test_golden, 0, (int) (2 * ELEMENTSOF(golden)));
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(rescale_suite)
