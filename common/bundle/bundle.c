/* SPDX-License-Identifier: MIT */

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#define ZSTD_STATIC_LINKING_ONLY      /* ZSTD_createDStream_advanced(): the window in a workbuf */
#include <zstd.h>
#include <zstd_errors.h>

#include "bundle.h"
#include "sigset.h"
#include "fileio.h"
#include "le.h"
#include "reader.h"
#include "sign.h"
#include "workbuf.h"
#include "yaml-doc.h"

_Static_assert(MANIFEST_WINDOW_LOG <= BUNDLE_WINDOW_LOG, "a manifest frame asks no more of a reader than a span's");

void bundle_header_encode(const BundleHeader *h, uint8_t ret[BUNDLE_HEADER_SIZE]) {
        memset(ret, 0, BUNDLE_HEADER_SIZE);
        memcpy(ret, BUNDLE_MAGIC, 8);
        put_le32(ret + 8, h->format);
        put_le32(ret + 12, h->flags);
        put_le64(ret + 16, h->manifest_size);
        put_le64(ret + 24, h->signature_size);
        put_le64(ret + 32, h->payload_size);
}

int bundle_header_decode(const uint8_t buf[BUNDLE_HEADER_SIZE], uint64_t file_size, BundleHeader *ret, TpError *err) {
        BundleHeader h;

        if (memcmp(buf, BUNDLE_MAGIC, 8) != 0)
                return tp_error(err, -EBADMSG, "not a TaskPatch bundle (bad magic)");
        h.format = get_le32(buf + 8);
        if (h.format != BUNDLE_FORMAT && h.format != BUNDLE_FORMAT_RELOCATING)
                return tp_error(err, -EPROTONOSUPPORT, "bundle format %" PRIu32 " is not supported (this build reads 1 and %d)",
                                h.format, BUNDLE_FORMAT_RELOCATING);
        h.flags = get_le32(buf + 12);
        if (h.flags & ~BUNDLE_FLAG_MANIFEST_ZSTD)
                return tp_error(err, -EBADMSG, "header: unknown flags 0x%08" PRIx32, h.flags);
        if (h.flags && h.format != BUNDLE_FORMAT)
                return tp_error(err, -EBADMSG, "header: flags 0x%08" PRIx32 " with format %" PRIu32 " (a format-2 manifest "
                                "is always compressed: the flag is format 1's)", h.flags, h.format);
        for (unsigned i = 40; i < BUNDLE_HEADER_SIZE; i++)
                if (buf[i] != 0)
                        return tp_error(err, -EBADMSG, "header: reserved byte %u is not zero", i);
        h.manifest_size = get_le64(buf + 16);
        h.signature_size = get_le64(buf + 24);
        h.payload_size = get_le64(buf + 32);

        if (h.manifest_size == 0 || h.manifest_size > MANIFEST_MAX_BYTES)
                return tp_error(err, -EBADMSG, "header: manifest size %" PRIu64 " is outside 1..%u", h.manifest_size,
                                MANIFEST_MAX_BYTES);
        if (h.signature_size > BUNDLE_MAX_SIGNATURE)
                return tp_error(err, -EBADMSG, "header: signature size %" PRIu64 " exceeds the %u-byte cap",
                                h.signature_size, BUNDLE_MAX_SIGNATURE);
        uint64_t fixed = BUNDLE_HEADER_SIZE + h.manifest_size + h.signature_size;
        if (file_size < fixed || h.payload_size != file_size - fixed)
                return tp_error(err, -EBADMSG, "header: sections add up to %" PRIu64 " + %" PRIu64
                                " bytes of payload, but the file has %" PRIu64 " bytes (truncated or padded?)",
                                fixed, h.payload_size, file_size);
        *ret = h;
        return 0;
}

Bundle *bundle_free(Bundle *b) {
        if (!b)
                return NULL;
        safe_close(b->fd);
        free(b->what);
        free(b->manifest_text);
        free(b->signature);
        manifest_free(b->manifest);
        encryption_wipe(b->content_key, sizeof(b->content_key));
        free(b);
        return NULL;
}

