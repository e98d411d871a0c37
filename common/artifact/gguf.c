/* SPDX-License-Identifier: MIT */

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "fileio.h"
#include "ggml.h"
#include "gguf.h"
#include "quote.h"
#include "reader.h"

/*
 * The smallest record of each kind, to check a count against the bytes that
 * are left before allocating or looping for it.
 */
#define HEADER_BYTES       24u /* magic, version, n_tensors, n_kv */
#define KV_MIN_BYTES       14u /* key length + 1-byte key + value type + 1-byte value */
#define TENSOR_MIN_BYTES   32u /* name length + n_dims + ne[0] + type + rel_offset */
#define ARRAY_HEADER_BYTES 12u /* element type + count */

/* clang-format off */
static const char *const value_type_table[_GGUF_TYPE_MAX] = {
        [GGUF_TYPE_UINT8] = "uint8",
        [GGUF_TYPE_INT8] = "int8",
        [GGUF_TYPE_UINT16] = "uint16",
        [GGUF_TYPE_INT16] = "int16",
        [GGUF_TYPE_UINT32] = "uint32",
        [GGUF_TYPE_INT32] = "int32",
        [GGUF_TYPE_FLOAT32] = "float32",
        [GGUF_TYPE_BOOL] = "bool",
        [GGUF_TYPE_STRING] = "string",
        [GGUF_TYPE_ARRAY] = "array",
        [GGUF_TYPE_UINT64] = "uint64",
        [GGUF_TYPE_INT64] = "int64",
        [GGUF_TYPE_FLOAT64] = "float64",
};
/* clang-format on */

const char *gguf_value_type_to_string(GgufValueType t) {
        if (t < 0 || t >= _GGUF_TYPE_MAX)
                return NULL;
        return value_type_table[t];
}

GgufValueType gguf_value_type_from_string(const char *s) {
        if (!s)
                return _GGUF_TYPE_INVALID;
        for (GgufValueType t = 0; t < _GGUF_TYPE_MAX; t++)
                if (strcmp(value_type_table[t], s) == 0)
                        return t;
        return _GGUF_TYPE_INVALID;
}

unsigned gguf_value_type_size(uint32_t t) {
        switch (t) {
        case GGUF_TYPE_UINT8:
        case GGUF_TYPE_INT8:
        case GGUF_TYPE_BOOL:
                return 1;
        case GGUF_TYPE_UINT16:
        case GGUF_TYPE_INT16:
                return 2;
        case GGUF_TYPE_UINT32:
        case GGUF_TYPE_INT32:
        case GGUF_TYPE_FLOAT32:
                return 4;
        case GGUF_TYPE_UINT64:
        case GGUF_TYPE_INT64:
        case GGUF_TYPE_FLOAT64:
                return 8;
        default:
                return 0;
        }
}

/* A type's name for messages, also for ids outside the enum. */
static const char *type_name(uint32_t t, char buf[static 16]) {
        const char *s = t < _GGUF_TYPE_MAX ? value_type_table[t] : NULL;
        if (s)
                return s;
        snprintf(buf, 16, "type %" PRIu32, t);
        return buf;
}

typedef struct Parser {
        Reader r;
        uint64_t file_size;
        uint64_t kept; /* bytes of names and strings held in memory so far */
        TpError *err;
} Parser;

static void parser_done(Parser *p) {
        reader_done(&p->r);
}

/* A failed read of @n bytes of @what at @at, as a message. */
static int read_failed(Parser *p, int k, const char *what, uint64_t at, uint64_t n) {
        if (k == -EBADMSG)
                return tp_error(p->err, k,
                                "truncated: %s needs %" PRIu64 " bytes at offset %" PRIu64
                                ", but the file ends at %" PRIu64,
                                what, n, at, p->file_size);
        return tp_error(p->err, k, "reading %s at offset %" PRIu64 ": %s", what, at, strerror(-k));
}

