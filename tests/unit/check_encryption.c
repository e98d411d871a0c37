/* SPDX-License-Identifier: MIT */
/*
 * common/bundle/encryption.c: recipients' keys, the content key wrapped for each and unwrapped by
 * each alone, the manifest section written and read back, its refusals, and the frame cipher.
 * (Whole encrypted bundles, on the producer and the device: tests/integration/test-encryption.sh.)
 */

#include <check.h>
#include <errno.h>
#include <string.h>

#include <mbedtls/gcm.h>

#include "check-main.h"
#include "encryption.h"
#include "pki-fixture.h"
#include "yaml-doc.h"
#include "yaml-write.h"

static RecipientKey *recipient(const char *name) {
        RecipientKey *k = NULL;
        TpError err = {};
        int r = recipient_key_load(P(name), &k, &err);
        ck_assert_msg(r == 0, "recipient_key_load(%s): %d %s", name, r, err.message);
        return k;
}

static DecryptKey *device_key(const char *name) {
        DecryptKey *k = NULL;
        TpError err = {};
        int r = decrypt_key_load(P(name), &k, &err);
        ck_assert_msg(r == 0, "decrypt_key_load(%s): %d %s", name, r, err.message);
        return k;
}

/* The key id is what openssl prints for the public key's DER (SubjectPublicKeyInfo); @pubkey: a public key's openssl command. */
static void openssl_key_id(const char *pubkey, const char *name, uint8_t ret[SHA256_DIGEST_SIZE]) {
        char cmd[600], hex[SHA256_HEX_SIZE + 8] = "";
        snprintf(cmd, sizeof(cmd), "%s '%s' | openssl pkey -pubin -outform DER | sha256sum", pubkey, P(name));
        FILE *f = popen(cmd, "r");
        ck_assert_ptr_nonnull(f);
        ck_assert_ptr_nonnull(fgets(hex, sizeof(hex), f));
        ck_assert_int_eq(pclose(f), 0);
        hex[64] = '\0';
        ck_assert_int_eq(parse_sha256_hex(hex, ret), 0);
}

