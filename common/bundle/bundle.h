/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The bundle file (.tpb): a fixed 64-byte header, the YAML manifest, the
 * signature block over the manifest, then the payload: one zstd frame per
 * span, back to back in span order. See packaging/docs/bundle-format.md.
 *
 *   offset 0   "TPBUNDL\0"        magic
 *          8   u32 format         BUNDLE_FORMAT
 *         12   u32 flags          0, or BUNDLE_FLAG_MANIFEST_ZSTD (format 1 only)
 *         16   u64 manifest_size  bytes of YAML
 *         24   u64 signature_size 0 for an unsigned bundle
 *         32   u64 payload_size
 *         40   24 bytes           0
 *   (all little-endian)
 *
 * A reader verifies the signature and the manifest before reading any
 * payload, then streams the payload with bounded memory: each frame's
 * window is capped (BUNDLE_WINDOW_LOG), each span's output is capped at its
 * declared length, and the payload hash is checked as the frames go by.
 */

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "encryption.h"
#include "error.h"
#include "manifest.h"
#include "sign.h"

#define BUNDLE_MAGIC "TPBUNDL"          /* 8 bytes with its NUL */
#define BUNDLE_FORMAT 1                 /* equals the manifest's format */
#define BUNDLE_FORMAT_RELOCATING 2
#define BUNDLE_HEADER_SIZE 64
#define BUNDLE_MAX_SIGNATURE (64u << 10)
#define BUNDLE_WINDOW_LOG 23            /* 8 MiB: the most memory a frame may ask a reader for */
/* Format 1: the manifest section is one zstd frame of the YAML, as format 2's always is. */
#define BUNDLE_FLAG_MANIFEST_ZSTD 1u

typedef struct BundleHeader {
        uint32_t format;
        uint64_t manifest_size;
        uint64_t signature_size;
        uint64_t payload_size;
        uint32_t flags;
} BundleHeader;

/* Whether the manifest section of a bundle with header @h is zstd-compressed. */
static inline bool bundle_manifest_compressed(const BundleHeader *h) {
        return h->format == BUNDLE_FORMAT_RELOCATING || (h->flags & BUNDLE_FLAG_MANIFEST_ZSTD);
}

void bundle_header_encode(const BundleHeader *h, uint8_t ret[BUNDLE_HEADER_SIZE]);
_warn_unused_result_ int bundle_header_decode(const uint8_t buf[BUNDLE_HEADER_SIZE], uint64_t file_size,
                                              BundleHeader *ret, TpError *err);

typedef struct Bundle {
        int fd;                         /* owned */
        char *what;                     /* the name used in messages (usually the path) */
        uint64_t file_size;
        BundleHeader header;
        char *manifest_text;            /* exactly the signed bytes: the YAML, or format 2's zstd frame of it */
        size_t manifest_len;
        uint8_t *signature;             /* NULL when unsigned */
        size_t signature_len;
        Manifest *manifest;             /* parsed and validated */
        uint64_t payload_offset;        /* absolute */
        bool unlocked;                  /* an encrypted bundle's content key is known (bundle_unlock()) */
        uint8_t content_key[ENCRYPTION_KEY_SIZE];       /* wiped by bundle_free() */
} Bundle;

/*
 * Read the header, manifest and signature block, and validate the manifest
 * (not the signature: see bundle_verify()). Takes ownership of @fd, also on
 * failure. @what names the bundle in messages.
 */
_warn_unused_result_ int bundle_open_fd(int fd, const char *what, Bundle **ret, TpError *err);
_warn_unused_result_ int bundle_open(const char *path, Bundle **ret, TpError *err);
Bundle *bundle_free(Bundle *b);
DEFINE_POINTER_CLEANUP(Bundle, bundle_free)

