/* SPDX-License-Identifier: MIT */

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "delta.h"
#include "ggml.h"
#include "lora-span.h"
#include "predict-ac.h"
#include "rescale.h"
#include "span.h"

typedef enum SpanStage {
        SPAN_IDLE,                      /* between spans: next() or finish() */
        SPAN_PIECE,                     /* inside a span, no base bytes given for the next piece yet */
        SPAN_BASED,                     /* inside a span, the next piece's base bytes given */
        SPAN_FAILED,                    /* a check failed: only free() */
        _SPAN_STAGE_MAX,
} SpanStage;

#define SPAN_CHECKS 16                  /* spans whose deferred digest checks may be queued at once */

/* A span's two digests and, once they are final, their verdict. */
typedef struct SpanCheck {
        Sha256 base_hash, new_hash;     /* with a pipe: read only after hash_pipe_sync() */
        const ManifestSpan *span;
        size_t idx;
        bool check_base;                /* the span lies in the base and is not a copy: its base bytes' digest counts */
        bool queued;                    /* deferred: check_job() is queued, its verdict not yet read */
        int failed;                     /* 0; 1: the base bytes' digest differs, 2: the new bytes' */
        uint8_t got[SHA256_DIGEST_SIZE];
} SpanCheck;

struct SpanDecoder {
        Bundle *bundle;
        const Manifest *m;
        uint64_t base_size;
        HashPipe *pipe;                 /* NULL: hash on this thread */
        SpanReader *reader;
        SpanStage stage;

        size_t idx;                     /* index of the current span (after next()), or of the next one */
        const ManifestSpan *span;
        DeltaLayout layout;             /* SPAN_DELTA only */
        size_t group;                   /* delta group bytes; 0 for a raw span */
        bool inside_base;               /* its base bytes are all there: their hash is checked */
        bool v2;                        /* format 2: spans tile the target, base bytes at base_offset */
        uint64_t done;                  /* new bytes returned */
        uint64_t base_fed;              /* base bytes given */
        uint64_t next_frame;            /* payload offset where the next span's frame must start */
        uint64_t prev_end;              /* where the previous span ended */
        const uint8_t *piece_base;      /* SPAN_BASED: the base bytes of the next piece */
        size_t piece_base_n;
        SpanCheck checks[SPAN_CHECKS];  /* the current span's digests (checks[cur]) and those still checked */
        unsigned cur;
        bool defer;                     /* span_decoder_defer_checks() */
        unsigned last_slot;             /* the pipeline slot of the current span's last piece */
        struct Decode {                 /* span_decoder_read_ahead(): a delta piece decoded by the pipe */
                DeltaLayout layout;
                const uint8_t *base, *delta;
                size_t n;
                uint8_t *out;
        } ahead[HASH_PIPE_SLOTS];       /* per slot: its buffers */
        /* SPAN_LORA: the current span's factors; SPAN_RESCALE: its channels' parameters; both: a
         * group's prediction (and lora's floats, rescale's flips) */
        LoraFactors *lora;
        RescaleParams *rescale;
        uint8_t *predicted;
        float *scratch;
        uint8_t *flip;
};

static void prediction_done(SpanDecoder *d) {
        d->lora = lora_factors_free(d->lora);
        d->rescale = rescale_params_free(d->rescale);
        free(d->predicted);
        free(d->scratch);
        free(d->flip);
        d->predicted = NULL;
        d->scratch = NULL;
        d->flip = NULL;
}

SpanDecoder *span_decoder_free(SpanDecoder *d) {
        if (!d)
                return NULL;
        prediction_done(d);
        span_reader_free(d->reader);
        free(d);
        return NULL;
}

int span_decoder_new(Bundle *b, uint64_t base_size, HashPipe *pipe, SpanDecoder **ret, TpError *err) {
        _cleanup_(span_decoder_freep) SpanDecoder *d = calloc(1, sizeof(*d));
        int r;

        if (!d)
                return -ENOMEM;
        *d = (SpanDecoder) { .bundle = b, .m = b->manifest, .base_size = base_size, .pipe = pipe,
                             .v2 = b->manifest->format == MANIFEST_FORMAT_RELOCATING };
        if ((r = span_reader_new(b, &d->reader, err)) < 0)
                return r;
        *ret = TAKE_PTR(d);
        return 0;
}

size_t span_decoder_buffer_size(size_t window) {
        size_t n = window;
        for (DeltaLayout l = 0; l < _DELTA_LAYOUT_MAX; l++)
                if (delta_group_bytes(l) > n)
                        n = delta_group_bytes(l);
        return n;
}

