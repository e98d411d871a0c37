/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * A tiny in-memory GGUF writer for the gguf unit tests: build key/values
 * and tensor infos into a Model, lay it out with model_bytes(), read it
 * back through a memfd. Independent of common/artifact/gguf.c (sizes come from the
 * llama.cpp block structs), so it can check the reader.
 */

#include <check.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check-main.h"
#include "ggml.h"
#include "gguf.h"
#include "test-buf.h"

/* ---- a tiny GGUF writer ------------------------------------------------- */

static inline void put_le(Buf *b, uint64_t v, unsigned n) {
        uint8_t x[8];
        for (unsigned i = 0; i < n; i++)
                x[i] = (uint8_t) (v >> (8 * i));
        put(b, x, n);
}
#define put_u8(b, v)  put_le(b, (uint8_t) (v), 1)
#define put_u16(b, v) put_le(b, (uint16_t) (v), 2)
#define put_u32(b, v) put_le(b, (uint32_t) (v), 4)
#define put_u64(b, v) put_le(b, (uint64_t) (v), 8)

static inline void put_strn(Buf *b, const char *s, size_t n) {
        put_u64(b, n);
        put(b, s, n);
}

static inline void put_str(Buf *b, const char *s) {
        put_strn(b, s, strlen(s));
}

static inline void put_fill(Buf *b, size_t n, uint8_t byte) {
        while (n--)
                put(b, &byte, 1);
}

static inline void set_le(Buf *b, size_t at, uint64_t v, unsigned n) {
        ck_assert_uint_le(at + n, b->n);
        for (unsigned i = 0; i < n; i++)
                b->p[at + i] = (uint8_t) (v >> (8 * i));
}

static inline void buf_done(Buf *b) {
        free(b->p);
        *b = (Buf){0};
}

/* Bytes of a tensor, from the llama.cpp block structs (independent of common/artifact/ggml.c). */
static inline uint64_t tensor_bytes(uint32_t type, uint64_t n) {
        switch (type) {
        case GGML_TYPE_F32:
                return n * 4;
        case GGML_TYPE_F16:
                return n * 2;
        case GGML_TYPE_Q4_0:
                return n / 32 * 18; /* ggml_half d; uint8_t qs[16] */
        case GGML_TYPE_Q8_0:
                return n / 32 * 34; /* ggml_half d; int8_t qs[32] */
        case GGML_TYPE_Q4_K:
                return n / 256 * 144; /* 2 halves, scales[12], qs[128] */
        case GGML_TYPE_Q6_K:
                return n / 256 * 210; /* ql[128], qh[64], scales[16], half d */
        default:
                ck_abort_msg("no size for type %u", type);
        }
        return 0;
}

/* A file under construction: key/values and tensor infos, then laid out by model_bytes(). */
typedef struct Model {
        uint32_t version;
        Buf kv, ti;
        uint64_t n_kv, n_t;
        uint64_t kv_off[64]; /* offset of each record inside kv */
        uint32_t align;      /* padding before the data section */
        uint64_t data_len;   /* bytes of the data section */
        uint64_t next_rel;
} Model;

static inline void model_init(Model *m, uint32_t version) {
        *m = (Model){.version = version, .align = 32};
}

static inline void model_done(Model *m) {
        buf_done(&m->kv);
        buf_done(&m->ti);
}

/* Start a key/value record: key and type; the caller writes the value. */
static inline Buf *kv(Model *m, const char *key, uint32_t type) {
        if (m->n_kv < ELEMENTSOF(m->kv_off))
                m->kv_off[m->n_kv] = m->kv.n;
        m->n_kv++;
        put_str(&m->kv, key);
        put_u32(&m->kv, type);
        return &m->kv;
}

static inline void kv_u32(Model *m, const char *key, uint32_t v) {
        put_u32(kv(m, key, GGUF_TYPE_UINT32), v);
}

static inline void kv_string(Model *m, const char *key, const char *v) {
        put_str(kv(m, key, GGUF_TYPE_STRING), v);
}