/* Header, manifest bytes and signature block; the manifest is not parsed yet. */
static int bundle_read(int fd, const char *what, uint64_t max_manifest, Bundle **ret, TpError *err) {
        _cleanup_(bundle_freep) Bundle *b = NULL;
        uint8_t hdr[BUNDLE_HEADER_SIZE];
        struct stat st;
        int r;

        b = calloc(1, sizeof(*b));
        if (!b) {
                safe_close(fd);
                return -ENOMEM;
        }
        b->fd = fd;
        b->what = strdup(what);
        if (!b->what)
                return -ENOMEM;

        if (fstat(fd, &st) < 0)
                return tp_error(err, negative_errno(), "%s: %s", what, strerror(errno));
        if (!S_ISREG(st.st_mode))
                return tp_error(err, -EBADMSG, "%s: not a regular file", what);
        b->file_size = (uint64_t) st.st_size;
        if (b->file_size < BUNDLE_HEADER_SIZE)
                return tp_error(err, -EBADMSG, "%s: %" PRIu64 " bytes, too short for a bundle header", what,
                                b->file_size);
        r = pread_full(fd, hdr, sizeof(hdr), 0);
        if (r < 0)
                return tp_error(err, r == -ENODATA ? -EBADMSG : r, "%s: reading the header: %s", what, strerror(-r));
        r = bundle_header_decode(hdr, b->file_size, &b->header, err);
        if (r < 0)
                return tp_error_prefix(err, r, "%s", what);

        if (max_manifest && b->header.manifest_size > max_manifest)
                return tp_error(err, -EBADMSG, "%s: the manifest is %" PRIu64 " bytes, more than the %" PRIu64
                                " this device accepts (limits.manifest_bytes)", what, b->header.manifest_size,
                                max_manifest);
        b->manifest_len = b->header.manifest_size;
        b->manifest_text = malloc(b->manifest_len);
        if (!b->manifest_text)
                return -ENOMEM;
        r = pread_full(fd, b->manifest_text, b->manifest_len, BUNDLE_HEADER_SIZE);
        if (r < 0)
                return tp_error(err, r, "%s: reading the manifest: %s", what, strerror(-r));

        if (b->header.signature_size > 0) {
                b->signature_len = b->header.signature_size;
                b->signature = malloc(b->signature_len);
                if (!b->signature)
                        return -ENOMEM;
                r = pread_full(fd, b->signature, b->signature_len, BUNDLE_HEADER_SIZE + b->manifest_len);
                if (r < 0)
                        return tp_error(err, r, "%s: reading the signature: %s", what, strerror(-r));
        }
        b->payload_offset = BUNDLE_HEADER_SIZE + b->manifest_len + b->signature_len;
        *ret = TAKE_PTR(b);
        return 0;
}

/* @max_text: the most YAML a format-2 section may decode to (0: MANIFEST_MAX_BYTES). */
static int bundle_parse(Bundle *b, uint64_t max_text, TpError *err) {
        int r = manifest_section_parse(b->header.format, bundle_manifest_compressed(&b->header), b->manifest_text,
                                       b->manifest_len, max_text, &b->manifest, err);
        if (r < 0)
                return tp_error_prefix(err, r, "%s", b->what);
        if (b->manifest->payload.size != b->header.payload_size)
                return tp_error(err, -EBADMSG, "%s: the manifest declares a %" PRIu64
                                "-byte payload, the bundle holds %" PRIu64, b->what, b->manifest->payload.size,
                                b->header.payload_size);
        if (b->manifest->format != b->header.format)
                return tp_error(err, -EBADMSG, "%s: the header says format %" PRIu32 ", the manifest format %" PRIu64,
                                b->what, b->header.format, b->manifest->format);
        return 0;
}

