/* SPDX-License-Identifier: MIT */

#include <inttypes.h>
#include <string.h>
#include <sys/stat.h>

#include "artifact-impl.h"
#include "artifact.h"
#include "fileio.h"
#include "gguf.h"
#include "onnx.h"
#include "safetensors.h"

static const char *const kind_table[_ARTIFACT_KIND_MAX] = {
        [ARTIFACT_RAW] = "raw",
        [ARTIFACT_GGUF] = "gguf",
        [ARTIFACT_ONNX] = "onnx",
        [ARTIFACT_SAFETENSORS] = "safetensors",
};

const char *artifact_kind_to_string(ArtifactKind k) {
        return k >= 0 && k < _ARTIFACT_KIND_MAX ? kind_table[k] : NULL;
}

ArtifactKind artifact_kind_from_string(const char *s) {
        for (ArtifactKind k = 0; s && k < _ARTIFACT_KIND_MAX; k++)
                if (strcmp(kind_table[k], s) == 0)
                        return k;
        return _ARTIFACT_KIND_INVALID;
}

Artifact *artifact_free(Artifact *a) {
        if (!a)
                return NULL;
        for (size_t i = 0; i < a->n_sites; i++)
                free(a->sites[i].name);
        free(a->sites);
        for (size_t i = 0; i < a->n_quants; i++) {
                free(a->quants[i].site);
                free(a->quants[i].scale);
                free(a->quants[i].zero_point);
        }
        free(a->quants);
        free(a);
        return NULL;
}

_Static_assert(ARTIFACT_MAX_DIMS == ONNX_MAX_DIMS, "an ONNX tensor's dims fit an ArtifactQuant");

int artifact_add_onnx_quants(Artifact *a, const Onnx *o) {
        for (size_t i = 0; i < o->n_inits; i++) {
                const OnnxInitializer *t = &o->inits[i];
                const OnnxQuantUse *u;
                if ((t->data_type != ONNX_TYPE_INT8 && t->data_type != ONNX_TYPE_UINT8) || !(u = onnx_quant_use_of(o, t)))
                        continue;
                int64_t axis = u->axis < 0 ? u->axis + (int64_t) t->n_dims : u->axis;
                bool dims_ok = true;
                for (uint32_t k = 0; k < t->n_dims; k++)
                        dims_ok &= t->dims[k] > 0;
                if (!dims_ok || (t->n_dims > 0 && (axis < 0 || axis >= (int64_t) t->n_dims)))
                        continue;       /* a node the runtime would refuse: nothing to learn from it */
                ArtifactQuant *x = reallocarray(a->quants, a->n_quants + 1, sizeof(*x));
                if (!x)
                        return -ENOMEM;
                a->quants = x;
                ArtifactQuant *q = &a->quants[a->n_quants];
                *q = (ArtifactQuant) { .n_dims = t->n_dims, .axis = t->n_dims ? (uint32_t) axis : 0 };
                for (uint32_t k = 0; k < t->n_dims; k++)
                        q->dims[k] = (uint64_t) t->dims[k];
                q->site = strdup(t->name);
                q->scale = u->scale ? strdup(u->scale) : NULL;
                q->zero_point = u->zero_point ? strdup(u->zero_point) : NULL;
                a->n_quants++;
                if (!q->site || (u->scale && !q->scale) || (u->zero_point && !q->zero_point))
                        return -ENOMEM;
        }
        return 0;
}

static int quant_cmp(const void *x, const void *y) {
        return strcmp(((const ArtifactQuant *) x)->site, ((const ArtifactQuant *) y)->site);
}

const ArtifactQuant *artifact_quant(const Artifact *a, const char *name) {
        if (a->n_quants == 0 || !name)
                return NULL;
        return bsearch(&(ArtifactQuant) { .site = (char *) name }, a->quants, a->n_quants, sizeof(ArtifactQuant),
                       quant_cmp);
}

size_t artifact_site_after(const Artifact *a, uint64_t offset) {
        size_t lo = 0, hi = a->n_sites;

        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (a->sites[mid].offset + a->sites[mid].length <= offset)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo;
}

