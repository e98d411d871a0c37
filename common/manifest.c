/* SPDX-License-Identifier: MIT */

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <yaml.h>

#include "manifest.h"
#include "yaml-doc.h"

static const char *const span_encoding_table[_SPAN_ENCODING_MAX] = {
        [SPAN_RAW] = "raw",
        [SPAN_DELTA] = "delta",
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

bool task_name_valid(const char *name) {
        size_t n = name ? strlen(name) : 0;

        if (n == 0 || n > TASK_NAME_MAX)
                return false;
        for (size_t i = 0; i < n; i++) {
                char c = name[i];
                bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
                if (!alnum && (i == 0 || (c != '.' && c != '_' && c != '-')))
                        return false;
        }
        return true;
}

void sites_fingerprint(char *const *sorted_names, size_t n, uint8_t ret[SHA256_DIGEST_SIZE]) {
        Sha256 s;

        sha256_init(&s);
        for (size_t i = 0; i < n; i++)
                sha256_update(&s, sorted_names[i], strlen(sorted_names[i]) + 1);
        sha256_final(&s, ret);
}

Manifest *manifest_free(Manifest *m) {
        if (!m)
                return NULL;
        free(m->task);
        for (size_t i = 0; i < m->n_sites; i++)
                free(m->sites[i]);
        free(m->sites);
        for (size_t i = 0; i < m->n_spans; i++) {
                free(m->spans[i].layout);
                free(m->spans[i].site);
        }
        free(m->spans);
        free(m);
        return NULL;
}

/* ---- writing ------------------------------------------------------------- */

typedef struct Out {
        char *buf;
        size_t len, cap;
        bool overflow;
} Out;

static int out_write(void *data, unsigned char *buffer, size_t size) {
        Out *o = data;

        if (o->len + size > MANIFEST_MAX_BYTES) {
                o->overflow = true;
                return 0;
        }
        if (o->len + size > o->cap) {
                size_t cap = o->cap ? o->cap : 4096;
                while (cap < o->len + size)
                        cap *= 2;
                char *p = realloc(o->buf, cap);
                if (!p)
                        return 0;
                o->buf = p;
                o->cap = cap;
        }
        memcpy(o->buf + o->len, buffer, size);
        o->len += size;
        return 1;
}

static bool emit(yaml_emitter_t *e, yaml_event_t *ev, bool ok) {
        return ok && yaml_emitter_emit(e, ev);
}

static bool emit_str(yaml_emitter_t *e, const char *s) {
        yaml_event_t ev;
        return emit(e, &ev,
                    yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *) s, (int) strlen(s), 1, 1,
                                                 YAML_ANY_SCALAR_STYLE));
}

static bool emit_map_start(yaml_emitter_t *e, bool flow) {
        yaml_event_t ev;
        return emit(e, &ev,
                    yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1,
                                                        flow ? YAML_FLOW_MAPPING_STYLE : YAML_BLOCK_MAPPING_STYLE));
}

static bool emit_map_end(yaml_emitter_t *e) {
        yaml_event_t ev;
        return emit(e, &ev, yaml_mapping_end_event_initialize(&ev));
}

static bool emit_seq_start(yaml_emitter_t *e, bool flow) {
        yaml_event_t ev;
        return emit(e, &ev,
                    yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1,
                                                         flow ? YAML_FLOW_SEQUENCE_STYLE : YAML_BLOCK_SEQUENCE_STYLE));
}

static bool emit_seq_end(yaml_emitter_t *e) {
        yaml_event_t ev;
        return emit(e, &ev, yaml_sequence_end_event_initialize(&ev));
}

static bool emit_kv(yaml_emitter_t *e, const char *key, const char *value) {
        return emit_str(e, key) && emit_str(e, value);
}

static bool emit_kv_u64(yaml_emitter_t *e, const char *key, uint64_t v) {
        char buf[32];
        snprintf(buf, sizeof(buf), "%" PRIu64, v);
        return emit_kv(e, key, buf);
}

static bool emit_kv_sha(yaml_emitter_t *e, const char *key, const uint8_t d[SHA256_DIGEST_SIZE]) {
        char hex[SHA256_HEX_SIZE];
        sha256_to_hex(d, hex);
        return emit_kv(e, key, hex);
}

static bool emit_kv_time(yaml_emitter_t *e, const char *key, int64_t t) {
        char buf[21];
        format_time_utc(t, buf);
        return emit_kv(e, key, buf);
}