int bundle_open_fd(int fd, const char *what, Bundle **ret, TpError *err) {
        _cleanup_(bundle_freep) Bundle *b = NULL;
        int r = bundle_read(fd, what, 0, &b, err);
        if (r < 0)
                return r;
        r = bundle_parse(b, 0, err);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(b);
        return 0;
}

int bundle_open(const char *path, Bundle **ret, TpError *err) {
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return tp_error(err, negative_errno(), "%s: %s", path, strerror(errno));
        return bundle_open_fd(fd, path, ret, err);
}

/* The signature part of the trust decision: on the manifest's bytes, before they are parsed. */
static int bundle_check_signature(Bundle *b, BundleTrust *trust, TpError *err) {
        int r;

        trust->signer[0] = '\0';
        trust->signature_checked = false;
        if (!b->signature && !trust->allow_unsigned)
                return tp_error(err, -EKEYREJECTED, "%s: the bundle is unsigned (allow it with --allow-unsigned, for tests only)",
                                b->what);
        if (b->signature && trust->ca_path) {
                SignatureTrust st = { .ca_path = trust->ca_path, .ca_pem = trust->ca_pem, .now = trust->now, .crl_path = trust->crl_path,
                                      .crl_expired_warn = trust->crl_expired_warn, .revoked = trust->revoked,
                                      .threshold = trust->threshold };
                r = signature_set_verify(b->signature, b->signature_len, b->manifest_text, b->manifest_len, &st,
                                         &trust->signer_info, trust->signer, err);
                if (r < 0)
                        return tp_error_prefix(err, r, "%s", b->what);
                trust->signature_checked = true;
        }
        return 0;
}

static int bundle_check_expiry(const Bundle *b, const BundleTrust *trust, TpError *err) {
        const Manifest *m = b->manifest;

        if (m->expires != 0 && trust->now != 0 && m->expires < (int64_t) trust->now) {
                char when[21];
                format_time_utc(m->expires, when);
                return tp_error(err, -EKEYEXPIRED, "%s: the bundle expired on %s", b->what, when);
        }
        return 0;
}

static int bundle_check_spans(const Bundle *b, const BundleTrust *trust, TpError *err) {
        if (trust->max_spans && b->manifest->n_spans > trust->max_spans)
                return tp_error(err, -EBADMSG, "%s: the manifest lists %zu spans, more than the %" PRIu64
                                " this device accepts (limits.manifest_spans)", b->what, b->manifest->n_spans,
                                trust->max_spans);
        return 0;
}

int bundle_unlock(Bundle *b, const DecryptKey *k, TpError *err) {
        if (!b->manifest->encryption || b->unlocked)
                return 0;
        int r = encryption_unwrap(b->manifest->encryption, k, b->content_key, err);
        if (r < 0)
                return tp_error_prefix(err, r, "%s", b->what);
        b->unlocked = true;
        return 0;
}

/* Only a signed (or knowingly unsigned) manifest's wrapped keys are worth an ECDH. */
static int bundle_check_key(Bundle *b, const BundleTrust *trust, TpError *err) {
        return trust->decrypt_key ? bundle_unlock(b, trust->decrypt_key, err) : 0;
}

int bundle_verify(Bundle *b, BundleTrust *trust, TpError *err) {
        int r = bundle_check_signature(b, trust, err);
        if (r < 0 || (r = bundle_check_expiry(b, trust, err)) < 0)
                return r;
        return bundle_check_key(b, trust, err);
}

int bundle_open_verified_fd(int fd, const char *what, BundleTrust *trust, Bundle **ret, TpError *err) {
        _cleanup_(bundle_freep) Bundle *b = NULL;
        int r;

        if ((r = bundle_read(fd, what, trust->max_manifest_bytes, &b, err)) < 0 ||
            (r = bundle_check_signature(b, trust, err)) < 0 || (r = bundle_parse(b, trust->max_manifest_bytes, err)) < 0 ||
            (r = bundle_check_spans(b, trust, err)) < 0 || (r = bundle_check_expiry(b, trust, err)) < 0 ||
            (r = bundle_check_key(b, trust, err)) < 0)
                return r;
        *ret = TAKE_PTR(b);
        return 0;
}

