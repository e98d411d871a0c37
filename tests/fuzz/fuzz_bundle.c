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
#include "fuzz-input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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
                uint64_t left = s->encoding == SPAN_COPY ? 0 : s->length;     /* a copy has no frame */
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
        bundle_free(b);
        return 0;
}
