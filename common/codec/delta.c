/* SPDX-License-Identifier: MIT */

#include <string.h>

#include "delta.h"
#include "delta-i8.h"
#include "delta-i8ac.h"
#include "delta-impl.h"

/* The wire format's constants (delta.h). */
#define BUCKETS   8
#define FLIP      32768
#define NORM_BITS 46


/* ---- block layouts (ggml/src/ggml-common.h; bits where dequantize_row_* reads them) ---- */

/* The helpers move elements (bytes) 8 or 16 a step. Packing takes element values below 2^q_bits. */
#define le64(v) (__BYTE_ORDER__ == __ORDER_BIG_ENDIAN__ ? __builtin_bswap64(v) : (v)) /* to or from little-endian */
#define BYTES(x) (UINT64_C(0x0101010101010101) * (x)) /* @x in every byte */
#define LOW4(x) ((x) & UINT64_C(0xffffffff))

static inline uint64_t load_le(const uint8_t *p, unsigned n) {
        uint64_t v = 0;
        memcpy(&v, p, n);
        return le64(v);
}

static inline void store_le(uint8_t *p, uint64_t v, unsigned n) {
        v = le64(v);
        memcpy(p, &v, n);
}

/* A byte's fields, one a byte, the first lowest: 8 of 1 bit (bit planes, q5_0's bit 4), 4 of 2 bits. */
#define FIELD(x, w, i) ((uint64_t) ((x) >> (w) * (i) & ((1u << (w)) - 1)) << 8 * (i))
#define SPREAD1(x) (FIELD(x, 1, 0) | FIELD(x, 1, 1) | FIELD(x, 1, 2) | FIELD(x, 1, 3) | FIELD(x, 1, 4) | \
                    FIELD(x, 1, 5) | FIELD(x, 1, 6) | FIELD(x, 1, 7))
#define SPREAD2(x) (uint32_t) (FIELD(x, 2, 0) | FIELD(x, 2, 1) | FIELD(x, 2, 2) | FIELD(x, 2, 3))
#define T4(f, x) f(x), f((x) + 1), f((x) + 2), f((x) + 3)
#define T16(f, x) T4(f, x), T4(f, (x) + 4), T4(f, (x) + 8), T4(f, (x) + 12)
#define T256(f) T16(f, 0), T16(f, 16), T16(f, 32), T16(f, 48), T16(f, 64), T16(f, 80), T16(f, 96), T16(f, 112), \
                T16(f, 128), T16(f, 144), T16(f, 160), T16(f, 176), T16(f, 192), T16(f, 208), T16(f, 224), T16(f, 240)
static const uint64_t spread1[256] = { T256(SPREAD1) };
static const uint32_t spread2[256] = { T256(SPREAD2) };

/*
 * Fields of @w bits: field k of byte j of @src is element (j / stride * 8 / w + k) * stride + j % stride, at bit
 * @shift of it (stored if @shift is 0, else ORed in); packing takes bits [@shift, @shift + @w) of the elements.
 * 16 bytes a step (@stride, @bytes: multiples of 16); each bit stays in its byte, so any byte order will do.
 */
typedef uint64_t Vec16 __attribute__((vector_size(16)));

static inline Vec16 vec_load(const uint8_t *p) {
        Vec16 v;
        memcpy(&v, p, sizeof(v));
        return v;
}

static inline void vec_store(uint8_t *p, Vec16 v) {
        memcpy(p, &v, sizeof(v));
}

_inline_ void fields_unpack(const uint8_t *restrict src, size_t bytes, size_t stride, unsigned w, unsigned shift,
                            uint8_t *restrict q) {
        const uint64_t mask = BYTES((1u << w) - 1);

        for (size_t g = 0; g < bytes; g += stride)
                for (size_t j = 0; j < stride; j += 16) {
                        Vec16 x = vec_load(src + g + j);
                        for (unsigned k = 0; k < 8 / w; k++) {
                                uint8_t *p = q + g * 8 / w + k * stride + j;
                                Vec16 v = (x >> w * k & mask) << shift;
                                vec_store(p, shift ? vec_load(p) | v : v);
                        }
                }
}

_inline_ void fields_pack(const uint8_t *restrict q, size_t bytes, size_t stride, unsigned w, unsigned shift,
                          uint8_t *restrict dst) {
        const uint64_t mask = BYTES((1u << w) - 1);

        for (size_t g = 0; g < bytes; g += stride)
                for (size_t j = 0; j < stride; j += 16) {
                        Vec16 x = { 0, 0 };
                        for (unsigned k = 0; k < 8 / w; k++)
                                x |= (vec_load(q + g * 8 / w + k * stride + j) >> shift & mask) << w * k;
                        vec_store(dst + g + j, x);
                }
}

/* Bytes to and from @n int8 values + 128 at @at: unpack_x and pack_x (q8_0 elements, q6_K sub-scales). */
#define DEFINE_INT8(x, at, n)                                                            \
        static void unpack_##x(const uint8_t *restrict blk, uint8_t *restrict q) {     \
                for (size_t j = 0; j < (n); j += 16)                                     \
                        vec_store(q + j, vec_load(blk + (at) + j) ^ BYTES(0x80));        \
        }                                                                                \
        static void pack_##x(const uint8_t *restrict q, uint8_t *restrict blk) {       \
                for (size_t j = 0; j < (n); j += 16)                                     \
                        vec_store(blk + (at) + j, vec_load(q + j) ^ BYTES(0x80));        \
        }

