/* SPDX-License-Identifier: MIT */

#include <fcntl.h>
#include <inttypes.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "fileio.h"
#include "hashpipe.h"
#include "span.h"
#include "stage.h"
#include "syncer.h"
#include "workbuf.h"

#define STAGE_WINDOW (256u << 10)       /* bytes per read outside spans, and per raw-span piece */
#define WRITEBACK_KICK (4u << 20)       /* start writeback after this many bytes, so the final fdatasync is short */
/*
 * fdatasync behind the pass (syncer.h) after this many bytes. Requests made while one runs only
 * move its end, so this is the least the disk is asked to flush at a time, not how often. With 2
 * MiB the stage step of a ~24 MB incremental switch took 3.6 ms less than with 8 MiB, its final
 * fdatasync finding less left (median of 64 switches each, alternating; ext4 on a virtio disk).
 */
#define SYNC_PIECE (2u << 20)
#define CHUNK_RING 64                   /* chunk digests in flight on the hashing thread (16 MiB of 256 KiB chunks) */

typedef struct Interval {
        uint64_t start, end;
} Interval;

/* A hashing-pipeline slot's buffers: untouched until the worker is done with them. */
typedef struct Buffers {
        uint8_t *base, *frame, *out;
} Buffers;

/* A window's new bytes written into the slot by the pipe, after the decode that makes them (read ahead). */
typedef struct SlotWrite {
        const FileSet *slot;
        const uint8_t *bytes;
        size_t n;
        uint64_t pos;
        int r;                          /* the write's result: read once the pipe hands the slot out again */
} SlotWrite;

typedef enum StagePhase {
        PHASE_PASS,                     /* walking the intervals */
        PHASE_VERIFY,                   /* the digests against the target's */
        PHASE_WRITEBACK,                /* waiting, in slices, for the disk to catch up with the slot */
        PHASE_FINISH,                   /* fdatasync, commit the undo record */
        PHASE_DONE,
} StagePhase;

struct Stager {
        const FileSet *slot;            /* borrowed: the slot's files, one space */
        StageSource src;
        StageTarget tgt;
        const Manifest *m;              /* NULL when returning to the base */
        bool incremental;
        StagePhase phase;
        uint64_t time_cap;              /* ns a step may take (0: no cap) */

        Interval *iv;                   /* what the pass covers, sorted, chunk-aligned when chunks are kept */
        size_t n_iv, cur_iv;
        uint64_t pos;

        SpanDecoder *decoder;
        size_t next_span;               /* index of the next new span */
        const ManifestSpan *span;       /* the span being written, or NULL */

        uint64_t undo_idx;              /* first source undo span not wholly before pos */
        UndoWriter *undo_out;
        char *undo_path;
        uint64_t undo_spans;
        uint8_t undo_sha256[SHA256_DIGEST_SIZE];

        HashPipe *pipe;
        Buffers bufs[HASH_PIPE_SLOTS];
        SlotWrite writes[HASH_PIPE_SLOTS];
        uint8_t *bufmem;                /* a workbuf holding them all */
        size_t bufsize;
        SetHash full;                   /* VERIFY_FULL: every file of the slot, then the set's digest */
        Sha256 ring[CHUNK_RING];        /* chunk states: the current one and those still being hashed */
        uint64_t ring_chunk[CHUNK_RING];/* which chunk each holds */
        unsigned ring_cur, ring_pending;/* the current entry; entries ended but not yet finalised */
        uint8_t *chunks;                /* the new chunk table, or NULL */
        uint64_t n_chunks;

        StageProgress progress;
        uint64_t unkicked;              /* bytes written since writeback was last started */
        uint64_t kick_from;             /* where the first of them went (the pass writes in space order) */
        uint64_t write_lo, write_hi;    /* the slot's bytes written lie in [write_lo, write_hi) */
        uint64_t written_back;          /* PHASE_WRITEBACK: the slot's bytes in [write_lo, this) are on the disk */
        Syncer *syncer;                 /* fdatasyncs the slot behind the pass, on its own thread */
        uint64_t unsynced;              /* bytes written since the syncer was last asked */
};