int bundle_open_verified(const char *path, BundleTrust *trust, Bundle **ret, TpError *err) {
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return tp_error(err, negative_errno(), "%s: %s", path, strerror(errno));
        return bundle_open_verified_fd(fd, path, trust, ret, err);
}

/* ---- streaming the payload ------------------------------------------------ */

struct SpanReader {
        Bundle *bundle;
        Reader in;
        ZSTD_DStream *zd;
        FrameCipher *cipher;            /* an encrypted payload's, else NULL */
        bool locked;                    /* encrypted, and no key opened it: frames can only be skipped */
        Sha256 payload_hash;
        size_t next;                    /* index of the next span */
        const ManifestSpan *span;       /* current span */
        uint64_t frame_left;            /* bytes of the current frame's zstd frame not yet read (not its tag) */
        uint64_t out_left;              /* decoded bytes of the current span not yet returned */
        uint8_t inbuf[64 * 1024];       /* what zstd reads */
        uint8_t sealed[64 * 1024];      /* an encrypted payload's bytes, before they are decrypted into inbuf */
        ZSTD_inBuffer zin;
        bool frame_done;
};

_Static_assert(sizeof(((SpanReader *) 0)->inbuf) % 16 == 0, "GCM takes whole blocks but for a frame's last piece");

SpanReader *span_reader_free(SpanReader *r) {
        if (!r)
                return NULL;
        reader_done(&r->in);
        ZSTD_freeDStream(r->zd);
        frame_cipher_free(r->cipher);
        workbuf_free(r);
        return NULL;
}

/* zstd's window is a span's size (up to 8 MiB), allocated afresh for every reader. */
static void *zstd_alloc(void *opaque, size_t size) {
        (void) opaque;
        return workbuf_new(size);
}

static void zstd_free(void *opaque, void *p) {
        (void) opaque;
        workbuf_free(p);
}

int span_reader_new(Bundle *b, SpanReader **ret, TpError *err) {
        _cleanup_(span_reader_freep) SpanReader *r = NULL;
        int k;

        r = workbuf_new(sizeof(*r));    /* its buffers make it large: fresh pages, zeroed */
        if (!r)
                return -ENOMEM;
        r->bundle = b;
        k = reader_init(&r->in, b->fd, b->payload_offset, b->payload_offset + b->header.payload_size);
        if (k < 0)
                return k;
        r->zd = ZSTD_createDStream_advanced((ZSTD_customMem) { zstd_alloc, zstd_free, NULL });
        if (!r->zd)
                return -ENOMEM;
        if (ZSTD_isError(ZSTD_DCtx_setParameter(r->zd, ZSTD_d_windowLogMax, BUNDLE_WINDOW_LOG)))
                return tp_error(err, -EIO, "zstd: cannot cap the window size");
        r->locked = b->manifest->encryption && !b->unlocked;
        if (b->manifest->encryption && !r->locked && (k = frame_cipher_new(b->content_key, &r->cipher)) < 0)
                return tp_error(err, k, "%s: cannot set up the payload's cipher", b->what);
        sha256_init(&r->payload_hash);
        *ret = TAKE_PTR(r);
        return 0;
}

static int span_error(SpanReader *r, int code, const char *msg, TpError *err) {
        return tp_error(err, code, "%s: span #%zu (offset %" PRIu64 ", %" PRIu64 " bytes%s%s): %s", r->bundle->what,
                        r->next - 1, r->span->offset, r->span->length, r->span->site ? ", site " : "",
                        r->span->site ? r->span->site : "", msg);
}

/* Read @n stored payload bytes into @buf; every byte goes into the payload's hash. */
static int payload_read(SpanReader *r, uint8_t *buf, size_t n, TpError *err) {
        int k = reader_read(&r->in, buf, n);
        if (k < 0)
                return span_error(r, k, "reading the payload failed (truncated bundle?)", err);
        sha256_update(&r->payload_hash, buf, n);
        return 0;
}

