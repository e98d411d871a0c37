/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the bundle reader (common/bundle/bundle.c, common/bundle/manifest.c,
 * common/text/yaml-doc.c): header, manifest and the streaming span decoder. The
 * signature is not checked here (bundle_open_fd never does; bundle_verify
 * does), so the fuzzer reaches every parser behind it. An encrypted bundle is
 * read with a fixed content key (its frames rarely authenticate under it, but
 * the decrypting reader runs on every input). A failure must carry a message;
 * decoded spans must have exactly their declared lengths.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bundle.h"
#include "span.h"
#include "fuzz-input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/*
 * The span decoder over a base of zeros (no base file): each span is checked, and its frame
 * decoded, delta- or lora-predicted, until a check fails (the base hash, at the latest).
 */
static void decode(Bundle *b) {
        static uint8_t zeros[SPAN_REF_MAX], frame[1 << 17], out[1 << 17];
        const size_t window = 1 << 16;
        const uint64_t base_size = b->manifest->base.size;
        const bool v2 = b->manifest->format == MANIFEST_FORMAT_RELOCATING;
        const ManifestSpan *s;
        const uint8_t *bytes;
        SpanDecoder *d = NULL;
        TpError err = {};
        size_t n;
        int r;

        if (span_decoder_buffer_size(window) > sizeof(frame))
                abort();
        if (span_decoder_new(b, base_size, NULL, &d, &err) < 0) {
                if (!err.message[0])
                        abort();
                return;
        }
        while ((r = span_decoder_next(d, &s, &err)) > 0) {
                if (s->encoding == SPAN_REF)
                        r = span_decoder_base(d, 0, zeros, s->base_length, NULL, &err);
                for (uint64_t done = 0; r >= 0 && (n = span_decoder_want(d, window)) > 0; done += n) {
                        uint64_t at = s->offset + done;
                        size_t nb = v2 ? (span_base_in_pieces(s) ? n : 0) :
                                    at >= base_size ? 0 : base_size - at < n ? (size_t) (base_size - at) : n;
                        if (nb > 0)
                                r = span_decoder_base(d, 0, zeros, nb, NULL, &err);
                        if (r >= 0)
                                r = span_decoder_read(d, 0, frame, out, n, NULL, &bytes, &err);
                }
                if (r >= 0)
                        r = span_decoder_end(d, &err);
                if (r < 0)
                        break;
        }
        if (r < 0 && !err.message[0] && r != -ENOMEM)
                abort();
        span_decoder_free(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static uint8_t buf[1 << 16];
        Bundle *b = NULL;
        SpanReader *sr = NULL;
        const ManifestSpan *s;
        TpError err = {};
        int fd, r;

        fd = fuzz_input_fd(data, size, 1);     /* the bundle takes ownership */
        r = bundle_open_fd(fd, "fuzz", &b, &err);
        if (r < 0) {
                if (!err.message[0] && r != -ENOMEM)
                        abort();
                return 0;
        }
        if (b->manifest->encryption) {
                memset(b->content_key, 7, sizeof(b->content_key));
                b->unlocked = true;
        }
        if (span_reader_new(b, &sr, &err) < 0)
                abort();
        while ((r = span_reader_next(sr, &s, &err)) > 0) {
                /* A copy has no frame; a lora frame holds the factors before the span's bytes. */
                uint64_t left = s->encoding == SPAN_COPY ? 0 : s->length + span_frame_prefix_bytes(s);
                while (left > 0 && r >= 0) {
                        size_t n = left < sizeof(buf) ? (size_t) left : sizeof(buf);
                        r = span_reader_read(sr, buf, n, &err);
                        left -= n;
                }
                if (r < 0)
                        break;
        }
        if (r >= 0)
                r = span_reader_finish(sr, &err);
        if (r < 0 && !err.message[0])
                abort();
        span_reader_free(sr);
        decode(b);
        bundle_free(b);
        return 0;
}