static bool emit_manifest(yaml_emitter_t *e, const Manifest *m) {
        yaml_event_t ev;
        bool ok = emit(e, &ev, yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING)) &&
                  emit(e, &ev, yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 0)) &&
                  emit_map_start(e, false) &&
                  emit_kv_u64(e, "format", m->format) && emit_kv(e, "task", m->task) &&
                  emit_kv_u64(e, "version", m->version) && emit_kv_time(e, "created", m->created) &&
                  (m->expires == 0 || emit_kv_time(e, "expires", m->expires)) &&
                  emit_kv(e, "kind", artifact_kind_to_string(m->kind));

        ok = ok && emit_str(e, "base") && emit_map_start(e, false) && emit_kv_sha(e, "sha256", m->base.sha256) &&
             emit_kv_u64(e, "size", m->base.size) && emit_kv_sha(e, "layout", m->base.layout) && emit_map_end(e);

        ok = ok && emit_str(e, "target") && emit_map_start(e, false) &&
             emit_kv_sha(e, "sha256", m->target.sha256) && emit_kv_u64(e, "size", m->target.size) &&
             emit_kv_u64(e, "chunk_size", m->target.chunk_size) &&
             emit_kv_sha(e, "chunk_root", m->target.chunk_root) && emit_map_end(e);

        ok = ok && emit_str(e, "sites") && emit_map_start(e, false) &&
             emit_kv_sha(e, "fingerprint", m->sites_fingerprint) && emit_str(e, "names") && emit_seq_start(e, false);
        for (size_t i = 0; ok && i < m->n_sites; i++)
                ok = emit_str(e, m->sites[i]);
        ok = ok && emit_seq_end(e) && emit_map_end(e);

        ok = ok && emit_str(e, "payload") && emit_map_start(e, false) && emit_kv_u64(e, "size", m->payload.size) &&
             emit_kv_sha(e, "sha256", m->payload.sha256) && emit_map_end(e);

        ok = ok && emit_str(e, "spans") && emit_seq_start(e, false);
        for (size_t i = 0; ok && i < m->n_spans; i++) {
                const ManifestSpan *s = &m->spans[i];
                ok = emit_map_start(e, true) && emit_kv_u64(e, "offset", s->offset) &&
                     emit_kv_u64(e, "length", s->length) &&
                     emit_kv(e, "encoding", span_encoding_to_string(s->encoding)) &&
                     (s->encoding != SPAN_DELTA || emit_kv(e, "layout", s->layout)) &&
                     (!s->site || emit_kv(e, "site", s->site)) && emit_kv_sha(e, "base_sha256", s->base_sha256) &&
                     emit_kv_sha(e, "new_sha256", s->new_sha256) && emit_kv_u64(e, "frame_offset", s->frame_offset) &&
                     emit_kv_u64(e, "frame_size", s->frame_size) && emit_map_end(e);
        }
        ok = ok && emit_seq_end(e) && emit_map_end(e) &&
             emit(e, &ev, yaml_document_end_event_initialize(&ev, 1)) &&
             emit(e, &ev, yaml_stream_end_event_initialize(&ev));
        return ok;
}

int manifest_write(const Manifest *m, char **ret_text, size_t *ret_len, TpError *err) {
        yaml_emitter_t e;
        Out out = {};

        if (!task_name_valid(m->task))
                return tp_error(err, -EINVAL, "manifest: invalid task name '%s'", m->task ? m->task : "");
        if (!yaml_emitter_initialize(&e))
                return -ENOMEM;
        yaml_emitter_set_output(&e, out_write, &out);
        yaml_emitter_set_width(&e, -1);
        yaml_emitter_set_unicode(&e, 1);
        bool ok = emit_manifest(&e, m);
        yaml_emitter_delete(&e);
        if (!ok) {
                free(out.buf);
                if (out.overflow)
                        return tp_error(err, -EMSGSIZE, "manifest: larger than the %u-byte cap (too many spans?)",
                                        MANIFEST_MAX_BYTES);
                return tp_error(err, -ENOMEM, "manifest: could not serialise (out of memory)");
        }
        *ret_text = out.buf;
        *ret_len = out.len;
        return 0;
}

/* ---- parsing ------------------------------------------------------------- */

#define W "manifest"

static int parse_span(const YamlNode *n, size_t idx, ManifestSpan *s, TpError *err) {
        static const char *const keys[] = { "offset", "length", "encoding", "layout", "site", "base_sha256",
                                            "new_sha256", "frame_offset", "frame_size", NULL };
        const char *enc = NULL, *layout = NULL, *site = NULL;
        int r;

        if (n->kind != YAML_MAPPING)
                return tp_error(err, -EBADMSG, W ": line %u: span #%zu: expected a mapping", n->line, idx);
        if ((r = yaml_check_keys(n, keys, W, err)) < 0 ||
            (r = yaml_get_u64(n, "offset", true, W, &s->offset, err)) < 0 ||
            (r = yaml_get_u64(n, "length", true, W, &s->length, err)) < 0 ||
            (r = yaml_get_str(n, "encoding", true, W, &enc, err)) < 0 ||
            (r = yaml_get_str(n, "layout", false, W, &layout, err)) < 0 ||
            (r = yaml_get_str(n, "site", false, W, &site, err)) < 0 ||
            (r = yaml_get_sha256(n, "base_sha256", true, W, s->base_sha256, err)) < 0 ||
            (r = yaml_get_sha256(n, "new_sha256", true, W, s->new_sha256, err)) < 0 ||
            (r = yaml_get_u64(n, "frame_offset", true, W, &s->frame_offset, err)) < 0 ||
            (r = yaml_get_u64(n, "frame_size", true, W, &s->frame_size, err)) < 0)
                return r;

        s->encoding = span_encoding_from_string(enc);
        if (s->encoding < 0)
                return tp_error(err, -EBADMSG, W ": line %u: span #%zu: unknown encoding '%.32s' (expected raw or delta)",
                                n->line, idx, enc);
        if ((s->encoding == SPAN_DELTA) != (layout != NULL))
                return tp_error(err, -EBADMSG, W ": line %u: span #%zu: 'layout' is required with encoding delta and only then",
                                n->line, idx);
        if (s->length == 0)
                return tp_error(err, -EBADMSG, W ": line %u: span #%zu: empty span", n->line, idx);
        if (layout && !(s->layout = strdup(layout)))
                return -ENOMEM;
        if (site && !(s->site = strdup(site)))
                return -ENOMEM;
        return 0;
}

