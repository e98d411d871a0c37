/* SPDX-License-Identifier: MIT */
/*
 * common/bundle/sign.c, the producer's side: signer_load()'s checks of a key and its certificate
 * chain, and signer_check_dates() / signer_validity(), the dates signer_load() has no clock for.
 * The test PKI comes from tests/tools/make-pki.sh (pki-fixture.h).
 */

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "check-main.h"
#include "pki-fixture.h"
#include "sign.h"

/* ---- signer_load ---------------------------------------------------------------------------------- */

static const struct {
        const char *key, *crt;
        int want;
        const char *substr;
} load_rows[] = {
        { "signer.key", "signer.crt", 0, NULL },
        { "signer.key", "signer-leaf.crt", 0, NULL },
        { "expired-signer.key", "expired-signer.crt", 0, NULL },        /* no clock here */
        { "nodigsig-signer.key", "nodigsig-signer.crt", -EKEYREJECTED, "lacks key usage digitalSignature" },
        { "noku-signer.key", "noku-signer.crt", -EKEYREJECTED, "has no key usage extension" },
        { "serverauth-signer.key", "serverauth-signer.crt", -EKEYREJECTED,
          "serverauth-signer.crt: signer certificate 'CN=serverauth-signer': extended key usage present without codeSigning" },
        { "ca-signer.key", "ca-signer.crt", -EKEYREJECTED,
          "ca-signer.crt: signer certificate 'CN=ca-signer' is a CA certificate (basicConstraints CA:TRUE)" },
        { "anyeku-signer.key", "anyeku-signer.crt", -EKEYREJECTED,
          "anyeku-signer.crt: signer certificate 'CN=anyeku-signer': extended key usage anyExtendedKeyUsage" },
        { "rsa-signer.key", "rsa-signer.crt", -EKEYREJECTED, "rsa-signer.key: key is not an ECDSA P-256 key (RSA-2048)" },
        { "p384-signer.key", "p384-signer.crt", -EKEYREJECTED, "key is not an ECDSA P-256 key (EC secp384r1)" },
        { "signer.key", "other-signer.crt", -EKEYREJECTED, "other-signer.crt: the first certificate does not match the key" },
        { "missing.key", "signer.crt", -ENOENT, "missing.key: No such file or directory" },
        { "signer.key", "missing.crt", -ENOENT, "missing.crt" },
        { "signer.crt", "signer.crt", -EBADMSG, "signer.crt: not a private key" },
        { "signer.key", "signer.key", -EBADMSG, "signer.key: not a certificate file" },
        { "encrypted.key", "signer.crt", -EBADMSG, "encrypted.key: the key is encrypted" },
        { "ca.d", "signer.crt", -EISDIR, "ca.d: is a directory" },
        { "signer.key", "empty.pem", -EBADMSG, "empty file" },
        { "signer.key", "long.crt", -E2BIG, "long.crt: 9 certificates, more than the limit of 8" },
        { "big.key", "signer.crt", -EFBIG, "big.key: 65537 bytes, more than the limit of 65536" },
        { "signer.key", "big.crt", -EFBIG, "big.crt: 262145 bytes, more than the limit of 262144" },
};

START_TEST(test_signer_load) {
        static int sentinel;
        Signer *s = (Signer *) &sentinel;
        TpError err = {};

        int r = signer_load(P(load_rows[_i].key), P(load_rows[_i].crt), &s, &err);
        expect(r, &err, load_rows[_i].want, load_rows[_i].substr, load_rows[_i].key);
        if (r < 0)
                ck_assert_ptr_eq(s, &sentinel);
        else
                ck_assert_ptr_null(signer_free(s));
        ck_assert_ptr_null(signer_free(NULL));
}
END_TEST

/* ---- the signer's dates, checked by the producer ------------------------------------------------- */

