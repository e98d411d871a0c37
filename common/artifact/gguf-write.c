/* SPDX-License-Identifier: MIT */

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "fileio.h"
#include "ggml.h"
#include "gguf-write.h"
#include "reader.h"

#define OUT_BUFFER_SIZE (1u << 20)

typedef struct WKv {
        char *key;
        uint32_t type;       /* GgufValueType of the record */
        uint32_t array_type; /* GGUF_TYPE_ARRAY: the element type */
        uint64_t count;      /* GGUF_TYPE_ARRAY: elements */
        uint64_t bits;       /* scalars */
        uint8_t *data;       /* a string's bytes, or an array's serialized elements */
        uint64_t data_len;
        int fd;              /* >= 0: the array's elements are data_len bytes at file_offset of fd */
        uint64_t file_offset;
} WKv;

typedef struct WTensor {
        char *name;
        uint32_t n_dims; /* as written: ggml_n_dims */
        uint64_t ne[4];
        uint32_t type;
        uint64_t size, offset;
} WTensor;

struct GgufWriter {
        WKv *kv;
        size_t n_kv, cap_kv;
        WTensor *t;
        size_t n_t, cap_t;

        bool begun;
        uint32_t alignment;
        uint64_t data_offset, file_size;
        AtomicFile f;
        uint8_t *buf;
        size_t buf_len;
        uint64_t pos;        /* bytes emitted so far, buffered or not */
        size_t cur;          /* the tensor being written */
        uint64_t cur_done;   /* its bytes written */
};

static uint64_t pad_to(uint64_t x, uint64_t a) {
        return (x + a - 1) / a * a;
}

int gguf_writer_new(GgufWriter **ret) {
        GgufWriter *w = calloc(1, sizeof(*w));
        if (!w)
                return -ENOMEM;
        w->f = ATOMIC_FILE_NULL;
        w->alignment = GGUF_DEFAULT_ALIGNMENT;
        *ret = w;
        return 0;
}

static void wkv_done(WKv *k) {
        free(k->key);
        free(k->data);
}

GgufWriter *gguf_writer_free(GgufWriter *w) {
        if (!w)
                return NULL;
        for (size_t i = 0; i < w->n_kv; i++)
                wkv_done(&w->kv[i]);
        for (size_t i = 0; i < w->n_t; i++)
                free(w->t[i].name);
        free(w->kv);
        free(w->t);
        free(w->buf);
        atomic_file_abort(&w->f);
        free(w);
        return NULL;
}

int gguf_writer_remove(GgufWriter *w, const char *key) {
        if (w->begun)
                return -EBUSY;
        for (size_t i = 0; i < w->n_kv; i++)
                if (strcmp(w->kv[i].key, key) == 0) {
                        wkv_done(&w->kv[i]);
                        memmove(&w->kv[i], &w->kv[i + 1], (w->n_kv - i - 1) * sizeof(WKv));
                        w->n_kv--;
                        return 1;
                }
        return 0;
}

/* Remove @key, then append a record for it; the caller fills in the value. */
static int append_kv(GgufWriter *w, const char *key, uint32_t type, WKv **ret) {
        if (w->begun)
                return -EBUSY;
        if (!key || !key[0])
                return -EINVAL;
        if (w->n_kv >= GGUF_KV_MAX)
                return -E2BIG;
        (void) gguf_writer_remove(w, key);
        if (w->n_kv == w->cap_kv) {
                size_t cap = w->cap_kv ? w->cap_kv * 2 : 32;
                WKv *kv = realloc(w->kv, cap * sizeof(*kv));
                if (!kv)
                        return -ENOMEM;
                w->kv = kv;
                w->cap_kv = cap;
        }
        char *k = strdup(key);
        if (!k)
                return -ENOMEM;
        w->kv[w->n_kv] = (WKv) { .key = k, .type = type, .fd = -1 };
        *ret = &w->kv[w->n_kv++];
        return 0;
}

int gguf_writer_set_scalar(GgufWriter *w, const char *key, GgufValueType type, uint64_t bits) {
        WKv *k;
        if (gguf_value_type_size(type) == 0)
                return -EINVAL;
        int r = append_kv(w, key, type, &k);
        if (r < 0)
                return r;
        k->bits = type == GGUF_TYPE_BOOL ? bits != 0 : bits;
        return 0;
}

int gguf_writer_set_u32(GgufWriter *w, const char *key, uint32_t v) {
        return gguf_writer_set_scalar(w, key, GGUF_TYPE_UINT32, v);
}

