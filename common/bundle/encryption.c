/* SPDX-License-Identifier: MIT */

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <mbedtls/ctr_drbg.h>
#include <mbedtls/ecdh.h>
#include <mbedtls/entropy.h>
#include <mbedtls/gcm.h>
#include <mbedtls/hkdf.h>
#include <mbedtls/md.h>
#include <mbedtls/pk.h>
#include <mbedtls/platform_util.h>
#include <mbedtls/x509_crt.h>
#include <openssl/evp.h>

#include "encryption.h"
#include "le.h"
#include "parse.h"
#include "sign-files.h"
#include "sign.h"

#define HKDF_INFO "taskpatch bundle key v1"
#define FRAME_NONCE_MAGIC "TPF1"
#define W "manifest: encryption"

void encryption_wipe(void *p, size_t n) {
        mbedtls_platform_zeroize(p, n);
}

/* ---- the section ------------------------------------------------------------------------------ */

Encryption *encryption_free(Encryption *e) {
        if (!e)
                return NULL;
        for (size_t i = 0; i < e->n_recipients; i++)
                free(e->recipients[i].name);
        free(e->recipients);
        free(e);
        return NULL;
}

static int get_hex(const YamlNode *n, const char *key, uint8_t *ret, size_t size, TpError *err) {
        const char *s;
        int r;

        if ((r = yaml_get_str(n, key, true, W, &s, err)) < 0)
                return r;
        if (parse_hex(s, ret, size) < 0)
                return tp_error(err, -EBADMSG, W ": line %u: '%s': expected %zu lowercase hex digits", n->line, key,
                                2 * size);
        return 0;
}

static int parse_recipient(const YamlNode *n, size_t idx, Recipient *ret, TpError *err) {
        static const char *const keys[] = { "key_sha256", "name", "ephemeral", "wrapped_key", NULL };
        const char *name = NULL;
        int r;

        if (n->kind != YAML_MAPPING)
                return tp_error(err, -EBADMSG, W ": line %u: recipient #%zu: expected a mapping", n->line, idx);
        if ((r = yaml_check_keys(n, keys, W " recipient", err)) < 0 ||
            (r = yaml_get_sha256(n, "key_sha256", true, W, ret->key_sha256, err)) < 0 ||
            (r = yaml_get_str(n, "name", false, W, &name, err)) < 0 ||
            (r = get_hex(n, "ephemeral", ret->ephemeral, sizeof(ret->ephemeral), err)) < 0 ||
            (r = get_hex(n, "wrapped_key", ret->wrapped_key, sizeof(ret->wrapped_key), err)) < 0)
                return r;
        if (ret->ephemeral[0] != 0x04)
                return tp_error(err, -EBADMSG, W ": line %u: recipient #%zu: 'ephemeral' is not an uncompressed point "
                                "(it starts with %02x, not 04)", n->line, idx, ret->ephemeral[0]);
        if (name && strlen(name) >= ENCRYPTION_NAME_MAX)
                return tp_error(err, -EBADMSG, W ": line %u: recipient #%zu: 'name' is longer than %d bytes", n->line,
                                idx, ENCRYPTION_NAME_MAX - 1);
        if (name && !(ret->name = strdup(name)))
                return -ENOMEM;
        return 0;
}

