/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Decoding a bundle's spans: the one place that checks a span against the
 * manifest and the base, and turns its frame into the bytes it writes. Both
 * `taskpatch apply` (bundle_apply()) and the device's stager use it, so a
 * damaged bundle or a wrong base is refused with the same words by both.
 *
 *   span_decoder_new(bundle, base_size, pipe, &d);
 *   while ((k = span_decoder_next(d, &span)) > 0) {
 *           while (more) {
 *                   n = span_decoder_want(d, window);
 *                   span_decoder_base(d, slot, base, nb, also);  -- the base bytes under the next n (nb <= n)
 *                   span_decoder_read(d, slot, frame, out, n, also, &bytes);
 *           }
 *           span_decoder_end(d);                                -- the span's base and new SHA-256
 *   }
 *   span_decoder_finish(d);                                     -- payload SHA-256, nothing after the last frame
 *
 * Checks, in this order (every message reads "<bundle>: span #i (offset O,
 * L bytes[, site S]): <what was expected and what was found>"):
 *   span_decoder_next()   the span lies inside the target; its frame is the
 *                         next one in the payload and ends inside it; a delta
 *                         span names a known layout (i8 only in format 2), lies wholly inside the
 *                         base and is whole units of its layout;
 *   span_decoder_read()   the frame (bundle.h's SpanReader): its window
 *                         within BUNDLE_WINDOW_LOG, it decodes to exactly the
 *                         span's length, no truncation, no trailing bytes; a
 *                         delta piece has all its base bytes;
 *   span_decoder_end()    the base bytes' SHA-256 (when the span lies wholly
 *                         inside the base: a span reaching past the end of a
 *                         shorter base carries no base hash), then the new
 *                         bytes' SHA-256;
 *   span_decoder_finish() the payload's SHA-256 and its end.
 *
 * Format 2 (relocating): the spans tile the target, and each reads its
 * base bytes at [base_offset, +base_length) instead of under itself: a
 * copy's piece by piece (they are its new bytes: span_decoder_read() with
 * no frame), a delta's piece by piece, a ref span's whole reference in one
 * span_decoder_base() call before its first read (the buffer stays put until
 * span_decoder_end()); a raw span reads none.
 * A failed check returns -EBADMSG; misuse of the sequence above returns
 * -EINVAL. After any failure the decoder can only be freed.
 *
 * Hashing: with @pipe NULL the span digests are computed on the calling
 * thread; with a pipe they are queued to its worker (and may then share a
 * pass with the caller's own state @also). Buffers handed to the decoder
 * belong to pipeline slot @slot and must stay untouched until the pipe
 * hands that slot out again; span_decoder_end() syncs the pipe, unless the
 * checks are deferred (span_decoder_defer_checks()). The pipe must be freed
 * (or synced) before the decoder.
 */

#include <stddef.h>
#include <stdint.h>

#include "bundle.h"
#include "error.h"
#include "hashpipe.h"

typedef struct SpanDecoder SpanDecoder;

/*
 * Decode @b's spans against a base of @base_size bytes (the base file, or
 * a slot holding base bytes). @b must be verified and must outlive the
 * decoder.
 */
_warn_unused_result_ int span_decoder_new(Bundle *b, uint64_t base_size, HashPipe *pipe, SpanDecoder **ret,
                                          TpError *err);
SpanDecoder *span_decoder_free(SpanDecoder *d);
DEFINE_POINTER_CLEANUP(SpanDecoder, span_decoder_free)

/* The largest piece span_decoder_want() returns for @window: what each buffer must hold. */
size_t span_decoder_buffer_size(size_t window);

/* Begin the next span: 1 and the span (its index is the number of earlier spans), 0 after the last. */
_warn_unused_result_ int span_decoder_next(SpanDecoder *d, const ManifestSpan **ret_span, TpError *err);

/*
 * Bytes of the current span's next piece: a delta group for a delta span,
 * up to @window for a raw one, never past the span's end. 0 when the span
 * is done.
 */
size_t span_decoder_want(const SpanDecoder *d, size_t window);

/*
 * The @n base bytes under the start of the next piece, once per piece: all
 * of the piece for a delta span, fewer (or none, and no call) only where a
 * raw span reaches past the end of the base. They are hashed into the
 * span's base digest (and into @also unless NULL); a delta piece decodes
 * against them, so they must stay in place until span_decoder_read().
 */
_warn_unused_result_ int span_decoder_base(SpanDecoder *d, unsigned slot, const uint8_t *base, size_t n, Sha256 *also,
                                           TpError *err);

/*
 * The next @n new bytes (n == span_decoder_want() for a delta span, at most
 * that for a raw one): the frame's output goes into @frame, and a delta
 * span's decoded bytes into @out (both @n bytes). *ret_bytes points at the
 * new bytes (@frame or @out); they are hashed into the span's new digest
 * (and into @also unless NULL).
 */
_warn_unused_result_ int span_decoder_read(SpanDecoder *d, unsigned slot, uint8_t *frame, uint8_t *out, size_t n,
                                           Sha256 *also, const uint8_t **ret_bytes, TpError *err);

/*
 * span_decoder_read(), but a delta piece (the one whose decoding costs) is decoded by the pipe's
 * worker (or by whichever thread waits on the pipe), in order with the new bytes' hashing, while
 * the caller goes on: *ret_bytes is then @out, whose bytes are there only for the jobs the caller
 * queues after this call on span_decoder_chain() (hash_pipe_call()), or after hash_pipe_sync().
 * Other pieces are decoded at once, as by span_decoder_read(). Needs a pipe.
 */
_warn_unused_result_ int span_decoder_read_ahead(SpanDecoder *d, unsigned slot, uint8_t *frame, uint8_t *out, size_t n,
                                                 Sha256 *also, const uint8_t **ret_bytes, TpError *err);
/* The state that orders the current span's new bytes on the pipe (for hash_pipe_call()). */
Sha256 *span_decoder_chain(SpanDecoder *d);

/*
 * Instead of reading a copy span just begun: end it unhashed, for a caller
 * that writes its bytes itself (the device, with copy_file_range) and then
 * checks the target's SHA-256 over the whole result, which covers them.
 */
_warn_unused_result_ int span_decoder_skip_copy(SpanDecoder *d, TpError *err);

/*
 * With a pipe: span_decoder_end() no longer waits for a span's digests. Their check is queued on
 * the pipe after the span's last bytes, and its verdict read at a later span_decoder_next()
 * (once 16 spans' checks wait), at span_decoder_finish(), or when another check fails: a failure
 * is reported there, in the same words, and a later span's failure never hides an earlier one's.
 * The caller goes on with the next span meanwhile, so it must not act on a span's bytes as checked
 * before span_decoder_finish(). No effect without a pipe.
 */
void span_decoder_defer_checks(SpanDecoder *d);

/* After the span's last byte: its base and new SHA-256 must match the manifest. */
_warn_unused_result_ int span_decoder_end(SpanDecoder *d, TpError *err);

/* After the last span: the payload's SHA-256 must match the manifest, and no byte may follow the last frame. */
_warn_unused_result_ int span_decoder_finish(SpanDecoder *d, TpError *err);
