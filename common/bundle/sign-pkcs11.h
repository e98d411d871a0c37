/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * A signing key in a PKCS#11 token (a hardware security module, a smart card, SoftHSM2),
 * reached through p11-kit: the key is named by an RFC 7512 URI, and only its signatures
 * leave the token. Internal to common/bundle (signer.c's Signer holds one).
 *
 *   pkcs11:token=fleet;object=signer;type=private?module-path=/usr/lib/softhsm/libsofthsm2.so&pin-value=1234
 *
 * The URI's path attributes (token, manufacturer, serial, model, object, id) select the token
 * and the key; without module-path, the modules p11-kit is configured with are searched. The
 * PIN comes from the URI's pin-value or pin-source (a file), else from the environment
 * variable TASKPATCH_PKCS11_PIN; a token that needs no login needs none.
 */

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "macro.h"

typedef struct Pkcs11Key Pkcs11Key;

/*
 * Find exactly one private EC key the URI names, and log in. -EINVAL for a URI that does not
 * parse, -ENOENT when no token or key matches (-ENOTUNIQ when several keys do), -EACCES for a
 * refused PIN, -EIO for another PKCS#11 failure (its CKR_ named), -ENOMEM.
 */
_warn_unused_result_ int pkcs11_key_open(const char *uri, Pkcs11Key **ret, TpError *err);
/* ECDSA over the 32-byte @hash, in the token: a DER ECDSA-Sig-Value into @sig (at most @size bytes). */
_warn_unused_result_ int pkcs11_key_sign(Pkcs11Key *k, const uint8_t hash[32], uint8_t *sig, size_t size,
                                         size_t *ret_len, TpError *err);
Pkcs11Key *pkcs11_key_free(Pkcs11Key *k);
DEFINE_POINTER_CLEANUP(Pkcs11Key, pkcs11_key_free)