int encryption_parse(const YamlNode *n, Encryption **ret, TpError *err) {
        static const char *const keys[] = { "cipher", "key_wrap", "recipients", NULL };
        _cleanup_(encryption_freep) Encryption *e = NULL;
        const YamlNode *seq;
        const char *cipher, *wrap;
        int r;

        if ((r = yaml_check_keys(n, keys, W, err)) < 0 || (r = yaml_get_str(n, "cipher", true, W, &cipher, err)) < 0 ||
            (r = yaml_get_str(n, "key_wrap", true, W, &wrap, err)) < 0 ||
            (r = yaml_get_seq(n, "recipients", true, W, &seq, err)) < 0)
                return r;
        if (strcmp(cipher, ENCRYPTION_CIPHER) != 0 || strcmp(wrap, ENCRYPTION_KEY_WRAP) != 0)
                return tp_error(err, -EPROTONOSUPPORT, W ": line %u: cipher '%.64s' with key_wrap '%.64s' is not "
                                "supported (this build reads " ENCRYPTION_CIPHER " with " ENCRYPTION_KEY_WRAP ")",
                                n->line, cipher, wrap);
        if (seq->n == 0 || seq->n > ENCRYPTION_MAX_RECIPIENTS)
                return tp_error(err, -EBADMSG, W ": line %u: %zu recipients (expected 1 .. %d)", seq->line, seq->n,
                                ENCRYPTION_MAX_RECIPIENTS);
        e = calloc(1, sizeof(*e));
        if (!e || !(e->recipients = calloc(seq->n, sizeof(Recipient))))
                return -ENOMEM;
        for (size_t i = 0; i < seq->n; i++) {
                if ((r = parse_recipient(seq->items[i], i, &e->recipients[i], err)) < 0)
                        return r;
                e->n_recipients = i + 1;
                /* One key, one entry: a device must not have to choose between two wraps. */
                for (size_t k = 0; k < i; k++)
                        if (memcmp(e->recipients[k].key_sha256, e->recipients[i].key_sha256, SHA256_DIGEST_SIZE) == 0)
                                return tp_error(err, -EBADMSG, W ": line %u: recipient #%zu repeats the key of #%zu",
                                                seq->items[i]->line, i, k);
        }
        *ret = TAKE_PTR(e);
        return 0;
}

void encryption_write(YamlWriter *w, const Encryption *e) {
        char hex[2 * ENCRYPTION_POINT_SIZE + 1];

        yaml_writer_str(w, "encryption");
        yaml_writer_map_start(w, false);
        yaml_writer_kv(w, "cipher", ENCRYPTION_CIPHER);
        yaml_writer_kv(w, "key_wrap", ENCRYPTION_KEY_WRAP);
        yaml_writer_str(w, "recipients");
        yaml_writer_seq_start(w, false);
        for (size_t i = 0; i < e->n_recipients; i++) {
                const Recipient *r = &e->recipients[i];
                yaml_writer_map_start(w, true);
                yaml_writer_kv_sha(w, "key_sha256", r->key_sha256);
                if (r->name)
                        yaml_writer_kv(w, "name", r->name);
                format_hex(r->ephemeral, sizeof(r->ephemeral), hex);
                yaml_writer_kv(w, "ephemeral", hex);
                format_hex(r->wrapped_key, sizeof(r->wrapped_key), hex);
                yaml_writer_kv(w, "wrapped_key", hex);
                yaml_writer_map_end(w);
        }
        yaml_writer_seq_end(w);
        yaml_writer_map_end(w);
}

/* ---- keys ------------------------------------------------------------------------------------- */

static bool pk_is_p256(mbedtls_pk_context *pk) {
        mbedtls_pk_type_t t = mbedtls_pk_get_type(pk);
        return (t == MBEDTLS_PK_ECKEY || t == MBEDTLS_PK_ECKEY_DH) &&
               mbedtls_pk_ec(*pk)->grp.id == MBEDTLS_ECP_DP_SECP256R1;
}

/* SHA-256 of the SubjectPublicKeyInfo (DER) of @pk's public key. */
static int pk_key_id(mbedtls_pk_context *pk, uint8_t ret[SHA256_DIGEST_SIZE]) {
        uint8_t der[256];
        int n = mbedtls_pk_write_pubkey_der(pk, der, sizeof(der));

        if (n <= 0)
                return -EINVAL;
        sha256_digest(der + sizeof(der) - n, (size_t) n, ret);
        return 0;
}

typedef struct Random {
        mbedtls_entropy_context entropy;
        mbedtls_ctr_drbg_context drbg;
} Random;

static int random_init(Random *rnd, TpError *err) {
        static const char personalization[] = "taskpatch encryption";

        mbedtls_entropy_init(&rnd->entropy);
        mbedtls_ctr_drbg_init(&rnd->drbg);
        int r = mbedtls_ctr_drbg_seed(&rnd->drbg, mbedtls_entropy_func, &rnd->entropy,
                                      (const unsigned char *) personalization, sizeof(personalization) - 1);
        return r != 0 ? mbed_error(err, -EIO, r, "cannot seed the random generator") : 0;
}

