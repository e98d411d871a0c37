/* SPDX-License-Identifier: MIT */

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <zstd.h>

#include "encryption.h"
#include "lora-span.h"
#include "rescale-span.h"
#include "manifest.h"
#include "yaml-doc.h"
#include "yaml-write.h"

static const char *const span_encoding_table[_SPAN_ENCODING_MAX] = {
        [SPAN_RAW] = "raw",
        [SPAN_DELTA] = "delta",
        [SPAN_COPY] = "copy",
        [SPAN_REF] = "ref",
        [SPAN_LORA] = "lora",
        [SPAN_RESCALE] = "rescale",
};

const char *span_encoding_to_string(SpanEncoding e) {
        return e >= 0 && e < _SPAN_ENCODING_MAX ? span_encoding_table[e] : NULL;
}

SpanEncoding span_encoding_from_string(const char *s) {
        for (SpanEncoding e = 0; s && e < _SPAN_ENCODING_MAX; e++)
                if (strcmp(span_encoding_table[e], s) == 0)
                        return e;
        return _SPAN_ENCODING_INVALID;
}

void sites_fingerprint(char *const *sorted_names, size_t n, uint8_t ret[SHA256_DIGEST_SIZE]) {
        Sha256 s;

        sha256_init(&s);
        for (size_t i = 0; i < n; i++)
                sha256_update(&s, sorted_names[i], strlen(sorted_names[i]) + 1);
        sha256_final(&s, ret);
}

void manifest_files_done(ManifestFiles *f) {
        fileset_done(&f->set);
        free(f->sha256);
        f->sha256 = NULL;
}

int manifest_files_set(ManifestFiles *f, const FileSet *set, const uint8_t (*sha256)[SHA256_DIGEST_SIZE]) {
        ManifestFiles n = { FILESET_NULL, NULL };
        int r;

        if (!set->directory) {
                manifest_files_done(f);
                return 0;
        }
        n.sha256 = calloc(set->n_files, sizeof(*n.sha256));
        if (!n.sha256)
                return -ENOMEM;
        for (size_t i = 0; i < set->n_files; i++)
                if ((r = fileset_add(&n.set, set->files[i].path, set->files[i].size)) < 0) {
                        manifest_files_done(&n);
                        return r;
                }
        memcpy(n.sha256, sha256, set->n_files * sizeof(*n.sha256));
        manifest_files_done(f);
        *f = n;
        return 0;
}

Manifest *manifest_free(Manifest *m) {
        if (!m)
                return NULL;
        manifest_files_done(&m->base.files);
        manifest_files_done(&m->target.files);
        free(m->task);
        free(m->model);
        for (size_t i = 0; i < m->n_sites; i++)
                free(m->sites[i]);
        free(m->sites);
        for (size_t i = 0; i < m->n_spans; i++) {
                free(m->spans[i].layout);
                free(m->spans[i].site);
        }
        free(m->spans);
        encryption_free(m->encryption);
        free(m);
        return NULL;
}

/* ---- writing ------------------------------------------------------------- */

static void write_files(YamlWriter *w, const ManifestFiles *f) {
        if (f->set.n_files == 0)
                return;
        yaml_writer_str(w, "files");
        yaml_writer_seq_start(w, false);
        for (size_t i = 0; i < f->set.n_files; i++) {
                yaml_writer_map_start(w, true);
                yaml_writer_kv(w, "path", f->set.files[i].path);
                yaml_writer_kv_u64(w, "size", f->set.files[i].size);
                yaml_writer_kv_sha(w, "sha256", f->sha256[i]);
                yaml_writer_map_end(w);
        }
        yaml_writer_seq_end(w);
}

/* A span's offset as the YAML has it: relative to its file when the model is a directory. */
static void write_offset(YamlWriter *w, const ManifestFiles *f, const char *file_key, const char *key, uint64_t off) {
        if (f->set.n_files > 0) {
                size_t i = fileset_locate(&f->set, off);
                yaml_writer_kv_u64(w, file_key, i);
                off -= f->set.files[i].offset;
        }
        yaml_writer_kv_u64(w, key, off);
}

const char *manifest_role_to_string(ManifestRole r) {
        return r == MANIFEST_ROLE_BASE ? "base" : r == MANIFEST_ROLE_TASK ? "task" : NULL;
}

