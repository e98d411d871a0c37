/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * A bounded walker over the protobuf wire format, streaming from a file
 * descriptor through a Reader (common/base/reader.h). No generated code, no
 * protobuf library: the caller describes the message types it cares about
 * (PbSchema) and walks their fields with callbacks, descending into the
 * submessages it wants and skipping the rest.
 *
 * Every check an untrusted input needs happens here, before a callback
 * sees a field:
 *   - a varint is at most 10 bytes and fits in 64 bits (non-minimal
 *     encodings are accepted, as protobuf does); a tag fits in 32 bits;
 *   - field number 0 is refused; wire types 3 and 4 (groups) and 6, 7 are
 *     refused; a field the schema names must have one of its wire types;
 *   - every field, length-delimited payload included, lies inside its
 *     parent message (the top-level message is the whole range given);
 *   - messages nest at most PB_MAX_DEPTH deep.
 * Errors are -EBADMSG with a message naming the path, the offset of the
 * offending field and what was wrong, e.g. "graph.initializer #3
 * ('conv1.weight') at offset 1234: raw_data length 99999 runs past the end
 * of its TensorProto (ends at 2000)"; -ENOMEM; or -errno from I/O. After
 * an error the walker's frames still describe where it happened; the
 * only thing left to do with it is pb_walker_done().
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "macro.h"
#include "reader.h"

enum {
        PB_VARINT = 0,
        PB_FIXED64 = 1,
        PB_LEN = 2,
        PB_FIXED32 = 5,
};
#define PB_W(t) (1u << (t))             /* a set of wire types */

#define PB_MAX_DEPTH 32                 /* messages nested below the top-level one */

typedef struct PbFieldInfo {
        uint32_t number;
        const char *name;
        unsigned wires;                 /* PB_W() set of the wire types it may have */
} PbFieldInfo;

/* A message type: its name (for errors) and the fields a caller handles. */
typedef struct PbSchema {
        const char *name;
        const PbFieldInfo *fields;
        size_t n_fields;
} PbSchema;

typedef struct PbFrame {
        const PbSchema *type;
        const char *field;      /* the parent's field holding this message; NULL at the top */
        int64_t index;          /* occurrence of that field in the parent (from 0), -1 when singular */
        uint64_t start, end;    /* absolute range of the message's bytes */
        char label[48];         /* the message's name when known (shown in errors), "" if not */
} PbFrame;

typedef struct PbWalker {
        Reader r;
        TpError *err;
        unsigned depth;                 /* frames[depth] is the message being walked */
        PbFrame frames[PB_MAX_DEPTH + 1];
} PbWalker;

typedef struct PbField {
        uint32_t number;
        unsigned wire;
        const char *name;       /* from the schema, NULL for a field it does not list */
        char label[24];         /* name, or "field N" */
        uint64_t offset;        /* absolute offset of the tag */
        uint64_t value;         /* PB_VARINT: the value */
        uint64_t start, length; /* PB_LEN: the payload; PB_FIXED*: where the 8 or 4 bytes are */
} PbField;

typedef int (*PbFieldFn)(PbWalker *w, const PbField *f, void *userdata);
typedef int (*PbWalkFn)(PbWalker *w, void *userdata);

/* Walk [0, size) of @fd as one message of type @top. -ENOMEM. @err may be NULL. */
_warn_unused_result_ int pb_walker_init(PbWalker *w, int fd, uint64_t size, const PbSchema *top, TpError *err);
void pb_walker_done(PbWalker *w);

/*
 * Call @fn for each field of the current message, in file order. @fn may
 * read a PB_LEN payload or descend into it; whatever it leaves unread is
 * skipped. A negative return from @fn stops the walk and is returned.
 */
_warn_unused_result_ int pb_walk_fields(PbWalker *w, PbFieldFn fn, void *userdata);

/* Walk @f's payload as a message of @type with @walk (which usually calls pb_walk_fields). */
_warn_unused_result_ int pb_descend(PbWalker *w, const PbField *f, const PbSchema *type, int64_t index, PbWalkFn walk,
                                    void *userdata);

/* A varint that must end before the absolute offset @end; @what names it in errors. */
_warn_unused_result_ int pb_read_varint(PbWalker *w, uint64_t end, const char *what, uint64_t *ret);

/* Replace *@ret with @f's payload as a string of at most @max bytes holding no NUL. */
_warn_unused_result_ int pb_read_string(PbWalker *w, const PbField *f, size_t max, char **ret);

/*
 * Fill @rets[i] (when NULL) with the first occurrence of string field
 * @numbers[i] of the current message, then return to the message's start,
 * so a caller can learn a message's names before walking its children.
 */
_warn_unused_result_ int pb_scan_strings(PbWalker *w, const uint32_t *numbers, char **rets, size_t n, size_t max);

/* "graph.node #2 ('If_0').attribute #0 ('then_branch').g", or the top type's name. */
void pb_path(const PbWalker *w, char *buf, size_t size);

/* Record "<path> at offset <offset>: <message>" in the walker's error; returns -EBADMSG. */
_printf_(3, 4) int pb_error(PbWalker *w, uint64_t offset, const char *fmt, ...);
int pb_oom(PbWalker *w);        /* -ENOMEM, recorded */

/* Name the current message in error paths. */
void pb_set_label(PbWalker *w, const char *s);

static inline const PbFrame *pb_frame(const PbWalker *w) {
        return &w->frames[w->depth];
}