static int parse_spans(const YamlNode *seq, Manifest *m, TpError *err) {
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
                r = parse_span(n, i, s, err);
                if (r < 0)
                        return r;
                if (s->offset < prev_end)
                        return tp_error(err, -EBADMSG, W ": line %u: span #%zu at offset %" PRIu64
                                        " overlaps or precedes the previous span (which ends at %" PRIu64 ")",
                                        n->line, i, s->offset, prev_end);
                if (s->offset > m->target.size || s->length > m->target.size - s->offset)
                        return tp_error(err, -EBADMSG, W ": line %u: span #%zu [%" PRIu64 ", +%" PRIu64
                                        ") runs past the target size %" PRIu64, n->line, i, s->offset, s->length,
                                        m->target.size);
                if (s->frame_offset != next_frame)
                        return tp_error(err, -EBADMSG, W ": line %u: span #%zu: frame at payload offset %" PRIu64
                                        ", expected %" PRIu64 " (frames are back to back in span order)",
                                        n->line, i, s->frame_offset, next_frame);
                if (s->frame_size == 0 || s->frame_size > m->payload.size - next_frame)
                        return tp_error(err, -EBADMSG, W ": line %u: span #%zu: frame size %" PRIu64
                                        " does not fit in the payload (%" PRIu64 " bytes)", n->line, i,
                                        s->frame_size, m->payload.size);
                next_frame += s->frame_size;
                prev_end = s->offset + s->length;
        }
        if (next_frame != m->payload.size)
                return tp_error(err, -EBADMSG, W ": frames add up to %" PRIu64 " bytes, payload.size says %" PRIu64,
                                next_frame, m->payload.size);
        return 0;
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
        static const char *const keys[] = { "format", "task", "version", "created", "expires", "kind", "base",
                                            "target", "sites", "payload", "spans", NULL };
        static const char *const base_keys[] = { "sha256", "size", "layout", NULL };
        static const char *const target_keys[] = { "sha256", "size", "chunk_size", "chunk_root", NULL };
        static const char *const payload_keys[] = { "size", "sha256", NULL };
        _cleanup_(yaml_node_freep) YamlNode *root = NULL;
        _cleanup_(manifest_freep) Manifest *m = NULL;
        const YamlNode *base, *target, *sites, *payload, *spans;
        const char *task, *kind;
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
        if (m->format != MANIFEST_FORMAT)
                return tp_error(err, -EPROTONOSUPPORT, W ": format %" PRIu64 " is not supported (this build reads %d)",
                                m->format, MANIFEST_FORMAT);
        if ((r = yaml_get_str(root, "task", true, W, &task, err)) < 0 ||
            (r = yaml_get_u64(root, "version", true, W, &m->version, err)) < 0 ||
            (r = yaml_get_time(root, "created", true, W, &m->created, err)) < 0 ||
            (r = yaml_get_time(root, "expires", false, W, &m->expires, err)) < 0 ||
            (r = yaml_get_str(root, "kind", true, W, &kind, err)) < 0 ||
            (r = yaml_get_map(root, "base", true, W, &base, err)) < 0 ||
            (r = yaml_get_map(root, "target", true, W, &target, err)) < 0 ||
            (r = yaml_get_map(root, "sites", true, W, &sites, err)) < 0 ||
            (r = yaml_get_map(root, "payload", true, W, &payload, err)) < 0 ||
            (r = yaml_get_seq(root, "spans", true, W, &spans, err)) < 0)
                return r;
        if (!task_name_valid(task))
                return tp_error(err, -EBADMSG, W ": invalid task name '%.80s' (expected [a-z0-9][a-z0-9._-]{0,63})",
                                task);
        if (!(m->task = strdup(task)))
                return -ENOMEM;
        m->kind = artifact_kind_from_string(kind);
        if (m->kind < 0)
                return tp_error(err, -EBADMSG, W ": unknown artifact kind '%.32s'", kind);

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

        if ((r = parse_sites(sites, m, err)) < 0 || (r = parse_spans(spans, m, err)) < 0)
                return r;

        *ret = TAKE_PTR(m);
        return 0;
}