static void write_manifest(YamlWriter *w, const Manifest *m) {
        yaml_writer_map_start(w, false);
        yaml_writer_kv_u64(w, "format", m->format);
        if (m->role == MANIFEST_ROLE_BASE)
                yaml_writer_kv(w, "role", "base");
        yaml_writer_kv(w, "task", m->task);
        if (m->model && strcmp(m->model, MANIFEST_DEFAULT_MODEL) != 0)
                yaml_writer_kv(w, "model", m->model);
        yaml_writer_kv_u64(w, "version", m->version);
        yaml_writer_kv_time(w, "created", m->created);
        if (m->expires != 0)
                yaml_writer_kv_time(w, "expires", m->expires);
        yaml_writer_kv(w, "kind", artifact_kind_to_string(m->kind));

        yaml_writer_str(w, "base");
        yaml_writer_map_start(w, false);
        yaml_writer_kv_sha(w, "sha256", m->base.sha256);
        yaml_writer_kv_u64(w, "size", m->base.size);
        yaml_writer_kv_sha(w, "layout", m->base.layout);
        write_files(w, &m->base.files);
        yaml_writer_map_end(w);

        yaml_writer_str(w, "target");
        yaml_writer_map_start(w, false);
        yaml_writer_kv_sha(w, "sha256", m->target.sha256);
        yaml_writer_kv_u64(w, "size", m->target.size);
        yaml_writer_kv_u64(w, "chunk_size", m->target.chunk_size);
        yaml_writer_kv_sha(w, "chunk_root", m->target.chunk_root);
        write_files(w, &m->target.files);
        yaml_writer_map_end(w);

        yaml_writer_str(w, "sites");
        yaml_writer_map_start(w, false);
        yaml_writer_kv_sha(w, "fingerprint", m->sites_fingerprint);
        yaml_writer_str(w, "names");
        yaml_writer_seq_start(w, false);
        for (size_t i = 0; i < m->n_sites; i++)
                yaml_writer_str(w, m->sites[i]);
        yaml_writer_seq_end(w);
        yaml_writer_map_end(w);

        yaml_writer_str(w, "payload");
        yaml_writer_map_start(w, false);
        yaml_writer_kv_u64(w, "size", m->payload.size);
        yaml_writer_kv_sha(w, "sha256", m->payload.sha256);
        yaml_writer_map_end(w);
        if (m->encryption)
                encryption_write(w, m->encryption);

        yaml_writer_str(w, "spans");
        yaml_writer_seq_start(w, false);
        for (size_t i = 0; i < m->n_spans; i++) {
                const ManifestSpan *s = &m->spans[i];
                yaml_writer_map_start(w, true);
                write_offset(w, &m->target.files, "file", "offset", s->offset);
                yaml_writer_kv_u64(w, "length", s->length);
                yaml_writer_kv(w, "encoding", span_encoding_to_string(s->encoding));
                if (s->encoding == SPAN_DELTA || span_predicted(s))
                        yaml_writer_kv(w, "layout", s->layout);
                if (s->encoding == SPAN_LORA)
                        lora_span_write(w, s);
                if (s->encoding == SPAN_RESCALE)
                        rescale_span_write(w, s);
                if (s->site)
                        yaml_writer_kv(w, "site", s->site);
                if (m->format == MANIFEST_FORMAT) {
                        yaml_writer_kv_sha(w, "base_sha256", s->base_sha256);
                } else if (s->encoding != SPAN_RAW) {
                        write_offset(w, &m->base.files, "base_file", "base_offset", s->base_offset);
                        if (s->encoding == SPAN_REF)
                                yaml_writer_kv_u64(w, "base_length", s->base_length);
                        if (s->encoding != SPAN_COPY)
                                yaml_writer_kv_sha(w, "base_sha256", s->base_sha256);
                }
                yaml_writer_kv_sha(w, "new_sha256", s->new_sha256);
                if (s->encoding != SPAN_COPY) {
                        yaml_writer_kv_u64(w, "frame_offset", s->frame_offset);
                        yaml_writer_kv_u64(w, "frame_size", s->frame_size);
                }
                yaml_writer_map_end(w);
        }
        yaml_writer_seq_end(w);
        yaml_writer_map_end(w);
}

int manifest_write(const Manifest *m, char **ret_text, size_t *ret_len, TpError *err) {
        YamlWriter *w;

        if (!task_name_valid(m->task))
                return tp_error(err, -EINVAL, "manifest: invalid task name '%s'", m->task ? m->task : "");
        if (m->model && !task_name_valid(m->model))
                return tp_error(err, -EINVAL, "manifest: invalid model name '%s'", m->model);
        if (m->version > MANIFEST_MAX_VERSION)
                return tp_error(err, -EINVAL, "manifest: version %" PRIu64 " exceeds the cap of %" PRId64, m->version,
                                MANIFEST_MAX_VERSION);
        w = yaml_writer_new(MANIFEST_MAX_BYTES);
        if (!w)
                return -ENOMEM;
        write_manifest(w, m);
        return yaml_writer_finish(w, "manifest", ret_text, ret_len, err);
}

/* ---- parsing ------------------------------------------------------------- */

#define W "manifest"

