/* SPDX-License-Identifier: MIT */
/*
 * Signing (sign.h's Signer): a key in a file or in a PKCS#11 token, its certificate chain, and
 * the signature blocks it makes. Apart from sign.c, which verifies, so that the daemon links none of it.
 */

#include <string.h>

#include <mbedtls/ctr_drbg.h>
#include <mbedtls/ecdsa.h>
#include <mbedtls/entropy.h>
#include <mbedtls/pk.h>
#include <mbedtls/platform_util.h>
#include <mbedtls/x509_crt.h>

#include "sha256.h"
#include "sign-cert.h"
#include "sign-files.h"
#include "sign-pkcs11.h"
#include "sign.h"
#include "sigset.h"

struct Signer {
        Signer *next;                   /* another signer whose signature goes in the same set (sigset.h) */
        Pkcs11Key *token;               /* the key is in a PKCS#11 token (then key is unused), else NULL */
        mbedtls_pk_context key;
        mbedtls_x509_crt chain;         /* leaf first, as in the PEM file */
        mbedtls_entropy_context entropy;
        mbedtls_ctr_drbg_context drbg;
};

Signer *signer_free(Signer *s) {
        if (!s)
                return NULL;
        signer_free(s->next);
        /* Each of these wipes its own state (key limbs, DRBG key, entropy pool) before freeing. */
        pkcs11_key_free(s->token);
        mbedtls_pk_free(&s->key);
        mbedtls_x509_crt_free(&s->chain);
        mbedtls_ctr_drbg_free(&s->drbg);
        mbedtls_entropy_free(&s->entropy);
        mbedtls_platform_zeroize(s, sizeof(*s));
        free(s);
        return NULL;
}

static Signer *signer_new(void) {
        Signer *s = calloc(1, sizeof(*s));

        if (!s)
                return NULL;
        mbedtls_pk_init(&s->key);
        mbedtls_x509_crt_init(&s->chain);
        mbedtls_entropy_init(&s->entropy);
        mbedtls_ctr_drbg_init(&s->drbg);
        return s;
}

/* The certificate chain at @cert_path (leaf first), within the block's limits, its leaf a signer's. */
static int signer_load_chain(Signer *s, const char *cert_path, TpError *err) {
        size_t n_certs = 0, total = SIGNATURE_MAGIC_SIZE + 2 + MBEDTLS_ECDSA_MAX_SIG_LEN(256) + 2;
        int r;

        r = certs_load_file(&s->chain, cert_path, SIGNATURE_CERT_FILE_MAX, err);
        if (r < 0)
                return r;
        for (const mbedtls_x509_crt *c = &s->chain; c; c = c->next) {
                n_certs++;
                total += 2 + c->raw.len;
                if (c->raw.len > SIGNATURE_CERT_MAX)
                        return tp_error(err, -E2BIG, "%s: certificate %zu is %zu bytes, more than the limit of %d",
                                        cert_path, n_certs, c->raw.len, SIGNATURE_CERT_MAX);
        }
        if (n_certs > SIGNATURE_CERTS_MAX)
                return tp_error(err, -E2BIG, "%s: %zu certificates, more than the limit of %d", cert_path, n_certs,
                                SIGNATURE_CERTS_MAX);
        if (total > SIGNATURE_BLOCK_MAX)
                return tp_error(err, -E2BIG, "%s: the chain makes a %zu-byte signature block, more than the limit of %d",
                                cert_path, total, SIGNATURE_BLOCK_MAX);
        r = signer_cert_check(&s->chain, err);
        if (r < 0)
                return tp_error_prefix(err, r, "%s", cert_path);
        return 0;
}

static int signer_seed(Signer *s, TpError *err) {
        static const char personalization[] = "taskpatch signer";
        int r = mbedtls_ctr_drbg_seed(&s->drbg, mbedtls_entropy_func, &s->entropy,
                                      (const unsigned char *) personalization, sizeof(personalization) - 1);
        return r != 0 ? mbed_error(err, -EIO, r, "cannot seed the random generator") : 0;
}

int signer_load(const char *key_path, const char *cert_path, Signer **ret, TpError *err) {
        _cleanup_(signer_freep) Signer *s = signer_new();
        _cleanup_(file_data_done) FileData key = {};
        char desc[64];
        int r;

        if (!s)
                return -ENOMEM;
        r = file_read(key_path, SIGNATURE_KEY_FILE_MAX, true, &key, err);
        if (r < 0)
                return r;
        r = mbedtls_pk_parse_key(&s->key, key.data, key.len + 1, NULL, 0);
        file_data_done(&key);
        if (r == MBEDTLS_ERR_PK_PASSWORD_REQUIRED)
                return tp_error(err, -EBADMSG, "%s: the key is encrypted; passphrase-protected keys are not supported",
                                key_path);
        if (r != 0)
                return mbed_error(err, -EBADMSG, r, "%s: not a private key", key_path);
        if (!pk_is_p256(&s->key))
                return tp_error(err, -EKEYREJECTED, "%s: key is not an ECDSA P-256 key (%s)", key_path,
                                pk_describe(&s->key, desc, sizeof(desc)));
        if ((r = signer_load_chain(s, cert_path, err)) < 0)
                return r;
        r = mbedtls_pk_check_pair(&s->chain.pk, &s->key);
        if (r != 0)
                return mbed_error(err, -EKEYREJECTED, r, "%s: the first certificate does not match the key %s",
                                  cert_path, key_path);
        if ((r = signer_seed(s, err)) < 0)
                return r;
        *ret = TAKE_PTR(s);
        return 0;
}

