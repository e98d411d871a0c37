/* SPDX-License-Identifier: MIT */
/*
 * common/bundle/sign.c: signing, chain and policy checks, the injectable clock, and the block parser
 * against truncation, bit flips and absurd lengths (the Signer itself: check_signer.c). The test PKI
 * comes from tests/tools/make-pki.sh (pki-fixture.h), run once per test case into a temporary directory.
 */

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/pk.h>
#include <mbedtls/x509_crt.h>

#include "check-main.h"
#include "pki-fixture.h"
#include "revoke.h"
#include "sha256.h"
#include "sign.h"

static const char manifest[] = "format: 1\ntask: json\nversion: 7\nbase: {sha256: 0123abcd, size: 4096}\n";

/*
 * A block made without the Signer's checks (mbedTLS directly + signature_block_write), so that
 * certificates signer_load() refuses can still be put in front of the verifier.
 */
static void sign_raw(const char *key_file, const char *crt_file, const void *data, size_t len, uint8_t **ret,
                     size_t *ret_len) {
        mbedtls_pk_context pk;
        mbedtls_x509_crt chain;
        mbedtls_entropy_context entropy;
        mbedtls_ctr_drbg_context drbg;
        uint8_t hash[SHA256_DIGEST_SIZE], sig[MBEDTLS_PK_SIGNATURE_MAX_SIZE];
        SignatureBlock b = {};
        TpError err = {};

        mbedtls_pk_init(&pk);
        mbedtls_x509_crt_init(&chain);
        mbedtls_entropy_init(&entropy);
        mbedtls_ctr_drbg_init(&drbg);
        ck_assert_int_eq(mbedtls_ctr_drbg_seed(&drbg, mbedtls_entropy_func, &entropy, NULL, 0), 0);
        ck_assert_int_eq(mbedtls_pk_parse_keyfile(&pk, P(key_file), NULL), 0);
        ck_assert_int_eq(mbedtls_x509_crt_parse_file(&chain, P(crt_file)), 0);
        sha256_digest(data, len, hash);
        ck_assert_int_eq(mbedtls_pk_sign(&pk, MBEDTLS_MD_SHA256, hash, sizeof(hash), sig, &b.sig_len,
                                         mbedtls_ctr_drbg_random, &drbg), 0);
        b.sig = sig;
        for (mbedtls_x509_crt *c = &chain; c; c = c->next) {
                b.certs[b.n_certs].der = c->raw.p;
                b.certs[b.n_certs++].len = c->raw.len;
        }
        ck_assert_int_eq(signature_block_write(&b, ret, ret_len, &err), 0);
        mbedtls_pk_free(&pk);
        mbedtls_x509_crt_free(&chain);
        mbedtls_ctr_drbg_free(&drbg);
        mbedtls_entropy_free(&entropy);
}

/* ---- round trip ---------------------------------------------------------------------------------- */

START_TEST(test_round_trip) {
        _cleanup_free_ uint8_t *block = NULL, *again = NULL, *empty = NULL;
        size_t len, again_len, empty_len;
        SignatureInfo info, parsed;
        TpError err = {};

        sign_ok("signer", manifest, sizeof(manifest) - 1, &block, &len);
        ck_assert_int_eq(signature_verify(block, len, manifest, sizeof(manifest) - 1, P("ca.pem"), NOW, &info, &err),
                         0);
        ck_assert_str_eq(info.subject, "CN=ci-signer");
        ck_assert_str_eq(info.issuer, "CN=TaskPatch Test Intermediate CA");
        ck_assert_int_eq(info.not_before, DAY(2024, 1, 1));
        ck_assert_int_eq(info.not_after, DAY(2040, 1, 1));
        ck_assert(info.dates_checked);

        /* The block holds leaf + intermediate, and nothing else. */
        SignatureBlock b;
        ck_assert_int_eq(signature_block_parse(block, len, &b, &err), 0);
        ck_assert_uint_eq(b.n_certs, 2);
        ck_assert_uint_le(b.sig_len, 72);
        ck_assert(memcmp(block, "TPSIG1\0\0", 8) == 0);

        /* Deterministic ECDSA (RFC 6979): the same key and data give the same block. */
        sign_ok("signer", manifest, sizeof(manifest) - 1, &again, &again_len);
        ck_assert_uint_eq(again_len, len);
        ck_assert(memcmp(again, block, len) == 0);

        /* signature_parse_info() agrees, without checking anything. */
        ck_assert_int_eq(signature_parse_info(block, len, &parsed, &err), 0);
        ck_assert_str_eq(parsed.subject, info.subject);
        ck_assert_str_eq(parsed.issuer, info.issuer);
        ck_assert_int_eq(parsed.not_before, info.not_before);
        ck_assert_int_eq(parsed.not_after, info.not_after);
        ck_assert(!parsed.dates_checked);

        /* Empty data is data too; info is optional. */
        sign_ok("signer", NULL, 0, &empty, &empty_len);
        ck_assert_int_eq(signature_verify(empty, empty_len, "", 0, P("ca.pem"), NOW, NULL, &err), 0);
        ck_assert_int_eq(signature_verify(empty, empty_len, "x", 1, P("ca.pem"), NOW, NULL, &err), -EKEYREJECTED);
        ck_assert_int_eq(signature_verify(block, len, "", 0, P("ca.pem"), NOW, NULL, NULL), -EKEYREJECTED);
}
END_TEST

