/* SPDX-License-Identifier: MIT */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mbedtls/asn1write.h>
#include <mbedtls/bignum.h>
#include <mbedtls/platform_util.h>
#include <p11-kit/p11-kit.h>
#include <p11-kit/uri.h>

#include "sign-files.h"
#include "sign-pkcs11.h"

struct Pkcs11Key {
        CK_FUNCTION_LIST **modules;     /* p11-kit's configured modules, or NULL */
        CK_FUNCTION_LIST *module;       /* the one named by module-path, or NULL */
        CK_FUNCTION_LIST *fn;           /* the key's module */
        CK_SESSION_HANDLE session;
        CK_OBJECT_HANDLE key;
        bool open;
};

#define PIN_MAX 256

Pkcs11Key *pkcs11_key_free(Pkcs11Key *k) {
        if (!k)
                return NULL;
        if (k->open) {
                (void) k->fn->C_Logout(k->session);
                (void) k->fn->C_CloseSession(k->session);
        }
        if (k->module) {
                (void) p11_kit_module_finalize(k->module);
                p11_kit_module_release(k->module);
        }
        if (k->modules)
                p11_kit_modules_finalize_and_release(k->modules);
        free(k);
        return NULL;
}

static int ck_error(TpError *err, CK_RV rv, const char *what) {
        return tp_error(err, rv == CKR_PIN_INCORRECT || rv == CKR_PIN_LOCKED ? -EACCES : -EIO, "PKCS#11: %s: %s",
                        what, p11_kit_strerror(rv));
}

/* The PIN: pin-value, the first line of pin-source, or $TASKPATCH_PKCS11_PIN; "" when none. */
static int get_pin(P11KitUri *uri, char pin[static PIN_MAX], TpError *err) {
        const char *v = p11_kit_uri_get_pin_value(uri), *source = p11_kit_uri_get_pin_source(uri);

        pin[0] = '\0';
        if (!v && source) {
                FileData f = {};
                const char *path = strncmp(source, "file:", 5) == 0 ? source + 5 : source;
                int r = file_read(path, PIN_MAX - 1, true, &f, err);
                if (r < 0)
                        return tp_error_prefix(err, r, "PKCS#11 pin-source");
                snprintf(pin, PIN_MAX, "%.*s", (int) strcspn((const char *) f.data, "\r\n"), (const char *) f.data);
                file_data_done(&f);
                return 0;
        }
        if (!v)
                v = getenv("TASKPATCH_PKCS11_PIN");
        if (v && strlen(v) >= PIN_MAX)
                return tp_error(err, -EINVAL, "PKCS#11: the PIN is longer than %d bytes", PIN_MAX - 1);
        snprintf(pin, PIN_MAX, "%s", v ? v : "");
        return 0;
}

/* The private keys on the token of @slot that the URI's attributes name: 1 found, 0 none. */
static int find_key(Pkcs11Key *k, CK_FUNCTION_LIST *fn, CK_SLOT_ID slot, P11KitUri *uri, const char *pin,
                    TpError *err) {
        CK_OBJECT_CLASS cls = CKO_PRIVATE_KEY;
        CK_ATTRIBUTE match[16];
        CK_ULONG n_attrs = 0, found = 0;
        CK_OBJECT_HANDLE objs[2];
        CK_TOKEN_INFO info;
        CK_SESSION_HANDLE s;
        CK_RV rv;

        if (fn->C_GetTokenInfo(slot, &info) != CKR_OK || !p11_kit_uri_match_token_info(uri, &info))
                return 0;
        if ((rv = fn->C_OpenSession(slot, CKF_SERIAL_SESSION, NULL, NULL, &s)) != CKR_OK)
                return ck_error(err, rv, "C_OpenSession");
        if (info.flags & CKF_LOGIN_REQUIRED) {
                rv = fn->C_Login(s, CKU_USER, (CK_UTF8CHAR_PTR) pin, strlen(pin));
                if (rv != CKR_OK && rv != CKR_USER_ALREADY_LOGGED_IN) {
                        (void) fn->C_CloseSession(s);
                        return ck_error(err, rv, pin[0] ? "C_Login" : "C_Login (no PIN given: pin-value, pin-source "
                                        "or TASKPATCH_PKCS11_PIN)");
                }
        }
        CK_ATTRIBUTE *attrs = p11_kit_uri_get_attributes(uri, &n_attrs);
        match[0] = (CK_ATTRIBUTE) { CKA_CLASS, &cls, sizeof(cls) };
        CK_ULONG n = 1;
        for (CK_ULONG i = 0; i < n_attrs && n < ELEMENTSOF(match); i++)
                if (attrs[i].type != CKA_CLASS)
                        match[n++] = attrs[i];
        if ((rv = fn->C_FindObjectsInit(s, match, n)) != CKR_OK ||
            (rv = fn->C_FindObjects(s, objs, ELEMENTSOF(objs), &found)) != CKR_OK) {
                (void) fn->C_CloseSession(s);
                return ck_error(err, rv, "C_FindObjects");
        }
        (void) fn->C_FindObjectsFinal(s);
        if (found == 0) {
                (void) fn->C_CloseSession(s);
                return 0;
        }
        if (found > 1) {
                (void) fn->C_CloseSession(s);
                return tp_error(err, -ENOTUNIQ, "PKCS#11: the URI names more than one private key on token '%.32s' "
                                "(add object= or id=)", (const char *) info.label);
        }
        *k = (Pkcs11Key) { .modules = k->modules, .module = k->module, .fn = fn, .session = s, .key = objs[0],
                           .open = true };
        return 1;
}

