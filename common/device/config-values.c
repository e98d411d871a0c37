/* SPDX-License-Identifier: MIT */

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "config-values.h"

/* The plain scalars YAML reads as null: "key:" with nothing after it, "~", "null". */
bool config_node_is_null(const YamlNode *v) {
        return v->kind == YAML_SCALAR && !v->quoted &&
               (strcmp(v->scalar, "") == 0 || strcmp(v->scalar, "~") == 0 || strcmp(v->scalar, "null") == 0 ||
                strcmp(v->scalar, "Null") == 0 || strcmp(v->scalar, "NULL") == 0);
}

/* The first 64 bytes of @s for a message, control characters escaped (\n, \t, \xNN), "..." if cut. */
static const char *shown(const char *s, char buf[static 96]) {
        size_t o = 0, i;

        /* Room for one more escape (4 bytes) and "..." with its NUL (4 bytes). */
        for (i = 0; i < 64 && s[i] && o + 8 <= 96; i++) {
                unsigned char ch = (unsigned char) s[i];
                if (ch == '\n' || ch == '\t') {
                        buf[o++] = '\\';
                        buf[o++] = ch == '\n' ? 'n' : 't';
                } else if (ch < 0x20 || ch == 0x7f)
                        o += (size_t) snprintf(buf + o, 96 - o, "\\x%02x", ch);
                else
                        buf[o++] = (char) ch;
        }
        memcpy(buf + o, s[i] ? "..." : "", s[i] ? 4 : 1);
        return buf;
}

/* "taskpatchd.yaml: line 4: 'timeout': expected an integer from 1 to 604800, found 'soon'" */
int config_bad_value(const YamlNode *v, const char *key, const char *what, const char *expected, TpError *err) {
        char buf[96];

        if (v->kind == YAML_SEQUENCE)
                return tp_error(err, -EBADMSG, "%s: line %u: '%s': expected %s, found a list", what, v->line, key,
                                expected);
        if (v->kind == YAML_MAPPING)
                return tp_error(err, -EBADMSG, "%s: line %u: '%s': expected %s, found a mapping", what, v->line, key,
                                expected);
        if (v->quoted)
                return tp_error(err, -EBADMSG, "%s: line %u: '%s': expected %s, found the quoted string \"%s\"", what,
                                v->line, key, expected, shown(v->scalar, buf));
        return tp_error(err, -EBADMSG, "%s: line %u: '%s': expected %s, found '%s'", what, v->line, key, expected,
                        shown(v->scalar, buf));
}

/* A nested mapping; absent or null (every child commented out) reads as empty: *ret = NULL. */
int config_get_section(const YamlNode *map, const char *key, const char *what, const YamlNode **ret, TpError *err) {
        const YamlNode *v = yaml_map_get(map, key);

        *ret = NULL;
        if (!v || config_node_is_null(v))
                return 0;
        if (v->kind != YAML_MAPPING)
                return config_bad_value(v, key, what, "a mapping", err);
        *ret = v;
        return 0;
}

int config_get_uint(const YamlNode *map, const char *key, uint64_t min, uint64_t max, const char *what, uint64_t *ret,
                    TpError *err) {
        const YamlNode *v = yaml_map_get(map, key);
        uint64_t u;

        if (!v)
                return 0;
        if (v->kind != YAML_SCALAR || v->quoted || parse_u64(v->scalar, &u) < 0 || u < min || u > max) {
                char expected[80];
                snprintf(expected, sizeof(expected), "an integer from %" PRIu64 " to %" PRIu64, min, max);
                return config_bad_value(v, key, what, expected, err);
        }
        *ret = u;
        return 0;
}

int config_get_verify(const YamlNode *map, const char *key, const char *what, VerifyMode *ret, TpError *err) {
        const YamlNode *v = yaml_map_get(map, key);
        VerifyMode m;

        if (!v)
                return 0;
        m = v->kind == YAML_SCALAR ? verify_mode_from_string(v->scalar) : _VERIFY_MODE_INVALID;
        if (m < 0)
                return config_bad_value(v, key, what, "full or incremental", err);
        *ret = m;
        return 0;
}

