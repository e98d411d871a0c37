/* SPDX-License-Identifier: MIT */
/*
 * Writing the signed files a producer publishes (the channel index, the revocation list, the trust
 * root): the text, a Signer's signature, the file. Apart from their parsers, so that a program that
 * only reads them (taskpatchd) links no signing code (signer.c: the random generator, PKCS#11).
 */

#include <stdlib.h>

#include "channel.h"
#include "revoke.h"
#include "sigset.h"
#include "trust-root.h"

int channel_write(Channel *c, Signer *signer, uint8_t **ret_data, size_t *ret_len, TpError *err) {
        _cleanup_free_ char *text = NULL;
        _cleanup_free_ uint8_t *sig = NULL;
        size_t text_len, sig_len;
        int r;

        if ((r = channel_index_write(c, &text, &text_len, err)) < 0 ||
            (r = signer_sign(signer, text, text_len, &sig, &sig_len, err)) < 0)
                return r;
        return channel_pack(c->format, text, text_len, sig, sig_len, ret_data, ret_len);
}

int revocations_write(Revocations *rl, Signer *signer, uint8_t **ret_data, size_t *ret_len, TpError *err) {
        _cleanup_free_ char *text = NULL;
        _cleanup_free_ uint8_t *sig = NULL;
        size_t text_len, sig_len;
        int r;

        if ((r = revocations_text(rl, &text, &text_len, err)) < 0 ||
            (r = signer_sign(signer, text, text_len, &sig, &sig_len, err)) < 0 ||
            (r = revocations_pack(text, text_len, sig, sig_len, ret_data, ret_len)) < 0)
                return r;
        free(rl->text);
        free(rl->signature);
        rl->text = TAKE_PTR(text);
        rl->text_len = text_len;
        rl->signature = TAKE_PTR(sig);
        rl->signature_len = sig_len;
        return 0;
}

int trust_root_write(TrustRoot *t, Signer *signer, uint8_t **ret_data, size_t *ret_len, TpError *err) {
        _cleanup_free_ char *text = NULL;
        _cleanup_free_ uint8_t *sig = NULL;
        size_t text_len, sig_len;
        int r;

        if ((r = trust_root_text(t, &text, &text_len, err)) < 0 ||
            (r = signer_sign(signer, text, text_len, &sig, &sig_len, err)) < 0 ||
            (r = trust_root_pack(text, text_len, sig, sig_len, ret_data, ret_len)) < 0)
                return r;
        free(t->text);
        free(t->signature);
        t->text = TAKE_PTR(text);
        t->text_len = text_len;
        t->signature = TAKE_PTR(sig);
        t->signature_len = sig_len;
        trust_root_name_roles(t);
        return 0;
}
