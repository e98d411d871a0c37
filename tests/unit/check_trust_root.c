/* SPDX-License-Identifier: MIT */
/*
 * The trust root (common/bundle/trust-root.c): a root written and read back, a rotation's
 * rules (version N+1 signed by a threshold of N's root role and of its own), expiry at the
 * caller's clock, a role's CAs held in memory verifying a signature (SignatureTrust.ca_pem),
 * and the parser against bad input. The PKI comes from tests/tools/make-pki.sh.
 */

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check-main.h"
#include "pki-fixture.h"
#include "signed-file.h"
#include "sigset.h"
#include "trust-root.h"

static char *read_all(const char *path) {
        FILE *f = fopen(path, "re");
        ck_assert_msg(f, "%s", path);
        char *buf = calloc(1, 1 << 16);
        size_t n = fread(buf, 1, (1 << 16) - 1, f);
        ck_assert_uint_gt(n, 0);
        fclose(f);
        return buf;
}

static void set_role(TrustRoot *t, TrustRole role, const char *file, unsigned threshold) {
        _cleanup_free_ char *pem = read_all(P(file));
        TpError err = {};
        int r = trust_root_set_role(t, role, pem, strlen(pem), threshold, file, &err);
        ck_assert_msg(r == 0, "%s: %d %s", file, r, err.message);
}

/* A root of @version: the root role @root_ca (@threshold), bundles ca.pem, channels channel-ca.pem. */
static TrustRoot *root_new(uint64_t version, const char *root_ca, unsigned threshold) {
        TrustRoot *t = calloc(1, sizeof(TrustRoot));
        ck_assert_ptr_nonnull(t);
        t->version = version;
        t->created = NOW;
        t->expires = NOW + 365 * 86400;
        set_role(t, TRUST_ROLE_ROOT, root_ca, threshold);
        set_role(t, TRUST_ROLE_BUNDLE, "ca.pem", 1);
        set_role(t, TRUST_ROLE_CHANNEL, "channel-ca.pem", 1);
        return t;
}

static Signer *signer_of(const char *name) {
        char key[64], crt[64];
        Signer *s = NULL;
        TpError err = {};

        snprintf(key, sizeof(key), "%s.key", name);
        snprintf(crt, sizeof(crt), "%s.crt", name);
        ck_assert_msg(signer_load(P(key), P(crt), &s, &err) == 0, "%s: %s", name, err.message);
        return s;
}

/* @t signed by the signers named in @names (NULL-terminated), parsed back from its file. */
static TrustRoot *sign_and_parse(TrustRoot *t, const char *const *names) {
        _cleanup_(signer_freep) Signer *s = signer_of(names[0]);
        _cleanup_free_ uint8_t *file = NULL;
        TrustRoot *back = NULL;
        TpError err = {};
        size_t len;

        for (size_t i = 1; names[i]; i++)
                signer_add(s, signer_of(names[i]));
        ck_assert_msg(trust_root_write(t, s, &file, &len, &err) == 0, "%s", err.message);
        ck_assert_msg(trust_root_parse(file, len, "t.root", &back, &err) == 0, "%s", err.message);
        return back;
}

START_TEST(test_round_trip) {
        _cleanup_(trust_root_freep) TrustRoot *t = root_new(1, "channel-ca.pem", 1);
        _cleanup_(trust_root_freep) TrustRoot *back = sign_and_parse(t, (const char *[]) { "channel-signer", NULL });
        SignatureTrust held = { .ca_path = P("channel-ca.pem"), .now = NOW };
        char signers[SIGNATURE_SIGNERS_MAX];
        TpError err = {};

        ck_assert_uint_eq(back->version, 1);
        ck_assert_int_eq(back->created, NOW);
        ck_assert_int_eq(back->expires, NOW + 365 * 86400);
        for (TrustRole i = 0; i < TRUST_ROLE_COUNT; i++) {
                ck_assert_str_eq(back->roles[i].ca_pem, t->roles[i].ca_pem);
                ck_assert_uint_eq(back->roles[i].threshold, 1);
                ck_assert_uint_eq(back->roles[i].n_certs, 1);
        }
        ck_assert_str_eq(back->roles[TRUST_ROLE_BUNDLE].name, "trust root v1's bundle role");
        ck_assert_int_eq(trust_root_verify(back, "t.root", &held, signers, &err), 0);
        ck_assert_str_eq(signers, "CN=channel-signer");
        /* Signed by a key the device's root role does not know. */
        held.ca_path = P("ca.pem");
        expect(trust_root_verify(back, "t.root", &held, NULL, &err), &err, -EKEYREJECTED,
               "t.root: trust root version 1 is not signed as the root role this device holds", "foreign");
}
END_TEST

