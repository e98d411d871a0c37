/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * A small YAML document tree on top of libyaml, for the manifest, the
 * channel index and the daemon's configuration: one document of mappings,
 * sequences and plain scalars, every node with its line number so errors
 * can name it. Untrusted input: the text size, node count, nesting depth
 * and scalar length are capped, and anchors/aliases (entity-expansion
 * bombs) and multiple documents are refused.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "parse.h"          /* the scalar parsers behind yaml_get_u64() and friends */
#include "sha256.h"

#define YAML_DOC_MAX_NODES (4u << 20)
#define YAML_DOC_MAX_DEPTH 32
#define YAML_DOC_MAX_SCALAR (64u << 10)

typedef enum YamlKind {
        YAML_SCALAR,
        YAML_SEQUENCE,
        YAML_MAPPING,
} YamlKind;

typedef struct YamlNode {
        YamlKind kind;
        unsigned line;                  /* 1-based line where the node starts */
        bool quoted;                    /* SCALAR written with quotes (so "null" is a string) */
        char *scalar;                   /* SCALAR: NUL-terminated (embedded NULs are refused) */
        size_t n;                       /* SEQUENCE: items; MAPPING: pairs */
        struct YamlNode **items;        /* SEQUENCE: n items; MAPPING: 2n nodes, key then value */
        size_t n_items;                 /* entries of items[] (owned) */
} YamlNode;

/* Parse @len bytes of @text (at most @max_len) into a tree. @what names the document in errors. */
_warn_unused_result_ int yaml_doc_parse(const char *text, size_t len, size_t max_len, const char *what,
                                        YamlNode **ret, TpError *err);
YamlNode *yaml_node_free(YamlNode *n);
DEFINE_POINTER_CLEANUP(YamlNode, yaml_node_free)

/* The value of @key in mapping @map (NULL when absent or @map is not a mapping). */
const YamlNode *yaml_map_get(const YamlNode *map, const char *key);

/*
 * Typed access with errors that name the document, line and key:
 * "manifest: line 7: 'size': expected an unsigned integer, found '-3'".
 * @required = false makes an absent key return 0 and leave *ret untouched.
 * Returns 1 when the key was present and read, 0 when absent and optional.
 */
_warn_unused_result_ int yaml_get_map(const YamlNode *map, const char *key, bool required, const char *what,
                                      const YamlNode **ret, TpError *err);
_warn_unused_result_ int yaml_get_seq(const YamlNode *map, const char *key, bool required, const char *what,
                                      const YamlNode **ret, TpError *err);
_warn_unused_result_ int yaml_get_str(const YamlNode *map, const char *key, bool required, const char *what,
                                      const char **ret, TpError *err);
_warn_unused_result_ int yaml_get_u64(const YamlNode *map, const char *key, bool required, const char *what,
                                      uint64_t *ret, TpError *err);
_warn_unused_result_ int yaml_get_sha256(const YamlNode *map, const char *key, bool required, const char *what,
                                         uint8_t ret[SHA256_DIGEST_SIZE], TpError *err);
/* ISO 8601 UTC "YYYY-MM-DDTHH:MM:SSZ" as seconds since the epoch. */
_warn_unused_result_ int yaml_get_time(const YamlNode *map, const char *key, bool required, const char *what,
                                       int64_t *ret, TpError *err);

/* Refuse keys of @map not in the NULL-terminated @allowed list, naming the line. */
_warn_unused_result_ int yaml_check_keys(const YamlNode *map, const char *const *allowed, const char *what,
                                         TpError *err);
