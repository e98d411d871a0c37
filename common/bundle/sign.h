/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Signing and verification of bundle manifests (and later channel indexes):
 * ECDSA P-256 over the SHA-256 of the signed bytes, with the signer's X.509
 * certificate chain carried next to the signature (mbedTLS 2.28).
 *
 * SIGNATURE BLOCK (binary, integers little-endian, no padding):
 *
 *     offset  size  field
 *     0       8     magic "TPSIG1\0\0"
 *     8       2     S = signature length, 1..SIGNATURE_SIG_MAX
 *     10      S     the signature: DER ECDSA-Sig-Value (SEQUENCE { r, s })
 *     10+S    2     N = certificate count, 1..SIGNATURE_CERTS_MAX
 *     then N times:
 *             2     L = certificate length, 1..SIGNATURE_CERT_MAX
 *             L     one DER X.509 certificate, exactly L bytes
 *
 * The first certificate is the signer (leaf); the others are intermediates
 * that may help build a chain to a trust anchor (any order; the trust
 * anchor itself is not needed). The whole block is at most
 * SIGNATURE_BLOCK_MAX bytes and must end exactly after the last certificate.
 *
 * VERIFICATION (signature_verify) checks, in this order, and stops at the
 * first failure with a message naming it:
 *   1. the block's structure (-EBADMSG), and that each certificate parses
 *      as DER X.509 with no trailing bytes (-EBADMSG);
 *   2. the trust anchors at @ca_path load (-ENOENT, -EACCES, -EFBIG, ...
 *      for the path and its files; -EBADMSG for a file that is not PEM/DER
 *      certificates; -ENOKEY for a directory holding no certificate; -E2BIG
 *      for one holding too many files);
 *   3. the chain verifies against them (mbedtls_x509_crt_verify_with_profile:
 *      signatures, CA basic constraints and key usage, path length; SHA-2
 *      only; EC P-256/P-384/P-521 or RSA >= 2048 for CA keys);
 *   3b. with signature_verify_trust(): no certificate of the chain is revoked
 *      by a CRL or the revocation list (-EKEYREVOKED), and no CRL that
 *      applies is past its nextUpdate at @now (see SignatureTrust);
 *   4. the validity dates of every certificate of the chain, trust anchor
 *      included, against the caller's @now (see CLOCK below; both ends are
 *      inclusive; when several are out of date, the one nearest the signer
 *      is reported);
 *   5. the signer's key is ECDSA P-256; its certificate has the keyUsage
 *      extension with digitalSignature; if it has an extendedKeyUsage
 *      extension, it lists codeSigning (or anyExtendedKeyUsage);
 *   6. the signature matches SHA-256(@data).
 * Every trust or signature failure in 3-6 returns -EKEYREJECTED (one code:
 * "the signer is not accepted"); the message says which check failed, e.g.
 * "signer certificate 'CN=ci-signer' expired on 2026-01-01 00:00:00 UTC
 * (now 2026-11-29 13:00:00 UTC)". Messages do not say where the block came
 * from: callers prefix that ("json.tpb: signature: ...").
 *
 * CLOCK. mbedTLS would compare certificate dates with the system clock;
 * here the caller passes @now instead (tests move it; a daemon passes
 * time(NULL)). A device whose clock is not set (no RTC, no network time
 * yet) must not lock itself out, so @now <= 0 (SIGNATURE_CLOCK_UNKNOWN)
 * means "clock unknown": the date checks are skipped, everything else is
 * checked, and the result says so (SignatureInfo.dates_checked = false) so
 * the caller can log it and re-check later. signature_clock() turns a raw
 * clock reading into that convention, given a floor below which the clock
 * cannot be right (e.g. the build date). Skipping dates is a deliberate
 * trade: an attacker able to set the clock before the floor can get an
 * expired (but otherwise trusted) certificate accepted.
 *
 * TRUST ANCHORS (@ca_path): a file of one or more PEM (or one DER)
 * certificates, or a directory whose regular files named *.pem or *.crt are
 * each read that way (other names are ignored; a file that fails to parse
 * is an error, not skipped). Files are read with O_CLOEXEC, each at most
 * SIGNATURE_CA_FILE_MAX bytes, at most SIGNATURE_CA_DIR_FILES_MAX files.
 *
 * Parsing is separate from cryptography: signature_block_parse() touches
 * no crypto and no files; signature_parse_info() only adds X.509 parsing of
 * the certificates. Both are meant for fuzzing (err may be NULL).
 *
 * Nothing here is thread-safe per object (a Signer holds a DRBG state);
 * distinct objects may be used from distinct threads.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "error.h"
