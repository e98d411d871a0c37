/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * What the device trusts beyond its configuration, shared by every model, each from the
 * channel or `tpctl trust update`, kept as the signed file came:
 *
 * - the trust root it accepted (<state_dir>/trust-root, trust-root.h): once there, its roles'
 *   CAs and thresholds replace trust.root_ca, bundle_ca, channel_ca, threshold and
 *   bundle_threshold. Version N+1 is taken when it verifies against the root role held
 *   (version N's, else the configuration's) and its own, has not expired, and its version
 *   is higher;
 * - the revocation list it accepted (<state_dir>/revocations): taken when it verifies against
 *   the root role (CRLs and the list held apply to its signer too) and its version is
 *   higher: an older list would give revoked signers back.
 *
 * Each is written atomically before it is used, so a crash keeps the old file or the new.
 */

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "config.h"
#include "encryption.h"
#include "error.h"
#include "revoke.h"
#include "trust-root.h"

typedef struct TrustStore {
        char *path;                     /* <state_dir>/revocations */
        Revocations *list;              /* NULL: none accepted yet */
        char *root_path;                /* <state_dir>/trust-root */
        TrustRoot *root;                /* NULL: none accepted yet (the configuration's roles hold) */
        DecryptKey *decrypt_key;        /* trust.decrypt_key, once loaded (trust_store_decrypt_key()); NULL: not yet */
} TrustStore;

/*
 * Load what was accepted before (the files are the daemon's own: parsed, their signatures
 * not checked again). A file that does not parse is reported in @err and set aside as
 * none (0): a damaged list must not stop the daemon; the next list replaces it. A damaged
 * trust root is an error (-EBADMSG): falling back to the configuration's roles would trust
 * again what a rotation retired.
 */
_warn_unused_result_ int trust_store_load(TrustStore *t, const DaemonConfig *config, TpError *err);
void trust_store_done(TrustStore *t);

/*
 * Take a revocation list or a trust root (@data, @len bytes, told apart by their magic;
 * @what names it): 1 when it replaced the one held, 0 when it is the one held (the same
 * version and bytes), < 0 with @err when refused: it does not parse or verify at @now
 * (-EBADMSG, -EKEYREJECTED, -EKEYEXPIRED, ...), or its version is not higher (-ESTALE), or
 * it cannot be written (-EIO, -ENOSPC, ...). *@ret_root (may be NULL): whether it is a root.
 */
_warn_unused_result_ int trust_store_update(TrustStore *t, const DaemonConfig *config, time_t now,
                                            const uint8_t *data, size_t len, const char *what, bool *ret_root,
                                            TpError *err);

/*
 * What @role's signatures are verified against at @now: the trust root's role when one is
 * held (@root, may be NULL), else the configuration's CA and threshold; the CRLs and the
 * revocation list (@list, may be NULL) either way. Points into its arguments.
 */
SignatureTrust trust_role(const TrustRoot *root, const Revocations *list, const DaemonConfig *config, TrustRole role,
                          time_t now);
/* trust_role() of what @t holds (valid until the next update; @t may be NULL). */
static inline SignatureTrust trust_store_role(const TrustStore *t, const DaemonConfig *config, TrustRole role,
                                              time_t now) {
        return trust_role(t ? t->root : NULL, t ? t->list : NULL, config, role, now);
}

/*
 * The key encrypted bundles are opened with (trust.decrypt_key): loaded when first needed (at
 * start, or for the first encrypted bundle: a key provisioned after the daemon started is
 * found), then kept. NULL with @err saying why: none configured, missing, unreadable, not an
 * EC P-256 private key.
 */
const DecryptKey *trust_store_decrypt_key(TrustStore *t, const DaemonConfig *config, TpError *err);

/* How a model's bundles are verified against it: the CA, CRLs and the list (no clock: see manager_bundle_trust). */
static inline const Revocations *trust_store_list(const TrustStore *t) {
        return t ? t->list : NULL;
}
