/* SPDX-License-Identifier: MIT */

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "dispatch.h"
#include "fileio.h"
#include "gguf-write.h"
#include "quant.h"
#include "quantize.h"

static float half_to_float(uint16_t h) {
        uint32_t sign = (uint32_t) (h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
        float f;

        if (exp == 0x1f)
                bits = sign | 0x7f800000u | man << 13;
        else if (exp != 0)
                bits = sign | (exp + 112) << 23 | man << 13;
        else if (man == 0)
                bits = sign;
        else {
                /* Subnormal: exact in float32 as man × 2^-24. */
                f = ldexpf((float) man, -24);
                return sign ? -f : f;
        }
        memcpy(&f, &bits, sizeof(f));
        return f;
}

void quantize_to_float(uint32_t type, const void *src, float *dst, size_t n) {
        const uint8_t *p = src;

        switch (type) {
        case GGML_TYPE_F32:
                memcpy(dst, src, n * sizeof(float));
                break;
        case GGML_TYPE_F16:
                for (size_t i = 0; i < n; i++)
                        dst[i] = half_to_float((uint16_t) (p[2 * i] | p[2 * i + 1] << 8));
                break;
        case GGML_TYPE_BF16:
                for (size_t i = 0; i < n; i++) {
                        uint32_t bits = (uint32_t) (p[2 * i] | p[2 * i + 1] << 8) << 16;
                        memcpy(&dst[i], &bits, sizeof(float));
                }
                break;
        default:
                break;
        }
}

/* The first non-finite value among @n elements of float @type at @p: its index, or -1. */
static int64_t first_non_finite(uint32_t type, const void *p, size_t n) {
        const uint8_t *b = p;

        for (size_t i = 0; i < n; i++) {
                bool bad;
                if (type == GGML_TYPE_F32) {
                        uint32_t u;
                        memcpy(&u, b + 4 * i, 4);
                        bad = (u & 0x7f800000u) == 0x7f800000u;
                } else if (type == GGML_TYPE_F16)
                        bad = (b[2 * i + 1] & 0x7c) == 0x7c;
                else if (type == GGML_TYPE_BF16)
                        bad = ((b[2 * i + 1] << 8 | b[2 * i]) & 0x7f80) == 0x7f80;
                else
                        return -1;
                if (bad)
                        return (int64_t) i;
        }
        return -1;
}

#define THREADS_MAX 64u

static int non_finite(TpError *err, const GgufTensor *t, uint64_t row0, size_t at, uint64_t ne0) {
        return tp_error(err, -EDOM,
                        "tensor '%s': row %" PRIu64 " holds NaN or infinity at element %" PRIu64
                        " (llama.cpp refuses such models too)",
                        t->name, row0 + at / ne0, (uint64_t) (at % ne0));
}

/* Rows of one chunk for one thread: hooked (when there is a hook), checked, quantized. */
typedef struct Part {
        const GgufTensor *t;
        const QuantizeHooks *hooks; /* NULL: no hook */
        const float *imatrix;       /* ne[0] values per expert (ne[2] of them), or NULL */
        uint32_t type;
        float *f;
        uint8_t *dst;
        uint64_t row0;
        size_t nrows, n_per_row, written;
        int r;
        TpError err;
} Part;

static void *part_run(void *userdata) {
        Part *p = userdata;

        if (p->hooks) {
                p->r = p->hooks->rows(p->hooks->userdata, p->t, p->row0, p->nrows, p->f, &p->err);
                if (p->r < 0)
                        return NULL;
                int64_t bad = first_non_finite(GGML_TYPE_F32, p->f, p->nrows * p->n_per_row);
                if (bad >= 0) {
                        p->r = non_finite(&p->err, p->t, p->row0, (size_t) bad, p->n_per_row);
                        return NULL;
                }
        }
        if (!p->imatrix) {
                p->written = quantize_rows(p->type, p->f, p->dst, p->nrows, p->n_per_row);
                return NULL;
        }
        /* Row by row: each takes its expert's importance values (rows of expert e: e·ne[1] ..). */
        uint64_t rows_per_expert = p->t->ne[1] ? p->t->ne[1] : 1;
        p->written = 0;
        for (size_t i = 0; i < p->nrows; i++) {
                const float *w = p->imatrix + (p->row0 + i) / rows_per_expert * p->n_per_row;
                p->written += quantize_rows_weighted(p->type, p->f + i * p->n_per_row, p->dst + p->written, 1,
                                                     p->n_per_row, w);
        }
        return NULL;
}

/*
 * The @nrows rows at @f (from row @row0 of @t) split into up to @threads parts, each hooked and
 * quantized to @type into @dst; a thread that cannot start runs inline. Returns the bytes written.
 */
static int convert_parallel(unsigned threads, const GgufTensor *t, const QuantizeHooks *hooks,
                            const float *imatrix, uint32_t type, float *f, uint8_t *dst, uint64_t row0, size_t nrows,
                            size_t dst_row, size_t *ret, TpError *err) {
        Part parts[THREADS_MAX];
        pthread_t tids[THREADS_MAX];
        bool started[THREADS_MAX] = {};
        size_t n = threads < 1 ? 1 : threads > THREADS_MAX ? THREADS_MAX : threads, done = 0, written = 0;
        size_t ne0 = (size_t) t->ne[0];

        if (nrows == 0) {
                *ret = 0;
                return 0;
        }
        if (n > nrows)
                n = nrows;
        for (size_t i = 0; i < n; i++) {
                size_t rows = nrows / n + (i < nrows % n);
                parts[i] = (Part) { .t = t, .hooks = hooks, .imatrix = imatrix, .type = type, .f = f + done * ne0,
                                    .dst = dst + done * dst_row, .row0 = row0 + done, .nrows = rows, .n_per_row = ne0 };
                done += rows;
        }
        for (size_t i = 1; i < n; i++)
                started[i] = pthread_create(&tids[i], NULL, part_run, &parts[i]) == 0;
        part_run(&parts[0]);
        for (size_t i = 1; i < n; i++) {
                if (started[i])
                        pthread_join(tids[i], NULL);
                else
                        part_run(&parts[i]);
        }
        for (size_t i = 0; i < n; i++) {
                if (parts[i].r < 0) {
                        if (err)
                                *err = parts[i].err;
                        return parts[i].r;
                }
                written += parts[i].written;
        }
        *ret = written;
        return 0;
}

typedef struct Job {
        int fd;
        const Gguf *g;
        const QuantizeOptions *o;
        GgufWriter *w;
        uint8_t *src;
        float *f;
        uint8_t *dst;
        size_t cap_src, cap_f, cap_dst;
        size_t n_imatrix, n_imatrix_missing;
        TpError *err;
} Job;

static int grow(void **p, size_t *cap, size_t want) {
        if (want <= *cap)
                return 0;
        void *q = realloc(*p, want);
        if (!q)
                return -ENOMEM;
        *p = q;
        *cap = want;
        return 0;
}


/*
 * The importance values of @t when it is quantized to @type, as llama.cpp picks them: the
 * entry of its name; none when the imatrix has no such entry, or @type's quantizer takes none
 * (Q8_0, the float types). An entry of another size than ne[0] × ne[2] is an error whatever
 * the type (an imatrix made for another model), except for token_embd, which llama.cpp then
 * quantizes without one.
 */
static int imatrix_of(Job *j, const GgufTensor *t, uint32_t type, const float **ret) {
        const ImatrixEntry *e = j->o->imatrix ? imatrix_find(j->o->imatrix, t->name) : NULL;
        bool weighted = quant_weighted_supported(type);

        *ret = NULL;
        if (!j->o->imatrix)
                return 0;
        if (e && e->n_values != t->ne[0] * t->ne[2]) {
                if (strcmp(t->name, "token_embd.weight") != 0)
                        return tp_error(j->err, -EINVAL,
                                        "tensor '%s': the importance matrix has %zu values for it, the tensor "
                                        "needs %" PRIu64 " (ne[0] × experts): an imatrix made for another model?",
                                        t->name, e->n_values, t->ne[0] * t->ne[2]);
                e = NULL;
        }
        if (!weighted)
                return 0;
        if (!e && quant_needs_imatrix(j->o->ftype, t->name, type))
                return tp_error(j->err, -EINVAL, "tensor '%s': the importance matrix has no entry for it, and %s "
                                "needs one for its %s tensors (llama.cpp: a very low-bit quantization)", t->name,
                                j->o->ftype->name, ggml_type(type)->name);
        if (!e) {
                j->n_imatrix_missing++;
                return 0;
        }
        j->n_imatrix++;
        *ret = e->values;
        return 0;
}

/* One tensor: copied in row chunks, or converted to float, hooked, quantized. */
static int do_tensor(Job *j, const GgufTensor *t, uint32_t type, bool hooked) {
        uint64_t ne0 = t->ne[0], rows = t->ne[1] * t->ne[2] * t->ne[3];
        uint64_t src_row = rows ? t->size / rows : 0, dst_row = 0;
        size_t chunk = j->o->chunk_floats ? j->o->chunk_floats : QUANTIZE_CHUNK_FLOATS;
        bool convert = hooked || type != t->type;
        int r;

        const float *imatrix = NULL;

        if (rows == 0 || ne0 == 0)
                return 0;
        if (convert && (r = imatrix_of(j, t, type, &imatrix)) < 0)
                return r;
        r = ggml_tensor_bytes(type, ne0, &dst_row);
        if (r < 0)
                return tp_error(j->err, r, "tensor '%s': a row of %" PRIu64 " %s elements", t->name, ne0,
                                ggml_type(type)->name);
        uint64_t per = chunk / ne0 ? chunk / ne0 : 1;
        if (per > rows)
                per = rows;
        if (grow((void **) &j->src, &j->cap_src, per * src_row) < 0 ||
            (convert && (grow((void **) &j->f, &j->cap_f, per * ne0 * sizeof(float)) < 0 ||
                         grow((void **) &j->dst, &j->cap_dst, per * dst_row) < 0)))
                return tp_error(j->err, -ENOMEM, "tensor '%s': cannot allocate %" PRIu64 " rows of buffers", t->name,
                                per);

        for (uint64_t row0 = 0; row0 < rows; row0 += per) {
                size_t n = (size_t) (rows - row0 < per ? rows - row0 : per);
                r = pread_full(j->fd, j->src, n * src_row, t->offset + row0 * src_row);
                if (r < 0)
                        return tp_error(j->err, r, "tensor '%s': reading rows %" PRIu64 "..%" PRIu64 " at offset %" PRIu64
                                        ": %s", t->name, row0, row0 + n, t->offset + row0 * src_row, strerror(-r));
                int64_t bad = first_non_finite(t->type, j->src, n * ne0);
                if (bad >= 0)
                        return non_finite(j->err, t, row0, (size_t) bad, ne0);
                if (!convert) {
                        r = gguf_writer_write(j->w, j->src, n * src_row, j->err);
                        if (r < 0)
                                return r;
                        continue;
                }
                quantize_to_float(t->type, j->src, j->f, n * ne0);
                size_t k;
                r = convert_parallel(j->o->threads, t, hooked ? j->o->hooks : NULL, imatrix, type, j->f, j->dst, row0,
                                     n, dst_row, &k, j->err);
                if (r < 0)
                        return r;
                if (k != n * dst_row)
                        return tp_error(j->err, -EIO, "tensor '%s': the quantizer wrote %zu bytes for %zu rows, expected %" PRIu64,
                                        t->name, k, n, n * dst_row);
                r = gguf_writer_write(j->w, j->dst, k, j->err);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* What llama-quantize writes of an importance matrix: a string cut at 127 bytes, as its overrides are. */
static int set_imatrix_keys(GgufWriter *w, const QuantizeOptions *o) {
        const Imatrix *im = o->imatrix;
        char s[128];
        int r;

        snprintf(s, sizeof(s), "%s", o->imatrix_name ? o->imatrix_name : "");
        r = gguf_writer_set_string(w, "quantize.imatrix.file", s, strlen(s));
        if (r >= 0 && im->n_datasets > 0) {
                snprintf(s, sizeof(s), "%s", im->datasets[0]);
                r = gguf_writer_set_string(w, "quantize.imatrix.dataset", s, strlen(s));
        }
        if (r >= 0)
                r = gguf_writer_set_u32(w, "quantize.imatrix.entries_count", (uint32_t) im->n_entries);
        if (r >= 0 && im->chunk_count > 0)
                r = gguf_writer_set_u32(w, "quantize.imatrix.chunks_count", im->chunk_count);
        return r;
}

/* The metadata: the input's keys in order, then the ones llama.cpp sets; no split keys. */
static int copy_metadata(GgufWriter *w, int fd, const Gguf *g, const QuantizeOptions *o, TpError *err) {
        static const char *const dropped[] = {
                "general.quantization_version", "general.file_type", "split.no", "split.count", "split.tensors.count",
        };
        static const char *const imatrix_keys[] = {
                "quantize.imatrix.file", "quantize.imatrix.dataset", "quantize.imatrix.entries_count",
                "quantize.imatrix.chunks_count",
        };
        int r;

        for (uint64_t i = 0; i < g->n_kv; i++) {
                bool drop = false;
                for (size_t d = 0; d < ELEMENTSOF(dropped); d++)
                        drop = drop || strcmp(g->kv[i].key, dropped[d]) == 0;
                /* llama.cpp sets these over the input's (moving them last) when it has an imatrix. */
                for (size_t d = 0; o->imatrix && d < ELEMENTSOF(imatrix_keys); d++)
                        drop = drop || strcmp(g->kv[i].key, imatrix_keys[d]) == 0;
                if (drop)
                        continue;
                r = gguf_writer_copy_kv(w, fd, &g->kv[i], err);
                if (r < 0)
                        return r;
        }
        r = gguf_writer_set_u32(w, "general.quantization_version", QUANT_VERSION);
        if (r >= 0)
                r = gguf_writer_set_u32(w, "general.file_type", o->ftype->ftype);
        if (r >= 0 && o->imatrix)
                r = set_imatrix_keys(w, o);
        if (r < 0)
                return tp_error(err, r, "setting the quantization's keys: %s", strerror(-r));
        return 0;
}

int model_quantize(int fd, const Gguf *g, const char *out_path, const QuantizeOptions *o, QuantizeResult *ret,
                   TpError *err) {
        _cleanup_(gguf_writer_freep) GgufWriter *w = NULL;
        QuantPlan plan = {};
        QuantizeResult res = { .in_bytes = g->file_size, .n_tensors = g->n_tensors };
        Job j = { .fd = fd, .g = g, .o = o, .err = err };
        int r;

        r = quant_plan(g, o->ftype, o->imatrix != NULL, &plan, err);
        if (r < 0)
                return r;
        (void) kernel_active(KERNEL_QUANT); /* pick the kernels now, before threads use them */
        res.n_fallback = plan.n_fallback;
        r = gguf_writer_new(&w);
        if (r < 0) {
                tp_error(err, r, "cannot allocate the writer");
                goto finish;
        }
        j.w = w;
        r = copy_metadata(w, fd, g, o, err);
        for (size_t i = 0; r >= 0 && i < plan.n; i++) {
                const GgufTensor *t = &g->tensors[plan.order[i]];
                uint32_t type = plan.types[plan.order[i]];
                if (type != t->type && !quant_supported(type)) {
                        r = tp_error(err, -EOPNOTSUPP, "tensor '%s': this build cannot quantize to %s", t->name,
                                     ggml_type(type)->name);
                        break;
                }
                r = gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, type);
                if (r < 0)
                        tp_error(err, r, "tensor '%s': %s", t->name, strerror(-r));
        }
        if (r >= 0)
                r = gguf_writer_begin(w, out_path, o->no_sync, err);

        for (size_t i = 0; r >= 0 && i < plan.n; i++) {
                const GgufTensor *t = &g->tensors[plan.order[i]];
                uint32_t type = plan.types[plan.order[i]];
                bool hooked = false;

                if (o->progress)
                        o->progress(o->progress_userdata, i, plan.n, t, type);
                if (o->hooks && o->hooks->begin) {
                        r = o->hooks->begin(o->hooks->userdata, t, type, err);
                        if (r < 0)
                                break;
                        hooked = r > 0;
                        if (hooked && t->type != GGML_TYPE_F32 && t->type != GGML_TYPE_F16 &&
                            t->type != GGML_TYPE_BF16) {
                                r = tp_error(err, -EOPNOTSUPP, "tensor '%s' is %s: only F32, F16 and BF16 weights "
                                             "can be changed", t->name, ggml_type(t->type)->name);
                                break;
                        }
                        if (hooked && !quant_supported(type)) {
                                r = tp_error(err, -EOPNOTSUPP, "tensor '%s': this build cannot quantize to %s",
                                             t->name, ggml_type(type)->name);
                                break;
                        }
                }
                r = do_tensor(&j, t, type, hooked);
                if (r < 0)
                        break;
                res.type_count[type]++;
                res.n_hooked += hooked;
                if (hooked || type != t->type)
                        res.n_converted++;
                else
                        res.n_copied++;
        }
        if (r >= 0)
                r = gguf_writer_commit(w, err);
        if (r >= 0) {
                res.out_bytes = gguf_writer_file_size(w);
                res.n_imatrix = j.n_imatrix;
                res.n_imatrix_missing = j.n_imatrix_missing;
                if (ret)
                        *ret = res;
        }
finish:
        quant_plan_done(&plan);
        free(j.src);
        free(j.f);
        free(j.dst);
        return r;
}
