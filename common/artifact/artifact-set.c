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
#include <stdio.h>
#include <string.h>

#include "artifact-impl.h"
#include "artifact.h"
#include "fileio.h"
#include <mbedtls/md.h>

#include "gguf-split.h"
#include "gguf.h"
#include "onnx.h"
#include "safetensors.h"
#include "stindex.h"

typedef struct SetFile {
        ArtifactKind kind;      /* as probed */
        bool data;              /* holds an ONNX model's external data: read as bytes, whatever it looks like */
        bool sha1_checked;      /* sha1 holds its SHA-1 (an external_data "checksum" asked) */
        uint8_t sha1[ONNX_SHA1_SIZE];
        bool split;             /* a GGUF with split.* keys: */
        uint16_t split_no, split_count;
        int32_t split_tensors;
        uint64_t n_tensors;     /* GGUF, safetensors: its tensors */
} SetFile;

typedef struct SetBuilder {
        const FileSet *set;
        SetFile *files;
        Artifact *a;
        size_t cap;             /* of a->sites */
        Onnx *onnx;             /* the ONNX model, when the directory is one */
        size_t onnx_file;
        Stindex *index;         /* sharded safetensors: the index */
        size_t index_file;
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
        *ret = artifact_probe(head, n, f->size);
        return 0;
}

/*
 * The file an external_data "location" names, relative to the directory of the .onnx file:
 * "." components dropped; absolute paths, ".." and paths that name no file of the set refused.
 */
static int resolve_location(SetBuilder *b, const OnnxInitializer *t, size_t *ret) {
        const char *model = b->set->files[b->onnx_file].path, *slash = strrchr(model, '/');
        _cleanup_free_ char *path = NULL;
        size_t n = 0, cap = strlen(t->location) + (slash ? (size_t) (slash - model) + 1 : 0) + 1;

        path = malloc(cap);
        if (!path)
                return -ENOMEM;
        if (slash) {
                memcpy(path, model, (size_t) (slash - model));
                n = (size_t) (slash - model);
        }
        if (t->location[0] == '/')
                return tp_error(b->err, -EBADMSG, "%s: initializer '%s': external data location '%s' is an absolute "
                                "path (it must lie inside the model's directory)", model, t->name, t->location);
        for (const char *c = t->location; *c;) {
                size_t len = strcspn(c, "/");
                if (len == 2 && c[0] == '.' && c[1] == '.')
                        return tp_error(b->err, -EBADMSG, "%s: initializer '%s': external data location '%s' holds "
                                        "'..' (it must lie inside the model's directory)", model, t->name, t->location);
                if (len > 0 && !(len == 1 && c[0] == '.')) {
                        if (n > 0)
                                path[n++] = '/';
                        memcpy(path + n, c, len);
                        n += len;
                }
                c += len + (c[len] == '/');
        }
        path[n] = '\0';
        ssize_t i = fileset_path_valid(path) ? fileset_find(b->set, path) : -1;
        if (i < 0)
                return tp_error(b->err, -ENOENT, "%s: initializer '%s': external data file '%s' is not in the model's "
                                "directory", model, t->name, t->location);
        if ((size_t) i == b->onnx_file)
                return tp_error(b->err, -EBADMSG, "%s: initializer '%s': external data location '%s' is the model "
                                "file itself", model, t->name, t->location);
        *ret = (size_t) i;
        return 0;
}

/* SHA-1 of the whole file, for an external_data "checksum" (once per file). */
static int file_sha1(SetBuilder *b, size_t i, uint8_t ret[ONNX_SHA1_SIZE]) {
        const FileSetFile *f = &b->set->files[i];
        _cleanup_free_ uint8_t *buf = NULL;
        mbedtls_md_context_t h;
        const size_t bufsize = 1u << 20;
        int r = 0;

        if (b->files[i].sha1_checked) {
                memcpy(ret, b->files[i].sha1, ONNX_SHA1_SIZE);
                return 0;
        }
        if (!(buf = malloc(bufsize)))
                return -ENOMEM;
        mbedtls_md_init(&h);
        if (mbedtls_md_setup(&h, mbedtls_md_info_from_type(MBEDTLS_MD_SHA1), 0) != 0 || mbedtls_md_starts(&h) != 0)
                r = -ENOMEM;
        for (uint64_t pos = 0; r >= 0 && pos < f->size;) {
                size_t n = f->size - pos < bufsize ? (size_t) (f->size - pos) : bufsize;
                if ((r = pread_full(f->fd, buf, n, pos)) >= 0 && mbedtls_md_update(&h, buf, n) != 0)
                        r = -EIO;
                pos += n;
        }
        if (r >= 0 && mbedtls_md_finish(&h, b->files[i].sha1) != 0)
                r = -EIO;
        mbedtls_md_free(&h);
        if (r < 0)
                return tp_error(b->err, r == -ENODATA ? -EIO : r, "%s: reading it: %s", f->path,
                                strerror(r == -ENODATA ? EIO : -r));
        b->files[i].sha1_checked = true;
        memcpy(ret, b->files[i].sha1, ONNX_SHA1_SIZE);
        return 0;
}

