/* SPDX-License-Identifier: MIT */

#include <fcntl.h>
#include <inttypes.h>
#include <string.h>
#include <sys/stat.h>

#include "apply.h"
#include "atomicdir.h"
#include "fileio.h"
#include "hashpipe.h"
#include "span.h"

#define APPLY_BUFFER (512u << 10)

/* One slot of the hashing pipeline: its buffers stay untouched until the worker is done with them. */
typedef struct Slot {
        uint8_t *base, *frame, *out;
} Slot;

/* The output: one file, or a directory written as one stream. */
typedef struct Output {
        AtomicFile file;
        AtomicDir dir;
        bool directory;
} Output;

typedef struct Applier {
        Bundle *bundle;
        const FileSet *base_files;
        Output out;
        const char *base_what;
        uint64_t base_size;
        /* Per file of the base and of the target; fed through the pipe: read only after hash_pipe_sync(). */
        SetHash base_hash, target_hash;
        HashPipe *pipe;
        Slot slots[HASH_PIPE_SLOTS];
        size_t bufsize;
        ApplyStats stats;
        TpError *err;
} Applier;

static int out_write(Applier *a, const void *buf, size_t n) {
        int r = a->out.directory ? atomic_dir_write(&a->out.dir, buf, n) : write_full(a->out.file.fd, buf, n);
        return r < 0 ? tp_error(a->err, r, "writing the output: %s", strerror(-r)) : 0;
}

static Sha256 *base_hash_at(Applier *a, uint64_t pos, uint64_t *ret_room) {
        return set_hash_at(&a->base_hash, pos, ret_room);
}

static Sha256 *target_hash_at(Applier *a, uint64_t pos) {
        return set_hash_at(&a->target_hash, pos, NULL);
}

/* Copy unchanged base bytes [from, to) into the output, hashing them as base and as target. */
static int copy_base(Applier *a, uint64_t from, uint64_t to) {
        if (to > a->base_size)
                return tp_error(a->err, -EBADMSG, "%s: target bytes [%" PRIu64 ", %" PRIu64
                                ") lie past the end of the base and no span provides them", a->bundle->what,
                                a->base_size, to);
        for (uint64_t pos = from; pos < to;) {
                uint64_t room;
                Sha256 *bh = base_hash_at(a, pos, &room);
                size_t n = to - pos < APPLY_BUFFER ? (size_t) (to - pos) : APPLY_BUFFER;
                if (n > room)
                        n = (size_t) room;      /* format 1: the base's files are the target's */
                unsigned slot = hash_pipe_slot(a->pipe);
                uint8_t *buf = a->slots[slot].base;
                int r = fileset_pread(a->base_files, buf, n, pos);
                if (r < 0)
                        return tp_error(a->err, r == -ENODATA ? -EIO : r, "%s: reading at offset %" PRIu64 ": %s",
                                        a->base_what, pos, strerror(r == -ENODATA ? EIO : -r));
                hash_pipe_feed(a->pipe, slot, bh, target_hash_at(a, pos), buf, n);
                if ((r = out_write(a, buf, n)) < 0)
                        return r;
                a->stats.copied_bytes += n;
                pos += n;
        }
        return 0;
}

/* One span through the shared decoder: base bytes read and fed, new bytes decoded and written. */
static int apply_span(Applier *a, SpanDecoder *sd, const ManifestSpan *s) {
        uint64_t base_end = s->offset + s->length < a->base_size ? s->offset + s->length : a->base_size;
        size_t n;
        int r;

        for (uint64_t pos = s->offset; (n = span_decoder_want(sd, APPLY_BUFFER)) > 0; pos += n) {
                size_t nb = pos < base_end ? (base_end - pos < n ? (size_t) (base_end - pos) : n) : 0;
                unsigned slot = hash_pipe_slot(a->pipe);
                Slot *sl = &a->slots[slot];
                const uint8_t *bytes;

                if (nb > 0) {
                        r = fileset_pread(a->base_files, sl->base, nb, pos);
                        if (r < 0)
                                return tp_error(a->err, r == -ENODATA ? -EIO : r, "%s: reading at offset %" PRIu64,
                                                a->base_what, pos);
                        if ((r = span_decoder_base(sd, slot, sl->base, nb, base_hash_at(a, pos, NULL), a->err)) < 0)
                                return r;
                }
                if ((r = span_decoder_read(sd, slot, sl->frame, sl->out, n, target_hash_at(a, s->offset), &bytes,
                                           a->err)) < 0 ||
                    (r = out_write(a, bytes, n)) < 0)
                        return r;
        }
        if ((r = span_decoder_end(sd, a->err)) < 0)
                return r;
        a->stats.span_bytes += s->length;
        return 0;
}

/*
 * Format 2: the spans tile the target and name their base bytes, read from wherever they sit.
 * Each span's base bytes are checked against its own hash; the target's SHA-256 is the contract.
 */
