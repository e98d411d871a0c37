/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the trust root reader (common/bundle/trust-root.c), the signed-file
 * container under it and the YAML tree: header, text, roles, thresholds, and each role's PEM
 * through mbedTLS's certificate parser (every certificate must be a CA). The signatures are
 * checked by trust_root_verify(), not by the parser, so every check is reached without one.
 * A parsed root must write and parse back to the same fields.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sigset.h"
#include "trust-root.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        TrustRoot *t = NULL, *back = NULL;
        TpError err = {};
        char *text = NULL;
        uint8_t *file = NULL;
        size_t len, file_len;
        int r = trust_root_parse(data, size, "fuzz", &t, &err);

        if (r < 0) {
                if (t || (!err.message[0] && r != -ENOMEM))
                        abort();
                return 0;
        }
        if (t->version == 0 || t->expires <= t->created)
                abort();
        if (trust_root_text(t, &text, &len, &err) < 0 ||
            trust_root_pack(text, len, t->signature, t->signature_len, &file, &file_len) < 0 ||
            trust_root_parse(file, file_len, "fuzz again", &back, &err) < 0 || back->version != t->version ||
            back->created != t->created || back->expires != t->expires)
                abort();
        for (TrustRole i = 0; i < TRUST_ROLE_COUNT; i++) {
                const TrustRootRole *a = &t->roles[i], *b = &back->roles[i];
                if (a->threshold < 1 || a->threshold > SIGNATURE_SET_MAX || a->n_certs < 1 ||
                    a->n_certs > TRUST_ROOT_ROLE_CERTS || a->threshold != b->threshold || a->n_certs != b->n_certs ||
                    strcmp(a->ca_pem, b->ca_pem) != 0)
                        abort();
        }
        free(text);
        free(file);
        trust_root_free(back);
        trust_root_free(t);
        return 0;
}