/* Find the data files of the ONNX model (before the family is decided: they are data, not formats). */
static int read_onnx(SetBuilder *b) {
        const FileSetFile *f = &b->set->files[b->onnx_file];
        int r = onnx_read(f->fd, &b->onnx, b->err);

        if (r < 0)
                return tp_error_prefix(b->err, r, "%s: ONNX", f->path);
        for (size_t k = 0; k < b->onnx->n_inits; k++) {
                const OnnxInitializer *t = &b->onnx->inits[k];
                size_t i;
                if (!t->external)
                        continue;
                if ((r = resolve_location(b, t, &i)) < 0)
                        return r;
                b->files[i].data = true;
        }
        return 0;
}

/* The ONNX model's sites: inline initializers in its own file, external ones in their data files. */
static int add_onnx(SetBuilder *b) {
        const FileSetFile *f = &b->set->files[b->onnx_file];
        const Onnx *o = b->onnx;
        int r;

        if ((r = reserve(b, o->n_inits)) < 0)
                return r;
        for (size_t k = 0; k < o->n_inits; k++) {
                const OnnxInitializer *t = &o->inits[k];
                if (!t->external) {
                        if ((r = artifact_add_site(b->a, t->name, f->offset + t->offset, t->length, t->data_type,
                                                   artifact_row_onnx(t))) < 0)
                                return r;
                        continue;
                }
                size_t i;
                if ((r = resolve_location(b, t, &i)) < 0)
                        return r;
                const FileSetFile *d = &b->set->files[i];
                uint64_t want, length = t->ext_has_length ? t->ext_length : d->size - t->ext_offset;
                if (t->ext_offset > d->size || length > d->size - t->ext_offset)
                        return tp_error(b->err, -EBADMSG, "%s: initializer '%s': external data [offset %" PRIu64
                                        ", length %" PRIu64 "] runs past the end of '%s' (%" PRIu64 " bytes)", f->path,
                                        t->name, t->ext_offset, length, d->path, d->size);
                r = onnx_initializer_bytes(t, &want);
                if (r >= 0 && want != length)
                        return tp_error(b->err, -EBADMSG, "%s: initializer '%s': its dims and data_type take %" PRIu64
                                        " bytes, external data %s %" PRIu64 " in '%s'", f->path, t->name, want,
                                        t->ext_has_length ? "\"length\" says" : "(to the end of the file) holds",
                                        length, d->path);
                if (r < 0 && r != -EOPNOTSUPP)
                        return tp_error(b->err, -EBADMSG, "%s: initializer '%s': its dims overflow", f->path, t->name);
                if (t->ext_has_checksum) {
                        uint8_t sha1[ONNX_SHA1_SIZE];
                        if ((r = file_sha1(b, i, sha1)) < 0)
                                return r;
                        if (memcmp(sha1, t->ext_checksum, sizeof(sha1)) != 0)
                                return tp_error(b->err, -EBADMSG, "%s: initializer '%s': external data \"checksum\" is "
                                                "not the SHA-1 of '%s'", f->path, t->name, d->path);
                }
                if ((r = artifact_add_site(b->a, t->name, d->offset + t->ext_offset, length, t->data_type,
                                           artifact_row_onnx(t))) < 0)
                        return r;
        }
        return artifact_add_onnx_quants(b->a, o);
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
                                           g->tensors[k].size, (int32_t) g->tensors[k].type,
                                           artifact_row_gguf(&g->tensors[k]))) < 0)
                        return r;
        b->files[i].n_tensors = g->n_tensors;
        b->files[i].split = g->split.present;
        b->files[i].split_no = g->split.no;
        b->files[i].split_count = g->split.count;
        b->files[i].split_tensors = g->split.tensors_count;
        return 0;
}

