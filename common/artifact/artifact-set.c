/* SPDX-License-Identifier: MIT */

/*
 * A model directory as one artifact: every file's sites at their offsets
 * in the set's space (fileset.h). One format family per directory (the
 * model), plus any number of raw side files (config.json, a tokenizer):
 *
 *   - ONNX: one .onnx file; its external-data initializers are sites in
 *     the data files they name, which are then data, not formats of their own;
 *   - GGUF: one file, or the shards of one split model (split.* keys);
 *   - safetensors: one file, or the shards an index (*.safetensors.index.json) maps.
 *
 * Site names are unique across the set, so a tensor that moves between
 * shards keeps its name and the matcher finds it.
 */

#include <inttypes.h>
#include <string.h>

#include "artifact-impl.h"
#include "artifact.h"
#include "fileio.h"
#include "gguf.h"
#include "onnx.h"
#include "safetensors.h"

typedef struct SetFile {
        ArtifactKind kind;      /* as probed; ARTIFACT_RAW for an ONNX model's data files */
        bool data;              /* holds an ONNX model's external data */
} SetFile;

typedef struct SetBuilder {
        const FileSet *set;
        SetFile *files;
        Artifact *a;
        size_t cap;             /* of a->sites */
        TpError *err;
} SetBuilder;

static int reserve(SetBuilder *b, size_t more) {
        if (more <= b->cap - b->a->n_sites)
                return 0;
        size_t cap = b->cap ? b->cap : 64;
        while (cap - b->a->n_sites < more)
                cap *= 2;
        Site *s = reallocarray(b->a->sites, cap, sizeof(Site));
        if (!s)
                return -ENOMEM;
        b->a->sites = s;
        b->cap = cap;
        return 0;
}

static int probe(const FileSetFile *f, ArtifactKind *ret, TpError *err) {
        uint8_t head[64];
        size_t n = f->size < sizeof(head) ? (size_t) f->size : sizeof(head);
        int r = pread_full(f->fd, head, n, 0);

        if (r < 0)
                return tp_error(err, r == -ENODATA ? -EIO : r, "%s: reading its first bytes: %s", f->path,
                                strerror(r == -ENODATA ? EIO : -r));
        if (n >= 4 && memcmp(head, "GGUF", 4) == 0)
                *ret = ARTIFACT_GGUF;
        else if (onnx_probe(head, n))
                *ret = ARTIFACT_ONNX;
        else if (safetensors_probe(head, n, f->size))
                *ret = ARTIFACT_SAFETENSORS;
        else
                *ret = ARTIFACT_RAW;
        return 0;
}

/* The ONNX model: inline initializers in its own file, external ones in the data files they name. */
static int add_onnx(SetBuilder *b, size_t i) {
        const FileSetFile *f = &b->set->files[i];
        _cleanup_(onnx_freep) Onnx *o = NULL;
        int r = onnx_read(f->fd, &o, b->err);

        if (r < 0)
                return tp_error_prefix(b->err, r, "%s: ONNX", f->path);
        if ((r = reserve(b, o->n_inits)) < 0)
                return r;
        for (size_t k = 0; k < o->n_inits; k++) {
                const OnnxInitializer *t = &o->inits[k];
                if (t->external)
                        return tp_error(b->err, -EOPNOTSUPP, "%s: initializer '%s' keeps its data in '%s': external "
                                        "data is not read yet", f->path, t->name, t->location);
                if ((r = artifact_add_site(b->a, t->name, f->offset + t->offset, t->length, t->data_type)) < 0)
                        return r;
        }
        return 0;
}

static int add_gguf(SetBuilder *b, size_t i) {
        const FileSetFile *f = &b->set->files[i];
        _cleanup_(gguf_freep) Gguf *g = NULL;
        int r = gguf_read(f->fd, &g, b->err);

        if (r < 0)
                return tp_error_prefix(b->err, r, "%s: GGUF", f->path);
        if ((r = reserve(b, g->n_tensors)) < 0)
                return r;
        for (uint64_t k = 0; k < g->n_tensors; k++)
                if ((r = artifact_add_site(b->a, g->tensors[k].name, f->offset + g->tensors[k].offset,
                                           g->tensors[k].size, (int32_t) g->tensors[k].type)) < 0)
                        return r;
        return 0;
}

static int add_safetensors(SetBuilder *b, size_t i) {
        const FileSetFile *f = &b->set->files[i];
        _cleanup_(safetensors_freep) Safetensors *s = NULL;
        int r = safetensors_read(f->fd, &s, b->err);

        if (r < 0)
                return tp_error_prefix(b->err, r, "%s: safetensors", f->path);
        if ((r = reserve(b, s->n_tensors)) < 0)
                return r;
        for (size_t k = 0; k < s->n_tensors; k++)
                if ((r = artifact_add_site(b->a, s->tensors[k].name, f->offset + s->tensors[k].offset,
                                           s->tensors[k].length, (int32_t) s->tensors[k].dtype)) < 0)
                        return r;
        return 0;
}

