/* SPDX-License-Identifier: MIT */

#include <inttypes.h>
#include <jansson.h>
#include <string.h>

#include "fileio.h"
#include "quote.h"
#include "safetensors.h"
#include "stindex.h"

#define METADATA_KEY "__metadata__"

/*
 * Before jansson sees the text: every value but the root follows a '[', a ',' or a ':', so
 * capping those (with '{') caps the values jansson allocates, whatever the file holds.
 * Strings are skipped (jansson checks their escapes and UTF-8).
 */
static int scan_tokens(const char *text, size_t len, TpError *err) {
        size_t tokens = 0;

        for (size_t i = 0; i < len; i++)
                switch (text[i]) {
                case '"':
                        for (i++; i < len && text[i] != '"'; i++)
                                if (text[i] == '\\')
                                        i++;
                        break;
                case '{':
                case '[':
                case ',':
                case ':':
                        if (++tokens > STINDEX_TOKENS_MAX)
                                return tp_error(err, -EBADMSG,
                                                "byte %zu: more than %u values (the cap on '{', '[', ',' and ':')", i,
                                                STINDEX_TOKENS_MAX);
                        break;
                default:
                        break;
                }
        return 0;
}

static const char *json_kind(const json_t *v) {
        switch (json_typeof(v)) {
        case JSON_OBJECT:
                return "an object";
        case JSON_ARRAY:
                return "a list";
        case JSON_STRING:
                return "a string";
        case JSON_INTEGER:
        case JSON_REAL:
                return "a number";
        case JSON_TRUE:
        case JSON_FALSE:
                return "a boolean";
        case JSON_NULL:
        default:
                return "null";
        }
}

/* metadata: an object; its total_size, when present, a whole number in [0, 2^63). */
static int parse_metadata(const json_t *m, Stindex *s, TpError *err) {
        if (!json_is_object(m))
                return tp_error(err, -EBADMSG, "\"metadata\" is %s, not an object", json_kind(m));
        const json_t *v = json_object_get(m, "total_size");
        if (!v)
                return 0;
        if (json_is_integer(v)) {
                if (json_integer_value(v) < 0)
                        return tp_error(err, -EBADMSG, "metadata.total_size: %" JSON_INTEGER_FORMAT " is negative",
                                        json_integer_value(v));
                s->total_size = (uint64_t) json_integer_value(v);
        } else if (json_is_real(v)) {
                double d = json_real_value(v);
                /* 2^63 is exact as a double; below it, a whole d converts to uint64 exactly. */
                if (!(d >= 0 && d < 9223372036854775808.0) || d != (double) (uint64_t) d)
                        return tp_error(err, -EBADMSG,
                                        "metadata.total_size: %.15g is not a whole number of bytes below 2^63", d);
                s->total_size = (uint64_t) d;
        } else
                return tp_error(err, -EBADMSG, "metadata.total_size is %s, not a number", json_kind(v));
        s->has_total_size = true;
        return 0;
}

/* Why @name (@len bytes, from JSON; at most the cap) is no plain file name, or NULL when it is one. */
static const char *shard_name_problem(const char *name, size_t len) {
        if (len == 0)
                return "it is empty";
        if (strlen(name) != len)
                return "it holds a NUL byte";
        if (strchr(name, '/'))
                return "it holds a '/'";
        if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
                return "it names a directory";
        return NULL;
}

static int tensor_name_check(const char *key, TpError *err) {
        char qb[QUOTE_BUF];
        size_t len = strlen(key);

        if (len == 0)
                return tp_error(err, -EBADMSG, "weight_map: a tensor with an empty name");
        if (len > SAFETENSORS_NAME_MAX)
                return tp_error(err, -EBADMSG, "weight_map['%s']: a tensor name of %zu bytes, over the cap of %u",
                                quote(key, qb), len, SAFETENSORS_NAME_MAX);
        if (strcmp(key, METADATA_KEY) == 0)
                return tp_error(err, -EBADMSG,
                                "weight_map['" METADATA_KEY "']: no safetensors file holds a tensor of that name");
        return 0;
}