/*
 * Count bytes written into the slot at [pos, pos + n); now and then start their writeback without
 * waiting for it, and have the syncer fdatasync them, so that the disk's cache is flushed piece
 * by piece while the pass goes on and the fdatasync at the end finds little left. 0, or the
 * syncer's error.
 */
static int written(Stager *s, uint64_t pos, uint64_t n) {
        s->progress.slot_bytes += n;
        if (s->progress.slot_bytes == n)
                s->write_lo = s->written_back = pos;    /* the pass writes in space order */
        s->write_hi = pos + n;
        if (s->unkicked == 0)
                s->kick_from = pos;
        s->unkicked += n;
        if (s->unkicked >= WRITEBACK_KICK) {
                fileset_start_writeback(s->slot, s->kick_from, pos + n - s->kick_from);
                s->unkicked = 0;
        }
        s->unsynced += n;
        if (s->unsynced >= SYNC_PIECE) {
                s->unsynced = 0;
                return syncer_ask(s->syncer, pos + n);
        }
        return 0;
}

static int write_failed(uint64_t pos, int r, TpError *err) {
        return tp_error(err, r, "slot: writing at offset %" PRIu64 ": %s", pos, strerror(-r));
}

static void write_job(void *arg) {
        SlotWrite *w = arg;
        w->r = fileset_pwrite(w->slot, w->bytes, w->n, w->pos);
}

/* A write the pipe did for pipeline slot @slot, which it has just handed out again (or synced): its error. */
static int slot_written(Stager *s, unsigned slot, TpError *err) {
        SlotWrite *w = &s->writes[slot];
        int r = w->r;

        w->r = 0;
        return r < 0 ? write_failed(w->pos, r, err) : 0;
}

/* The slot's fdatasync failed (on the syncer's thread, or on this one). */
static int sync_failed(int r, TpError *err) {
        return tp_error(err, r, "slot: fdatasync: %s", strerror(-r));
}

Stager *stager_free(Stager *s) {
        if (!s)
                return NULL;
        hash_pipe_free(s->pipe);        /* first: the worker may still read the buffers and the digests */
        syncer_free(s->syncer);         /* ... and this one fdatasync the (borrowed) slot */
        workbuf_free(s->bufmem);
        span_decoder_free(s->decoder);
        undo_writer_free(s->undo_out);
        free(s->undo_path);
        free(s->iv);
        free(s->chunks);
        set_hash_done(&s->full);
        free(s);
        return NULL;
}

static int add_interval(Stager *s, uint64_t start, uint64_t end) {
        uint64_t c = s->tgt.chunk_size;
        start = start / c * c;
        end = end + c - 1 < end ? s->tgt.size : (end + c - 1) / c * c;
        if (end > s->tgt.size)
                end = s->tgt.size;
        if (s->n_iv > 0 && start <= s->iv[s->n_iv - 1].end) {
                if (end > s->iv[s->n_iv - 1].end)
                        s->iv[s->n_iv - 1].end = end;
                return 0;
        }
        s->iv[s->n_iv++] = (Interval) { start, end };
        return 0;
}

/* The chunk-aligned ranges touched by the source's undo spans or the target's spans, merged. */
static int plan_incremental(Stager *s) {
        uint64_t nu = s->src.undo ? s->src.undo->n : 0, nn = s->m ? s->m->n_spans : 0;
        s->iv = calloc(nu + nn + 1, sizeof(Interval));
        if (!s->iv)
                return -ENOMEM;
        for (uint64_t i = 0, j = 0; i < nu || j < nn;) {
                bool take_undo = j >= nn || (i < nu && s->src.undo->spans[i].offset < s->m->spans[j].offset);
                if (take_undo) {
                        const UndoSpan *u = &s->src.undo->spans[i++];
                        add_interval(s, u->offset, u->offset + u->length);
                } else {
                        const ManifestSpan *m = &s->m->spans[j++];
                        add_interval(s, m->offset, m->offset + m->length);
                }
        }
        return 0;
}