/*
 * The next piece of the current frame into zin, at most sizeof(inbuf) bytes. Encrypted: the
 * piece is decrypted, and with the frame's last piece its tag is read and checked before
 * zstd sees that piece.
 */
static int frame_fill(SpanReader *r, TpError *err) {
        size_t n = r->frame_left < sizeof(r->inbuf) ? (size_t) r->frame_left : sizeof(r->inbuf);
        int k;

        if (r->locked)
                return span_error(r, -ENOKEY, "the payload is encrypted and no key opened it", err);
        if (!r->cipher) {
                if ((k = payload_read(r, r->inbuf, n, err)) < 0)
                        return k;
        } else {
                if ((k = payload_read(r, r->sealed, n, err)) < 0)
                        return k;
                frame_cipher_update(r->cipher, r->sealed, r->inbuf, n);
                if (r->frame_left == n) {
                        uint8_t tag[ENCRYPTION_TAG_SIZE];
                        if ((k = payload_read(r, tag, sizeof(tag), err)) < 0)
                                return k;
                        if (frame_cipher_check(r->cipher, tag) < 0)
                                return span_error(r, -EBADMSG, "the encrypted frame does not authenticate (its GCM tag "
                                                  "does not match: altered in transit or at rest)", err);
                }
        }
        r->frame_left -= n;
        r->zin = (ZSTD_inBuffer) { r->inbuf, n, 0 };
        return 0;
}

/* zstd's words, except for the one refusal that is our cap: say which cap. */
_Static_assert(BUNDLE_WINDOW_LOG == 23, "zstd_problem() says 8 MiB");
static const char *zstd_problem(size_t z) {
        if (ZSTD_getErrorCode(z) == ZSTD_error_frameParameter_windowTooLarge)
                return "the frame asks for a window larger than the 8 MiB cap (BUNDLE_WINDOW_LOG)";
        return ZSTD_getErrorName(z);
}

/* The current frame must end exactly here: no more output, no trailing input. */
static int span_end(SpanReader *r, TpError *err) {
        uint8_t extra;
        int k;

        while (!r->frame_done) {
                ZSTD_outBuffer zout = { &extra, 1, 0 };
                if (r->zin.pos == r->zin.size && r->frame_left > 0 && (k = frame_fill(r, err)) < 0)
                        return k;
                size_t z = ZSTD_decompressStream(r->zd, &zout, &r->zin);
                if (ZSTD_isError(z))
                        return span_error(r, -EBADMSG, zstd_problem(z), err);
                if (zout.pos > 0)
                        return span_error(r, -EBADMSG, "the frame decodes to more bytes than the span's length", err);
                if (z == 0)
                        r->frame_done = true;
                else if (r->zin.pos == r->zin.size && r->frame_left == 0)
                        return span_error(r, -EBADMSG, "the frame is truncated", err);
        }
        if (r->zin.pos != r->zin.size || r->frame_left > 0)
                return span_error(r, -EBADMSG, "trailing bytes after the frame", err);
        return 0;
}

int span_reader_next(SpanReader *r, const ManifestSpan **ret_span, TpError *err) {
        const Manifest *m = r->bundle->manifest;
        int k;

        if (r->span) {
                if (r->out_left > 0)
                        return span_error(r, -EINVAL, "moved on before reading the whole span", err);
                k = span_end(r, err);
                if (k < 0)
                        return k;
        }
        if (r->next >= m->n_spans) {
                r->span = NULL;
                return 0;
        }
        r->span = &m->spans[r->next++];
        r->frame_left = r->span->frame_size;
        /* A copy has no frame: nothing to read from the payload. An encrypted frame ends in its tag. */
        if (m->encryption && r->frame_left > 0) {
                if (r->frame_left <= ENCRYPTION_TAG_SIZE)
                        return span_error(r, -EBADMSG, "its encrypted frame is no longer than its tag", err);
                r->frame_left -= ENCRYPTION_TAG_SIZE;
                if (r->cipher)
                        frame_cipher_start(r->cipher, r->next - 1, false);
        }
        /* A lora span's frame holds its factors before the span's bytes (lora-span.h), a rescale span's its parameters. */
        r->out_left = !r->span->frame_size ? 0 : r->span->length + span_frame_prefix_bytes(r->span);
        r->zin = (ZSTD_inBuffer) { r->inbuf, 0, 0 };
        r->frame_done = r->span->frame_size == 0;
        ZSTD_DCtx_reset(r->zd, ZSTD_reset_session_only);
        *ret_span = r->span;
        return 1;
}

