/* SPDX-License-Identifier: MIT */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fileio.h"
#include "taskpatchd-trust.h"

int trust_store_load(TrustStore *t, const DaemonConfig *config, TpError *err) {
        Revocations *rl = NULL;
        int r;

        *t = (TrustStore) {};
        if (asprintf(&t->path, "%s/revocations", config->state_dir) < 0 ||
            asprintf(&t->root_path, "%s/trust-root", config->state_dir) < 0) {
                t->path = t->root_path = NULL;
                return -ENOMEM;
        }
        r = trust_root_load(t->root_path, &t->root, err);
        if (r < 0 && r != -ENOENT)
                return tp_error_prefix(err, r, "the trust root this device accepted");
        *err = (TpError) {};
        r = revocations_load(t->path, &rl, err);
        if (r == -ENOENT) {
                *err = (TpError) {};
                return 0;
        }
        if (r == -ENOMEM)
                return r;
        if (r < 0)
                return 0;       /* reported by the caller through @err; the next list replaces it */
        t->list = rl;
        return 0;
}

void trust_store_done(TrustStore *t) {
        decrypt_key_free(t->decrypt_key);
        revocations_free(t->list);
        trust_root_free(t->root);
        free(t->path);
        free(t->root_path);
        *t = (TrustStore) {};
}

SignatureTrust trust_role(const TrustRoot *root, const Revocations *list, const DaemonConfig *config, TrustRole role,
                          time_t now) {
        SignatureTrust base = { .now = now, .crl_path = config->trust.crl,
                                .crl_expired_warn = config->trust.crl_expired_warn, .revoked = list };

        if (root)
                return trust_root_role(root, role, &base);
        base.ca_path = role == TRUST_ROLE_ROOT ? config_root_ca(config) :
                       role == TRUST_ROLE_BUNDLE ? config_bundle_ca(config) : config_channel_ca(config);
        base.threshold = (unsigned) (role == TRUST_ROLE_BUNDLE ? config->trust.bundle_threshold :
                                     config->trust.threshold);
        return base;
}

static int update_root(TrustStore *t, const DaemonConfig *config, time_t now, const uint8_t *data, size_t len,
                       const char *what, TpError *err) {
        _cleanup_(trust_root_freep) TrustRoot *next = NULL;
        SignatureTrust held = trust_store_role(t, config, TRUST_ROLE_ROOT, now);
        int r;

        if ((r = trust_root_parse(data, len, what, &next, err)) < 0)
                return r;
        if (t->root && next->version == t->root->version && next->text_len == t->root->text_len &&
            memcmp(next->text, t->root->text, next->text_len) == 0)
                return 0;
        if (t->root && next->version <= t->root->version)
                return tp_error(err, -ESTALE, "%s: trust root version %" PRIu64 " is not newer than the one this "
                                "device holds (version %" PRIu64 "): an older root would trust again the keys a "
                                "newer one retired", what, next->version, t->root->version);
        if ((r = trust_root_verify(next, what, &held, NULL, err)) < 0)
                return r;
        if ((r = atomic_file_write(t->root_path, data, len)) < 0)
                return tp_error(err, r, "%s: %s", t->root_path, strerror(-r));
        trust_root_free(t->root);
        t->root = TAKE_PTR(next);
        return 1;
}

int trust_store_update(TrustStore *t, const DaemonConfig *config, time_t now, const uint8_t *data, size_t len,
                       const char *what, bool *ret_root, TpError *err) {
        _cleanup_(revocations_freep) Revocations *rl = NULL;
        SignatureTrust root = trust_store_role(t, config, TRUST_ROLE_ROOT, now);
        char signer[256];
        bool is_root = len >= sizeof(TRUST_ROOT_MAGIC) && memcmp(data, TRUST_ROOT_MAGIC, sizeof(TRUST_ROOT_MAGIC)) == 0;
        int r;

        if (ret_root)
                *ret_root = is_root;
        if (is_root)
                return update_root(t, config, now, data, len, what, err);
        if ((r = revocations_parse(data, len, what, &rl, err)) < 0 ||
            (r = revocations_verify(rl, what, &root, signer, err)) < 0)
                return r;
        if (t->list && rl->version == t->list->version && rl->text_len == t->list->text_len &&
            memcmp(rl->text, t->list->text, rl->text_len) == 0)
                return 0;
        if (t->list && rl->version <= t->list->version)
                return tp_error(err, -ESTALE, "%s: revocation list version %" PRIu64 " is not newer than the one "
                                "this device holds (version %" PRIu64 "): an older list would trust again what a "
                                "newer one revoked", what, rl->version, t->list->version);
        if ((r = atomic_file_write(t->path, data, len)) < 0)
                return tp_error(err, r, "%s: %s", t->path, strerror(-r));
        revocations_free(t->list);
        t->list = TAKE_PTR(rl);
        return 1;
}

const DecryptKey *trust_store_decrypt_key(TrustStore *t, const DaemonConfig *config, TpError *err) {
        int r;

        if (t->decrypt_key)
                return t->decrypt_key;
        if (!config->trust.decrypt_key) {
                (void) tp_error(err, -ENOKEY, "this device has no trust.decrypt_key to open encrypted bundles with");
                return NULL;
        }
        if ((r = decrypt_key_load(config->trust.decrypt_key, &t->decrypt_key, err)) < 0) {
                (void) tp_error_prefix(err, r, "trust.decrypt_key");
                return NULL;
        }
        return t->decrypt_key;
}