/* Tensor info at an explicit rel_offset; the data section grows to hold @size bytes there. */
static inline void tensor_at(Model *m, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                             uint64_t rel, uint64_t size) {
        put_str(&m->ti, name);
        put_u32(&m->ti, n_dims);
        for (uint32_t j = 0; j < n_dims; j++)
                put_u64(&m->ti, ne[j]);
        put_u32(&m->ti, type);
        put_u64(&m->ti, rel);
        m->n_t++;
        if (rel < (UINT64_C(1) << 36) && rel + size > m->data_len) /* absurd offsets: no data */
                m->data_len = rel + size;
}

/* Tensor info packed after the previous one, as llama.cpp writes them. Returns its rel_offset. */
static inline uint64_t tensor(Model *m, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type) {
        uint64_t n = 1, rel = m->next_rel;
        for (uint32_t j = 0; j < n_dims; j++)
                n *= ne[j];
        uint64_t size = tensor_bytes(type, n);
        tensor_at(m, name, n_dims, ne, type, rel, size);
        m->next_rel = (rel + size + m->align - 1) / m->align * m->align;
        return rel;
}

#define NE(...) ((const uint64_t[]){__VA_ARGS__})

static inline uint64_t round_up(uint64_t x, uint64_t a) {
        return (x + a - 1) / a * a;
}

/* The whole file. *ret_infos_end: where the tensor-info table ends. */
static inline void model_bytes(const Model *m, Buf *out, uint64_t *ret_infos_end) {
        put(out, "GGUF", 4);
        put_u32(out, m->version);
        put_u64(out, m->n_t);
        put_u64(out, m->n_kv);
        put(out, m->kv.p, m->kv.n);
        put(out, m->ti.p, m->ti.n);
        if (ret_infos_end)
                *ret_infos_end = out->n;
        put_fill(out, round_up(out->n, m->align) - out->n, 0);
        for (uint64_t i = 0; i < m->data_len; i++)
                put_u8(out, i * 7 + 1);
}

static inline int read_bytes(const void *p, size_t n, Gguf **ret, TpError *err) {
        int fd = memfd_with(p, n);
        int r = gguf_read(fd, ret, err);
        close(fd);
        return r;
}

/* Everything a successful parse promises, whatever the input. */
static inline void check_invariants(const Gguf *g) {
        ck_assert(g->version == 2 || g->version == 3);
        ck_assert(g->alignment && !(g->alignment & (g->alignment - 1)));
        ck_assert_uint_le(g->data_offset, g->file_size);
        for (uint64_t i = 0; i < g->n_kv; i++) {
                ck_assert_ptr_nonnull(g->kv[i].key);
                ck_assert(g->kv[i].key[0]);
                ck_assert_uint_lt(g->kv[i].type, _GGUF_TYPE_MAX);
        }
        for (uint64_t i = 0; i < g->n_tensors; i++) {
                const GgufTensor *t = &g->tensors[i];
                ck_assert_ptr_nonnull(t->name);
                ck_assert(t->n_dims >= 1 && t->n_dims <= 4);
                ck_assert_ptr_nonnull(ggml_type(t->type));
                ck_assert_uint_eq(t->rel_offset % g->alignment, 0);
                ck_assert_uint_eq(t->offset, g->data_offset + t->rel_offset);
                ck_assert_uint_le(t->offset + t->size, g->file_size);
                for (uint64_t j = 0; j < i; j++) {
                        const GgufTensor *u = &g->tensors[j];
                        ck_assert_quiet(strcmp(t->name, u->name) != 0, "duplicate name '%s'", t->name);
                        ck_assert_quiet(!t->size || !u->size || t->offset + t->size <= u->offset ||
                                                u->offset + u->size <= t->offset,
                                        "'%s' overlaps '%s'", t->name, u->name);
                }
        }
}

