/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * What the device trusts beyond its configuration, shared by every model: the revocation
 * list it accepted (<state_dir>/revocations, the signed file as it came), from the channel
 * or `tpctl trust update`. A list is accepted when it verifies against the root role
 * (trust.root_ca, else trust.ca; CRLs and the list held apply to its signer too) and its
 * version is higher than the one held: an older list would give revoked signers back.
 * It is written atomically before it is used, so a crash keeps the old list or the new.
 */

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "config.h"
#include "error.h"
#include "revoke.h"

typedef struct TrustStore {
        char *path;                     /* <state_dir>/revocations */
        Revocations *list;              /* NULL: none accepted yet */
} TrustStore;

/*
 * Load what was accepted before (the file is the daemon's own: parsed, its signature
 * not checked again). A file that does not parse is reported in @err and set aside as
 * none (0): a damaged list must not stop the daemon; the next list replaces it.
 */
_warn_unused_result_ int trust_store_load(TrustStore *t, const DaemonConfig *config, TpError *err);
void trust_store_done(TrustStore *t);

/*
 * Take a revocation list (@data, @len bytes; @what names it): 1 when it replaced the
 * one held, 0 when it is the one held (the same version and bytes), < 0 with @err when
 * refused: it does not parse or verify at @now (-EBADMSG, -EKEYREJECTED, ...), or its
 * version is not higher (-ESTALE), or it cannot be written (-EIO, -ENOSPC, ...).
 */
_warn_unused_result_ int trust_store_update(TrustStore *t, const DaemonConfig *config, time_t now,
                                            const uint8_t *data, size_t len, const char *what, TpError *err);

/* How a model's bundles are verified against it: the CA, CRLs and the list (no clock: see manager_bundle_trust). */
static inline const Revocations *trust_store_list(const TrustStore *t) {
        return t ? t->list : NULL;
}