static void random_done(Random *rnd) {
        mbedtls_ctr_drbg_free(&rnd->drbg);
        mbedtls_entropy_free(&rnd->entropy);
}

struct RecipientKey {
        char *path;
        char *name;                     /* the certificate's subject, NULL for a bare public key */
        mbedtls_pk_context pk;
        uint8_t key_sha256[SHA256_DIGEST_SIZE];
};

RecipientKey *recipient_key_free(RecipientKey *k) {
        if (!k)
                return NULL;
        mbedtls_pk_free(&k->pk);
        free(k->path);
        free(k->name);
        free(k);
        return NULL;
}

/* A certificate's key, its subject as the name; a certificate that restricts its key must allow key agreement. */
static int recipient_from_cert(RecipientKey *k, const FileData *f, TpError *err) {
        mbedtls_x509_crt crt;
        char dn[ENCRYPTION_NAME_MAX];
        int r;

        mbedtls_x509_crt_init(&crt);
        if (mbedtls_x509_crt_parse(&crt, f->data, f->len + 1) != 0) {
                mbedtls_x509_crt_free(&crt);
                return -EBADMSG;
        }
        if (mbedtls_x509_crt_check_key_usage(&crt, MBEDTLS_X509_KU_KEY_AGREEMENT) != 0) {
                mbedtls_x509_crt_free(&crt);
                return tp_error(err, -EKEYREJECTED, "%s: the certificate's keyUsage does not allow keyAgreement (a key "
                                "that bundles are encrypted to needs it)", k->path);
        }
        if (mbedtls_x509_dn_gets(dn, sizeof(dn), &crt.subject) < 0)
                dn[0] = '\0';
        /* The key moves out of the certificate: a copy through its DER form. */
        uint8_t der[256];
        int n = mbedtls_pk_write_pubkey_der(&crt.pk, der, sizeof(der));
        r = n > 0 ? mbedtls_pk_parse_public_key(&k->pk, der + sizeof(der) - n, (size_t) n) : -1;
        mbedtls_x509_crt_free(&crt);
        if (r != 0)
                return tp_error(err, -EKEYREJECTED, "%s: the certificate's key is not an EC P-256 key", k->path);
        if (dn[0] && !(k->name = strdup(dn)))
                return -ENOMEM;
        return 0;
}

int recipient_key_load(const char *path, RecipientKey **ret, TpError *err) {
        _cleanup_(recipient_key_freep) RecipientKey *k = calloc(1, sizeof(*k));
        _cleanup_(file_data_done) FileData f = {};
        int r;

        if (!k)
                return -ENOMEM;
        mbedtls_pk_init(&k->pk);
        if (!(k->path = strdup(path)))
                return -ENOMEM;
        if ((r = file_read(path, SIGNATURE_CERT_FILE_MAX, false, &f, err)) < 0)
                return r;
        r = recipient_from_cert(k, &f, err);
        if (r == -EBADMSG && mbedtls_pk_parse_public_key(&k->pk, f.data, f.len + 1) != 0)
                return tp_error(err, -EBADMSG, "%s: neither a certificate nor a public key (PEM or DER)", path);
        if (r < 0 && r != -EBADMSG)
                return r;
        if (!pk_is_p256(&k->pk))
                return tp_error(err, -EKEYREJECTED, "%s: the key is not an EC P-256 key (bundles are encrypted to "
                                "P-256 keys)", path);
        if (pk_key_id(&k->pk, k->key_sha256) < 0)
                return tp_error(err, -EKEYREJECTED, "%s: the public key cannot be encoded", path);
        *ret = TAKE_PTR(k);
        return 0;
}

/* ---- wrapping --------------------------------------------------------------------------------- */