/*
 * A signature verified before is remembered, not computed again (SignatureInfo.remembered), and
 * only for the same key, data and signature: everything else is checked as the first time.
 */
START_TEST(test_remembered) {
        _cleanup_free_ uint8_t *block = NULL, *other = NULL;
        uint8_t data[sizeof(manifest) - 1];
        size_t len, other_len;
        SignatureInfo info;
        TpError err = {};

        sign_ok("signer", manifest, sizeof(data), &block, &len);
        ck_assert_int_eq(signature_verify(block, len, manifest, sizeof(data), P("ca.pem"), NOW, &info, &err), 0);
        ck_assert_int_eq(signature_verify(block, len, manifest, sizeof(data), P("ca.pem"), NOW, &info, &err), 0);
        ck_assert(info.remembered);
        ck_assert_str_eq(info.subject, "CN=ci-signer");

        /* The chain is still checked: a trust anchor that did not issue it refuses it. */
        ck_assert_int_eq(signature_verify(block, len, manifest, sizeof(data), P("other-ca.pem"), NOW, &info, &err),
                         -EKEYREJECTED);
        ck_assert(strstr(err.message, "not correctly signed by the trusted CA"));

        /* Other data under the remembered signature. */
        memcpy(data, manifest, sizeof(data));
        data[0] ^= 1;
        ck_assert_int_eq(signature_verify(block, len, data, sizeof(data), P("ca.pem"), NOW, &info, &err),
                         -EKEYREJECTED);
        ck_assert_str_eq(err.message, "signature does not match the signed data");

        /* Another signer's signature over the same data is verified afresh, and then remembered too. */
        sign_ok("other-signer", manifest, sizeof(data), &other, &other_len);
        ck_assert_int_eq(signature_verify(other, other_len, manifest, sizeof(data), P("ca.d"), NOW, &info, &err), 0);
        ck_assert(!info.remembered);
        ck_assert_int_eq(signature_verify(other, other_len, manifest, sizeof(data), P("ca.d"), NOW, &info, &err), 0);
        ck_assert(info.remembered);
}
END_TEST

/*
 * A chain that verified is not verified again while nothing its verdict depends on has changed
 * (SignatureInfo.remembered_chain): the certificates, the trust anchors, the revocation list, and
 * which certificates are within their validity. Each of those changing is verified afresh.
 */
START_TEST(test_remembered_chain) {
        _cleanup_free_ uint8_t *block = NULL;
        uint8_t data[sizeof(manifest) - 1];
        size_t len;
        SignatureInfo info;
        TpError err = {};
        char ca[300], cmd[700];

        snprintf(ca, sizeof(ca), "%s", P("memo-ca.pem"));
        snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", P("ca.pem"), ca);
        sh(cmd);
        memcpy(data, manifest, sizeof(data));
        sign_ok("signer", data, sizeof(data), &block, &len);
        SignatureTrust trust = { .ca_path = ca, .now = NOW };
        ck_assert_int_eq(signature_verify_trust(block, len, data, sizeof(data), &trust, &info, &err), 0);
        ck_assert(!info.remembered_chain);
        ck_assert_int_eq(signature_verify_trust(block, len, data, sizeof(data), &trust, &info, &err), 0);
        ck_assert(info.remembered_chain);
        ck_assert(info.remembered);

        /* The signer's certificate past its notAfter: refused, however recently the chain verified. */
        trust.now = info.not_after + 10;
        ck_assert_int_eq(signature_verify_trust(block, len, data, sizeof(data), &trust, &info, &err), -EKEYREJECTED);
        ck_assert_msg(strstr(err.message, "expired on"), "%s", err.message);
        trust.now = NOW + 86400;        /* no validity begins or ends between: still remembered */
        ck_assert_int_eq(signature_verify_trust(block, len, data, sizeof(data), &trust, &info, &err), 0);
        ck_assert(info.remembered_chain);

        /* A second from a boundary, nothing is remembered. */
        trust.now = info.not_before;
        for (int i = 0; i < 2; i++) {
                ck_assert_int_eq(signature_verify_trust(block, len, data, sizeof(data), &trust, &info, &err), 0);
                ck_assert(!info.remembered_chain);
        }
        trust.now = info.not_before - 1;
        ck_assert_int_eq(signature_verify_trust(block, len, data, sizeof(data), &trust, &info, &err), -EKEYREJECTED);
        ck_assert_msg(strstr(err.message, "is not valid before"), "%s", err.message);

        /* The clock unknown: dates are not checked, and that verdict is remembered apart. */
        trust.now = SIGNATURE_CLOCK_UNKNOWN;
        ck_assert_int_eq(signature_verify_trust(block, len, data, sizeof(data), &trust, &info, &err), 0);
        ck_assert(!info.remembered_chain);
        ck_assert_int_eq(signature_verify_trust(block, len, data, sizeof(data), &trust, &info, &err), 0);
        ck_assert(info.remembered_chain);
        trust.now = NOW;

        /* A revocation list that names the signer's key. */
        RevokedEntry entry = { .kind = REVOKED_KEY };
        memcpy(entry.key_sha256, info.key_sha256, sizeof(entry.key_sha256));
        Revocations list = { .version = 2, .entries = &entry, .n = 1 };
        trust.revoked = &list;
        ck_assert_int_eq(signature_verify_trust(block, len, data, sizeof(data), &trust, &info, &err), -EKEYREVOKED);
        trust.revoked = NULL;

        /* With CRLs, revocation dates and nextUpdate count: verified every time. */
        trust.crl_path = P("ca.crl");
        for (int i = 0; i < 2; i++) {
                ck_assert_int_eq(signature_verify_trust(block, len, data, sizeof(data), &trust, &info, &err), 0);
                ck_assert(!info.remembered_chain);
        }
        trust.crl_path = NULL;

        /* The trust anchors replaced in the same file: the chain no longer verifies. */
        snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", P("other-ca.pem"), ca);
        sh(cmd);
        ck_assert_int_eq(signature_verify_trust(block, len, data, sizeof(data), &trust, &info, &err), -EKEYREJECTED);
        ck_assert_msg(strstr(err.message, "not correctly signed by the trusted CA"), "%s", err.message);
}
END_TEST

