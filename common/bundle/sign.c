/* SPDX-License-Identifier: MIT */

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <mbedtls/asn1.h>
#include <mbedtls/ecp.h>
#include <mbedtls/error.h>
#include <mbedtls/oid.h>
#include <mbedtls/pem.h>
#include <mbedtls/pk.h>
#include <mbedtls/platform_util.h>
#include <mbedtls/x509_crt.h>

#include "clock.h"
#include "le.h"
#include "sha256.h"
#include "sign-cert.h"
#include "sign-files.h"
#include "sign-memo.h"
#include "revoke.h"
#include "sign.h"

/* Keys of CA certificates may be any of these; the signer's own key must be EC P-256. */
static const mbedtls_x509_crt_profile verify_profile = {
        .allowed_mds = MBEDTLS_X509_ID_FLAG(MBEDTLS_MD_SHA256) | MBEDTLS_X509_ID_FLAG(MBEDTLS_MD_SHA384) |
                       MBEDTLS_X509_ID_FLAG(MBEDTLS_MD_SHA512),
        .allowed_pks = MBEDTLS_X509_ID_FLAG(MBEDTLS_PK_ECKEY) | MBEDTLS_X509_ID_FLAG(MBEDTLS_PK_ECDSA) |
                       MBEDTLS_X509_ID_FLAG(MBEDTLS_PK_RSA),
        .allowed_curves = MBEDTLS_X509_ID_FLAG(MBEDTLS_ECP_DP_SECP256R1) |
                          MBEDTLS_X509_ID_FLAG(MBEDTLS_ECP_DP_SECP384R1) |
                          MBEDTLS_X509_ID_FLAG(MBEDTLS_ECP_DP_SECP521R1),
        .rsa_min_bitlen = 2048,
};

/* ---- mbedTLS errors, translated here and nowhere else ------------------------------------------- */

