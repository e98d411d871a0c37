/* SPDX-License-Identifier: MIT */
/*
 * Revocation: X.509 CRLs in signature_verify_trust() (common/bundle/sign.c) and the signed
 * revocation list (common/bundle/revoke.c): what each revokes, their dates at the caller's
 * clock, forged and stale CRLs, and the list's parser against bad input. The PKI, CRLs
 * included, comes from tests/tools/make-pki.sh (pki-fixture.h).
 */

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mbedtls/x509_crt.h>

#include "check-main.h"
#include "pki-fixture.h"
#include "revoke.h"
#include "sha256.h"
#include "sign.h"
#include "signed-file.h"

static const char data[] = "format: 1\ntask: json\nversion: 7\n";

static int verify_with(const char *signer, const SignatureTrust *trust, SignatureInfo *info, TpError *err) {
        _cleanup_free_ uint8_t *block = NULL;
        size_t len;

        sign_ok(signer, data, sizeof(data) - 1, &block, &len);
        return signature_verify_trust(block, len, data, sizeof(data) - 1, trust, info, err);
}

/* ---- CRLs ---------------------------------------------------------------------------------------- */

static const struct {
        const char *signer, *crl;
        int y;                          /* the clock's year (Jan 1st); 0: unknown */
        bool warn;
        int want;
        const char *substr;
} crl_rows[] = {
        { "signer", "intermediate.crl", 2026, false, 0, NULL },
        { "revoked-signer", NULL, 2026, false, 0, NULL },
        { "revoked-signer", "intermediate.crl", 2026, false, -EKEYREVOKED,
          "certificate 'CN=revoked-signer' is revoked by the CRL of 'CN=TaskPatch Test Intermediate CA'" },
        { "revoked-signer", "crl.d", 2026, false, -EKEYREVOKED, "is revoked by the CRL of" },
        /* A CRL of another issuer says nothing of this chain. */
        { "revoked-signer", "ca.crl", 2026, false, 0, NULL },
        { "signer", "crl.d", 2026, false, 0, NULL },
        /* Out of date at the caller's clock (2026-11-29; the system's does not matter). */
        { "signer", "intermediate-stale.crl", 2027, false, -EKEYREJECTED,
          "the CRL of 'CN=TaskPatch Test Intermediate CA' is out of date: its next update was due 2026-01-01" },
        { "signer", "intermediate-stale.crl", 2025, false, 0, NULL },
        { "signer", "intermediate-stale.crl", 2027, true, 0, NULL },
        { "signer", "intermediate-stale.crl", 0, false, 0, NULL },
        /* Stale or not, a revoked certificate stays revoked. */
        { "revoked-signer", "intermediate-stale.crl", 2027, true, -EKEYREVOKED, "revoked-signer" },
        /* A CRL in the intermediate's name that it did not sign is refused, not believed. */
        { "signer", "forged.crl", 2026, false, -EKEYREJECTED, "CRL" },
        { "signer", "missing.crl", 2026, false, -ENOENT, "missing.crl" },
        { "signer", "ca.pem", 2026, false, -EBADMSG, "ca.pem: not a CRL file" },
        { "signer", "empty.d", 2026, false, -ENOKEY, "CRL directory" },
};

START_TEST(test_crl) {
        SignatureTrust trust = {
                .ca_path = P("ca.pem"),
                .now = crl_rows[_i].y ? DAY(crl_rows[_i].y, 1, 1) : SIGNATURE_CLOCK_UNKNOWN,
                .crl_path = crl_rows[_i].crl ? P(crl_rows[_i].crl) : NULL,
                .crl_expired_warn = crl_rows[_i].warn,
        };
        SignatureInfo info = {};
        TpError err = {};
        int r = verify_with(crl_rows[_i].signer, &trust, &info, &err);

        expect(r, &err, crl_rows[_i].want, crl_rows[_i].substr, crl_rows[_i].signer);
        if (r == 0)
                ck_assert(info.crl_expired == (crl_rows[_i].warn && crl_rows[_i].y == 2027));
        if (r == 0 && info.crl_expired) {
                ck_assert_str_eq(info.crl_issuer, "CN=TaskPatch Test Intermediate CA");
                ck_assert_int_eq(info.crl_next_update, DAY(2026, 1, 1));
        }
}
END_TEST

/* ---- the revocation list ------------------------------------------------------------------------- */

