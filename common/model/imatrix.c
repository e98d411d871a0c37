/* SPDX-License-Identifier: MIT */

#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "fileio.h"
#include "ggml.h"
#include "gguf.h"
#include "imatrix.h"
#include "le.h"
#include "quote.h"
#include "reader.h"

/* The smallest legacy entry: name length, an empty name, ncall, nval, one value. */
#define LEGACY_ENTRY_MIN_BYTES 16u

/* 2^63: a count must stay below it to round into an int64 (llroundf). */
#define COUNT_LIMIT 9223372036854775808.0f

typedef struct Loader {
        Reader r; /* over the whole file */
        uint64_t file_size;
        uint64_t n_floats; /* floats read so far, against IMATRIX_VALUES_TOTAL_MAX */
        TpError *err;
} Loader;

static void loader_done(Loader *l) {
        reader_done(&l->r);
}

static void entry_done(ImatrixEntry *e) {
        free(e->name);
        free(e->values);
        *e = (ImatrixEntry){};
}

Imatrix *imatrix_free(Imatrix *im) {
        if (!im)
                return NULL;
        for (size_t i = 0; im->entries && i < im->n_entries; i++)
                entry_done(&im->entries[i]);
        for (size_t i = 0; im->datasets && i < im->n_datasets; i++)
                free(im->datasets[i]);
        free(im->entries);
        free(im->datasets);
        free(im);
        return NULL;
}

/* @n bytes of @what at the reader's position; a length read from the file was checked before. */
static int loader_read(Loader *l, void *dst, size_t n, const char *what) {
        uint64_t at = l->r.pos;

        if (n > reader_remaining(&l->r))
                return tp_error(l->err, -EBADMSG,
                                "truncated: %s needs %zu bytes at offset %" PRIu64 ", but the file ends at %" PRIu64,
                                what, n, at, l->file_size);
        int k = reader_read(&l->r, dst, n);
        if (k < 0)
                return tp_error(l->err, k, "reading %s at offset %" PRIu64 ": %s", what, at, strerror(-k));
        return 0;
}

static int loader_i32(Loader *l, const char *what, int32_t *ret) {
        uint8_t b[4];
        int k = loader_read(l, b, sizeof(b), what);
        if (k < 0)
                return k;
        *ret = (int32_t) get_le32(b);
        return 0;
}

static int loader_seek(Loader *l, uint64_t at, const char *what) {
        int k = reader_seek(&l->r, at);
        if (k < 0)
                return tp_error(l->err, k, "%s: offset %" PRIu64 " is past the end of the file (%" PRIu64 ")", what, at,
                                l->file_size);
        return 0;
}

/*
 * The next @n little-endian float32 of the file (@what, e.g. "sums"), into a new array:
 * capped per entry and in all, and checked against the bytes left before allocating.
 */
static int loader_floats(Loader *l, uint64_t n, const char *what, float **ret) {
        uint64_t left = reader_remaining(&l->r);

        if (n > IMATRIX_VALUES_MAX)
                return tp_error(l->err, -EBADMSG, "%" PRIu64 " %s exceed the cap of %u values per entry", n, what,
                                IMATRIX_VALUES_MAX);
        if (n * sizeof(float) > left)
                return tp_error(l->err, -EBADMSG,
                                "%" PRIu64 " %s declared need %" PRIu64 " bytes, but %" PRIu64
                                " bytes are left at offset %" PRIu64,
                                n, what, n * sizeof(float), left, l->r.pos);
        if (n > IMATRIX_VALUES_TOTAL_MAX - l->n_floats)
                return tp_error(l->err, -EBADMSG,
                                "%" PRIu64 " %s would take the floats read from the file past the cap of %u", n, what,
                                IMATRIX_VALUES_TOTAL_MAX);

        _cleanup_free_ float *v = malloc(n ? n * sizeof(float) : 1);
        if (!v)
                return tp_error(l->err, -ENOMEM, "cannot allocate %" PRIu64 " %s", n, what);
        int k = loader_read(l, v, n * sizeof(float), what);
        if (k < 0)
                return k;
        for (uint64_t i = 0; i < n; i++) {
                uint32_t bits = get_le32((const uint8_t *) v + 4 * i);
                memcpy(&v[i], &bits, sizeof(bits));
        }
        l->n_floats += n;
        *ret = TAKE_PTR(v);
        return 0;
}