static int strp_cmp(const void *a, const void *b) {
        return strcmp(*(const char *const *) a, *(const char *const *) b);
}

static int tensor_cmp(const void *a, const void *b) {
        return strcmp(((const StindexTensor *) a)->name, ((const StindexTensor *) b)->name);
}

/* The distinct names of @names (sorted in place) into s->shards. */
static int set_shards(Stindex *s, const char **names, size_t n) {
        qsort(names, n, sizeof(*names), strp_cmp);
        if (!(s->shards = calloc(n, sizeof(char *))))
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                if (i > 0 && strcmp(names[i], names[i - 1]) == 0)
                        continue;
                if (!(s->shards[s->n_shards] = strdup(names[i])))
                        return -ENOMEM;
                s->n_shards++;
        }
        return 0;
}

/* weight_map: each entry checked, the shards listed, the tensors sorted by name. */
static int parse_weight_map(const json_t *map, Stindex *s, TpError *err) {
        _cleanup_free_ const char **names = NULL; /* each tensor's shard name, in jansson's tree */
        char qa[QUOTE_BUF], qb[QUOTE_BUF];
        const char *key;
        json_t *value;
        int r;

        if (!json_is_object(map))
                return tp_error(err, -EBADMSG, "\"weight_map\" is %s, not an object", json_kind(map));
        size_t n = json_object_size(map);
        if (n == 0)
                return tp_error(err, -EBADMSG, "\"weight_map\" is empty");
        if (n > STINDEX_TENSORS_MAX)
                return tp_error(err, -EBADMSG, "\"weight_map\" has %zu tensors, over the cap of %u", n,
                                STINDEX_TENSORS_MAX);
        if (!(s->tensors = calloc(n, sizeof(StindexTensor))) || !(names = calloc(n, sizeof(*names))))
                return tp_error(err, -ENOMEM, "cannot allocate %zu tensors", n);

        json_object_foreach((json_t *) map, key, value) {
                if ((r = tensor_name_check(key, err)) < 0)
                        return r;
                if (!json_is_string(value))
                        return tp_error(err, -EBADMSG, "weight_map['%s']: %s, not a shard's file name", quote(key, qa),
                                        json_kind(value));
                const char *name = json_string_value(value), *problem;
                if (json_string_length(value) > STINDEX_SHARD_NAME_MAX)
                        return tp_error(err, -EBADMSG,
                                        "weight_map['%s']: a shard name of %zu bytes, over the cap of %u",
                                        quote(key, qa), json_string_length(value), STINDEX_SHARD_NAME_MAX);
                if ((problem = shard_name_problem(name, json_string_length(value))))
                        return tp_error(err, -EBADMSG,
                                        "weight_map['%s']: shard name '%s' is not a plain file name (%s)",
                                        quote(key, qa), quote_bytes(name, json_string_length(value), qb), problem);
                if (s->n_tensors >= n) /* jansson's size and its iteration agree; be sure */
                        return tp_error(err, -EBADMSG, "\"weight_map\" has more entries than it counts");
                StindexTensor *t = &s->tensors[s->n_tensors];
                if (!(t->name = strdup(key)))
                        return tp_error(err, -ENOMEM, "out of memory");
                names[s->n_tensors++] = name;
        }

        /* Each tensor's shard by its name, before the tensors are sorted. */
        _cleanup_free_ const char **sorted = calloc(s->n_tensors, sizeof(*sorted));
        if (!sorted)
                return tp_error(err, -ENOMEM, "out of memory");
        memcpy(sorted, names, s->n_tensors * sizeof(*sorted));
        if (set_shards(s, sorted, s->n_tensors) < 0)
                return tp_error(err, -ENOMEM, "out of memory");
        for (size_t i = 0; i < s->n_tensors; i++) {
                int k = stindex_find_shard(s, names[i]);
                if (k < 0) /* cannot happen: every name is in the list */
                        return tp_error(err, -EBADMSG, "weight_map['%s']: shard not listed",
                                        quote(s->tensors[i].name, qa));
                s->tensors[i].shard = (uint32_t) k;
        }
        qsort(s->tensors, s->n_tensors, sizeof(StindexTensor), tensor_cmp);
        for (size_t i = 1; i < s->n_tensors; i++)
                if (strcmp(s->tensors[i].name, s->tensors[i - 1].name) == 0) /* JSON_REJECT_DUPLICATES saw it */
                        return tp_error(err, -EBADMSG, "weight_map: duplicate tensor '%s'",
                                        quote(s->tensors[i].name, qa));
        return 0;
}