int stager_new(const FileSet *slot, const StageSource *src, const StageTarget *tgt, VerifyMode mode,
               const char *undo_path, Stager **ret, TpError *err) {
        _cleanup_(stager_freep) Stager *s = calloc(1, sizeof(*s));
        int r;

        if (!s)
                return -ENOMEM;
        s->slot = slot;
        s->src = *src;
        s->tgt = *tgt;
        s->m = tgt->bundle ? tgt->bundle->manifest : NULL;
        if (slot->size != tgt->size || src->seal->size != tgt->size || (s->m && s->m->target.size != tgt->size))
                return tp_error(err, -EBADMSG, "the slot is %" PRIu64 " bytes, the target %" PRIu64
                                " (tasks that change the model's size are not supported on the device)",
                                slot->size, s->m ? s->m->target.size : tgt->size);
        if (tgt->chunk_size && (tgt->chunk_size < CHUNK_MIN_SIZE ||
                                chunk_count(tgt->size, tgt->chunk_size) > CHUNK_MAX_ENTRIES))
                return tp_error(err, -EBADMSG, "chunk size %" PRIu64 " out of range", tgt->chunk_size);

        s->incremental = mode == VERIFY_INCREMENTAL && tgt->chunk_size && src->chunks &&
                         src->seal->chunk_size == tgt->chunk_size;
        s->progress.incremental = s->incremental;
        if (tgt->chunk_size) {
                s->n_chunks = chunk_count(tgt->size, tgt->chunk_size);
                s->chunks = malloc(s->n_chunks * SHA256_DIGEST_SIZE + 1);
                if (!s->chunks)
                        return -ENOMEM;
                if (s->incremental)
                        memcpy(s->chunks, src->chunks, s->n_chunks * SHA256_DIGEST_SIZE);
        }
        if (s->incremental) {
                if ((r = plan_incremental(s)) < 0)
                        return r;
        } else {
                s->iv = calloc(1, sizeof(Interval));
                if (!s->iv)
                        return -ENOMEM;
                s->iv[0] = (Interval) { 0, tgt->size };
                s->n_iv = tgt->size > 0;
        }
        uint64_t last_write = 0;        /* file offset past the last byte the pass writes */
        if (s->src.undo && s->src.undo->n)
                last_write = s->src.undo->spans[s->src.undo->n - 1].offset + s->src.undo->spans[s->src.undo->n - 1].length;
        if (s->m && s->m->n_spans) {
                const ManifestSpan *last = &s->m->spans[s->m->n_spans - 1];
                if (last->offset + last->length > last_write)
                        last_write = last->offset + last->length;
        }
        for (size_t i = 0; i < s->n_iv; i++) {
                s->progress.total += s->iv[i].end - s->iv[i].start;
                if (s->iv[i].start < last_write)
                        s->progress.write_total += (s->iv[i].end < last_write ? s->iv[i].end : last_write) - s->iv[i].start;
        }
        if (s->n_iv)
                s->pos = s->iv[0].start;

        s->bufsize = span_decoder_buffer_size(STAGE_WINDOW);
        s->bufmem = workbuf_new(3 * HASH_PIPE_SLOTS * s->bufsize);
        if (!s->bufmem)
                return -ENOMEM;
        for (unsigned i = 0; i < HASH_PIPE_SLOTS; i++) {
                uint8_t *p = s->bufmem + 3 * i * s->bufsize;
                s->bufs[i] = (Buffers) { p, p + s->bufsize, p + 2 * s->bufsize };
        }
        r = hash_pipe_new(&s->pipe);
        if (r < 0)
                return tp_error(err, r, "cannot start the hashing thread: %s", strerror(-r));
        r = syncer_new(slot, &s->syncer);
        if (r < 0)
                return tp_error(err, r, "cannot start the syncing thread: %s", strerror(-r));
        if (set_hash_init(&s->full, slot) < 0)
                return -ENOMEM;
        sha256_init(&s->ring[0]);
        s->ring_chunk[0] = s->pos / (tgt->chunk_size ? tgt->chunk_size : 1);

        s->undo_path = strdup(undo_path);
        if (!s->undo_path)
                return -ENOMEM;
        if (s->m) {
                /*
                 * The slot holds base bytes under every span (its own, or the undo record's). Full mode
                 * hashes the span digests on this thread, so that the hashing thread's one job is the
                 * whole-file stream; incremental mode hashes far less there, so it takes them too.
                 */
                if ((r = span_decoder_new(tgt->bundle, tgt->size, s->incremental ? s->pipe : NULL, &s->decoder,
                                          err)) < 0)
                        return r;
                /* Nothing acts on a span's bytes as checked before verify(): the pass need not wait at its end. */
                span_decoder_defer_checks(s->decoder);
                _cleanup_free_ UndoSpan *us = calloc(s->m->n_spans + 1, sizeof(UndoSpan));
                if (!us)
                        return -ENOMEM;
                for (size_t i = 0; i < s->m->n_spans; i++)
                        us[i] = (UndoSpan) { s->m->spans[i].offset, s->m->spans[i].length, 0 };
                if ((r = undo_writer_new(undo_path, us, s->m->n_spans, &s->undo_out, err)) < 0)
                        return r;
                s->undo_spans = s->m->n_spans;
        }
        for (size_t i = 0; i < slot->n_files; i++)
                (void) posix_fadvise(slot->files[i].fd, 0, 0, POSIX_FADV_SEQUENTIAL);
        *ret = TAKE_PTR(s);
        return 0;
}