static int span_fail(const YamlNode *n, size_t idx, const ManifestSpan *s, const char *what, TpError *err) {
        return tp_error(err, -EBADMSG, W ": line %u: span #%zu (offset %" PRIu64 "): %s", n->line, idx, s->offset, what);
}

/*
 * A span's offset in a directory's space: "file" (an index into @f) and the offset in it;
 * [offset, +length) must lie inside that file. A single file: no "file" key.
 */
static int span_offset(const YamlNode *n, size_t idx, const ManifestFiles *f, const char *file_key,
                       const char *which, uint64_t *off, uint64_t length, TpError *err) {
        uint64_t i;
        int r;

        if (f->set.n_files == 0) {
                if (yaml_map_get(n, file_key))
                        return tp_error(err, -EBADMSG, W ": line %u: span #%zu: '%s' but the %s is one file", n->line,
                                        idx, file_key, which);
                return 0;
        }
        if ((r = yaml_get_u64(n, file_key, true, W, &i, err)) < 0)
                return r;
        if (i >= f->set.n_files)
                return tp_error(err, -EBADMSG, W ": line %u: span #%zu: %s %" PRIu64 " is not one of the %s's %zu files",
                                n->line, idx, file_key, i, which, f->set.n_files);
        const FileSetFile *file = &f->set.files[i];
        if (*off > file->size || length > file->size - *off)
                return tp_error(err, -EBADMSG, W ": line %u: span #%zu: [%" PRIu64 ", +%" PRIu64 ") runs past the end "
                                "of %s file '%s' (%" PRIu64 " bytes)", n->line, idx, *off, length, which, file->path,
                                file->size);
        *off += file->offset;
        return 0;
}