/*
 * q4_0 {d, qs[16]} and q4_1 {d, m, qs[16]}: elements j and j + 16 in the
 * nibbles of qs[j], at @qs. q5_0 {d, qh[4], qs[16]} and q5_1 {d, m, qh[4],
 * qs[16]}: the same, and bit 4 of element e is bit e of qh (byte e / 8, bit
 * e % 8), at @qh; the multiplication gathers bit 0 of byte i into bit 56 + i
 * (its partial products are distinct powers of two: nothing carries).
 */
#define DEFINE_SMALL_QUANT(name, qs, qh)                                                                      \
        static void unpack_q_##name(const uint8_t *restrict blk, uint8_t *restrict q) {                      \
                fields_unpack(blk + (qs), 16, 16, 4, 0, q);                                                   \
                for (unsigned k = 0; (qh) && k < 4; k++)                                                      \
                        store_le(q + 8 * k, load_le(q + 8 * k, 8) | spread1[blk[(qh) + k]] << 4, 8);          \
        }                                                                                                     \
        static void pack_q_##name(const uint8_t *restrict q, uint8_t *restrict blk) {                        \
                fields_pack(q, 16, 16, 4, 0, blk + (qs));                                                     \
                for (unsigned k = 0; (qh) && k < 4; k++)                                                      \
                        blk[(qh) + k] = (uint8_t) ((load_le(q + 8 * k, 8) >> 4 & BYTES(1)) *                  \
                                                   UINT64_C(0x0102040810204080) >> 56);                       \
        }
DEFINE_SMALL_QUANT(q4_0, 2, 0)
DEFINE_SMALL_QUANT(q4_1, 4, 0)
DEFINE_SMALL_QUANT(q5_0, 6, 2)
DEFINE_SMALL_QUANT(q5_1, 8, 4)

/* q8_0 {d, int8 qs[32]}: elements are the int8 values + 128. */
DEFINE_INT8(q_q8_0, 2, 32)

/* Element or sub-scale bytes that are @bytes of fields of @w bits at @at (fields_unpack): unpack_x and pack_x. */
#define DEFINE_FIELDS(x, at, bytes, stride, w)                                         \
        static void unpack_##x(const uint8_t *restrict blk, uint8_t *restrict q) {   \
                fields_unpack(blk + (at), bytes, stride, w, 0, q);                     \
        }                                                                              \
        static void pack_##x(const uint8_t *restrict q, uint8_t *restrict blk) {     \
                fields_pack(q, bytes, stride, w, 0, blk + (at));                       \
        }

/* q2_K {scales[16], qs[64], d, dmin}: element 128h + 32k + l in bits 2k of qs[32h + l]; scales[j] = sc_j | m_j << 4. */
DEFINE_FIELDS(q_q2_K, 16, 64, 32, 2)
DEFINE_FIELDS(s_q2_K, 0, 16, 16, 4)

/*
 * q3_K {hmask[32], qs[64], scales[12], d}: element e is its q2_K-style low
 * bits | bit e / 32 of hmask[e % 32] << 2. Scale j: low nibble in byte j % 8
 * (high nibble for j >= 8), top two bits at bits 2 (j / 4) of byte 8 + j % 4.
 */
static void unpack_q_q3_K(const uint8_t *restrict blk, uint8_t *restrict q) {
        fields_unpack(blk + 32, 64, 32, 2, 0, q);
        fields_unpack(blk, 32, 32, 1, 2, q);
}
static void pack_q_q3_K(const uint8_t *restrict q, uint8_t *restrict blk) {
        fields_pack(q, 32, 32, 1, 2, blk);
        fields_pack(q, 64, 32, 2, 0, blk + 32);
}
static void unpack_s_q3_K(const uint8_t *restrict blk, uint8_t *restrict s) {
        uint64_t lo = load_le(blk + 96, 8), hi = load_le(blk + 104, 4); /* hi: byte m has the top bits of m + 4 g */

        for (unsigned g = 0; g < 2; g++)
                store_le(s + 8 * g, (lo >> 4 * g & BYTES(15)) | (hi >> 4 * g & BYTES(3)) << 4 |
                                            LOW4(hi >> (4 * g + 2) & BYTES(3)) << 36, 8);
}
static void pack_s_q3_K(const uint8_t *restrict s, uint8_t *restrict blk) {
        uint64_t s0 = load_le(s, 8), s1 = load_le(s + 8, 8), t0 = s0 >> 4 & BYTES(3), t1 = s1 >> 4 & BYTES(3);

        store_le(blk + 96, (s0 & BYTES(15)) | (s1 & BYTES(15)) << 4, 8);
        store_le(blk + 104, LOW4(t0) | (t0 >> 32) << 2 | LOW4(t1) << 4 | (t1 >> 32) << 6, 4);
}

