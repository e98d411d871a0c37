/* SPDX-License-Identifier: MIT */

#include <inttypes.h>
#include <string.h>
#include <yaml.h>

#include "yaml-doc.h"

YamlNode *yaml_node_free(YamlNode *n) {
        if (!n)
                return NULL;
        for (size_t i = 0; i < n->n_items; i++)
                yaml_node_free(n->items[i]);
        free(n->items);
        free(n->scalar);
        free(n);
        return NULL;
}

typedef struct Builder {
        yaml_parser_t parser;
        const char *what;
        size_t nodes;
        TpError *err;
} Builder;

static int builder_fail(Builder *b, const yaml_event_t *ev, const char *msg) {
        return tp_error(b->err, -EBADMSG, "%s: line %zu: %s", b->what, (size_t) ev->start_mark.line + 1, msg);
}

static int builder_next(Builder *b, yaml_event_t *ev) {
        if (!yaml_parser_parse(&b->parser, ev))
                return tp_error(b->err, -EBADMSG, "%s: line %zu: %s", b->what,
                                (size_t) b->parser.problem_mark.line + 1,
                                b->parser.problem ? b->parser.problem : "YAML syntax error");
        return 0;
}

/* Parse the node whose first event is @ev (already read); consumes through its end event. */
static int build_node(Builder *b, yaml_event_t *ev, unsigned depth, YamlNode **ret) {
        _cleanup_(yaml_node_freep) YamlNode *n = NULL;
        int r;

        if (depth > YAML_DOC_MAX_DEPTH)
                return builder_fail(b, ev, "nesting deeper than 32 levels");
        if (++b->nodes > YAML_DOC_MAX_NODES)
                return builder_fail(b, ev, "more than 4194304 nodes");

        n = calloc(1, sizeof(*n));
        if (!n)
                return -ENOMEM;
        n->line = (unsigned) ev->start_mark.line + 1;

        switch (ev->type) {
        case YAML_ALIAS_EVENT:
                return builder_fail(b, ev, "aliases are not allowed");
        case YAML_SCALAR_EVENT:
                if (ev->data.scalar.anchor)
                        return builder_fail(b, ev, "anchors are not allowed");
                if (ev->data.scalar.length > YAML_DOC_MAX_SCALAR)
                        return builder_fail(b, ev, "scalar longer than 65536 bytes");
                if (memchr(ev->data.scalar.value, '\0', ev->data.scalar.length))
                        return builder_fail(b, ev, "scalar holds a NUL byte");
                n->kind = YAML_SCALAR;
                n->quoted = ev->data.scalar.style == YAML_SINGLE_QUOTED_SCALAR_STYLE ||
                            ev->data.scalar.style == YAML_DOUBLE_QUOTED_SCALAR_STYLE;
                n->scalar = strndup((const char *) ev->data.scalar.value, ev->data.scalar.length);
                if (!n->scalar)
                        return -ENOMEM;
                *ret = TAKE_PTR(n);
                return 0;
        case YAML_SEQUENCE_START_EVENT:
        case YAML_MAPPING_START_EVENT: {
                bool map = ev->type == YAML_MAPPING_START_EVENT;
                yaml_event_type_t end = map ? YAML_MAPPING_END_EVENT : YAML_SEQUENCE_END_EVENT;
                size_t cap = 0, used = 0;

                if ((map ? ev->data.mapping_start.anchor : ev->data.sequence_start.anchor))
                        return builder_fail(b, ev, "anchors are not allowed");
                n->kind = map ? YAML_MAPPING : YAML_SEQUENCE;
                for (;;) {
                        yaml_event_t child_ev;
                        YamlNode *child;

                        r = builder_next(b, &child_ev);
                        if (r < 0)
                                return r;
                        if (child_ev.type == end) {
                                yaml_event_delete(&child_ev);
                                break;
                        }
                        r = build_node(b, &child_ev, depth + 1, &child);
                        yaml_event_delete(&child_ev);
                        if (r < 0)
                                return r;
                        if (used == cap) {
                                size_t ncap = cap ? 2 * cap : 8;
                                YamlNode **p = realloc(n->items, ncap * sizeof(*p));
                                if (!p) {
                                        yaml_node_free(child);
                                        return -ENOMEM;
                                }
                                n->items = p;
                                cap = ncap;
                        }
                        n->items[used++] = child;
                        n->n_items = used;
                        n->n = map ? used / 2 : used;
                        if (map && used % 2 == 1 && child->kind != YAML_SCALAR)
                                return tp_error(b->err, -EBADMSG, "%s: line %u: mapping keys must be plain scalars",
                                                b->what, child->line);
                }
                if (map && used % 2 != 0)
                        return builder_fail(b, ev, "mapping with a key and no value");
                *ret = TAKE_PTR(n);
                return 0;
        }
        default:
                return builder_fail(b, ev, "unexpected YAML event");
        }
}

