/* SPDX-License-Identifier: MIT */
/*
 * Signature sets (common/bundle/sigset.c): several signers over the same bytes, a threshold of
 * distinct signers, the same key counted once, and the parser against bad input. The PKI comes
 * from tests/tools/make-pki.sh (pki-fixture.h).
 */

#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check-main.h"
#include "le.h"
#include "pki-fixture.h"
#include "sigset.h"

static const char data[] = "format: 1\nchannel: stable\nserial: 9\n";

/* A section of the blocks of @names, each signed over data, added one by one. */
static uint8_t *section_of(const char *const *names, size_t n, size_t *ret_len) {
        uint8_t *section = NULL;
        size_t len = 0;

        for (size_t i = 0; i < n; i++) {
                _cleanup_free_ uint8_t *block = NULL;
                uint8_t *grown = NULL;
                size_t block_len, grown_len;
                TpError err = {};
                sign_ok(names[i], data, sizeof(data) - 1, &block, &block_len);
                ck_assert_msg(signature_set_add(section, len, block, block_len, &grown, &grown_len, &err) == 0, "%s",
                              err.message);
                free(section);
                section = grown;
                len = grown_len;
        }
        *ret_len = len;
        return section;
}

START_TEST(test_threshold) {
        static const char *const two[] = { "signer", "noeku-signer" };
        _cleanup_free_ uint8_t *one = NULL, *both = NULL;
        size_t one_len, both_len;
        char signers[SIGNATURE_SIGNERS_MAX];
        SignatureInfo info;
        TpError err = {};
        char ca[300];

        snprintf(ca, sizeof(ca), "%s", P("ca.pem"));
        one = section_of(two, 1, &one_len);
        both = section_of(two, 2, &both_len);
        ck_assert(memcmp(one, "TPSIG1\0\0", 8) == 0);           /* one signer: the plain block */
        ck_assert(memcmp(both, "TPSIGS1\0", 8) == 0);
        SignatureTrust t = { .ca_path = ca, .now = NOW, .threshold = 2 };
        expect(signature_set_verify(one, one_len, data, sizeof(data) - 1, &t, &info, signers, &err), &err,
               -EKEYREJECTED, "1 distinct signer verified (CN=ci-signer), 2 needed", "one of two");
        expect(signature_set_verify(both, both_len, data, sizeof(data) - 1, &t, &info, signers, &err), &err, 0, NULL,
               "two of two");
        ck_assert_str_eq(signers, "CN=ci-signer, CN=noeku-signer");
        ck_assert_str_eq(info.subject, "CN=ci-signer");
        t.threshold = 3;
        expect(signature_set_verify(both, both_len, data, sizeof(data) - 1, &t, NULL, NULL, &err), &err, -EKEYREJECTED,
               "2 distinct signers verified", "three");
        /* Other bytes: no signature verifies, and the first one's error is the answer. */
        t.threshold = 1;
        expect(signature_set_verify(both, both_len, "x", 1, &t, NULL, NULL, &err), &err, -EKEYREJECTED,
               "signature does not match the signed data", "other data");

        /* The same key again: refused when added, and counted once when a set holds it twice. */
        _cleanup_free_ uint8_t *again = NULL, *block = NULL, *twice = NULL;
        size_t again_len, block_len;
        sign_ok("signer", data, sizeof(data) - 1, &block, &block_len);
        expect(signature_set_add(one, one_len, block, block_len, &again, &again_len, &err), &err, -EEXIST,
               "already signed with this key ('CN=ci-signer')", "twice");
        twice = malloc(10 + 2 * (4 + block_len));
        memcpy(twice, "TPSIGS1\0", 8);
        put_le16(twice + 8, 2);
        for (size_t i = 0; i < 2; i++) {
                put_le32(twice + 10 + i * (4 + block_len), (uint32_t) block_len);
                memcpy(twice + 14 + i * (4 + block_len), block, block_len);
        }
        t.threshold = 2;
        expect(signature_set_verify(twice, 10 + 2 * (4 + block_len), data, sizeof(data) - 1, &t, NULL, NULL, &err),
               &err, -EKEYREJECTED, "1 distinct signer verified", "the same key twice");

        /* A revoked signer does not count; with a threshold of one, the other still carries it. */
        static const char *const with_revoked[] = { "revoked-signer", "signer" };
        _cleanup_free_ uint8_t *mixed = NULL;
        size_t mixed_len;
        char crl[300];
        snprintf(crl, sizeof(crl), "%s", P("intermediate.crl"));
        mixed = section_of(with_revoked, 2, &mixed_len);
        SignatureTrust r = { .ca_path = ca, .now = NOW, .crl_path = crl, .threshold = 1 };
        expect(signature_set_verify(mixed, mixed_len, data, sizeof(data) - 1, &r, NULL, signers, &err), &err, 0, NULL,
               "revoked + good, 1");
        ck_assert_str_eq(signers, "CN=ci-signer");
        r.threshold = 2;
        expect(signature_set_verify(mixed, mixed_len, data, sizeof(data) - 1, &r, NULL, NULL, &err), &err,
               -EKEYREJECTED, "another signature: certificate 'CN=revoked-signer' is revoked", "revoked + good, 2");
}
END_TEST

START_TEST(test_bad_sets) {
        uint8_t buf[64] = "TPSIGS1";
        SignatureSet set;
        TpError err = {};

        put_le16(buf + 8, 0);
        expect(signature_set_parse(buf, 10, &set, &err), &err, -EBADMSG, "0 blocks, expected 1..8", "empty");
        put_le16(buf + 8, 9);
        expect(signature_set_parse(buf, 10, &set, &err), &err, -EBADMSG, "9 blocks", "too many");
        put_le16(buf + 8, 1);
        expect(signature_set_parse(buf, 12, &set, &err), &err, -EBADMSG, "truncated at block 1", "short length");
        put_le32(buf + 10, 40);
        expect(signature_set_parse(buf, 30, &set, &err), &err, -EBADMSG, "length 40 at offset 10", "past the end");
        put_le32(buf + 10, 4);
        expect(signature_set_parse(buf, 20, &set, &err), &err, -EBADMSG, "2 trailing bytes", "trailing");
        ck_assert_int_eq(signature_set_parse(buf, 18, &set, &err), 0);
        ck_assert_uint_eq(set.n, 1);
        ck_assert_ptr_eq(set.sigs[0].block, buf + 14);
        expect(signature_set_parse((const uint8_t *) "NOTASIG!xx", 10, &set, &err), &err, -EBADMSG, "bad magic",
               "magic");
}
END_TEST

static Suite *sigset_suite(void) {
        Suite *s = suite_create("sigset");
        TCase *tc = tcase_create("sigset");

        tcase_add_unchecked_fixture(tc, pki_setup, pki_teardown);
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_threshold);
        tcase_add_test(tc, test_bad_sets);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(sigset_suite)