/* ---- trust anchors ------------------------------------------------------------------------------- */

static const struct {
        const char *signer, *ca;
        int want;
        const char *substr;
} ca_rows[] = {
        { "signer", "ca.pem", 0, NULL },
        { "signer", "ca.d", 0, NULL },
        { "other-signer", "ca.d", 0, NULL },
        /* A trust anchor need not be self-signed. */
        { "signer", "intermediate.pem", 0, NULL },
        { "signer", "other-ca.pem", -EKEYREJECTED,
          "other-ca.pem: the certificate is not correctly signed by the trusted CA" },
        { "other-signer", "ca.pem", -EKEYREJECTED, "certificate chain does not verify against " },
        { "signer", "missing.pem", -ENOENT, "missing.pem: No such file or directory" },
        { "signer", "empty.d", -ENOKEY, "empty.d holds no certificate" },
        { "signer", "junk.d", -EBADMSG, "junk.d/bad.pem: not a certificate file" },
        { "signer", "signer.key", -EBADMSG, "signer.key: not a certificate file" },
        { "signer", "empty.pem", -EBADMSG, "empty.pem: empty file" },
        { "signer", "big-ca.pem", -EFBIG, "big-ca.pem: 1048577 bytes, more than the limit of 1048576" },
        { "signer", "many.d", -E2BIG, "many.d: 1025 certificate files, more than the limit of 1024" },
};

START_TEST(test_ca_paths) {
        _cleanup_free_ uint8_t *block = NULL;
        SignatureInfo info;
        TpError err = {};
        size_t len;
        char what[128];

        sign_ok(ca_rows[_i].signer, manifest, sizeof(manifest) - 1, &block, &len);
        int r = signature_verify(block, len, manifest, sizeof(manifest) - 1, P(ca_rows[_i].ca), NOW, &info, &err);
        snprintf(what, sizeof(what), "%s against %s", ca_rows[_i].signer, ca_rows[_i].ca);
        expect(r, &err, ca_rows[_i].want, ca_rows[_i].substr, what);
}
END_TEST

/* ---- signer policy at verification -------------------------------------------------------------- */

static const struct {
        const char *key, *crt, *ca;
        int want;
        const char *substr;
} refusal_rows[] = {
        { "signer.key", "signer.crt", "ca.pem", 0, NULL },
        { "noeku-signer.key", "noeku-signer.crt", "ca.pem", 0, NULL },   /* EKU is optional */
        { "signer.key", "signer-leaf.crt", "ca.pem", -EKEYREJECTED,
          "does not verify against " },                                 /* intermediate missing */
        { "expired-signer.key", "expired-signer.crt", "ca.pem", -EKEYREJECTED,
          "signer certificate 'CN=expired-signer' expired on 2001-01-01 00:00:00 UTC (now 2026-11-29 13:00:00 UTC)" },
        { "future-signer.key", "future-signer.crt", "ca.pem", -EKEYREJECTED,
          "signer certificate 'CN=future-signer' is not valid before 2090-01-01 00:00:00 UTC (now 2026-11-29" },
        { "nodigsig-signer.key", "nodigsig-signer.crt", "ca.pem", -EKEYREJECTED,
          "signer certificate 'CN=nodigsig-signer' lacks key usage digitalSignature" },
        { "noku-signer.key", "noku-signer.crt", "ca.pem", -EKEYREJECTED,
          "signer certificate 'CN=noku-signer' has no key usage extension" },
        { "serverauth-signer.key", "serverauth-signer.crt", "ca.pem", -EKEYREJECTED,
          "signer certificate 'CN=serverauth-signer': extended key usage present without codeSigning" },
        { "rsa-signer.key", "rsa-signer.crt", "ca.pem", -EKEYREJECTED,
          "signer certificate 'CN=rsa-signer': key is not an ECDSA P-256 key (RSA-2048)" },
        { "p384-signer.key", "p384-signer.crt", "ca.pem", -EKEYREJECTED,
          "signer certificate 'CN=p384-signer': key is not an ECDSA P-256 key (EC secp384r1)" },
        /* A CA certificate is no signer, even with digitalSignature and codeSigning. */
        { "ca-signer.key", "ca-signer.crt", "ca.pem", -EKEYREJECTED,
          "signer certificate 'CN=ca-signer' is a CA certificate (basicConstraints CA:TRUE)" },
        /* mbedTLS's EKU check takes anyExtendedKeyUsage for codeSigning: ours does not. */
        { "anyeku-signer.key", "anyeku-signer.crt", "ca.pem", -EKEYREJECTED,
          "signer certificate 'CN=anyeku-signer': extended key usage anyExtendedKeyUsage is not accepted" },
        /* An issuer that is not a CA: named as such, not as "not correctly signed". */
        { "underfake-signer.key", "underfake-signer.crt", "ca.pem", -EKEYREJECTED,
          "intermediate certificate 'CN=TaskPatch Fake Intermediate' is not a CA (basicConstraints CA:FALSE): it "
          "cannot issue 'CN=underfake-signer'" },
        { "signer.key", "other-signer.crt", "ca.d", -EKEYREJECTED, "signature does not match the signed data" },
};

