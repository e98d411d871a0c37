/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * What sign.c and signer.c read from files: keys, certificates, trust anchors and CRLs, each file
 * a regular file read with O_CLOEXEC and capped; and mbedTLS's errors in words.
 * Internal to common/bundle (sign.c, signer.c, sign-files.c).
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <mbedtls/x509_crl.h>
#include <mbedtls/x509_crt.h>

#include "error.h"
#include "macro.h"

#define SIGNATURE_CRL_FILE_MAX (16u << 20)      /* a CRL file (a large CA's CRL runs to megabytes) */

typedef struct FileData {
        uint8_t *data;          /* NUL-terminated: data[len] == 0 */
        size_t len;
        size_t size;            /* allocated: size + 1 bytes */
        bool secret;            /* wipe before freeing */
} FileData;

/* Read a whole regular file of at most @max bytes, NUL-terminated (PEM parsers want that). */
_warn_unused_result_ int file_read(const char *path, size_t max, bool secret, FileData *ret, TpError *err);
void file_data_done(FileData *f);

/* Add every certificate of a PEM (or single DER) file to @chain; all must parse. */
_warn_unused_result_ int certs_load_file(mbedtls_x509_crt *chain, const char *path, size_t max, TpError *err);
/* Trust anchors from a file, or from the *.pem / *.crt regular files of a directory (sorted). */
_warn_unused_result_ int ca_load(mbedtls_x509_crt *ca, const char *ca_path, TpError *err);
/* Trust anchors from PEM text in memory (NUL-terminated); @name names them in errors. */
_warn_unused_result_ int ca_load_pem(mbedtls_x509_crt *ca, const char *pem, const char *name, TpError *err);
/* CRLs from a file (PEM, one or more, or one DER), or from the *.pem / *.crl regular files of a directory. */
_warn_unused_result_ int crl_load(mbedtls_x509_crl *crl, const char *crl_path, TpError *err);

/* "<what>: <mbedTLS's description>", returned as @code (or -ENOMEM for an allocation failure). */
_printf_(4, 5) int mbed_error(TpError *err, int code, int mret, const char *fmt, ...);