/*
 * Several GGUF files are one split model (llama-gguf-split): every one a shard of the same
 * count, named "<prefix>-<no+1>-of-<count>.gguf" in one directory with its own split.no,
 * every shard there once, and the tensors adding up to split.tensors.count.
 */
static int check_gguf_split(SetBuilder *b, size_t n_gguf, size_t first) {
        const FileSet *set = b->set;
        const SetFile *f0 = &b->files[first];
        const char *p0 = set->files[first].path, *slash = strrchr(p0, '/');
        size_t dir_len = slash ? (size_t) (slash - p0) + 1 : 0, prefix_len;
        uint16_t no, count;
        uint64_t tensors = 0;
        TpError why = {};
        _cleanup_free_ bool *seen = NULL;

        if (n_gguf == 1 && !f0->split)
                return 0;
        if (n_gguf > 1 && !f0->split)
                return tp_error(b->err, -EINVAL, "%s: the directory holds %zu GGUF files, and this one is no shard of "
                                "a split model (no split.* keys): one model per directory", p0, n_gguf);
        if (gguf_split_name_parse(p0 + dir_len, &prefix_len, &no, &count, &why) < 0)
                return tp_error(b->err, -EBADMSG, "%s: a shard of a split GGUF must be named "
                                "<prefix>-NNNNN-of-NNNNN.gguf: %s", p0, why.message);
        seen = calloc(f0->split_count, sizeof(bool));
        if (!seen)
                return -ENOMEM;
        for (size_t i = 0; i < set->n_files; i++) {
                const SetFile *f = &b->files[i];
                const char *p = set->files[i].path;
                size_t plen;
                if (f->kind != ARTIFACT_GGUF || f->data)
                        continue;
                if (!f->split)
                        return tp_error(b->err, -EBADMSG, "%s: no split.* keys, but %s is a shard of a split GGUF: "
                                        "an extra GGUF file", p, p0);
                if (strncmp(p, p0, dir_len) != 0 || strchr(p + dir_len, '/') ||
                    gguf_split_name_parse(p + dir_len, &plen, &no, &count, &why) < 0 || plen != prefix_len ||
                    strncmp(p + dir_len, p0 + dir_len, plen) != 0)
                        return tp_error(b->err, -EBADMSG, "%s: not a shard of %.*s-*-of-%05u.gguf (an extra GGUF file)",
                                        p, (int) (dir_len + prefix_len), p0, f0->split_count);
                if (f->split_count != f0->split_count || count != f0->split_count)
                        return tp_error(b->err, -EBADMSG, "%s: split.count %u, its name says %u, %s says %u", p,
                                        f->split_count, count, p0, f0->split_count);
                if (f->split_no != no)
                        return tp_error(b->err, -EBADMSG, "%s: split.no %u, but its name is shard %u (split.no %u)", p,
                                        f->split_no, no + 1, no);
                if (f->split_tensors != f0->split_tensors)
                        return tp_error(b->err, -EBADMSG, "%s: split.tensors.count %d, %s says %d", p, f->split_tensors,
                                        p0, f0->split_tensors);
                seen[no] = true;
                tensors += f->n_tensors;
        }
        for (unsigned k = 0; k < f0->split_count; k++)
                if (!seen[k]) {
                        _cleanup_free_ char *name = NULL;
                        _cleanup_free_ char *prefix = strndup(p0 + dir_len, prefix_len);
                        if (!prefix || gguf_split_name_format(prefix, k, f0->split_count, &name, NULL) < 0)
                                return -ENOMEM;
                        return tp_error(b->err, -ENOENT, "%.*s%s: shard %u of %u of the split GGUF is missing",
                                        (int) dir_len, p0, name, k + 1, f0->split_count);
                }
        /* Every shard once, every file a shard of this count: the counts agree. */
        if (tensors != (uint64_t) f0->split_tensors)
                return tp_error(b->err, -EBADMSG, "%s: split.tensors.count says %d tensors, the %u shards hold %" PRIu64,
                                p0, f0->split_tensors, f0->split_count, tensors);
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
        for (size_t k = 0; k < s->n_tensors; k++) {
                const SafetensorsTensor *t = &s->tensors[k];
                if (b->index) {
                        const char *ip = b->set->files[b->index_file].path, *slash = strrchr(ip, '/');
                        const StindexTensor *e = stindex_find(b->index, t->name);
                        const char *shard = e ? b->index->shards[e->shard] : NULL;
                        size_t dir_len = slash ? (size_t) (slash - ip) + 1 : 0;
                        if (!e)
                                return tp_error(b->err, -EBADMSG, "%s: tensor '%s' is not in %s's weight_map", f->path,
                                                t->name, ip);
                        if (strncmp(f->path, ip, dir_len) != 0 || strcmp(f->path + dir_len, shard) != 0)
                                return tp_error(b->err, -EBADMSG, "%s: tensor '%s' is here, %s's weight_map puts it in "
                                                "'%s'", f->path, t->name, ip, shard);
                }
                if ((r = artifact_add_site(b->a, t->name, f->offset + t->offset, t->length, (int32_t) t->dtype,
                                           artifact_row_safetensors(t))) < 0)
                        return r;
        }
        b->files[i].n_tensors = s->n_tensors;
        return 0;
}