/* Every slot with a token of @fn, until the key is found. */
static int search_module(Pkcs11Key *k, CK_FUNCTION_LIST *fn, P11KitUri *uri, const char *pin, TpError *err) {
        CK_SLOT_ID slots[64];
        CK_ULONG n = ELEMENTSOF(slots);
        CK_RV rv = fn->C_GetSlotList(CK_TRUE, slots, &n);

        if (rv != CKR_OK)
                return rv == CKR_BUFFER_TOO_SMALL ? tp_error(err, -E2BIG, "PKCS#11: more than 64 tokens") :
                       ck_error(err, rv, "C_GetSlotList");
        for (CK_ULONG i = 0; i < n; i++) {
                int r = find_key(k, fn, slots[i], uri, pin, err);
                if (r != 0)
                        return r;
        }
        return 0;
}

int pkcs11_key_open(const char *uri_text, Pkcs11Key **ret, TpError *err) {
        _cleanup_(pkcs11_key_freep) Pkcs11Key *k = calloc(1, sizeof(Pkcs11Key));
        P11KitUri *uri = p11_kit_uri_new();
        char pin[PIN_MAX];
        int r;

        if (!k || !uri) {
                p11_kit_uri_free(uri);
                return -ENOMEM;
        }
        if ((r = p11_kit_uri_parse(uri_text, P11_KIT_URI_FOR_ANY, uri)) != P11_KIT_URI_OK) {
                p11_kit_uri_free(uri);
                return tp_error(err, -EINVAL, "PKCS#11 URI: %s", p11_kit_uri_message(r));
        }
        if ((r = get_pin(uri, pin, err)) < 0) {
                p11_kit_uri_free(uri);
                return r;
        }
        const char *path = p11_kit_uri_get_module_path(uri);
        if (path) {
                k->module = p11_kit_module_load(path, 0);
                CK_RV rv = k->module ? p11_kit_module_initialize(k->module) : CKR_GENERAL_ERROR;
                if (rv != CKR_OK) {
                        if (k->module)
                                p11_kit_module_release(k->module);
                        k->module = NULL;
                        r = tp_error(err, -ENOENT, "PKCS#11: cannot load the module %s: %s", path,
                                     p11_kit_message() ? p11_kit_message() : p11_kit_strerror(rv));
                } else
                        r = search_module(k, k->module, uri, pin, err);
        } else if (!(k->modules = p11_kit_modules_load_and_initialize(0)))
                r = tp_error(err, -ENOENT, "PKCS#11: no module is configured in p11-kit (give module-path in the "
                             "URI): %s", p11_kit_message() ? p11_kit_message() : "");
        else {
                r = 0;
                for (size_t i = 0; r == 0 && k->modules[i]; i++)
                        r = search_module(k, k->modules[i], uri, pin, err);
        }
        mbedtls_platform_zeroize(pin, sizeof(pin));
        p11_kit_uri_free(uri);
        if (r < 0)
                return r;
        if (r == 0)
                /* Not the query: it may hold the PIN. */
                return tp_error(err, -ENOENT, "PKCS#11: no private key on any token matches %.*s",
                                (int) strcspn(uri_text, "?"), uri_text);
        *ret = TAKE_PTR(k);
        return 0;
}

int pkcs11_key_sign(Pkcs11Key *k, const uint8_t hash[32], uint8_t *sig, size_t size, size_t *ret_len, TpError *err) {
        CK_MECHANISM mech = { CKM_ECDSA, NULL, 0 };
        uint8_t raw[132];
        CK_ULONG raw_len = sizeof(raw);
        CK_RV rv;

        if ((rv = k->fn->C_SignInit(k->session, &mech, k->key)) != CKR_OK ||
            (rv = k->fn->C_Sign(k->session, (CK_BYTE_PTR) hash, 32, raw, &raw_len)) != CKR_OK)
                return ck_error(err, rv, "C_Sign");
        if (raw_len == 0 || raw_len % 2 != 0)
                return tp_error(err, -EIO, "PKCS#11: C_Sign gave %lu bytes, not r || s", (unsigned long) raw_len);

        /* r || s as the DER SEQUENCE { INTEGER r, INTEGER s } the signature block carries (written backwards). */
        mbedtls_mpi r, s;
        uint8_t buf[160], *p = buf + sizeof(buf);
        int len = 0, w;
        mbedtls_mpi_init(&r);
        mbedtls_mpi_init(&s);
        if (mbedtls_mpi_read_binary(&r, raw, raw_len / 2) != 0 ||
            mbedtls_mpi_read_binary(&s, raw + raw_len / 2, raw_len / 2) != 0 ||
            (w = mbedtls_asn1_write_mpi(&p, buf, &s)) < 0 || (len += w, (w = mbedtls_asn1_write_mpi(&p, buf, &r)) < 0) ||
            (len += w, (w = mbedtls_asn1_write_len(&p, buf, (size_t) len)) < 0) ||
            (len += w, (w = mbedtls_asn1_write_tag(&p, buf, MBEDTLS_ASN1_CONSTRUCTED | MBEDTLS_ASN1_SEQUENCE)) < 0)) {
                mbedtls_mpi_free(&r);
                mbedtls_mpi_free(&s);
                return tp_error(err, -EIO, "PKCS#11: cannot encode the signature");
        }
        len += w;
        mbedtls_mpi_free(&r);
        mbedtls_mpi_free(&s);
        if ((size_t) len > size)
                return tp_error(err, -E2BIG, "PKCS#11: a %d-byte signature", len);
        memcpy(sig, p, (size_t) len);
        *ret_len = (size_t) len;
        return 0;
}