static int checks_settle(SpanDecoder *d, TpError *err);

/* "<bundle>: span #i (offset O, L bytes[, site S]): <msg>": every refusal of a span reads this way. */
_printf_(5, 6) static int span_fail_at(SpanDecoder *d, size_t idx, TpError *err, int code, const char *fmt, ...) {
        const ManifestSpan *s = &d->m->spans[idx];
        char msg[TP_ERROR_MAX];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        d->stage = SPAN_FAILED;
        return tp_error(err, code, "%s: span #%zu (offset %" PRIu64 ", %" PRIu64 " bytes%s%s): %s", d->bundle->what,
                        idx, s->offset, s->length, s->site ? ", site " : "", s->site ? s->site : "", msg);
}

/*
 * A failure (@r, described in @err): an earlier span's deferred check that failed is the one to
 * report, as it would have been without deferring. Returns @r, or that check's -EBADMSG.
 */
static int failed(SpanDecoder *d, int r, TpError *err) {
        TpError earlier = {};

        d->stage = SPAN_FAILED;
        if (d->defer && checks_settle(d, &earlier) < 0) {
                *err = earlier;
                return -EBADMSG;
        }
        return r;
}

#define span_fail(d, err, code, ...) failed(d, span_fail_at(d, (d)->idx, err, code, __VA_ARGS__), err)

/* A caller broke the sequence in span.h: a bug, not a bad bundle. */
static int misuse(SpanDecoder *d, TpError *err, const char *what) {
        if (d->stage == SPAN_FAILED)
                what = "used after a failed check";
        if (d->span)
                return span_fail(d, err, -EINVAL, "%s", what);
        d->stage = SPAN_FAILED;
        return tp_error(err, -EINVAL, "%s: span decoder: %s", d->bundle->what, what);
}

/* The span's place in the target, the base and the payload, and its encoding. */
static int check_span(SpanDecoder *d, const ManifestSpan *s, TpError *err) {
        const uint64_t payload = d->bundle->header.payload_size;

        if (s->length == 0 || s->offset > d->m->target.size || s->length > d->m->target.size - s->offset)
                return span_fail(d, err, -EBADMSG, "it reaches past the end of the target (%" PRIu64 " bytes)",
                                 d->m->target.size);
        if (s->offset < d->prev_end)
                return span_fail(d, err, -EBADMSG, "it starts before the previous span's end (offset %" PRIu64 ")",
                                 d->prev_end);
        if (d->v2 && s->offset != d->prev_end)
                return span_fail(d, err, -EBADMSG, "it leaves a hole in the target: [%" PRIu64 ", %" PRIu64
                                 ") is in no span", d->prev_end, s->offset);
        if (s->frame_offset != d->next_frame)
                return span_fail(d, err, -EBADMSG, "its frame is at payload offset %" PRIu64 ", expected %" PRIu64
                                 " (frames are back to back in span order)", s->frame_offset, d->next_frame);
        if ((s->encoding == SPAN_COPY) != (s->frame_size == 0) || s->frame_size > payload - d->next_frame)
                return span_fail(d, err, -EBADMSG, "its frame [%" PRIu64 ", +%" PRIu64 ") reaches past the end of the payload (%"
                                 PRIu64 " bytes) or does not suit its encoding", s->frame_offset, s->frame_size, payload);
        if (d->v2) {
                bool need = s->encoding != SPAN_RAW;
                if (need && (s->base_length == 0 || s->base_offset > d->base_size ||
                             s->base_length > d->base_size - s->base_offset))
                        return span_fail(d, err, -EBADMSG, "its base bytes [%" PRIu64 ", +%" PRIu64
                                         ") lie outside the base (%" PRIu64 " bytes)", s->base_offset, s->base_length,
                                         d->base_size);
                if (span_base_in_pieces(s) && s->base_length != s->length)
                        return span_fail(d, err, -EBADMSG, "a %s reads as many base bytes as it writes",
                                         span_encoding_to_string(s->encoding));
                if (s->encoding == SPAN_REF && s->base_length > SPAN_REF_MAX)
                        return span_fail(d, err, -EBADMSG, "its reference of %" PRIu64 " bytes exceeds the cap of %u",
                                         s->base_length, SPAN_REF_MAX);
                d->inside_base = need;
        } else {
                d->inside_base = s->offset < d->base_size && s->length <= d->base_size - s->offset;
        }
        d->group = 0;
        switch (s->encoding) {
        case SPAN_RAW:
                return 0;
        case SPAN_COPY:
        case SPAN_REF:
                if (!d->v2)
                        return span_fail(d, err, -EBADMSG, "a %s span needs bundle format 2",
                                         span_encoding_to_string(s->encoding));
                return 0;
        case SPAN_DELTA:
        case SPAN_LORA:
        case SPAN_RESCALE:
                if (s->encoding == SPAN_RESCALE && !d->v2)
                        return span_fail(d, err, -EBADMSG, "a rescale span needs bundle format 2");
                d->layout = delta_layout_from_string(s->layout);
                if (d->layout < 0)
                        return span_fail(d, err, -EBADMSG, "unknown delta layout '%.32s'", s->layout ? s->layout : "");
                /* Readers shipped before it do not know it: a format-1 bundle that used it would split them. */
                if ((d->layout == DELTA_I8 || d->layout == DELTA_I8AC || d->layout == DELTA_I8ACP) && !d->v2)
                        return span_fail(d, err, -EBADMSG, "delta layout '%s' needs bundle format 2", s->layout);
                if (!d->inside_base)
                        return span_fail(d, err, -EBADMSG, "a %s span must lie inside the base (%" PRIu64 " bytes)",
                                         span_encoding_to_string(s->encoding), d->base_size);
                if (s->length % delta_unit(d->layout) != 0)
                        return span_fail(d, err, -EBADMSG, "a delta span must be whole %s blocks (%zu bytes each)",
                                         s->layout, delta_unit(d->layout));
                d->group = delta_group_bytes(d->layout);
                return 0;
        default:
                return span_fail(d, err, -EBADMSG, "unknown encoding %d", (int) s->encoding);
        }
}