/* Format 1: base bytes under the span, no copies or refs; format 2 (m->format): below. */
static int parse_span(const YamlNode *n, size_t idx, const Manifest *m, ManifestSpan *s, TpError *err) {
        static const char *const keys1[] = { "file", "offset", "length", "encoding", "layout", "site", "lora",
                                             "base_sha256", "new_sha256", "frame_offset", "frame_size", NULL };
        static const char *const keys2[] = { "file", "offset", "length", "encoding", "layout", "site", "lora", "rescale",
                                             "base_file", "base_offset", "base_length", "base_sha256", "new_sha256",
                                             "frame_offset", "frame_size", NULL };
        const bool v2 = m->format == MANIFEST_FORMAT_RELOCATING;
        const char *enc = NULL, *layout = NULL, *site = NULL;
        int r;

        if (n->kind != YAML_MAPPING)
                return tp_error(err, -EBADMSG, W ": line %u: span #%zu: expected a mapping", n->line, idx);
        if ((r = yaml_check_keys(n, v2 ? keys2 : keys1, W, err)) < 0 ||
            (r = yaml_get_u64(n, "offset", true, W, &s->offset, err)) < 0 ||
            (r = yaml_get_u64(n, "length", true, W, &s->length, err)) < 0 ||
            (r = yaml_get_str(n, "encoding", true, W, &enc, err)) < 0 ||
            (r = yaml_get_str(n, "layout", false, W, &layout, err)) < 0 ||
            (r = yaml_get_str(n, "site", false, W, &site, err)) < 0 ||
            (r = yaml_get_sha256(n, "new_sha256", true, W, s->new_sha256, err)) < 0)
                return r;

        s->encoding = span_encoding_from_string(enc);
        if (s->encoding < 0 || (!v2 && s->encoding != SPAN_RAW && s->encoding != SPAN_DELTA && s->encoding != SPAN_LORA))
                return tp_error(err, -EBADMSG, W ": line %u: span #%zu: unknown encoding '%.32s' (expected %s)", n->line,
                                idx, enc, v2 ? "copy, raw, delta, ref, lora or rescale" : "raw, delta or lora");
        const bool copy = s->encoding == SPAN_COPY, raw = s->encoding == SPAN_RAW, ref = s->encoding == SPAN_REF;
        if ((r = yaml_get_sha256(n, "base_sha256", !raw && !copy, W, s->base_sha256, err)) < 0 ||
            (r = yaml_get_u64(n, "frame_offset", !copy, W, &s->frame_offset, err)) < 0 ||
            (r = yaml_get_u64(n, "frame_size", !copy, W, &s->frame_size, err)) < 0)
                return r;
        if (v2 && ((r = yaml_get_u64(n, "base_offset", !raw, W, &s->base_offset, err)) < 0 ||
                   (r = yaml_get_u64(n, "base_length", ref, W, &s->base_length, err)) < 0))
                return r;
        const bool lora = s->encoding == SPAN_LORA, rescale = s->encoding == SPAN_RESCALE;
        if ((s->encoding == SPAN_DELTA || span_predicted(s)) != (layout != NULL))
                return tp_error(err, -EBADMSG, W ": line %u: span #%zu: 'layout' is required with encodings delta, "
                                "lora and rescale and only then", n->line, idx);
        if (lora != (yaml_map_get(n, "lora") != NULL))
                return tp_error(err, -EBADMSG, W ": line %u: span #%zu: 'lora' is required with encoding lora and only "
                                "then", n->line, idx);
        if (rescale != (yaml_map_get(n, "rescale") != NULL))
                return tp_error(err, -EBADMSG, W ": line %u: span #%zu: 'rescale' is required with encoding rescale and "
                                "only then", n->line, idx);
        if (lora && (r = lora_span_parse(n, idx, layout, s, err)) < 0)
                return r;
        if (rescale && (r = rescale_span_parse(n, idx, layout, s, err)) < 0)
                return r;
        if (s->length == 0)
                return tp_error(err, -EBADMSG, W ": line %u: span #%zu: empty span", n->line, idx);
        if (v2) {
                /* Every key that does not belong to the encoding is refused, so one text has one meaning. */
                if ((raw || copy) && yaml_map_get(n, "base_sha256"))
                        return span_fail(n, idx, s, "base_sha256 belongs only to delta and ref spans", err);
                if (raw && yaml_map_get(n, "base_offset"))
                        return span_fail(n, idx, s, "a raw span reads no base bytes (no base_offset)", err);
                if (!ref && yaml_map_get(n, "base_length"))
                        return span_fail(n, idx, s, "base_length belongs only to ref spans", err);
                if (copy && (yaml_map_get(n, "frame_offset") || yaml_map_get(n, "frame_size")))
                        return span_fail(n, idx, s, "a copy has no frame", err);
                if (ref && (s->base_length == 0 || s->base_length > SPAN_REF_MAX))
                        return span_fail(n, idx, s, "a ref span's base_length must be 1 .. 1048576 bytes", err);
                if (!ref)
                        s->base_length = raw ? 0 : s->length;
                if (copy)
                        memcpy(s->base_sha256, s->new_sha256, SHA256_DIGEST_SIZE);
                if (!raw && (r = span_offset(n, idx, &m->base.files, "base_file", "base", &s->base_offset,
                                             s->base_length, err)) < 0)
                        return r;
                if (raw && yaml_map_get(n, "base_file"))
                        return span_fail(n, idx, s, "a raw span reads no base bytes (no base_file)", err);
                if (s->base_offset > m->base.size || s->base_length > m->base.size - s->base_offset) {
                        char msg[160];
                        snprintf(msg, sizeof(msg), "its base bytes [%" PRIu64 ", +%" PRIu64
                                 ") lie outside the base (%" PRIu64 " bytes)", s->base_offset, s->base_length,
                                 m->base.size);
                        return span_fail(n, idx, s, msg, err);
                }
                if ((r = span_offset(n, idx, &m->target.files, "file", "target", &s->offset, s->length, err)) < 0)
                        return r;
        } else {
                if ((r = span_offset(n, idx, &m->target.files, "file", "target", &s->offset, s->length, err)) < 0)
                        return r;
                /* The bytes under the span, as far as the base reaches. */
                s->base_offset = s->offset;
                s->base_length = s->offset >= m->base.size ? 0 :
                                 s->length < m->base.size - s->offset ? s->length : m->base.size - s->offset;
        }
        if (layout && !(s->layout = strdup(layout)))
                return -ENOMEM;
        if (site && !(s->site = strdup(site)))
                return -ENOMEM;
        return 0;
}