static int apply_relocating(Applier *a, SpanDecoder *sd) {
        _cleanup_free_ uint8_t *ref = NULL;
        const ManifestSpan *s;
        int r;

        while ((r = span_decoder_next(sd, &s, a->err)) > 0) {
                size_t n;
                if (s->encoding == SPAN_REF) {
                        if (!ref && !(ref = malloc(SPAN_REF_MAX)))
                                return -ENOMEM;
                        r = fileset_pread(a->base_files, ref, s->base_length, s->base_offset);
                        if (r < 0)
                                return tp_error(a->err, r == -ENODATA ? -EIO : r, "%s: reading at offset %" PRIu64,
                                                a->base_what, s->base_offset);
                        if ((r = span_decoder_base(sd, hash_pipe_slot(a->pipe), ref, s->base_length, NULL, a->err)) < 0)
                                return r;
                }
                for (uint64_t done = 0; (n = span_decoder_want(sd, APPLY_BUFFER)) > 0; done += n) {
                        unsigned slot = hash_pipe_slot(a->pipe);
                        Slot *sl = &a->slots[slot];
                        const uint8_t *bytes;

                        if (span_base_in_pieces(s)) {
                                r = fileset_pread(a->base_files, sl->base, n, s->base_offset + done);
                                if (r < 0)
                                        return tp_error(a->err, r == -ENODATA ? -EIO : r, "%s: reading at offset %" PRIu64,
                                                        a->base_what, s->base_offset + done);
                                if ((r = span_decoder_base(sd, slot, sl->base, n, NULL, a->err)) < 0)
                                        return r;
                        }
                        if ((r = span_decoder_read(sd, slot, sl->frame, sl->out, n, target_hash_at(a, s->offset),
                                                   &bytes, a->err)) < 0 ||
                            (r = out_write(a, bytes, n)) < 0)
                                return r;
                        if (s->encoding == SPAN_COPY)
                                a->stats.copied_bytes += n;
                        else
                                a->stats.span_bytes += n;
                }
                if ((r = span_decoder_end(sd, a->err)) < 0)
                        return r;
        }
        return r < 0 ? r : span_decoder_finish(sd, a->err);
}

static void applier_done(Applier *a) {
        hash_pipe_free(a->pipe);        /* first: the worker may still read the slots */
        a->pipe = NULL;
        for (unsigned i = 0; i < HASH_PIPE_SLOTS; i++) {
                free(a->slots[i].base);
                free(a->slots[i].frame);
                free(a->slots[i].out);
        }
        set_hash_done(&a->base_hash);
        set_hash_done(&a->target_hash);
}

static void output_abort(Output *o) {
        if (o->directory)
                atomic_dir_abort(&o->dir);
        else
                atomic_file_abort(&o->file);
}

/* The base must be the set the bundle names: same files (for a directory), same size. */
static int check_base(const Manifest *m, const FileSet *base, const char *what, TpError *err) {
        const FileSet *want = &m->base.files.set;

        if (base->directory != (want->n_files > 0))
                return tp_error(err, -EBADMSG, "%s: the bundle was made for a base %s, this one is %s (wrong base?)",
                                what, want->n_files ? "directory" : "file", base->directory ? "a directory" : "one file");
        for (size_t i = 0; base->directory && (i < want->n_files || i < base->n_files); i++) {
                const FileSetFile *w = i < want->n_files ? &want->files[i] : NULL;
                const FileSetFile *h = i < base->n_files ? &base->files[i] : NULL;
                if (!w || !h || strcmp(w->path, h->path) != 0)
                        return tp_error(err, -EBADMSG, "%s: the bundle's base has %s%s%s, this one %s%s%s (wrong base?)",
                                        what, w ? "file '" : "no more files", w ? w->path : "", w ? "'" : "",
                                        h ? "file '" : "no more files", h ? h->path : "", h ? "'" : "");
                if (w->size != h->size)
                        return tp_error(err, -EBADMSG, "%s: '%s' is %" PRIu64 " bytes, the bundle's base has %" PRIu64
                                        " (wrong base?)", what, h->path, h->size, w->size);
        }
        if (base->size != m->base.size)
                return tp_error(err, -EBADMSG, "%s: the base is %" PRIu64 " bytes, the bundle was made for a %" PRIu64
                                "-byte base (wrong base?)", what, base->size, m->base.size);
        return 0;
}

static int output_open(Applier *a, const Manifest *m, const char *path, bool sync, TpError *err) {
        int r;

        a->out.directory = m->target.files.set.n_files > 0;
        a->out.file = ATOMIC_FILE_NULL;
        a->out.dir = ATOMIC_DIR_NULL;
        if (a->out.directory)
                r = atomic_dir_open(path, &m->target.files.set, !sync, &a->out.dir);
        else {
                r = atomic_file_open(path, &a->out.file);
                a->out.file.no_sync = !sync;
        }
        if (r < 0)
                return tp_error(err, r, "%s: %s", path, a->out.directory ? (r == -EEXIST ? "exists and is neither a "
                                "directory nor a file: not replacing it" : strerror(-r)) : atomic_file_strerror(r));
        return 0;
}