/* Finalise the chunk digests the hashing thread has finished (all of them after a sync). */
static void chunks_settle(Stager *s) {
        hash_pipe_sync(s->pipe);
        for (unsigned k = 1; k <= s->ring_pending; k++) {
                unsigned e = (s->ring_cur + CHUNK_RING - k) % CHUNK_RING;
                sha256_final(&s->ring[e], s->chunks + s->ring_chunk[e] * SHA256_DIGEST_SIZE);
        }
        s->ring_pending = 0;
}

/* The state of the chunk holding @pos: begun afresh where an interval starts at a new chunk (incremental
 * passes skip untouched ones). */
static Sha256 *chunk_at(Stager *s, uint64_t pos) {
        uint64_t c = s->tgt.chunk_size;
        Sha256 *cur = &s->ring[s->ring_cur];

        if (s->ring_chunk[s->ring_cur] != pos / c) {
                s->ring_chunk[s->ring_cur] = pos / c;
                sha256_init(cur);
        }
        return cur;
}

/* The bytes up to @pos have been fed to the current chunk: past its end, the ring moves on. */
static void chunk_fed(Stager *s, uint64_t pos) {
        uint64_t c = s->tgt.chunk_size;

        if (pos % c == 0 || pos == s->tgt.size) {
                if (s->ring_pending == CHUNK_RING - 1)
                        chunks_settle(s);
                s->ring_pending++;
                s->ring_cur = (s->ring_cur + 1) % CHUNK_RING;
                s->ring_chunk[s->ring_cur] = pos / c;
                sha256_init(&s->ring[s->ring_cur]);
        }
}

/*
 * Hash result bytes [pos, pos+n) (held in pipeline slot @slot) into the
 * file and chunk digests. Each file of the slot has its own digest, so no
 * piece fed crosses a file's end; chunks are over the space and may. A
 * chunk's state stays in the ring until the hashing thread is done with it,
 * so chunk boundaries do not stall the pipeline.
 */
static void hash_result(Stager *s, unsigned slot, uint64_t pos, const uint8_t *data, size_t n) {
        while (n > 0) {
                uint64_t room = UINT64_MAX;
                Sha256 *file = s->incremental ? NULL : set_hash_at(&s->full, pos, &room);
                size_t k = room < n ? (size_t) room : n;
                if (!s->chunks) {
                        hash_pipe_feed(s->pipe, slot, file, NULL, data, k);
                        pos += k;
                        data += k;
                        n -= k;
                        continue;
                }
                uint64_t c = s->tgt.chunk_size, end = (pos / c + 1) * c;
                if (end - pos < k)
                        k = (size_t) (end - pos);
                hash_pipe_feed(s->pipe, slot, chunk_at(s, pos), file, data, k);
                pos += k;
                data += k;
                n -= k;
                chunk_fed(s, pos);
        }
}

/*
 * Incremental: the chunk state that new bytes [pos, pos+n) may go into in
 * the span digest's own pass (sha256_update2()), when they lie in one chunk;
 * NULL when they do not (hash_result() then cuts them at the boundary). Full
 * passes hash the span digests on this thread and the rest on the pipe, so
 * they never share.
 */