static int parse_spans(const YamlNode *seq, Manifest *m, TpError *err) {
        const bool v2 = m->format == MANIFEST_FORMAT_RELOCATING;
        uint64_t next_frame = 0, prev_end = 0;

        if (seq->n > MANIFEST_MAX_SPANS)
                return tp_error(err, -E2BIG, W ": line %u: %zu spans exceed the cap of %u", seq->line, seq->n,
                                MANIFEST_MAX_SPANS);
        m->spans = calloc(seq->n ? seq->n : 1, sizeof(*m->spans));
        if (!m->spans)
                return -ENOMEM;
        for (size_t i = 0; i < seq->n; i++) {
                ManifestSpan *s = &m->spans[i];
                const YamlNode *n = seq->items[i];
                int r;

                m->n_spans = i + 1;
                r = parse_span(n, i, m, s, err);
                if (r < 0)
                        return r;
                if (s->offset < prev_end)
                        return tp_error(err, -EBADMSG, W ": line %u: span #%zu at offset %" PRIu64
                                        " overlaps or precedes the previous span (which ends at %" PRIu64 ")",
                                        n->line, i, s->offset, prev_end);
                if (v2 && s->offset > prev_end)
                        return tp_error(err, -EBADMSG, W ": line %u: span #%zu at offset %" PRIu64
                                        " leaves a hole in the target: [%" PRIu64 ", %" PRIu64 ") is in no span",
                                        n->line, i, s->offset, prev_end, s->offset);
                if (s->offset > m->target.size || s->length > m->target.size - s->offset)
                        return tp_error(err, -EBADMSG, W ": line %u: span #%zu [%" PRIu64 ", +%" PRIu64
                                        ") runs past the target size %" PRIu64, n->line, i, s->offset, s->length,
                                        m->target.size);
                if (s->encoding == SPAN_COPY)
                        s->frame_offset = next_frame;
                else if (s->frame_offset != next_frame)
                        return tp_error(err, -EBADMSG, W ": line %u: span #%zu: frame at payload offset %" PRIu64
                                        ", expected %" PRIu64 " (frames are back to back in span order)",
                                        n->line, i, s->frame_offset, next_frame);
                else if (s->frame_size == 0 || s->frame_size > m->payload.size - next_frame)
                        return tp_error(err, -EBADMSG, W ": line %u: span #%zu: frame size %" PRIu64
                                        " does not fit in the payload (%" PRIu64 " bytes)", n->line, i,
                                        s->frame_size, m->payload.size);
                next_frame += s->frame_size;
                prev_end = s->offset + s->length;
        }
        if (v2 && prev_end != m->target.size)
                return tp_error(err, -EBADMSG, W ": line %u: the spans end at offset %" PRIu64 ", the target is %" PRIu64
                                " bytes: [%" PRIu64 ", %" PRIu64 ") is in no span", seq->line, prev_end, m->target.size,
                                prev_end, m->target.size);
        if (next_frame != m->payload.size)
                return tp_error(err, -EBADMSG, W ": frames add up to %" PRIu64 " bytes, payload.size says %" PRIu64,
                                next_frame, m->payload.size);
        return 0;
}

/* A directory's file list (absent: one file); the digest over it must be @sha256 and the sizes add up to @size. */
static int parse_files(const YamlNode *parent, const char *which, const uint8_t sha256[SHA256_DIGEST_SIZE],
                       uint64_t size, ManifestFiles *ret, TpError *err) {
        static const char *const keys[] = { "path", "size", "sha256", NULL };
        ManifestFiles f = { FILESET_NULL, NULL };
        const YamlNode *seq = NULL;
        uint8_t d[SHA256_DIGEST_SIZE];
        int r;

        if ((r = yaml_get_seq(parent, "files", false, W, &seq, err)) < 0)
                return r;
        if (!seq)
                return 0;
        if (seq->n == 0 || seq->n > FILESET_MAX_FILES)
                return tp_error(err, -EBADMSG, W ": line %u: %s.files: %zu files (expected 1 .. %u)", seq->line, which,
                                seq->n, FILESET_MAX_FILES);
        f.sha256 = calloc(seq->n, sizeof(*f.sha256));
        if (!f.sha256)
                return -ENOMEM;
        for (size_t i = 0; i < seq->n; i++) {
                const YamlNode *n = seq->items[i];
                const char *path;
                uint64_t fsize;

                if (n->kind != YAML_MAPPING)
                        r = tp_error(err, -EBADMSG, W ": line %u: %s.files #%zu: expected a mapping", n->line, which, i);
                else if ((r = yaml_check_keys(n, keys, W " file", err)) >= 0 &&
                         (r = yaml_get_str(n, "path", true, W, &path, err)) >= 0 &&
                         (r = yaml_get_u64(n, "size", true, W, &fsize, err)) >= 0 &&
                         (r = yaml_get_sha256(n, "sha256", true, W, f.sha256[i], err)) >= 0) {
                        r = fileset_add(&f.set, path, fsize);
                        if (r == -EINVAL)
                                r = tp_error(err, -EBADMSG, W ": line %u: %s.files #%zu: path '%.80s' is not a relative "
                                             "path inside the model, or is out of order (files are sorted by path, "
                                             "each once)", n->line, which, i, path);
                        else if (r < 0)
                                r = tp_error(err, r == -EOVERFLOW ? -EBADMSG : r, W ": line %u: %s.files: %s", n->line,
                                             which, r == -EOVERFLOW ? "sizes add up past 2^64" : strerror(-r));
                }
                if (r < 0) {
                        manifest_files_done(&f);
                        return r;
                }
        }
        fileset_digest(&f.set, (const uint8_t (*)[SHA256_DIGEST_SIZE]) f.sha256, d);
        if (f.set.size != size || memcmp(d, sha256, sizeof(d)) != 0) {
                r = tp_error(err, -EBADMSG, W ": line %u: %s.files %s", seq->line, which,
                             f.set.size != size ? "do not add up to its size" : "do not match its sha256 (the digest "
                                                                                "over the set)");
                manifest_files_done(&f);
                return r;
        }
        *ret = f;
        return 0;
}