int span_reader_skip(SpanReader *r, TpError *err) {
        if (!r->span)
                return -EINVAL;
        /* Its bytes still count for the payload's hash; an encrypted one is not decrypted (nor its tag checked). */
        uint64_t left = r->frame_left + (r->bundle->manifest->encryption && r->span->frame_size ? ENCRYPTION_TAG_SIZE : 0);
        while (left > 0) {
                size_t n = left < sizeof(r->inbuf) ? (size_t) left : sizeof(r->inbuf);
                int k = payload_read(r, r->inbuf, n, err);
                if (k < 0)
                        return k;
                left -= n;
        }
        r->frame_left = 0;
        r->zin = (ZSTD_inBuffer) { r->inbuf, 0, 0 };
        r->out_left = 0;
        r->frame_done = true;
        return 0;
}

int span_reader_ref_prefix(SpanReader *r, const uint8_t *prefix, size_t n, TpError *err) {
        if (!r->span)
                return -EINVAL;
        if (r->span->encoding != SPAN_REF || r->out_left != r->span->length)
                return span_error(r, -EINVAL, "a reference prefix belongs before a ref span's first byte", err);
        size_t z = ZSTD_DCtx_refPrefix(r->zd, prefix, n);
        if (ZSTD_isError(z))
                return span_error(r, -EIO, ZSTD_getErrorName(z), err);
        return 0;
}

int span_reader_read(SpanReader *r, uint8_t *buf, size_t n, TpError *err) {
        ZSTD_outBuffer zout = { buf, n, 0 };
        int k;

        if (!r->span || n > r->out_left)
                return r->span ? span_error(r, -EINVAL, "read past the span's length", err) : -EINVAL;
        while (zout.pos < zout.size) {
                if (r->zin.pos == r->zin.size) {
                        if (r->frame_left == 0)
                                return span_error(r, -EBADMSG, "the frame ends before the span's length", err);
                        if ((k = frame_fill(r, err)) < 0)
                                return k;
                }
                size_t z = ZSTD_decompressStream(r->zd, &zout, &r->zin);
                if (ZSTD_isError(z))
                        return span_error(r, -EBADMSG, zstd_problem(z), err);
                if (z == 0) {
                        r->frame_done = true;
                        if (zout.pos < zout.size)
                                return span_error(r, -EBADMSG, "the frame ends before the span's length", err);
                }
        }
        r->out_left -= n;
        return 0;
}

int span_reader_finish(SpanReader *r, TpError *err) {
        const Manifest *m = r->bundle->manifest;
        uint8_t d[SHA256_DIGEST_SIZE];
        const ManifestSpan *s;
        int k;

        if (r->span || r->next < m->n_spans) {
                k = span_reader_next(r, &s, err);
                if (k < 0)
                        return k;
                if (k > 0)
                        return tp_error(err, -EINVAL, "%s: finished before the last span", r->bundle->what);
        }
        if (reader_remaining(&r->in) != 0)
                return tp_error(err, -EBADMSG, "%s: %" PRIu64 " payload bytes after the last frame", r->bundle->what,
                                reader_remaining(&r->in));
        sha256_final(&r->payload_hash, d);
        if (memcmp(d, m->payload.sha256, sizeof(d)) != 0)
                return tp_error(err, -EBADMSG, "%s: payload SHA-256 does not match the manifest", r->bundle->what);
        return 0;
}