/* KEK = HKDF-SHA256(salt = E || R, ikm = x(d·Q), info): d·Q is the ECDH, E and R the two public points. */
static int derive_kek(mbedtls_ecp_group *grp, const mbedtls_mpi *d, const mbedtls_ecp_point *Q,
                      const uint8_t ephemeral[ENCRYPTION_POINT_SIZE], const uint8_t recipient[ENCRYPTION_POINT_SIZE],
                      Random *rnd, uint8_t kek[ENCRYPTION_KEY_SIZE]) {
        uint8_t z[32], salt[2 * ENCRYPTION_POINT_SIZE];
        mbedtls_mpi zm;
        int r;

        mbedtls_mpi_init(&zm);
        r = mbedtls_ecdh_compute_shared(grp, &zm, Q, d, mbedtls_ctr_drbg_random, &rnd->drbg);
        if (r == 0)
                r = mbedtls_mpi_write_binary(&zm, z, sizeof(z));
        mbedtls_mpi_free(&zm);
        memcpy(salt, ephemeral, ENCRYPTION_POINT_SIZE);
        memcpy(salt + ENCRYPTION_POINT_SIZE, recipient, ENCRYPTION_POINT_SIZE);
        if (r == 0)
                r = mbedtls_hkdf(mbedtls_md_info_from_type(MBEDTLS_MD_SHA256), salt, sizeof(salt), z, sizeof(z),
                                 (const unsigned char *) HKDF_INFO, sizeof(HKDF_INFO) - 1, kek, ENCRYPTION_KEY_SIZE);
        encryption_wipe(z, sizeof(z));
        return r;
}

static int point_bytes(const mbedtls_ecp_group *grp, const mbedtls_ecp_point *p, uint8_t ret[ENCRYPTION_POINT_SIZE]) {
        size_t n;
        int r = mbedtls_ecp_point_write_binary(grp, p, MBEDTLS_ECP_PF_UNCOMPRESSED, &n, ret, ENCRYPTION_POINT_SIZE);
        return r != 0 || n != ENCRYPTION_POINT_SIZE ? -EINVAL : 0;
}

static int wrap_one(const RecipientKey *k, const uint8_t key[ENCRYPTION_KEY_SIZE], Random *rnd, Recipient *ret,
                    TpError *err) {
        const mbedtls_ecp_keypair *rk = mbedtls_pk_ec(k->pk);
        uint8_t kek[ENCRYPTION_KEY_SIZE], rpoint[ENCRYPTION_POINT_SIZE], nonce[12] = {};
        mbedtls_ecp_group grp;
        mbedtls_mpi d;
        mbedtls_ecp_point E;
        mbedtls_gcm_context gcm;
        int r;

        mbedtls_ecp_group_init(&grp);
        mbedtls_mpi_init(&d);
        mbedtls_ecp_point_init(&E);
        mbedtls_gcm_init(&gcm);
        r = mbedtls_ecp_group_load(&grp, MBEDTLS_ECP_DP_SECP256R1);
        if (r == 0)
                r = mbedtls_ecdh_gen_public(&grp, &d, &E, mbedtls_ctr_drbg_random, &rnd->drbg);
        if (r == 0)
                r = point_bytes(&grp, &E, ret->ephemeral) < 0 || point_bytes(&grp, &rk->Q, rpoint) < 0 ? -1 : 0;
        if (r == 0)
                r = derive_kek(&grp, &d, &rk->Q, ret->ephemeral, rpoint, rnd, kek);
        if (r == 0)
                r = mbedtls_gcm_setkey(&gcm, MBEDTLS_CIPHER_ID_AES, kek, 8 * ENCRYPTION_KEY_SIZE);
        if (r == 0)
                r = mbedtls_gcm_crypt_and_tag(&gcm, MBEDTLS_GCM_ENCRYPT, ENCRYPTION_KEY_SIZE, nonce, sizeof(nonce),
                                              k->key_sha256, SHA256_DIGEST_SIZE, key, ret->wrapped_key,
                                              ENCRYPTION_TAG_SIZE, ret->wrapped_key + ENCRYPTION_KEY_SIZE);
        encryption_wipe(kek, sizeof(kek));
        mbedtls_gcm_free(&gcm);
        mbedtls_ecp_point_free(&E);
        mbedtls_mpi_free(&d);
        mbedtls_ecp_group_free(&grp);
        if (r != 0)
                return r > 0 || r == -1 ? tp_error(err, -EIO, "%s: wrapping the content key failed", k->path) :
                                          mbed_error(err, -EIO, r, "%s: wrapping the content key", k->path);
        memcpy(ret->key_sha256, k->key_sha256, SHA256_DIGEST_SIZE);
        if (k->name && !(ret->name = strdup(k->name)))
                return -ENOMEM;
        return 0;
}