START_TEST(test_wrap_unwrap) {
        _cleanup_(recipient_key_freep) RecipientKey *dev = recipient("device.crt"), *fleet = recipient("fleet.pub");
        _cleanup_(decrypt_key_freep) DecryptKey *dk = device_key("device.key"), *fk = device_key("fleet.key"),
                                                *other = device_key("device2.key");
        _cleanup_(encryption_freep) Encryption *e = NULL;
        RecipientKey *keys[] = { dev, fleet };
        uint8_t key[ENCRYPTION_KEY_SIZE], got[ENCRYPTION_KEY_SIZE], id[SHA256_DIGEST_SIZE];
        TpError err = {};

        ck_assert_int_eq(encryption_new(keys, 2, key, &e, &err), 0);
        ck_assert_uint_eq(e->n_recipients, 2);
        ck_assert_str_eq(e->recipients[0].name, "CN=device-0001");
        ck_assert_ptr_null(e->recipients[1].name);
        openssl_key_id("openssl x509 -pubkey -noout -in", "device.crt", id);
        ck_assert_mem_eq(e->recipients[0].key_sha256, id, sizeof(id));
        ck_assert_mem_eq(decrypt_key_id(dk), id, sizeof(id));
        openssl_key_id("openssl pkey -pubin -in", "fleet.pub", id);
        ck_assert_mem_eq(e->recipients[1].key_sha256, id, sizeof(id));

        /* Each recipient alone opens it, to the same key. */
        ck_assert_int_eq(encryption_unwrap(e, dk, got, &err), 0);
        ck_assert_mem_eq(got, key, sizeof(key));
        memset(got, 0, sizeof(got));
        ck_assert_int_eq(encryption_unwrap(e, fk, got, &err), 0);
        ck_assert_mem_eq(got, key, sizeof(key));
        expect(encryption_unwrap(e, other, got, &err), &err, -ENOKEY,
               "encrypted for 2 keys (CN=device-0001 ", "another device");
        ck_assert_ptr_nonnull(strstr(err.message, "not for this device"));

        /* Every byte of a wrapped key and a flipped point are refused, never a wrong key. */
        for (size_t i = 0; i < ENCRYPTION_WRAPPED_SIZE; i++) {
                e->recipients[0].wrapped_key[i] ^= 0x40;
                expect(encryption_unwrap(e, dk, got, &err), &err, -EBADMSG, "does not open", "wrapped key");
                e->recipients[0].wrapped_key[i] ^= 0x40;
        }
        e->recipients[0].ephemeral[10] ^= 1;
        ck_assert_int_eq(encryption_unwrap(e, dk, got, &err), -EBADMSG);
        e->recipients[0].ephemeral[10] ^= 1;
        /* Another recipient's ephemeral key (a valid point): the agreement differs, the tag says so. */
        uint8_t mine[ENCRYPTION_POINT_SIZE];
        memcpy(mine, e->recipients[0].ephemeral, sizeof(mine));
        memcpy(e->recipients[0].ephemeral, e->recipients[1].ephemeral, sizeof(mine));
        expect(encryption_unwrap(e, dk, got, &err), &err, -EBADMSG, "does not open", "swapped ephemeral");
        memcpy(e->recipients[0].ephemeral, mine, sizeof(mine));
        /* A recipient entry copied under another key id does not open for it either (the id is the GCM aad). */
        Recipient saved = e->recipients[1];
        memcpy(e->recipients[1].ephemeral, e->recipients[0].ephemeral, sizeof(mine));
        memcpy(e->recipients[1].wrapped_key, e->recipients[0].wrapped_key, ENCRYPTION_WRAPPED_SIZE);
        expect(encryption_unwrap(e, fk, got, &err), &err, -EBADMSG, "does not open", "entry of another key");
        e->recipients[1] = saved;

        /* A fresh content key every time. */
        _cleanup_(encryption_freep) Encryption *e2 = NULL;
        uint8_t key2[ENCRYPTION_KEY_SIZE];
        ck_assert_int_eq(encryption_new(keys, 1, key2, &e2, &err), 0);
        ck_assert_int_ne(memcmp(key, key2, sizeof(key)), 0);
        ck_assert_int_ne(memcmp(e->recipients[0].ephemeral, e2->recipients[0].ephemeral, ENCRYPTION_POINT_SIZE), 0);
}
END_TEST

START_TEST(test_keys_refused) {
        RecipientKey *k = NULL;
        DecryptKey *d = NULL;
        TpError err = {};
        char cmd[600];

        snprintf(cmd, sizeof(cmd), "openssl pkey -in '%s' -pubout -out '%s' 2>/dev/null", P("p384-signer.key"),
                 P("p384.pub"));
        sh(cmd);
        expect(recipient_key_load(P("signonly-device.crt"), &k, &err), &err, -EKEYREJECTED,
               "keyUsage does not allow keyAgreement", "no keyAgreement");
        expect(recipient_key_load(P("p384.pub"), &k, &err), &err, -EKEYREJECTED, "not an EC P-256 key", "P-384");
        expect(recipient_key_load(P("rsa-signer.crt"), &k, &err), &err, -EKEYREJECTED, NULL, "RSA");
        expect(recipient_key_load(P("device.key"), &k, &err), &err, -EBADMSG, "neither a certificate nor a public key",
               "a private key");
        expect(recipient_key_load(P("nope.crt"), &k, &err), &err, -ENOENT, NULL, "missing");
        ck_assert_ptr_null(k);
        expect(decrypt_key_load(P("device.crt"), &d, &err), &err, -EBADMSG, "not a private key", "a certificate");
        expect(decrypt_key_load(P("encrypted.key"), &d, &err), &err, -EBADMSG, "passphrase", "encrypted");
        expect(decrypt_key_load(P("p384-signer.key"), &d, &err), &err, -EKEYREJECTED, "not an EC P-256 key", "P-384");
        expect(decrypt_key_load(P("big.key"), &d, &err), &err, -EFBIG, NULL, "over the cap");
        ck_assert_ptr_null(d);

        _cleanup_(recipient_key_freep) RecipientKey *a = recipient("device.crt"), *b = recipient("device.crt");
        RecipientKey *twice[] = { a, b };
        Encryption *e = NULL;
        uint8_t key[ENCRYPTION_KEY_SIZE];
        expect(encryption_new(twice, 2, key, &e, &err), &err, -EINVAL, "hold the same key", "the same key twice");
        expect(encryption_new(twice, 0, key, &e, &err), &err, -EINVAL, "0 recipients", "none");
        ck_assert_ptr_null(e);
}
END_TEST