/* A little-endian integer of @n (1, 2, 4 or 8) bytes. */
static int parser_uint(Parser *p, const char *what, unsigned n, uint64_t *ret) {
        uint64_t at = p->r.pos, v = 0;
        uint8_t b[8];

        int k = reader_read(&p->r, b, n);
        if (k < 0)
                return read_failed(p, k, what, at, n);
        for (unsigned i = n; i > 0; i--)
                v = v << 8 | b[i - 1];
        *ret = v;
        return 0;
}

static int parser_u32(Parser *p, const char *what, uint32_t *ret) {
        uint64_t v = 0;
        int k = parser_uint(p, what, 4, &v);
        if (k < 0)
                return k;
        *ret = (uint32_t) v;
        return 0;
}

static int parser_u64(Parser *p, const char *what, uint64_t *ret) {
        return parser_uint(p, what, 8, ret);
}

/*
 * A string: u64 length (@field: "<what> length"), at most @cap, then the bytes. With @ret_str, a
 * NUL-terminated copy is kept (and counted against GGUF_KEPT_BYTES_MAX);
 * without, the bytes are skipped.
 */
static int parser_string(Parser *p, const char *what, const char *field, uint64_t cap, char **ret_str,
                         uint64_t *ret_len) {
        uint64_t len = 0;

        int k = parser_u64(p, field, &len);
        if (k < 0)
                return k;
        if (len > cap)
                return tp_error(p->err, -EBADMSG, "%s %" PRIu64 " exceeds the %" PRIu64 "-byte cap", field, len, cap);
        if (len > reader_remaining(&p->r))
                return tp_error(p->err, -EBADMSG,
                                "%s %" PRIu64 " runs past the end of the file (%" PRIu64
                                " bytes left at offset %" PRIu64 ")",
                                field, len, reader_remaining(&p->r), p->r.pos);
        if (!ret_str)
                return reader_skip(&p->r, len); /* cannot fail: checked above */

        if (len + 1 > GGUF_KEPT_BYTES_MAX - p->kept)
                return tp_error(p->err, -EBADMSG,
                                "%s of %" PRIu64
                                " bytes would take the names and strings kept in memory past the %u-byte cap",
                                what, len, GGUF_KEPT_BYTES_MAX);
        _cleanup_free_ char *s = malloc(len + 1);
        if (!s)
                return tp_error(p->err, -ENOMEM, "%s: cannot allocate %" PRIu64 " bytes", what, len + 1);
        uint64_t at = p->r.pos;
        k = reader_read(&p->r, s, len);
        if (k < 0)
                return read_failed(p, k, what, at, len);
        s[len] = '\0';
        p->kept += len + 1;
        *ret_str = TAKE_PTR(s);
        if (ret_len)
                *ret_len = len;
        return 0;
}

/* A key or tensor name: kept, and without NUL bytes, so that C string compares see all of it. */
static int parser_name(Parser *p, const char *what, const char *field, uint64_t cap, char **ret) {
        _cleanup_free_ char *s = NULL;
        uint64_t len = 0;

        int k = parser_string(p, what, field, cap, &s, &len);
        if (k < 0)
                return k;
        if (strlen(s) != len)
                return tp_error(p->err, -EBADMSG, "%s holds a NUL byte at position %zu", what, strlen(s));
        *ret = TAKE_PTR(s);
        return 0;
}

/*
 * The elements of an array (its type and count already read) at nesting
 * level @depth (1 = the outermost array): validated and skipped.
 */