/*
 * Sums of squared activations are finite and not negative. llama.cpp takes any float; we refuse
 * the rest (imatrix.h): the quantizer would weigh its errors by nonsense.
 */
static int check_sums(Loader *l, const char *what, const float *v, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (!isfinite(v[i]) || v[i] < 0)
                        return tp_error(l->err, -EBADMSG,
                                        "%s value %zu is %g: a sum of squares is finite and not negative", what, i,
                                        (double) v[i]);
        return 0;
}

/* ---- the legacy form ------------------------------------------------------------------------ */

static int legacy_name(Loader *l, char **ret) {
        int32_t len = 0;

        int k = loader_i32(l, "name length", &len);
        if (k < 0)
                return k;
        if (len < 0)
                return tp_error(l->err, -EBADMSG, "name length %" PRId32 " is negative", len);
        if ((uint32_t) len > IMATRIX_NAME_LEN_MAX)
                return tp_error(l->err, -EBADMSG, "name length %" PRId32 " exceeds the %u-byte cap", len,
                                IMATRIX_NAME_LEN_MAX);
        if ((uint64_t) len > reader_remaining(&l->r))
                return tp_error(l->err, -EBADMSG,
                                "name length %" PRId32 " runs past the end of the file (%" PRIu64
                                " bytes left at offset %" PRIu64 ")",
                                len, reader_remaining(&l->r), l->r.pos);
        _cleanup_free_ char *s = malloc((size_t) len + 1);
        if (!s)
                return tp_error(l->err, -ENOMEM, "cannot allocate a name of %" PRId32 " bytes", len);
        k = loader_read(l, s, (size_t) len, "name");
        if (k < 0)
                return k;
        s[len] = '\0'; /* the name is what precedes the first NUL, as llama.cpp's std::string{data} */
        *ret = TAKE_PTR(s);
        return 0;
}

static int legacy_values(Loader *l, int32_t ncall, int32_t nval, ImatrixEntry *e) {
        if (nval < 1)
                return tp_error(l->err, -EBADMSG, "nval %" PRId32 ": an entry holds at least 1 value", nval);
        int k = loader_floats(l, (uint64_t) nval, "sums", &e->values);
        if (k < 0)
                return k;
        e->n_values = (size_t) nval;
        e->n_experts = 1;
        k = check_sums(l, "sums", e->values, e->n_values);
        if (k < 0)
                return k;
        /* llama.cpp: sums[i] / ncall with an int64_t ncall, i.e. the count converted to float. */
        if (ncall > 0)
                for (size_t i = 0; i < e->n_values; i++)
                        e->values[i] = e->values[i] / (float) ncall;
        return 0;
}

static int legacy_entry(Loader *l, size_t index, ImatrixEntry *e) {
        uint64_t at = l->r.pos;
        int32_t ncall = 0, nval = 0;
        char qb[QUOTE_BUF];

        int k = legacy_name(l, &e->name);
        if (k < 0)
                return tp_error_prefix(l->err, k, "entry #%zu at offset %" PRIu64, index, at);
        k = loader_i32(l, "ncall", &ncall);
        if (k >= 0)
                k = loader_i32(l, "nval", &nval);
        if (k >= 0)
                k = legacy_values(l, ncall, nval, e);
        if (k < 0)
                return tp_error_prefix(l->err, k, "entry #%zu '%s' at offset %" PRIu64, index, quote(e->name, qb), at);
        return 0;
}

/*
 * The optional trailer, read as llama.cpp's std::istream does (imatrix.h): only problems
 * llama.cpp cannot have (an I/O error, a dataset name over our cap) are errors.
 */