/* v1's root role is channel-ca; v2 moves it to rotated-ca: both must sign v2. */
START_TEST(test_rotation) {
        _cleanup_(trust_root_freep) TrustRoot *v1 = root_new(1, "channel-ca.pem", 1);
        SignatureTrust base = { .now = NOW };
        SignatureTrust held = trust_root_role(v1, TRUST_ROLE_ROOT, &base);
        TpError err = {};
        static const struct {
                const char *signers[3];
                int want;
                const char *substr;
        } rows[] = {
                { { "channel-signer", "rotated-signer" }, 0, NULL },
                { { "rotated-signer", "channel-signer" }, 0, NULL },
                { { "channel-signer" }, -EKEYREJECTED, "is not signed by its own root role" },
                { { "rotated-signer" }, -EKEYREJECTED, "is not signed as the root role this device holds (trust root "
                  "v1's root role) requires" },
                { { "signer", "rotated-signer" }, -EKEYREJECTED, "this device holds" },
        };

        for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
                _cleanup_(trust_root_freep) TrustRoot *v2 = root_new(2, "rotated-ca.pem", 1);
                _cleanup_(trust_root_freep) TrustRoot *back = sign_and_parse(v2, rows[i].signers);
                expect(trust_root_verify(back, "v2.root", &held, NULL, &err), &err, rows[i].want, rows[i].substr,
                       rows[i].signers[0]);
        }
}
END_TEST

/* The root role needs two of its keys: one of k compromised is not enough. */
START_TEST(test_threshold) {
        _cleanup_(trust_root_freep) TrustRoot *v1 = root_new(1, "channel-ca.pem", 2);
        SignatureTrust base = { .now = NOW };
        SignatureTrust held = trust_root_role(v1, TRUST_ROLE_ROOT, &base);
        TpError err = {};

        _cleanup_(trust_root_freep) TrustRoot *one = root_new(2, "channel-ca.pem", 2);
        _cleanup_(trust_root_freep) TrustRoot *one_back = sign_and_parse(one, (const char *[]) { "channel-signer", NULL });
        expect(trust_root_verify(one_back, "v2.root", &held, NULL, &err), &err, -EKEYREJECTED,
               "1 distinct signer verified (CN=channel-signer), 2 needed", "one of two");

        _cleanup_(trust_root_freep) TrustRoot *two = root_new(2, "channel-ca.pem", 2);
        _cleanup_(trust_root_freep) TrustRoot *two_back =
                sign_and_parse(two, (const char *[]) { "channel-signer", "channel-signer2", NULL });
        ck_assert_msg(trust_root_verify(two_back, "v2.root", &held, NULL, &err) == 0, "%s", err.message);

        /* Lowering the threshold needs the old threshold still. */
        _cleanup_(trust_root_freep) TrustRoot *lower = root_new(2, "channel-ca.pem", 1);
        _cleanup_(trust_root_freep) TrustRoot *lower_back =
                sign_and_parse(lower, (const char *[]) { "channel-signer", NULL });
        expect(trust_root_verify(lower_back, "v2.root", &held, NULL, &err), &err, -EKEYREJECTED, "2 needed", "lower");
}
END_TEST