static int parse_array(Parser *p, uint32_t type, uint64_t count, unsigned depth) {
        char tb[16];
        uint64_t min;

        if (type >= _GGUF_TYPE_MAX)
                return tp_error(p->err, -EBADMSG, "unknown array element type %" PRIu32, type);
        if (count > GGUF_ARRAY_COUNT_MAX)
                return tp_error(p->err, -EBADMSG, "array of %" PRIu64 " elements exceeds the %u-element cap", count,
                                GGUF_ARRAY_COUNT_MAX);
        if (type == GGUF_TYPE_ARRAY && depth >= GGUF_ARRAY_DEPTH_MAX)
                return tp_error(p->err, -EBADMSG, "arrays nested more than %u levels deep", GGUF_ARRAY_DEPTH_MAX);

        min = type == GGUF_TYPE_STRING ? 8 : type == GGUF_TYPE_ARRAY ? ARRAY_HEADER_BYTES : gguf_value_type_size(type);
        if (count > reader_remaining(&p->r) / min)
                return tp_error(p->err, -EBADMSG,
                                "array of %" PRIu64 " %s elements needs at least %" PRIu64
                                " bytes each, but only %" PRIu64 " bytes are left at offset %" PRIu64,
                                count, type_name(type, tb), min, reader_remaining(&p->r), p->r.pos);

        if (type != GGUF_TYPE_STRING && type != GGUF_TYPE_ARRAY)
                return reader_skip(&p->r, count * min); /* cannot fail: checked above */

        for (uint64_t i = 0; i < count; i++) {
                uint64_t at = p->r.pos;
                int k;

                if (type == GGUF_TYPE_STRING)
                        k = parser_string(p, "string", "string length", GGUF_STRING_LEN_MAX, NULL, NULL);
                else {
                        uint32_t inner_type = 0;
                        uint64_t inner_count = 0;

                        k = parser_u32(p, "array element type", &inner_type);
                        if (k >= 0)
                                k = parser_u64(p, "array element count", &inner_count);
                        if (k >= 0)
                                k = parse_array(p, inner_type, inner_count, depth + 1);
                }
                if (k < 0)
                        return tp_error_prefix(p->err, k, "element %" PRIu64 " at offset %" PRIu64, i, at);
        }
        return 0;
}

static int parse_value(Parser *p, GgufKv *kv) {
        uint64_t v = 0;
        int k;

        switch (kv->type) {
        case GGUF_TYPE_STRING:
                return parser_string(p, "string value", "string value length", GGUF_STRING_LEN_MAX, &kv->str,
                                     &kv->str_len);

        case GGUF_TYPE_ARRAY:
                k = parser_u32(p, "array element type", &kv->array_type);
                if (k >= 0)
                        k = parser_u64(p, "array element count", &kv->array_count);
                if (k < 0)
                        return k;
                kv->array_offset = p->r.pos;
                return parse_array(p, kv->array_type, kv->array_count, 1);

        default:
                if (gguf_value_type_size(kv->type) == 0)
                        return tp_error(p->err, -EBADMSG, "unknown value type %" PRIu32, kv->type);
                k = parser_uint(p, "value", gguf_value_type_size(kv->type), &v);
                if (k < 0)
                        return k;
                break;
        }

        switch (kv->type) {
        case GGUF_TYPE_INT8:
                kv->v.i = (int8_t) v;
                break;
        case GGUF_TYPE_INT16:
                kv->v.i = (int16_t) v;
                break;
        case GGUF_TYPE_INT32:
                kv->v.i = (int32_t) v;
                break;
        case GGUF_TYPE_INT64:
                kv->v.i = (int64_t) v;
                break;
        case GGUF_TYPE_FLOAT32: {
                uint32_t bits = (uint32_t) v;
                float f;
                memcpy(&f, &bits, sizeof(f));
                kv->v.f = f;
                break;
        }
        case GGUF_TYPE_FLOAT64:
                memcpy(&kv->v.f, &v, sizeof(v));
                break;
        case GGUF_TYPE_BOOL:
                kv->v.b = v != 0;
                break;
        default:
                kv->v.u = v;
                break;
        }
        return 0;
}

static int parse_kv(Parser *p, GgufKv *kv) {
        int k = parser_name(p, "key", "key length", GGUF_KEY_LEN_MAX, &kv->key);
        if (k < 0)
                return k;
        if (!kv->key[0])
                return tp_error(p->err, -EBADMSG, "key is empty");
        k = parser_u32(p, "value type", &kv->type);
        if (k < 0)
                return k;
        return parse_value(p, kv);
}