/* The 12 scale bytes of q4_K and q5_K at blk + 4 (ggml's get_scale_min_k4): scales s[0..7], mins s[8..15]. */
static void unpack_s_k4(const uint8_t *restrict blk, uint8_t *restrict s) {
        uint64_t a = load_le(blk + 4, 4), b = load_le(blk + 8, 4), c = load_le(blk + 12, 4);

        store_le(s, (a & BYTES(63)) | ((c & BYTES(15)) | (a >> 6 & BYTES(3)) << 4) << 32, 8);
        store_le(s + 8, (b & BYTES(63)) | ((c >> 4 & BYTES(15)) | (b >> 6 & BYTES(3)) << 4) << 32, 8);
}
static void pack_s_k4(const uint8_t *restrict s, uint8_t *restrict blk) {
        uint64_t sc = load_le(s, 8), mn = load_le(s + 8, 8);

        store_le(blk + 4, (LOW4(sc) & BYTES(63)) | (sc >> 36 & BYTES(3)) << 6, 4);
        store_le(blk + 8, (LOW4(mn) & BYTES(63)) | (mn >> 36 & BYTES(3)) << 6, 4);
        store_le(blk + 12, (sc >> 32 & BYTES(15)) | (mn >> 32 & BYTES(15)) << 4, 4);
}

/* q4_K {d, dmin, scales[12], qs[128]}: elements 64 k + l and 64 k + 32 + l in the nibbles of qs[32 k + l]. */
DEFINE_FIELDS(q_q4_K, 16, 128, 32, 4)

/* q5_K {d, dmin, scales[12], qh[32], qs[128]}: as q4_K; bit 4 of element e is bit e / 32 of qh[e % 32]. */
static void unpack_q_q5_K(const uint8_t *restrict blk, uint8_t *restrict q) {
        fields_unpack(blk + 48, 128, 32, 4, 0, q);
        fields_unpack(blk + 16, 32, 32, 1, 4, q);
}
static void pack_q_q5_K(const uint8_t *restrict q, uint8_t *restrict blk) {
        fields_pack(q, 128, 32, 4, 0, blk + 48);
        fields_pack(q, 32, 32, 1, 4, blk + 16);
}

/*
 * q6_K {ql[128], qh[64], int8 scales[16], d}: element 128 h + 32 k + l has
 * its low nibble in ql[64 h + 32 (k & 1) + l] (the high nibble when k >= 2:
 * element 128 h + 64 i + j in nibble i of ql[64 h + j]) and its top two bits
 * at bits 2 k of qh[32 h + l], as q2_K's. Sub-scales are the int8 scales + 128.
 */
static void unpack_q_q6_K(const uint8_t *restrict blk, uint8_t *restrict q) {
        fields_unpack(blk, 128, 64, 4, 0, q);
        fields_unpack(blk + 128, 64, 32, 2, 4, q);
}
static void pack_q_q6_K(const uint8_t *restrict q, uint8_t *restrict blk) {
        fields_pack(q, 128, 64, 4, 0, blk);
        fields_pack(q, 64, 32, 2, 4, blk + 128);
}
DEFINE_INT8(s_q6_K, 192, 16)

#define QUANT(q) unpack_q_##q, pack_q_##q
#define SUBS(s) unpack_s_##s, pack_s_##s

static const Layout layouts[_DELTA_LAYOUT_MAX] = {
        /* name, unit, word size, words, word offsets,
         * elements, bits, per sub-block, zero, sub-scales, bits, zero, ordered, flip, planes */
        [DELTA_BYTES] = { "bytes", 1, 1, 1, { 0 } },
        [DELTA_F16] = { "f16", 2, 2, 1, { 0 } },
        [DELTA_BF16] = { "bf16", 2, 2, 1, { 0 } },
        [DELTA_F32] = { "f32", 4, 4, 1, { 0 } },
        [DELTA_I8] = { "i8", 1, 1, 0, { 0 } },          /* no words: delta-i8.c */
        [DELTA_I8AC] = { "i8ac", 1, 1, 0, { 0 } },      /* delta-i8ac.c */
        [DELTA_I8ACP] = { "i8acp", 1, 1, 0, { 0 } },    /* delta-i8ac.c */
        [DELTA_Q4_0] = { "q4_0", 18, 2, 1, { 0 }, 32, 4, 32, 8, 0, 0, 0, 0, FLIP, { 1, 1, 2 }, { 0 }, QUANT(q4_0) },
        [DELTA_Q4_1] = { "q4_1", 20, 2, 2, { 0, 2 }, 32, 4, 32, 0, 0, 0, 0, 0, FLIP, { 1, 1, 2 }, { 0 }, QUANT(q4_1) },
        [DELTA_Q5_0] = { "q5_0", 22, 2, 1, { 0 }, 32, 5, 32, 16, 0, 0, 0, 0, FLIP, { 2, 1, 1, 1 }, { 0 }, QUANT(q5_0) },
        [DELTA_Q5_1] = { "q5_1", 24, 2, 2, { 0, 2 }, 32, 5, 32, 0, 0, 0, 0, 0, FLIP, { 2, 1, 1, 1 }, { 0 },
                         QUANT(q5_1) },
        [DELTA_Q8_0] = { "q8_0", 34, 2, 1, { 0 }, 32, 8, 32, 128, 0, 0, 0, 0, 0, { 2, 2, 2, 2 }, { 0 }, QUANT(q8_0) },
        [DELTA_Q2_K] = { "q2_K", 84, 2, 2, { 80, 82 }, 256, 2, 16, 0, 32, 4, 0, 1, FLIP, { 1, 1 }, { 2, 2 },
                         QUANT(q2_K), SUBS(q2_K), 16 },
        [DELTA_Q3_K] = { "q3_K", 110, 2, 1, { 108 }, 256, 3, 16, 4, 16, 6, 32, 1, FLIP, { 1, 1, 1 }, { 4, 2 },
                         QUANT(q3_K), SUBS(q3_K), 0 },
        [DELTA_Q4_K] = { "q4_K", 144, 2, 2, { 0, 2 }, 256, 4, 32, 0, 16, 6, 0, 1, FLIP, { 1, 1, 2 }, { 4, 2 },
                         QUANT(q4_K), SUBS(k4), 16 },
        [DELTA_Q5_K] = { "q5_K", 176, 2, 2, { 0, 2 }, 256, 5, 32, 0, 16, 6, 0, 1, FLIP, { 2, 1, 1, 1 }, { 4, 2 },
                         QUANT(q5_K), SUBS(k4), 16 },
        [DELTA_Q6_K] = { "q6_K", 210, 2, 1, { 208 }, 256, 6, 16, 32, 16, 8, 128, 1, FLIP, { 2, 2, 2 }, { 4, 4 },
                         QUANT(q6_K), SUBS(q6_K), 0 },
};