int artifact_add_site(Artifact *a, const char *name, uint64_t offset, uint64_t length, int32_t type, uint64_t row) {
        Site *s = &a->sites[a->n_sites];
        s->name = strdup(name);
        if (!s->name)
                return -ENOMEM;
        s->offset = offset;
        s->length = length;
        s->type = type;
        s->row = row;
        a->n_sites++;
        return 0;
}

uint64_t artifact_row_gguf(const GgufTensor *t) {
        return t->n_dims >= 2 && t->ne[1] > 1 ? t->ne[0] : 0;
}

uint64_t artifact_row_onnx(const OnnxInitializer *t) {
        return t->n_dims >= 2 && t->dims[t->n_dims - 1] > 0 ? (uint64_t) t->dims[t->n_dims - 1] : 0;
}

uint64_t artifact_row_safetensors(const SafetensorsTensor *t) {
        return t->n_dims >= 2 ? t->shape[t->n_dims - 1] : 0;
}

/* By offset; at one offset the shorter first, so an empty site never "overlaps" its neighbour. */
static int site_cmp(const void *x, const void *y) {
        const Site *a = x, *b = y;
        if (a->offset != b->offset)
                return a->offset < b->offset ? -1 : 1;
        return a->length < b->length ? -1 : a->length > b->length;
}

static void le(Sha256 *h, uint64_t v, unsigned bytes) {
        uint8_t b[8];
        for (unsigned i = 0; i < bytes; i++)
                b[i] = (uint8_t) (v >> (8 * i));
        sha256_update(h, b, bytes);
}

/* A directory's fingerprint also binds its files' names and sizes; a single file's stays as it was. */
static void layout_fingerprint(Artifact *a, const FileSet *set) {
        static const char tag[] = "taskpatch-layout-v1", set_tag[] = "taskpatch-layout-set-v1";
        Sha256 h;

        sha256_init(&h);
        if (set && set->directory) {
                sha256_update(&h, set_tag, sizeof(set_tag));
                le(&h, set->n_files, 8);
                for (size_t i = 0; i < set->n_files; i++) {
                        sha256_update(&h, set->files[i].path, strlen(set->files[i].path) + 1);
                        le(&h, set->files[i].size, 8);
                }
        } else
                sha256_update(&h, tag, sizeof(tag));
        le(&h, (uint64_t) a->kind, 4);
        le(&h, a->size, 8);
        for (size_t i = 0; i < a->n_sites; i++) {
                const Site *s = &a->sites[i];
                sha256_update(&h, s->name, strlen(s->name) + 1);
                le(&h, (uint64_t) (uint32_t) s->type, 4);
                le(&h, s->offset, 8);
                le(&h, s->length, 8);
        }
        sha256_final(&h, a->layout);
}

static int from_gguf(int fd, Artifact *a, TpError *err) {
        _cleanup_(gguf_freep) Gguf *g = NULL;
        int r = gguf_read(fd, &g, err);
        if (r < 0)
                return r;
        a->sites = calloc(g->n_tensors ? g->n_tensors : 1, sizeof(Site));
        if (!a->sites)
                return -ENOMEM;
        for (uint64_t i = 0; i < g->n_tensors; i++)
                if ((r = artifact_add_site(a, g->tensors[i].name, g->tensors[i].offset, g->tensors[i].size,
                                           (int32_t) g->tensors[i].type, artifact_row_gguf(&g->tensors[i]))) < 0)
                        return r;
        return 0;
}

static int from_onnx(int fd, Artifact *a, TpError *err) {
        _cleanup_(onnx_freep) Onnx *o = NULL;
        int r = onnx_read(fd, &o, err);
        if (r < 0)
                return r;
        if (o->has_external)
                return tp_error(err, -EOPNOTSUPP, "the model keeps initializers in external data files: give the "
                                "model's directory, not the .onnx file alone");
        a->sites = calloc(o->n_inits ? o->n_inits : 1, sizeof(Site));
        if (!a->sites)
                return -ENOMEM;
        for (size_t i = 0; i < o->n_inits; i++)
                if ((r = artifact_add_site(a, o->inits[i].name, o->inits[i].offset, o->inits[i].length,
                                           o->inits[i].data_type, artifact_row_onnx(&o->inits[i]))) < 0)
                        return r;
        return artifact_add_onnx_quants(a, o);
}