int gguf_writer_set_f32(GgufWriter *w, const char *key, float v) {
        uint32_t bits;
        memcpy(&bits, &v, sizeof(bits));
        return gguf_writer_set_scalar(w, key, GGUF_TYPE_FLOAT32, bits);
}

/* A record owning a copy of @n bytes at @p. */
static int set_bytes(GgufWriter *w, const char *key, uint32_t type, uint32_t array_type, uint64_t count,
                     const void *p, size_t n) {
        _cleanup_free_ uint8_t *copy = malloc(n ? n : 1);
        WKv *k;

        if (!copy)
                return -ENOMEM;
        if (n)
                memcpy(copy, p, n);
        int r = append_kv(w, key, type, &k);
        if (r < 0)
                return r;
        k->array_type = array_type;
        k->count = count;
        k->data = TAKE_PTR(copy);
        k->data_len = n;
        return 0;
}

int gguf_writer_set_string(GgufWriter *w, const char *key, const char *s, size_t len) {
        return set_bytes(w, key, GGUF_TYPE_STRING, 0, 0, s, len);
}

int gguf_writer_set_array(GgufWriter *w, const char *key, GgufValueType type, const void *data, uint64_t count) {
        unsigned size = gguf_value_type_size(type);
        size_t n;

        if (size == 0)
                return -EINVAL;
        if (__builtin_mul_overflow(count, size, &n))
                return -EOVERFLOW;
        int r = set_bytes(w, key, GGUF_TYPE_ARRAY, type, count, data, n);
        if (r < 0 || type != GGUF_TYPE_BOOL)
                return r;
        WKv *k = &w->kv[w->n_kv - 1];
        for (size_t i = 0; i < n; i++)
                k->data[i] = k->data[i] != 0;
        return 0;
}

int gguf_writer_set_string_array(GgufWriter *w, const char *key, const char *const *strs, uint64_t count) {
        size_t n = 0, o = 0;

        for (uint64_t i = 0; i < count; i++)
                if (__builtin_add_overflow(n, 8 + strlen(strs[i]), &n))
                        return -EOVERFLOW;
        _cleanup_free_ uint8_t *p = malloc(n ? n : 1);
        if (!p)
                return -ENOMEM;
        for (uint64_t i = 0; i < count; i++) {
                uint64_t len = strlen(strs[i]);
                for (unsigned b = 0; b < 8; b++)
                        p[o + b] = (uint8_t) (len >> (8 * b));
                memcpy(p + o + 8, strs[i], len);
                o += 8 + len;
        }
        return set_bytes(w, key, GGUF_TYPE_ARRAY, GGUF_TYPE_STRING, count, p, n);
}

/* Bytes of the elements of the array @kv of the file on @fd: strings are walked. */
static int array_bytes(int fd, const GgufKv *kv, uint64_t *ret, TpError *err) {
        struct stat st;

        if (kv->array_type != GGUF_TYPE_STRING) {
                *ret = kv->array_count * gguf_value_type_size(kv->array_type); /* the reader checked it fits the file */
                return 0;
        }
        if (fstat(fd, &st) < 0) {
                int r = negative_errno();
                return tp_error(err, r, "key '%s': fstat: %s", kv->key, strerror(-r));
        }
        _cleanup_(reader_done) Reader r = {};
        int k = reader_init(&r, fd, kv->array_offset, (uint64_t) st.st_size);
        for (uint64_t i = 0; k >= 0 && i < kv->array_count; i++) {
                uint64_t len;
                k = reader_u64le(&r, &len);
                if (k >= 0)
                        k = len > reader_remaining(&r) ? -EBADMSG : reader_skip(&r, len);
        }
        if (k < 0)
                return tp_error(err, k, "key '%s': reading its strings at offset %" PRIu64 ": %s", kv->key,
                                kv->array_offset, strerror(-k));
        *ret = r.pos - kv->array_offset;
        return 0;
}