static const struct {
        const char *name;
        int from, to;                   /* the certificate's validity: January 1st of these years */
        int y, mo, d, h, mi, s;         /* y == 0: now = SIGNATURE_CLOCK_UNKNOWN; y < 0: now = -1 */
        int want;
        const char *substr;
} dates_rows[] = {
        { "signer", 2024, 2040, 2026, 11, 29, 13, 0, 0, 0, NULL },
        { "signer", 2024, 2040, 2024, 1, 1, 0, 0, 0, 0, NULL },        /* both ends inclusive */
        { "signer", 2024, 2040, 2040, 1, 1, 0, 0, 0, 0, NULL },
        { "signer", 2024, 2040, 2023, 12, 31, 23, 59, 59, -EKEYREJECTED,
          "signer certificate 'CN=ci-signer' is not valid before 2024-01-01 00:00:00 UTC (valid 2024-01-01 00:00:00 "
          "UTC to 2040-01-01 00:00:00 UTC; now 2023-12-31 23:59:59 UTC)" },
        { "signer", 2024, 2040, 2040, 1, 1, 0, 0, 1, -EKEYREJECTED,
          "signer certificate 'CN=ci-signer' expired on 2040-01-01 00:00:00 UTC (valid 2024-01-01 00:00:00 UTC to "
          "2040-01-01 00:00:00 UTC; now 2040-01-01 00:00:01 UTC)" },
        { "expired-signer", 2000, 2001, 2026, 11, 29, 13, 0, 0, -EKEYREJECTED,
          "signer certificate 'CN=expired-signer' expired on 2001-01-01 00:00:00 UTC (valid 2000-01-01 00:00:00 UTC "
          "to 2001-01-01 00:00:00 UTC; now 2026-11-29 13:00:00 UTC)" },
        { "expired-signer", 2000, 2001, 2000, 6, 1, 0, 0, 0, 0, NULL },
        { "future-signer", 2090, 2099, 2026, 11, 29, 13, 0, 0, -EKEYREJECTED,
          "signer certificate 'CN=future-signer' is not valid before 2090-01-01 00:00:00 UTC (valid 2090-01-01 "
          "00:00:00 UTC to 2099-01-01 00:00:00 UTC; now 2026-11-29 13:00:00 UTC)" },
        /* Only the signer's own dates: the intermediate ends in 2095, the producer's check does not look. */
        { "future-signer", 2090, 2099, 2096, 1, 1, 0, 0, 0, 0, NULL },
        /* Clock unknown: nothing to compare with. */
        { "expired-signer", 2000, 2001, 0, 0, 0, 0, 0, 0, 0, NULL },
        { "future-signer", 2090, 2099, -1, 0, 0, 0, 0, 0, 0, NULL },
};

START_TEST(test_signer_dates) {
        _cleanup_(signer_freep) Signer *s = NULL;
        char key[64], crt[64], what[128];
        time_t now, not_before = 1, not_after = 1;
        TpError err = {};

        snprintf(key, sizeof(key), "%s.key", dates_rows[_i].name);
        snprintf(crt, sizeof(crt), "%s.crt", dates_rows[_i].name);
        ck_assert_int_eq(signer_load(P(key), P(crt), &s, &err), 0);
        if (dates_rows[_i].y == 0)
                now = SIGNATURE_CLOCK_UNKNOWN;
        else if (dates_rows[_i].y < 0)
                now = -1;
        else
                now = T(dates_rows[_i].y, dates_rows[_i].mo, dates_rows[_i].d, dates_rows[_i].h, dates_rows[_i].mi,
                        dates_rows[_i].s);
        snprintf(what, sizeof(what), "row %d (%s at %jd)", _i, dates_rows[_i].name, (intmax_t) now);
        expect(signer_check_dates(s, now, &err), &err, dates_rows[_i].want, dates_rows[_i].substr, what);

        /* The dates, whatever the clock. */
        signer_validity(s, &not_before, &not_after);
        ck_assert_int_eq(not_before, DAY(dates_rows[_i].from, 1, 1));
        ck_assert_int_eq(not_after, DAY(dates_rows[_i].to, 1, 1));
}
END_TEST

static Suite *signer_suite(void) {
        Suite *s = suite_create("signer");
        TCase *tc = tcase_create("signer");

        tcase_add_unchecked_fixture(tc, pki_setup, pki_teardown);
        tcase_set_timeout(tc, 60);
        tcase_add_loop_test(tc, test_signer_load, 0, (int) ELEMENTSOF(load_rows));
        tcase_add_loop_test(tc, test_signer_dates, 0, (int) ELEMENTSOF(dates_rows));
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(signer_suite)
