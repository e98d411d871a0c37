/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The Eclipse hawkBit client (Direct Device Integration API, config
 * "hawkbit:"). It polls {url}/{tenant}/controller/v1/{controller_id} as often
 * as the server's config.polling.sleep says, with "Authorization:
 * TargetToken ..." from hawkbit.token_file, on the event loop (libcurl
 * multi). For a deploymentBase it downloads the deployment's .tpb artifacts
 * (resuming with Range, cut at the declared size, SHA-256 checked), sends
 * "proceeding" and "downloaded" feedback, installs each bundle and switches
 * to the task of the last one through the normal trial, and sends "closed"
 * with "success" only once that trial commits, or "failure" with the reason
 * (a refused bundle, a rollback). A cancelAction is honoured until the first
 * bundle is installed, rejected after. When the server asks for configData,
 * the device's attributes are PUT (base, active task, CPU features). The DDI
 * documents themselves are read and written by taskpatchd-ddi.h; a document it
 * refuses is a failed poll (shown in the status), except a deployment that names
 * its action but cannot be carried out: that action is closed with the reason.
 */

#include <jansson.h>
#include <stdbool.h>

#include "error.h"

typedef struct Manager Manager;
typedef struct Operation Operation;
typedef struct Hawkbit Hawkbit;

/* A client for @m's configured server; *ret = NULL (and 0) when none is configured. */
_warn_unused_result_ int hawkbit_new(Manager *m, Hawkbit **ret, TpError *err);
Hawkbit *hawkbit_free(Hawkbit *h);

/* From the manager: an operation ended (@r < 0: failed), a trial ended. NULL-safe. */
void hawkbit_operation_done(Hawkbit *h, const Operation *op, int r);
void hawkbit_trial_done(Hawkbit *h, const char *transaction, bool committed, const char *reason);

/* The "hawkbit" object of the status. */
json_t *hawkbit_status(const Hawkbit *h);