static int legacy_trailer(Loader *l, Imatrix *im) {
        uint8_t b[4] = {};
        uint64_t left = reader_remaining(&l->r);
        int32_t len = 0;

        if (left == 0)
                return 0;
        int k = loader_read(l, b, left < 4 ? left : 4, "chunk count");
        if (k < 0)
                return k;
        im->chunk_count = (int32_t) get_le32(b); /* 1 to 3 bytes: those, the rest zero */
        if (left < 8)
                return 0;
        k = loader_i32(l, "dataset name length", &len);
        if (k < 0)
                return k;
        if (len <= 0 || (uint64_t) len > reader_remaining(&l->r))
                return 0;
        if ((uint32_t) len > IMATRIX_DATASET_LEN_MAX)
                return tp_error(l->err, -EBADMSG, "dataset name length %" PRId32 " exceeds the %u-byte cap", len,
                                IMATRIX_DATASET_LEN_MAX);

        _cleanup_free_ char *s = malloc((size_t) len + 1);
        im->datasets = calloc(1, sizeof(char *));
        if (!s || !im->datasets)
                return tp_error(l->err, -ENOMEM, "cannot allocate a dataset name of %" PRId32 " bytes", len);
        k = loader_read(l, s, (size_t) len, "dataset name");
        if (k < 0)
                return k;
        s[len] = '\0';
        im->datasets[0] = TAKE_PTR(s);
        im->n_datasets = 1;
        return 0;
}

static int legacy_read(Loader *l, Imatrix *im) {
        int32_t n = 0;

        im->legacy = true;
        if (l->file_size < 4)
                return tp_error(l->err, -EBADMSG, "no data: %" PRIu64 " bytes, shorter than the 4-byte entry count",
                                l->file_size);
        int k = loader_i32(l, "entry count", &n);
        if (k < 0)
                return k;
        if (n < 1)
                return tp_error(l->err, -EBADMSG, "no data: entry count %" PRId32 " (at least 1)", n);
        if ((uint32_t) n > IMATRIX_ENTRIES_MAX)
                return tp_error(l->err, -EBADMSG, "entry count %" PRId32 " exceeds the cap of %u", n,
                                IMATRIX_ENTRIES_MAX);
        if ((uint64_t) n > reader_remaining(&l->r) / LEGACY_ENTRY_MIN_BYTES)
                return tp_error(l->err, -EBADMSG,
                                "entry count %" PRId32 ": entries need at least %u bytes each, but only %" PRIu64
                                " bytes are left at offset 4",
                                n, LEGACY_ENTRY_MIN_BYTES, reader_remaining(&l->r));

        im->entries = calloc((size_t) n, sizeof(ImatrixEntry));
        if (!im->entries)
                return tp_error(l->err, -ENOMEM, "cannot allocate %" PRId32 " entries", n);
        im->n_entries = (size_t) n;
        for (size_t i = 0; i < im->n_entries; i++) {
                k = legacy_entry(l, i, &im->entries[i]);
                if (k < 0)
                        return k;
        }
        return legacy_trailer(l, im);
}

/* ---- the GGUF form -------------------------------------------------------------------------- */

/* A tensor named <name>.in_sum2 or <name>.counts. */
typedef struct Half {
        char *name; /* <name> */
        bool counts;
        const GgufTensor *t;
} Half;

typedef struct Halves {
        Half *v;
        size_t n;
} Halves;

static void halves_done(Halves *h) {
        for (size_t i = 0; h->v && i < h->n; i++)
                free(h->v[i].name);
        free(h->v);
}

/* By name, the in_sum2 before the counts. */
static int half_compare(const void *a, const void *b) {
        const Half *x = a, *y = b;
        int c = strcmp(x->name, y->name);
        return c ? c : (int) x->counts - (int) y->counts;
}

static bool has_suffix(const char *s, size_t len, const char *suffix) {
        size_t n = strlen(suffix);
        return len >= n && memcmp(s + len - n, suffix, n) == 0;
}

