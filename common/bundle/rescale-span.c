/* SPDX-License-Identifier: MIT */

#include <string.h>

#include "delta.h"
#include "parse.h"
#include "rescale-span.h"

#define W "manifest"

int rescale_span_parse(const YamlNode *n, size_t idx, const char *layout, ManifestSpan *s, TpError *err) {
        static const char *const keys[] = { "type", "channels", "inner", "first", NULL };
        const YamlNode *l;
        const char *type;
        TpError why = {};
        int r;

        if ((r = yaml_get_map(n, "rescale", true, W, &l, err)) < 0 ||
            (r = yaml_check_keys(l, keys, W " rescale", err)) < 0 ||
            (r = yaml_get_str(l, "type", true, W, &type, err)) < 0 ||
            (r = yaml_get_u64(l, "channels", true, W, &s->rescale.channels, err)) < 0 ||
            (r = yaml_get_u64(l, "inner", true, W, &s->rescale.inner, err)) < 0 ||
            (r = yaml_get_u64(l, "first", true, W, &s->rescale_first, err)) < 0)
                return r;
        if (strcmp(type, "int8") != 0 && strcmp(type, "uint8") != 0)
                return tp_error(err, -EBADMSG, W ": line %u: span #%zu: rescale: 'type' is '%.16s' (expected int8 or "
                                "uint8)", l->line, idx, type);
        s->rescale.is_signed = strcmp(type, "int8") == 0;
        if ((r = rescale_shape_check(&s->rescale, &why)) < 0)
                return tp_error(err, -EBADMSG, W ": line %u: span #%zu: %s", l->line, idx, why.message);
        if (strcmp(layout, delta_layout_to_string(DELTA_I8)) != 0 && strcmp(layout, delta_layout_to_string(DELTA_I8AC)) != 0)
                return tp_error(err, -EBADMSG, W ": line %u: span #%zu: a rescale span's layout is i8 or i8ac", n->line,
                                idx);
        if (s->rescale_first > UINT64_MAX / 2)
                return tp_error(err, -EBADMSG, W ": line %u: span #%zu: rescale: 'first' is out of range", l->line, idx);
        return 0;
}

void rescale_span_write(YamlWriter *w, const ManifestSpan *s) {
        yaml_writer_str(w, "rescale");
        yaml_writer_map_start(w, true);
        yaml_writer_kv(w, "type", s->rescale.is_signed ? "int8" : "uint8");
        yaml_writer_kv_u64(w, "channels", s->rescale.channels);
        yaml_writer_kv_u64(w, "inner", s->rescale.inner);
        yaml_writer_kv_u64(w, "first", s->rescale_first);
        yaml_writer_map_end(w);
}