/*
 * A lora span's factors, first in its frame (lora_a, then lora_b, then the importance row if
 * any, each as byte planes), and the buffers its groups are predicted in.
 */
static int lora_start(SpanDecoder *d, TpError *err) {
        const ManifestSpan *s = &d->m->spans[d->idx];
        uint8_t buf[16384];
        TpError why = {};
        int r;

        if ((r = lora_factors_new(&s->lora, &d->lora)) < 0)
                return r;
        /* Part 0: lora_a, 1: lora_b, 2: the importance row (F32) when there is one. */
        for (int part = 0; part < (s->lora.importance ? 3 : 2); part++) {
                size_t width = part == 2 ? sizeof(float) : ggml_type(part ? s->lora.b_type : s->lora.a_type)->type_size;
                uint64_t n = part == 2 ? s->lora.in : lora_shape_units(&s->lora, part == 1);
                for (unsigned plane = 0; plane < width; plane++)
                        for (uint64_t at = 0; at < n;) {
                                size_t k = n - at < sizeof(buf) ? (size_t) (n - at) : sizeof(buf);
                                if ((r = span_reader_read(d->reader, buf, k, err)) < 0) {
                                        return failed(d, r, err);
                                }
                                if (part == 2)
                                        lora_factors_load_importance_plane(d->lora, plane, at, buf, k);
                                else
                                        lora_factors_load_plane(d->lora, part == 1, plane, at, buf, k);
                                at += k;
                        }
        }
        lora_factors_settle(d->lora);
        if ((r = lora_factors_check(d->lora, &why)) < 0)
                return span_fail(d, err, -EBADMSG, "%s", why.message);
        /* With an importance row, groups of whole rows (predict.h). */
        d->group = lora_shape_group_bytes(&s->lora, d->group);
        size_t blocks = d->group / ggml_type(s->lora.type)->type_size;
        d->predicted = malloc(d->group);
        d->scratch = malloc(lora_predict_scratch(d->lora, blocks) * sizeof(float));
        return d->predicted && d->scratch ? 0 : -ENOMEM;
}

/* A rescale span's parameters, first in its frame (codec/rescale.h), and the buffer its groups are predicted in. */
static int rescale_start(SpanDecoder *d, TpError *err) {
        const ManifestSpan *s = &d->m->spans[d->idx];
        uint64_t n = 2 * s->rescale.channels;
        uint8_t buf[16384];
        int r;

        if ((r = rescale_params_new(&s->rescale, &d->rescale)) < 0)
                return r;
        for (unsigned plane = 0; plane < 4; plane++)
                for (uint64_t at = 0; at < n;) {
                        size_t k = n - at < sizeof(buf) ? (size_t) (n - at) : sizeof(buf);
                        if ((r = span_reader_read(d->reader, buf, k, err)) < 0) {
                                return failed(d, r, err);
                        }
                        rescale_params_load_plane(d->rescale, plane, at, buf, k);
                        at += k;
                }
        d->predicted = malloc(d->group);
        d->flip = malloc(d->group);
        return d->predicted && d->flip ? 0 : -ENOMEM;
}