/* The tensors of @g named with either suffix, sorted (names are unique: no two halves tie). */
static int gguf_halves(const Gguf *g, TpError *err, Halves *h) {
        h->v = calloc(g->n_tensors ? g->n_tensors : 1, sizeof(Half));
        if (!h->v)
                return tp_error(err, -ENOMEM, "cannot allocate %" PRIu64 " tensor records", g->n_tensors);
        for (uint64_t i = 0; i < g->n_tensors; i++) {
                const GgufTensor *t = &g->tensors[i];
                size_t len = strlen(t->name), cut;
                bool counts;

                if (has_suffix(t->name, len, IMATRIX_SUFFIX_SUMS)) {
                        cut = strlen(IMATRIX_SUFFIX_SUMS);
                        counts = false;
                } else if (has_suffix(t->name, len, IMATRIX_SUFFIX_COUNTS)) {
                        cut = strlen(IMATRIX_SUFFIX_COUNTS);
                        counts = true;
                } else
                        continue; /* another tensor, or an empty name: llama.cpp skips it */
                char *name = strndup(t->name, len - cut);
                if (!name)
                        return tp_error(err, -ENOMEM, "out of memory");
                h->v[h->n++] = (Half){.name = name, .counts = counts, .t = t};
        }
        if (h->n > 1)
                qsort(h->v, h->n, sizeof(Half), half_compare);
        return 0;
}

static int require_f32(Loader *l, const GgufTensor *t) {
        char qb[QUOTE_BUF];

        if (t->type != GGML_TYPE_F32)
                return tp_error(l->err, -EBADMSG, "tensor '%s' is %s: sums and counts must be f32", quote(t->name, qb),
                                ggml_type(t->type)->name);
        return 0;
}

/* One expert's count (@j of tensor @t): rounded as llama.cpp does, once refused what cannot be a count. */
static int gguf_count(Loader *l, const GgufTensor *t, size_t j, float c, int64_t *ret) {
        char qb[QUOTE_BUF];

        if (!isfinite(c) || c < 0 || c >= COUNT_LIMIT)
                return tp_error(l->err, -EBADMSG,
                                "tensor '%s': count %zu is %g: a count is finite, not negative and below 2^63",
                                quote(t->name, qb), j, (double) c);
        *ret = llroundf(c);
        return 0;
}

/* The entry of one <name>.in_sum2 and <name>.counts pair, normalized per expert. */
static int gguf_entry(Loader *l, const GgufTensor *sums, const GgufTensor *counts, ImatrixEntry *e) {
        uint64_t nval = sums->size / sizeof(float), ncounts = counts->size / sizeof(float);
        _cleanup_free_ float *c = NULL;
        char qs[QUOTE_BUF], qc[QUOTE_BUF];

        int k = require_f32(l, sums);
        if (k >= 0)
                k = require_f32(l, counts);
        if (k < 0)
                return k;
        if (ncounts == 0)
                return tp_error(l->err, -EBADMSG, "tensor '%s' holds no counts", quote(counts->name, qc));
        if (nval == 0)
                return tp_error(l->err, -EBADMSG, "tensor '%s' holds no values", quote(sums->name, qs));
        if (nval % ncounts != 0)
                return tp_error(l->err, -EBADMSG,
                                "tensor '%s' holds %" PRIu64 " values, not a multiple of the %" PRIu64
                                " counts (one per expert) of '%s'",
                                quote(sums->name, qs), nval, ncounts, quote(counts->name, qc));

        k = loader_seek(l, counts->offset, counts->name);
        if (k >= 0)
                k = loader_floats(l, ncounts, "counts", &c);
        if (k >= 0)
                k = loader_seek(l, sums->offset, sums->name);
        if (k >= 0)
                k = loader_floats(l, nval, "in_sum2 values", &e->values);
        if (k < 0)
                return k;
        e->n_values = (size_t) nval;
        e->n_experts = (uint32_t) ncounts; /* <= nval <= IMATRIX_VALUES_MAX */
        k = check_sums(l, sums->name, e->values, e->n_values);
        if (k < 0)
                return k;

        size_t ne0 = (size_t) (nval / ncounts);
        for (size_t j = 0; j < ncounts; j++) {
                int64_t rounded = 0;
                k = gguf_count(l, counts, j, c[j], &rounded);
                if (k < 0)
                        return k;
                /* llama-quantize: a float count; an expert never counted gets ones. */
                float count = (float) rounded;
                float *v = e->values + j * ne0;
                for (size_t i = 0; i < ne0; i++)
                        v[i] = count > 0.0f ? v[i] / count : 1.0f;
        }
        return 0;
}