/* The section as the manifest writes it, read back whole. */
START_TEST(test_section_round_trip) {
        _cleanup_(recipient_key_freep) RecipientKey *dev = recipient("device.crt"), *fleet = recipient("fleet.pub");
        _cleanup_(encryption_freep) Encryption *e = NULL, *back = NULL;
        _cleanup_(yaml_node_freep) YamlNode *root = NULL;
        _cleanup_free_ char *text = NULL;
        RecipientKey *keys[] = { dev, fleet };
        uint8_t key[ENCRYPTION_KEY_SIZE];
        TpError err = {};
        size_t len;

        ck_assert_int_eq(encryption_new(keys, 2, key, &e, &err), 0);
        YamlWriter *w = yaml_writer_new(1u << 20);
        yaml_writer_map_start(w, false);
        encryption_write(w, e);
        yaml_writer_map_end(w);
        ck_assert_int_eq(yaml_writer_finish(w, "t", &text, &len, &err), 0);
        ck_assert_int_eq(yaml_doc_parse(text, len, len, "t", &root, &err), 0);
        ck_assert_msg(encryption_parse(yaml_map_get(root, "encryption"), &back, &err) == 0, "%s", err.message);
        ck_assert_uint_eq(back->n_recipients, 2);
        for (size_t i = 0; i < 2; i++) {
                ck_assert_mem_eq(back->recipients[i].key_sha256, e->recipients[i].key_sha256, SHA256_DIGEST_SIZE);
                ck_assert_mem_eq(back->recipients[i].ephemeral, e->recipients[i].ephemeral, ENCRYPTION_POINT_SIZE);
                ck_assert_mem_eq(back->recipients[i].wrapped_key, e->recipients[i].wrapped_key,
                                 ENCRYPTION_WRAPPED_SIZE);
        }
        ck_assert_str_eq(back->recipients[0].name, "CN=device-0001");
        ck_assert_ptr_null(back->recipients[1].name);
}
END_TEST

#define ID "b710afe89b52b23f4a696c46d8552f59ae1c772cfe1902a11275ce34268126bb"
#define ID2 "2a55a34bdea8293f7e54f9253b14fd9b065fa8ae4115be594ff8883e0b9f95b9"
#define EPH "04" "11111111111111111111111111111111111111111111111111111111111111112222222222222222222222222222222222222222222222222222222222222222"
#define WRAP "333333333333333333333333333333333333333333333333333333333333333344444444444444444444444444444444"
#define ONE(id, eph, wrap) "  - {key_sha256: " id ", ephemeral: " eph ", wrapped_key: " wrap "}\n"
#define HEAD "encryption:\n  cipher: aes-256-gcm\n  key_wrap: ecdh-p256-hkdf-sha256\n  recipients:\n"