int gguf_writer_copy_kv(GgufWriter *w, int fd, const GgufKv *kv, TpError *err) {
        uint64_t n = 0;
        WKv *k;
        int r;

        switch (kv->type) {
        case GGUF_TYPE_STRING:
                r = gguf_writer_set_string(w, kv->key, kv->str, kv->str_len);
                break;
        case GGUF_TYPE_ARRAY:
                if (kv->array_type == GGUF_TYPE_ARRAY)
                        return tp_error(err, -EOPNOTSUPP,
                                        "key '%s' holds an array of arrays, which llama.cpp cannot read or write",
                                        kv->key);
                r = array_bytes(fd, kv, &n, err);
                if (r < 0)
                        return r;
                r = append_kv(w, kv->key, GGUF_TYPE_ARRAY, &k);
                if (r >= 0) {
                        k->array_type = kv->array_type;
                        k->count = kv->array_count;
                        k->fd = fd;
                        k->file_offset = kv->array_offset;
                        k->data_len = n;
                }
                break;
        case GGUF_TYPE_FLOAT32: {
                float f = (float) kv->v.f;
                uint32_t bits;
                memcpy(&bits, &f, sizeof(bits));
                r = gguf_writer_set_scalar(w, kv->key, GGUF_TYPE_FLOAT32, bits);
                break;
        }
        case GGUF_TYPE_FLOAT64: {
                uint64_t bits;
                memcpy(&bits, &kv->v.f, sizeof(bits));
                r = gguf_writer_set_scalar(w, kv->key, GGUF_TYPE_FLOAT64, bits);
                break;
        }
        case GGUF_TYPE_BOOL:
                r = gguf_writer_set_scalar(w, kv->key, GGUF_TYPE_BOOL, kv->v.b);
                break;
        default: /* integers: u holds the bits, i the sign-extended value; the low bytes are the same */
                r = gguf_writer_set_scalar(w, kv->key, kv->type, kv->v.u);
                break;
        }
        if (r < 0 && r != -EOPNOTSUPP)
                return tp_error(err, r, "key '%s': %s", kv->key, strerror(-r));
        return r;
}

int gguf_writer_add_tensor(GgufWriter *w, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type) {
        const GgmlType *gt = ggml_type(type);
        uint64_t n = 1, size;
        WTensor t = { .type = type, .ne = { 1, 1, 1, 1 } };

        if (w->begun)
                return -EBUSY;
        if (!name || strlen(name) > GGUF_TENSOR_NAME_LEN_MAX || n_dims < 1 || n_dims > 4 || !gt)
                return -EINVAL;
        if (w->n_t >= GGUF_TENSORS_MAX)
                return -E2BIG;
        for (uint32_t d = 0; d < n_dims; d++) {
                if (ne[d] > INT64_MAX || __builtin_mul_overflow(n, ne[d], &n) || n > INT64_MAX)
                        return -EOVERFLOW;
                t.ne[d] = ne[d];
        }
        if (t.ne[0] % gt->block_size != 0)
                return -EINVAL;
        int r = ggml_tensor_bytes(type, n, &size);
        if (r < 0)
                return r;
        for (size_t i = 0; i < w->n_t; i++)
                if (strcmp(w->t[i].name, name) == 0)
                        return -EEXIST;
        /*
         * ggml_n_dims: the last dimension other than 1, at least one. (ggml counts a 0 like a 1,
         * which would turn an empty [32, 0] into a 128-byte [32]; an empty tensor keeps its 0.)
         */
        t.n_dims = 1;
        for (uint32_t d = 1; d < 4; d++)
                if (t.ne[d] != 1)
                        t.n_dims = d + 1;
        t.size = size;
        if (w->n_t == w->cap_t) {
                size_t cap = w->cap_t ? w->cap_t * 2 : 64;
                WTensor *v = realloc(w->t, cap * sizeof(*v));
                if (!v)
                        return -ENOMEM;
                w->t = v;
                w->cap_t = cap;
        }
        if (!(t.name = strdup(name)))
                return -ENOMEM;
        w->t[w->n_t] = t;
        return (int) w->n_t++;
}

size_t gguf_writer_n_tensors(const GgufWriter *w) {
        return w->n_t;
}

uint64_t gguf_writer_tensor_size(const GgufWriter *w, size_t i) {
        return i < w->n_t ? w->t[i].size : 0;
}

uint64_t gguf_writer_tensor_offset(const GgufWriter *w, size_t i) {
        return i < w->n_t ? w->t[i].offset : 0;
}

uint64_t gguf_writer_data_offset(const GgufWriter *w) {
        return w->data_offset;
}

uint64_t gguf_writer_file_size(const GgufWriter *w) {
        return w->file_size;
}

/* ---- output ---------------------------------------------------------------------------- */

static int out_flush(GgufWriter *w) {
        if (w->buf_len == 0)
                return 0;
        int r = write_full(w->f.fd, w->buf, w->buf_len);
        w->buf_len = 0;
        return r;
}

static int out_bytes(GgufWriter *w, const void *p, size_t n) {
        w->pos += n;
        if (n >= OUT_BUFFER_SIZE) {
                int r = out_flush(w);
                return r < 0 ? r : write_full(w->f.fd, p, n);
        }
        if (w->buf_len + n > OUT_BUFFER_SIZE) {
                int r = out_flush(w);
                if (r < 0)
                        return r;
        }
        memcpy(w->buf + w->buf_len, p, n);
        w->buf_len += n;
        return 0;
}