int span_decoder_next(SpanDecoder *d, const ManifestSpan **ret_span, TpError *err) {
        const ManifestSpan *s;
        int r;

        if (d->stage != SPAN_IDLE)
                return misuse(d, err, "moved on before the span was ended");
        if (d->span) {
                d->idx++;
                d->span = NULL;
        }
        if ((r = span_reader_next(d->reader, &s, err)) <= 0)
                return r < 0 ? failed(d, r, err) : 0;
        if (s != &d->m->spans[d->idx])
                return misuse(d, err, "the payload reader and the decoder disagree on the span");
        if ((r = check_span(d, s, err)) < 0)
                return r;
        d->span = s;
        prediction_done(d);
        if (s->encoding == SPAN_LORA && (r = lora_start(d, err)) < 0)
                return r;
        if (s->encoding == SPAN_RESCALE && (r = rescale_start(d, err)) < 0)
                return r;
        d->done = d->base_fed = 0;
        d->next_frame += s->frame_size;
        d->prev_end = s->offset + s->length;
        if (d->defer) {
                /* Ring entries are reused in span order: an entry's verdict is read before it is. */
                d->cur = (d->cur + 1) % SPAN_CHECKS;
                if (d->checks[d->cur].queued && (r = checks_settle(d, err)) < 0)
                        return r;
        }
        sha256_init(&d->checks[d->cur].base_hash);
        sha256_init(&d->checks[d->cur].new_hash);
        d->stage = SPAN_PIECE;
        *ret_span = s;
        return 1;
}

size_t span_decoder_want(const SpanDecoder *d, size_t window) {
        if (!d->span || d->stage == SPAN_IDLE || d->stage == SPAN_FAILED)
                return 0;
        uint64_t left = d->span->length - d->done;
        size_t max = d->group ? d->group : window;
        return left < max ? (size_t) left : max;
}

static void hash(SpanDecoder *d, unsigned slot, Sha256 *mine, Sha256 *also, const uint8_t *p, size_t n) {
        d->last_slot = slot;
        if (d->pipe)
                hash_pipe_feed(d->pipe, slot, mine, also, p, n);
        else if (also)
                sha256_update2(mine, also, p, n);
        else
                sha256_update(mine, p, n);
}

int span_decoder_base(SpanDecoder *d, unsigned slot, const uint8_t *base, size_t n, Sha256 *also, TpError *err) {
        if (d->stage != SPAN_PIECE)
                return misuse(d, err, d->stage == SPAN_BASED ? "base bytes given twice for one piece" :
                                      "base bytes given outside a span");
        const ManifestSpan *s = d->span;
        if (d->v2) {
                /* A ref span's reference comes whole, before its first byte; others piece by piece. */
                bool ok = s->encoding == SPAN_REF ? d->base_fed == 0 && n == s->base_length :
                          s->encoding != SPAN_RAW && n <= s->base_length - d->base_fed;
                if (!ok)
                        return span_fail(d, err, -EINVAL, "%zu base bytes given at base offset %" PRIu64
                                         " do not fit the span's base bytes", n, s->base_offset + d->base_fed);
                if (s->encoding == SPAN_REF) {
                        int r = span_reader_ref_prefix(d->reader, base, n, err);
                        if (r < 0) {
                                return failed(d, r, err);
                        }
                        hash(d, slot, &d->checks[d->cur].base_hash, also, base, n);
                        d->base_fed = n;
                        return 0;               /* the prefix stays referenced: the stage stays SPAN_PIECE */
                }
        } else {
                uint64_t at = s->offset + d->done;
                if (n > s->length - d->done || at > d->base_size || n > d->base_size - at)
                        return span_fail(d, err, -EINVAL, "%zu base bytes given at offset %" PRIu64
                                         ", past the span's or the base's end", n, at);
        }
        /* A copy's base bytes are its new bytes: hashed once, as new bytes, in read(). */
        if (s->encoding != SPAN_COPY)
                hash(d, slot, &d->checks[d->cur].base_hash, also, base, n);
        d->base_fed += n;
        d->piece_base = base;
        d->piece_base_n = n;
        d->stage = SPAN_BASED;
        return 0;
}

