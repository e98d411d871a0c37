/* SPDX-License-Identifier: MIT */

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "pbwire.h"

int pb_walker_init(PbWalker *w, int fd, uint64_t size, const PbSchema *top, TpError *err) {
        *w = (PbWalker) { .err = err };
        w->frames[0] = (PbFrame) { .type = top, .index = -1, .end = size };
        int k = reader_init(&w->r, fd, 0, size);
        if (k < 0)
                return tp_error(err, k, k == -ENOMEM ? "out of memory" : "cannot read the file");
        return 0;
}

void pb_walker_done(PbWalker *w) {
        reader_done(&w->r);
}

void pb_path(const PbWalker *w, char *buf, size_t size) {
        size_t n = 0;

        if (w->depth == 0) {
                snprintf(buf, size, "%s", w->frames[0].type->name);
                return;
        }
        buf[0] = '\0';
        for (unsigned i = 1; i <= w->depth && n + 1 < size; i++) {
                const PbFrame *fr = &w->frames[i];
                int k = snprintf(buf + n, size - n, "%s%s", i > 1 ? "." : "", fr->field);
                if (k >= 0 && (size_t) k < size - n && fr->index >= 0)
                        k += snprintf(buf + n + k, size - n - (size_t) k, " #%" PRId64, fr->index);
                if (k >= 0 && (size_t) k < size - n && fr->label[0])
                        k += snprintf(buf + n + k, size - n - (size_t) k, " ('%s')", fr->label);
                if (k < 0)
                        break;
                n += (size_t) k;
        }
}

int pb_error(PbWalker *w, uint64_t offset, const char *fmt, ...) {
        char path[320], what[TP_ERROR_MAX];
        va_list ap;

        pb_path(w, path, sizeof(path));
        va_start(ap, fmt);
        vsnprintf(what, sizeof(what), fmt, ap);
        va_end(ap);
        return tp_error(w->err, -EBADMSG, "%s at offset %" PRIu64 ": %s", path, offset, what);
}

int pb_oom(PbWalker *w) {
        return tp_error(w->err, -ENOMEM, "out of memory");
}

/* A failed read of bytes the walk already checked lie inside the file. */
static int pb_io(PbWalker *w, int k) {
        if (k == -EBADMSG)
                return pb_error(w, w->r.pos, "the file ends early (was it changed while being read?)");
        if (k == -ENOMEM)
                return pb_oom(w);
        char path[320];
        pb_path(w, path, sizeof(path));
        return tp_error(w->err, k, "%s at offset %" PRIu64 ": read failed: %s", path, w->r.pos, strerror(-k));
}

void pb_set_label(PbWalker *w, const char *s) {
        snprintf(w->frames[w->depth].label, sizeof(w->frames[w->depth].label), "%s", s);
}

static const char *type_name(const PbWalker *w) {
        return pb_frame(w)->type->name;
}

int pb_read_varint(PbWalker *w, uint64_t end, const char *what, uint64_t *ret) {
        uint64_t avail = end - w->r.pos, v = 0;
        size_t n = avail < 10 ? (size_t) avail : 10;
        const uint8_t *p;

        if (n == 0)
                return pb_error(w, w->r.pos, "%s missing: its %s ends at %" PRIu64, what, type_name(w), end);
        int k = reader_peek(&w->r, n, &p);
        if (k < 0)
                return pb_io(w, k);
        for (size_t i = 0; i < n; i++) {
                if (i == 9 && (p[i] & 0x80))
                        return pb_error(w, w->r.pos, "%s: varint longer than 10 bytes", what);
                if (i == 9 && p[i] > 1)
                        return pb_error(w, w->r.pos, "%s: varint does not fit in 64 bits", what);
                v |= (uint64_t) (p[i] & 0x7f) << (7 * i);
                if (!(p[i] & 0x80)) {
                        w->r.pos += i + 1;
                        *ret = v;
                        return 0;
                }
        }
        return pb_error(w, w->r.pos, "%s: varint runs past the end of its %s (ends at %" PRIu64 ")", what,
                        type_name(w), end);
}