START_TEST(test_refusals) {
        _cleanup_free_ uint8_t *block = NULL;
        SignatureInfo info, before;
        TpError err = {};
        size_t len;

        sign_raw(refusal_rows[_i].key, refusal_rows[_i].crt, manifest, sizeof(manifest) - 1, &block, &len);
        memset(&info, 0x5a, sizeof(info));
        before = info;
        int r = signature_verify(block, len, manifest, sizeof(manifest) - 1, P(refusal_rows[_i].ca), NOW, &info, &err);
        expect(r, &err, refusal_rows[_i].want, refusal_rows[_i].substr, refusal_rows[_i].crt);
        if (r < 0)
                ck_assert_msg(memcmp(&info, &before, sizeof(info)) == 0, "info changed on failure");
}
END_TEST

/* ---- the injectable clock ----------------------------------------------------------------------- */

static const struct {
        const char *signer, *ca;
        int y, mo, d, h, mi, s;         /* y == 0: now = SIGNATURE_CLOCK_UNKNOWN; y < 0: now = -1 */
        int want;
        const char *substr;
} clock_rows[] = {
        { "signer", "ca.pem", 2023, 12, 31, 23, 59, 59, -EKEYREJECTED,
          "signer certificate 'CN=ci-signer' is not valid before 2024-01-01 00:00:00 UTC (now 2023-12-31 23:59:59 UTC)" },
        { "signer", "ca.pem", 2024, 1, 1, 0, 0, 0, 0, NULL },          /* validity is inclusive */
        { "signer", "ca.pem", 2040, 1, 1, 0, 0, 0, 0, NULL },
        { "signer", "ca.pem", 2040, 1, 1, 0, 0, 1, -EKEYREJECTED,
          "signer certificate 'CN=ci-signer' expired on 2040-01-01 00:00:00 UTC (now 2040-01-01 00:00:01 UTC)" },
        /* Past the root's end too: the signer's own date is the one reported. */
        { "signer", "ca.pem", 2101, 1, 1, 0, 0, 0, -EKEYREJECTED, "signer certificate 'CN=ci-signer' expired on 2040" },
        /* The system clock says 2026; the caller's clock wins both ways. */
        { "expired-signer", "ca.pem", 2000, 6, 1, 0, 0, 0, 0, NULL },
        { "future-signer", "ca.pem", 2094, 6, 1, 0, 0, 0, 0, NULL },
        /* Every certificate of the chain is checked, not only the signer. */
        { "future-signer", "ca.pem", 2096, 1, 1, 0, 0, 0, -EKEYREJECTED,
          "intermediate certificate 'CN=TaskPatch Test Intermediate CA' expired on 2095-01-01 00:00:00 UTC" },
        { "other-signer", "other-ca.pem", 2035, 1, 1, 0, 0, 0, -EKEYREJECTED,
          "CA certificate 'CN=TaskPatch Other Root CA' expired on 2030-01-01 00:00:00 UTC (now 2035-01-01" },
        { "other-signer", "other-ca.pem", 2019, 6, 1, 0, 0, 0, -EKEYREJECTED,
          "signer certificate 'CN=other-signer' is not valid before 2020-01-01" },
        /* Clock unknown: dates skipped, and the result says so. */
        { "expired-signer", "ca.pem", 0, 0, 0, 0, 0, 0, 0, NULL },
        { "future-signer", "ca.pem", -1, 0, 0, 0, 0, 0, 0, NULL },
        { "other-signer", "other-ca.pem", 0, 0, 0, 0, 0, 0, 0, NULL },
        /* ... but nothing else is skipped. */
        { "other-signer", "ca.pem", 0, 0, 0, 0, 0, 0, -EKEYREJECTED, "not correctly signed by the trusted CA" },
};