int signer_load_pkcs11(const char *uri, const char *cert_path, Signer **ret, TpError *err) {
        _cleanup_(signer_freep) Signer *s = signer_new();
        uint8_t probe[SHA256_DIGEST_SIZE], sig[MBEDTLS_ECDSA_MAX_SIG_LEN(256)];
        size_t sig_len;
        int r;

        if (!s)
                return -ENOMEM;
        if ((r = signer_load_chain(s, cert_path, err)) < 0 || (r = pkcs11_key_open(uri, &s->token, err)) < 0)
                return r;
        /* The token's key and the certificate must be a pair: a signature it makes must verify. */
        static const char question[] = "taskpatch: does this key match its certificate?";
        sha256_digest(question, sizeof(question) - 1, probe);
        if ((r = pkcs11_key_sign(s->token, probe, sig, sizeof(sig), &sig_len, err)) < 0)
                return r;
        if (mbedtls_pk_verify(&s->chain.pk, MBEDTLS_MD_SHA256, probe, sizeof(probe), sig, sig_len) != 0)
                return tp_error(err, -EKEYREJECTED, "%s: the first certificate does not match the token's key (%.*s)",
                                cert_path, (int) strcspn(uri, "?"), uri);
        *ret = TAKE_PTR(s);
        return 0;
}

void signer_validity(const Signer *s, time_t *ret_not_before, time_t *ret_not_after) {
        *ret_not_before = x509_time_to_time(&s->chain.valid_from);
        *ret_not_after = x509_time_to_time(&s->chain.valid_to);
}

int signer_check_dates(const Signer *s, time_t now, TpError *err) {
        char subject[DN_MAX], from_s[TIME_STR_MAX], to_s[TIME_STR_MAX], now_s[TIME_STR_MAX];
        time_t from, to;

        if (now <= 0)
                return 0;
        signer_validity(s, &from, &to);
        if (now >= from && now <= to)
                return 0;
        dn_string(&s->chain.subject, subject, sizeof(subject));
        format_time(from, from_s);
        format_time(to, to_s);
        return tp_error(err, -EKEYREJECTED, "signer certificate '%s' %s %s (valid %s to %s; now %s)", subject,
                        now < from ? "is not valid before" : "expired on", now < from ? from_s : to_s, from_s, to_s,
                        format_time(now, now_s));
}

int signer_sign_one(Signer *s, const void *data, size_t len, uint8_t **ret_block, size_t *ret_len, TpError *err) {
        uint8_t hash[SHA256_DIGEST_SIZE], sig[MBEDTLS_PK_SIGNATURE_MAX_SIZE];
        SignatureBlock b = {};
        size_t sig_len = 0;
        int r;

        sha256_digest(len ? data : "", len, hash);   /* NULL is fine when len is 0 */
        if (s->token) {
                if ((r = pkcs11_key_sign(s->token, hash, sig, sizeof(sig), &sig_len, err)) < 0)
                        return r;
        } else {
                /* With MBEDTLS_ECDSA_DETERMINISTIC (Debian's build) k comes from RFC 6979; the DRBG blinds. */
                r = mbedtls_pk_sign(&s->key, MBEDTLS_MD_SHA256, hash, sizeof(hash), sig, &sig_len,
                                    mbedtls_ctr_drbg_random, &s->drbg);
                if (r != 0)
                        return mbed_error(err, -EIO, r, "signing failed");
        }

        b.sig = sig;
        b.sig_len = sig_len;
        for (const mbedtls_x509_crt *c = &s->chain; c && b.n_certs < SIGNATURE_CERTS_MAX; c = c->next) {
                b.certs[b.n_certs].der = c->raw.p;
                b.certs[b.n_certs].len = c->raw.len;
                b.n_certs++;
        }
        return signature_block_write(&b, ret_block, ret_len, err);
}

Signer *signer_next(const Signer *s) {
        return s->next;
}

void signer_add(Signer *s, Signer *other) {
        while (s->next)
                s = s->next;
        s->next = other;
}

/* Every signer of the chain signs; their blocks make one set (or the plain block of one). */
int signer_sign(Signer *s, const void *data, size_t len, uint8_t **ret_block, size_t *ret_len, TpError *err) {
        uint8_t *section = NULL, *block = NULL;
        size_t section_len = 0, block_len;
        int r = 0;

        if (!signer_next(s))
                return signer_sign_one(s, data, len, ret_block, ret_len, err);
        for (Signer *p = s; p && r >= 0; p = signer_next(p)) {
                uint8_t *grown = NULL;
                size_t grown_len = 0;
                if ((r = signer_sign_one(p, data, len, &block, &block_len, err)) < 0)
                        break;
                r = signature_set_add(section, section_len, block, block_len, &grown, &grown_len, err);
                free(block);
                block = NULL;
                free(section);
                section = grown;
                section_len = grown_len;
        }
        if (r < 0) {
                free(section);
                return r;
        }
        *ret_block = section;
        *ret_len = section_len;
        return 0;
}