int encryption_new(RecipientKey *const *keys, size_t n_keys, uint8_t ret_content_key[ENCRYPTION_KEY_SIZE],
                   Encryption **ret, TpError *err) {
        _cleanup_(encryption_freep) Encryption *e = NULL;
        uint8_t key[ENCRYPTION_KEY_SIZE];
        Random rnd;
        int r;

        if (n_keys == 0 || n_keys > ENCRYPTION_MAX_RECIPIENTS)
                return tp_error(err, -EINVAL, "%zu recipients (expected 1 .. %d)", n_keys, ENCRYPTION_MAX_RECIPIENTS);
        for (size_t i = 0; i < n_keys; i++)
                for (size_t k = 0; k < i; k++)
                        if (memcmp(keys[i]->key_sha256, keys[k]->key_sha256, SHA256_DIGEST_SIZE) == 0)
                                return tp_error(err, -EINVAL, "%s and %s hold the same key: name each recipient once",
                                                keys[k]->path, keys[i]->path);
        e = calloc(1, sizeof(*e));
        if (!e || !(e->recipients = calloc(n_keys, sizeof(Recipient))))
                return -ENOMEM;
        if ((r = random_init(&rnd, err)) < 0) {
                random_done(&rnd);
                return r;
        }
        r = mbedtls_ctr_drbg_random(&rnd.drbg, key, sizeof(key));
        if (r != 0)
                r = mbed_error(err, -EIO, r, "drawing the content key");
        for (size_t i = 0; r >= 0 && i < n_keys; i++) {
                r = wrap_one(keys[i], key, &rnd, &e->recipients[i], err);
                e->n_recipients = i + 1;
        }
        random_done(&rnd);
        if (r < 0) {
                encryption_wipe(key, sizeof(key));
                return r;
        }
        memcpy(ret_content_key, key, sizeof(key));
        encryption_wipe(key, sizeof(key));
        *ret = TAKE_PTR(e);
        return 0;
}

/* ---- unwrapping ------------------------------------------------------------------------------- */

struct DecryptKey {
        mbedtls_pk_context pk;
        uint8_t key_sha256[SHA256_DIGEST_SIZE];
        uint8_t point[ENCRYPTION_POINT_SIZE];
};

DecryptKey *decrypt_key_free(DecryptKey *k) {
        if (!k)
                return NULL;
        mbedtls_pk_free(&k->pk);        /* wipes the key's limbs */
        mbedtls_platform_zeroize(k, sizeof(*k));
        free(k);
        return NULL;
}

const uint8_t *decrypt_key_id(const DecryptKey *k) {
        return k->key_sha256;
}

int decrypt_key_load(const char *path, DecryptKey **ret, TpError *err) {
        _cleanup_(decrypt_key_freep) DecryptKey *k = calloc(1, sizeof(*k));
        _cleanup_(file_data_done) FileData f = {};
        int r;

        if (!k)
                return -ENOMEM;
        mbedtls_pk_init(&k->pk);
        if ((r = file_read(path, ENCRYPTION_KEY_FILE_MAX, true, &f, err)) < 0)
                return r;
        r = mbedtls_pk_parse_key(&k->pk, f.data, f.len + 1, NULL, 0);
        if (r == MBEDTLS_ERR_PK_PASSWORD_REQUIRED)
                return tp_error(err, -EBADMSG, "%s: the key is encrypted; passphrase-protected keys are not supported",
                                path);
        if (r != 0)
                return mbed_error(err, -EBADMSG, r, "%s: not a private key", path);
        if (!pk_is_p256(&k->pk))
                return tp_error(err, -EKEYREJECTED, "%s: the key is not an EC P-256 key", path);
        const mbedtls_ecp_keypair *kp = mbedtls_pk_ec(k->pk);
        if (pk_key_id(&k->pk, k->key_sha256) < 0 || point_bytes(&kp->grp, &kp->Q, k->point) < 0)
                return tp_error(err, -EKEYREJECTED, "%s: the public key cannot be encoded", path);
        *ret = TAKE_PTR(k);
        return 0;
}