/* The leaf of @name.crt as SignatureInfo (key SHA-256, serial, issuer). */
static SignatureInfo leaf_info(const char *name) {
        _cleanup_free_ uint8_t *block = NULL;
        SignatureInfo info;
        TpError err = {};
        size_t len;

        sign_ok(name, data, sizeof(data) - 1, &block, &len);
        ck_assert_int_eq(signature_parse_info(block, len, &info, &err), 0);
        return info;
}

static Revocations *list_new(uint64_t version) {
        Revocations *rl = calloc(1, sizeof(Revocations));
        ck_assert_ptr_nonnull(rl);
        rl->version = version;
        rl->created = NOW;
        return rl;
}

/* Write @rl signed by @signer and parse it back. */
static Revocations *round_trip(Revocations *rl, const char *signer) {
        _cleanup_(signer_freep) Signer *s = NULL;
        _cleanup_free_ uint8_t *file = NULL;
        Revocations *back = NULL;
        char key[64], crt[64];
        TpError err = {};
        size_t len;

        snprintf(key, sizeof(key), "%s.key", signer);
        snprintf(crt, sizeof(crt), "%s.crt", signer);
        ck_assert_int_eq(signer_load(P(key), P(crt), &s, &err), 0);
        ck_assert_msg(revocations_write(rl, s, &file, &len, &err) == 0, "%s", err.message);
        ck_assert(memcmp(file, "TPREVOK\0", 8) == 0);
        ck_assert_msg(revocations_parse(file, len, "test.revocations", &back, &err) == 0, "%s", err.message);
        return back;
}

START_TEST(test_list) {
        _cleanup_(revocations_freep) Revocations *rl = list_new(3), *back = NULL;
        SignatureInfo revoked = leaf_info("revoked-signer"), other = leaf_info("other-signer");
        RevokedEntry by_key = { .kind = REVOKED_KEY }, by_cert = { .kind = REVOKED_CERT };
        char signer[256];
        TpError err = {};

        memcpy(by_key.key_sha256, revoked.key_sha256, SHA256_DIGEST_SIZE);
        snprintf(by_key.subject, sizeof(by_key.subject), "%.100s", revoked.subject);
        snprintf(by_key.reason, sizeof(by_key.reason), "key compromise");
        snprintf(by_cert.issuer, sizeof(by_cert.issuer), "%s", other.issuer);
        ck_assert_int_eq(strlen(other.serial) % 2, 0);
        for (size_t i = 0; other.serial[2 * i]; i++)
                ck_assert_int_eq(sscanf(other.serial + 2 * i, "%2hhx", &by_cert.serial[by_cert.serial_len++]), 1);
        ck_assert_int_eq(revocations_add(rl, &by_key, &err), 0);
        ck_assert_int_eq(revocations_add(rl, &by_cert, &err), 0);
        ck_assert_int_eq(revocations_add(rl, &by_key, &err), -EEXIST);
        back = round_trip(rl, "signer");
        ck_assert_uint_eq(back->version, 3);
        ck_assert_int_eq(back->created, NOW);
        ck_assert_uint_eq(back->n, 2);
        ck_assert_str_eq(back->entries[0].reason, "key compromise");

        SignatureTrust root = { .ca_path = P("ca.pem"), .now = NOW };
        ck_assert_int_eq(revocations_verify(back, "test.revocations", &root, signer, &err), 0);
        ck_assert_str_eq(signer, "CN=ci-signer");
        SignatureTrust wrong_root = { .ca_path = P("channel-ca.pem"), .now = NOW };
        expect(revocations_verify(back, "test.revocations", &wrong_root, NULL, &err), &err, -EKEYREJECTED,
               "test.revocations: certificate chain does not verify", "wrong root");

        /* What it names is revoked, by key or by certificate; the rest is not. */
        char ca_dir[300];       /* P()'s buffers are reused by the calls below */
        snprintf(ca_dir, sizeof(ca_dir), "%s", P("ca.d"));
        SignatureTrust t = { .ca_path = ca_dir, .now = NOW, .revoked = back };
        SignatureInfo info;
        expect(verify_with("revoked-signer", &t, &info, &err), &err, -EKEYREVOKED,
               "certificate 'CN=revoked-signer' is revoked by revocation list version 3 (key ", "by key");
        ck_assert_msg(strstr(err.message, "('CN=revoked-signer'): key compromise)"), "%s", err.message);
        expect(verify_with("other-signer", &t, &info, &err), &err, -EKEYREVOKED,
               "certificate 'CN=other-signer' is revoked by revocation list version 3 (certificate ", "by cert");
        expect(verify_with("signer", &t, &info, &err), &err, 0, NULL, "not listed");
        ck_assert(revocations_match(back, info.key_sha256, info.issuer, NULL, 0) == NULL);

        /* An intermediate listed revokes every chain through it. */
        _cleanup_(revocations_freep) Revocations *inter = list_new(4), *inter_back = NULL;
        RevokedEntry by_inter = { .kind = REVOKED_CERT };
        mbedtls_x509_crt crt;
        mbedtls_x509_crt_init(&crt);
        ck_assert_int_eq(mbedtls_x509_crt_parse_file(&crt, P("intermediate.pem")), 0);
        snprintf(by_inter.issuer, sizeof(by_inter.issuer), "CN=TaskPatch Test Root CA");
        memcpy(by_inter.serial, crt.serial.p, crt.serial.len);
        by_inter.serial_len = crt.serial.len;
        mbedtls_x509_crt_free(&crt);
        ck_assert_int_eq(revocations_add(inter, &by_inter, &err), 0);
        inter_back = round_trip(inter, "signer");
        t.revoked = inter_back;
        expect(verify_with("signer", &t, &info, &err), &err, -EKEYREVOKED,
               "certificate 'CN=TaskPatch Test Intermediate CA' is revoked by revocation list version 4", "inter");
        expect(verify_with("other-signer", &t, &info, &err), &err, 0, NULL, "other root");
}
END_TEST

