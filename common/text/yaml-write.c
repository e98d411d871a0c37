/* SPDX-License-Identifier: MIT */

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <yaml.h>

#include "yaml-doc.h"
#include "yaml-write.h"

struct YamlWriter {
        yaml_emitter_t emitter;
        char *buf;
        size_t len, cap, max;
        bool ok;
        bool overflow;
};

static int out_write(void *data, unsigned char *buffer, size_t size) {
        YamlWriter *w = data;

        if (w->len + size > w->max) {
                w->overflow = true;
                return 0;
        }
        if (w->len + size > w->cap) {
                size_t cap = w->cap ? w->cap : 4096;
                while (cap < w->len + size)
                        cap *= 2;
                char *p = realloc(w->buf, cap);
                if (!p)
                        return 0;
                w->buf = p;
                w->cap = cap;
        }
        memcpy(w->buf + w->len, buffer, size);
        w->len += size;
        return 1;
}

/* Emit @ev, which the caller initialised (@initialised: libyaml's answer) only when w->ok held. */
static void emit(YamlWriter *w, yaml_event_t *ev, int initialised) {
        w->ok = initialised && yaml_emitter_emit(&w->emitter, ev);   /* the emitter frees the event */
}

YamlWriter *yaml_writer_new(size_t max) {
        YamlWriter *w = calloc(1, sizeof(YamlWriter));
        yaml_event_t ev;

        if (!w)
                return NULL;
        if (!yaml_emitter_initialize(&w->emitter)) {
                free(w);
                return NULL;
        }
        w->max = max;
        yaml_emitter_set_output(&w->emitter, out_write, w);
        yaml_emitter_set_width(&w->emitter, -1);
        yaml_emitter_set_unicode(&w->emitter, 1);
        w->ok = true;
        emit(w, &ev, yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING));
        if (w->ok)
                emit(w, &ev, yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 0));
        return w;
}

void yaml_writer_str(YamlWriter *w, const char *s) {
        yaml_event_t ev;
        if (!w->ok)
                return;
        emit(w, &ev,
             yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *) s, (int) strlen(s), 1, 1,
                                          YAML_ANY_SCALAR_STYLE));
}

void yaml_writer_kv_literal(YamlWriter *w, const char *key, const char *value) {
        yaml_event_t ev;

        yaml_writer_str(w, key);
        if (!w->ok)
                return;
        emit(w, &ev,
             yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *) value, (int) strlen(value), 1, 1,
                                          YAML_LITERAL_SCALAR_STYLE));
}

void yaml_writer_map_start(YamlWriter *w, bool flow) {
        yaml_event_t ev;
        if (!w->ok)
                return;
        emit(w, &ev,
             yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1,
                                                 flow ? YAML_FLOW_MAPPING_STYLE : YAML_BLOCK_MAPPING_STYLE));
}

void yaml_writer_map_end(YamlWriter *w) {
        yaml_event_t ev;
        if (!w->ok)
                return;
        emit(w, &ev, yaml_mapping_end_event_initialize(&ev));
}

void yaml_writer_seq_start(YamlWriter *w, bool flow) {
        yaml_event_t ev;
        if (!w->ok)
                return;
        emit(w, &ev,
             yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1,
                                                  flow ? YAML_FLOW_SEQUENCE_STYLE : YAML_BLOCK_SEQUENCE_STYLE));
}

void yaml_writer_seq_end(YamlWriter *w) {
        yaml_event_t ev;
        if (!w->ok)
                return;
        emit(w, &ev, yaml_sequence_end_event_initialize(&ev));
}

void yaml_writer_kv(YamlWriter *w, const char *key, const char *value) {
        yaml_writer_str(w, key);
        yaml_writer_str(w, value);
}

void yaml_writer_kv_u64(YamlWriter *w, const char *key, uint64_t v) {
        char buf[32];
        snprintf(buf, sizeof(buf), "%" PRIu64, v);
        yaml_writer_kv(w, key, buf);
}

void yaml_writer_kv_sha(YamlWriter *w, const char *key, const uint8_t d[SHA256_DIGEST_SIZE]) {
        char hex[SHA256_HEX_SIZE];
        sha256_to_hex(d, hex);
        yaml_writer_kv(w, key, hex);
}

void yaml_writer_kv_time(YamlWriter *w, const char *key, int64_t t) {
        char buf[21];
        format_time_utc(t, buf);
        yaml_writer_kv(w, key, buf);
}

int yaml_writer_finish(YamlWriter *w, const char *what, char **ret_text, size_t *ret_len, TpError *err) {
        yaml_event_t ev;
        int r = 0;

        if (w->ok)
                emit(w, &ev, yaml_document_end_event_initialize(&ev, 1));
        if (w->ok)
                emit(w, &ev, yaml_stream_end_event_initialize(&ev));
        if (w->ok) {
                *ret_text = TAKE_PTR(w->buf);
                *ret_len = w->len;
        } else if (w->overflow)
                r = tp_error(err, -EMSGSIZE, "%s: larger than the %zu-byte cap", what, w->max);
        else
                r = tp_error(err, -ENOMEM, "%s: could not serialise (out of memory)", what);
        yaml_emitter_delete(&w->emitter);
        free(w->buf);
        free(w);
        return r;
}