static int parse_tensor_info(Parser *p, uint32_t alignment, GgufTensor *t) {
        uint64_t n_elements = 1;
        const GgmlType *gt;

        int k = parser_name(p, "tensor name", "tensor name length", GGUF_TENSOR_NAME_LEN_MAX, &t->name);
        if (k < 0)
                return k;
        k = parser_u32(p, "n_dims", &t->n_dims);
        if (k < 0)
                return k;
        if (t->n_dims < 1 || t->n_dims > 4)
                return tp_error(p->err, -EBADMSG, "n_dims %" PRIu32 " is not in 1..4", t->n_dims);
        for (unsigned j = 0; j < 4; j++) {
                t->ne[j] = 1;
                if (j < t->n_dims) {
                        char field[8];
                        snprintf(field, sizeof(field), "ne[%u]", j);
                        k = parser_u64(p, field, &t->ne[j]);
                        if (k < 0)
                                return k;
                }
                if (t->ne[j] > INT64_MAX)
                        return tp_error(p->err, -EBADMSG, "ne[%u] = %" PRIu64 " exceeds ggml's int64 range", j,
                                        t->ne[j]);
                if (__builtin_mul_overflow(n_elements, t->ne[j], &n_elements) || n_elements > INT64_MAX)
                        return tp_error(p->err, -EBADMSG,
                                        "the element count overflows ggml's int64 range at ne[%u] = %" PRIu64, j,
                                        t->ne[j]);
        }

        k = parser_u32(p, "ggml type", &t->type);
        if (k < 0)
                return k;
        gt = ggml_type(t->type);
        if (!gt)
                return tp_error(p->err, -EBADMSG, "unknown or removed ggml type %" PRIu32, t->type);
        if (t->ne[0] % gt->block_size != 0)
                return tp_error(p->err, -EBADMSG, "ne[0] = %" PRIu64 " is not a multiple of the %s block size %" PRIu32,
                                t->ne[0], gt->name, gt->block_size);
        k = ggml_tensor_bytes(t->type, n_elements, &t->size);
        if (k < 0)
                return tp_error(p->err, -EBADMSG, "%" PRIu64 " elements of %s: the size in bytes overflows", n_elements,
                                gt->name);

        k = parser_u64(p, "rel_offset", &t->rel_offset);
        if (k < 0)
                return k;
        if (t->rel_offset % alignment != 0)
                return tp_error(p->err, -EBADMSG, "rel_offset %" PRIu64 " is not a multiple of the alignment %" PRIu32,
                                t->rel_offset, alignment);
        return 0;
}

static int parse_magic(Parser *p) {
        char qb[QUOTE_BUF];
        uint8_t magic[4];

        if (p->file_size < sizeof(magic))
                return tp_error(p->err, -EBADMSG, "not a GGUF file (%" PRIu64 " bytes, shorter than the magic)",
                                p->file_size);
        int k = reader_read(&p->r, magic, sizeof(magic));
        if (k < 0)
                return read_failed(p, k, "magic", 0, sizeof(magic));
        if (memcmp(magic, GGUF_MAGIC, sizeof(magic)) != 0) {
                char m[5] = {0};
                for (unsigned i = 0; i < 4; i++)
                        m[i] = magic[i] ? (char) magic[i] : '.';
                return tp_error(p->err, -EBADMSG, "not a GGUF file (magic '%s', expected '" GGUF_MAGIC "')",
                                quote(m, qb));
        }
        return 0;
}