static Sha256 *chunk_sharing(Stager *s, uint64_t pos, size_t n) {
        uint64_t c = s->tgt.chunk_size;

        if (!s->incremental || !s->chunks || n == 0 || pos / c != (pos + n - 1) / c)
                return NULL;
        return chunk_at(s, pos);
}

/* Read slot bytes [pos, pos+n) into @buf. */
static int read_slot(Stager *s, uint64_t pos, size_t n, uint8_t *buf, TpError *err) {
        int r = fileset_pread(s->slot, buf, n, pos);

        if (r < 0)
                return tp_error(err, r == -ENODATA ? -EIO : r, "slot: reading at offset %" PRIu64 ": %s", pos,
                                strerror(r == -ENODATA ? EIO : -r));
        return 0;
}

/*
 * The base bytes of [pos, pos+n) into @buf: the slot's bytes, with the
 * source undo record's bytes where the source's task overwrote them (the
 * slot's own bytes there are not read). With @restore those undo ranges are
 * also written back into the slot.
 */
static int read_base(Stager *s, uint64_t pos, size_t n, uint8_t *buf, bool restore, TpError *err) {
        UndoRecord *u = s->src.undo;
        uint64_t at = pos, end = pos + n;
        int r;

        s->progress.read_bytes += n;
        if (u)
                while (s->undo_idx < u->n && u->spans[s->undo_idx].offset + u->spans[s->undo_idx].length <= pos)
                        s->undo_idx++;
        for (uint64_t j = s->undo_idx; at < end; j++) {
                const UndoSpan *us = u && j < u->n && u->spans[j].offset < end ? &u->spans[j] : NULL;
                uint64_t lo = !us ? end : us->offset > at ? us->offset : at;
                if (lo > at && (r = read_slot(s, at, lo - at, buf + (at - pos), err)) < 0)
                        return r;
                if (!us)
                        break;
                uint64_t hi = us->offset + us->length < end ? us->offset + us->length : end;
                r = pread_full(u->fd, buf + (lo - pos), hi - lo, us->data_offset + (lo - us->offset));
                if (r < 0)
                        return tp_error(err, r == -ENODATA ? -EIO : r, "undo record: reading: %s", strerror(-r));
                if (restore) {
                        r = fileset_pwrite(s->slot, buf + (lo - pos), hi - lo, lo);
                        if (r < 0)
                                return write_failed(lo, r, err);
                        if ((r = written(s, lo, hi - lo)) < 0)
                                return sync_failed(r, err);
                }
                at = hi;
        }
        return 0;
}

static int begin_span(Stager *s, TpError *err) {
        const ManifestSpan *sp;
        int r = span_decoder_next(s->decoder, &sp, err);

        if (r < 0)
                return r;
        if (r == 0 || sp != &s->m->spans[s->next_span])
                return tp_error(err, -EBADMSG, "the payload ended before span #%zu", s->next_span);
        s->span = sp;
        return 0;
}

static int end_span(Stager *s, TpError *err) {
        int r = span_decoder_end(s->decoder, err);

        if (r < 0)
                return r;
        s->span = NULL;
        s->next_span++;
        return 0;
}