/* "2 other keys (CN=device-7 e3b0c442..., 5f2a9b1c...)": whom a bundle was for, in a message. */
static void describe_recipients(const Encryption *e, char *buf, size_t size) {
        size_t o = 0;

        o += (size_t) snprintf(buf, size, "%zu %s (", e->n_recipients, e->n_recipients == 1 ? "key" : "keys");
        for (size_t i = 0; i < e->n_recipients && i < 3 && o < size; i++) {
                char hex[SHA256_HEX_SIZE];
                sha256_to_hex(e->recipients[i].key_sha256, hex);
                o += (size_t) snprintf(buf + o, size - o, "%s%s%s%.16s...", i ? ", " : "",
                                       e->recipients[i].name ? e->recipients[i].name : "",
                                       e->recipients[i].name ? " " : "", hex);
        }
        if (o < size)
                snprintf(buf + o, size - o, "%s)", e->n_recipients > 3 ? ", ..." : "");
}

int encryption_unwrap(const Encryption *e, const DecryptKey *k, uint8_t ret_content_key[ENCRYPTION_KEY_SIZE],
                      TpError *err) {
        const Recipient *me = NULL;
        char hex[SHA256_HEX_SIZE];

        for (size_t i = 0; i < e->n_recipients && !me; i++)
                if (memcmp(e->recipients[i].key_sha256, k->key_sha256, SHA256_DIGEST_SIZE) == 0)
                        me = &e->recipients[i];
        sha256_to_hex(k->key_sha256, hex);
        if (!me) {
                char who[512];
                describe_recipients(e, who, sizeof(who));
                return tp_error(err, -ENOKEY, "encrypted for %s; this device's key is %.16s...: not for this device",
                                who, hex);
        }

        const mbedtls_ecp_keypair *kp = mbedtls_pk_ec(k->pk);
        uint8_t kek[ENCRYPTION_KEY_SIZE], key[ENCRYPTION_KEY_SIZE], nonce[12] = {};
        mbedtls_ecp_group grp;
        mbedtls_ecp_point E;
        mbedtls_gcm_context gcm;
        Random rnd;
        int r;

        mbedtls_ecp_group_init(&grp);
        mbedtls_ecp_point_init(&E);
        mbedtls_gcm_init(&gcm);
        r = random_init(&rnd, err);
        if (r == 0 && (mbedtls_ecp_group_load(&grp, MBEDTLS_ECP_DP_SECP256R1) != 0 ||
                       mbedtls_ecp_point_read_binary(&grp, &E, me->ephemeral, ENCRYPTION_POINT_SIZE) != 0 ||
                       mbedtls_ecp_check_pubkey(&grp, &E) != 0))
                r = tp_error(err, -EBADMSG, "the ephemeral key of recipient %.16s... is not a point of P-256", hex);
        if (r == 0 && derive_kek(&grp, &kp->d, &E, me->ephemeral, k->point, &rnd, kek) != 0)
                r = tp_error(err, -EIO, "the key agreement for recipient %.16s... failed", hex);
        if (r == 0 && (mbedtls_gcm_setkey(&gcm, MBEDTLS_CIPHER_ID_AES, kek, 8 * ENCRYPTION_KEY_SIZE) != 0 ||
                       mbedtls_gcm_auth_decrypt(&gcm, ENCRYPTION_KEY_SIZE, nonce, sizeof(nonce), me->key_sha256,
                                                SHA256_DIGEST_SIZE, me->wrapped_key + ENCRYPTION_KEY_SIZE,
                                                ENCRYPTION_TAG_SIZE, me->wrapped_key, key) != 0))
                r = tp_error(err, -EBADMSG, "the content key wrapped for this device's key %.16s... does not open "
                             "(its wrapped_key or ephemeral key was altered)", hex);
        encryption_wipe(kek, sizeof(kek));
        mbedtls_gcm_free(&gcm);
        mbedtls_ecp_point_free(&E);
        mbedtls_ecp_group_free(&grp);
        random_done(&rnd);
        if (r == 0)
                memcpy(ret_content_key, key, sizeof(key));
        encryption_wipe(key, sizeof(key));
        return r;
}