static int parse_header(Parser *p, Gguf *g) {
        uint64_t left;

        int k = parser_u32(p, "version", &g->version);
        if (k < 0)
                return k;
        if (g->version == 1)
                return tp_error(p->err, -EBADMSG,
                                "GGUF version 1 is not supported (32-bit counts): convert the model again with a "
                                "current llama.cpp");
        if (g->version != 0 && (g->version & 0xffff) == 0)
                return tp_error(p->err, -EBADMSG,
                                "GGUF version 0x%08" PRIx32
                                " looks byte-swapped: big-endian GGUF files are not supported",
                                g->version);
        if (g->version != 2 && g->version != 3)
                return tp_error(p->err, -EBADMSG, "GGUF version %" PRIu32 " is not supported (only 2 and 3)",
                                g->version);

        k = parser_u64(p, "tensor count", &g->n_tensors);
        if (k >= 0)
                k = parser_u64(p, "key/value count", &g->n_kv);
        if (k < 0)
                return k;
        if (g->n_tensors > GGUF_TENSORS_MAX)
                return tp_error(p->err, -EBADMSG, "tensor count %" PRIu64 " exceeds the %u-tensor cap", g->n_tensors,
                                GGUF_TENSORS_MAX);
        if (g->n_kv > GGUF_KV_MAX)
                return tp_error(p->err, -EBADMSG, "key/value count %" PRIu64 " exceeds the %u-key cap", g->n_kv,
                                GGUF_KV_MAX);

        /* Both counts are capped, so these products cannot overflow. */
        left = reader_remaining(&p->r);
        if (g->n_kv * KV_MIN_BYTES > left)
                return tp_error(p->err, -EBADMSG,
                                "%" PRIu64 " key/value records need at least %" PRIu64 " bytes, but only %" PRIu64
                                " follow the header",
                                g->n_kv, g->n_kv * KV_MIN_BYTES, left);
        left -= g->n_kv * KV_MIN_BYTES;
        if (g->n_tensors * TENSOR_MIN_BYTES > left)
                return tp_error(p->err, -EBADMSG,
                                "%" PRIu64 " tensor-info records need at least %" PRIu64 " bytes, but only %" PRIu64
                                " are left after the smallest possible %" PRIu64 " key/value records",
                                g->n_tensors, g->n_tensors * TENSOR_MIN_BYTES, left, g->n_kv);
        return 0;
}

static int kv_compare(const void *a, const void *b) {
        const GgufKv *x = *(const GgufKv *const *) a, *y = *(const GgufKv *const *) b;
        int c = strcmp(x->key, y->key);
        return c ? c : (x > y) - (x < y);
}

static int tensor_name_compare(const void *a, const void *b) {
        const GgufTensor *x = *(const GgufTensor *const *) a, *y = *(const GgufTensor *const *) b;
        int c = strcmp(x->name, y->name);
        return c ? c : (x > y) - (x < y);
}

/* By offset; at one offset the smaller first, so an empty tensor never "overlaps" its neighbour. */
static int tensor_offset_compare(const void *a, const void *b) {
        const GgufTensor *x = *(const GgufTensor *const *) a, *y = *(const GgufTensor *const *) b;
        if (x->offset != y->offset)
                return x->offset < y->offset ? -1 : 1;
        if (x->size != y->size)
                return x->size < y->size ? -1 : 1;
        return (x > y) - (x < y);
}

/* @n elements from @base of @size bytes each, as pointers sorted with @cmp. */
static int sorted_pointers(const void *base, size_t n, size_t size, int (*cmp)(const void *, const void *),
                           TpError *err, const void ***ret) {
        const void **v = calloc(n ? n : 1, sizeof(*v));
        if (!v)
                return tp_error(err, -ENOMEM, "cannot allocate an index of %zu entries", n);
        for (size_t i = 0; i < n; i++)
                v[i] = (const uint8_t *) base + i * size;
        if (n > 1)
                qsort(v, n, sizeof(*v), cmp);
        *ret = v;
        return 0;
}

static int check_duplicate_keys(const Gguf *g, TpError *err) {
        _cleanup_free_ const void **v = NULL;
        char qb[QUOTE_BUF];

        int k = sorted_pointers(g->kv, g->n_kv, sizeof(GgufKv), kv_compare, err, &v);
        if (k < 0)
                return k;
        for (size_t i = 1; i < g->n_kv; i++) {
                const GgufKv *a = v[i - 1], *b = v[i];
                if (strcmp(a->key, b->key) == 0)
                        return tp_error(err, -EBADMSG,
                                        "duplicate key '%s': #%td at offset %" PRIu64 " and #%td at offset %" PRIu64,
                                        quote(a->key, qb), a - g->kv, a->offset, b - g->kv, b->offset);
        }
        return 0;
}