static bool same_files(const ManifestFiles *a, const ManifestFiles *b) {
        if (a->set.n_files != b->set.n_files)
                return false;
        for (size_t i = 0; i < a->set.n_files; i++)
                if (strcmp(a->set.files[i].path, b->set.files[i].path) != 0 || a->set.files[i].size != b->set.files[i].size)
                        return false;
        return true;
}

static int parse_sites(const YamlNode *sites, Manifest *m, TpError *err) {
        static const char *const keys[] = { "fingerprint", "names", NULL };
        const YamlNode *names;
        uint8_t fp[SHA256_DIGEST_SIZE];
        int r;

        if ((r = yaml_check_keys(sites, keys, W " sites", err)) < 0 ||
            (r = yaml_get_sha256(sites, "fingerprint", true, W, m->sites_fingerprint, err)) < 0 ||
            (r = yaml_get_seq(sites, "names", true, W, &names, err)) < 0)
                return r;
        if (names->n > MANIFEST_MAX_SITES)
                return tp_error(err, -E2BIG, W ": line %u: %zu sites exceed the cap of %u", names->line, names->n,
                                MANIFEST_MAX_SITES);
        m->sites = calloc(names->n ? names->n : 1, sizeof(char *));
        if (!m->sites)
                return -ENOMEM;
        for (size_t i = 0; i < names->n; i++) {
                const YamlNode *n = names->items[i];
                if (n->kind != YAML_SCALAR)
                        return tp_error(err, -EBADMSG, W ": line %u: site names must be scalars", n->line);
                if (i > 0 && strcmp(names->items[i - 1]->scalar, n->scalar) >= 0)
                        return tp_error(err, -EBADMSG, W ": line %u: site '%.64s' is out of order or repeated",
                                        n->line, n->scalar);
                if (!(m->sites[i] = strdup(n->scalar)))
                        return -ENOMEM;
                m->n_sites = i + 1;
        }
        sites_fingerprint(m->sites, m->n_sites, fp);
        if (memcmp(fp, m->sites_fingerprint, sizeof(fp)) != 0)
                return tp_error(err, -EBADMSG, W ": line %u: sites.fingerprint does not match the site names",
                                sites->line);
        return 0;
}