START_TEST(test_clock) {
        _cleanup_free_ uint8_t *block = NULL;
        SignatureInfo info = {};
        TpError err = {};
        size_t len;
        time_t now;
        char what[128];

        if (clock_rows[_i].y == 0)
                now = SIGNATURE_CLOCK_UNKNOWN;
        else if (clock_rows[_i].y < 0)
                now = -1;
        else
                now = T(clock_rows[_i].y, clock_rows[_i].mo, clock_rows[_i].d, clock_rows[_i].h, clock_rows[_i].mi,
                        clock_rows[_i].s);
        sign_ok(clock_rows[_i].signer, manifest, sizeof(manifest) - 1, &block, &len);
        int r = signature_verify(block, len, manifest, sizeof(manifest) - 1, P(clock_rows[_i].ca), now, &info, &err);
        snprintf(what, sizeof(what), "row %d (%s at %jd)", _i, clock_rows[_i].signer, (intmax_t) now);
        expect(r, &err, clock_rows[_i].want, clock_rows[_i].substr, what);
        if (r == 0)
                ck_assert_msg(info.dates_checked == (now > 0), "%s: dates_checked %d", what, info.dates_checked);
}
END_TEST

START_TEST(test_signature_clock) {
        time_t floor = DAY(2026, 1, 1);

        ck_assert_int_eq(signature_clock(NOW, floor), NOW);
        ck_assert_int_eq(signature_clock(floor, floor), floor);
        ck_assert_int_eq(signature_clock(floor - 1, floor), SIGNATURE_CLOCK_UNKNOWN);
        ck_assert_int_eq(signature_clock(DAY(1970, 1, 2), floor), SIGNATURE_CLOCK_UNKNOWN);  /* RTC-less boot */
        ck_assert_int_eq(signature_clock(0, 0), SIGNATURE_CLOCK_UNKNOWN);
        ck_assert_int_eq(signature_clock(-5, 0), SIGNATURE_CLOCK_UNKNOWN);
        ck_assert_int_eq(signature_clock(1, 0), 1);
}
END_TEST

/* ---- tampering ----------------------------------------------------------------------------------- */

/*
 * One verification costs three ECDSA verifications: ~3 ms natively, ~130 ms under qemu-user
 * (make check-arm). So by default the tamper tests flip a fixed sample of positions: every
 * byte where a flip takes its own code path (magic, lengths, DER framing) and a stride through
 * the signed content. TASKPATCH_TEST_EXHAUSTIVE=1 flips every position.
 */
static bool sampled(size_t i, size_t n, size_t head, size_t stride) {
        static int exhaustive = -1;

        if (exhaustive < 0) {
                const char *e = getenv("TASKPATCH_TEST_EXHAUSTIVE");
                exhaustive = e && strcmp(e, "1") == 0;
        }
        return exhaustive || i < head || (i - head) % stride == 0 || i == n - 1;
}

/* All bits of the first and last byte of the data (every bit of every byte when exhaustive). */
START_TEST(test_flip_data) {
        _cleanup_free_ uint8_t *block = NULL;
        uint8_t data[sizeof(manifest) - 1];
        TpError err = {};
        size_t len, n = 0;

        sign_ok("signer", manifest, sizeof(data), &block, &len);
        for (size_t bit = 0; bit < 8 * sizeof(data); bit++) {
                if (!sampled(bit, 8 * sizeof(data), 8, SIZE_MAX) && bit < 8 * (sizeof(data) - 1))
                        continue;
                memcpy(data, manifest, sizeof(data));
                data[bit / 8] ^= (uint8_t) (1u << (bit % 8));
                int r = signature_verify(block, len, data, sizeof(data), P("ca.pem"), NOW, NULL, &err);
                ck_assert_msg(r == -EKEYREJECTED, "data bit %zu flipped: %d", bit, r);
                ck_assert_str_eq(err.message, "signature does not match the signed data");
                n++;
        }
        ck_assert_uint_ge(n, 16);
        /* One byte less, one byte more. */
        ck_assert_int_eq(signature_verify(block, len, manifest, sizeof(data) - 1, P("ca.pem"), NOW, NULL, &err),
                         -EKEYREJECTED);
        ck_assert_int_eq(signature_verify(block, len, manifest, sizeof(data) + 1, P("ca.pem"), NOW, NULL, &err),
                         -EKEYREJECTED);
}
END_TEST