static int gguf_entries(Loader *l, const Gguf *g, Imatrix *im) {
        _cleanup_(halves_done) Halves h = {};
        char qa[QUOTE_BUF], qb[QUOTE_BUF];

        int k = gguf_halves(g, l->err, &h);
        if (k < 0)
                return k;
        if (h.n == 0)
                return tp_error(l->err, -EBADMSG,
                                "no imatrix entries: none of the %" PRIu64
                                " tensors is named '<name>" IMATRIX_SUFFIX_SUMS "' or '<name>" IMATRIX_SUFFIX_COUNTS
                                "'",
                                g->n_tensors);
        im->entries = calloc(h.n, sizeof(ImatrixEntry));
        if (!im->entries)
                return tp_error(l->err, -ENOMEM, "cannot allocate %zu entries", h.n);

        for (size_t i = 0; i < h.n; i += 2) {
                const Half *s = &h.v[i], *c = i + 1 < h.n ? &h.v[i + 1] : NULL;
                if (s->counts)
                        return tp_error(l->err, -EBADMSG, "tensor '%s' (#%td) has no '%s" IMATRIX_SUFFIX_SUMS "'",
                                        quote(s->t->name, qa), s->t - g->tensors, quote(s->name, qb));
                if (!c || strcmp(c->name, s->name) != 0)
                        return tp_error(l->err, -EBADMSG, "tensor '%s' (#%td) has no '%s" IMATRIX_SUFFIX_COUNTS "'",
                                        quote(s->t->name, qa), s->t - g->tensors, quote(s->name, qb));

                ImatrixEntry *e = &im->entries[im->n_entries++];
                e->name = TAKE_PTR(h.v[i].name);
                k = gguf_entry(l, s->t, c->t, e);
                if (k < 0)
                        return tp_error_prefix(l->err, k, "entry '%s'", quote(e->name, qa));
        }
        return 0;
}

/* The three keys llama-quantize requires, and the datasets when they are an array of strings. */
static int gguf_metadata(Loader *l, const Gguf *g, Imatrix *im) {
        static const char *const keys[] = {IMATRIX_KEY_DATASETS, IMATRIX_KEY_CHUNK_COUNT, IMATRIX_KEY_CHUNK_SIZE};
        const GgufKv *kv[ELEMENTSOF(keys)];

        for (size_t i = 0; i < ELEMENTSOF(keys); i++) {
                kv[i] = gguf_find(g, keys[i]);
                if (!kv[i])
                        return tp_error(
                                l->err, -EBADMSG,
                                "missing imatrix metadata: no key '%s' (llama-quantize requires '" IMATRIX_KEY_DATASETS
                                "', '" IMATRIX_KEY_CHUNK_COUNT "' and '" IMATRIX_KEY_CHUNK_SIZE "')",
                                keys[i]);
                if (i > 0 && kv[i]->type != GGUF_TYPE_UINT32)
                        return tp_error(l->err, -EBADMSG, "key '%s' at offset %" PRIu64 ": must be a uint32, not %s",
                                        keys[i], kv[i]->offset, gguf_value_type_to_string(kv[i]->type));
        }
        im->chunk_count = (int32_t) (uint32_t) kv[1]->v.u;
        im->chunk_size = (int32_t) (uint32_t) kv[2]->v.u;

        const GgufKv *d = kv[0];
        if (d->type != GGUF_TYPE_ARRAY || d->array_type != GGUF_TYPE_STRING)
                return 0; /* llama.cpp reads no datasets then, and goes on */
        if (d->array_count > IMATRIX_DATASETS_MAX)
                return tp_error(l->err, -EBADMSG,
                                "key '" IMATRIX_KEY_DATASETS "' at offset %" PRIu64 ": %" PRIu64
                                " datasets exceed the cap of %u",
                                d->offset, d->array_count, IMATRIX_DATASETS_MAX);
        im->datasets = calloc(d->array_count ? d->array_count : 1, sizeof(char *));
        if (!im->datasets)
                return tp_error(l->err, -ENOMEM, "cannot allocate %" PRIu64 " datasets", d->array_count);
        int k = loader_seek(l, d->array_offset, IMATRIX_KEY_DATASETS);
        for (uint64_t i = 0; k >= 0 && i < d->array_count; i++) {
                uint8_t b[8];
                uint64_t len;

                k = loader_read(l, b, sizeof(b), "dataset name length");
                if (k < 0)
                        break;
                len = get_le64(b); /* gguf_read() checked it against the file */
                if (len > IMATRIX_DATASET_LEN_MAX) {
                        k = tp_error(l->err, -EBADMSG, "dataset %" PRIu64 ": %" PRIu64 " bytes exceed the %u-byte cap",
                                     i, len, IMATRIX_DATASET_LEN_MAX);
                        break;
                }
                char *s = malloc(len + 1);
                if (!s) {
                        k = tp_error(l->err, -ENOMEM, "cannot allocate a dataset name of %" PRIu64 " bytes", len);
                        break;
                }
                im->datasets[im->n_datasets++] = s;
                k = loader_read(l, s, len, "dataset name");
                s[k < 0 ? 0 : len] = '\0'; /* cut at the first NUL, as llama.cpp's const char * */
        }
        if (k < 0)
                return tp_error_prefix(l->err, k, "key '" IMATRIX_KEY_DATASETS "' at offset %" PRIu64, d->offset);
        return 0;
}