int manifest_parse(const char *text, size_t len, Manifest **ret, TpError *err) {
        static const char *const keys[] = { "format", "role", "task", "model", "version", "created", "expires",
                                            "kind", "base", "target", "sites", "payload", "encryption", "spans",
                                            NULL };
        static const char *const base_keys[] = { "sha256", "size", "layout", "files", NULL };
        static const char *const target_keys[] = { "sha256", "size", "chunk_size", "chunk_root", "files", NULL };
        static const char *const payload_keys[] = { "size", "sha256", NULL };
        _cleanup_(yaml_node_freep) YamlNode *root = NULL;
        _cleanup_(manifest_freep) Manifest *m = NULL;
        const YamlNode *base, *target, *sites, *payload, *spans, *encryption = NULL;
        const char *task, *model = MANIFEST_DEFAULT_MODEL, *kind, *role = "task";
        int r;

        r = yaml_doc_parse(text, len, MANIFEST_MAX_BYTES, W, &root, err);
        if (r < 0)
                return r;
        m = calloc(1, sizeof(*m));
        if (!m)
                return -ENOMEM;

        if ((r = yaml_check_keys(root, keys, W, err)) < 0 ||
            (r = yaml_get_u64(root, "format", true, W, &m->format, err)) < 0)
                return r;
        if (m->format != MANIFEST_FORMAT && m->format != MANIFEST_FORMAT_RELOCATING)
                return tp_error(err, -EPROTONOSUPPORT, W ": format %" PRIu64 " is not supported (this build reads 1 and %d)",
                                m->format, MANIFEST_FORMAT_MAX);
        if ((r = yaml_get_str(root, "role", false, W, &role, err)) < 0 ||
            (r = yaml_get_str(root, "task", true, W, &task, err)) < 0 ||
            (r = yaml_get_str(root, "model", false, W, &model, err)) < 0 ||
            (r = yaml_get_u64(root, "version", true, W, &m->version, err)) < 0 ||
            (r = yaml_get_time(root, "created", true, W, &m->created, err)) < 0 ||
            (r = yaml_get_time(root, "expires", false, W, &m->expires, err)) < 0 ||
            (r = yaml_get_str(root, "kind", true, W, &kind, err)) < 0 ||
            (r = yaml_get_map(root, "base", true, W, &base, err)) < 0 ||
            (r = yaml_get_map(root, "target", true, W, &target, err)) < 0 ||
            (r = yaml_get_map(root, "sites", true, W, &sites, err)) < 0 ||
            (r = yaml_get_map(root, "payload", true, W, &payload, err)) < 0 ||
            (r = yaml_get_map(root, "encryption", false, W, &encryption, err)) < 0 ||
            (r = yaml_get_seq(root, "spans", true, W, &spans, err)) < 0)
                return r;
        if (m->version > MANIFEST_MAX_VERSION)
                return tp_error(err, -EBADMSG, W ": version %" PRIu64 " exceeds the cap of %" PRId64, m->version,
                                MANIFEST_MAX_VERSION);
        if (!task_name_valid(task))
                return tp_error(err, -EBADMSG, W ": invalid task name '%.80s' (expected [a-z0-9][a-z0-9._-]{0,63})",
                                task);
        if (!task_name_valid(model))
                return tp_error(err, -EBADMSG, W ": invalid model name '%.80s' (expected [a-z0-9][a-z0-9._-]{0,63})",
                                model);
        if (!(m->task = strdup(task)) || !(m->model = strdup(model)))
                return -ENOMEM;
        m->kind = artifact_kind_from_string(kind);
        if (m->kind < 0)
                return tp_error(err, -EBADMSG, W ": unknown artifact kind '%.32s'", kind);
        if (strcmp(role, "task") == 0)
                m->role = MANIFEST_ROLE_TASK;
        else if (strcmp(role, "base") == 0)
                m->role = MANIFEST_ROLE_BASE;
        else
                return tp_error(err, -EBADMSG, W ": role '%.32s' is neither task nor base", role);

        if ((r = yaml_check_keys(base, base_keys, W " base", err)) < 0 ||
            (r = yaml_get_sha256(base, "sha256", true, W, m->base.sha256, err)) < 0 ||
            (r = yaml_get_u64(base, "size", true, W, &m->base.size, err)) < 0 ||
            (r = yaml_get_sha256(base, "layout", true, W, m->base.layout, err)) < 0 ||
            (r = yaml_check_keys(target, target_keys, W " target", err)) < 0 ||
            (r = yaml_get_sha256(target, "sha256", true, W, m->target.sha256, err)) < 0 ||
            (r = yaml_get_u64(target, "size", true, W, &m->target.size, err)) < 0 ||
            (r = yaml_get_u64(target, "chunk_size", true, W, &m->target.chunk_size, err)) < 0 ||
            (r = yaml_get_sha256(target, "chunk_root", true, W, m->target.chunk_root, err)) < 0 ||
            (r = yaml_check_keys(payload, payload_keys, W " payload", err)) < 0 ||
            (r = yaml_get_u64(payload, "size", true, W, &m->payload.size, err)) < 0 ||
            (r = yaml_get_sha256(payload, "sha256", true, W, m->payload.sha256, err)) < 0)
                return r;
        if (m->target.chunk_size < 4096 || m->target.chunk_size > (64u << 20) ||
            (m->target.chunk_size & (m->target.chunk_size - 1)))
                return tp_error(err, -EBADMSG, W ": target.chunk_size %" PRIu64
                                " is not a power of two between 4 KiB and 64 MiB", m->target.chunk_size);

        if ((r = parse_files(base, "base", m->base.sha256, m->base.size, &m->base.files, err)) < 0 ||
            (r = parse_files(target, "target", m->target.sha256, m->target.size, &m->target.files, err)) < 0)
                return r;
        /* Nothing to build from: only a full base bundle, relocating (its raw spans tile the target). */
        if (m->base.size == 0 && (m->role != MANIFEST_ROLE_BASE || m->format != MANIFEST_FORMAT_RELOCATING))
                return tp_error(err, -EBADMSG, W ": base.size is 0, which only a full base bundle (role: base, "
                                "format 2) may have");
        /* In place: the target is the base's files, patched. */
        if (m->format == MANIFEST_FORMAT && !same_files(&m->base.files, &m->target.files))
                return tp_error(err, -EBADMSG, W ": format 1 patches in place, but base.files and target.files differ");

        if ((r = parse_sites(sites, m, err)) < 0 || (r = parse_spans(spans, m, err)) < 0)
                return r;
        if (encryption && (r = encryption_parse(encryption, &m->encryption, err)) < 0)
                return r;
        /* A sealed frame is its zstd frame and a tag. */
        for (size_t i = 0; m->encryption && i < m->n_spans; i++)
                if (m->spans[i].frame_size > 0 && m->spans[i].frame_size <= ENCRYPTION_TAG_SIZE)
                        return tp_error(err, -EBADMSG, W ": span #%zu (offset %" PRIu64 "): its frame of %" PRIu64
                                        " bytes cannot hold an encrypted frame and its %d-byte tag", i,
                                        m->spans[i].offset, m->spans[i].frame_size, ENCRYPTION_TAG_SIZE);

        *ret = TAKE_PTR(m);
        return 0;
}