static int from_safetensors(int fd, Artifact *a, TpError *err) {
        _cleanup_(safetensors_freep) Safetensors *s = NULL;
        int r = safetensors_read(fd, &s, err);
        if (r < 0)
                return r;
        a->sites = calloc(s->n_tensors ? s->n_tensors : 1, sizeof(Site));
        if (!a->sites)
                return -ENOMEM;
        for (size_t i = 0; i < s->n_tensors; i++)
                if ((r = artifact_add_site(a, s->tensors[i].name, s->tensors[i].offset, s->tensors[i].length,
                                           (int32_t) s->tensors[i].dtype, artifact_row_safetensors(&s->tensors[i]))) < 0)
                        return r;
        return 0;
}

ArtifactKind artifact_probe(const uint8_t *head, size_t n, uint64_t size) {
        if (n >= 4 && memcmp(head, "GGUF", 4) == 0)
                return ARTIFACT_GGUF;
        if (onnx_probe(head, n))
                return ARTIFACT_ONNX;
        if (safetensors_probe(head, n, size))
                return ARTIFACT_SAFETENSORS;
        return ARTIFACT_RAW;
}

int artifact_finish(Artifact *a, const FileSet *set, TpError *err) {
        if (a->n_sites > 1)
                qsort(a->sites, a->n_sites, sizeof(Site), site_cmp);
        if (a->n_quants > 1)
                qsort(a->quants, a->n_quants, sizeof(ArtifactQuant), quant_cmp);
        for (size_t i = 1; i < a->n_sites; i++)
                if (a->sites[i].offset < a->sites[i - 1].offset + a->sites[i - 1].length)
                        return tp_error(err, -EBADMSG, "%s%ssites '%s' and '%s' overlap",
                                        set && set->directory ? set->files[fileset_locate(set, a->sites[i].offset)].path : "",
                                        set && set->directory ? ": " : "", a->sites[i - 1].name, a->sites[i].name);
        layout_fingerprint(a, set);
        return 0;
}

/* The format's name as its error messages start. */
static const char *const format_name[_ARTIFACT_KIND_MAX] = {
        [ARTIFACT_RAW] = "raw",
        [ARTIFACT_GGUF] = "GGUF",
        [ARTIFACT_ONNX] = "ONNX",
        [ARTIFACT_SAFETENSORS] = "safetensors",
};

int artifact_open(int fd, Artifact **ret, TpError *err) {
        _cleanup_(artifact_freep) Artifact *a = NULL;
        uint8_t head[64] = {};
        struct stat st;
        int r;

        if (fstat(fd, &st) < 0)
                return tp_error(err, negative_errno(), "%s", strerror(errno));
        if (!S_ISREG(st.st_mode))
                return tp_error(err, -EINVAL, "not a regular file");
        a = calloc(1, sizeof(*a));
        if (!a)
                return -ENOMEM;
        a->size = (uint64_t) st.st_size;
        size_t n = a->size < sizeof(head) ? (size_t) a->size : sizeof(head);
        r = pread_full(fd, head, n, 0);
        if (r < 0)
                return tp_error(err, r, "reading the file's first bytes: %s", strerror(-r));

        a->kind = artifact_probe(head, n, a->size);
        if (a->kind == ARTIFACT_GGUF)
                r = from_gguf(fd, a, err);
        else if (a->kind == ARTIFACT_ONNX)
                r = from_onnx(fd, a, err);
        else if (a->kind == ARTIFACT_SAFETENSORS)
                r = from_safetensors(fd, a, err);
        if (r < 0)
                return tp_error_prefix(err, r, "%s", format_name[a->kind]);

        if ((r = artifact_finish(a, NULL, err)) < 0)
                return r;
        *ret = TAKE_PTR(a);
        return 0;
}
