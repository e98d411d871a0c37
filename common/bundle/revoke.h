/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The revocation list (NAME.revocations): the signers a fleet no longer trusts, signed by the
 * root role (trust.root_ca) and carried by the channel or given with `tpctl trust update`, so
 * a fleet revokes a key without touching each device's files. A signed file (signed-file.h,
 * magic "TPREVOK\0"); its text, format 1:
 *
 *   format: 1
 *   version: 3                      # raised by every list; a device never takes a lower one
 *   created: 2026-12-03T12:00:00Z
 *   revoked:                        # at most REVOCATIONS_MAX_ENTRIES; may be empty
 *   - {key_sha256: ..., subject: "CN=ci-signer", reason: key compromise}
 *   - {issuer: "CN=TaskPatch Test Intermediate CA", serial: 03e9}
 *
 * An entry names a key (the SHA-256 of a certificate's SubjectPublicKeyInfo, DER: every
 * certificate of that key, whoever issued it) or one certificate (its issuer's DN as mbedTLS
 * prints it, which `taskpatch inspect` shows, and its serial number in hex). `subject` and
 * `reason` are for people. A chain any certificate of which is listed is revoked
 * (signature_verify_trust() returns -EKEYREVOKED).
 *
 * Untrusted input: the text, the entry count and each field are capped.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "error.h"
#include "sha256.h"
#include "sign.h"

#define REVOCATIONS_MAGIC "TPREVOK"     /* 8 bytes with its NUL */
#define REVOCATIONS_FORMAT 1
#define REVOCATIONS_MAX_TEXT (1u << 20)
#define REVOCATIONS_MAX_FILE (64 + REVOCATIONS_MAX_TEXT + (64u << 10))  /* header, text, signature block */
#define REVOCATIONS_MAX_ENTRIES 4096
#define REVOKED_SERIAL_MAX 20           /* RFC 5280: a serial number is at most 20 octets */
#define REVOKED_TEXT_MAX 128

typedef enum RevokedKind {
        REVOKED_KEY,                    /* key_sha256 */
        REVOKED_CERT,                   /* issuer and serial */
} RevokedKind;

typedef struct RevokedEntry {
        RevokedKind kind;
        uint8_t key_sha256[SHA256_DIGEST_SIZE];
        char issuer[256];
        uint8_t serial[REVOKED_SERIAL_MAX];     /* big-endian, without leading zero bytes */
        size_t serial_len;
        char subject[REVOKED_TEXT_MAX];         /* "" when not given */
        char reason[REVOKED_TEXT_MAX];
} RevokedEntry;

typedef struct Revocations {
        uint64_t version;
        int64_t created;
        RevokedEntry *entries;
        size_t n;
        /* The signed text and its signature, as parsed or written. */
        char *text;
        size_t text_len;
        uint8_t *signature;
        size_t signature_len;
} Revocations;

Revocations *revocations_free(Revocations *r);
DEFINE_POINTER_CLEANUP(Revocations, revocations_free)

/* Parse a file held in memory (@what names it in errors); the signature is not checked. */
_warn_unused_result_ int revocations_parse(const uint8_t *data, size_t len, const char *what, Revocations **ret,
                                           TpError *err);
/* revocations_parse() of the file at @path; -ENOENT when there is none. */
_warn_unused_result_ int revocations_load(const char *path, Revocations **ret, TpError *err);
/*
 * Check the signature against the root role's trust (@trust: its CA, CRLs and clock; a
 * revocation list in it applies to this one's signer too). *@ret_signer (256 bytes, may be
 * NULL): the signer's subject.
 */
_warn_unused_result_ int revocations_verify(const Revocations *r, const char *what, const SignatureTrust *trust,
                                            char *ret_signer, TpError *err);

/* The entry that revokes a certificate of this key, issuer and serial (leading zeros ignored), or NULL. */
const RevokedEntry *revocations_match(const Revocations *r, const uint8_t key_sha256[SHA256_DIGEST_SIZE],
                                      const char *issuer, const uint8_t *serial, size_t serial_len);

/*
 * Add an entry (its fields checked as the parser checks them): -EINVAL naming the field,
 * -EEXIST when the list has it already, -E2BIG over REVOCATIONS_MAX_ENTRIES, -ENOMEM.
 */
_warn_unused_result_ int revocations_add(Revocations *r, const RevokedEntry *e, TpError *err);
/* @r's text (malloc'ed, not NUL-terminated); -EINVAL for version 0, -EMSGSIZE over the cap. */
_warn_unused_result_ int revocations_text(const Revocations *r, char **ret_text, size_t *ret_len, TpError *err);
/* The file of @text and @sig (malloc'ed). -ENOMEM. */
_warn_unused_result_ int revocations_pack(const char *text, size_t text_len, const uint8_t *sig, size_t sig_len,
                                          uint8_t **ret_data, size_t *ret_len);
/* The whole file, @r's text written and signed by @signer (r->text and r->signature set too). */
_warn_unused_result_ int revocations_write(Revocations *r, Signer *signer, uint8_t **ret_data, size_t *ret_len,
                                           TpError *err);

/* "key 3f2a... ('CN=ci-signer')" or "certificate 03e9 of 'CN=...'" into @buf, for messages. */
const char *revoked_entry_describe(const RevokedEntry *e, char *buf, size_t size);
