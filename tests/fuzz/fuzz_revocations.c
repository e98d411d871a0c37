/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the revocation list reader (common/bundle/revoke.c), the signed-file
 * container under it (signed-file.c) and the YAML tree: header, text, caps, entries. The
 * signature is checked by revocations_verify(), not by the parser, so every check is reached
 * without one. A parsed list must write and parse back to the same entries, and match each.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "revoke.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        Revocations *rl = NULL, *back = NULL;
        TpError err = {};
        char *text = NULL;
        uint8_t *file = NULL;
        size_t len, file_len;
        int r = revocations_parse(data, size, "fuzz", &rl, &err);

        if (r < 0) {
                if (rl || (!err.message[0] && r != -ENOMEM))
                        abort();
                return 0;
        }
        if (rl->version == 0 || rl->n > REVOCATIONS_MAX_ENTRIES)
                abort();
        if (revocations_text(rl, &text, &len, &err) < 0 ||
            revocations_pack(text, len, rl->signature, rl->signature_len, &file, &file_len) < 0 ||
            revocations_parse(file, file_len, "fuzz again", &back, &err) < 0 || back->n != rl->n ||
            back->version != rl->version || back->created != rl->created)
                abort();
        for (size_t i = 0; i < rl->n; i++) {
                const RevokedEntry *e = &rl->entries[i];
                if (memcmp(&back->entries[i], e, sizeof(*e)) != 0 || (e->kind == REVOKED_CERT && e->serial_len == 0))
                        abort();
                /* What an entry names, it matches (an earlier entry may match first). */
                if (!revocations_match(rl, e->key_sha256, e->kind == REVOKED_CERT ? e->issuer : "", e->serial,
                                       e->serial_len))
                        abort();
        }
        free(text);
        free(file);
        revocations_free(back);
        revocations_free(rl);
        return 0;
}