/* ---- frames ----------------------------------------------------------------------------------- */

/*
 * Frames go through OpenSSL's AES-256-GCM (libcrypto, already in the daemon's process through
 * libcurl): mbedTLS 2.28's runs at 230 MB/s on this x86 machine and has no ARMv8 AES path at all,
 * OpenSSL's at 4.4 GB/s here and with the AES and PMULL instructions on a Cortex-A76, which
 * took a 4.4 MB encrypted bundle's decryption off a switch's critical path (~19 ms). The same
 * algorithm: frames sealed by either library open with the other.
 */
struct FrameCipher {
        EVP_CIPHER_CTX *ctx;
        uint8_t key[ENCRYPTION_KEY_SIZE];
};

int frame_cipher_new(const uint8_t key[ENCRYPTION_KEY_SIZE], FrameCipher **ret) {
        FrameCipher *c = calloc(1, sizeof(*c));

        if (!c)
                return -ENOMEM;
        c->ctx = EVP_CIPHER_CTX_new();
        if (!c->ctx) {
                free(c);
                return -ENOMEM;
        }
        memcpy(c->key, key, ENCRYPTION_KEY_SIZE);
        *ret = c;
        return 0;
}

FrameCipher *frame_cipher_free(FrameCipher *c) {
        if (!c)
                return NULL;
        EVP_CIPHER_CTX_free(c->ctx);    /* clears the key schedule */
        encryption_wipe(c->key, sizeof(c->key));
        free(c);
        return NULL;
}

/*
 * The calls below cannot fail with a key set, a 12-byte nonce (GCM's default) and the lengths
 * span.h keeps; a failure would leave a wrong tag, which frame_cipher_check() refuses.
 */
void frame_cipher_start(FrameCipher *c, uint64_t index, bool encrypt) {
        uint8_t nonce[12];

        memcpy(nonce, FRAME_NONCE_MAGIC, 4);
        put_le64(nonce + 4, index);
        (void) EVP_CipherInit_ex(c->ctx, EVP_aes_256_gcm(), NULL, c->key, nonce, encrypt ? 1 : 0);
}

void frame_cipher_update(FrameCipher *c, const uint8_t *in, uint8_t *out, size_t n) {
        while (n > 0) {
                int k = n > (1u << 30) ? 1 << 30 : (int) n, done = 0;
                (void) EVP_CipherUpdate(c->ctx, out, &done, in, k);
                in += k;
                out += k;
                n -= (size_t) k;
        }
}

void frame_cipher_tag(FrameCipher *c, uint8_t ret_tag[ENCRYPTION_TAG_SIZE]) {
        uint8_t none[16];
        int n = 0;

        (void) EVP_CipherFinal_ex(c->ctx, none, &n);    /* GCM: no bytes left to write */
        (void) EVP_CIPHER_CTX_ctrl(c->ctx, EVP_CTRL_GCM_GET_TAG, ENCRYPTION_TAG_SIZE, ret_tag);
}

int frame_cipher_check(FrameCipher *c, const uint8_t tag[ENCRYPTION_TAG_SIZE]) {
        uint8_t want[ENCRYPTION_TAG_SIZE], none[16];
        int n = 0;

        memcpy(want, tag, sizeof(want));
        /* OpenSSL compares the tags in constant time in the final call. */
        if (EVP_CIPHER_CTX_ctrl(c->ctx, EVP_CTRL_GCM_SET_TAG, ENCRYPTION_TAG_SIZE, want) != 1)
                return -EBADMSG;
        return EVP_CipherFinal_ex(c->ctx, none, &n) == 1 ? 0 : -EBADMSG;
}