static const struct {
        const char *text, *message;
} bad_rows[] = {
        { "encryption:\n  cipher: aes-256-gcm\n  key_wrap: ecdh-p256-hkdf-sha256\n  recipients: []\n", "0 recipients" },
        { "encryption:\n  cipher: aes-128-gcm\n  key_wrap: ecdh-p256-hkdf-sha256\n  recipients:\n" ONE(ID, EPH, WRAP),
          "cipher 'aes-128-gcm' with key_wrap 'ecdh-p256-hkdf-sha256' is not supported" },
        { "encryption:\n  cipher: aes-256-gcm\n  key_wrap: rsa-oaep\n  recipients:\n" ONE(ID, EPH, WRAP),
          "is not supported" },
        { "encryption:\n  key_wrap: ecdh-p256-hkdf-sha256\n  recipients:\n" ONE(ID, EPH, WRAP), "cipher" },
        { HEAD ONE(ID, EPH, WRAP) ONE(ID, EPH, WRAP), "recipient #1 repeats the key of #0" },
        { HEAD ONE(ID, EPH, "3333"), "'wrapped_key': expected 96 lowercase hex digits" },
        { HEAD ONE(ID, "05" "1111111111111111111111111111111111111111111111111111111111111111"
                           "2222222222222222222222222222222222222222222222222222222222222222", WRAP),
          "not an uncompressed point" },
        { HEAD ONE("B710AFE89B52B23F4A696C46D8552F59AE1C772CFE1902A11275CE34268126BB", EPH, WRAP), "key_sha256" },
        { HEAD "  - {key_sha256: " ID ", ephemeral: " EPH ", wrapped_key: " WRAP ", extra: 1}\n", "extra" },
        { HEAD "  - just a scalar\n", "recipient #0: expected a mapping" },
        { HEAD ONE(ID2, EPH, WRAP) "  - {key_sha256: " ID ", ephemeral: " EPH "}\n", "wrapped_key" },
        { "encryption:\n  cipher: aes-256-gcm\n  key_wrap: ecdh-p256-hkdf-sha256\n  recipients:\n" ONE(ID, EPH, WRAP)
          "  more: 1\n", "more" },
};

START_TEST(test_section_bad) {
        _cleanup_(yaml_node_freep) YamlNode *root = NULL;
        Encryption *e = NULL;
        TpError err = {};
        const char *t = bad_rows[_i].text;

        ck_assert_msg(yaml_doc_parse(t, strlen(t), 1u << 20, "manifest", &root, &err) == 0, "%s", err.message);
        int r = encryption_parse(yaml_map_get(root, "encryption"), &e, &err);
        ck_assert_msg(r < 0, "row %d accepted", _i);
        ck_assert_msg(strstr(err.message, bad_rows[_i].message), "row %d: '%s' lacks '%s'", _i, err.message,
                      bad_rows[_i].message);
        ck_assert_ptr_null(e);
}
END_TEST

/*
 * The frames are plain AES-256-GCM under the nonce "TPF1" + the span's index (le64): the same
 * bytes and tag as mbedTLS's GCM, which sealed the frames of bundles made before OpenSSL's
 * took over, so those still open. A frame sealed in place opens too.
 */
START_TEST(test_frames_are_gcm) {
        uint8_t key[ENCRYPTION_KEY_SIZE], plain[70001], mine[sizeof(plain)], theirs[sizeof(plain)];
        uint8_t nonce[12] = { 'T', 'P', 'F', '1', 9, 0, 0, 0, 0, 0, 0, 0 }, tag[16], their_tag[16];
        _cleanup_(frame_cipher_freep) FrameCipher *c = NULL;
        mbedtls_gcm_context gcm;

        for (size_t i = 0; i < sizeof(key); i++)
                key[i] = (uint8_t) (i * 13 + 5);
        for (size_t i = 0; i < sizeof(plain); i++)
                plain[i] = (uint8_t) (i * 17 + (i >> 9));
        ck_assert_int_eq(frame_cipher_new(key, &c), 0);
        frame_cipher_start(c, 9, true);
        frame_cipher_update(c, plain, mine, 4096);
        frame_cipher_update(c, plain + 4096, mine + 4096, sizeof(plain) - 4096);
        frame_cipher_tag(c, tag);

        mbedtls_gcm_init(&gcm);
        ck_assert_int_eq(mbedtls_gcm_setkey(&gcm, MBEDTLS_CIPHER_ID_AES, key, 256), 0);
        ck_assert_int_eq(mbedtls_gcm_crypt_and_tag(&gcm, MBEDTLS_GCM_ENCRYPT, sizeof(plain), nonce, sizeof(nonce), NULL,
                                                   0, plain, theirs, sizeof(their_tag), their_tag),
                         0);
        mbedtls_gcm_free(&gcm);
        ck_assert_mem_eq(mine, theirs, sizeof(plain));
        ck_assert_mem_eq(tag, their_tag, sizeof(tag));

        /* mbedTLS's frame opens here; in place, as the producer seals. */
        memcpy(mine, theirs, sizeof(plain));
        frame_cipher_start(c, 9, false);
        frame_cipher_update(c, mine, mine, sizeof(plain));
        ck_assert_int_eq(frame_cipher_check(c, their_tag), 0);
        ck_assert_mem_eq(mine, plain, sizeof(plain));
}
END_TEST

