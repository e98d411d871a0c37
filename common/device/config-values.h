/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The typed values of taskpatchd.yaml (config.c's helpers): scalars, paths, lists and
 * sections read from the YAML document tree, each refusal naming the document, the line,
 * the key and what was found. Absent keys leave the field as it was.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "error.h"
#include "yaml-doc.h"

/* The plain scalars YAML reads as null: "key:" with nothing after it, "~", "null". */
bool config_node_is_null(const YamlNode *v);

/* "taskpatchd.yaml: line 4: 'timeout': expected an integer from 1 to 604800, found 'soon'" */
_warn_unused_result_ int config_bad_value(const YamlNode *v, const char *key, const char *what, const char *expected,
                                          TpError *err);

/* A nested mapping; absent or null (every child commented out) reads as empty: *ret = NULL. */
_warn_unused_result_ int config_get_section(const YamlNode *map, const char *key, const char *what,
                                            const YamlNode **ret, TpError *err);

/* An integer from @min to @max. */
_warn_unused_result_ int config_get_uint(const YamlNode *map, const char *key, uint64_t min, uint64_t max,
                                         const char *what, uint64_t *ret, TpError *err);

/* "full" or "incremental". */
_warn_unused_result_ int config_get_verify(const YamlNode *map, const char *key, const char *what, VerifyMode *ret,
                                           TpError *err);

/* Replace *@field with a copy of @value (NULL: unset); -ENOMEM leaves it as it was. */
_warn_unused_result_ int config_set_string(char **field, const char *value);

/* NULL when @p is an absolute path without ".." components, shorter than @max (with the NUL), and
 * (for @file) without a trailing "/"; else what was expected instead. */
const char *config_path_problem(const char *p, size_t max, bool file);

/* An absolute path (config_path_problem()). */
_warn_unused_result_ int config_get_path(const YamlNode *map, const char *key, size_t max, bool file, const char *what,
                                         char **field, TpError *err);

/* A string where "" (or a YAML null) means unset: *field = NULL. */
_warn_unused_result_ int config_get_optional(const YamlNode *map, const char *key, bool (*valid)(const char *),
                                             const char *expected, const char *what, char **field, TpError *err);

/* true or false, unquoted. */
_warn_unused_result_ int config_get_bool(const YamlNode *map, const char *key, const char *what, bool *ret,
                                         TpError *err);

/*
 * @key: one string, or a list of @min to @max of them, each passing @valid (given @c, for
 * settings that depend on others); absent or "" is none. Appended to @out (@n_out of them).
 */
_warn_unused_result_ int config_get_list(const YamlNode *map, const char *key, size_t min, size_t max,
                                         const char *count, bool (*valid)(const char *s, const DaemonConfig *c),
                                         const char *expected, const char *what, DaemonConfig *c, char **out,
                                         size_t *n_out, TpError *err);
