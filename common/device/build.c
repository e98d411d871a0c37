/* SPDX-License-Identifier: MIT */

#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "build.h"
#include "clock.h"
#include "fileio.h"
#include "hashpipe.h"
#include "span.h"
#include "syncer.h"

/*
 * Bytes per read, decode and hash, and per copy_file_range call. A copy piece is the hashing
 * pipeline's depth (HASH_PIPE_SLOTS windows), so the kernel copies the next piece while the
 * hashing thread works through the last; measured on a 350 MB relocated task, 256 KiB / 1 MiB
 * took 0.55-0.65 s, 512 KiB / 2 MiB 0.36-0.45 s, 1 MiB / 4 MiB 0.44-0.60 s (and 12 MB of buffers).
 */
#define BUILD_WINDOW (512u << 10)
#define COPY_PIECE (HASH_PIPE_SLOTS * BUILD_WINDOW)
#define WRITEBACK_KICK (4u << 20)       /* start writeback after this many bytes, so the final fdatasync is short */

typedef struct Buffers {
        uint8_t *base, *frame, *out;
} Buffers;

typedef enum BuildPhase {
        BUILD_PASS,                     /* the target, in order */
        BUILD_CHECK,                    /* its SHA-256, the payload's end */
        BUILD_SYNCER,                   /* the fdatasyncs behind the pass finishing on their worker */
        BUILD_WRITEBACK,                /* waiting, in slices, for the disk to catch up with the result */
        BUILD_SYNC,                     /* fdatasync, the new record opened */
        BUILD_RECORD,                   /* the new record's stored base bytes */
        BUILD_COMMIT,
        BUILD_DONE,
} BuildPhase;

struct Builder {
        const FileSet *view_files;      /* borrowed: the base view's files */
        const FileSet *out;             /* borrowed: the result's files, once builder_output() names them */
        StageSource view;
        StageTarget tgt;
        const Manifest *m;              /* NULL: the base */
        uint64_t time_cap;              /* ns a step may take (0: no cap) */
        bool v2;
        uint64_t base_size;
        BuildPhase phase;

        uint64_t pos;                   /* target offset of the next byte */
        size_t next_span;               /* format 1: the next span not yet begun */
        SpanDecoder *decoder;
        const ManifestSpan *span;       /* the coded span being written, or NULL */
        uint64_t copy_from, copy_end;   /* a copy in progress: base offset of pos, target offset of its end */
        bool copying;
        uint8_t *ref;                   /* a ref span's reference, SPAN_REF_MAX bytes */
        bool plain;                     /* copy_file_range is unavailable: read and write */

        HashPipe *pipe;
        Buffers bufs[HASH_PIPE_SLOTS];
        SetHash full;                   /* every file of the result, then the set's digest */

        UndoSpan *rec;                  /* the new record's table */
        uint64_t n_rec, rec_idx, rec_done, rec_stored, rec_written;
        bool rec_relocated;
        UndoWriter *undo_out;
        char *undo_path;
        uint8_t undo_sha256[SHA256_DIGEST_SIZE];

        StageProgress progress;
        uint64_t unkicked;              /* bytes written since writeback was last started */
        uint64_t kick_from;             /* where the first of them went (the result is written in order) */
        Syncer *syncer;                 /* fdatasyncs the result behind the pass (syncer.h), until BUILD_SYNCER */
        uint64_t written_back;          /* BUILD_WRITEBACK: the result's bytes before this are on the disk */
};

Builder *builder_free(Builder *b) {
        if (!b)
                return NULL;
        syncer_free(b->syncer);         /* first: its worker may still fdatasync the (borrowed) result */
        hash_pipe_free(b->pipe);        /* the worker may still read the buffers */
        for (unsigned i = 0; i < HASH_PIPE_SLOTS; i++) {
                free(b->bufs[i].base);
                free(b->bufs[i].frame);
                free(b->bufs[i].out);
        }
        span_decoder_free(b->decoder);
        undo_writer_free(b->undo_out);
        free(b->undo_path);
        free(b->ref);
        free(b->rec);
        set_hash_done(&b->full);
        free(b);
        return NULL;
}

