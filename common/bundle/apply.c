/* SPDX-License-Identifier: MIT */

#include <fcntl.h>
#include <inttypes.h>
#include <string.h>
#include <sys/stat.h>

#include "apply.h"
#include "fileio.h"
#include "hashpipe.h"
#include "span.h"

#define APPLY_BUFFER (512u << 10)

/* One slot of the hashing pipeline: its buffers stay untouched until the worker is done with them. */
typedef struct Slot {
        uint8_t *base, *frame, *out;
} Slot;

typedef struct Applier {
        Bundle *bundle;
        int base_fd, out_fd;
        const char *base_what;
        uint64_t base_size;
        Sha256 base_hash, target_hash;  /* fed through the pipe: read only after hash_pipe_sync() */
        HashPipe *pipe;
        Slot slots[HASH_PIPE_SLOTS];
        size_t bufsize;
        ApplyStats stats;
        TpError *err;
} Applier;

/* Copy unchanged base bytes [from, to) into the output, hashing them as base and as target. */
static int copy_base(Applier *a, uint64_t from, uint64_t to) {
        if (to > a->base_size)
                return tp_error(a->err, -EBADMSG, "%s: target bytes [%" PRIu64 ", %" PRIu64
                                ") lie past the end of the base and no span provides them", a->bundle->what,
                                a->base_size, to);
        for (uint64_t pos = from; pos < to;) {
                size_t n = to - pos < APPLY_BUFFER ? (size_t) (to - pos) : APPLY_BUFFER;
                unsigned slot = hash_pipe_slot(a->pipe);
                uint8_t *buf = a->slots[slot].base;
                int r = pread_full(a->base_fd, buf, n, pos);
                if (r < 0)
                        return tp_error(a->err, r == -ENODATA ? -EIO : r, "%s: reading at offset %" PRIu64 ": %s",
                                        a->base_what, pos, strerror(r == -ENODATA ? EIO : -r));
                hash_pipe_feed(a->pipe, slot, &a->base_hash, &a->target_hash, buf, n);
                r = write_full(a->out_fd, buf, n);
                if (r < 0)
                        return tp_error(a->err, r, "writing the output: %s", strerror(-r));
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
                        r = pread_full(a->base_fd, sl->base, nb, pos);
                        if (r < 0)
                                return tp_error(a->err, r == -ENODATA ? -EIO : r, "%s: reading at offset %" PRIu64,
                                                a->base_what, pos);
                        if ((r = span_decoder_base(sd, slot, sl->base, nb, &a->base_hash, a->err)) < 0)
                                return r;
                }
                if ((r = span_decoder_read(sd, slot, sl->frame, sl->out, n, &a->target_hash, &bytes, a->err)) < 0)
                        return r;
                r = write_full(a->out_fd, bytes, n);
                if (r < 0)
                        return tp_error(a->err, r, "writing the output: %s", strerror(-r));
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
                        r = pread_full(a->base_fd, ref, s->base_length, s->base_offset);
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

                        if (s->encoding == SPAN_COPY || s->encoding == SPAN_DELTA) {
                                r = pread_full(a->base_fd, sl->base, n, s->base_offset + done);
                                if (r < 0)
                                        return tp_error(a->err, r == -ENODATA ? -EIO : r, "%s: reading at offset %" PRIu64,
                                                        a->base_what, s->base_offset + done);
                                if ((r = span_decoder_base(sd, slot, sl->base, n, NULL, a->err)) < 0)
                                        return r;
                        }
                        if ((r = span_decoder_read(sd, slot, sl->frame, sl->out, n, &a->target_hash, &bytes, a->err)) < 0)
                                return r;
                        if ((r = write_full(a->out_fd, bytes, n)) < 0)
                                return tp_error(a->err, r, "writing the output: %s", strerror(-r));
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
}

int bundle_apply(Bundle *b, int base_fd, const char *base_what, const char *out_path, bool sync,
                 ApplyStats *ret_stats, TpError *err) {
        const Manifest *m = b->manifest;
        _cleanup_(span_decoder_freep) SpanDecoder *sd = NULL;
        AtomicFile af = ATOMIC_FILE_NULL;
        Applier a = { .bundle = b, .base_fd = base_fd, .base_what = base_what, .err = err };
        const ManifestSpan *s;
        uint8_t d[32];
        struct stat st;
        uint64_t pos = 0;
        int r;

        if (fstat(base_fd, &st) < 0)
                return tp_error(err, negative_errno(), "%s: %s", base_what, strerror(errno));
        a.base_size = (uint64_t) st.st_size;
        if (a.base_size != m->base.size)
                return tp_error(err, -EBADMSG, "%s: the base is %" PRIu64 " bytes, the bundle was made for a %" PRIu64
                                "-byte base (wrong base?)", base_what, a.base_size, m->base.size);

        a.bufsize = span_decoder_buffer_size(APPLY_BUFFER);
        for (unsigned i = 0; i < HASH_PIPE_SLOTS; i++) {
                a.slots[i] = (Slot) { malloc(a.bufsize), malloc(a.bufsize), malloc(a.bufsize) };
                if (!a.slots[i].base || !a.slots[i].frame || !a.slots[i].out) {
                        applier_done(&a);
                        return -ENOMEM;
                }
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
        r = atomic_file_open(out_path, &af);
        if (r < 0) {
                applier_done(&a);
                return tp_error(err, r, "%s: %s", out_path, atomic_file_strerror(r));
        }
        a.out_fd = af.fd;
        af.no_sync = !sync;
        (void) posix_fadvise(base_fd, 0, 0, POSIX_FADV_SEQUENTIAL);
        sha256_init(&a.base_hash);
        sha256_init(&a.target_hash);

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
                if ((r = pread_full(base_fd, a.slots[slot].base, n, p)) < 0) {
                        r = tp_error(err, r == -ENODATA ? -EIO : r, "%s: reading at offset %" PRIu64, base_what, p);
                        goto fail;
                }
                hash_pipe_feed(a.pipe, slot, &a.base_hash, NULL, a.slots[slot].base, n);
                p += n;
        }
        hash_pipe_sync(a.pipe);
        sha256_final(&a.base_hash, d);
        if (memcmp(d, m->base.sha256, 32) != 0) {
                char got[SHA256_HEX_SIZE], want[SHA256_HEX_SIZE];
                sha256_to_hex(d, got);
                sha256_to_hex(m->base.sha256, want);
                r = tp_error(err, -EBADMSG, "%s: SHA-256 %s is not the bundle's base %s (wrong base?)", base_what, got,
                             want);
                goto fail;
        }
check_target:
        sha256_final(&a.target_hash, d);
        if (memcmp(d, m->target.sha256, 32) != 0) {
                char got[SHA256_HEX_SIZE], want[SHA256_HEX_SIZE];
                sha256_to_hex(d, got);
                sha256_to_hex(m->target.sha256, want);
                r = tp_error(err, -EBADMSG, "%s: the result's SHA-256 %s is not the target's %s", b->what, got, want);
                goto fail;
        }
        applier_done(&a);
        r = atomic_file_commit(&af);
        if (r < 0)
                return tp_error(err, r, "%s: %s", out_path, strerror(-r));
        if (ret_stats)
                *ret_stats = a.stats;
        return 0;

fail:
        applier_done(&a);
        atomic_file_abort(&af);
        return r;
}