/* Bits of the DER signature (its framing, then a stride through r and s): a mismatch, never malformed. */
START_TEST(test_flip_signature) {
        _cleanup_free_ uint8_t *block = NULL;
        SignatureBlock b;
        TpError err = {};
        size_t len, n = 0;

        sign_ok("signer", manifest, sizeof(manifest) - 1, &block, &len);
        ck_assert_int_eq(signature_block_parse(block, len, &b, &err), 0);
        size_t start = (size_t) (b.sig - block);
        for (size_t bit = 0; bit < 8 * b.sig_len; bit++) {
                /* Every bit of the 6 framing bytes (SEQUENCE, INTEGER r); then one bit per 8 bytes. */
                if (!sampled(bit, 8 * b.sig_len, 8 * 6, 8 * 8 + 1))
                        continue;
                uint8_t *p = block + start + bit / 8, mask = (uint8_t) (1u << (bit % 8));
                *p ^= mask;
                int r = signature_verify(block, len, manifest, sizeof(manifest) - 1, P("ca.pem"), NOW, NULL, &err);
                ck_assert_msg(r == -EKEYREJECTED, "signature bit %zu flipped: %d %s", bit, r, err.message);
                ck_assert(strstr(err.message, "signature does not match the signed data"));
                *p ^= mask;
                n++;
        }
        ck_assert_uint_ge(n, 48);
        ck_assert_int_eq(signature_verify(block, len, manifest, sizeof(manifest) - 1, P("ca.pem"), NOW, NULL, &err), 0);
}
END_TEST

/*
 * One bit in bytes of the block's header and of both certificates (their length fields, their
 * first 24 bytes of DER framing, then a stride): rejected or malformed, never accepted.
 */
START_TEST(test_flip_block) {
        _cleanup_free_ uint8_t *block = NULL;
        size_t len, rejected = 0, malformed = 0;
        SignatureBlock b;
        TpError err = {};

        sign_ok("signer", manifest, sizeof(manifest) - 1, &block, &len);
        ck_assert_int_eq(signature_block_parse(block, len, &b, &err), 0);
        for (size_t i = 0; i < len; i++) {
                size_t sig = (size_t) (b.sig - block), c0 = (size_t) (b.certs[0].der - block) - 2,
                       c1 = (size_t) (b.certs[1].der - block) - 2;
                bool pick;

                if (i < sig)                                    /* magic, signature length */
                        pick = true;
                else if (i < c0 - 2)                            /* the signature: test_flip_signature */
                        pick = sampled(i - sig, c0 - 2 - sig, 0, SIZE_MAX);
                else if (i < c0)                                /* certificate count */
                        pick = true;
                else if (i < c1)
                        pick = sampled(i - c0, c1 - c0, 2 + 24, 13);
                else
                        pick = sampled(i - c1, len - c1, 2 + 24, 13);
                if (!pick)
                        continue;

                uint8_t mask = (uint8_t) (1u << ((i * 3) % 8));
                block[i] ^= mask;
                err.message[0] = '\0';
                int r = signature_verify(block, len, manifest, sizeof(manifest) - 1, P("ca.pem"), NOW, NULL, &err);
                ck_assert_msg(r == -EKEYREJECTED || r == -EBADMSG, "byte %zu ^ 0x%02x: %d %s", i, mask, r,
                              err.message);
                ck_assert_msg(err.message[0], "byte %zu: no message", i);
                rejected += r == -EKEYREJECTED;
                malformed += r == -EBADMSG;
                block[i] ^= mask;
        }
        /* Both kinds occur: a flip in a length is malformed, a flip in a signed field is rejected. */
        ck_assert_uint_gt(rejected, 10);
        ck_assert_uint_gt(malformed, 10);
}
END_TEST

START_TEST(test_truncated) {
        _cleanup_free_ uint8_t *block = NULL, *longer = NULL;
        SignatureInfo info;
        SignatureBlock b;
        TpError err = {};
        size_t len;

        sign_ok("signer", manifest, sizeof(manifest) - 1, &block, &len);
        for (size_t n = 0; n < len; n++) {
                /* A copy of exactly n bytes, so ASan sees any read past it. */
                _cleanup_free_ uint8_t *cut = malloc(n ? n : 1);
                ck_assert_ptr_nonnull(cut);
                memcpy(cut, block, n);
                ck_assert_msg(signature_block_parse(cut, n, &b, &err) == -EBADMSG, "block_parse, %zu bytes", n);
                ck_assert_msg(signature_parse_info(cut, n, &info, &err) == -EBADMSG, "parse_info, %zu bytes", n);
                ck_assert_msg(signature_verify(cut, n, manifest, sizeof(manifest) - 1, P("ca.pem"), NOW, &info, &err) ==
                                      -EBADMSG,
                              "verify, %zu bytes: %s", n, err.message);
        }

        longer = malloc(len + 1);
        ck_assert_ptr_nonnull(longer);
        memcpy(longer, block, len);
        longer[len] = 0;
        expect(signature_verify(longer, len + 1, manifest, sizeof(manifest) - 1, P("ca.pem"), NOW, &info, &err), &err,
               -EBADMSG, "1 trailing bytes after the last certificate", "one byte appended");
}
END_TEST

/* ---- hand-made blocks ---------------------------------------------------------------------------- */

typedef struct Buf {
        uint8_t data[70000];
        size_t len;
} Buf;

static void put(Buf *b, const void *p, size_t n) {
        ck_assert_uint_le(b->len + n, sizeof(b->data));
        memcpy(b->data + b->len, p, n);
        b->len += n;
}