/* Serial numbers: leading zeros, odd digit counts and case do not matter. */
START_TEST(test_serial_forms) {
        static const char *const forms[] = { "03e9", "3e9", "0003E9", "3E9" };
        uint8_t want[] = { 0x03, 0xe9 };

        for (size_t i = 0; i < ELEMENTSOF(forms); i++) {
                char text[256];
                int n = snprintf(text, sizeof(text), "format: 1\nversion: 1\ncreated: 2026-12-01T00:00:00Z\n"
                                 "revoked:\n- {issuer: 'CN=x', serial: '%s'}\n", forms[i]);
                _cleanup_free_ uint8_t *file = NULL;
                _cleanup_(revocations_freep) Revocations *rl = NULL;
                TpError err = {};
                size_t len;
                static const SignedFileKind k = { REVOCATIONS_MAGIC, "revocation list", 1, 1, REVOCATIONS_MAX_TEXT };
                ck_assert_int_eq(signed_file_pack(&k, 1, text, (size_t) n, (const uint8_t *) "s", 1, &file, &len), 0);
                ck_assert_msg(revocations_parse(file, len, "t", &rl, &err) == 0, "%s: %s", forms[i], err.message);
                ck_assert_uint_eq(rl->entries[0].serial_len, 2);
                ck_assert(memcmp(rl->entries[0].serial, want, 2) == 0);
                uint8_t padded[] = { 0x00, 0x03, 0xe9 };
                ck_assert_ptr_nonnull(revocations_match(rl, (uint8_t[32]) {}, "CN=x", padded, 3));
                ck_assert_ptr_null(revocations_match(rl, (uint8_t[32]) {}, "CN=y", padded, 3));
        }
}
END_TEST

/* ---- bad input ----------------------------------------------------------------------------------- */