static int name_cmp(const void *x, const void *y) {
        return strcmp(((const Site *) x)->name, ((const Site *) y)->name);
}

/* Two sites of one name in a set: name both files. */
static int check_unique_names(SetBuilder *b) {
        _cleanup_free_ Site *by_name = NULL;
        const Artifact *a = b->a;

        if (a->n_sites < 2)
                return 0;
        by_name = malloc(a->n_sites * sizeof(Site));
        if (!by_name)
                return -ENOMEM;
        memcpy(by_name, a->sites, a->n_sites * sizeof(Site));
        qsort(by_name, a->n_sites, sizeof(Site), name_cmp);
        for (size_t i = 1; i < a->n_sites; i++)
                if (strcmp(by_name[i - 1].name, by_name[i].name) == 0)
                        return tp_error(b->err, -EBADMSG, "tensor '%s' is both in %s and in %s", by_name[i].name,
                                        b->set->files[fileset_locate(b->set, by_name[i - 1].offset)].path,
                                        b->set->files[fileset_locate(b->set, by_name[i].offset)].path);
        return 0;
}

/* Which format the directory is: at most one family; raw side files beside it. */
static int family(SetBuilder *b, ArtifactKind *ret) {
        size_t count[_ARTIFACT_KIND_MAX] = {}, first[_ARTIFACT_KIND_MAX] = {};
        ArtifactKind kind = ARTIFACT_RAW;

        for (size_t i = 0; i < b->set->n_files; i++) {
                ArtifactKind k = b->files[i].kind;
                if (count[k]++ == 0)
                        first[k] = i;
                if (k == ARTIFACT_RAW || k == kind)
                        continue;
                if (kind != ARTIFACT_RAW)
                        return tp_error(b->err, -EINVAL, "the directory holds a %s model (%s) and a %s one (%s): one "
                                        "model per directory", artifact_kind_to_string(kind),
                                        b->set->files[first[kind]].path, artifact_kind_to_string(k),
                                        b->set->files[i].path);
                kind = k;
        }
        if (kind == ARTIFACT_ONNX && count[kind] > 1)
                return tp_error(b->err, -EINVAL, "the directory holds %zu ONNX models (%s, ...): one model per "
                                "directory", count[kind], b->set->files[first[kind]].path);
        if (kind == ARTIFACT_GGUF && count[kind] > 1)
                return tp_error(b->err, -EOPNOTSUPP, "the directory holds %zu GGUF files (%s, ...): split GGUF is not "
                                "read yet", count[kind], b->set->files[first[kind]].path);
        if (kind == ARTIFACT_SAFETENSORS && count[kind] > 1)
                return tp_error(b->err, -EOPNOTSUPP, "the directory holds %zu safetensors files (%s, ...): sharded "
                                "safetensors is not read yet", count[kind], b->set->files[first[kind]].path);
        *ret = kind;
        return 0;
}

int artifact_open_set(const FileSet *set, Artifact **ret, TpError *err) {
        _cleanup_(artifact_freep) Artifact *a = NULL;
        _cleanup_free_ SetFile *files = NULL;
        int r;

        if (!set->directory)
                return artifact_open(set->files[0].fd, ret, err);

        a = calloc(1, sizeof(*a));
        files = calloc(set->n_files, sizeof(*files));
        if (!a || !files)
                return -ENOMEM;
        a->size = set->size;
        SetBuilder b = { .set = set, .files = files, .a = a, .err = err };
        for (size_t i = 0; i < set->n_files; i++)
                if ((r = probe(&set->files[i], &files[i].kind, err)) < 0)
                        return r;
        if ((r = family(&b, &a->kind)) < 0)
                return r;
        for (size_t i = 0; i < set->n_files; i++) {
                switch (files[i].data ? ARTIFACT_RAW : files[i].kind) {
                case ARTIFACT_GGUF:
                        r = add_gguf(&b, i);
                        break;
                case ARTIFACT_ONNX:
                        r = add_onnx(&b, i);
                        break;
                case ARTIFACT_SAFETENSORS:
                        r = add_safetensors(&b, i);
                        break;
                default:
                        r = 0;
                        break;
                }
                if (r < 0)
                        return r;
        }
        if ((r = check_unique_names(&b)) < 0 || (r = artifact_finish(a, set, err)) < 0)
                return r;
        *ret = TAKE_PTR(a);
        return 0;
}

int model_set_open(int fd, const char *name, ModelSet *ret, TpError *err) {
        ModelSet m = MODEL_SET_NULL;
        int r = fileset_open(fd, name, &m.files, err);

        if (r < 0)
                return r;
        if ((r = artifact_open_set(&m.files, &m.artifact, err)) < 0) {
                model_set_done(&m);
                return r;
        }
        *ret = m;
        return 0;
}

void model_set_done(ModelSet *m) {
        artifact_free(m->artifact);
        fileset_done(&m->files);
        *m = MODEL_SET_NULL;
}
