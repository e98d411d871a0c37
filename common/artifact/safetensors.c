/* SPDX-License-Identifier: MIT */

#include <inttypes.h>
#include <jansson.h>
#include <string.h>

#include "fileio.h"
#include "le.h"
#include "quote.h"
#include "safetensors.h"

#define METADATA_KEY "__metadata__"

static const struct {
        const char *name;
        unsigned bits;
} dtype_table[_SAFETENSORS_DTYPE_MAX] = {
        [SAFETENSORS_BOOL] = { "BOOL", 8 },
        [SAFETENSORS_U8] = { "U8", 8 },
        [SAFETENSORS_I8] = { "I8", 8 },
        [SAFETENSORS_I16] = { "I16", 16 },
        [SAFETENSORS_U16] = { "U16", 16 },
        [SAFETENSORS_F16] = { "F16", 16 },
        [SAFETENSORS_BF16] = { "BF16", 16 },
        [SAFETENSORS_I32] = { "I32", 32 },
        [SAFETENSORS_U32] = { "U32", 32 },
        [SAFETENSORS_F32] = { "F32", 32 },
        [SAFETENSORS_F64] = { "F64", 64 },
        [SAFETENSORS_I64] = { "I64", 64 },
        [SAFETENSORS_U64] = { "U64", 64 },
        [SAFETENSORS_F8_E5M2] = { "F8_E5M2", 8 },
        [SAFETENSORS_F8_E4M3] = { "F8_E4M3", 8 },
        [SAFETENSORS_F8_E8M0] = { "F8_E8M0", 8 },
        [SAFETENSORS_F4] = { "F4", 4 },
        [SAFETENSORS_F6_E2M3] = { "F6_E2M3", 6 },
        [SAFETENSORS_F6_E3M2] = { "F6_E3M2", 6 },
        [SAFETENSORS_C64] = { "C64", 64 },
        [SAFETENSORS_F8_E4M3FNUZ] = { "F8_E4M3FNUZ", 8 },
        [SAFETENSORS_F8_E5M2FNUZ] = { "F8_E5M2FNUZ", 8 },
};

const char *safetensors_dtype_to_string(SafetensorsDtype d) {
        return d >= 0 && d < _SAFETENSORS_DTYPE_MAX ? dtype_table[d].name : NULL;
}

SafetensorsDtype safetensors_dtype_from_string(const char *s) {
        for (SafetensorsDtype d = 0; s && d < _SAFETENSORS_DTYPE_MAX; d++)
                if (strcmp(dtype_table[d].name, s) == 0)
                        return d;
        return _SAFETENSORS_DTYPE_INVALID;
}

unsigned safetensors_dtype_bits(SafetensorsDtype d) {
        return d >= 0 && d < _SAFETENSORS_DTYPE_MAX ? dtype_table[d].bits : 0;
}

bool safetensors_probe(const uint8_t *head, size_t len, uint64_t file_size) {
        if (!head || len < 9 || file_size < 9)
                return false;
        uint64_t n = get_le64(head);
        return n >= 1 && n <= SAFETENSORS_HEADER_MAX && n <= file_size - 8 && head[8] == '{';
}

/*
 * Before jansson sees the header: a header's shape is an object of objects of arrays of
 * numbers (and one object of strings), so an object deeper than a tensor entry, a container
 * inside an array, or more objects than tensors allowed, is refused here. With the tokens
 * capped too, the tree jansson builds is bounded, whatever the 100 MB hold. Strings are
 * skipped (jansson checks their escapes and UTF-8); unbalanced brackets are left to jansson.
 */