/* ---- the table, for delta-types.c ---- */

const Layout *delta_layout_get(DeltaLayout l) {
        return (unsigned) l < _DELTA_LAYOUT_MAX ? &layouts[l] : NULL;
}

/* ---- zigzag codes ---- */

static inline uint32_t zz_encode(uint32_t diff, unsigned bits) {
        uint32_t mask = bits == 32 ? UINT32_MAX : (UINT32_C(1) << bits) - 1;
        uint32_t v = diff & mask;
        return ((v << 1) ^ (0u - (v >> (bits - 1)))) & mask;
}

static inline uint32_t zz_decode(uint32_t code, unsigned bits) {
        uint32_t mask = bits == 32 ? UINT32_MAX : (UINT32_C(1) << bits) - 1;
        return ((code >> 1) ^ (0u - (code & 1))) & mask;
}

/* ---- words: zigzag differences in byte planes ---- */

/* Words of @ws bytes at stride @u; @ws is a constant at every call, so each size gets its own loop. */
static inline void words_encode_ws(const uint8_t *b, const uint8_t *t, size_t u, size_t n, unsigned ws, uint8_t *out) {
        for (size_t i = 0; i < n; i++) {
                uint32_t x = 0, y = 0;
                for (unsigned k = 0; k < ws; k++) {
                        x |= (uint32_t) b[i * u + k] << 8 * k;
                        y |= (uint32_t) t[i * u + k] << 8 * k;
                }
                uint32_t z = zz_encode(y - x, 8 * ws);
                for (unsigned k = 0; k < ws; k++)
                        out[k * n + i] = (uint8_t) (z >> 8 * k);
        }
}

static inline void words_decode_ws(const uint8_t *b, const uint8_t *delta, size_t u, size_t n, unsigned ws,
                                   uint8_t *t) {
        for (size_t i = 0; i < n; i++) {
                uint32_t x = 0, z = 0;
                for (unsigned k = 0; k < ws; k++) {
                        x |= (uint32_t) b[i * u + k] << 8 * k;
                        z |= (uint32_t) delta[k * n + i] << 8 * k;
                }
                x += zz_decode(z, 8 * ws);
                for (unsigned k = 0; k < ws; k++)
                        t[i * u + k] = (uint8_t) (x >> 8 * k);
        }
}

static void words_encode(const Layout *L, const uint8_t *base, const uint8_t *target, size_t n, uint8_t *out) {
        for (unsigned w = 0; w < L->n_words; w++, out += L->word_size * n) {
                const uint8_t *b = base + L->word_off[w], *t = target + L->word_off[w];
                if (L->word_size == 1)
                        words_encode_ws(b, t, L->unit, n, 1, out);
                else if (L->word_size == 2)
                        words_encode_ws(b, t, L->unit, n, 2, out);
                else
                        words_encode_ws(b, t, L->unit, n, 4, out);
        }
}

static void words_decode(const Layout *L, const uint8_t *base, const uint8_t *delta, size_t n, uint8_t *out) {
        for (unsigned w = 0; w < L->n_words; w++, delta += L->word_size * n) {
                const uint8_t *b = base + L->word_off[w];
                uint8_t *t = out + L->word_off[w];
                if (L->word_size == 1)
                        words_decode_ws(b, delta, L->unit, n, 1, t);
                else if (L->word_size == 2)
                        words_decode_ws(b, delta, L->unit, n, 2, t);
                else
                        words_decode_ws(b, delta, L->unit, n, 4, t);
        }
}

/* ---- bit planes ---- */

/* Offsets of the planes of @widths for @n slices of @count codes each, starting at @at; returns the end. */
static size_t planes_init(const uint8_t *widths, size_t count, size_t n, size_t at, size_t *plane) {
        for (unsigned k = 0; k < 4 && widths[k]; k++) {
                plane[k] = at;
                at += n * count * widths[k] / 8;
        }
        return at;
}

/* Slice @slot of every plane holds @count codes (count * width / 8 bytes, whole). */
static void codes_put(uint8_t *out, const size_t *plane, const uint8_t *widths, size_t slot, size_t count,
                      const uint8_t *c) {
        unsigned shift = 0;

        for (unsigned k = 0; k < 4 && widths[k]; shift += widths[k], k++) {
                unsigned p = widths[k], mask = (1u << p) - 1;
                uint8_t *d = out + plane[k] + slot * count * p / 8;

                memset(d, 0, count * p / 8);
                for (size_t j = 0; j < count; j++)
                        d[j * p / 8] |= (uint8_t) (((c[j] >> shift) & mask) << (j * p % 8));
        }
}