static int check_duplicate_tensors(const Gguf *g, TpError *err) {
        _cleanup_free_ const void **v = NULL;
        char qb[QUOTE_BUF];

        int k = sorted_pointers(g->tensors, g->n_tensors, sizeof(GgufTensor), tensor_name_compare, err, &v);
        if (k < 0)
                return k;
        for (size_t i = 1; i < g->n_tensors; i++) {
                const GgufTensor *a = v[i - 1], *b = v[i];
                if (strcmp(a->name, b->name) == 0)
                        return tp_error(
                                err, -EBADMSG,
                                "duplicate tensor name '%s': #%td at offset %" PRIu64 " and #%td at offset %" PRIu64,
                                quote(a->name, qb), a - g->tensors, a->info_offset, b - g->tensors, b->info_offset);
        }
        return 0;
}

static int set_alignment(Gguf *g, TpError *err) {
        const GgufKv *a = gguf_find(g, GGUF_KEY_ALIGNMENT);
        char tb[16];

        g->alignment = GGUF_DEFAULT_ALIGNMENT;
        if (!a)
                return 0;
        if (a->type != GGUF_TYPE_UINT32)
                return tp_error(err, -EBADMSG,
                                "key #%td '" GGUF_KEY_ALIGNMENT "' at offset %" PRIu64 ": must be a uint32, not %s",
                                a - g->kv, a->offset, type_name(a->type, tb));
        if (a->v.u == 0 || (a->v.u & (a->v.u - 1)) != 0)
                return tp_error(err, -EBADMSG,
                                "key #%td '" GGUF_KEY_ALIGNMENT "' at offset %" PRIu64 ": %" PRIu64
                                " is not a nonzero power of two",
                                a - g->kv, a->offset, a->v.u);
        g->alignment = (uint32_t) a->v.u;
        return 0;
}

/* The three split keys: all or none, each of its type, and values llama-gguf-split can write. */
static int set_split(Gguf *g, TpError *err) {
        static const struct {
                const char *key;
                uint32_t type;
                const char *as;
        } keys[3] = {
                {GGUF_KEY_SPLIT_NO, GGUF_TYPE_UINT16, "a uint16"},
                {GGUF_KEY_SPLIT_COUNT, GGUF_TYPE_UINT16, "a uint16"},
                {GGUF_KEY_SPLIT_TENSORS_COUNT, GGUF_TYPE_INT32, "an int32"},
        };
        const GgufKv *kv[3];
        unsigned n = 0, have = 0, lack = 0;
        char tb[16];

        for (unsigned i = 0; i < 3; i++) {
                kv[i] = gguf_find(g, keys[i].key);
                if (!kv[i]) {
                        lack = i;
                        continue;
                }
                n++;
                have = i;
                if (kv[i]->type != keys[i].type)
                        return tp_error(err, -EBADMSG, "key #%td '%s' at offset %" PRIu64 ": must be %s, not %s",
                                        kv[i] - g->kv, keys[i].key, kv[i]->offset, keys[i].as,
                                        type_name(kv[i]->type, tb));
        }
        if (n == 0)
                return 0;
        if (n < 3)
                return tp_error(err, -EBADMSG,
                                "key #%td '%s' at offset %" PRIu64
                                ": a split GGUF's shard holds all of '" GGUF_KEY_SPLIT_NO "', '" GGUF_KEY_SPLIT_COUNT
                                "' and '" GGUF_KEY_SPLIT_TENSORS_COUNT "', but '%s' is missing",
                                kv[have] - g->kv, keys[have].key, kv[have]->offset, keys[lack].key);

        const GgufKv *no = kv[0], *count = kv[1], *total = kv[2];
        if (count->v.u == 0)
                return tp_error(err, -EBADMSG, "key #%td '" GGUF_KEY_SPLIT_COUNT "' at offset %" PRIu64 ": 0 shards",
                                count - g->kv, count->offset);
        if (no->v.u >= count->v.u)
                return tp_error(err, -EBADMSG,
                                "key #%td '" GGUF_KEY_SPLIT_NO "' at offset %" PRIu64 ": shard %" PRIu64
                                " is not below '" GGUF_KEY_SPLIT_COUNT "' %" PRIu64 " (shards count from 0)",
                                no - g->kv, no->offset, no->v.u, count->v.u);
        if (total->v.i < 0)
                return tp_error(err, -EBADMSG,
                                "key #%td '" GGUF_KEY_SPLIT_TENSORS_COUNT "' at offset %" PRIu64 ": %" PRId64
                                " is negative",
                                total - g->kv, total->offset, total->v.i);
        if ((uint64_t) total->v.i < g->n_tensors)
                return tp_error(err, -EBADMSG,
                                "key #%td '" GGUF_KEY_SPLIT_TENSORS_COUNT "' at offset %" PRIu64 ": %" PRId64
                                " tensors in all shards, but this shard alone holds %" PRIu64,
                                total - g->kv, total->offset, total->v.i, g->n_tensors);
        g->split.present = true;
        g->split.no = (uint16_t) no->v.u;
        g->split.count = (uint16_t) count->v.u;
        g->split.tensors_count = (int32_t) total->v.i;
        return 0;
}