static int out_uint(GgufWriter *w, uint64_t v, unsigned n) {
        uint8_t b[8];
        for (unsigned i = 0; i < n; i++)
                b[i] = (uint8_t) (v >> (8 * i));
        return out_bytes(w, b, n);
}

static int out_string(GgufWriter *w, const char *s, uint64_t len) {
        int r = out_uint(w, len, 8);
        return r < 0 ? r : out_bytes(w, s, len);
}

static int out_pad(GgufWriter *w) {
        static const uint8_t zeros[256];
        int r = 0;

        while (r >= 0 && w->pos % w->alignment != 0) {
                uint64_t k = w->alignment - w->pos % w->alignment;
                r = out_bytes(w, zeros, k < sizeof(zeros) ? k : sizeof(zeros));
        }
        return r;
}

/* An array's elements from the file they were read from. */
static int out_file_range(GgufWriter *w, const WKv *k, TpError *err) {
        uint8_t chunk[64 * 1024];

        for (uint64_t done = 0; done < k->data_len;) {
                size_t n = k->data_len - done < sizeof(chunk) ? (size_t) (k->data_len - done) : sizeof(chunk);
                int r = pread_full(k->fd, chunk, n, k->file_offset + done);
                if (r < 0)
                        return tp_error(err, r, "key '%s': copying its array at offset %" PRIu64 ": %s", k->key,
                                        k->file_offset + done, strerror(-r));
                if (k->array_type == GGUF_TYPE_BOOL)
                        for (size_t i = 0; i < n; i++)
                                chunk[i] = chunk[i] != 0;
                r = out_bytes(w, chunk, n);
                if (r < 0)
                        return tp_error(err, r, "writing %s: %s", w->f.path, strerror(-r));
                done += n;
        }
        return 0;
}

static int out_kv(GgufWriter *w, const WKv *k, TpError *err) {
        int r = out_string(w, k->key, strlen(k->key));
        if (r >= 0)
                r = out_uint(w, k->type, 4);
        if (r >= 0 && k->type == GGUF_TYPE_ARRAY) {
                r = out_uint(w, k->array_type, 4);
                if (r >= 0)
                        r = out_uint(w, k->count, 8);
        }
        if (r < 0)
                return tp_error(err, r, "writing %s: %s", w->f.path, strerror(-r));
        if (k->fd >= 0)
                return out_file_range(w, k, err);
        if (k->type == GGUF_TYPE_STRING)
                r = out_string(w, (const char *) k->data, k->data_len);
        else if (k->type == GGUF_TYPE_ARRAY)
                r = out_bytes(w, k->data, k->data_len);
        else
                r = out_uint(w, k->bits, gguf_value_type_size(k->type));
        if (r < 0)
                return tp_error(err, r, "writing %s: %s", w->f.path, strerror(-r));
        return 0;
}

/* The header's size and every tensor's offset, from the records alone. */
static int layout(GgufWriter *w, TpError *err) {
        uint64_t n = 24, off = 0;

        for (size_t i = 0; i < w->n_kv; i++) {
                const WKv *k = &w->kv[i];
                if (strcmp(k->key, GGUF_KEY_ALIGNMENT) == 0) {
                        if (k->type != GGUF_TYPE_UINT32 || k->bits == 0 || (k->bits & (k->bits - 1)) != 0)
                                return tp_error(err, -EINVAL,
                                                GGUF_KEY_ALIGNMENT " must be a uint32 power of two");
                        w->alignment = (uint32_t) k->bits;
                }
                n += 8 + strlen(k->key) + 4;
                if (k->type == GGUF_TYPE_ARRAY)
                        n += 12 + k->data_len;
                else if (k->type == GGUF_TYPE_STRING)
                        n += 8 + k->data_len;
                else
                        n += gguf_value_type_size(k->type);
        }
        for (size_t i = 0; i < w->n_t; i++) {
                WTensor *t = &w->t[i];
                n += 8 + strlen(t->name) + 4 + 8 * (uint64_t) t->n_dims + 4 + 8;
                t->offset = off;
                if (__builtin_add_overflow(off, pad_to(t->size, w->alignment), &off))
                        return tp_error(err, -EOVERFLOW, "the tensors' sizes overflow");
        }
        w->data_offset = pad_to(n, w->alignment);
        if (__builtin_add_overflow(w->data_offset, off, &w->file_size))
                return tp_error(err, -EOVERFLOW, "the tensors' sizes overflow");
        return 0;
}