/* One key/value of every type, arrays of strings and of arrays; six tensor types. */
static inline void full_model(Model *m, uint32_t version, uint32_t align) {
        model_init(m, version);
        if (align) {
                kv_u32(m, "general.alignment", align);
                m->align = align;
        }
        kv_string(m, "general.architecture", "llama");
        put_u8(kv(m, "t.u8", GGUF_TYPE_UINT8), 200);
        put_u8(kv(m, "t.i8", GGUF_TYPE_INT8), -5);
        put_u16(kv(m, "t.u16", GGUF_TYPE_UINT16), 60000);
        put_u16(kv(m, "t.i16", GGUF_TYPE_INT16), -30000);
        put_u32(kv(m, "t.u32", GGUF_TYPE_UINT32), 4000000000u);
        put_u32(kv(m, "t.i32", GGUF_TYPE_INT32), -2000000000);
        put_u32(kv(m, "t.f32", GGUF_TYPE_FLOAT32), 0x3fc00000); /* 1.5f */
        put_u8(kv(m, "t.bool", GGUF_TYPE_BOOL), 1);
        put_u8(kv(m, "t.bool0", GGUF_TYPE_BOOL), 0);
        put_u64(kv(m, "t.u64", GGUF_TYPE_UINT64), (UINT64_C(1) << 63) + 7);
        put_u64(kv(m, "t.i64", GGUF_TYPE_INT64), -(INT64_C(1) << 60));
        put_u64(kv(m, "t.f64", GGUF_TYPE_FLOAT64), 0x400a000000000000); /* 3.25 */
        kv_string(m, "t.str", "hello, world");

        Buf *b = kv(m, "t.arr_u32", GGUF_TYPE_ARRAY);
        put_u32(b, GGUF_TYPE_UINT32);
        put_u64(b, 3);
        put_u32(b, 1);
        put_u32(b, 2);
        put_u32(b, 3);

        b = kv(m, "t.arr_str", GGUF_TYPE_ARRAY);
        put_u32(b, GGUF_TYPE_STRING);
        put_u64(b, 3);
        put_str(b, "a");
        put_str(b, "bc");
        put_str(b, "");

        b = kv(m, "t.arr_arr", GGUF_TYPE_ARRAY); /* [[1, 2], [], ["x"]] */
        put_u32(b, GGUF_TYPE_ARRAY);
        put_u64(b, 3);
        put_u32(b, GGUF_TYPE_UINT8);
        put_u64(b, 2);
        put_u8(b, 1);
        put_u8(b, 2);
        put_u32(b, GGUF_TYPE_FLOAT64);
        put_u64(b, 0);
        put_u32(b, GGUF_TYPE_STRING);
        put_u64(b, 1);
        put_str(b, "x");

        b = kv(m, "t.arr_empty", GGUF_TYPE_ARRAY);
        put_u32(b, GGUF_TYPE_INT64);
        put_u64(b, 0);

        tensor(m, "token_embd.weight", 2, NE(8, 3), GGML_TYPE_F32);
        tensor(m, "blk.0.attn_norm.weight", 1, NE(6), GGML_TYPE_F16);
        tensor(m, "blk.0.attn_q.weight", 2, NE(64, 2), GGML_TYPE_Q4_0);
        tensor(m, "blk.0.attn_k.weight", 3, NE(32, 1, 2), GGML_TYPE_Q8_0);
        tensor(m, "blk.0.ffn_up.weight", 4, NE(256, 1, 1, 2), GGML_TYPE_Q4_K);
        tensor(m, "output.weight", 2, NE(512, 1), GGML_TYPE_Q6_K);
}
/* Arrays nested @levels deep: [[[...[7]...]]]. */
static inline void nested_array(Model *m, unsigned levels) {
        Buf *b = kv(m, "t.nested", GGUF_TYPE_ARRAY);
        for (unsigned i = 1; i < levels; i++) {
                put_u32(b, GGUF_TYPE_ARRAY);
                put_u64(b, 1);
        }
        put_u32(b, GGUF_TYPE_UINT8);
        put_u64(b, 1);
        put_u8(b, 7);
}