/* Place every tensor in the file: inside it, and not overlapping another. */
static int place_tensors(Gguf *g, TpError *err) {
        _cleanup_free_ const void **v = NULL;
        char qa[QUOTE_BUF], qb[QUOTE_BUF];
        uint64_t room = g->file_size - g->data_offset;

        for (uint64_t i = 0; i < g->n_tensors; i++) {
                GgufTensor *t = &g->tensors[i];
                if (t->rel_offset > room)
                        return tp_error(err, -EBADMSG,
                                        "tensor '%s' (#%" PRIu64 "): rel_offset %" PRIu64
                                        " is past the end of the file (data section [%" PRIu64 ", %" PRIu64 "))",
                                        quote(t->name, qa), i, t->rel_offset, g->data_offset, g->file_size);
                t->offset = g->data_offset + t->rel_offset;
                if (t->size > room - t->rel_offset)
                        return tp_error(err, -EBADMSG,
                                        "tensor '%s' (#%" PRIu64 "): data [offset %" PRIu64 ", +%" PRIu64
                                        ") runs past the end of the file (size %" PRIu64 ")",
                                        quote(t->name, qa), i, t->offset, t->size, g->file_size);
        }

        int k = sorted_pointers(g->tensors, g->n_tensors, sizeof(GgufTensor), tensor_offset_compare, err, &v);
        if (k < 0)
                return k;
        /* Sorted by offset, and stopping at the first overlap, the previous tensor reaches furthest. */
        const GgufTensor *last = NULL;
        for (size_t i = 0; i < g->n_tensors; i++) {
                const GgufTensor *t = v[i];
                if (last && t->offset < last->offset + last->size)
                        return tp_error(err, -EBADMSG,
                                        "tensor '%s' (#%td): data [offset %" PRIu64 ", +%" PRIu64
                                        ") overlaps tensor '%s' (#%td) [offset %" PRIu64 ", +%" PRIu64 ")",
                                        quote(t->name, qa), t - g->tensors, t->offset, t->size, quote(last->name, qb),
                                        last - g->tensors, last->offset, last->size);
                last = t;
        }
        return 0;
}

static Gguf *gguf_new(void) {
        return calloc(1, sizeof(Gguf));
}

