/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The container of TaskPatch's signed documents other than bundles: the channel
 * (NAME.channel) and the revocation list (NAME.revocations). Each is a 64-byte header,
 * a YAML text (exactly the bytes the signature covers) and a signature block (sign.h):
 *
 *   offset 0   8 bytes            magic ("TPCHANL\0", "TPREVOK\0")
 *          8   u32 format         the text's format
 *         12   u32 flags          0
 *         16   u64 text_size      1..the kind's cap
 *         24   u64 signature_size 1..BUNDLE_MAX_SIGNATURE (these documents are always signed)
 *         32   32 bytes           0
 *   then the text, then the signature block; the file ends there. All little-endian.
 *
 * Untrusted input: every size is checked against the caps and the file's length.
 */

#include <stddef.h>
#include <stdint.h>

#include "bundle.h"
#include "error.h"

#define SIGNED_FILE_HEADER_SIZE 64

/* What one kind of document looks like, for the checks and their messages. */
typedef struct SignedFileKind {
        const char *magic;              /* 8 bytes, NUL included */
        const char *noun;               /* "channel", "revocation list" */
        uint32_t format_min, format_max;
        size_t max_text;
} SignedFileKind;

/* A split file: pointers into the parsed buffer. */
typedef struct SignedFile {
        uint32_t format;
        const uint8_t *text;
        size_t text_len;
        const uint8_t *signature;
        size_t signature_len;
} SignedFile;

/* The largest file of @k. */
static inline size_t signed_file_max(const SignedFileKind *k) {
        return SIGNED_FILE_HEADER_SIZE + k->max_text + BUNDLE_MAX_SIGNATURE;
}

/*
 * Check @data's header against @k and split it. @what names the file in errors
 * ("stable.channel: not a TaskPatch channel (bad magic)"). -EBADMSG for a malformed
 * header, -EPROTONOSUPPORT for an unknown format, -EKEYREJECTED for an unsigned file.
 */
_warn_unused_result_ int signed_file_split(const SignedFileKind *k, const uint8_t *data, size_t len,
                                           const char *what, SignedFile *ret, TpError *err);
/* Copies of @f's text and signature (malloc'ed, into *@ret_text and *@ret_sig). -ENOMEM, nothing kept. */
_warn_unused_result_ int signed_file_copy(const SignedFile *f, char **ret_text, uint8_t **ret_sig);
/* The file of @text and @sig (malloc'ed into *@ret_data). -ENOMEM. */
_warn_unused_result_ int signed_file_pack(const SignedFileKind *k, uint32_t format, const char *text,
                                          size_t text_len, const uint8_t *sig, size_t sig_len, uint8_t **ret_data,
                                          size_t *ret_len);
/*
 * Read the file at @path, at most signed_file_max(@k) bytes (malloc'ed into *@ret_data).
 * -ENOENT and the like for the path, -EFBIG for a larger file.
 */
_warn_unused_result_ int signed_file_read(const SignedFileKind *k, const char *path, uint8_t **ret_data,
                                          size_t *ret_len, TpError *err);