static void decode_job(void *arg) {
        const struct Decode *j = arg;
        delta_decode(j->layout, j->base, j->delta, j->n, j->out);
}

static int read_piece(SpanDecoder *d, unsigned slot, uint8_t *frame, uint8_t *out, size_t n, Sha256 *also,
                      bool ahead, const uint8_t **ret_bytes, TpError *err) {
        size_t nb = d->stage == SPAN_BASED ? d->piece_base_n : 0, want = span_decoder_want(d, SIZE_MAX);
        const uint8_t *bytes = frame;
        int r;

        if (d->stage != SPAN_PIECE && d->stage != SPAN_BASED)
                return misuse(d, err, "new bytes read outside a span");
        /* A delta group decodes only whole, cut where the producer cut it. */
        if (n == 0 || n > want || nb > n || (d->group && n != want))
                return span_fail(d, err, -EINVAL, "a piece of %zu bytes (with %zu base bytes) at offset %" PRIu64
                                 " does not fit the span", n, nb, d->span->offset + d->done);
        if ((d->group || d->span->encoding == SPAN_COPY) && nb != n)
                return span_fail(d, err, -EINVAL, "the %s at offset %" PRIu64 " needs %zu base bytes, %zu were given",
                                 d->group ? span_encoding_to_string(d->span->encoding) : "copy",
                                 d->span->offset + d->done, n, nb);
        if (d->span->encoding == SPAN_REF && d->base_fed != d->span->base_length)
                return span_fail(d, err, -EINVAL, "read before its reference was given");
        if (d->span->encoding == SPAN_COPY) {
                bytes = d->piece_base;
        } else if ((r = span_reader_read(d->reader, frame, n, err)) < 0) {
                return failed(d, r, err);
        }
        if (d->lora) {
                const GgmlType *t = ggml_type(d->span->lora.type);
                lora_predict(d->lora, lora_span_first_block(d->span) + d->done / t->type_size, d->piece_base,
                             n / t->type_size, d->scratch, d->predicted);
                if (d->span->lora.ac)
                        predict_ac_decode(d->span->lora.type, d->scratch, d->predicted, frame, n, out);
                else
                        delta_decode(d->layout, d->predicted, frame, n, out);
                bytes = out;
        } else if (d->rescale) {
                rescale_predict(d->rescale, d->span->rescale_first + d->done, d->piece_base, n, d->predicted, d->flip);
                delta_decode(d->layout, d->predicted, frame, n, out);
                rescale_flip(d->predicted, d->flip, out, n);
                bytes = out;
        } else if (d->group && ahead) {
                /* Before the new bytes' hashing, which it fills the buffer for: both on the digest's chain. */
                d->ahead[slot] = (struct Decode) { d->layout, d->piece_base, frame, n, out };
                hash_pipe_call(d->pipe, slot, &d->checks[d->cur].new_hash, also, decode_job, &d->ahead[slot]);
                bytes = out;
        } else if (d->group) {
                delta_decode(d->layout, d->piece_base, frame, n, out);
                bytes = out;
        }
        hash(d, slot, &d->checks[d->cur].new_hash, also, bytes, n);
        d->done += n;
        d->piece_base = NULL;
        d->piece_base_n = 0;
        d->stage = SPAN_PIECE;
        *ret_bytes = bytes;
        return 0;
}

int span_decoder_read(SpanDecoder *d, unsigned slot, uint8_t *frame, uint8_t *out, size_t n, Sha256 *also,
                      const uint8_t **ret_bytes, TpError *err) {
        return read_piece(d, slot, frame, out, n, also, false, ret_bytes, err);
}

int span_decoder_read_ahead(SpanDecoder *d, unsigned slot, uint8_t *frame, uint8_t *out, size_t n, Sha256 *also,
                            const uint8_t **ret_bytes, TpError *err) {
        if (!d->pipe)
                return misuse(d, err, "read ahead without a pipe");
        return read_piece(d, slot, frame, out, n, also, true, ret_bytes, err);
}

Sha256 *span_decoder_chain(SpanDecoder *d) {
        return &d->checks[d->cur].new_hash;
}

int span_decoder_skip_copy(SpanDecoder *d, TpError *err) {
        if (d->stage != SPAN_PIECE || d->done != 0 || d->span->encoding != SPAN_COPY)
                return misuse(d, err, "skipped what is not a copy just begun");
        d->done = d->span->length;
        d->stage = SPAN_IDLE;
        return 0;
}