static void put16(Buf *b, unsigned v) {
        uint8_t le[2] = { (uint8_t) v, (uint8_t) (v >> 8) };
        put(b, le, 2);
}

static void put_fill(Buf *b, uint8_t byte, size_t n) {
        ck_assert_uint_le(b->len + n, sizeof(b->data));
        memset(b->data + b->len, byte, n);
        b->len += n;
}

static const struct {
        const char *name;
        bool structure_ok;      /* signature_block_parse() accepts it; the X.509 parse does not */
        const char *substr;
} absurd_rows[] = {
        { "empty", false, "shorter than its magic" },
        { "bad magic", false, "bad magic" },
        { "signature length 0", false, "signature length 0 at offset 8, expected 1..1024" },
        { "signature length 1025", false, "signature length 1025 at offset 8" },
        { "signature past the end", false, "truncated: the signature at offset 10 is 1000 bytes, only 8 left" },
        { "no certificate count", false, "certificate count at offset 18 needs 2 bytes, 0 left" },
        { "certificate count 0", false, "certificate count 0 at offset 18, expected 1..8" },
        { "certificate count 9", false, "certificate count 9" },
        { "certificate count 65535", false, "certificate count 65535" },
        { "certificate length 0", false, "certificate 1 of 1: length 0 at offset 20" },
        { "certificate length 16385", false, "certificate 1 of 1: length 16385" },
        { "certificate length 65535", false, "length 65535" },
        { "certificate past the end", false, "truncated: certificate 1 of 1 at offset 22 is 100 bytes, only 10 left" },
        { "second certificate missing", false, "certificate length at offset" },
        { "70000 bytes", false, "signature block is 70000 bytes, more than the limit of 65536" },
        { "garbage certificate", true, "signature block: certificate 1 of 1: " },
        { "certificate with a trailing byte", true, "certificate 1 of 1: 1 trailing bytes after its DER encoding" },
        { "second certificate garbage", true, "certificate 2 of 2: " },
};

START_TEST(test_absurd) {
        _cleanup_free_ uint8_t *good = NULL;
        static Buf buf;
        Buf *b = &buf;
        SignatureBlock parsed;
        SignatureInfo info, before;
        TpError err = {};
        size_t good_len;
        const uint8_t *leaf;
        size_t leaf_len;
        int r;

        sign_ok("signer", manifest, sizeof(manifest) - 1, &good, &good_len);
        ck_assert_int_eq(signature_block_parse(good, good_len, &parsed, &err), 0);
        leaf = parsed.certs[0].der;
        leaf_len = parsed.certs[0].len;

        b->len = 0;
        if (_i != 1)
                put(b, "TPSIG1\0\0", 8);
        else
                put(b, "TPSIG2\0\0", 8);
        switch (_i) {
        case 0:
                b->len = 0;
                break;
        case 1:
                put16(b, 8), put_fill(b, 1, 8), put16(b, 1), put16(b, 1), put_fill(b, 0x30, 1);
                break;
        case 2:
                put16(b, 0), put16(b, 1), put16(b, 1), put_fill(b, 0x30, 1);
                break;
        case 3:
                put16(b, 1025), put_fill(b, 1, 1025), put16(b, 1), put16(b, 1), put_fill(b, 0x30, 1);
                break;
        case 4:
                put16(b, 1000), put_fill(b, 1, 8);
                break;
        case 5:
                put16(b, 8), put_fill(b, 1, 8);
                break;
        case 6:
                put16(b, 8), put_fill(b, 1, 8), put16(b, 0);
                break;
        case 7:
                put16(b, 8), put_fill(b, 1, 8), put16(b, 9);
                for (int i = 0; i < 9; i++)
                        put16(b, 1), put_fill(b, 0x30, 1);
                break;
        case 8:
                put16(b, 8), put_fill(b, 1, 8), put16(b, 65535), put16(b, 1), put_fill(b, 0x30, 1);
                break;
        case 9:
                put16(b, 8), put_fill(b, 1, 8), put16(b, 1), put16(b, 0);
                break;
        case 10:
                put16(b, 8), put_fill(b, 1, 8), put16(b, 1), put16(b, 16385), put_fill(b, 0x30, 16385);
                break;
        case 11:
                put16(b, 8), put_fill(b, 1, 8), put16(b, 1), put16(b, 65535), put_fill(b, 0x30, 65535 - 100);
                break;
        case 12:
                put16(b, 8), put_fill(b, 1, 8), put16(b, 1), put16(b, 100), put_fill(b, 0x30, 10);
                break;
        case 13:
                put16(b, 8), put_fill(b, 1, 8), put16(b, 2), put16(b, (unsigned) leaf_len), put(b, leaf, leaf_len);
                break;
        case 14:
                put_fill(b, 0, 70000 - 8);
                break;
        case 15:
                put16(b, 8), put_fill(b, 1, 8), put16(b, 1), put16(b, 11), put(b, "hello world", 11);
                break;
        case 16:
                put16(b, 8), put_fill(b, 1, 8), put16(b, 1), put16(b, (unsigned) leaf_len + 1), put(b, leaf, leaf_len);
                put_fill(b, 0, 1);
                break;
        case 17:
                put16(b, 8), put_fill(b, 1, 8), put16(b, 2), put16(b, (unsigned) leaf_len), put(b, leaf, leaf_len);
                put16(b, 3), put(b, "\x30\x01\x00", 3);
                break;
        default:
                ck_abort();
        }

        r = signature_block_parse(b->data, b->len, &parsed, &err);
        if (absurd_rows[_i].structure_ok)
                ck_assert_msg(r == 0, "%s: block_parse %d %s", absurd_rows[_i].name, r, err.message);
        else
                expect(r, &err, -EBADMSG, absurd_rows[_i].substr, absurd_rows[_i].name);
        memset(&info, 0x5a, sizeof(info));
        before = info;
        expect(signature_parse_info(b->data, b->len, &info, &err), &err, -EBADMSG, absurd_rows[_i].substr,
               absurd_rows[_i].name);
        ck_assert(memcmp(&info, &before, sizeof(info)) == 0);
        expect(signature_verify(b->data, b->len, manifest, sizeof(manifest) - 1, P("ca.pem"), NOW, &info, &err), &err,
               -EBADMSG, absurd_rows[_i].substr, absurd_rows[_i].name);
}
END_TEST