/* Codes 8 g .. 8 g + 7 of slice @slot (@count codes) of plane @k, one a byte, at bit @shift; 0 past the last. */
_inline_ uint64_t plane_get(const uint8_t *delta, const size_t *plane, const uint8_t *widths, unsigned k,
                            unsigned shift, size_t slot, unsigned count, unsigned g) {
        const uint8_t *s = delta + plane[k] + slot * count * widths[k] / 8;
        uint64_t x;

        if (widths[k] < 2)
                return widths[k] ? spread1[s[g]] << shift : 0;
        if (widths[k] == 2)
                return (spread2[s[2 * g]] | (uint64_t) spread2[s[2 * g + 1]] << 32) << shift;
        x = s[4 * g] | (uint64_t) s[4 * g + 1] << 16 | (uint64_t) s[4 * g + 2] << 32 | (uint64_t) s[4 * g + 3] << 48;
        return ((x & UINT64_C(0x000f000f000f000f)) | (x & UINT64_C(0x00f000f000f000f0)) << 4) << shift;
}

/* All planes, written out rather than looped over, so that each width is a constant. */
_inline_ uint64_t codes8(const uint8_t *delta, const size_t *plane, const uint8_t *w, size_t slot, unsigned count,
                         unsigned g) {
        return plane_get(delta, plane, w, 0, 0, slot, count, g) | plane_get(delta, plane, w, 1, w[0], slot, count, g) |
               plane_get(delta, plane, w, 2, w[0] + w[1], slot, count, g) |
               plane_get(delta, plane, w, 3, w[0] + w[1] + w[2], slot, count, g);
}

/*
 * The codes of slices @slot .. @slot + @m - 1, @count each, into @c: stored 16 bytes at a time, as the vector loops
 * load them (a load that spans two smaller stores waits until they reach the cache).
 */
_inline_ void codes_get(const uint8_t *delta, const size_t *plane, const uint8_t *widths, size_t slot, unsigned count,
                        unsigned m, uint8_t *restrict c) {
        for (unsigned g = 0; g < m * count / 8; g += 2) {
                Vec16 v = { le64(codes8(delta, plane, widths, slot, count, g)),
                            le64(codes8(delta, plane, widths, slot, count, g + 1)) };
                vec_store(c + 8 * g, v);
        }
}

/* ---- prediction ---- */

/* An fp16 bit pattern as the exact integer value * 2^24 (|result| < 2^41). */
_inline_ int64_t half_fixed(uint32_t h) {
        int64_t e = (h >> 10) & 31, m = h & 1023;
        int64_t v = e ? (1024 + m) * ((int64_t) 1 << (e - 1)) : m;
        return h & 0x8000 ? -v : v;
}

static uint64_t magnitude(int64_t v) {
        return v < 0 ? 0 - (uint64_t) v : (uint64_t) v;
}

static int64_t clamp64(int64_t v, int64_t lim) {
        return v > lim ? lim : v < -lim ? -lim : v;
}

/* The value model (a, c) of a sub-block under base and under target, scaled into 46 bits. */
typedef struct Pair {
        int64_t a, t, d;        /* a, a', c - c' */
} Pair;

_inline_ Pair pair_make(int64_t a, int64_t c, int64_t a2, int64_t c2) {
        Pair p = { a, a2, c - c2 };
        uint64_t m = magnitude(p.a) | magnitude(p.t) | magnitude(p.d);

        if (m >> NORM_BITS) { /* bitlen(m) > NORM_BITS, without a bit scan (slow on some CPUs) in the common case */
                int64_t div = (int64_t) 1 << (bitlen(m) - NORM_BITS);
                p.a /= div;
                p.t /= div;
                p.d /= div;
        }
        return p;
}

/* How far values of the sub-block move from base to target, on a log scale: 0 (not at all) .. BUCKETS - 1. */
_inline_ unsigned pair_bucket(Pair p, unsigned max) {
        if (p.t == 0)
                return BUCKETS - 1;
        uint64_t m0 = magnitude(p.d), m1 = magnitude((p.a - p.t) * (int64_t) max + p.d);
        uint64_t m = m0 > m1 ? m0 : m1;
        if (m == 0)
                return 0;
        int b = (int) bitlen(m) - (int) bitlen(magnitude(p.t)) + 8;
        return b < 1 ? 1 : b > BUCKETS - 1 ? BUCKETS - 1 : (unsigned) b;
}

/*
 * Target value ~ floor((r q + o) / 2^16) for base value q, in 32-bit two's
 * complement: o holds 2^15 (rounding) and 2^31 (a bias that keeps the
 * exact sum in [0, 2^32), so the shift is a floor).
 */
typedef struct Predictor {
        uint32_t r, o, flip;
} Predictor;

#define PREDICTOR_BIAS ((int64_t) 1 << 31 | 1 << 15)

_inline_ Predictor predictor_make(Pair p, unsigned flip) {
        /* T = 0, or an unchanged model (A = T, D = 0: the quotients are 2^16 and 0): no division. */
        if (p.t == 0 || (p.a == p.t && p.d == 0))
                return (Predictor) { 65536, (uint32_t) PREDICTOR_BIAS, flip };
        return (Predictor) { (uint32_t) clamp64(p.a * 65536 / p.t, (int64_t) 1 << 22),
                             (uint32_t) (clamp64(p.d * 65536 / p.t, (int64_t) 1 << 28) + PREDICTOR_BIAS), flip };
}

