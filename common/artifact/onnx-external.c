/* SPDX-License-Identifier: MIT */

#include <inttypes.h>
#include <string.h>

#include "onnx-external.h"
#include "parse.h"
#include "quote.h"

static const char *const key_names[_ONNX_EXTERNAL_KEY_MAX] = {
        [ONNX_EXTERNAL_LOCATION] = "location",
        [ONNX_EXTERNAL_OFFSET] = "offset",
        [ONNX_EXTERNAL_LENGTH] = "length",
        [ONNX_EXTERNAL_CHECKSUM] = "checksum",
};

static const PbFieldInfo entry_fields[] = { { 1, "key", PB_W(PB_LEN) }, { 2, "value", PB_W(PB_LEN) } };
static const PbSchema entry_type = { "StringStringEntryProto", entry_fields, ELEMENTSOF(entry_fields) };

typedef struct EntryState {
        char *key, *value;
} EntryState;

static int entry_field(PbWalker *w, const PbField *f, void *userdata) {
        EntryState *s = userdata;

        if (f->number == 1)
                return pb_read_string(w, f, ONNX_MAX_NAME, &s->key);
        if (f->number == 2)
                return pb_read_string(w, f, ONNX_MAX_NAME, &s->value);
        return 0;
}

typedef struct EntryArgs {
        OnnxExternal *x;
        uint64_t at;
} EntryArgs;

static int walk_entry(PbWalker *w, void *userdata) {
        const EntryArgs *a = userdata;
        EntryState s = {};

        int k = pb_walk_fields(w, entry_field, &s);
        for (size_t i = 0; k >= 0 && s.key && i < _ONNX_EXTERNAL_KEY_MAX; i++) {
                if (strcmp(s.key, key_names[i]) != 0)
                        continue;
                OnnxExternalKey *e = &a->x->keys[i];
                if (!e->seen) {
                        e->seen = true;
                        e->value = TAKE_PTR(s.value);
                        e->at = a->at;
                } else if (!e->again_at)
                        e->again_at = a->at;
                break;
        }
        free(s.key);
        free(s.value);
        return k;
}

int onnx_external_entry(PbWalker *w, const PbField *f, int64_t index, OnnxExternal *x) {
        return pb_descend(w, f, &entry_type, index, walk_entry, &(EntryArgs) { x, f->offset });
}

void onnx_external_done(OnnxExternal *x) {
        for (size_t i = 0; i < _ONNX_EXTERNAL_KEY_MAX; i++)
                free(x->keys[i].value);
        *x = (OnnxExternal) {};
}

/* "offset" or "length": plain decimal (parse_u64), at most INT64_MAX. */
static int parse_number(PbWalker *w, const OnnxExternalKey *e, const char *key, uint64_t *ret) {
        char q[QUOTE_BUF];
        uint64_t v;

        int r = parse_u64(e->value ? e->value : "", &v);
        if (r == -EINVAL)
                return pb_error(w, e->at, "external_data \"%s\" '%s' is not a decimal number", key, quote(e->value, q));
        if (r < 0 || v > INT64_MAX)
                return pb_error(w, e->at, "external_data \"%s\" '%s' is past the largest file offset (%" PRId64 ")",
                                key, quote(e->value, q), INT64_MAX);
        *ret = v;
        return 0;
}

/* 40 hex digits, either case: onnx.proto names no encoding, and this is the one sha1sum prints. */
static int parse_checksum(PbWalker *w, const OnnxExternalKey *e, uint8_t ret[static ONNX_SHA1_SIZE]) {
        const char *s = e->value ? e->value : "";
        uint8_t d[ONNX_SHA1_SIZE];
        char q[QUOTE_BUF];

        bool ok = strlen(s) == 2 * ONNX_SHA1_SIZE;
        for (size_t i = 0; ok && i < ONNX_SHA1_SIZE; i++) {
                int hi = hex_digit(s[2 * i]), lo = hex_digit(s[2 * i + 1]);
                if (hi < 0 || lo < 0)
                        ok = false;
                else
                        d[i] = (uint8_t) (hi << 4 | lo);
        }
        if (!ok)
                return pb_error(w, e->at, "external_data \"checksum\" '%s' is not a SHA-1 digest (40 hex digits)",
                                quote(s, q));
        memcpy(ret, d, sizeof(d));
        return 0;
}

int onnx_external_parse(PbWalker *w, OnnxExternal *x, OnnxInitializer *t) {
        OnnxExternalKey *keys = x->keys;
        int k;

        for (size_t i = 0; i < _ONNX_EXTERNAL_KEY_MAX; i++)
                if (keys[i].again_at)
                        return pb_error(w, keys[i].again_at, "external_data \"%s\" appears twice", key_names[i]);

        OnnxExternalKey *location = &keys[ONNX_EXTERNAL_LOCATION];
        if (!location->seen)
                return pb_error(w, pb_frame(w)->start,
                                "data_location is EXTERNAL but external_data has no \"location\"");
        if (!location->value || !location->value[0])
                return pb_error(w, location->at, "external_data \"location\" is empty");

        const OnnxExternalKey *offset = &keys[ONNX_EXTERNAL_OFFSET], *length = &keys[ONNX_EXTERNAL_LENGTH];
        if (offset->seen && (k = parse_number(w, offset, "offset", &t->ext_offset)) < 0)
                return k;
        if (length->seen) {
                if ((k = parse_number(w, length, "length", &t->ext_length)) < 0)
                        return k;
                if (t->ext_length > (uint64_t) INT64_MAX - t->ext_offset)
                        return pb_error(w, length->at,
                                        "external_data \"offset\" %" PRIu64 " + \"length\" %" PRIu64
                                        " is past the largest file offset (%" PRId64 ")",
                                        t->ext_offset, t->ext_length, INT64_MAX);
                t->ext_has_length = true;
        }

        const OnnxExternalKey *checksum = &keys[ONNX_EXTERNAL_CHECKSUM];
        if (checksum->seen) {
                if ((k = parse_checksum(w, checksum, t->ext_checksum)) < 0)
                        return k;
                t->ext_has_checksum = true;
        }
        t->location = TAKE_PTR(location->value);
        return 0;
}