static int scan_header(const char *h, size_t n, TpError *err) {
        char open[3];
        unsigned depth = 0;
        size_t tokens = 0, objects = 0;

        for (size_t i = 0; i < n; i++) {
                char c = h[i];
                switch (c) {
                case '"':
                        for (i++; i < n && h[i] != '"'; i++)
                                if (h[i] == '\\')
                                        i++;
                        break;
                case '{':
                case '[':
                        if (depth == 0 && i > 0)
                                return tp_error(err, -EBADMSG, "header byte %zu: '%c' after the header's object", i,
                                                c);
                        if (depth > 0 && open[depth - 1] == '[')
                                return tp_error(err, -EBADMSG,
                                                "header byte %zu: '%c' inside an array (a header's arrays hold "
                                                "numbers)", i, c);
                        if (c == '{' && depth >= 2)
                                return tp_error(err, -EBADMSG,
                                                "header byte %zu: an object inside a tensor entry", i);
                        /* The header's own, __metadata__, one per tensor. */
                        if (c == '{' && ++objects > SAFETENSORS_TENSORS_MAX + 2)
                                return tp_error(err, -EBADMSG, "more than %u tensors", SAFETENSORS_TENSORS_MAX);
                        open[depth++] = c;
                        /* fall through */
                case ',':
                case ':':
                        if (++tokens > SAFETENSORS_TOKENS_MAX)
                                return tp_error(err, -EBADMSG,
                                                "header byte %zu: more than %u values (the cap on a header's "
                                                "'{', '[', ',' and ':')", i, SAFETENSORS_TOKENS_MAX);
                        break;
                case '}':
                case ']':
                        if (depth > 0)
                                depth--;
                        break;
                default:
                        break;
                }
        }
        return 0;
}

/* @v as a non-negative JSON integer. */
static bool get_uint(const json_t *v, uint64_t *ret) {
        if (!json_is_integer(v) || json_integer_value(v) < 0)
                return false;
        *ret = (uint64_t) json_integer_value(v);
        return true;
}

static int parse_shape(const json_t *shape, SafetensorsTensor *t, TpError *err) {
        size_t n = json_array_size(shape);

        if (!json_is_array(shape))
                return tp_error(err, -EBADMSG, "\"shape\" is not a list");
        if (n > SAFETENSORS_DIMS_MAX)
                return tp_error(err, -EBADMSG, "\"shape\" has %zu dimensions, over the cap of %u", n,
                                SAFETENSORS_DIMS_MAX);
        if (n > 0 && !(t->shape = calloc(n, sizeof(uint64_t))))
                return -ENOMEM;
        t->n_dims = (uint32_t) n;
        t->n_elements = 1;
        for (size_t i = 0; i < n; i++) {
                if (!get_uint(json_array_get(shape, i), &t->shape[i]))
                        return tp_error(err, -EBADMSG, "\"shape\"[%zu] is not a non-negative integer", i);
                if (__builtin_mul_overflow(t->n_elements, t->shape[i], &t->n_elements))
                        return tp_error(err, -EBADMSG, "\"shape\" holds more than 2^64 elements");
        }
        return 0;
}

/* One tensor entry (its name already set): dtype, shape, data_offsets, and that they agree. */
static int parse_tensor(const json_t *v, SafetensorsTensor *t, TpError *err) {
        const json_t *dtype = json_object_get(v, "dtype"), *shape = json_object_get(v, "shape"),
                     *offsets = json_object_get(v, "data_offsets");
        char qb[QUOTE_BUF];
        uint64_t bits;
        int r;

        if (!json_is_object(v))
                return tp_error(err, -EBADMSG, "not an object");
        if (!dtype || !shape || !offsets)
                return tp_error(err, -EBADMSG, "no \"%s\"", !dtype ? "dtype" : !shape ? "shape" : "data_offsets");
        if (!json_is_string(dtype))
                return tp_error(err, -EBADMSG, "\"dtype\" is not a string");
        t->dtype = safetensors_dtype_from_string(json_string_value(dtype));
        if (t->dtype < 0)
                return tp_error(err, -EBADMSG, "unknown dtype '%s'", quote(json_string_value(dtype), qb));
        if ((r = parse_shape(shape, t, err)) < 0)
                return r;
        if (!json_is_array(offsets) || json_array_size(offsets) != 2 ||
            !get_uint(json_array_get(offsets, 0), &t->begin) || !get_uint(json_array_get(offsets, 1), &t->end))
                return tp_error(err, -EBADMSG, "\"data_offsets\" is not a list of two non-negative integers");
        if (t->end < t->begin)
                return tp_error(err, -EBADMSG, "\"data_offsets\" [%" PRIu64 ", %" PRIu64 "] ends before it begins",
                                t->begin, t->end);
        t->length = t->end - t->begin;

        if (__builtin_mul_overflow(t->n_elements, (uint64_t) safetensors_dtype_bits(t->dtype), &bits))
                return tp_error(err, -EBADMSG, "%" PRIu64 " elements of %s are more than 2^64 bits", t->n_elements,
                                safetensors_dtype_to_string(t->dtype));
        if (bits % 8 != 0)
                return tp_error(err, -EBADMSG,
                                "%" PRIu64 " elements of %s (%u bits each) are not a whole number of bytes",
                                t->n_elements, safetensors_dtype_to_string(t->dtype),
                                safetensors_dtype_bits(t->dtype));
        if (bits / 8 != t->length)
                return tp_error(err, -EBADMSG,
                                "%" PRIu64 " elements of %s take %" PRIu64 " bytes, but \"data_offsets\" [%" PRIu64
                                ", %" PRIu64 "] hold %" PRIu64,
                                t->n_elements, safetensors_dtype_to_string(t->dtype), bits / 8, t->begin, t->end,
                                t->length);
        return 0;
}