int gguf_read(int fd, Gguf **ret, TpError *err) {
        _cleanup_(parser_done) Parser p = {.err = err};
        _cleanup_(gguf_freep) Gguf *g = NULL;
        char qb[QUOTE_BUF];
        uint64_t n;
        int k;

        k = fd_regular_size(fd, &p.file_size, err);
        if (k < 0)
                return k;
        k = reader_init(&p.r, fd, 0, p.file_size);
        if (k < 0)
                return tp_error(err, k, "cannot set up the reader: %s", strerror(-k));

        g = gguf_new();
        if (!g)
                return tp_error(err, -ENOMEM, "out of memory");
        g->file_size = p.file_size;

        k = parse_magic(&p);
        if (k < 0)
                return k;
        k = parse_header(&p, g);
        if (k < 0)
                return tp_error_prefix(err, k, "header");

        /* Counts are capped and checked against the file size: these allocations are bounded. */
        n = g->n_kv;
        g->n_kv = 0;
        g->kv = calloc(n ? n : 1, sizeof(GgufKv));
        if (!g->kv)
                return tp_error(err, -ENOMEM, "cannot allocate %" PRIu64 " key/value records", n);
        g->n_kv = n;
        for (uint64_t i = 0; i < g->n_kv; i++) {
                GgufKv *kv = &g->kv[i];
                kv->offset = p.r.pos;
                k = parse_kv(&p, kv);
                if (k < 0) {
                        if (kv->key && kv->key[0])
                                return tp_error_prefix(err, k, "key #%" PRIu64 " '%s' at offset %" PRIu64, i,
                                                       quote(kv->key, qb), kv->offset);
                        return tp_error_prefix(err, k, "key #%" PRIu64 " at offset %" PRIu64, i, kv->offset);
                }
        }
        k = check_duplicate_keys(g, err);
        if (k < 0)
                return k;
        k = set_alignment(g, err);
        if (k >= 0)
                k = set_split(g, err);
        if (k < 0)
                return k;

        n = g->n_tensors;
        g->n_tensors = 0;
        g->tensors = calloc(n ? n : 1, sizeof(GgufTensor));
        if (!g->tensors)
                return tp_error(err, -ENOMEM, "cannot allocate %" PRIu64 " tensor-info records", n);
        g->n_tensors = n;
        for (uint64_t i = 0; i < g->n_tensors; i++) {
                GgufTensor *t = &g->tensors[i];
                t->info_offset = p.r.pos;
                k = parse_tensor_info(&p, g->alignment, t);
                if (k < 0) {
                        if (t->name && t->name[0])
                                return tp_error_prefix(err, k, "tensor '%s' (#%" PRIu64 ") at offset %" PRIu64,
                                                       quote(t->name, qb), i, t->info_offset);
                        return tp_error_prefix(err, k, "tensor #%" PRIu64 " at offset %" PRIu64, i, t->info_offset);
                }
        }
        k = check_duplicate_tensors(g, err);
        if (k < 0)
                return k;

        /* pos <= file_size < 2^63 and alignment <= 2^31: no overflow. */
        g->data_offset = (p.r.pos + g->alignment - 1) & ~((uint64_t) g->alignment - 1);
        if (g->data_offset > g->file_size) {
                if (g->n_tensors > 0)
                        return tp_error(err, -EBADMSG,
                                        "the tensor-info table ends at offset %" PRIu64
                                        "; the data section, aligned to %" PRIu32 ", would start at %" PRIu64
                                        ", past the end of the file (size %" PRIu64 ")",
                                        p.r.pos, g->alignment, g->data_offset, g->file_size);
                g->data_offset = g->file_size;
        }
        k = place_tensors(g, err);
        if (k < 0)
                return k;

        *ret = TAKE_PTR(g);
        return 0;
}

Gguf *gguf_free(Gguf *g) {
        if (!g)
                return NULL;
        for (uint64_t i = 0; g->kv && i < g->n_kv; i++) {
                free(g->kv[i].key);
                free(g->kv[i].str);
        }
        for (uint64_t i = 0; g->tensors && i < g->n_tensors; i++)
                free(g->tensors[i].name);
        free(g->kv);
        free(g->tensors);
        free(g);
        return NULL;
}

const GgufKv *gguf_find(const Gguf *g, const char *key) {
        if (!g || !key)
                return NULL;
        for (uint64_t i = 0; i < g->n_kv; i++)
                if (g->kv[i].key && strcmp(g->kv[i].key, key) == 0)
                        return &g->kv[i];
        return NULL;
}

const char *gguf_find_string(const Gguf *g, const char *key) {
        const GgufKv *kv = gguf_find(g, key);
        return kv && kv->type == GGUF_TYPE_STRING ? kv->str : NULL;
}

const GgufTensor *gguf_find_tensor(const Gguf *g, const char *name) {
        if (!g || !name)
                return NULL;
        for (uint64_t i = 0; i < g->n_tensors; i++)
                if (g->tensors[i].name && strcmp(g->tensors[i].name, name) == 0)
                        return &g->tensors[i];
        return NULL;
}