START_TEST(test_expiry) {
        _cleanup_(trust_root_freep) TrustRoot *t = root_new(1, "channel-ca.pem", 1);
        _cleanup_(trust_root_freep) TrustRoot *back = sign_and_parse(t, (const char *[]) { "channel-signer", NULL });
        SignatureTrust held = { .ca_path = P("channel-ca.pem"), .now = NOW + 366 * 86400 };
        TpError err = {};

        expect(trust_root_verify(back, "t.root", &held, NULL, &err), &err, -EKEYEXPIRED,
               "t.root: trust root version 1 expired on 2027-11-29T13:00:00Z", "expired");
        held.now = SIGNATURE_CLOCK_UNKNOWN;
        ck_assert_int_eq(trust_root_verify(back, "t.root", &held, NULL, &err), 0);
}
END_TEST

/* A role's CAs in memory verify what that role signs, and only that. */
START_TEST(test_role_trust) {
        _cleanup_(trust_root_freep) TrustRoot *t = root_new(1, "channel-ca.pem", 1);
        static const char data[] = "a manifest";
        _cleanup_free_ uint8_t *good = NULL, *other = NULL;
        SignatureTrust base = { .now = NOW };
        TpError err = {};
        size_t good_len, other_len;

        set_role(t, TRUST_ROLE_BUNDLE, "bundle2-ca.pem", 1);
        SignatureTrust bundle = trust_root_role(t, TRUST_ROLE_BUNDLE, &base);
        sign_ok("bundle2-signer", data, sizeof(data), &good, &good_len);
        sign_ok("signer", data, sizeof(data), &other, &other_len);
        ck_assert_int_eq(signature_verify_trust(good, good_len, data, sizeof(data), &bundle, NULL, &err), 0);
        expect(signature_verify_trust(other, other_len, data, sizeof(data), &bundle, NULL, &err), &err, -EKEYREJECTED,
               "does not verify against", "the retired CA");
        SignatureTrust channel = trust_root_role(t, TRUST_ROLE_CHANNEL, &base);
        expect(signature_verify_trust(good, good_len, data, sizeof(data), &channel, NULL, &err), &err, -EKEYREJECTED,
               "does not verify against", "a bundle key on a channel");
}
END_TEST

#define HEAD "format: 1\nversion: 2\ncreated: 2026-12-01T00:00:00Z\nexpires: 2027-12-01T00:00:00Z\n"

static char *text_with(const char *head, const char *root_pem, const char *extra) {
        _cleanup_free_ char *ca = read_all(P("channel-ca.pem"));
        _cleanup_free_ char *role = read_all(P(root_pem));
        char *out = NULL;
        /* PEM as YAML double-quoted strings: newlines escaped. */
        char *esc_ca = calloc(1, 3 * strlen(ca) + 1), *esc_role = calloc(1, 3 * strlen(role) + 1);
        for (size_t i = 0, j = 0; ca[i]; i++)
                j += (size_t) sprintf(esc_ca + j, ca[i] == '\n' ? "\\n" : "%c", ca[i]);
        for (size_t i = 0, j = 0; role[i]; i++)
                j += (size_t) sprintf(esc_role + j, role[i] == '\n' ? "\\n" : "%c", role[i]);
        ck_assert_int_gt(asprintf(&out, "%sroles:\n  root: {threshold: 1, ca: \"%s\"}\n  bundle: {threshold: 1, ca: "
                                  "\"%s\"}\n%s", head, esc_role, esc_ca, extra), 0);
        free(esc_ca);
        free(esc_role);
        return out;
}