static bool is_index_name(const char *path) {
        static const char suffix[] = ".safetensors.index.json";
        size_t n = strlen(path), k = sizeof(suffix) - 1;
        return n > k && strcmp(path + n - k, suffix) == 0;
}

/*
 * Sharded safetensors: one index (*.safetensors.index.json); every shard its weight_map names
 * is a file beside it, every safetensors file of the directory is one of them, and (checked
 * while adding) every tensor sits in the shard the map names; the map has no tensor the
 * shards lack.
 */
static int read_index(SetBuilder *b, size_t n_safetensors, size_t first) {
        size_t n_index = 0;

        for (size_t i = 0; i < b->set->n_files; i++)
                if (is_index_name(b->set->files[i].path) && n_index++ == 0)
                        b->index_file = i;
        if (n_index == 0) {
                if (n_safetensors > 1)
                        return tp_error(b->err, -EINVAL, "the directory holds %zu safetensors files (%s, ...) and no "
                                        "*.safetensors.index.json that makes them one model", n_safetensors,
                                        b->set->files[first].path);
                return 0;
        }
        if (n_index > 1)
                return tp_error(b->err, -EINVAL, "the directory holds %zu safetensors indexes (%s, ...): one model per "
                                "directory", n_index, b->set->files[b->index_file].path);
        const FileSetFile *f = &b->set->files[b->index_file];
        const char *slash = strrchr(f->path, '/');
        size_t dir_len = slash ? (size_t) (slash - f->path) + 1 : 0;
        int r = stindex_read(f->fd, &b->index, b->err);
        if (r < 0)
                return tp_error_prefix(b->err, r, "%s", f->path);
        for (size_t k = 0; k < b->index->n_shards; k++) {
                _cleanup_free_ char *path = NULL;
                if (asprintf(&path, "%.*s%s", (int) dir_len, f->path, b->index->shards[k]) < 0)
                        return -ENOMEM;
                ssize_t i = fileset_find(b->set, path);
                if (i < 0)
                        return tp_error(b->err, -ENOENT, "%s: weight_map names shard '%s', which is not in the "
                                        "directory", f->path, b->index->shards[k]);
                if (b->files[i].kind != ARTIFACT_SAFETENSORS)
                        return tp_error(b->err, -EBADMSG, "%s: weight_map names shard '%s', which is no safetensors "
                                        "file", f->path, b->index->shards[k]);
        }
        for (size_t i = 0; i < b->set->n_files; i++) {
                const char *p = b->set->files[i].path;
                if (b->files[i].kind == ARTIFACT_SAFETENSORS &&
                    (strncmp(p, f->path, dir_len) != 0 || stindex_find_shard(b->index, p + dir_len) < 0))
                        return tp_error(b->err, -EBADMSG, "%s: a safetensors file that %s does not name (an extra "
                                        "shard)", p, f->path);
        }
        return 0;
}

static int name_cmp(const void *x, const void *y) {
        return strcmp(((const Site *) x)->name, ((const Site *) y)->name);
}

/*
 * Two sites of one name in a set: name both files. Sharded safetensors: the index's map names
 * no tensor the shards lack (each shard tensor was found at its own shard while adding).
 */