#define HEAD "format: 1\nversion: 2\ncreated: 2026-12-01T00:00:00Z\n"
#define KEY "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static const struct {
        const char *text;
        int want;
        const char *substr;
} bad_rows[] = {
        { HEAD "revoked: []\n", 0, NULL },
        { HEAD, -EBADMSG, "'revoked'" },
        { "format: 1\nversion: 0\ncreated: 2026-12-01T00:00:00Z\nrevoked: []\n", -EBADMSG, "at least 1" },
        { "format: 2\nversion: 1\ncreated: 2026-12-01T00:00:00Z\nrevoked: []\n", -EBADMSG, "differs from the header" },
        { HEAD "revoked: []\nextra: 1\n", -EBADMSG, "extra" },
        { HEAD "revoked:\n- {key_sha256: " KEY ", issuer: 'CN=x', serial: '01'}\n", -EBADMSG, "not both" },
        { HEAD "revoked:\n- {reason: nothing}\n", -EBADMSG, "not neither" },
        { HEAD "revoked:\n- {key_sha256: 0123}\n", -EBADMSG, "key_sha256" },
        { HEAD "revoked:\n- {issuer: 'CN=x'}\n", -EBADMSG, "'serial'" },
        { HEAD "revoked:\n- {serial: '01'}\n", -EBADMSG, "'issuer'" },
        { HEAD "revoked:\n- {issuer: 'CN=x', serial: 'zz'}\n", -EBADMSG, "expected 1 to 20 bytes in hex" },
        { HEAD "revoked:\n- {issuer: 'CN=x', serial: '0102030405060708091011121314151617181920ff'}\n", -EBADMSG,
          "expected 1 to 20 bytes" },
        { HEAD "revoked:\n- {issuer: '', serial: '01'}\n", -EBADMSG, "'issuer' is empty" },
        { HEAD "revoked:\n- {key_sha256: " KEY "}\n- {key_sha256: " KEY "}\n", -EBADMSG, "the same entry twice" },
        { HEAD "revoked:\n- just a string\n", -EBADMSG, "not a mapping" },
        { HEAD "revoked:\n- {key_sha256: " KEY ", reason: \"tab\\there\"}\n", -EBADMSG, "'reason' is empty or holds" },
};

START_TEST(test_bad_input) {
        static const SignedFileKind k = { REVOCATIONS_MAGIC, "revocation list", 1, 1, REVOCATIONS_MAX_TEXT };
        _cleanup_free_ uint8_t *file = NULL;
        _cleanup_(revocations_freep) Revocations *rl = NULL;
        TpError err = {};
        size_t len;

        ck_assert_int_eq(signed_file_pack(&k, 1, bad_rows[_i].text, strlen(bad_rows[_i].text), (const uint8_t *) "s",
                                          1, &file, &len), 0);
        int r = revocations_parse(file, len, "t.revocations", &rl, &err);
        expect(r, &err, bad_rows[_i].want, bad_rows[_i].substr, bad_rows[_i].text);
        if (r < 0)
                ck_assert_ptr_null(rl);
}
END_TEST

/* The container's own checks: magic, format, sizes; a channel is not a revocation list. */
START_TEST(test_container) {
        static const SignedFileKind k = { REVOCATIONS_MAGIC, "revocation list", 1, 1, REVOCATIONS_MAX_TEXT };
        static const SignedFileKind chan = { "TPCHANL", "channel", 1, 2, 1u << 20 };
        const char *text = HEAD "revoked: []\n";
        _cleanup_free_ uint8_t *file = NULL, *other = NULL;
        Revocations *rl = NULL;
        TpError err = {};
        size_t len, other_len;

        ck_assert_int_eq(signed_file_pack(&chan, 1, text, strlen(text), (const uint8_t *) "s", 1, &other, &other_len),
                         0);
        expect(revocations_parse(other, other_len, "x", &rl, &err), &err, -EBADMSG,
               "x: not a TaskPatch revocation list (bad magic)", "channel");
        ck_assert_int_eq(signed_file_pack(&k, 1, text, strlen(text), (const uint8_t *) "s", 1, &file, &len), 0);
        expect(revocations_parse(file, len - 1, "x", &rl, &err), &err, -EBADMSG, "truncated or padded", "short");
        file[8] = 2;
        expect(revocations_parse(file, len, "x", &rl, &err), &err, -EPROTONOSUPPORT,
               "revocation list file format 2 is not supported (this build reads 1)", "format");
        file[8] = 1;
        memset(file + 24, 0, 8);
        expect(revocations_parse(file, len - 1, "x", &rl, &err), &err, -EKEYREJECTED, "the revocation list is unsigned",
               "unsigned");
        ck_assert_ptr_null(rl);
        expect(revocations_load(P("nope.revocations"), &rl, &err), &err, -ENOENT, "nope.revocations", "missing");
}
END_TEST

static Suite *revoke_suite(void) {
        Suite *s = suite_create("revoke");
        TCase *tc = tcase_create("revoke");

        tcase_add_unchecked_fixture(tc, pki_setup, pki_teardown);
        tcase_set_timeout(tc, 60);
        tcase_add_loop_test(tc, test_crl, 0, (int) ELEMENTSOF(crl_rows));
        tcase_add_test(tc, test_list);
        tcase_add_test(tc, test_serial_forms);
        tcase_add_loop_test(tc, test_bad_input, 0, (int) ELEMENTSOF(bad_rows));
        tcase_add_test(tc, test_container);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(revoke_suite)