#include "macro.h"

#define SIGNATURE_MAGIC "TPSIG1\0\0"
#define SIGNATURE_MAGIC_SIZE 8
#define SIGNATURE_BLOCK_MAX (64 * 1024)
#define SIGNATURE_SIG_MAX 1024          /* ECDSA P-256 needs <= 72; room for other schemes' parsing */
#define SIGNATURE_CERTS_MAX 8
#define SIGNATURE_CERT_MAX (16 * 1024)

/* Read limits for key, certificate and CA files. */
#define SIGNATURE_KEY_FILE_MAX (64 * 1024)
#define SIGNATURE_CERT_FILE_MAX (256 * 1024)
#define SIGNATURE_CA_FILE_MAX (1024 * 1024)
#define SIGNATURE_CA_DIR_FILES_MAX 1024

/* @now value meaning "the clock is not known to be right": date checks are skipped. */
#define SIGNATURE_CLOCK_UNKNOWN ((time_t) 0)

/* ---- the block, without cryptography --------------------------------------------------------- */

typedef struct SignatureCert {
        const uint8_t *der;
        size_t len;
} SignatureCert;

/* A parsed block. Pointers point into the buffer that was parsed (or that will be written). */
typedef struct SignatureBlock {
        const uint8_t *sig;
        size_t sig_len;
        size_t n_certs;
        SignatureCert certs[SIGNATURE_CERTS_MAX];     /* [0] is the signer */
} SignatureBlock;

/*
 * Split @block into its fields, checking every length and count against
 * the limits above and against @block_len (untrusted input: never reads
 * outside [block, block + block_len)). Does not look inside the DER.
 * Returns 0, or -EBADMSG with a message naming the field and offset.
 */
_warn_unused_result_ int signature_block_parse(const uint8_t *block, size_t block_len, SignatureBlock *ret,
                                               TpError *err);

/*
 * Serialise @b (same limits as the parser: what this writes, the parser
 * accepts). On success *ret_block is a malloc'd buffer the caller frees.
 * Returns 0, -E2BIG when a limit is exceeded, -EINVAL for an empty field,
 * -ENOMEM.
 */
_warn_unused_result_ int signature_block_write(const SignatureBlock *b, uint8_t **ret_block, size_t *ret_len,
                                               TpError *err);

/* ---- signing ------------------------------------------------------------------------------------ */

/*
 * In signer.c (signer_sign() too), and the signed files' writers in signed-write.c: a program
 * that only verifies, such as taskpatchd, links neither (nor the random generator, nor p11-kit).
 */

/* A private key (PEM, EC P-256) and its certificate chain (PEM: leaf first, then intermediates). */
typedef struct Signer Signer;

/*
 * Load and check a signer: the key must be an unencrypted EC P-256 private
 * key; @cert_path must hold 1..SIGNATURE_CERTS_MAX certificates, the first
 * one matching the key and acceptable as a signer (key usage
 * digitalSignature, EKU codeSigning when present: a certificate the device
 * would refuse is refused here, early). Dates are not checked (no clock:
 * see signer_check_dates()).
 * Returns 0; -ENOENT, -EACCES, -EISDIR, -EINVAL (not a regular file),
 * -EFBIG (over the file limits) for the files; -EBADMSG for contents that do not parse (including encrypted
 * keys); -EKEYREJECTED for a key or certificate that is not acceptable;
 * -E2BIG when the chain would not fit a block; -EIO if the RNG cannot be
 * seeded; -ENOMEM.
 */