/*
 * llama.cpp reads the imatrix with ggml's GGUF reader (ggml/src/gguf.cpp, tensor data loaded),
 * which refuses three things gguf.h accepts: arrays of arrays, tensors not packed in table order
 * (each at the padded sizes of those before it), and a file that ends before the last tensor's
 * padding (it reads the data section whole). llama.cpp then fails on the file as a legacy one;
 * we refuse it here, saying why.
 */
static int gguf_check_ggml(Loader *l, const Gguf *g) {
        uint64_t at = 0;
        char qb[QUOTE_BUF];

        for (uint64_t i = 0; i < g->n_kv; i++)
                if (g->kv[i].type == GGUF_TYPE_ARRAY && g->kv[i].array_type == GGUF_TYPE_ARRAY)
                        return tp_error(l->err, -EBADMSG,
                                        "key '%s' at offset %" PRIu64
                                        ": an array of arrays, which llama.cpp's GGUF reader refuses",
                                        quote(g->kv[i].key, qb), g->kv[i].offset);
        for (uint64_t i = 0; i < g->n_tensors; i++) {
                const GgufTensor *t = &g->tensors[i];
                if (t->rel_offset != at)
                        return tp_error(l->err, -EBADMSG,
                                        "tensor '%s' (#%" PRIu64 "): rel_offset %" PRIu64
                                        ", but llama.cpp's GGUF reader "
                                        "wants the tensors packed in table order, this one at %" PRIu64,
                                        quote(t->name, qb), i, t->rel_offset, at);
                /* size <= file_size <= 2 GiB, at most GGUF_TENSORS_MAX of them: no overflow. */
                at += (t->size + g->alignment - 1) / g->alignment * g->alignment;
        }
        if (at > g->file_size - g->data_offset)
                return tp_error(l->err, -EBADMSG,
                                "the data section, each tensor padded to %" PRIu32 " bytes, is %" PRIu64
                                " bytes from offset %" PRIu64 ", but the file ends at %" PRIu64
                                " (llama.cpp's GGUF reader reads it whole)",
                                g->alignment, at, g->data_offset, g->file_size);
        return 0;
}

static int gguf_form_read(int fd, Loader *l, Imatrix *im) {
        _cleanup_(gguf_freep) Gguf *g = NULL;

        int k = gguf_read(fd, &g, l->err);
        if (k < 0)
                return k;
        k = gguf_check_ggml(l, g);
        if (k < 0)
                return k;
        if (g->n_tensors == 0)
                return tp_error(l->err, -EBADMSG, "no data: the file holds no tensors");
        k = gguf_metadata(l, g, im);
        if (k < 0)
                return k;
        return gguf_entries(l, g, im);
}