int yaml_doc_parse(const char *text, size_t len, size_t max_len, const char *what, YamlNode **ret, TpError *err) {
        Builder b = { .what = what, .err = err };
        yaml_event_t ev;
        YamlNode *root = NULL;
        int r;

        if (len > max_len)
                return tp_error(err, -EMSGSIZE, "%s: %zu bytes exceed the %zu-byte cap", what, len, max_len);
        if (!yaml_parser_initialize(&b.parser))
                return -ENOMEM;
        yaml_parser_set_input_string(&b.parser, (const unsigned char *) text, len);

        /* stream-start, document-start, root node, document-end, stream-end: nothing else. */
        r = builder_next(&b, &ev);
        if (r >= 0 && ev.type != YAML_STREAM_START_EVENT)
                r = builder_fail(&b, &ev, "expected a YAML stream");
        yaml_event_delete(&ev);
        if (r >= 0)
                r = builder_next(&b, &ev);
        if (r >= 0) {
                if (ev.type != YAML_DOCUMENT_START_EVENT)
                        r = tp_error(err, -EBADMSG, "%s: empty document", what);
                yaml_event_delete(&ev);
        }
        if (r >= 0)
                r = builder_next(&b, &ev);
        if (r >= 0) {
                r = build_node(&b, &ev, 0, &root);
                yaml_event_delete(&ev);
        }
        if (r >= 0)
                r = builder_next(&b, &ev);
        if (r >= 0) {
                if (ev.type != YAML_DOCUMENT_END_EVENT)
                        r = builder_fail(&b, &ev, "expected the end of the document");
                yaml_event_delete(&ev);
        }
        if (r >= 0)
                r = builder_next(&b, &ev);
        if (r >= 0) {
                if (ev.type != YAML_STREAM_END_EVENT)
                        r = builder_fail(&b, &ev, "only one YAML document is allowed");
                yaml_event_delete(&ev);
        }
        yaml_parser_delete(&b.parser);
        if (r < 0) {
                yaml_node_free(root);
                return r;
        }
        *ret = root;
        return 0;
}

const YamlNode *yaml_map_get(const YamlNode *map, const char *key) {
        if (!map || map->kind != YAML_MAPPING)
                return NULL;
        for (size_t i = 0; i < map->n; i++)
                if (strcmp(map->items[2 * i]->scalar, key) == 0)
                        return map->items[2 * i + 1];
        return NULL;
}

static const char *kind_name(YamlKind k) {
        return k == YAML_SCALAR ? "a scalar" : k == YAML_SEQUENCE ? "a list" : "a mapping";
}

/* The node for @key, checked for kind; 1 found, 0 absent and optional, <0 error. */
static int get_kind(const YamlNode *map, const char *key, bool required, const char *what, YamlKind kind,
                    const YamlNode **ret, TpError *err) {
        const YamlNode *v = yaml_map_get(map, key);

        if (!v) {
                if (required)
                        return tp_error(err, -EBADMSG, "%s: line %u: missing '%s'", what, map ? map->line : 0, key);
                return 0;
        }
        if (v->kind != kind)
                return tp_error(err, -EBADMSG, "%s: line %u: '%s': expected %s, found %s", what, v->line, key,
                                kind_name(kind), kind_name(v->kind));
        *ret = v;
        return 1;
}

int yaml_get_map(const YamlNode *map, const char *key, bool required, const char *what, const YamlNode **ret,
                 TpError *err) {
        return get_kind(map, key, required, what, YAML_MAPPING, ret, err);
}

int yaml_get_seq(const YamlNode *map, const char *key, bool required, const char *what, const YamlNode **ret,
                 TpError *err) {
        return get_kind(map, key, required, what, YAML_SEQUENCE, ret, err);
}

int yaml_get_str(const YamlNode *map, const char *key, bool required, const char *what, const char **ret,
                 TpError *err) {
        const YamlNode *v = NULL;
        int r = get_kind(map, key, required, what, YAML_SCALAR, &v, err);
        if (r > 0)
                *ret = v->scalar;
        return r;
}

static int bad_scalar(const YamlNode *v, const char *key, const char *what, const char *expected, TpError *err) {
        return tp_error(err, -EBADMSG, "%s: line %u: '%s': expected %s, found '%.64s'", what, v->line, key, expected,
                        v->scalar);
}

int yaml_get_u64(const YamlNode *map, const char *key, bool required, const char *what, uint64_t *ret,
                 TpError *err) {
        const YamlNode *v = NULL;
        int r = get_kind(map, key, required, what, YAML_SCALAR, &v, err);
        if (r > 0 && (v->quoted || parse_u64(v->scalar, ret) < 0))
                return bad_scalar(v, key, what, "an unsigned integer", err);
        return r;
}

int yaml_get_sha256(const YamlNode *map, const char *key, bool required, const char *what,
                    uint8_t ret[SHA256_DIGEST_SIZE], TpError *err) {
        const YamlNode *v = NULL;
        int r = get_kind(map, key, required, what, YAML_SCALAR, &v, err);
        if (r > 0 && parse_sha256_hex(v->scalar, ret) < 0)
                return bad_scalar(v, key, what, "64 lowercase hex digits", err);
        return r;
}

int yaml_get_time(const YamlNode *map, const char *key, bool required, const char *what, int64_t *ret,
                  TpError *err) {
        const YamlNode *v = NULL;
        int r = get_kind(map, key, required, what, YAML_SCALAR, &v, err);
        if (r > 0 && parse_time_utc(v->scalar, ret) < 0)
                return bad_scalar(v, key, what, "a UTC time YYYY-MM-DDTHH:MM:SSZ", err);
        return r;
}

int yaml_check_keys(const YamlNode *map, const char *const *allowed, const char *what, TpError *err) {
        if (!map || map->kind != YAML_MAPPING)
                return tp_error(err, -EBADMSG, "%s: line %u: expected a mapping", what, map ? map->line : 0);
        for (size_t i = 0; i < map->n; i++) {
                const YamlNode *k = map->items[2 * i];
                bool ok = false;
                for (const char *const *a = allowed; *a && !ok; a++)
                        ok = strcmp(*a, k->scalar) == 0;
                if (!ok)
                        return tp_error(err, -EBADMSG, "%s: line %u: unknown key '%.64s'", what, k->line,
                                        k->scalar);
                for (size_t j = 0; j < i; j++)
                        if (strcmp(map->items[2 * j]->scalar, k->scalar) == 0)
                                return tp_error(err, -EBADMSG, "%s: line %u: duplicate key '%.64s'", what,
                                                k->line, k->scalar);
        }
        return 0;
}