static int check_names(SetBuilder *b) {
        _cleanup_free_ Site *by_name = NULL;
        const Artifact *a = b->a;

        by_name = malloc((a->n_sites ? a->n_sites : 1) * sizeof(Site));
        if (!by_name)
                return -ENOMEM;
        if (a->n_sites > 0) {
                memcpy(by_name, a->sites, a->n_sites * sizeof(Site));
                qsort(by_name, a->n_sites, sizeof(Site), name_cmp);
        }
        for (size_t i = 1; i < a->n_sites; i++)
                if (strcmp(by_name[i - 1].name, by_name[i].name) == 0)
                        return tp_error(b->err, -EBADMSG, "tensor '%s' is both in %s and in %s", by_name[i].name,
                                        b->set->files[fileset_locate(b->set, by_name[i - 1].offset)].path,
                                        b->set->files[fileset_locate(b->set, by_name[i].offset)].path);
        if (!b->index)
                return 0;
        for (size_t i = 0, k = 0; k < b->index->n_tensors; k++) {
                const char *want = b->index->tensors[k].name;
                while (i < a->n_sites && strcmp(by_name[i].name, want) < 0)
                        i++;
                if (i == a->n_sites || strcmp(by_name[i].name, want) != 0)
                        return tp_error(b->err, -EBADMSG, "%s: weight_map puts tensor '%s' in '%s', which does not "
                                        "hold it", b->set->files[b->index_file].path, want,
                                        b->index->shards[b->index->tensors[k].shard]);
        }
        return 0;
}

/*
 * Which format the directory is: at most one family (data files aside), raw side files beside
 * it; one ONNX model; several GGUF files only as the shards of one split model, several
 * safetensors files only with their index.
 */
static int family(SetBuilder *b, ArtifactKind *ret) {
        size_t count[_ARTIFACT_KIND_MAX] = {}, first[_ARTIFACT_KIND_MAX] = {};
        ArtifactKind kind = ARTIFACT_RAW;
        int r;

        for (size_t i = 0; i < b->set->n_files; i++) {
                ArtifactKind k = b->files[i].data ? ARTIFACT_RAW : b->files[i].kind;
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
        if (kind == ARTIFACT_SAFETENSORS && (r = read_index(b, count[kind], first[kind])) < 0)
                return r;
        *ret = kind;
        return 0;
}

static int open_set(SetBuilder *b) {
        const FileSet *set = b->set;
        size_t n_onnx = 0, n_gguf = 0, first_gguf = 0;
        int r;

        for (size_t i = 0; i < set->n_files; i++) {
                if ((r = probe(&set->files[i], &b->files[i].kind, b->err)) < 0)
                        return r;
                if (b->files[i].kind == ARTIFACT_ONNX && n_onnx++ == 0)
                        b->onnx_file = i;
        }
        if (n_onnx > 1)
                return tp_error(b->err, -EINVAL, "the directory holds %zu ONNX models (%s, ...): one model per "
                                "directory", n_onnx, set->files[b->onnx_file].path);
        /* Its data files first: whatever their bytes look like, they are the model's data. */
        if (n_onnx == 1 && (r = read_onnx(b)) < 0)
                return r;
        if ((r = family(b, &b->a->kind)) < 0)
                return r;
        for (size_t i = 0; i < set->n_files; i++) {
                switch (b->files[i].data ? ARTIFACT_RAW : b->files[i].kind) {
                case ARTIFACT_GGUF:
                        if (n_gguf++ == 0)
                                first_gguf = i;
                        r = add_gguf(b, i);
                        break;
                case ARTIFACT_ONNX:
                        r = add_onnx(b);
                        break;
                case ARTIFACT_SAFETENSORS:
                        r = add_safetensors(b, i);
                        break;
                default:
                        r = 0;
                        break;
                }
                if (r < 0)
                        return r;
        }
        /* The first shard is the one the others are checked against (split.no 0, else the first by name). */
        for (size_t i = 0; i < set->n_files; i++)
                if (b->files[i].kind == ARTIFACT_GGUF && !b->files[i].data && b->files[i].split &&
                    b->files[i].split_no == 0) {
                        first_gguf = i;
                        break;
                }
        if (n_gguf > 0 && (r = check_gguf_split(b, n_gguf, first_gguf)) < 0)
                return r;
        return check_names(b);
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
        r = open_set(&b);
        onnx_free(b.onnx);
        stindex_free(b.index);
        if (r < 0 || (r = artifact_finish(a, set, err)) < 0)
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