int stindex_parse(const char *text, size_t len, Stindex **ret, TpError *err) {
        _cleanup_(json_decrefp) json_t *root = NULL;
        _cleanup_(stindex_freep) Stindex *s = NULL;
        json_error_t jerr;
        const json_t *v;
        int r;

        if (len > STINDEX_FILE_MAX)
                return tp_error(err, -EBADMSG, "%zu bytes, over the cap of %u", len, STINDEX_FILE_MAX);
        if ((r = scan_tokens(text, len, err)) < 0)
                return r;
        root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
        if (!root) {
                /* jansson quotes the input near the error: keep the message printable. */
                for (char *c = jerr.text; *c; c++)
                        if ((unsigned char) *c < 0x20 || (unsigned char) *c >= 0x7f)
                                *c = '?';
                return tp_error(err, -EBADMSG, "not valid JSON: line %d, column %d (byte %d): %s", jerr.line,
                                jerr.column, jerr.position, jerr.text);
        }
        if (!json_is_object(root))
                return tp_error(err, -EBADMSG, "the index is %s, not an object", json_kind(root));
        if (!(s = calloc(1, sizeof(*s))))
                return tp_error(err, -ENOMEM, "out of memory");
        if ((v = json_object_get(root, "metadata")) && (r = parse_metadata(v, s, err)) < 0)
                return r;
        if (!(v = json_object_get(root, "weight_map")))
                return tp_error(err, -EBADMSG, "no \"weight_map\"");
        if ((r = parse_weight_map(v, s, err)) < 0)
                return r;
        *ret = TAKE_PTR(s);
        return 0;
}

int stindex_read(int fd, Stindex **ret, TpError *err) {
        _cleanup_free_ char *text = NULL;
        uint64_t size = 0;
        int r;

        r = fd_regular_size(fd, &size, err);
        if (r < 0)
                return r;
        if (size > STINDEX_FILE_MAX)
                return tp_error(err, -EBADMSG, "%" PRIu64 " bytes, over the cap of %u", size, STINDEX_FILE_MAX);
        size_t len = (size_t) size;
        if (!(text = malloc(len ? len : 1)))
                return tp_error(err, -ENOMEM, "cannot allocate %zu bytes", len);
        if ((r = pread_full(fd, text, len, 0)) < 0)
                return tp_error(err, r, "reading %zu bytes: %s", len, strerror(-r));
        return stindex_parse(text, len, ret, err);
}

Stindex *stindex_free(Stindex *s) {
        if (!s)
                return NULL;
        for (size_t i = 0; s->shards && i < s->n_shards; i++)
                free(s->shards[i]);
        for (size_t i = 0; s->tensors && i < s->n_tensors; i++)
                free(s->tensors[i].name);
        free(s->shards);
        free(s->tensors);
        free(s);
        return NULL;
}

const StindexTensor *stindex_find(const Stindex *s, const char *name) {
        if (!s || !name)
                return NULL;
        StindexTensor key = {.name = (char *) name};
        return bsearch(&key, s->tensors, s->n_tensors, sizeof(StindexTensor), tensor_cmp);
}

int stindex_find_shard(const Stindex *s, const char *name) {
        if (!s || !name || !s->shards)
                return -ENOENT;
        char *const *p = bsearch(&name, s->shards, s->n_shards, sizeof(char *), strp_cmp);
        return p ? (int) (p - s->shards) : -ENOENT;
}