int config_set_string(char **field, const char *value) {
        char *s = NULL;

        if (value) {
                s = strdup(value);
                if (!s)
                        return -ENOMEM;
        }
        free(*field);
        *field = s;
        return 0;
}

/* NULL when @p is an absolute path without ".." components, shorter than @max (with the NUL), and
 * (for @file) without a trailing "/"; else what was expected instead. */
const char *config_path_problem(const char *p, size_t max, bool file) {
        size_t n = strlen(p);

        if (p[0] != '/')
                return "an absolute path";
        if (strstr(p, "/../") || (n >= 3 && strcmp(p + n - 3, "/..") == 0))
                return "a path without '..' components";
        if (file && p[n - 1] == '/')
                return "a file path (no trailing '/')";
        for (size_t i = 0; i < n; i++)
                if ((unsigned char) p[i] < 0x20 || p[i] == 0x7f)
                        return "a path without control characters";
        if (n >= max)
                return max == PATH_MAX ? "a path shorter than PATH_MAX (4096 bytes)"
                                       : "a socket path of at most 107 bytes (sun_path)";
        return NULL;
}

int config_get_path(const YamlNode *map, const char *key, size_t max, bool file, const char *what, char **field,
                    TpError *err) {
        const YamlNode *v = yaml_map_get(map, key);
        const char *problem;

        if (!v)
                return 0;
        problem = v->kind == YAML_SCALAR ? config_path_problem(v->scalar, max, file) : "an absolute path";
        if (problem)
                return config_bad_value(v, key, what, problem, err);
        return config_set_string(field, v->scalar);
}

/* A string where "" (or a YAML null) means unset: *field = NULL. */
int config_get_optional(const YamlNode *map, const char *key, bool (*valid)(const char *), const char *expected,
                        const char *what, char **field, TpError *err) {
        const YamlNode *v = yaml_map_get(map, key);

        if (!v)
                return 0;
        if (v->kind == YAML_SCALAR && (config_node_is_null(v) || v->scalar[0] == '\0'))
                return config_set_string(field, NULL);
        if (v->kind != YAML_SCALAR || !valid(v->scalar))
                return config_bad_value(v, key, what, expected, err);
        return config_set_string(field, v->scalar);
}

int config_get_bool(const YamlNode *map, const char *key, const char *what, bool *ret, TpError *err) {
        const YamlNode *v = yaml_map_get(map, key);

        if (!v)
                return 0;
        if (v->kind == YAML_SCALAR && !v->quoted && strcmp(v->scalar, "true") == 0)
                *ret = true;
        else if (v->kind == YAML_SCALAR && !v->quoted && strcmp(v->scalar, "false") == 0)
                *ret = false;
        else
                return config_bad_value(v, key, what, "true or false", err);
        return 0;
}

/*
 * @key: one string, or a list of @min to @max of them, each passing @valid (given @c, for
 * settings that depend on others); absent or "" is none. Appended to @out (@n_out of them).
 */
int config_get_list(const YamlNode *map, const char *key, size_t min, size_t max, const char *count,
                    bool (*valid)(const char *s, const DaemonConfig *c), const char *expected, const char *what,
                    DaemonConfig *c, char **out, size_t *n_out, TpError *err) {
        const YamlNode *v = yaml_map_get(map, key);
        const YamlNode *const *items = &v;
        size_t n = 1;

        if (!v || (v->kind == YAML_SCALAR && (config_node_is_null(v) || v->scalar[0] == '\0')))
                return 0;
        if (v->kind == YAML_SEQUENCE) {
                items = (const YamlNode *const *) v->items;
                n = v->n;
                if (n < min || n > max)
                        return config_bad_value(v, key, what, count, err);
        }
        for (size_t i = 0; i < n; i++) {
                if (items[i]->kind != YAML_SCALAR || !valid(items[i]->scalar, c))
                        return config_bad_value(items[i], key, what, expected, err);
                if (!(out[*n_out] = strdup(items[i]->scalar)))
                        return -ENOMEM;
                (*n_out)++;
        }
        return 0;
}