_warn_unused_result_ int signer_load(const char *key_path, const char *cert_path, Signer **ret, TpError *err);
/*
 * A signer whose key stays in a PKCS#11 token (sign-pkcs11.h: the RFC 7512 URI, module-path,
 * the PIN), with its certificate chain from @cert_path as for signer_load(); the pair is
 * proven by a probe signature made in the token and verified with the certificate's key.
 * The key's errors are sign-pkcs11.h's; -EKEYREJECTED when the certificate is not the key's.
 */
_warn_unused_result_ int signer_load_pkcs11(const char *uri, const char *cert_path, Signer **ret, TpError *err);

/*
 * The signer (leaf) certificate's validity: its notBefore and notAfter,
 * seconds since the epoch, UTC, both inclusive (as signature_verify()
 * compares them). Cannot fail.
 */
void signer_validity(const Signer *s, time_t *ret_not_before, time_t *ret_not_after);

/*
 * What signer_load() cannot check without a clock: that the signer
 * certificate is valid at @now, so a bundle signed now is not refused by
 * every device. Returns 0, or -EKEYREJECTED with a message naming the
 * certificate, its notBefore and notAfter and @now, e.g. "signer
 * certificate 'CN=ci-signer' expired on 2040-01-01 00:00:00 UTC (valid
 * 2024-01-01 00:00:00 UTC to 2040-01-01 00:00:00 UTC; now 2041-...)".
 * @now <= 0 (SIGNATURE_CLOCK_UNKNOWN) checks nothing and returns 0.
 */
_warn_unused_result_ int signer_check_dates(const Signer *s, time_t now, TpError *err);

/*
 * Sign with @other too (taken; freed with @s): signer_sign() then writes a set of both
 * signatures (sigset.h), for a file that needs several signers. signer_check_dates() and the
 * like look at @s alone.
 */
void signer_add(Signer *s, Signer *other);
/* The signer added after @s, or NULL. */
Signer *signer_next(const Signer *s);
/* @s's own signature block over @data, whatever signers were added to it. */
_warn_unused_result_ int signer_sign_one(Signer *s, const void *data, size_t len, uint8_t **ret_block, size_t *ret_len,
                                         TpError *err);

/* Free @s (and the signers added to it), wiping the key and RNG state. NULL-safe; returns NULL. */
Signer *signer_free(Signer *s);
DEFINE_POINTER_CLEANUP(Signer, signer_free)

/*
 * A signature block over @data (@len bytes; @data may be NULL when @len is 0), or a set of them
 * when signers were added (signer_add(); the same key twice is -EEXIST): ECDSA P-256 / SHA-256
 * (deterministic ECDSA, RFC 6979, with the CTR-DRBG used for blinding)
 * plus the signer's certificate chain. On success *ret_block is malloc'd
 * and the caller frees it. Returns 0, -EIO (a signing failure, with
 * mbedTLS's reason), -ENOMEM.
 */
_warn_unused_result_ int signer_sign(Signer *s, const void *data, size_t len, uint8_t **ret_block, size_t *ret_len,
                                     TpError *err);

/* ---- verification ------------------------------------------------------------------------------- */

