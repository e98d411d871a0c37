/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Several signatures over the same bytes (threshold signing): a bundle's, a channel's or a
 * revocation list's signature section holds either one signature block (sign.h: "TPSIG1",
 * what one signer writes and every daemon reads) or a set of them:
 *
 *     offset  size  field
 *     0       8     magic "TPSIGS1\0"
 *     8       2     N = blocks, 1..SIGNATURE_SET_MAX
 *     then N times:
 *             4     L = block length, 1..SIGNATURE_BLOCK_MAX
 *             L     one signature block (sign.h)
 *
 * all little-endian, ending exactly after the last block. Signers need not share a machine:
 * `taskpatch sign` adds a block to a file another signer made. A set verifies when at least
 * SignatureTrust.threshold distinct signers (distinct keys) each have a block that verifies on
 * its own (signature_verify_trust()); the same key twice counts once.
 */

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "sign.h"

#define SIGNATURE_SET_MAGIC "TPSIGS1"   /* 8 bytes with its NUL */
#define SIGNATURE_SET_MAX 8

typedef struct SignatureSet {
        size_t n;
        struct {
                const uint8_t *block;   /* into the parsed buffer */
                size_t len;
        } sigs[SIGNATURE_SET_MAX];
} SignatureSet;

/* Split a signature section (one block, or a set) without cryptography. -EBADMSG naming the field. */
_warn_unused_result_ int signature_set_parse(const uint8_t *data, size_t len, SignatureSet *ret, TpError *err);

/*
 * The section with @block added to @old (@old_len 0: none yet; then it is @block itself, a
 * section every daemon reads): malloc'ed into *@ret. -EEXIST when @old holds a block of the
 * same key already, -E2BIG past SIGNATURE_SET_MAX blocks or BUNDLE_MAX_SIGNATURE bytes,
 * -EBADMSG for an @old that does not parse, -ENOMEM.
 */
_warn_unused_result_ int signature_set_add(const uint8_t *old, size_t old_len, const uint8_t *block,
                                           size_t block_len, uint8_t **ret, size_t *ret_len, TpError *err);

/*
 * Verify the section over @data (see signature_verify_trust() for each block). 0 when
 * trust->threshold (0 counts as 1) distinct signers verify: *@ret_info is the first one's;
 * @ret_signers (SIGNATURE_SIGNERS_MAX bytes, may be NULL) names them all ("CN=a, CN=b").
 * With none valid, the first block's error (so one block fails as it always did); with too
 * few, -EKEYREJECTED saying how many verified, how many are needed, and the first failure.
 */
#define SIGNATURE_SIGNERS_MAX 256
_warn_unused_result_ int signature_set_verify(const uint8_t *section, size_t section_len, const void *data,
                                              size_t len, const SignatureTrust *trust, SignatureInfo *ret_info,
                                              char *ret_signers, TpError *err);