static int parse_metadata(const json_t *v, size_t *ret, TpError *err) {
        const char *key;
        json_t *value;
        char qb[QUOTE_BUF];

        if (!json_is_object(v))
                return tp_error(err, -EBADMSG, "\"" METADATA_KEY "\" is not an object");
        json_object_foreach((json_t *) v, key, value)
                if (!json_is_string(value))
                        return tp_error(err, -EBADMSG, "\"" METADATA_KEY "\": the value of '%s' is not a string",
                                        quote(key, qb));
        *ret = json_object_size(v);
        return 0;
}

static int tensor_cmp(const void *a, const void *b) {
        const SafetensorsTensor *x = a, *y = b;
        if (x->begin != y->begin)
                return x->begin < y->begin ? -1 : 1;
        if (x->end != y->end)
                return x->end < y->end ? -1 : 1;
        return strcmp(x->name, y->name);
}

/* Sorted, the tensors must tile [0, end) of the buffer, inside the file, and the file end there. */
static int place_tensors(Safetensors *s, TpError *err) {
        uint64_t room = s->file_size - s->data_offset, at = 0;
        char qa[QUOTE_BUF], qb[QUOTE_BUF];

        for (size_t i = 0; i < s->n_tensors; i++) {
                const SafetensorsTensor *t = &s->tensors[i];
                if (t->end > room)
                        return tp_error(err, -EBADMSG,
                                        "tensor '%s': \"data_offsets\" [%" PRIu64 ", %" PRIu64
                                        "] run past the end of the file (the data buffer holds %" PRIu64
                                        " bytes from offset %" PRIu64 ")",
                                        quote(t->name, qa), t->begin, t->end, room, s->data_offset);
        }
        if (s->n_tensors > 1)
                qsort(s->tensors, s->n_tensors, sizeof(SafetensorsTensor), tensor_cmp);
        for (size_t i = 0; i < s->n_tensors; i++) {
                SafetensorsTensor *t = &s->tensors[i];
                if (t->begin > at)
                        return tp_error(err, -EBADMSG,
                                        "a hole in the data buffer: bytes [%" PRIu64 ", %" PRIu64
                                        ") belong to no tensor (the next is '%s')",
                                        at, t->begin, quote(t->name, qa));
                if (t->begin < at)
                        return tp_error(err, -EBADMSG,
                                        "tensor '%s' [%" PRIu64 ", %" PRIu64 ") overlaps tensor '%s' [%" PRIu64
                                        ", %" PRIu64 ")",
                                        quote(t->name, qa), t->begin, t->end, quote(s->tensors[i - 1].name, qb),
                                        s->tensors[i - 1].begin, s->tensors[i - 1].end);
                t->offset = s->data_offset + t->begin;
                at = t->end;
        }
        if (at != room)
                return tp_error(err, -EBADMSG,
                                "the tensors end at data buffer byte %" PRIu64 " (file offset %" PRIu64
                                "), but the file goes on to %" PRIu64 ": %" PRIu64 " bytes belong to no tensor",
                                at, s->data_offset + at, s->file_size, room - at);
        return 0;
}