/* Past every finished (or empty) tensor, padding after each. */
static int advance(GgufWriter *w) {
        while (w->cur < w->n_t && w->cur_done == w->t[w->cur].size) {
                int r = out_pad(w);
                if (r < 0)
                        return r;
                w->cur++;
                w->cur_done = 0;
        }
        return 0;
}

int gguf_writer_begin(GgufWriter *w, const char *path, bool no_sync, TpError *err) {
        int r;

        if (w->begun)
                return tp_error(err, -EBUSY, "%s: the header was written already", path);
        r = layout(w, err);
        if (r < 0)
                return r;
        if (!(w->buf = malloc(OUT_BUFFER_SIZE)))
                return tp_error(err, -ENOMEM, "cannot allocate the output buffer");
        r = atomic_file_open(path, &w->f);
        if (r < 0)
                return tp_error(err, r, "%s: %s", path, atomic_file_strerror(r));
        w->f.no_sync = no_sync;
        w->begun = true;

        r = out_bytes(w, GGUF_MAGIC, 4);
        if (r >= 0)
                r = out_uint(w, GGUF_WRITE_VERSION, 4);
        if (r >= 0)
                r = out_uint(w, w->n_t, 8);
        if (r >= 0)
                r = out_uint(w, w->n_kv, 8);
        if (r < 0)
                return tp_error(err, r, "writing %s: %s", path, strerror(-r));
        for (size_t i = 0; i < w->n_kv; i++) {
                r = out_kv(w, &w->kv[i], err);
                if (r < 0)
                        return r;
        }
        for (size_t i = 0; r >= 0 && i < w->n_t; i++) {
                const WTensor *t = &w->t[i];
                r = out_string(w, t->name, strlen(t->name));
                if (r >= 0)
                        r = out_uint(w, t->n_dims, 4);
                for (uint32_t d = 0; r >= 0 && d < t->n_dims; d++)
                        r = out_uint(w, t->ne[d], 8);
                if (r >= 0)
                        r = out_uint(w, t->type, 4);
                if (r >= 0)
                        r = out_uint(w, t->offset, 8);
        }
        if (r >= 0)
                r = out_pad(w);
        if (r >= 0 && w->pos != w->data_offset)
                return tp_error(err, -EIO, "%s: the header took %" PRIu64 " bytes, %" PRIu64 " were computed", path,
                                w->pos, w->data_offset);
        if (r >= 0)
                r = advance(w);
        if (r < 0)
                return tp_error(err, r, "writing %s: %s", path, strerror(-r));
        return 0;
}

int gguf_writer_write(GgufWriter *w, const void *data, size_t n, TpError *err) {
        const uint8_t *p = data;

        if (!w->begun)
                return tp_error(err, -EINVAL, "tensor data before the header");
        while (n > 0) {
                if (w->cur >= w->n_t)
                        return tp_error(err, -EINVAL, "%s: %zu bytes of tensor data beyond the last tensor",
                                        w->f.path, n);
                uint64_t left = w->t[w->cur].size - w->cur_done;
                size_t k = n < left ? n : (size_t) left;
                int r = out_bytes(w, p, k);
                if (r >= 0) {
                        w->cur_done += k;
                        r = advance(w);
                }
                if (r < 0)
                        return tp_error(err, r, "writing %s: %s", w->f.path, strerror(-r));
                p += k;
                n -= k;
        }
        return 0;
}

int gguf_writer_commit(GgufWriter *w, TpError *err) {
        if (!w->begun)
                return tp_error(err, -EINVAL, "nothing to commit: the header was not written");
        if (w->cur < w->n_t)
                return tp_error(err, -EINVAL, "%s: tensor '%s' has %" PRIu64 " of its %" PRIu64 " bytes", w->f.path,
                                w->t[w->cur].name, w->cur_done, w->t[w->cur].size);
        if (w->pos != w->file_size)
                return tp_error(err, -EIO, "%s: wrote %" PRIu64 " bytes, %" PRIu64 " were computed", w->f.path, w->pos,
                                w->file_size);
        int r = out_flush(w);
        if (r < 0)
                return tp_error(err, r, "writing %s: %s", w->f.path, strerror(-r));
        _cleanup_free_ char *path = strdup(w->f.path);
        r = atomic_file_commit(&w->f);
        if (r < 0)
                return tp_error(err, r, "%s: %s", path ? path : "output", strerror(-r));
        return 0;
}