/* One window: inside a new span (decode and write) or between spans (restore and hash). */
static int step_window(Stager *s, uint64_t end, TpError *err) {
        unsigned slot = hash_pipe_slot(s->pipe);
        Buffers *b = &s->bufs[slot];
        uint64_t pos = s->pos;
        size_t n;
        int r;

        if ((r = slot_written(s, slot, err)) < 0)
                return r;

        if (!s->span && s->m && s->next_span < s->m->n_spans && s->m->spans[s->next_span].offset == pos)
                if ((r = begin_span(s, err)) < 0)
                        return r;

        if (s->span) {
                uint64_t span_end = s->span->offset + s->span->length;
                const uint8_t *bytes;
                n = span_decoder_want(s->decoder, STAGE_WINDOW);
                if ((r = read_base(s, pos, n, b->base, false, err)) < 0)
                        return r;
                /* The base bytes replaced go into the undo record; its digest shares the span digest's pass. */
                if ((r = span_decoder_base(s->decoder, slot, b->base, n, undo_writer_hash(s->undo_out), err)) < 0 ||
                    (r = undo_writer_append_unhashed(s->undo_out, b->base, n, err)) < 0)
                        return r;
                /*
                 * The new bytes' chunk digest shares the span digest's pass where it can. Then a delta
                 * piece is decoded, hashed and written by the pipe, in that order on the span's chain,
                 * while this thread reads on: a window across chunks is decoded here, since its chunk
                 * digests (hash_result()) are not on that chain.
                 */
                Sha256 *chunk = chunk_sharing(s, pos, n);
                if ((r = (chunk ? span_decoder_read_ahead : span_decoder_read)(s->decoder, slot, b->frame, b->out, n,
                                                                            chunk, &bytes, err)) < 0)
                        return r;
                if (chunk) {
                        s->progress.ahead_bytes += n;
                        s->writes[slot] = (SlotWrite) { s->slot, bytes, n, pos, 0 };
                        hash_pipe_call(s->pipe, slot, span_decoder_chain(s->decoder), NULL, write_job, &s->writes[slot]);
                } else if ((r = fileset_pwrite(s->slot, bytes, n, pos)) < 0)
                        return write_failed(pos, r, err);
                if ((r = written(s, pos, n)) < 0)
                        return sync_failed(r, err);
                if (chunk)
                        chunk_fed(s, pos + n);
                else
                        hash_result(s, slot, pos, bytes, n);
                s->pos += n;
                if (s->pos == span_end)
                        return end_span(s, err);
                return 0;
        }

        uint64_t limit = end;
        if (s->m && s->next_span < s->m->n_spans && s->m->spans[s->next_span].offset < limit)
                limit = s->m->spans[s->next_span].offset;
        n = limit - pos < STAGE_WINDOW ? (size_t) (limit - pos) : STAGE_WINDOW;
        if ((r = read_base(s, pos, n, b->base, true, err)) < 0)
                return r;
        hash_result(s, slot, pos, b->base, n);
        s->pos += n;
        return 0;
}

/*
 * After a failure, the source undo record's own check (undo_record_checked(), deferred until now
 * for a record opened with undo_record_open_deferred()): a damaged record is the cause to report of
 * whatever failed, since the pass read base bytes from it. @r: the failure, returned when the record
 * is sound. A pass that succeeds needs no such check: every byte it took from the record went into
 * a span's base hash or into the verified result.
 */
static int check_source(Stager *s, int r, TpError *err) {
        TpError why = {};

        if (!s->src.undo || undo_record_checked(s->src.undo, &why) >= 0)
                return r;
        *err = why;
        s->progress.source_damaged = true;
        s->progress.target_mismatch = false;
        return -EBADMSG;
}

static int verify(Stager *s, TpError *err) {
        uint8_t d[SHA256_DIGEST_SIZE];
        char got[SHA256_HEX_SIZE], want[SHA256_HEX_SIZE];
        int r;

        /* Every byte is written: the disk catches up with the slot and the undo record while the hashing ends. */
        if (s->unkicked > 0)
                fileset_start_writeback(s->slot, s->kick_from, s->pos - s->kick_from);
        if (s->undo_out)
                undo_writer_start_writeback(s->undo_out);
        hash_pipe_sync(s->pipe);
        /* The pipe's writes not yet looked at: the first in the space that failed is the one to report. */
        unsigned first = HASH_PIPE_SLOTS;
        for (unsigned i = 0; i < HASH_PIPE_SLOTS; i++)
                if (s->writes[i].r < 0 && (first == HASH_PIPE_SLOTS || s->writes[i].pos < s->writes[first].pos))
                        first = i;
        if (first < HASH_PIPE_SLOTS)
                return slot_written(s, first, err);
        if (s->chunks)
                chunks_settle(s);
        if (s->m && s->next_span != s->m->n_spans)
                return tp_error(err, -EBADMSG, "the pass ended before span #%zu", s->next_span);
        if (s->decoder && (r = span_decoder_finish(s->decoder, err)) < 0)
                return r;
        if (!s->incremental) {
                set_hash_final(&s->full, d);
                if (memcmp(d, s->tgt.sha256, SHA256_DIGEST_SIZE) != 0) {
                        sha256_to_hex(d, got);
                        sha256_to_hex(s->tgt.sha256, want);
                        s->progress.target_mismatch = true;
                        return tp_error(err, -EBADMSG, "the staged slot's SHA-256 %s is not the target's %s", got, want);
                }
        }
        if (s->chunks) {
                chunk_table_root(s->chunks, s->n_chunks, d);
                if (memcmp(d, s->tgt.chunk_root, SHA256_DIGEST_SIZE) != 0) {
                        s->progress.target_mismatch = true;
                        return tp_error(err, -EBADMSG, "the staged slot's chunk-hash root does not match the target's");
                }
        }
        return 0;
}