/* The header's object, parsed and checked, into @s's tensors (sorted and placed). */
static int parse_header(const char *h, size_t n, Safetensors *s, TpError *err) {
        _cleanup_(json_decrefp) json_t *root = NULL;
        json_error_t jerr;
        const char *key;
        json_t *value;
        char qb[QUOTE_BUF];
        int r;

        if (n == 0 || h[0] != '{')
                return tp_error(err, -EBADMSG, "the header is not a JSON object (it starts with '%s')",
                                quote_bytes(h, n < 8 ? n : 8, qb));
        if ((r = scan_header(h, n, err)) < 0)
                return r;
        root = json_loadb(h, n, JSON_REJECT_DUPLICATES, &jerr);
        if (!root) {
                /* jansson quotes the header's bytes near the error: keep the message printable. */
                for (char *c = jerr.text; *c; c++)
                        if ((unsigned char) *c < 0x20 || (unsigned char) *c >= 0x7f)
                                *c = '?';
                return tp_error(err, -EBADMSG, "the header is not valid JSON: line %d, column %d (file offset %" PRIu64
                                "): %s", jerr.line, jerr.column, (uint64_t) jerr.position + 8, jerr.text);
        }
        if (!json_is_object(root))
                return tp_error(err, -EBADMSG, "the header is not a JSON object");

        size_t cap = json_object_size(root);
        if (cap > SAFETENSORS_TENSORS_MAX + 1)
                return tp_error(err, -EBADMSG, "more than %u tensors", SAFETENSORS_TENSORS_MAX);
        if (!(s->tensors = calloc(cap ? cap : 1, sizeof(SafetensorsTensor))))
                return -ENOMEM;
        json_object_foreach(root, key, value) {
                if (strcmp(key, METADATA_KEY) == 0) {
                        if ((r = parse_metadata(value, &s->n_metadata, err)) < 0)
                                return r;
                        continue;
                }
                size_t len = strlen(key);
                if (len == 0)
                        return tp_error(err, -EBADMSG, "a tensor with an empty name");
                if (len > SAFETENSORS_NAME_MAX)
                        return tp_error(err, -EBADMSG, "tensor '%s': a name of %zu bytes, over the cap of %u",
                                        quote(key, qb), len, SAFETENSORS_NAME_MAX);
                if (s->n_tensors >= SAFETENSORS_TENSORS_MAX)
                        return tp_error(err, -EBADMSG, "more than %u tensors", SAFETENSORS_TENSORS_MAX);
                SafetensorsTensor *t = &s->tensors[s->n_tensors++];
                if (!(t->name = strdup(key)))
                        return -ENOMEM;
                if ((r = parse_tensor(value, t, err)) < 0)
                        return tp_error_prefix(err, r, "tensor '%s'", quote(key, qb));
        }
        return place_tensors(s, err);
}

int safetensors_read(int fd, Safetensors **ret, TpError *err) {
        _cleanup_(safetensors_freep) Safetensors *s = NULL;
        _cleanup_free_ char *header = NULL;
        uint8_t nb[8];
        uint64_t size = 0;
        int r;

        r = fd_regular_size(fd, &size, err);
        if (r < 0)
                return r;
        if (!(s = calloc(1, sizeof(*s))))
                return -ENOMEM;
        s->file_size = size;
        if (s->file_size < sizeof(nb))
                return tp_error(err, -EBADMSG, "%" PRIu64 " bytes, shorter than the 8-byte header length",
                                s->file_size);
        if ((r = pread_full(fd, nb, sizeof(nb), 0)) < 0)
                return tp_error(err, r, "reading the header length: %s", strerror(-r));
        s->header_length = get_le64(nb);
        if (s->header_length > SAFETENSORS_HEADER_MAX)
                return tp_error(err, -EBADMSG, "header length %" PRIu64 " is over the cap of %u bytes",
                                s->header_length, SAFETENSORS_HEADER_MAX);
        if (s->header_length > s->file_size - 8)
                return tp_error(err, -EBADMSG,
                                "header length %" PRIu64 " runs past the end of the file (%" PRIu64 " bytes)",
                                s->header_length, s->file_size);
        s->data_offset = 8 + s->header_length;

        if (!(header = malloc(s->header_length ? s->header_length : 1)))
                return tp_error(err, -ENOMEM, "cannot allocate the %" PRIu64 "-byte header", s->header_length);
        if ((r = pread_full(fd, header, s->header_length, 8)) < 0)
                return tp_error(err, r, "reading the header: %s", strerror(-r));
        if ((r = parse_header(header, s->header_length, s, err)) < 0)
                return r;
        *ret = TAKE_PTR(s);
        return 0;
}

Safetensors *safetensors_free(Safetensors *s) {
        if (!s)
                return NULL;
        for (size_t i = 0; i < s->n_tensors; i++) {
                free(s->tensors[i].name);
                free(s->tensors[i].shape);
        }
        free(s->tensors);
        free(s);
        return NULL;
}