/*
 * Residual codes of @count values: base @q, target @t. The prediction is
 * clamped to the value range; where the exact prediction lies below the
 * integer it rounds to (layouts that flip), the residual is likely
 * negative and is negated, so that its likely sign is always +.
 */
static inline void codes_of(Predictor f, const uint8_t *q, const uint8_t *t, unsigned count, unsigned bits,
                            uint8_t *codes) {
        uint32_t max = (1u << bits) - 1;

        for (unsigned e = 0; e < count; e++) {
                uint32_t u = f.r * q[e] + f.o;
                int32_t p = (int32_t) (u >> 16) - 32768;
                uint32_t neg = 0u - (uint32_t) ((u & 65535) < f.flip);
                uint32_t pred = p < 0 ? 0 : p > (int32_t) max ? max : (uint32_t) p;
                codes[e] = (uint8_t) zz_encode(((t[e] - pred) ^ neg) - neg, bits);
        }
}

/*
 * The inverse, in 16-bit lanes, which vectorize with any SIMD. With bytes
 * r = rh 2^16 + rm 2^8 + rl and o alike, u = (rh q + oh) 2^16 + 2^8 y +
 * (rl q + ol) mod 2^8 (mod 2^32) for y = rm q + om + floor((rl q + ol) / 2^8),
 * and y < 2^16 for q < 2^8: so floor(u / 2^16) = rh q + oh + floor(y / 2^8)
 * (mod 2^16), and bit 15 of u is bit 7 of y.
 */
_inline_ void values_of(Predictor f, const uint8_t *restrict q, const uint8_t *restrict codes, unsigned count,
                        unsigned bits, uint8_t *restrict t) {
        const int16_t max = (int16_t) ((1u << bits) - 1);
        const uint16_t rl = f.r & 255, rm = (f.r >> 8) & 255, rh = (uint16_t) (f.r >> 16);
        const uint16_t ol = f.o & 255, om = (f.o >> 8) & 255, oh = (uint16_t) ((f.o >> 16) ^ 0x8000);

        for (unsigned e = 0; e < count; e++) {
                uint16_t x = q[e], y = (uint16_t) (((uint16_t) (rl * x + ol) >> 8) + om + (uint16_t) (rm * x));
                int16_t p = (int16_t) (uint16_t) (rh * x + (y >> 8) + oh); /* floor(u / 2^16) - 2^15 */
                int16_t pred = p < 0 ? 0 : p > max ? max : p;
                uint8_t neg = f.flip && !(y & 0x80) ? 0xff : 0;
                uint8_t z = (uint8_t) ((codes[e] >> 1) ^ (0u - (codes[e] & 1u)));
                t[e] = (uint8_t) (((uint8_t) pred + (uint8_t) ((z ^ neg) - neg)) & max);
        }
}

_inline_ int64_t word_fixed(const Layout *L, const uint8_t *blk, unsigned w) {
        return half_fixed((uint32_t) blk[L->word_off[w]] | (uint32_t) blk[L->word_off[w] + 1] << 8);
}

/* The value model of every sub-block: words from @blk, sub-scales @s. */
_inline_ void model_quants(const Layout *L, const uint8_t *blk, const uint8_t *s, int64_t *a, int64_t *c) {
        unsigned n_sub = L->n_q / L->q_sub;
        int64_t d = word_fixed(L, blk, 0);

        if (L->n_s == 0) {
                a[0] = d;
                c[0] = L->n_words > 1 ? word_fixed(L, blk, 1) : -(int64_t) L->q_zero * d;
                return;
        }
        int64_t dmin = L->n_words > 1 ? word_fixed(L, blk, 1) : 0;
        for (unsigned j = 0; j < n_sub; j++) {
                a[j] = d * ((int64_t) s[j] - L->s_zero);
                c[j] = L->n_s > n_sub ? -dmin * s[n_sub + j] : -(int64_t) L->q_zero * a[j];
        }
}

/* Predictors of the sub-scales: scales stand for word 0 * (s - s_zero), mins (after them) for word 1 * s. */
_inline_ void model_subs(const Layout *L, const uint8_t *base, const uint8_t *target, Predictor *f) {
        int64_t d = word_fixed(L, base, 0), d2 = word_fixed(L, target, 0), z = L->s_zero;

        f[0] = predictor_make(pair_make(d, -z * d, d2, -z * d2), L->flip);
        f[1] = f[0];
        if (L->n_words > 1)
                f[1] = predictor_make(pair_make(word_fixed(L, base, 1), 0, word_fixed(L, target, 1), 0), L->flip);
}

/* ---- groups ---- */

typedef struct Group {
        const Layout *L;
        size_t s_plane[4], q_plane[4];  /* offsets in the delta */
        size_t slot[BUCKETS];           /* next sub-block slot of each bucket */
        unsigned n_sub, qmax;
} Group;

static void group_init(Group *g, const Layout *L, size_t n) {
        size_t at = (size_t) L->n_words * L->word_size * n;

        *g = (Group) { .L = L, .n_sub = L->n_q / L->q_sub, .qmax = (1u << L->q_bits) - 1 };
        if (L->n_s)
                at = planes_init(L->s_planes, L->n_s, n, at, g->s_plane);
        planes_init(L->q_planes, L->q_sub, n * g->n_sub, at, g->q_plane);
}