typedef struct SignatureInfo {
        char subject[256];      /* signer (leaf) subject DN, e.g. "CN=ci-signer" ("..." appended if cut) */
        char issuer[256];       /* the leaf's issuer DN */
        time_t not_before, not_after;   /* the leaf's validity (UTC) */
        bool dates_checked;     /* false when the clock was unknown (and always from signature_parse_info) */
        /* What a revocation list names: the SHA-256 of the leaf's SubjectPublicKeyInfo (DER), its serial (hex). */
        uint8_t key_sha256[32];
        char serial[41];
        /* A CRL of the chain is past its nextUpdate, and SignatureTrust.crl_expired_warn let it pass: which. */
        bool crl_expired;
        char crl_issuer[256];
        time_t crl_next_update;
        /* signature_verify_trust(): this process had verified the same signature by the same key over
         * the same data before, and its ECDSA verification was not done again (the chain was). */
        bool remembered;
        /* ... and the same chain had verified against the same trust anchors and revocation list, no
         * certificate's validity has begun or ended since, no CRL is in use: it was not verified
         * again (sign-memo.h). */
        bool remembered_chain;
} SignatureInfo;

typedef struct Revocations Revocations;        /* revoke.h */

/* What signature_verify_trust() verifies against. */
typedef struct SignatureTrust {
        const char *ca_path;            /* the trust anchors: a PEM file or a directory of them; with
                                         * @ca_pem, only their name in messages */
        const char *ca_pem;             /* the trust anchors as PEM text held in memory (a trust root's
                                         * role, trust-root.h), NUL-terminated; NULL: read @ca_path */
        time_t now;                     /* <= 0: SIGNATURE_CLOCK_UNKNOWN */
        /*
         * X.509 CRLs (a file of one or more PEM CRLs or one DER CRL, or a directory of *.pem and
         * *.crl files), NULL: none. A CRL applies to the certificates its issuer issued in the
         * chain; mbedTLS checks its signature and whether it lists them.
         */
        const char *crl_path;
        /* A CRL past its nextUpdate (at @now; never when the clock is unknown): refused, or only reported. */
        bool crl_expired_warn;
        const Revocations *revoked;     /* a verified revocation list (revoke.h), NULL: none */
        unsigned threshold;             /* distinct signers a signature set needs (sigset.h); 0 or 1: one */
} SignatureTrust;

/*
 * Verify @block over @data (@len bytes; NULL if 0) against the trust anchors at
 * @ca_path (a PEM file or a directory of them), at time @now (seconds
 * since the epoch, UTC; <= 0 = SIGNATURE_CLOCK_UNKNOWN). Checks and return
 * codes: see VERIFICATION above. On success fills @ret_info (may be NULL);
 * on failure leaves it untouched.
 */
_warn_unused_result_ int signature_verify(const uint8_t *block, size_t block_len, const void *data, size_t len,
                                          const char *ca_path, time_t now, SignatureInfo *ret_info, TpError *err);
/*
 * signature_verify() with the whole of @trust: also, after step 3, no certificate of the
 * chain is revoked by a CRL of trust->crl_path or listed by trust->revoked (-EKEYREVOKED,
 * naming the certificate and what revoked it), and no CRL that applies is out of date
 * (-EKEYREJECTED, or with crl_expired_warn reported in @ret_info). A CRL that does not
 * verify against its issuer is refused (-EKEYREJECTED); CRL files that do not load are
 * errors of their path (as for trust anchors).
 */
_warn_unused_result_ int signature_verify_trust(const uint8_t *block, size_t block_len, const void *data,
                                                size_t len, const SignatureTrust *trust, SignatureInfo *ret_info,
                                                TpError *err);

/*
 * Parse @block without verifying anything (for `inspect`): fills
 * @ret_info from the leaf certificate, dates_checked = false. Returns 0 or
 * -EBADMSG (-ENOMEM).
 */
_warn_unused_result_ int signature_parse_info(const uint8_t *block, size_t block_len, SignatureInfo *ret_info,
                                              TpError *err);

/*
 * The @now to pass to signature_verify() for a raw clock reading @clock:
 * @clock itself, or SIGNATURE_CLOCK_UNKNOWN when it is earlier than @floor
 * (a time the real clock is known to be past, e.g. the build date) or <= 0.
 */
time_t signature_clock(time_t clock, time_t floor);

/* signature_clock(clock_wall(), clock_floor()) (clock.h): the @now every date check on a device uses. */
time_t clock_for_dates(void);
