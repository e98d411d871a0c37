/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The trust root (NAME.root): which CAs a fleet trusts for each role, and how many
 * signers each role needs, in one signed document a device takes from the channel or
 * `tpctl trust update`, so keys rotate without touching each device's files (in the
 * spirit of TUF's root metadata). A signed file (signed-file.h, magic "TPROOT\0\0"); its
 * text, format 1:
 *
 *   format: 1
 *   version: 2                      # raised by every root; a device never takes a lower one
 *   created: 2026-12-03T12:00:00Z
 *   expires: 2027-12-03T12:00:00Z   # a device does not take a root past this
 *   roles:
 *     root:                         # signs trust roots and revocation lists
 *       threshold: 1                # distinct signers needed, 1..SIGNATURE_SET_MAX
 *       ca: |                       # PEM certificates, each a CA, at most TRUST_ROOT_ROLE_CERTS
 *         -----BEGIN CERTIFICATE-----
 *         ...
 *     bundle: {threshold: 1, ca: ...}   # signs bundles
 *     channel: {threshold: 1, ca: ...}  # signs channels
 *
 * Version N+1 is taken only when its signatures meet the threshold of the root role the
 * device holds (version N's, else the configuration's trust.root_ca and trust.threshold)
 * AND the threshold of its own root role: the old keys vouch for the new ones, and the new
 * ones show they are held. Once taken, its roles replace trust.bundle_ca, trust.channel_ca,
 * trust.root_ca and their thresholds.
 *
 * Untrusted input: the text, each role's PEM and its certificate count are capped, and every
 * certificate must parse and be a CA.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "sign.h"

#define TRUST_ROOT_MAGIC "TPROOT\0"     /* 8 bytes with its NUL */
#define TRUST_ROOT_FORMAT 1
#define TRUST_ROOT_MAX_TEXT (256u << 10)
#define TRUST_ROOT_MAX_FILE (64 + TRUST_ROOT_MAX_TEXT + (64u << 10))    /* header, text, signature block */
#define TRUST_ROOT_ROLE_PEM_MAX (64u << 10)
#define TRUST_ROOT_ROLE_CERTS 16

typedef enum TrustRole {
        TRUST_ROLE_ROOT,                /* trust roots and revocation lists */
        TRUST_ROLE_BUNDLE,
        TRUST_ROLE_CHANNEL,
        TRUST_ROLE_COUNT,
} TrustRole;

/* "root", "bundle", "channel" */
const char *trust_role_name(TrustRole role);

typedef struct TrustRootRole {
        char *ca_pem;                   /* NUL-terminated PEM certificates */
        unsigned threshold;             /* 1..SIGNATURE_SET_MAX */
        size_t n_certs;
        char name[64];                  /* "trust root v2's bundle role", for messages */
} TrustRootRole;

typedef struct TrustRoot {
        uint64_t version;
        int64_t created, expires;
        TrustRootRole roles[TRUST_ROLE_COUNT];
        /* The signed text and its signature, as parsed or written. */
        char *text;
        size_t text_len;
        uint8_t *signature;
        size_t signature_len;
} TrustRoot;

TrustRoot *trust_root_free(TrustRoot *t);
DEFINE_POINTER_CLEANUP(TrustRoot, trust_root_free)

/* Parse a file held in memory (@what names it in errors); the signatures are not checked. */
_warn_unused_result_ int trust_root_parse(const uint8_t *data, size_t len, const char *what, TrustRoot **ret,
                                          TpError *err);
/* trust_root_parse() of the file at @path; -ENOENT when there is none. */
_warn_unused_result_ int trust_root_load(const char *path, TrustRoot **ret, TpError *err);

/*
 * The trust of @t's @role: @base (the clock, CRLs, revocation list) with the role's CAs and
 * threshold. Points into @t, which must outlive it.
 */
SignatureTrust trust_root_role(const TrustRoot *t, TrustRole role, const SignatureTrust *base);

/*
 * Whether @next may be taken by a device whose root role is @held (its CAs and threshold,
 * clock, CRLs and list): its signatures meet @held's threshold and its own root role's, and
 * it has not expired at held->now (unknown clock: not checked). -EKEYREJECTED (or the
 * signature errors) naming which role fell short, -EKEYEXPIRED for an expired root. The
 * version is the caller's to compare. *@ret_signers (SIGNATURE_SIGNERS_MAX bytes, may be
 * NULL): who signed, as @held counted them.
 */
_warn_unused_result_ int trust_root_verify(const TrustRoot *next, const char *what, const SignatureTrust *held,
                                           char *ret_signers, TpError *err);

/*
 * Set @t's @role from PEM text (checked as the parser checks it: certificates, each a CA;
 * @what names the text in errors) and @threshold. -EBADMSG, -E2BIG, -EINVAL, -ENOMEM.
 */
_warn_unused_result_ int trust_root_set_role(TrustRoot *t, TrustRole role, const char *pem, size_t pem_len,
                                             unsigned threshold, const char *what, TpError *err);
/* Name @t's roles after its version ("trust root v2's bundle role"), as parsing and setting a role do. */
void trust_root_name_roles(TrustRoot *t);
/* @t's text (malloc'ed, not NUL-terminated); -EINVAL for a root that lacks a field, -EMSGSIZE over the cap. */
_warn_unused_result_ int trust_root_text(const TrustRoot *t, char **ret_text, size_t *ret_len, TpError *err);
/* The whole file, @t's text written and signed by @signer (t->text and t->signature set too). */
_warn_unused_result_ int trust_root_write(TrustRoot *t, Signer *signer, uint8_t **ret_data, size_t *ret_len,
                                          TpError *err);
/* The file of @text and @sig (malloc'ed): for `taskpatch sign`. -ENOMEM. */
_warn_unused_result_ int trust_root_pack(const char *text, size_t text_len, const uint8_t *sig, size_t sig_len,
                                         uint8_t **ret_data, size_t *ret_len);