static const struct {
        const char *head, *root_pem, *extra;
        int want;
        const char *substr;
} bad_rows[] = {
        { HEAD, "channel-ca.pem", "", -EBADMSG, "'channel'" },
        { HEAD, "signer-leaf.crt", "  channel: {threshold: 1, ca: x}\n", -EBADMSG,
          "role 'root': certificate 'CN=ci-signer' is not a CA" },
        { HEAD, "channel-ca.pem", "  channel: {threshold: 1, ca: x}\n", -EBADMSG, "role 'channel': not PEM" },
        { HEAD, "channel-ca.pem", "  channel: {threshold: 0, ca: x}\n", -EBADMSG, "threshold 0 is not 1..8" },
        { HEAD, "channel-ca.pem", "  channel: {threshold: 9, ca: x}\n", -EBADMSG, "threshold 9 is not 1..8" },
        { HEAD, "channel-ca.pem", "  channel: {threshold: 1, ca: x, url: y}\n", -EBADMSG, "url" },
        { HEAD, "channel-ca.pem", "  channel: {threshold: 1, ca: x}\n  devices: {}\n", -EBADMSG, "devices" },
        { "format: 1\nversion: 0\ncreated: 2026-12-01T00:00:00Z\nexpires: 2027-12-01T00:00:00Z\n", "channel-ca.pem",
          "  channel: {threshold: 1, ca: x}\n", -EBADMSG, "'version' must be at least 1" },
        { "format: 1\nversion: 1\ncreated: 2026-12-01T00:00:00Z\nexpires: 2026-12-01T00:00:00Z\n", "channel-ca.pem",
          "  channel: {threshold: 1, ca: x}\n", -EBADMSG, "'expires' is not after 'created'" },
        { "format: 1\nversion: 1\ncreated: 2026-12-01T00:00:00Z\n", "channel-ca.pem",
          "  channel: {threshold: 1, ca: x}\n", -EBADMSG, "expires" },
        { "format: 2\nversion: 1\ncreated: 2026-12-01T00:00:00Z\nexpires: 2027-12-01T00:00:00Z\n", "channel-ca.pem",
          "", -EBADMSG, "differs from the header's 1" },
};

START_TEST(test_bad_input) {
        static const SignedFileKind k = { TRUST_ROOT_MAGIC, "trust root", 1, 1, TRUST_ROOT_MAX_TEXT };
        _cleanup_free_ char *text = text_with(bad_rows[_i].head, bad_rows[_i].root_pem, bad_rows[_i].extra);
        _cleanup_free_ uint8_t *file = NULL;
        _cleanup_(trust_root_freep) TrustRoot *t = NULL;
        TpError err = {};
        size_t len;

        ck_assert_int_eq(signed_file_pack(&k, 1, text, strlen(text), (const uint8_t *) "s", 1, &file, &len), 0);
        int r = trust_root_parse(file, len, "t.root", &t, &err);
        expect(r, &err, bad_rows[_i].want, bad_rows[_i].substr, bad_rows[_i].extra);
        ck_assert_ptr_null(t);
}
END_TEST

/* More CAs than a role holds; a revocation list is not a trust root. */
START_TEST(test_caps) {
        _cleanup_free_ char *one = read_all(P("channel-ca.pem"));
        char *many = calloc(17, strlen(one) + 1);
        TrustRoot t = {};
        TpError err = {};

        for (int i = 0; i < 17; i++)
                strcat(many, one);
        expect(trust_root_set_role(&t, TRUST_ROLE_ROOT, many, strlen(many), 1, "many.pem", &err), &err, -E2BIG,
               "many.pem: more than 16 certificates", "17 CAs");
        free(many);
        expect(trust_root_set_role(&t, TRUST_ROLE_ROOT, one, strlen(one), 9, "one.pem", &err), &err, -EINVAL,
               "threshold 9", "threshold");

        static const SignedFileKind list = { "TPREVOK", "revocation list", 1, 1, 1u << 20 };
        _cleanup_free_ uint8_t *file = NULL;
        TrustRoot *r = NULL;
        size_t len;
        ck_assert_int_eq(signed_file_pack(&list, 1, "x: 1\n", 5, (const uint8_t *) "s", 1, &file, &len), 0);
        expect(trust_root_parse(file, len, "x", &r, &err), &err, -EBADMSG, "x: not a TaskPatch trust root (bad magic)",
               "a list");
        expect(trust_root_load(P("nope.root"), &r, &err), &err, -ENOENT, "nope.root", "missing");
}
END_TEST

static Suite *trust_root_suite(void) {
        Suite *s = suite_create("trust-root");
        TCase *tc = tcase_create("trust-root");

        tcase_add_unchecked_fixture(tc, pki_setup, pki_teardown);
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_round_trip);
        tcase_add_test(tc, test_rotation);
        tcase_add_test(tc, test_threshold);
        tcase_add_test(tc, test_expiry);
        tcase_add_test(tc, test_role_trust);
        tcase_add_loop_test(tc, test_bad_input, 0, (int) ELEMENTSOF(bad_rows));
        tcase_add_test(tc, test_caps);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(trust_root_suite)