static int finish(Stager *s, TpError *err) {
        int r;

        if ((r = fileset_fdatasync(s->slot, "slot", err)) < 0)
                return r;
        if (s->undo_out) {
                r = undo_writer_commit(s->undo_out, s->undo_sha256, &s->progress.undo_bytes, err);
                s->undo_out = undo_writer_free(s->undo_out);
                if (r < 0)
                        return r;
        } else if (unlink(s->undo_path) < 0 && errno != ENOENT)
                return tp_error(err, negative_errno(), "%s: %s", s->undo_path, strerror(errno));
        return 0;
}

void stager_set_time_cap(Stager *s, uint64_t ns) {
        s->time_cap = ns;
}

int stager_step(Stager *s, uint64_t budget, TpError *err) {
        uint64_t start = s->progress.done, t0 = s->time_cap ? clock_mono_ns() : 0;
        int r;

        while (s->phase != PHASE_DONE) {
                switch (s->phase) {
                case PHASE_PASS:
                        if (s->cur_iv >= s->n_iv) {
                                s->phase = PHASE_VERIFY;
                                break;
                        }
                        if (s->progress.done - start >= budget ||
                            (s->time_cap && s->progress.done > start && clock_mono_ns() - t0 >= s->time_cap))
                                return 1;
                        uint64_t before = s->pos;
                        if ((r = step_window(s, s->iv[s->cur_iv].end, err)) < 0)
                                return check_source(s, r, err);
                        s->progress.done += s->pos - before;
                        if (s->pos >= s->iv[s->cur_iv].end && ++s->cur_iv < s->n_iv)
                                s->pos = s->iv[s->cur_iv].start;
                        break;
                case PHASE_VERIFY:
                        if ((r = verify(s, err)) < 0)
                                return check_source(s, r, err);
                        s->phase = PHASE_WRITEBACK;
                        break;
                case PHASE_WRITEBACK:
                        /*
                         * What the disk has not yet written of the slot (on slow storage, much of a
                         * fresh copy) the fdatasync below would wait for in one call, with every
                         * request to the daemon waiting behind it. Waited for here, within the
                         * step's time cap: the syncer's last round, then range by range; the
                         * fdatasync is left with the disk's cache flush, which the fdatasyncs behind
                         * the pass (and the copy's: set_copy_step()) keep short.
                         */
                        if ((r = syncer_end(&s->syncer, s->time_cap ? t0 + s->time_cap : 0)) < 0)
                                return sync_failed(r, err);
                        if (r > 0)
                                return 1;
                        r = fileset_wait_writeback(s->slot, &s->written_back, s->write_hi,
                                                   s->time_cap ? t0 + s->time_cap : 0, "slot", err);
                        if (r != 0)
                                return r;
                        s->phase = PHASE_FINISH;
                        break;
                case PHASE_FINISH:
                        if ((r = finish(s, err)) < 0)
                                return r;
                        s->phase = PHASE_DONE;
                        break;
                default:
                        abort();
                }
        }
        return 0;
}

const StageProgress *stager_progress(const Stager *s) {
        return &s->progress;
}

void stager_result(const Stager *s, const uint8_t **ret_chunks, uint64_t *ret_undo_spans,
                   uint8_t ret_undo_sha256[SHA256_DIGEST_SIZE]) {
        *ret_chunks = s->chunks;
        *ret_undo_spans = s->undo_spans;
        memcpy(ret_undo_sha256, s->undo_sha256, SHA256_DIGEST_SIZE);
}