/* ---- the section: format 2 compressed -------------------------------------- */

int manifest_section_write(const Manifest *m, bool compress, char **ret_section, size_t *ret_len, TpError *err) {
        _cleanup_free_ char *text = NULL, *z = NULL;
        size_t len, cap, n;
        ZSTD_CCtx *c;
        int r;

        if ((r = manifest_write(m, &text, &len, err)) < 0)
                return r;
        if (m->format != MANIFEST_FORMAT_RELOCATING && !compress) {
                *ret_section = TAKE_PTR(text);
                *ret_len = len;
                return 0;
        }
        cap = ZSTD_compressBound(len);
        z = malloc(cap);
        c = ZSTD_createCCtx();
        if (!z || !c) {
                ZSTD_freeCCtx(c);
                return -ENOMEM;
        }
        /* One-shot: the frame header carries the size, which the reader checks before it allocates. */
        ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, 19);
        ZSTD_CCtx_setParameter(c, ZSTD_c_windowLog, MANIFEST_WINDOW_LOG);
        n = ZSTD_compress2(c, z, cap, text, len);
        ZSTD_freeCCtx(c);
        if (ZSTD_isError(n))
                return tp_error(err, -EIO, "manifest: zstd: %s", ZSTD_getErrorName(n));
        *ret_section = TAKE_PTR(z);
        *ret_len = n;
        return 0;
}

int manifest_section_parse(uint64_t format, bool compressed, const char *section, size_t len, uint64_t max_text,
                           Manifest **ret, TpError *err) {
        _cleanup_(manifest_freep) Manifest *m = NULL;
        _cleanup_free_ char *text = NULL;
        unsigned long long size;
        ZSTD_DCtx *d;
        size_t n;
        int r;

        if (!compressed && format == MANIFEST_FORMAT_RELOCATING)
                return tp_error(err, -EBADMSG, W ": a format-2 manifest is always compressed");
        if (!compressed)
                return manifest_parse(section, len, ret, err);
        if (max_text == 0 || max_text > MANIFEST_MAX_BYTES)
                max_text = MANIFEST_MAX_BYTES;
        /* The magic itself: a skippable frame is a zstd frame too, but holds no manifest. */
        if (len < 4 || memcmp(section, "\x28\xb5\x2f\xfd", 4) != 0)
                return tp_error(err, -EBADMSG, W ": a compressed manifest is one zstd frame of YAML; this section "
                                "does not start with the zstd magic 28 b5 2f fd");
        size = ZSTD_getFrameContentSize(section, len);
        if (size == ZSTD_CONTENTSIZE_ERROR)
                return tp_error(err, -EBADMSG, W ": the zstd frame header is damaged or truncated");
        if (size == ZSTD_CONTENTSIZE_UNKNOWN || size == 0)
                return tp_error(err, -EBADMSG, W ": the zstd frame declares %s", size ? "no decoded size" :
                                "an empty manifest");
        if (size > max_text)
                return tp_error(err, -EBADMSG, W ": the zstd frame declares %llu bytes of YAML, more than the cap of %"
                                PRIu64, size, max_text);
        n = ZSTD_findFrameCompressedSize(section, len);
        if (ZSTD_isError(n))
                return tp_error(err, -EBADMSG, W ": the zstd frame is damaged or truncated: %s", ZSTD_getErrorName(n));
        if (n != len)
                return tp_error(err, -EBADMSG, W ": %zu bytes after the zstd frame (%zu bytes) in the manifest section",
                                len - n, n);
        text = malloc((size_t) size);
        d = ZSTD_createDCtx();
        if (!text || !d) {
                ZSTD_freeDCtx(d);
                return -ENOMEM;
        }
        ZSTD_DCtx_setParameter(d, ZSTD_d_windowLogMax, MANIFEST_WINDOW_LOG);
        n = ZSTD_decompressDCtx(d, text, (size_t) size, section, len);
        ZSTD_freeDCtx(d);
        if (ZSTD_isError(n))
                return tp_error(err, -EBADMSG, W ": zstd: %s", ZSTD_getErrorName(n));
        if (n != size)
                return tp_error(err, -EBADMSG, W ": the zstd frame decodes to %zu bytes, its header says %llu", n, size);
        if ((r = manifest_parse(text, n, &m, err)) < 0)
                return r;
        if (m->format != format)
                return tp_error(err, -EBADMSG, W ": a format-%" PRIu64 " manifest in the section of a format-%" PRIu64
                                " bundle", m->format, format);
        *ret = TAKE_PTR(m);
        return 0;
}