/* Read the next field header of the current message, leaving the reader at a PB_LEN payload. */
static int next_field(PbWalker *w, PbField *f) {
        const PbFrame *fr = pb_frame(w);
        uint64_t tag, need = 0;
        unsigned wires = 0;
        int k;

        *f = (PbField) { .offset = w->r.pos };
        k = pb_read_varint(w, fr->end, "field tag", &tag);
        if (k < 0)
                return k;
        if (tag > UINT32_MAX)
                return pb_error(w, f->offset, "field tag %" PRIu64 " does not fit in 32 bits", tag);
        f->number = (uint32_t) (tag >> 3);
        f->wire = (unsigned) (tag & 7);
        if (f->number == 0)
                return pb_error(w, f->offset, "field number 0 is invalid");

        snprintf(f->label, sizeof(f->label), "field %" PRIu32, f->number);
        for (size_t i = 0; i < fr->type->n_fields; i++)
                if (fr->type->fields[i].number == f->number) {
                        f->name = fr->type->fields[i].name;
                        snprintf(f->label, sizeof(f->label), "%s", f->name);
                        wires = fr->type->fields[i].wires;
                        break;
                }

        switch (f->wire) {
        case PB_VARINT:
        case PB_LEN:
                break;
        case PB_FIXED64:
                need = 8;
                break;
        case PB_FIXED32:
                need = 4;
                break;
        case 3:
        case 4:
                return pb_error(w, f->offset, "%s has wire type %u (group), which is not supported", f->label,
                                f->wire);
        default:
                return pb_error(w, f->offset, "%s has invalid wire type %u", f->label, f->wire);
        }
        if (wires && !(wires & PB_W(f->wire)))
                return pb_error(w, f->offset, "%s has wire type %u, which this field cannot have", f->label, f->wire);

        if (f->wire == PB_VARINT)
                return pb_read_varint(w, fr->end, f->label, &f->value);
        if (f->wire == PB_LEN) {
                k = pb_read_varint(w, fr->end, f->label, &need);
                if (k < 0)
                        return k;
        }
        if (need > fr->end - w->r.pos)
                return pb_error(w, f->offset, "%s length %" PRIu64 " runs past the end of its %s (ends at %" PRIu64 ")",
                                f->label, need, type_name(w), fr->end);
        f->start = w->r.pos;
        f->length = need;
        if (f->wire != PB_LEN)
                w->r.pos += need;
        return 0;
}

int pb_walk_fields(PbWalker *w, PbFieldFn fn, void *userdata) {
        uint64_t end = pb_frame(w)->end;

        while (w->r.pos < end) {
                PbField f;
                int k = next_field(w, &f);
                if (k < 0)
                        return k;
                k = fn(w, &f, userdata);
                if (k < 0)
                        return k;
                if (f.wire == PB_LEN) {
                        k = reader_seek(&w->r, f.start + f.length);
                        if (k < 0)
                                return pb_io(w, k);
                }
        }
        return 0;
}

int pb_descend(PbWalker *w, const PbField *f, const PbSchema *type, int64_t index, PbWalkFn walk, void *userdata) {
        if (f->wire != PB_LEN)
                return pb_error(w, f->offset, "%s is not a message (wire type %u)", f->label, f->wire);
        if (w->depth >= PB_MAX_DEPTH)
                return pb_error(w, f->offset, "%s nests deeper than %d messages", f->label, PB_MAX_DEPTH);
        w->depth++;
        w->frames[w->depth] = (PbFrame) {
                .type = type,
                .field = f->name ? f->name : f->label,
                .index = index,
                .start = f->start,
                .end = f->start + f->length,
        };
        int k = reader_seek(&w->r, f->start);
        if (k < 0)
                return pb_io(w, k);
        k = walk(w, userdata);
        if (k < 0)
                return k;       /* the frames stay: they say where */
        w->depth--;
        return 0;
}

int pb_read_string(PbWalker *w, const PbField *f, size_t max, char **ret) {
        if (f->wire != PB_LEN)
                return pb_error(w, f->offset, "%s is not a string (wire type %u)", f->label, f->wire);
        if (f->length > max)
                return pb_error(w, f->offset, "%s is %" PRIu64 " bytes long, more than the cap of %zu", f->label,
                                f->length, max);
        char *s = malloc(f->length + 1);
        if (!s)
                return pb_oom(w);
        int k = reader_seek(&w->r, f->start);
        if (k >= 0)
                k = reader_read(&w->r, s, f->length);
        if (k < 0) {
                free(s);
                return pb_io(w, k);
        }
        if (memchr(s, '\0', f->length)) {
                free(s);
                return pb_error(w, f->offset, "%s contains a NUL byte", f->label);
        }
        s[f->length] = '\0';
        free(*ret);
        *ret = s;
        return 0;
}

typedef struct ScanState {
        const uint32_t *numbers;
        char **rets;
        size_t n, max;
} ScanState;

static int scan_field(PbWalker *w, const PbField *f, void *userdata) {
        ScanState *s = userdata;

        for (size_t i = 0; i < s->n; i++)
                if (f->number == s->numbers[i] && !s->rets[i])
                        return pb_read_string(w, f, s->max, &s->rets[i]);
        return 0;
}

int pb_scan_strings(PbWalker *w, const uint32_t *numbers, char **rets, size_t n, size_t max) {
        ScanState s = { numbers, rets, n, max };

        int k = pb_walk_fields(w, scan_field, &s);
        if (k < 0)
                return k;
        k = reader_seek(&w->r, pb_frame(w)->start);
        return k < 0 ? pb_io(w, k) : 0;
}