int bundle_apply(Bundle *b, const FileSet *base_files, const char *base_what, const char *out_path, bool sync,
                 ApplyStats *ret_stats, TpError *err) {
        const Manifest *m = b->manifest;
        _cleanup_(span_decoder_freep) SpanDecoder *sd = NULL;
        Applier a = { .bundle = b, .base_files = base_files, .base_what = base_what, .err = err };
        const ManifestSpan *s;
        uint8_t d[32];
        uint64_t pos = 0;
        int r;

        if ((r = check_base(m, base_files, base_what, err)) < 0)
                return r;
        a.base_size = base_files->size;

        a.bufsize = span_decoder_buffer_size(APPLY_BUFFER);
        bool ok = set_hash_init(&a.base_hash, base_files) >= 0 && set_hash_init(&a.target_hash, &m->target.files.set) >= 0;
        for (unsigned i = 0; i < HASH_PIPE_SLOTS; i++)
                a.slots[i] = (Slot) { malloc(a.bufsize), malloc(a.bufsize), malloc(a.bufsize) };
        for (unsigned i = 0; i < HASH_PIPE_SLOTS; i++)
                ok = ok && a.slots[i].base && a.slots[i].frame && a.slots[i].out;
        if (!ok) {
                applier_done(&a);
                return -ENOMEM;
        }
        r = hash_pipe_new(&a.pipe);
        if (r < 0) {
                applier_done(&a);
                return tp_error(err, r, "cannot start the hashing thread: %s", strerror(-r));
        }

        r = span_decoder_new(b, a.base_size, a.pipe, &sd, err);
        if (r < 0) {
                applier_done(&a);
                return r;
        }
        if ((r = output_open(&a, m, out_path, sync, err)) < 0) {
                applier_done(&a);
                return r;
        }
        for (size_t i = 0; i < base_files->n_files; i++)
                (void) posix_fadvise(base_files->files[i].fd, 0, 0, POSIX_FADV_SEQUENTIAL);

        if (m->format == MANIFEST_FORMAT_RELOCATING) {
                if ((r = apply_relocating(&a, sd)) < 0)
                        goto fail;
                hash_pipe_sync(a.pipe);
                goto check_target;
        }
        while ((r = span_decoder_next(sd, &s, err)) > 0) {
                if ((r = copy_base(&a, pos, s->offset)) < 0 || (r = apply_span(&a, sd, s)) < 0)
                        goto fail;
                pos = s->offset + s->length;
        }
        if (r < 0 || (r = copy_base(&a, pos, m->target.size)) < 0 || (r = span_decoder_finish(sd, err)) < 0)
                goto fail;

        /* The rest of the base (a shrunk file) still counts for the base hash. */
        for (uint64_t p = pos > m->target.size ? pos : m->target.size; p < a.base_size;) {
                size_t n = a.base_size - p < APPLY_BUFFER ? (size_t) (a.base_size - p) : APPLY_BUFFER;
                unsigned slot = hash_pipe_slot(a.pipe);
                if ((r = fileset_pread(base_files, a.slots[slot].base, n, p)) < 0) {
                        r = tp_error(err, r == -ENODATA ? -EIO : r, "%s: reading at offset %" PRIu64, base_what, p);
                        goto fail;
                }
                hash_pipe_feed(a.pipe, slot, base_hash_at(&a, p, NULL), NULL, a.slots[slot].base, n);
                p += n;
        }
        hash_pipe_sync(a.pipe);
        set_hash_final(&a.base_hash, d);
        if (memcmp(d, m->base.sha256, 32) != 0) {
                char got[SHA256_HEX_SIZE], want[SHA256_HEX_SIZE];
                sha256_to_hex(d, got);
                sha256_to_hex(m->base.sha256, want);
                r = tp_error(err, -EBADMSG, "%s: SHA-256 %s is not the bundle's base %s (wrong base?)", base_what, got,
                             want);
                goto fail;
        }
check_target:
        set_hash_final(&a.target_hash, d);
        if (memcmp(d, m->target.sha256, 32) != 0) {
                char got[SHA256_HEX_SIZE], want[SHA256_HEX_SIZE];
                sha256_to_hex(d, got);
                sha256_to_hex(m->target.sha256, want);
                r = tp_error(err, -EBADMSG, "%s: the result's SHA-256 %s is not the target's %s", b->what, got, want);
                goto fail;
        }
        applier_done(&a);
        r = a.out.directory ? atomic_dir_commit(&a.out.dir) : atomic_file_commit(&a.out.file);
        if (r < 0)
                return tp_error(err, r, "%s: %s", out_path, strerror(-r));
        if (ret_stats)
                *ret_stats = a.stats;
        return 0;

fail:
        applier_done(&a);
        output_abort(&a.out);
        return r;
}
