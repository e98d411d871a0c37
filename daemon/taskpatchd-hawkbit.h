/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The Eclipse hawkBit client (Direct Device Integration API, config
 * "hawkbit:"). It polls {url}/{tenant}/controller/v1/{controller_id} as often
 * as the server's config.polling.sleep says, with "Authorization:
 * TargetToken ..." from hawkbit.token_file, on the event loop (libcurl
 * multi). For a deploymentBase it downloads the deployment's .tpb artifacts
 * (resuming with Range, cut at the declared size, SHA-256 checked), sends
 * "proceeding" and "downloaded" feedback, submits each bundle to its host as
 * an install, the last one switching to its task through the normal trial
 * (each only when the host can_start()), and sends "closed"
 * with "success" only once that trial commits, or "failure" with the reason
 * (a refused bundle, a rollback). A cancelAction is honoured until the first
 * bundle is installed, rejected after. When the server asks for configData,
 * the device's attributes are PUT (base, active task, CPU features). On a device of
 * several models, a chunk (a software module) whose metadata "taskpatch.model" names a
 * model has its bundles installed for that model, a chunk without it for the first; the
 * last bundle of each model switches, one model after the other, and the action closes
 * with success once every model's trial committed (a failure of one closes it with the
 * failure; the models that committed before keep their task). The DDI
 * documents themselves are read and written by taskpatchd-ddi.h; a document it
 * refuses is a failed poll (shown in the status), except a deployment that names
 * its action but cannot be carried out: that action is closed with the reason.
 * It knows each manager only as its SourceHost (taskpatchd-source.h).
 */

#include <jansson.h>
#include <stdbool.h>
#include <systemd/sd-event.h>

#include "config.h"
#include "error.h"
#include "taskpatchd-curl.h"
#include "taskpatchd-source.h"

typedef struct Hawkbit Hawkbit;

/*
 * A client for the server of @targets[0].config, on @e, its transfers on @glue (borrowed: it
 * must outlive the client), serving the @n models of @targets (copied; their configurations
 * and hosts borrowed); *ret = NULL (and 0) when none is configured. Register it with every
 * model's manager as hawkbit_source.
 */
_warn_unused_result_ int hawkbit_new(sd_event *e, const SourceTarget *targets, size_t n, CurlGlue *glue,
                                     Hawkbit **ret, TpError *err);
Hawkbit *hawkbit_free(Hawkbit *h);
DEFINE_POINTER_CLEANUP(Hawkbit, hawkbit_free)

/* Its callbacks for each manager; userdata is the Hawkbit (transactions tell the models apart). */
extern const UpdateSource hawkbit_source;

/* The "hawkbit" object of the status. */
json_t *hawkbit_status(const Hawkbit *h);