START_TEST(test_block_write) {
        static uint8_t big[SIGNATURE_CERT_MAX + 1];
        _cleanup_free_ uint8_t *out = NULL;
        SignatureBlock b = { .sig = (const uint8_t *) "sig", .sig_len = 3, .n_certs = 2 }, back;
        TpError err = {};
        size_t len = 77;
        uint8_t *untouched = (uint8_t *) &len;

        b.certs[0] = (SignatureCert) { (const uint8_t *) "leaf", 4 };
        b.certs[1] = (SignatureCert) { (const uint8_t *) "inter", 5 };
        ck_assert_int_eq(signature_block_write(&b, &out, &len, &err), 0);
        ck_assert_uint_eq(len, 8 + 2 + 3 + 2 + 2 + 4 + 2 + 5);
        ck_assert(memcmp(out, "TPSIG1\0\0\x03\0sig\x02\0\x04\0leaf\x05\0inter", len) == 0);
        ck_assert_int_eq(signature_block_parse(out, len, &back, &err), 0);
        ck_assert_uint_eq(back.sig_len, 3);
        ck_assert_uint_eq(back.n_certs, 2);
        ck_assert(memcmp(back.certs[1].der, "inter", 5) == 0);

        /* What the parser would refuse, the writer refuses; outputs stay as they were. */
        len = 77;
        b.n_certs = 9;
        expect(signature_block_write(&b, &untouched, &len, &err), &err, -E2BIG, "9 certificates", "9 certs");
        b.n_certs = 1;
        b.certs[0] = (SignatureCert) { big, sizeof(big) };
        expect(signature_block_write(&b, &untouched, &len, &err), &err, -E2BIG, "16385 bytes", "big cert");
        b.n_certs = 8;
        for (int i = 0; i < 8; i++)
                b.certs[i] = (SignatureCert) { big, SIGNATURE_CERT_MAX };
        expect(signature_block_write(&b, &untouched, &len, &err), &err, -E2BIG, "more than the limit of 65536",
               "total");
        b.certs[0].len = 0;
        expect(signature_block_write(&b, &untouched, &len, &err), &err, -EINVAL, "certificate 1 is empty", "empty");
        b.sig_len = 0;
        expect(signature_block_write(&b, &untouched, &len, &err), &err, -EINVAL, NULL, "no signature");
        b.sig_len = SIGNATURE_SIG_MAX + 1;
        expect(signature_block_write(&b, &untouched, &len, &err), &err, -E2BIG, NULL, "long signature");
        ck_assert_ptr_eq(untouched, (uint8_t *) &len);
        ck_assert_uint_eq(len, 77);
}
END_TEST

static Suite *sign_suite(void) {
        Suite *s = suite_create("sign");
        TCase *tc = tcase_create("sign");

        tcase_add_unchecked_fixture(tc, pki_setup, pki_teardown);
        tcase_set_timeout(tc, 120);     /* ~1000 chain verifications in test_flip_block, under ASan on a slow box */
        tcase_add_test(tc, test_round_trip);
        tcase_add_test(tc, test_remembered);
        tcase_add_test(tc, test_remembered_chain);
        tcase_add_loop_test(tc, test_ca_paths, 0, (int) ELEMENTSOF(ca_rows));
        tcase_add_loop_test(tc, test_refusals, 0, (int) ELEMENTSOF(refusal_rows));
        tcase_add_loop_test(tc, test_clock, 0, (int) ELEMENTSOF(clock_rows));
        tcase_add_test(tc, test_signature_clock);
        tcase_add_test(tc, test_flip_data);
        tcase_add_test(tc, test_flip_signature);
        tcase_add_test(tc, test_flip_block);
        tcase_add_test(tc, test_truncated);
        tcase_add_loop_test(tc, test_absurd, 0, (int) ELEMENTSOF(absurd_rows));
        tcase_add_test(tc, test_block_write);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(sign_suite)
