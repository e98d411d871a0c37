/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Encrypted bundles: the payload's frames are sealed with AES-256-GCM under a random content
 * key, and that key is wrapped for each recipient (a device's or a fleet's EC P-256 key)
 * with ECDH and HKDF, all through mbedTLS. The manifest, which the signature covers, carries
 * the wrapped keys; its hashes stay over the plaintext (each span's new and base bytes, the
 * target), except payload.sha256, which is over the payload as stored (the sealed frames), so
 * a bundle's integrity is checked without its key. See packaging/docs/bundle-format.md.
 *
 * THE WIRE FORMAT (must never change; a new scheme gets a new cipher name):
 *
 *   cipher "aes-256-gcm", key_wrap "ecdh-p256-hkdf-sha256":
 *   - per recipient: an ephemeral P-256 key pair (e, E); Z = the x-coordinate of e·R, where
 *     R is the recipient's public key; KEK = HKDF-SHA256(salt = E || R, ikm = Z,
 *     info = "taskpatch bundle key v1", 32 bytes), E and R as uncompressed points (65 bytes
 *     each); wrapped_key = AES-256-GCM(KEK, nonce = 12 zero bytes, aad = the recipient's key
 *     id, the 32-byte content key) || its 16-byte tag. A KEK serves one wrap: the zero nonce
 *     is never reused under it.
 *   - the recipient's key id: SHA-256 of its SubjectPublicKeyInfo (DER), as `openssl pkey
 *     -pubin -outform DER | sha256sum` prints it and as a revocation list names keys.
 *   - a span's frame: AES-256-GCM(content key, nonce = "TPF1" || le64(span index), no aad,
 *     the zstd frame) || its 16-byte tag; frame_size counts both. The content key is fresh
 *     for every bundle, so a nonce is never reused under it.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "macro.h"
#include "sha256.h"
#include "yaml-doc.h"
#include "yaml-write.h"

#define ENCRYPTION_CIPHER "aes-256-gcm"
#define ENCRYPTION_KEY_WRAP "ecdh-p256-hkdf-sha256"
#define ENCRYPTION_KEY_SIZE 32
#define ENCRYPTION_TAG_SIZE 16
#define ENCRYPTION_POINT_SIZE 65                /* an uncompressed P-256 point */
#define ENCRYPTION_WRAPPED_SIZE (ENCRYPTION_KEY_SIZE + ENCRYPTION_TAG_SIZE)
#define ENCRYPTION_MAX_RECIPIENTS 4096
#define ENCRYPTION_NAME_MAX 256                 /* a recipient's label (its certificate's subject) */
#define ENCRYPTION_KEY_FILE_MAX (64u << 10)

typedef struct Recipient {
        uint8_t key_sha256[SHA256_DIGEST_SIZE]; /* the key id */
        char *name;                             /* its certificate's subject; NULL for a bare public key */
        uint8_t ephemeral[ENCRYPTION_POINT_SIZE];
        uint8_t wrapped_key[ENCRYPTION_WRAPPED_SIZE];
} Recipient;

/* The manifest's "encryption" section: the recipients, in the order the producer named them. */
typedef struct Encryption {
        Recipient *recipients;
        size_t n_recipients;
} Encryption;

Encryption *encryption_free(Encryption *e);
DEFINE_POINTER_CLEANUP(Encryption, encryption_free)

/*
 * The section as the manifest parser sees it (@n: the "encryption" mapping): the cipher and key
 * wrap must be ENCRYPTION_CIPHER and ENCRYPTION_KEY_WRAP, 1..ENCRYPTION_MAX_RECIPIENTS recipients, each key id once, every field
 * present and of its exact size. Errors name the line ("manifest: line 40: encryption: ...").
 */
_warn_unused_result_ int encryption_parse(const YamlNode *n, Encryption **ret, TpError *err);
void encryption_write(YamlWriter *w, const Encryption *e);

/* ---- the producer ----------------------------------------------------------------------------- */

/* A public key to encrypt to: an EC P-256 key, from a certificate (PEM or DER) or a PEM public key. */
typedef struct RecipientKey RecipientKey;
_warn_unused_result_ int recipient_key_load(const char *path, RecipientKey **ret, TpError *err);
RecipientKey *recipient_key_free(RecipientKey *k);
DEFINE_POINTER_CLEANUP(RecipientKey, recipient_key_free)

/*
 * A fresh content key, wrapped for each of @keys (-EINVAL for none, or the same key twice,
 * naming the files). @ret_content_key is the key the frames are sealed with: the caller wipes it.
 */
_warn_unused_result_ int encryption_new(RecipientKey *const *keys, size_t n_keys, uint8_t ret_content_key[ENCRYPTION_KEY_SIZE],
                                        Encryption **ret, TpError *err);

/* ---- the device ------------------------------------------------------------------------------- */

/* A private key that opens bundles: EC P-256, PEM or DER, unencrypted. */
typedef struct DecryptKey DecryptKey;
_warn_unused_result_ int decrypt_key_load(const char *path, DecryptKey **ret, TpError *err);
DecryptKey *decrypt_key_free(DecryptKey *k);
DEFINE_POINTER_CLEANUP(DecryptKey, decrypt_key_free)
/* Its key id (SHA-256 of the public key's SubjectPublicKeyInfo). */
const uint8_t *decrypt_key_id(const DecryptKey *k);

/*
 * The content key of @e for @k: -ENOKEY when no recipient is @k ("encrypted for 2 other keys
 * (CN=device-7 e3b0c442..., ...); this device's key is 5f2a...: not for this device"),
 * -EBADMSG when its wrapped key does not open (tampered, or made for another key).
 */
_warn_unused_result_ int encryption_unwrap(const Encryption *e, const DecryptKey *k,
                                           uint8_t ret_content_key[ENCRYPTION_KEY_SIZE], TpError *err);

/* ---- frames ----------------------------------------------------------------------------------- */

/*
 * AES-256-GCM over one frame at a time, in pieces:
 *
 *   frame_cipher_start(c, span_index, encrypt);
 *   frame_cipher_update(c, in, out, n);   -- any number; n a multiple of 16 but for the last
 *   frame_cipher_tag(c, tag) or frame_cipher_check(c, tag)
 *
 * @out may be @in (in place) or apart from it. Nothing here fails once the key is set, except a
 * tag that does not match (-EBADMSG).
 */
typedef struct FrameCipher FrameCipher;
_warn_unused_result_ int frame_cipher_new(const uint8_t key[ENCRYPTION_KEY_SIZE], FrameCipher **ret);
FrameCipher *frame_cipher_free(FrameCipher *c);
DEFINE_POINTER_CLEANUP(FrameCipher, frame_cipher_free)
void frame_cipher_start(FrameCipher *c, uint64_t index, bool encrypt);
void frame_cipher_update(FrameCipher *c, const uint8_t *in, uint8_t *out, size_t n);
void frame_cipher_tag(FrameCipher *c, uint8_t ret_tag[ENCRYPTION_TAG_SIZE]);
_warn_unused_result_ int frame_cipher_check(FrameCipher *c, const uint8_t tag[ENCRYPTION_TAG_SIZE]);

/* Overwrite @n bytes of secret (a content key) so that the compiler keeps the writes. */
void encryption_wipe(void *p, size_t n);