static int cmp_base_offset(const void *a, const void *b) {
        const UndoSpan *x = a, *y = b;
        return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/*
 * A relocated record: the copies say where base ranges now lie in the
 * result; every other base byte is stored. @rec holds the copies as (base
 * offset, length, target offset) and room for 2n + 1 entries.
 */
static int plan_relocated_record(Builder *b, size_t n_copies) {
        _cleanup_free_ UndoSpan *copies = malloc((n_copies ? n_copies : 1) * sizeof(UndoSpan));
        uint64_t cur = 0, n = 0;

        if (!copies)
                return -ENOMEM;
        memcpy(copies, b->rec, n_copies * sizeof(UndoSpan));
        qsort(copies, n_copies, sizeof(UndoSpan), cmp_base_offset);
        for (size_t i = 0; i < n_copies; i++) {
                const UndoSpan *c = &copies[i];
                uint64_t end = c->offset + c->length;
                if (end <= cur)
                        continue;       /* the same base bytes copied twice: the first place is enough */
                uint64_t start = c->offset > cur ? c->offset : cur;
                if (start > cur)
                        b->rec[n++] = (UndoSpan) { .offset = cur, .length = start - cur, .slot_offset = UNDO_STORED };
                uint64_t at = c->slot_offset + (start - c->offset);
                UndoSpan *prev = n ? &b->rec[n - 1] : NULL;
                if (prev && prev->slot_offset != UNDO_STORED && prev->slot_offset + prev->length == at)
                        prev->length += end - start;
                else
                        b->rec[n++] = (UndoSpan) { .offset = start, .length = end - start, .slot_offset = at };
                cur = end;
        }
        if (cur < b->base_size)
                b->rec[n++] = (UndoSpan) { .offset = cur, .length = b->base_size - cur, .slot_offset = UNDO_STORED };
        b->n_rec = n;
        return 0;
}

int builder_new(const FileSet *view_files, const StageSource *view, const StageTarget *tgt, uint64_t base_size,
                const char *undo_path, Builder **ret, TpError *err) {
        _cleanup_(builder_freep) Builder *b = calloc(1, sizeof(*b));
        int r;

        if (!b)
                return -ENOMEM;
        *b = (Builder) { .view_files = view_files, .view = *view, .tgt = *tgt, .base_size = base_size };
        b->m = tgt->bundle ? tgt->bundle->manifest : NULL;
        b->v2 = b->m && b->m->format == MANIFEST_FORMAT_RELOCATING;
        const UndoRecord *u = view->undo;
        if (u && u->relocated ? u->base_size != base_size : view->seal->size != base_size)
                return tp_error(err, -EBADMSG, "the slot to build from maps %" PRIu64 " base bytes, the base is %" PRIu64,
                                u && u->relocated ? u->base_size : view->seal->size, base_size);
        if (b->m && b->m->target.size != tgt->size)
                return tp_error(err, -EBADMSG, "the bundle's target is %" PRIu64 " bytes, the switch expects %" PRIu64,
                                b->m->target.size, tgt->size);
        if (!b->v2 && tgt->size != base_size)
                return tp_error(err, -EBADMSG, "an in-layout target of %" PRIu64 " bytes for a %" PRIu64 "-byte base",
                                tgt->size, base_size);
        if (b->m && b->m->base.size != base_size)
                return tp_error(err, -EBADMSG, "the bundle was made for a %" PRIu64 "-byte base, this one is %" PRIu64,
                                b->m->base.size, base_size);

        /* The new record's table: known before a byte is written, so the space check can count it. */
        size_t ns = b->m ? b->m->n_spans : 0;
        b->rec = calloc(2 * ns + 1, sizeof(UndoSpan));
        if (!b->rec)
                return -ENOMEM;
        if (tgt->new_base) {
                /* Nothing under a new base to return to: no record. */
        } else if (b->v2) {
                size_t nc = 0;
                for (size_t i = 0; i < ns; i++) {
                        const ManifestSpan *s = &b->m->spans[i];
                        if (s->encoding == SPAN_COPY)
                                b->rec[nc++] = (UndoSpan) { .offset = s->base_offset, .length = s->length,
                                                            .slot_offset = s->offset };
                }
                if ((r = plan_relocated_record(b, nc)) < 0)
                        return r;
                b->rec_relocated = true;
        } else if (b->m) {
                for (size_t i = 0; i < ns; i++)
                        b->rec[i] = (UndoSpan) { .offset = b->m->spans[i].offset, .length = b->m->spans[i].length,
                                                 .slot_offset = UNDO_STORED };
                b->n_rec = ns;
        }
        for (uint64_t i = 0; i < b->n_rec; i++)
                if (b->rec[i].slot_offset == UNDO_STORED)
                        b->rec_stored += b->rec[i].length;

        b->progress.total = b->progress.write_total = tgt->size + b->rec_stored;
        b->undo_path = strdup(undo_path);
        if (!b->undo_path)
                return -ENOMEM;
        size_t bufsize = span_decoder_buffer_size(BUILD_WINDOW);
        for (unsigned i = 0; i < HASH_PIPE_SLOTS; i++) {
                b->bufs[i] = (Buffers) { malloc(bufsize), malloc(bufsize), malloc(bufsize) };
                if (!b->bufs[i].base || !b->bufs[i].frame || !b->bufs[i].out)
                        return -ENOMEM;
        }
        if ((r = hash_pipe_new(&b->pipe)) < 0)
                return tp_error(err, r, "cannot start the hashing thread: %s", strerror(-r));
        /* Span digests on this thread: the hashing thread's one job is the whole-file stream. */
        if (b->m && (r = span_decoder_new(tgt->bundle, base_size, NULL, &b->decoder, err)) < 0)
                return r;
        for (size_t i = 0; i < view_files->n_files; i++)
                (void) posix_fadvise(view_files->files[i].fd, 0, 0, POSIX_FADV_SEQUENTIAL);
        *ret = TAKE_PTR(b);
        return 0;
}

uint64_t builder_space(const Builder *b) {
        uint64_t table = b->rec_relocated ? 24 + 24 * b->n_rec : 16 + 16 * b->n_rec;
        return b->tgt.size + (b->n_rec ? table + b->rec_stored + SHA256_DIGEST_SIZE : 0);
}

int builder_output(Builder *b, const FileSet *out, TpError *err) {
        if (b->out)
                return tp_error(err, -EBUSY, "builder: the output is already chosen");
        if (out->size != b->tgt.size)
                return tp_error(err, -EINVAL, "builder: an output of %" PRIu64 " bytes for a %" PRIu64 "-byte target",
                                out->size, b->tgt.size);
        int r = syncer_new(out, &b->syncer);
        if (r < 0)
                return tp_error(err, r, "builder: cannot start the thread that syncs the result: %s", strerror(-r));
        if (set_hash_init(&b->full, out) < 0) {
                b->syncer = syncer_free(b->syncer);
                return -ENOMEM;
        }
        b->out = out;
        return 0;
}

/* Count bytes written into the result at [pos, pos + n); now and then start their writeback without waiting for it. */
static void written(Builder *b, uint64_t pos, uint64_t n) {
        b->progress.slot_bytes += n;
        if (b->unkicked == 0)
                b->kick_from = pos;
        b->unkicked += n;
        if (b->unkicked >= WRITEBACK_KICK) {
                fileset_start_writeback(b->out, b->kick_from, pos + n - b->kick_from);
                b->unkicked = 0;
        }
}

static int read_base(Builder *b, uint64_t at, size_t n, uint8_t *buf, TpError *err) {
        int r = undo_read_base(b->view.undo, b->view_files, at, n, buf, err);
        if (r >= 0)
                b->progress.read_bytes += n;
        return r;
}

/*
 * Feed result bytes [pos, pos + n) (in pipeline slot @slot) into the digests of the output files
 * they lie in: each file has its own, so no piece fed crosses a file's end. The pass never goes
 * past the target's size, which is the output's (builder_output()), so every piece has room.
 */
static void hash_out(Builder *b, unsigned slot, uint64_t pos, const uint8_t *data, size_t n) {
        while (n > 0) {
                uint64_t room;
                Sha256 *h = set_hash_at(&b->full, pos, &room);
                size_t k = room < n ? (size_t) room : n;
                hash_pipe_feed(b->pipe, slot, h, NULL, data, k);
                pos += k;
                data += k;
                n -= k;
        }
}

/* Read result bytes [pos, pos + n) back and hash them (a copy the kernel made). */
static int hash_back(Builder *b, uint64_t pos, uint64_t n, TpError *err) {
        while (n > 0) {
                unsigned slot = hash_pipe_slot(b->pipe);
                size_t k = n < BUILD_WINDOW ? (size_t) n : BUILD_WINDOW;
                int r = fileset_pread(b->out, b->bufs[slot].base, k, pos);
                if (r < 0)
                        return tp_error(err, r == -ENODATA ? -EIO : r, "the new slot file: reading back at offset %" PRIu64
                                        ": %s", pos, strerror(r == -ENODATA ? EIO : -r));
                b->progress.read_bytes += k;
                hash_out(b, slot, pos, b->bufs[slot].base, k);
                pos += k;
                n -= k;
        }
        return 0;
}

/* The file of @s holding byte @off, with *@len cut to the bytes of that file from there (0 past the set's end). */
static const FileSetFile *file_run(const FileSet *s, uint64_t off, uint64_t *len) {
        const FileSetFile *f = &s->files[fileset_locate(s, off)];
        uint64_t room = off < s->size ? f->offset + f->size - off : 0;

        if (*len > room)
                *len = room;
        return f;
}

/* One piece of a copy: base bytes [copy_from, ...) to the result at pos, from one place of the base view. */
static int copy_piece(Builder *b, TpError *err) {
        uint64_t at, left = b->copy_end - b->pos;
        uint64_t run = undo_base_run(b->view.undo, b->copy_from, left < COPY_PIECE ? left : COPY_PIECE, &at);
        int r;

        if (run == 0)
                return tp_error(err, -EBADMSG, "base offset %" PRIu64 " lies outside the base view", b->copy_from);
        if (at != UNDO_STORED && !b->plain) {
                /* copy_file_range goes from one file into one file: the run stops where a file of either set ends. */
                const FileSetFile *from = file_run(b->view_files, at, &run), *into = file_run(b->out, b->pos, &run);
                if (run == 0)
                        return tp_error(err, -EIO, "the slot file ends before offset %" PRIu64, at);
                loff_t in = (loff_t) (at - from->offset), out = (loff_t) (b->pos - into->offset);
                ssize_t k = copy_file_range(from->fd, &in, into->fd, &out, run, 0);
                if (k < 0 && errno != EINTR && errno != EXDEV && errno != EINVAL && errno != ENOSYS &&
                    errno != EOPNOTSUPP)
                        return tp_error(err, negative_errno(), "copying base offset %" PRIu64 " into the new slot file: %s",
                                        b->copy_from, strerror(errno));
                if (k == 0)
                        return tp_error(err, -EIO, "the slot file ends before offset %" PRIu64, at);
                if (k > 0) {
                        if ((r = hash_back(b, b->pos, (uint64_t) k, err)) < 0)
                                return r;
                        written(b, b->pos, (uint64_t) k);
                        b->copy_from += (uint64_t) k;
                        b->pos += (uint64_t) k;
                        return 0;
                }
                if (errno != EINTR)
                        b->plain = true;
                return 0;
        }
        /* Through a buffer: the record's stored bytes, or no copy_file_range here. */
        unsigned slot = hash_pipe_slot(b->pipe);
        size_t k = run < BUILD_WINDOW ? (size_t) run : BUILD_WINDOW;
        if ((r = read_base(b, b->copy_from, k, b->bufs[slot].base, err)) < 0)
                return r;
        if ((r = fileset_pwrite(b->out, b->bufs[slot].base, k, b->pos)) < 0)
                return tp_error(err, r, "the new slot file: writing at offset %" PRIu64 ": %s", b->pos, strerror(-r));
        hash_out(b, slot, b->pos, b->bufs[slot].base, k);
        written(b, b->pos, k);
        b->copy_from += k;
        b->pos += k;
        return 0;
}

/* A coded span's next piece: its base bytes from the view, decoded, written, hashed. */
static int span_piece(Builder *b, TpError *err) {
        const ManifestSpan *s = b->span;
        uint64_t done = b->pos - s->offset;
        unsigned slot = hash_pipe_slot(b->pipe);
        Buffers *buf = &b->bufs[slot];
        const uint8_t *bytes;
        size_t n = span_decoder_want(b->decoder, BUILD_WINDOW);
        int r;

        if (span_base_in_pieces(s) || !b->v2) {
                /* In-layout spans decode against the base bytes under them; format-2 deltas at base_offset. */
                uint64_t at = (b->v2 ? s->base_offset : s->offset) + done;
                if ((r = read_base(b, at, n, buf->base, err)) < 0 ||
                    (r = span_decoder_base(b->decoder, slot, buf->base, n, NULL, err)) < 0)
                        return r;
        }
        if ((r = span_decoder_read(b->decoder, slot, buf->frame, buf->out, n, NULL, &bytes, err)) < 0)
                return r;
        if ((r = fileset_pwrite(b->out, bytes, n, b->pos)) < 0)
                return tp_error(err, r, "the new slot file: writing at offset %" PRIu64 ": %s", b->pos, strerror(-r));
        hash_out(b, slot, b->pos, bytes, n);
        written(b, b->pos, n);
        b->pos += n;
        if (b->pos == s->offset + s->length) {
                b->span = NULL;
                return span_decoder_end(b->decoder, err);
        }
        return 0;
}

/* Start what comes at pos: a copy (of base bytes, or a format-2 copy span) or a coded span. */
static int begin_next(Builder *b, TpError *err) {
        const ManifestSpan *s;
        int r;

        if (b->v2) {
                if ((r = span_decoder_next(b->decoder, &s, err)) < 0)
                        return r;
                if (r == 0 || s->offset != b->pos)
                        return tp_error(err, -EBADMSG, "the spans end at offset %" PRIu64 " of the target", b->pos);
                if (s->encoding == SPAN_COPY) {
                        b->copying = true;
                        b->copy_from = s->base_offset;
                        b->copy_end = s->offset + s->length;
                        return span_decoder_skip_copy(b->decoder, err);
                }
                b->span = s;
                if (s->encoding == SPAN_REF) {
                        if (!b->ref && !(b->ref = malloc(SPAN_REF_MAX)))
                                return -ENOMEM;
                        if (s->base_length > SPAN_REF_MAX)
                                return tp_error(err, -EBADMSG, "span #%zu: a reference of %" PRIu64 " bytes",
                                                (size_t) (s - b->m->spans), s->base_length);
                        if ((r = read_base(b, s->base_offset, s->base_length, b->ref, err)) < 0)
                                return r;
                        return span_decoder_base(b->decoder, hash_pipe_slot(b->pipe), b->ref, s->base_length, NULL, err);
                }
                return 0;
        }
        /* In layout: base bytes up to the next span, then the span. */
        if (b->m && b->next_span < b->m->n_spans && b->m->spans[b->next_span].offset == b->pos) {
                if ((r = span_decoder_next(b->decoder, &s, err)) < 0)
                        return r;
                if (r == 0 || s != &b->m->spans[b->next_span])
                        return tp_error(err, -EBADMSG, "the payload ended before span #%zu", b->next_span);
                b->next_span++;
                b->span = s;
                return 0;
        }
        b->copying = true;
        b->copy_from = b->pos;
        b->copy_end = b->m && b->next_span < b->m->n_spans ? b->m->spans[b->next_span].offset : b->tgt.size;
        if (b->copy_end <= b->pos || b->copy_end > b->tgt.size)
                return tp_error(err, -EBADMSG, "span #%zu is out of order", b->next_span);
        return 0;
}

static int pass_step(Builder *b, TpError *err) {
        int r;

        if (b->pos == b->tgt.size && !b->span && !b->copying) {
                b->phase = BUILD_CHECK;
                return 0;
        }
        if (b->copying) {
                if ((r = copy_piece(b, err)) < 0)
                        return r;
                if (b->pos == b->copy_end)
                        b->copying = false;
                return 0;
        }
        if (b->span)
                return span_piece(b, err);
        return begin_next(b, err);
}

static int check(Builder *b, TpError *err) {
        uint8_t d[SHA256_DIGEST_SIZE];
        char got[SHA256_HEX_SIZE], want[SHA256_HEX_SIZE];
        int r;

        hash_pipe_sync(b->pipe);
        if (b->decoder && (r = span_decoder_finish(b->decoder, err)) < 0)
                return r;
        set_hash_final(&b->full, d);
        if (memcmp(d, b->tgt.sha256, SHA256_DIGEST_SIZE) != 0) {
                sha256_to_hex(d, got);
                sha256_to_hex(b->tgt.sha256, want);
                b->progress.target_mismatch = true;
                return tp_error(err, -EBADMSG, "the built slot's SHA-256 %s is not the target's %s", got, want);
        }
        b->phase = BUILD_SYNCER;
        return 0;
}

static int sync_result(Builder *b, TpError *err) {
        int r;

        if ((r = fileset_fdatasync(b->out, "the new slot file", err)) < 0)
                return r;
        if (b->n_rec) {
                r = b->rec_relocated ? undo_writer_new_relocated(b->undo_path, b->rec, b->n_rec, b->base_size,
                                                                 &b->undo_out, err)
                                     : undo_writer_new(b->undo_path, b->rec, b->n_rec, &b->undo_out, err);
                if (r < 0)
                        return r;
        }
        b->phase = BUILD_RECORD;
        return 0;
}

/* The next piece of the stored base bytes, in entry order. */
static int record_step(Builder *b, TpError *err) {
        while (b->rec_idx < b->n_rec && b->rec[b->rec_idx].slot_offset != UNDO_STORED)
                b->rec_idx++;
        if (b->rec_idx == b->n_rec) {
                b->phase = BUILD_COMMIT;
                return 0;
        }
        const UndoSpan *e = &b->rec[b->rec_idx];
        uint64_t left = e->length - b->rec_done;
        size_t k = left < BUILD_WINDOW ? (size_t) left : BUILD_WINDOW;
        uint8_t *buf = b->bufs[0].base;         /* the pipe is idle after check() */
        int r;

        if ((r = read_base(b, e->offset + b->rec_done, k, buf, err)) < 0 ||
            (r = undo_writer_append(b->undo_out, buf, k, err)) < 0)
                return r;
        b->rec_done += k;
        b->rec_written += k;
        if (b->rec_done == e->length) {
                b->rec_idx++;
                b->rec_done = 0;
        }
        return 0;
}

static int commit(Builder *b, TpError *err) {
        if (b->undo_out) {
                int r = undo_writer_commit(b->undo_out, b->undo_sha256, &b->progress.undo_bytes, err);
                b->undo_out = undo_writer_free(b->undo_out);
                return r;
        }
        if (unlink(b->undo_path) < 0 && errno != ENOENT)
                return tp_error(err, negative_errno(), "%s: %s", b->undo_path, strerror(errno));
        return 0;
}

void builder_set_time_cap(Builder *b, uint64_t ns) {
        b->time_cap = ns;
}

int builder_step(Builder *b, uint64_t budget, TpError *err) {
        uint64_t start = b->progress.done, t0 = b->time_cap ? clock_mono_ns() : 0;
        int r;

        if (!b->out)
                return tp_error(err, -EINVAL, "builder: no output file");
        while (b->phase != BUILD_DONE) {
                if (b->progress.done - start >= budget ||
                    (b->time_cap && b->progress.done > start && clock_mono_ns() - t0 >= b->time_cap))
                        return 1;
                switch (b->phase) {
                case BUILD_PASS:
                        /* Synced piece by piece behind the pass, on the syncer's thread (syncer.h). */
                        if ((r = pass_step(b, err)) >= 0 && (r = syncer_behind(b->syncer, b->pos)) < 0)
                                return tp_error(err, r, "the new slot file: fdatasync: %s", strerror(-r));
                        break;
                case BUILD_CHECK:
                        r = check(b, err);
                        break;
                case BUILD_SYNCER:
                        /*
                         * Every fdatasync the pass asked for is done (or its error reported) before the
                         * writeback wait and the result's own fdatasync; waited for within the time cap.
                         */
                        r = syncer_end(&b->syncer, b->time_cap ? t0 + b->time_cap : 0);
                        if (r < 0)
                                return tp_error(err, r, "the new slot file: fdatasync: %s", strerror(-r));
                        if (r > 0)
                                return 1;
                        b->phase = BUILD_WRITEBACK;
                        break;
                case BUILD_WRITEBACK:
                        /*
                         * The whole result is new: what the disk has not yet written of it the
                         * fdatasync would wait for in one call, with every request to the daemon
                         * waiting behind it. Waited for here range by range, within the step's time
                         * cap; the pass's fdatasyncs keep the last one's cache flush short.
                         */
                        r = fileset_wait_writeback(b->out, &b->written_back, b->out->size,
                                                   b->time_cap ? t0 + b->time_cap : 0, "the new slot file", err);
                        if (r > 0)
                                return 1;
                        if (r == 0)
                                b->phase = BUILD_SYNC;
                        break;
                case BUILD_SYNC:
                        r = sync_result(b, err);
                        break;
                case BUILD_RECORD:
                        r = record_step(b, err);
                        break;
                case BUILD_COMMIT:
                        r = commit(b, err);
                        b->phase = BUILD_DONE;
                        break;
                default:
                        abort();
                }
                if (r < 0)
                        return r;
                b->progress.done = b->pos + b->rec_written;
        }
        return 0;
}

const StageProgress *builder_progress(const Builder *b) {
        return &b->progress;
}

void builder_result(const Builder *b, uint64_t *ret_undo_spans, uint8_t ret_undo_sha256[SHA256_DIGEST_SIZE],
                    bool *ret_relocated) {
        *ret_undo_spans = b->n_rec;
        memcpy(ret_undo_sha256, b->undo_sha256, SHA256_DIGEST_SIZE);
        *ret_relocated = b->rec_relocated;
}