/* Turn the bucket counts into each bucket's first slot. */
static void group_start(Group *g) {
        size_t at = 0;
        for (unsigned b = 0; b < BUCKETS; b++) {
                size_t count = g->slot[b];
                g->slot[b] = at;
                at += count;
        }
}

/* The pairs of every sub-block of block @i, from its base and target bytes (sub-scales given). */
_inline_ void block_pairs(const Group *g, const uint8_t *bb, const uint8_t *bs, const uint8_t *tb, const uint8_t *ts,
                        Pair *pairs) {
        int64_t ab[16], cb[16], at[16], ct[16];

        model_quants(g->L, bb, bs, ab, cb);
        model_quants(g->L, tb, ts, at, ct);
        for (unsigned j = 0; j < g->n_sub; j++)
                pairs[j] = pair_make(ab[j], cb[j], at[j], ct[j]);
}

/* The plane slot of sub-block @j of block @i: in bucket order, or in block order for unordered layouts. */
_inline_ size_t group_slot(Group *g, size_t i, unsigned j, Pair p) {
        return g->L->ordered ? g->slot[pair_bucket(p, g->qmax)]++ : i * g->n_sub + j;
}

static void blocks_encode(const Layout *L, const uint8_t *base, const uint8_t *target, size_t n, uint8_t *out) {
        uint8_t bq[256], tq[256], bs[32] = { 0 }, ts[32] = { 0 }, codes[256];
        Pair pairs[16];
        Group g;

        group_init(&g, L, n);
        /* Pass 1: sub-scales, and how many sub-blocks fall in each bucket. */
        for (size_t i = 0; (L->n_s || L->ordered) && i < n; i++) {
                const uint8_t *bb = base + i * L->unit, *tb = target + i * L->unit;
                Predictor f[2];

                if (L->n_s) {
                        L->unpack_s(bb, bs);
                        L->unpack_s(tb, ts);
                        model_subs(L, bb, tb, f);
                        codes_of(f[0], bs, ts, g.n_sub, L->s_bits, codes);
                        codes_of(f[1], bs + g.n_sub, ts + g.n_sub, L->n_s - g.n_sub, L->s_bits, codes + g.n_sub);
                        codes_put(out, g.s_plane, L->s_planes, i, L->n_s, codes);
                }
                if (L->ordered) {
                        block_pairs(&g, bb, bs, tb, ts, pairs);
                        for (unsigned j = 0; j < g.n_sub; j++)
                                g.slot[pair_bucket(pairs[j], g.qmax)]++;
                }
        }
        group_start(&g);
        /* Pass 2: element codes. */
        for (size_t i = 0; i < n; i++) {
                const uint8_t *bb = base + i * L->unit, *tb = target + i * L->unit;

                if (L->n_s) {
                        L->unpack_s(bb, bs);
                        L->unpack_s(tb, ts);
                }
                L->unpack_q(bb, bq);
                L->unpack_q(tb, tq);
                block_pairs(&g, bb, bs, tb, ts, pairs);
                for (unsigned j = 0; j < g.n_sub; j++) {
                        Predictor f = predictor_make(pairs[j], L->flip);
                        unsigned e0 = j * L->q_sub;

                        /* Constant counts let the compiler unroll and vectorize. */
                        if (L->q_sub == 16)
                                codes_of(f, bq + e0, tq + e0, 16, L->q_bits, codes);
                        else
                                codes_of(f, bq + e0, tq + e0, 32, L->q_bits, codes);
                        codes_put(out, g.q_plane, L->q_planes, group_slot(&g, i, j, pairs[j]), L->q_sub, codes);
                }
        }
}

/*
 * Decoding pass 2: the elements of blocks [i, i + m), m * n_sub <= 16 (eight small blocks, whose slices follow each
 * other, or one K-quant block). Predictors and codes first, then values, then packing: short straight loops.
 */
_inline_ void batch_decode(const Layout *L, Group *g, const uint8_t *base, const uint8_t *delta, size_t i, unsigned m,
                           uint8_t *out) {
        const unsigned n_sub = L->n_q / L->q_sub, E = L->q_sub;
        uint8_t bq[256], tq[256], codes[256];
        Predictor f[16];

        for (unsigned k = 0; k < m; k++) {
                const uint8_t *bb = base + (i + k) * L->unit, *tb = out + (i + k) * L->unit;
                uint8_t bs[32] = { 0 }, ts[32] = { 0 };
                int64_t ab[16], cb[16], at[16], ct[16];

                if (L->n_s) {
                        L->unpack_s(bb, bs);
                        L->unpack_s(tb, ts);
                }
                model_quants(L, bb, bs, ab, cb);
                model_quants(L, tb, ts, at, ct);
                for (unsigned j = 0; j < n_sub; j++) {
                        Pair p = pair_make(ab[j], cb[j], at[j], ct[j]);
                        unsigned sub = k * n_sub + j;

                        if (L->ordered) /* in the slot of the bucket that pass 1 left at q_at */
                                codes_get(delta, g->q_plane, L->q_planes, g->slot[tb[L->q_at + j]]++, E, 1,
                                          codes + sub * E);
                        f[sub] = predictor_make(p, L->flip);
                }
                L->unpack_q(bb, bq + k * L->n_q);
        }
        if (!L->ordered)
                codes_get(delta, g->q_plane, L->q_planes, i * n_sub, E, m * n_sub, codes);
        for (unsigned sub = 0; sub < m * n_sub; sub++) /* L->flip: a constant */
                values_of((Predictor) { f[sub].r, f[sub].o, L->flip }, bq + sub * E, codes + sub * E, E, L->q_bits,
                          tq + sub * E);
        for (unsigned k = 0; k < m; k++)
                L->pack_q(tq + k * L->n_q, out + (i + k) * L->unit);
}