/* mbedTLS's verify flags as one line: "the certificate is not correctly signed by the trusted CA; ..." */
static void verify_flags_string(uint32_t flags, char *buf, size_t size) {
        char raw[512], *save = NULL;
        size_t n = 0;

        if (mbedtls_x509_crt_verify_info(raw, sizeof(raw), "", flags) <= 0) {
                snprintf(buf, size, "verification flags 0x%" PRIx32, flags);
                return;
        }
        buf[0] = '\0';
        for (char *line = strtok_r(raw, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                /* "The certificate ..." reads better mid-sentence in lower case; "CRL ..." stays. */
                if (isupper((unsigned char) line[0]) && islower((unsigned char) line[1]))
                        line[0] = (char) tolower((unsigned char) line[0]);
                int w = snprintf(buf + n, size - n, "%s%s", n ? "; " : "", line);
                if (w < 0 || (size_t) w >= size - n)
                        break;
                n += (size_t) w;
        }
}

/* ---- small helpers ------------------------------------------------------------------------------- */

/* Days since 1970-01-01 of a proleptic Gregorian date (no time zone, no libc state). */
static int64_t days_from_civil(int64_t y, int m, int d) {
        y -= m <= 2;
        int64_t era = (y >= 0 ? y : y - 399) / 400;
        int64_t yoe = y - era * 400;
        int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
        int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        return era * 146097 + doe - 719468;
}

/* mbedTLS has already range-checked every field when parsing the certificate. */
time_t x509_time_to_time(const mbedtls_x509_time *t) {
        return (time_t) (days_from_civil(t->year, t->mon, t->day) * 86400 + t->hour * 3600 + t->min * 60 +
                         t->sec);
}

const char *format_time(time_t t, char buf[static TIME_STR_MAX]) {
        struct tm tm;

        if (!gmtime_r(&t, &tm) || strftime(buf, TIME_STR_MAX, "%Y-%m-%d %H:%M:%S UTC", &tm) == 0)
                snprintf(buf, TIME_STR_MAX, "@%" PRIdMAX, (intmax_t) t);
        return buf;
}

/* A DN as text ("CN=ci-signer"); mbedTLS replaces non-printable bytes by '?'. Cut with "...". */
const char *dn_string(const mbedtls_x509_name *dn, char *buf, size_t size) {
        if (mbedtls_x509_dn_gets(buf, size, dn) < 0) {
                size_t n = strnlen(buf, size - 1);
                buf[n] = '\0';
                if (size >= 4 && n >= size - 4)
                        memcpy(buf + size - 4, "...", 4);
        }
        return buf;
}

bool pk_is_p256(const mbedtls_pk_context *pk) {
        mbedtls_pk_type_t t = mbedtls_pk_get_type(pk);

        return (t == MBEDTLS_PK_ECKEY || t == MBEDTLS_PK_ECDSA) &&
               mbedtls_pk_ec(*pk)->grp.id == MBEDTLS_ECP_DP_SECP256R1;
}

/* "EC secp384r1", "RSA-2048" */
const char *pk_describe(const mbedtls_pk_context *pk, char *buf, size_t size) {
        mbedtls_pk_type_t t = mbedtls_pk_get_type(pk);

        if (t == MBEDTLS_PK_ECKEY || t == MBEDTLS_PK_ECKEY_DH || t == MBEDTLS_PK_ECDSA) {
                const mbedtls_ecp_curve_info *ci = mbedtls_ecp_curve_info_from_grp_id(mbedtls_pk_ec(*pk)->grp.id);
                snprintf(buf, size, "%s %s", mbedtls_pk_get_name(pk), ci ? ci->name : "(unknown curve)");
        } else
                snprintf(buf, size, "%s-%zu", mbedtls_pk_get_name(pk), mbedtls_pk_get_bitlen(pk));
        return buf;
}

/* Whether @crt's extendedKeyUsage lists @oid itself (mbedTLS's own check also takes anyExtendedKeyUsage). */
static bool eku_lists(const mbedtls_x509_crt *crt, const char *oid, size_t oid_len) {
        for (const mbedtls_x509_sequence *s = &crt->ext_key_usage; s && s->buf.p; s = s->next)
                if (s->buf.len == oid_len && memcmp(s->buf.p, oid, oid_len) == 0)
                        return true;
        return false;
}

/*
 * What makes a certificate acceptable as a signer, with or without a chain:
 * an end entity (not CA:TRUE), an EC P-256 key, the keyUsage extension with
 * digitalSignature, and, when an extendedKeyUsage extension is present,
 * codeSigning named in it and not anyExtendedKeyUsage (which would let a
 * certificate meant for anything sign bundles).
 */
int signer_cert_check(const mbedtls_x509_crt *leaf, TpError *err) {
        char subject[DN_MAX], desc[64];

        dn_string(&leaf->subject, subject, sizeof(subject));
        if (!pk_is_p256(&leaf->pk))
                return tp_error(err, -EKEYREJECTED, "signer certificate '%s': key is not an ECDSA P-256 key (%s)",
                                subject, pk_describe(&leaf->pk, desc, sizeof(desc)));
        if (!(leaf->ext_types & MBEDTLS_X509_EXT_KEY_USAGE))
                return tp_error(err, -EKEYREJECTED,
                                "signer certificate '%s' has no key usage extension (digitalSignature required)",
                                subject);
        if (mbedtls_x509_crt_check_key_usage(leaf, MBEDTLS_X509_KU_DIGITAL_SIGNATURE) != 0)
                return tp_error(err, -EKEYREJECTED, "signer certificate '%s' lacks key usage digitalSignature",
                                subject);
        /* After the key usage: a certificate made "the usual way" hears first that it lacks that. */
        if (leaf->ca_istrue)
                return tp_error(err, -EKEYREJECTED, "signer certificate '%s' is a CA certificate (basicConstraints "
                                "CA:TRUE): a signer must be an end-entity certificate", subject);
        if (!(leaf->ext_types & MBEDTLS_X509_EXT_EXTENDED_KEY_USAGE))
                return 0;
        if (eku_lists(leaf, MBEDTLS_OID_ANY_EXTENDED_KEY_USAGE, MBEDTLS_OID_SIZE(MBEDTLS_OID_ANY_EXTENDED_KEY_USAGE)))
                return tp_error(err, -EKEYREJECTED, "signer certificate '%s': extended key usage "
                                "anyExtendedKeyUsage is not accepted (codeSigning, named alone)", subject);
        if (!eku_lists(leaf, MBEDTLS_OID_CODE_SIGNING, MBEDTLS_OID_SIZE(MBEDTLS_OID_CODE_SIGNING)))
                return tp_error(err, -EKEYREJECTED,
                                "signer certificate '%s': extended key usage present without codeSigning", subject);
        return 0;
}

/* ---- the block ----------------------------------------------------------------------------------- */

/* Read a u16 at *off; the caller names the field. */
static int take_u16(const uint8_t *block, size_t len, size_t *off, const char *field, uint16_t *ret, TpError *err) {
        if (len - *off < 2)
                return tp_error(err, -EBADMSG, "signature block truncated: %s at offset %zu needs 2 bytes, %zu left",
                                field, *off, len - *off);
        *ret = get_le16(block + *off);
        *off += 2;
        return 0;
}

static int take_bytes(size_t len, size_t *off, size_t n, const char *field, TpError *err) {
        if (len - *off < n)
                return tp_error(err, -EBADMSG, "signature block truncated: %s at offset %zu is %zu bytes, only %zu left",
                                field, *off, n, len - *off);
        *off += n;
        return 0;
}

int signature_block_parse(const uint8_t *block, size_t block_len, SignatureBlock *ret, TpError *err) {
        SignatureBlock b = {};
        size_t off = 0;
        uint16_t v = 0;
        int r;

        if (block_len > SIGNATURE_BLOCK_MAX)
                return tp_error(err, -EBADMSG, "signature block is %zu bytes, more than the limit of %d", block_len,
                                SIGNATURE_BLOCK_MAX);
        if (block_len < SIGNATURE_MAGIC_SIZE)
                return tp_error(err, -EBADMSG, "signature block truncated: %zu bytes, shorter than its magic",
                                block_len);
        if (memcmp(block, SIGNATURE_MAGIC, SIGNATURE_MAGIC_SIZE) != 0)
                return tp_error(err, -EBADMSG, "signature block: bad magic (not a TaskPatch signature block)");
        off = SIGNATURE_MAGIC_SIZE;

        r = take_u16(block, block_len, &off, "signature length", &v, err);
        if (r < 0)
                return r;
        if (v == 0 || v > SIGNATURE_SIG_MAX)
                return tp_error(err, -EBADMSG, "signature block: signature length %u at offset %zu, expected 1..%d",
                                v, off - 2, SIGNATURE_SIG_MAX);
        b.sig = block + off;
        b.sig_len = v;
        r = take_bytes(block_len, &off, v, "the signature", err);
        if (r < 0)
                return r;

        r = take_u16(block, block_len, &off, "certificate count", &v, err);
        if (r < 0)
                return r;
        if (v == 0 || v > SIGNATURE_CERTS_MAX)
                return tp_error(err, -EBADMSG, "signature block: certificate count %u at offset %zu, expected 1..%d",
                                v, off - 2, SIGNATURE_CERTS_MAX);
        b.n_certs = v;

        for (size_t i = 0; i < b.n_certs; i++) {
                r = take_u16(block, block_len, &off, "certificate length", &v, err);
                if (r < 0)
                        return r;
                if (v == 0 || v > SIGNATURE_CERT_MAX)
                        return tp_error(err, -EBADMSG,
                                        "signature block: certificate %zu of %zu: length %u at offset %zu, expected 1..%d",
                                        i + 1, b.n_certs, v, off - 2, SIGNATURE_CERT_MAX);
                b.certs[i].der = block + off;
                b.certs[i].len = v;
                char field[64];
                snprintf(field, sizeof(field), "certificate %zu of %zu", i + 1, b.n_certs);
                r = take_bytes(block_len, &off, v, field, err);
                if (r < 0)
                        return r;
        }
        if (off != block_len)
                return tp_error(err, -EBADMSG, "signature block: %zu trailing bytes after the last certificate (offset %zu)",
                                block_len - off, off);
        *ret = b;
        return 0;
}

int signature_block_write(const SignatureBlock *b, uint8_t **ret_block, size_t *ret_len, TpError *err) {
        size_t total = SIGNATURE_MAGIC_SIZE + 2 + b->sig_len + 2, off = 0;
        uint8_t *p;

        if (b->sig_len == 0 || !b->sig || b->n_certs == 0)
                return tp_error(err, -EINVAL, "signature block: empty signature or no certificate");
        if (b->sig_len > SIGNATURE_SIG_MAX)
                return tp_error(err, -E2BIG, "signature block: signature of %zu bytes, more than the limit of %d",
                                b->sig_len, SIGNATURE_SIG_MAX);
        if (b->n_certs > SIGNATURE_CERTS_MAX)
                return tp_error(err, -E2BIG, "signature block: %zu certificates, more than the limit of %d",
                                b->n_certs, SIGNATURE_CERTS_MAX);
        for (size_t i = 0; i < b->n_certs; i++) {
                if (b->certs[i].len == 0 || !b->certs[i].der)
                        return tp_error(err, -EINVAL, "signature block: certificate %zu is empty", i + 1);
                if (b->certs[i].len > SIGNATURE_CERT_MAX)
                        return tp_error(err, -E2BIG,
                                        "signature block: certificate %zu is %zu bytes, more than the limit of %d",
                                        i + 1, b->certs[i].len, SIGNATURE_CERT_MAX);
                total += 2 + b->certs[i].len;
        }
        if (total > SIGNATURE_BLOCK_MAX)
                return tp_error(err, -E2BIG, "signature block would be %zu bytes, more than the limit of %d", total,
                                SIGNATURE_BLOCK_MAX);

        p = malloc(total);
        if (!p)
                return -ENOMEM;
        memcpy(p, SIGNATURE_MAGIC, SIGNATURE_MAGIC_SIZE);
        off = SIGNATURE_MAGIC_SIZE;
        put_le16(p + off, (uint16_t) b->sig_len);        /* all three checked against the limits above */
        memcpy(p + off + 2, b->sig, b->sig_len);
        off += 2 + b->sig_len;
        put_le16(p + off, (uint16_t) b->n_certs);
        off += 2;
        for (size_t i = 0; i < b->n_certs; i++) {
                put_le16(p + off, (uint16_t) b->certs[i].len);
                memcpy(p + off + 2, b->certs[i].der, b->certs[i].len);
                off += 2 + b->certs[i].len;
        }
        *ret_block = p;
        *ret_len = total;
        return 0;
}

/* The block's certificates as an mbedTLS chain (leaf first). Each must be exactly one DER certificate. */
static int chain_parse(const SignatureBlock *b, mbedtls_x509_crt *chain, TpError *err) {
        const mbedtls_x509_crt *last = NULL;

        for (size_t i = 0; i < b->n_certs; i++) {
                int r = mbedtls_x509_crt_parse_der(chain, b->certs[i].der, b->certs[i].len);
                if (r != 0)
                        return mbed_error(err, -EBADMSG, r, "signature block: certificate %zu of %zu", i + 1,
                                          b->n_certs);
                for (last = last ? last : chain; last->next; last = last->next)
                        ;
                /* mbedTLS ignores bytes after the outer SEQUENCE; the format does not allow any. */
                if (last->raw.len != b->certs[i].len)
                        return tp_error(err, -EBADMSG,
                                        "signature block: certificate %zu of %zu: %zu trailing bytes after its DER encoding",
                                        i + 1, b->n_certs, b->certs[i].len - last->raw.len);
        }
        return 0;
}

static void info_fill(const mbedtls_x509_crt *leaf, bool dates_checked, SignatureInfo *ret) {
        SignatureInfo info = { .dates_checked = dates_checked };

        dn_string(&leaf->subject, info.subject, sizeof(info.subject));
        dn_string(&leaf->issuer, info.issuer, sizeof(info.issuer));
        info.not_before = x509_time_to_time(&leaf->valid_from);
        info.not_after = x509_time_to_time(&leaf->valid_to);
        sha256_digest(leaf->pk_raw.p, leaf->pk_raw.len, info.key_sha256);
        for (size_t i = 0, n = 0; i < leaf->serial.len && n + 3 <= sizeof(info.serial); i++) {
                /* The DER INTEGER's leading zero byte (a positive number's sign) is not part of the number. */
                if (n == 0 && leaf->serial.p[i] == 0 && i + 1 < leaf->serial.len)
                        continue;
                n += (size_t) snprintf(info.serial + n, sizeof(info.serial) - n, "%02x", leaf->serial.p[i]);
        }
        *ret = info;
}

int signature_parse_info(const uint8_t *block, size_t block_len, SignatureInfo *ret_info, TpError *err) {
        _cleanup_(mbedtls_x509_crt_free) mbedtls_x509_crt chain;
        SignatureBlock b;
        int r;

        mbedtls_x509_crt_init(&chain);
        r = signature_block_parse(block, block_len, &b, err);
        if (r < 0)
                return r;
        r = chain_parse(&b, &chain, err);
        if (r < 0)
                return r;
        info_fill(&chain, false, ret_info);
        return 0;
}

/* ---- verification -------------------------------------------------------------------------------- */

typedef struct VerifyState VerifyState;
struct VerifyState {
        const SignatureTrust *trust;
        const mbedtls_x509_crl *crl;    /* the loaded CRLs, NULL when none */
        int top_depth;                  /* depth of the chain's top (the trust anchor), -1 before the first call */
        uint32_t bad_flags;             /* flags of the topmost certificate that has any (dates and CRLs excluded) */
        char bad_subject[DN_MAX];
        int date_depth;                 /* depth of the lowest certificate out of its validity, -1 if none */
        bool date_future;               /* not yet valid (else expired) */
        time_t date_limit;              /* the date it is out of */
        char date_subject[DN_MAX];
        char revoked_subject[DN_MAX];   /* a certificate a CRL revokes ("" if none) */
        char revoked_issuer[DN_MAX];
        const RevokedEntry *listed;     /* ... or the revocation list names */
        char listed_subject[DN_MAX];
        const mbedtls_x509_crl *stale;  /* a CRL of the chain past its nextUpdate, NULL if none */
};

static void check_dates(VerifyState *v, const mbedtls_x509_crt *crt, int depth) {
        time_t now = v->trust->now;

        if (now <= 0 || (v->date_depth >= 0 && depth >= v->date_depth))
                return;
        time_t from = x509_time_to_time(&crt->valid_from), to = x509_time_to_time(&crt->valid_to);
        if (now < from || now > to) {
                v->date_depth = depth;
                v->date_future = now < from;
                v->date_limit = v->date_future ? from : to;
                dn_string(&crt->subject, v->date_subject, sizeof(v->date_subject));
        }
}

/* Whether @crt is listed by the revocation list: by its key, or by its issuer and serial. */
static void check_listed(VerifyState *v, const mbedtls_x509_crt *crt) {
        uint8_t key[SHA256_DIGEST_SIZE];
        char issuer[DN_MAX];

        if (!v->trust->revoked || v->listed)
                return;
        sha256_digest(crt->pk_raw.p, crt->pk_raw.len, key);
        dn_string(&crt->issuer, issuer, sizeof(issuer));
        v->listed = revocations_match(v->trust->revoked, key, issuer, crt->serial.p, crt->serial.len);
        if (v->listed)
                dn_string(&crt->subject, v->listed_subject, sizeof(v->listed_subject));
}

/* A CRL from @crt's issuer that is out of date at the caller's clock (mbedTLS's own verdict used the system's). */
static void check_crl_dates(VerifyState *v, const mbedtls_x509_crt *crt) {
        time_t now = v->trust->now;

        for (const mbedtls_x509_crl *c = v->crl; now > 0 && !v->stale && c && c->version; c = c->next)
                if (c->issuer_raw.len == crt->issuer_raw.len &&
                    memcmp(c->issuer_raw.p, crt->issuer_raw.p, c->issuer_raw.len) == 0 && c->next_update.year != 0 &&
                    now > x509_time_to_time(&c->next_update))
                        v->stale = c;
}

/*
 * Called by mbedTLS for every certificate of the chain it built, from the
 * trust anchor (highest depth) down to the signer (depth 0). mbedTLS has
 * compared the dates of certificates and CRLs with the system clock: drop
 * that verdict and compare with the caller's clock instead.
 */
static int verify_cb(void *userdata, mbedtls_x509_crt *crt, int depth, uint32_t *flags) {
        VerifyState *v = userdata;

        if (v->top_depth < 0)
                v->top_depth = depth;
        *flags &= ~(uint32_t) (MBEDTLS_X509_BADCERT_EXPIRED | MBEDTLS_X509_BADCERT_FUTURE |
                               MBEDTLS_X509_BADCRL_EXPIRED | MBEDTLS_X509_BADCRL_FUTURE);
        if ((*flags & MBEDTLS_X509_BADCERT_REVOKED) && !v->revoked_subject[0]) {
                dn_string(&crt->subject, v->revoked_subject, sizeof(v->revoked_subject));
                dn_string(&crt->issuer, v->revoked_issuer, sizeof(v->revoked_issuer));
        }
        *flags &= ~(uint32_t) MBEDTLS_X509_BADCERT_REVOKED;
        if (*flags != 0 && v->bad_flags == 0) {
                v->bad_flags = *flags;
                dn_string(&crt->subject, v->bad_subject, sizeof(v->bad_subject));
        }
        check_dates(v, crt, depth);
        check_listed(v, crt);
        if (depth < v->top_depth)
                check_crl_dates(v, crt);
        return 0;
}

/*
 * Why a presented chain cannot be built, when mbedTLS says only "not correctly signed by the
 * trusted CA": the first certificate of @chain that issued the one before it (by name) but
 * may not issue certificates (CA:FALSE, or a keyUsage without keyCertSign). Into @buf; false
 * when there is none.
 */
static bool diagnose_issuers(const mbedtls_x509_crt *chain, char *buf, size_t size) {
        char child[DN_MAX], parent[DN_MAX];

        for (const mbedtls_x509_crt *c = chain; c && c->next && c->next->raw.p; c = c->next) {
                const mbedtls_x509_crt *p = c->next;
                if (c->issuer_raw.len != p->subject_raw.len ||
                    memcmp(c->issuer_raw.p, p->subject_raw.p, p->subject_raw.len) != 0)
                        continue;
                dn_string(&c->subject, child, sizeof(child));
                dn_string(&p->subject, parent, sizeof(parent));
                if (!p->ca_istrue) {
                        snprintf(buf, size, "intermediate certificate '%s' is not a CA (basicConstraints CA:FALSE): "
                                 "it cannot issue '%s'", parent, child);
                        return true;
                }
                if ((p->ext_types & MBEDTLS_X509_EXT_KEY_USAGE) &&
                    mbedtls_x509_crt_check_key_usage(p, MBEDTLS_X509_KU_KEY_CERT_SIGN) != 0) {
                        snprintf(buf, size, "intermediate certificate '%s' lacks key usage keyCertSign: it cannot "
                                 "issue '%s'", parent, child);
                        return true;
                }
        }
        return false;
}

static int chain_refusal(const mbedtls_x509_crt *chain, const char *ca_path, uint32_t flags, const VerifyState *v,
                         TpError *err) {
        char why[2 * DN_MAX + 200];

        if ((flags & MBEDTLS_X509_BADCERT_NOT_TRUSTED) && diagnose_issuers(chain, why, sizeof(why)))
                return tp_error(err, -EKEYREJECTED, "certificate chain does not verify against %s: %s", ca_path, why);
        verify_flags_string(flags, why, sizeof(why));
        if (v->bad_subject[0])
                return tp_error(err, -EKEYREJECTED, "certificate chain does not verify against %s: %s (at certificate "
                                "'%s')", ca_path, why, v->bad_subject);
        return tp_error(err, -EKEYREJECTED, "certificate chain does not verify against %s: %s", ca_path, why);
}

/* What the CRLs and the revocation list say, once the chain is known to be trusted. */
static int revocation_refusal(const VerifyState *v, SignatureInfo *info, TpError *err) {
        char t1[TIME_STR_MAX], t2[TIME_STR_MAX], what[DN_MAX + 200];

        if (v->revoked_subject[0])
                return tp_error(err, -EKEYREVOKED, "certificate '%s' is revoked by the CRL of '%s'", v->revoked_subject,
                                v->revoked_issuer);
        if (v->listed)
                return tp_error(err, -EKEYREVOKED, "certificate '%s' is revoked by revocation list version %" PRIu64
                                " (%s%s%s)", v->listed_subject, v->trust->revoked->version,
                                revoked_entry_describe(v->listed, what, sizeof(what)), v->listed->reason[0] ? ": " : "",
                                v->listed->reason);
        if (!v->stale)
                return 0;
        time_t next = x509_time_to_time(&v->stale->next_update);
        if (!v->trust->crl_expired_warn)
                return tp_error(err, -EKEYREJECTED, "the CRL of '%s' is out of date: its next update was due %s "
                                "(now %s)", dn_string(&v->stale->issuer, what, sizeof(what)), format_time(next, t1),
                                format_time(v->trust->now, t2));
        info->crl_expired = true;
        dn_string(&v->stale->issuer, info->crl_issuer, sizeof(info->crl_issuer));
        info->crl_next_update = next;
        return 0;
}

/* ---- remembered chains ---------------------------------------------------------------------------- */

/*
 * Everything verify_chain()'s verdict depends on, the clocks and CRLs aside: the presented
 * certificates, the trust anchors, the revocation list's entries and whether dates are checked.
 * mbedTLS's profile and our callback are fixed.
 */
static void chain_memo_key(const mbedtls_x509_crt *chain, const mbedtls_x509_crt *ca, const SignatureTrust *trust,
                           uint8_t ret_key[SHA256_DIGEST_SIZE]) {
        const Revocations *rl = trust->revoked;
        uint8_t flags[2] = { trust->now > 0, rl != NULL };
        Sha256 h;

        sha256_init(&h);
        sha256_update(&h, flags, sizeof(flags));
        for (const mbedtls_x509_crt *c = chain; c && c->raw.p; c = c->next)
                memo_hash_sized(&h, c->raw.p, c->raw.len);
        memo_hash_sized(&h, "anchors", 7);
        for (const mbedtls_x509_crt *c = ca; c && c->raw.p; c = c->next)
                memo_hash_sized(&h, c->raw.p, c->raw.len);
        for (size_t i = 0; rl && i < rl->n; i++) {
                const RevokedEntry *e = &rl->entries[i];
                uint8_t kind = (uint8_t) e->kind;
                memo_hash_sized(&h, &kind, 1);
                memo_hash_sized(&h, e->key_sha256, sizeof(e->key_sha256));
                memo_hash_sized(&h, e->issuer, strnlen(e->issuer, sizeof(e->issuer)));
                memo_hash_sized(&h, e->serial, e->serial_len);
        }
        sha256_final(&h, ret_key);
}

/* The span around @t in which no certificate of @chain or @ca begins or ends its validity. */
static ClockWindow chain_window(const mbedtls_x509_crt *chain, const mbedtls_x509_crt *ca, time_t t) {
        ClockWindow w = clock_window_start(t);

        for (const mbedtls_x509_crt *list = chain; list; list = list == chain ? ca : NULL)
                for (const mbedtls_x509_crt *c = list; c && c->raw.p; c = c->next) {
                        clock_window_add(&w, t, x509_time_to_time(&c->valid_from));
                        clock_window_add(&w, t, x509_time_to_time(&c->valid_to));
                }
        return w;
}

/*
 * Without CRLs, the verdict on a chain is a function of chain_memo_key()'s inputs and of which
 * certificates are within their validity: at the caller's clock (our dates) and at the system's
 * (mbedTLS prefers a parent within its validity when it builds the path). A chain that verified is
 * remembered with both windows, and taken again while both clocks stay inside them. With CRLs,
 * revocation dates and nextUpdate count too: such a chain is verified every time.
 */
static int verify_chain(mbedtls_x509_crt *chain, const SignatureTrust *trust, SignatureInfo *info, TpError *err) {
        _cleanup_(mbedtls_x509_crt_free) mbedtls_x509_crt ca;
        _cleanup_(mbedtls_x509_crl_free) mbedtls_x509_crl crl;
        VerifyState v = { .trust = trust, .top_depth = -1, .date_depth = -1 };
        char t1[TIME_STR_MAX], t2[TIME_STR_MAX];
        uint8_t key[SHA256_DIGEST_SIZE];
        time_t sys_now = time(NULL), trust_now = trust->now > 0 ? trust->now : 0;
        uint32_t flags = 0;
        int r;

        mbedtls_x509_crt_init(&ca);
        mbedtls_x509_crl_init(&crl);
        if ((r = trust->ca_pem ? ca_load_pem(&ca, trust->ca_pem, trust->ca_path, err) :
                              ca_load(&ca, trust->ca_path, err)) < 0 ||
            (trust->crl_path && (r = crl_load(&crl, trust->crl_path, err)) < 0))
                return r;
        v.crl = trust->crl_path ? &crl : NULL;
        if (!trust->crl_path) {
                chain_memo_key(chain, &ca, trust, key);
                if (chain_memo_find(key, sys_now, trust_now)) {
                        info->remembered_chain = true;
                        return 0;
                }
        }

        r = mbedtls_x509_crt_verify_with_profile(chain, &ca, trust->crl_path ? &crl : NULL, &verify_profile, NULL,
                                                 &flags, verify_cb, &v);
        if (r != 0 && r != MBEDTLS_ERR_X509_CERT_VERIFY_FAILED)
                return mbed_error(err, -EIO, r, "certificate chain verification against %s failed", trust->ca_path);
        if (flags != 0)
                return chain_refusal(chain, trust->ca_path, flags, &v, err);
        if ((r = revocation_refusal(&v, info, err)) < 0)
                return r;
        if (v.date_depth >= 0) {
                const char *kind = v.date_depth == 0 ? "signer" : v.date_depth == v.top_depth ? "CA" : "intermediate";
                return tp_error(err, -EKEYREJECTED, "%s certificate '%s' %s %s (now %s)", kind, v.date_subject,
                                v.date_future ? "is not valid before" : "expired on", format_time(v.date_limit, t1),
                                format_time(trust->now, t2));
        }
        if (!trust->crl_path) {
                ClockWindow sys = chain_window(chain, &ca, sys_now);
                ClockWindow at = trust_now > 0 ? chain_window(chain, &ca, trust_now) : clock_window_start(0);
                chain_memo_add(key, &sys, &at);
        }
        return 0;
}

int signature_verify_trust(const uint8_t *block, size_t block_len, const void *data, size_t len,
                           const SignatureTrust *trust, SignatureInfo *ret_info, TpError *err) {
        _cleanup_(mbedtls_x509_crt_free) mbedtls_x509_crt chain;
        uint8_t hash[SHA256_DIGEST_SIZE], key[SHA256_DIGEST_SIZE];
        SignatureInfo crl_info = {};
        SignatureBlock b;
        int r;

        mbedtls_x509_crt_init(&chain);
        r = signature_block_parse(block, block_len, &b, err);
        if (r < 0)
                return r;
        r = chain_parse(&b, &chain, err);
        if (r < 0)
                return r;

        r = verify_chain(&chain, trust, &crl_info, err);
        if (r < 0)
                return r;
        r = signer_cert_check(&chain, err);
        if (r < 0)
                return r;

        sha256_digest(len ? data : "", len, hash);   /* NULL is fine when len is 0 */
        signature_memo_key(chain.pk_raw.p, chain.pk_raw.len, hash, b.sig, b.sig_len, key);
        bool remembered = signature_memo_find(key);
        if (!remembered) {
                r = mbedtls_pk_verify(&chain.pk, MBEDTLS_MD_SHA256, hash, sizeof(hash), b.sig, b.sig_len);
                if (r == MBEDTLS_ERR_ECP_VERIFY_FAILED)
                        return tp_error(err, -EKEYREJECTED, "signature does not match the signed data");
                if (r != 0)
                        return mbed_error(err, -EKEYREJECTED, r, "signature does not match the signed data");
                signature_memo_add(key);
        }

        if (ret_info) {
                info_fill(&chain, trust->now > 0, ret_info);
                ret_info->crl_expired = crl_info.crl_expired;
                memcpy(ret_info->crl_issuer, crl_info.crl_issuer, sizeof(ret_info->crl_issuer));
                ret_info->crl_next_update = crl_info.crl_next_update;
                ret_info->remembered = remembered;
                ret_info->remembered_chain = crl_info.remembered_chain;
        }
        return 0;
}

int signature_verify(const uint8_t *block, size_t block_len, const void *data, size_t len, const char *ca_path,
                     time_t now, SignatureInfo *ret_info, TpError *err) {
        SignatureTrust trust = { .ca_path = ca_path, .now = now };
        return signature_verify_trust(block, block_len, data, len, &trust, ret_info, err);
}

time_t signature_clock(time_t clock, time_t floor) {
        return clock <= 0 || clock < floor ? SIGNATURE_CLOCK_UNKNOWN : clock;
}

time_t clock_for_dates(void) {
        return signature_clock(clock_wall(), clock_floor());
}