typedef struct BundleTrust {
        const char *ca_path;            /* PEM file or directory; NULL: do not check the signature */
        const char *ca_pem;             /* the CAs as PEM text instead (@ca_path names them): SignatureTrust's */
        bool allow_unsigned;            /* accept a bundle without a signature */
        time_t now;                     /* for certificate validity and expiry; 0: clock unknown, skip dates */
        /* Revocation (sign.h's SignatureTrust): CRLs, whether a stale one only warns, a revocation list. */
        const char *crl_path;
        bool crl_expired_warn;
        const Revocations *revoked;
        unsigned threshold;             /* distinct signers the bundle needs (sigset.h); 0 or 1: one */
        /* An encrypted bundle is unlocked with it once verified (bundle_unlock(): one for other keys is
         * refused); NULL: it stays locked, and reading its payload fails. */
        const DecryptKey *decrypt_key;
        /* A device's caps (bundle_open_verified*): the manifest's bytes, checked before they are read
         * (format 2: its section's bytes, and the YAML they decode to, checked before it is decoded),
         * and its spans, checked after the parse; 0: the format's own (MANIFEST_MAX_BYTES, _SPANS). */
        uint64_t max_manifest_bytes;
        uint64_t max_spans;
        char signer[256];               /* out: the signers' subjects ("CN=a, CN=b"), "" when none was checked */
        bool signature_checked;         /* out */
        SignatureInfo signer_info;      /* out, when signature_checked: the signer, and a stale CRL let pass */
} BundleTrust;

/*
 * The trust decision, before any payload byte is used: an unsigned bundle
 * is refused unless allow_unsigned; with a CA the signature and chain must
 * verify; an expired manifest (expires < now) is refused; an encrypted one is
 * unlocked with trust->decrypt_key when given.
 */
_warn_unused_result_ int bundle_verify(Bundle *b, BundleTrust *trust, TpError *err);

/*
 * bundle_open_fd() and bundle_verify() in the order a device needs: the signature is checked
 * on the manifest's bytes before they are parsed, so an unsigned or foreign manifest costs a
 * hash and a signature check, never a YAML parse (up to MANIFEST_MAX_BYTES of it).
 */
_warn_unused_result_ int bundle_open_verified_fd(int fd, const char *what, BundleTrust *trust, Bundle **ret,
                                                 TpError *err);
_warn_unused_result_ int bundle_open_verified(const char *path, BundleTrust *trust, Bundle **ret, TpError *err);

/*
 * An encrypted bundle's content key, unwrapped with @k (encryption_unwrap(): -ENOKEY when the
 * bundle is for other keys, -EBADMSG when its wrapped key does not open). A plain bundle: 0,
 * nothing to do. Only after bundle_verify(): the wrapped keys are trusted once signed.
 */
_warn_unused_result_ int bundle_unlock(Bundle *b, const DecryptKey *k, TpError *err);

/*
 * Streaming access to the spans' decoded bytes, in span order. Memory:
 * one zstd stream (window ≤ 8 MiB) and small input buffers. An encrypted
 * bundle is decrypted frame by frame as it streams, each frame's GCM tag
 * checked before its last bytes are decoded; one not unlocked can only be
 * skipped through (span_reader_read() is -ENOKEY), which still checks the
 * payload's hash.
 *
 *   span_reader_new(b, &r);
 *   while ((k = span_reader_next(r, &span)) > 0)
 *           while (more) span_reader_read(r, buf, n);   -- exactly span->length bytes in all
 *   span_reader_finish(r);                             -- payload hash and trailing bytes
 */
typedef struct SpanReader SpanReader;
_warn_unused_result_ int span_reader_new(Bundle *b, SpanReader **ret, TpError *err);
SpanReader *span_reader_free(SpanReader *r);
DEFINE_POINTER_CLEANUP(SpanReader, span_reader_free)
/* Move to the next span: 1 and the span, or 0 after the last one. The previous span must be fully read. */
_warn_unused_result_ int span_reader_next(SpanReader *r, const ManifestSpan **ret_span, TpError *err);
/* Pass over the current span's frame undecoded (its bytes still count for the payload's hash). */
_warn_unused_result_ int span_reader_skip(SpanReader *r, TpError *err);
/* A ref span: its base bytes, the frame's reference prefix (kept in place until the span is read). */
_warn_unused_result_ int span_reader_ref_prefix(SpanReader *r, const uint8_t *prefix, size_t n, TpError *err);
/* The next @n bytes of the current span's frame output (the raw bytes, or the delta stream). */
_warn_unused_result_ int span_reader_read(SpanReader *r, uint8_t *buf, size_t n, TpError *err);
/* After the last span: the payload's SHA-256 must match the manifest. */
_warn_unused_result_ int span_reader_finish(SpanReader *r, TpError *err);
