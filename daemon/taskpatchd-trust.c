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
        if (asprintf(&t->path, "%s/revocations", config->state_dir) < 0) {
                t->path = NULL;
                return -ENOMEM;
        }
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
        revocations_free(t->list);
        free(t->path);
        *t = (TrustStore) {};
}

int trust_store_update(TrustStore *t, const DaemonConfig *config, time_t now, const uint8_t *data, size_t len,
                       const char *what, TpError *err) {
        _cleanup_(revocations_freep) Revocations *rl = NULL;
        SignatureTrust root = { .ca_path = config_root_ca(config), .now = now, .crl_path = config->trust.crl,
                                .crl_expired_warn = config->trust.crl_expired_warn, .revoked = t->list,
                                .threshold = (unsigned) config->trust.threshold };
        char signer[256];
        int r;

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
