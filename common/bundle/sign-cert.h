/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * What sign.c (verifying) and signer.c (signing) share about certificates and keys. Internal to
 * common/bundle. Signing lives apart so that a program that only verifies (taskpatchd) links
 * neither the signer's random generator nor PKCS#11 (p11-kit).
 */

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include <mbedtls/pk.h>
#include <mbedtls/x509_crt.h>

#include "error.h"

#define DN_MAX 256
#define TIME_STR_MAX 32

/* A certificate's time as seconds since the epoch (mbedTLS has range-checked its fields). */
time_t x509_time_to_time(const mbedtls_x509_time *t);
/* "2026-12-05 14:30:00 UTC" (or "@SECONDS" when out of range) into @buf; returns @buf. */
const char *format_time(time_t t, char buf[static TIME_STR_MAX]);
/* A DN as text ("CN=ci-signer"), cut with "..." to @size; returns @buf. */
const char *dn_string(const mbedtls_x509_name *dn, char *buf, size_t size);
/* Whether @pk is an ECDSA (or EC) key on P-256. */
bool pk_is_p256(const mbedtls_pk_context *pk);
/* "EC secp384r1", "RSA-2048": @pk's kind in words, into @buf; returns @buf. */
const char *pk_describe(const mbedtls_pk_context *pk, char *buf, size_t size);
/*
 * Whether @leaf is acceptable as a signer: an end entity with an EC P-256 key, keyUsage
 * digitalSignature, and codeSigning (not anyExtendedKeyUsage) when it has extendedKeyUsage.
 * 0, or -EKEYREJECTED with the reason in @err.
 */
_warn_unused_result_ int signer_cert_check(const mbedtls_x509_crt *leaf, TpError *err);