/* Sealed in one piece, opened in any pieces of whole blocks (the last one shorter), and the reverse. */
START_TEST(test_frames) {
        static const size_t pieces[] = { 16, 64, 4096, 65536 };
        uint8_t key[ENCRYPTION_KEY_SIZE], plain[100003], sealed[sizeof(plain)], opened[sizeof(plain)];
        uint8_t tag[ENCRYPTION_TAG_SIZE];
        _cleanup_(frame_cipher_freep) FrameCipher *c = NULL;

        for (size_t i = 0; i < sizeof(key); i++)
                key[i] = (uint8_t) (i * 7 + 1);
        for (size_t i = 0; i < sizeof(plain); i++)
                plain[i] = (uint8_t) (i * 31 + (i >> 8));
        ck_assert_int_eq(frame_cipher_new(key, &c), 0);
        frame_cipher_start(c, 5, true);
        frame_cipher_update(c, plain, sealed, sizeof(plain));
        frame_cipher_tag(c, tag);
        ck_assert_int_ne(memcmp(plain, sealed, 64), 0);

        for (size_t p = 0; p < ELEMENTSOF(pieces); p++) {
                memset(opened, 0, sizeof(opened));
                frame_cipher_start(c, 5, false);
                for (size_t at = 0; at < sizeof(plain); at += pieces[p]) {
                        size_t n = sizeof(plain) - at < pieces[p] ? sizeof(plain) - at : pieces[p];
                        frame_cipher_update(c, sealed + at, opened + at, n);
                }
                ck_assert_int_eq(frame_cipher_check(c, tag), 0);
                ck_assert_mem_eq(opened, plain, sizeof(plain));
        }
        /* The nonce is the span's index: the frame of another span does not authenticate. */
        frame_cipher_start(c, 6, false);
        frame_cipher_update(c, sealed, opened, sizeof(plain));
        ck_assert_int_eq(frame_cipher_check(c, tag), -EBADMSG);
        /* Nor does a flipped bit, anywhere. */
        sealed[77777] ^= 4;
        frame_cipher_start(c, 5, false);
        frame_cipher_update(c, sealed, opened, sizeof(plain));
        ck_assert_int_eq(frame_cipher_check(c, tag), -EBADMSG);
        sealed[77777] ^= 4;
        tag[15] ^= 1;
        frame_cipher_start(c, 5, false);
        frame_cipher_update(c, sealed, opened, sizeof(plain));
        ck_assert_int_eq(frame_cipher_check(c, tag), -EBADMSG);
}
END_TEST

static Suite *encryption_suite(void) {
        Suite *s = suite_create("encryption");
        TCase *tc = tcase_create("encryption");

        tcase_add_unchecked_fixture(tc, pki_setup, pki_teardown);
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_wrap_unwrap);
        tcase_add_test(tc, test_keys_refused);
        tcase_add_test(tc, test_section_round_trip);
        tcase_add_loop_test(tc, test_section_bad, 0, (int) ELEMENTSOF(bad_rows));
        tcase_add_test(tc, test_frames);
        tcase_add_test(tc, test_frames_are_gcm);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(encryption_suite)