/* ---- both forms ----------------------------------------------------------------------------- */

/* By name; entries of one name in the order read. */
static int entry_compare(const void *a, const void *b) {
        const ImatrixEntry *x = *(const ImatrixEntry *const *) a, *y = *(const ImatrixEntry *const *) b;
        int c = strcmp(x->name, y->name);
        return c ? c : (x > y) - (x < y);
}

/*
 * Sort the entries by name, and of entries sharing a name keep the last one read: llama.cpp
 * assigns each into a std::map, so a later duplicate replaces the earlier one whole.
 */
static int entries_sort(Imatrix *im, TpError *err) {
        size_t n = im->n_entries, m = 0;
        _cleanup_free_ ImatrixEntry **v = calloc(n ? n : 1, sizeof(*v));
        ImatrixEntry *out = calloc(n ? n : 1, sizeof(*out));

        if (!v || !out) {
                free(out);
                return tp_error(err, -ENOMEM, "cannot allocate an index of %zu entries", n);
        }
        for (size_t i = 0; i < n; i++)
                v[i] = &im->entries[i];
        if (n > 1)
                qsort(v, n, sizeof(*v), entry_compare);
        for (size_t i = 0; i < n; i++) {
                if (i + 1 < n && strcmp(v[i]->name, v[i + 1]->name) == 0)
                        entry_done(v[i]);
                else
                        out[m++] = *v[i];
        }
        free(im->entries);
        im->entries = out;
        im->n_entries = m;
        return 0;
}

int imatrix_read(int fd, Imatrix **ret, TpError *err) {
        _cleanup_(loader_done) Loader l = {.err = err};
        _cleanup_(imatrix_freep) Imatrix *im = NULL;
        const uint8_t *magic = NULL;
        bool gguf = false;
        int k;

        k = fd_regular_size(fd, &l.file_size, err);
        if (k < 0)
                return k;
        if (l.file_size > IMATRIX_FILE_SIZE_MAX)
                return tp_error(err, -EBADMSG, "%" PRIu64 " bytes: an imatrix file is at most %" PRIu64 " bytes",
                                l.file_size, IMATRIX_FILE_SIZE_MAX);
        k = reader_init(&l.r, fd, 0, l.file_size);
        if (k < 0)
                return tp_error(err, k, "cannot set up the reader: %s", strerror(-k));
        im = calloc(1, sizeof(Imatrix));
        if (!im)
                return tp_error(err, -ENOMEM, "out of memory");

        if (l.file_size >= 4) {
                k = reader_peek(&l.r, 4, &magic);
                if (k < 0)
                        return tp_error(err, k, "reading the first 4 bytes: %s", strerror(-k));
                gguf = memcmp(magic, GGUF_MAGIC, 4) == 0;
        }
        k = gguf ? gguf_form_read(fd, &l, im) : legacy_read(&l, im);
        if (k >= 0)
                k = entries_sort(im, err);
        if (k < 0)
                return tp_error_prefix(err, k, gguf ? "GGUF imatrix" : "legacy imatrix");
        *ret = TAKE_PTR(im);
        return 0;
}

int imatrix_open(const char *path, Imatrix **ret, TpError *err) {
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);

        if (fd < 0) {
                int k = negative_errno();
                return tp_error(err, k, "%s: %s", path, strerror(-k));
        }
        int k = imatrix_read(fd, ret, err);
        if (k < 0)
                return tp_error_prefix(err, k, "%s", path);
        return 0;
}

static int entry_name_compare(const void *key, const void *elem) {
        return strcmp(key, ((const ImatrixEntry *) elem)->name);
}

const ImatrixEntry *imatrix_find(const Imatrix *im, const char *tensor_name) {
        if (!im || !tensor_name || !im->entries)
                return NULL;
        return bsearch(tensor_name, im->entries, im->n_entries, sizeof(ImatrixEntry), entry_name_compare);
}