/* Final digests of @c against the manifest's: on whichever thread runs it (a pipe job when deferred). */
static void check_job(void *arg) {
        SpanCheck *c = arg;
        uint8_t db[SHA256_DIGEST_SIZE], dn[SHA256_DIGEST_SIZE];

        sha256_final(&c->base_hash, db);
        sha256_final(&c->new_hash, dn);
        c->failed = 0;
        /* A span reaching past the end of the base (a grown file) carries no base hash; a copy's is its new hash. */
        if (c->check_base && memcmp(db, c->span->base_sha256, SHA256_DIGEST_SIZE) != 0) {
                c->failed = 1;
                memcpy(c->got, db, SHA256_DIGEST_SIZE);
        } else if (memcmp(dn, c->span->new_sha256, SHA256_DIGEST_SIZE) != 0) {
                c->failed = 2;
                memcpy(c->got, dn, SHA256_DIGEST_SIZE);
        }
}

static int check_refusal(SpanDecoder *d, const SpanCheck *c, TpError *err) {
        char g[SHA256_HEX_SIZE], w[SHA256_HEX_SIZE];
        bool base = c->failed == 1;

        sha256_to_hex(c->got, g);
        sha256_to_hex(base ? c->span->base_sha256 : c->span->new_sha256, w);
        return span_fail_at(d, c->idx, err, -EBADMSG, "the %s SHA-256 is %s, the manifest says %s%s",
                            base ? "base bytes'" : "new bytes'", g, w, base ? " (wrong base?)" : "");
}

/* Deferred checks: wait for the pipe, then read every queued verdict; the first failure in span order, or 0. */
static int checks_settle(SpanDecoder *d, TpError *err) {
        const SpanCheck *first = NULL;

        hash_pipe_sync(d->pipe);
        for (unsigned k = 0; k < SPAN_CHECKS; k++) {
                SpanCheck *c = &d->checks[k];
                if (c->queued && c->failed && (!first || c->idx < first->idx))
                        first = c;
                c->queued = false;
        }
        return first ? check_refusal(d, first, err) : 0;
}

void span_decoder_defer_checks(SpanDecoder *d) {
        d->defer = d->pipe != NULL;
}

int span_decoder_end(SpanDecoder *d, TpError *err) {
        const ManifestSpan *s = d->span;

        if (d->stage != SPAN_PIECE)
                return misuse(d, err, d->stage == SPAN_BASED ? "ended with base bytes given but no new bytes read" :
                                      "ended outside a span");
        if (d->done != s->length)
                return span_fail(d, err, -EINVAL, "ended after %" PRIu64 " of its bytes", d->done);
        uint64_t base_want = d->v2 ? s->base_length : s->length;
        if (d->inside_base && d->base_fed != base_want)
                return span_fail(d, err, -EINVAL, "ended after %" PRIu64 " of its base bytes", d->base_fed);
        SpanCheck *c = &d->checks[d->cur];
        c->span = s;
        c->idx = d->idx;
        c->check_base = d->inside_base && s->encoding != SPAN_COPY;
        d->stage = SPAN_IDLE;
        if (d->defer) {
                c->queued = true;
                hash_pipe_call(d->pipe, d->last_slot, &c->base_hash, &c->new_hash, check_job, c);
                return 0;
        }
        if (d->pipe)
                hash_pipe_sync(d->pipe);
        check_job(c);
        return c->failed ? check_refusal(d, c, err) : 0;
}

int span_decoder_finish(SpanDecoder *d, TpError *err) {
        const ManifestSpan *s;
        int r;

        if (d->stage != SPAN_IDLE)
                return misuse(d, err, "finished inside a span");
        if (d->defer && (r = checks_settle(d, err)) < 0)
                return r;
        if (d->v2 && d->prev_end != d->m->target.size) {
                d->stage = SPAN_FAILED;
                return tp_error(err, -EBADMSG, "%s: the spans end at offset %" PRIu64 ", the target is %" PRIu64
                                " bytes", d->bundle->what, d->prev_end, d->m->target.size);
        }
        /* The reader refuses to finish before the last span; moving past it checks the last frame's end. */
        if ((r = span_decoder_next(d, &s, err)) != 0)
                return r < 0 ? r : misuse(d, err, "finished before the last span");
        if ((r = span_reader_finish(d->reader, err)) < 0)
                return failed(d, r, err);
        return 0;
}