/*
 * The words are already decoded into @out. Pass 1 decodes the sub-scales into @out, counts the buckets and leaves
 * each sub-block's bucket in the block's element bytes, which pass 2 overwrites. Inlined with a constant @L.
 */
_inline_ void blocks_decode_as(const Layout *L, const uint8_t *base, const uint8_t *delta, size_t n, uint8_t *out) {
        const unsigned n_sub = L->n_q / L->q_sub, qmax = (1u << L->q_bits) - 1, batch = 256 / L->n_q;
        uint8_t bs[32] = { 0 }, ts[32] = { 0 }, codes[32] = { 0 };
        int64_t ab[16], cb[16], at[16], ct[16];
        Group g;
        size_t i;

        group_init(&g, L, n);
        for (i = 0; (L->n_s || L->ordered) && i < n; i++) {
                const uint8_t *bb = base + i * L->unit;
                uint8_t *tb = out + i * L->unit;
                Predictor f[2];

                if (L->n_s) {
                        L->unpack_s(bb, bs);
                        model_subs(L, bb, tb, f);
                        codes_get(delta, g.s_plane, L->s_planes, i, L->n_s, 1, codes);
                        /* 16 values a call, which vectorize; the second call overwrites the extra ones. */
                        values_of(f[0], bs, codes, n_sub < 16 ? 16 : n_sub, L->s_bits, ts);
                        if (L->n_s > n_sub)
                                values_of(f[1], bs + n_sub, codes + n_sub, 16, L->s_bits, ts + n_sub);
                        L->pack_s(ts, tb);
                }
                if (L->ordered) {
                        model_quants(L, bb, bs, ab, cb);
                        model_quants(L, tb, ts, at, ct);
                        for (unsigned j = 0; j < n_sub; j++) {
                                unsigned b = pair_bucket(pair_make(ab[j], cb[j], at[j], ct[j]), qmax);
                                g.slot[b]++;
                                tb[L->q_at + j] = (uint8_t) b;
                        }
                }
        }
        group_start(&g);
        for (i = 0; i + batch <= n; i += batch)
                batch_decode(L, &g, base, delta, i, batch, out);
        for (; i < n; i++)
                batch_decode(L, &g, base, delta, i, 1, out);
}

bool delta_encode_floats(DeltaLayout l, const uint8_t *base, const uint8_t *target, size_t len,
                         const DeltaFloatRun *runs, size_t n_runs, uint8_t *out) {
        const Layout *L = delta_layout_get(l) ? delta_layout_get(l) : &layouts[DELTA_BYTES];
        size_t n = len / L->unit;

        switch (l) {            /* the byte layouts with coders of their own */
        case DELTA_I8: delta_i8_encode(base, target, len, out); return true;
        case DELTA_I8AC: return delta_i8ac_encode(base, target, len, out);
        case DELTA_I8ACP: return delta_i8acp_encode(base, target, len, runs, n_runs, out);
        default: break;
        }
        words_encode(L, base, target, n, out);
        if (L->n_q)
                blocks_encode(L, base, target, n, out);
        for (size_t i = n * L->unit; i < len; i++)
                out[i] = (uint8_t) zz_encode((uint32_t) target[i] - base[i], 8);
        return true;
}

bool delta_encode(DeltaLayout l, const uint8_t *base, const uint8_t *target, size_t len, uint8_t *out) {
        return delta_encode_floats(l, base, target, len, NULL, 0, out);
}

static void blocks_decode(DeltaLayout l, const uint8_t *base, const uint8_t *delta, size_t n, uint8_t *out) {
#define CASE(x) case x: blocks_decode_as(&layouts[x], base, delta, n, out); break
        switch (l) {
        CASE(DELTA_Q4_0); CASE(DELTA_Q4_1); CASE(DELTA_Q5_0); CASE(DELTA_Q5_1); CASE(DELTA_Q8_0);
        CASE(DELTA_Q2_K); CASE(DELTA_Q3_K); CASE(DELTA_Q4_K); CASE(DELTA_Q5_K); CASE(DELTA_Q6_K);
        default: break;
        }
#undef CASE
}

void delta_decode(DeltaLayout l, const uint8_t *base, const uint8_t *delta, size_t len, uint8_t *out) {
        const Layout *L = delta_layout_get(l) ? delta_layout_get(l) : &layouts[DELTA_BYTES];
        size_t n = len / L->unit;

        switch (l) {
        case DELTA_I8: delta_i8_decode(base, delta, len, out); return;
        case DELTA_I8AC: delta_i8ac_decode(base, delta, len, out); return;
        case DELTA_I8ACP: delta_i8acp_decode(base, delta, len, out); return;
        default: break;
        }
        words_decode(L, base, delta, n, out);
        if (L->n_q)
                blocks_decode(l, base, delta, n, out);
        for (size_t i = n * L->unit; i < len; i++)
                out[i] = (uint8_t) (base[i] + zz_decode(delta[i], 8));
}
