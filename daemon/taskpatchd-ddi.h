/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The documents of hawkBit's Direct Device Integration API, without the network
 * (https://eclipse.dev/hawkbit/apis/ddi_api/). taskpatchd-hawkbit.c fetches them;
 * here the bytes of a response body become plain structs, and the JSON the device
 * sends is built. Pure: no I/O, no event loop, no logging; tests/fuzz/fuzz_ddi.c
 * and tests/unit/check_ddi.c drive it directly.
 *
 * Every body is untrusted input. Each parser:
 *   - refuses a body over DDI_BODY_MAX bytes (-E2BIG), one that is not a JSON
 *     object (-EBADMSG, with jansson's words), or one with a duplicate key;
 *   - refuses a field of the wrong type, an id outside [A-Za-z0-9_-]{1,DDI_ID_MAX},
 *     an href over DDI_URL_MAX bytes (-E2BIG) or with a space or control
 *     character, and an href that is not https:// (http:// too when @allow_http:
 *     the same rule as http_setup() applies to the transfer) (-EBADMSG);
 *   - ignores what it does not use (other links, actionHistory, other hashes);
 *   - returns 0 or a negative errno, fills @err with a message that names the
 *     field ("deployment.update: 'later' is not skip, attempt or forced") and is
 *     valid UTF-8 (it goes into feedback and status JSON), and leaves *ret
 *     untouched on failure.
 */

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "sha256.h"

#define DDI_BODY_MAX (1u << 20)         /* a controller resource, deployment or cancel document */
#define DDI_ID_MAX 63                   /* an action id (hawkBit's are decimal) */
#define DDI_URL_MAX 4096                /* an href (a CDN's signed URL fits) */
#define DDI_FILENAME_MAX 255
#define DDI_CHUNKS_MAX 64               /* chunks (software modules) in one deployment */
#define DDI_CHUNK_ARTIFACTS_MAX 64      /* artifacts in one chunk, ours or not */
#define DDI_ARTIFACTS_MAX 16            /* .tpb artifacts in one deployment */
#define DDI_SLEEP_HOURS_MAX 999         /* config.polling.sleep is "H[HH]:MM:SS" */
#define DDI_METADATA_MAX 64             /* a chunk's metadata entries */
#define DDI_MODEL_MAX 64                /* a model name, [a-z0-9][a-z0-9._-]{0,63} */
/* The metadata key of a chunk (a software module) that names the device model its bundles are for. */
#define DDI_MODEL_KEY "taskpatch.model"

/* ---- the controller base resource: GET {tenant}/controller/v1/{controllerId} ---- */

typedef struct DdiController {
        uint64_t sleep_usec;            /* config.polling.sleep; 0 when absent (or "00:00:00") */
        char *deployment_href;          /* _links.deploymentBase.href, or NULL */
        char *cancel_href;              /* _links.cancelAction.href, or NULL */
        bool config_data;               /* _links.configData is there: the server asks for the attributes */
} DdiController;

/* Free the hrefs and zero @c. NULL-safe, and safe on a zeroed struct. */
void ddi_controller_done(DdiController *c);
_warn_unused_result_ int ddi_controller_parse(const char *data, size_t len, bool allow_http, DdiController *ret,
                                              TpError *err);

/* ---- a deployment: GET .../deploymentBase/{actionId} ---- */

/* deployment.download and deployment.update. */
typedef enum DdiHandling {
        DDI_HANDLING_SKIP,              /* not now (update: outside the maintenance window) */
        DDI_HANDLING_ATTEMPT,
        DDI_HANDLING_FORCED,
        _DDI_HANDLING_MAX,
        _DDI_HANDLING_INVALID = -EINVAL,
} DdiHandling;

const char *ddi_handling_to_string(DdiHandling h);
DdiHandling ddi_handling_from_string(const char *s);

typedef struct DdiArtifact {
        char filename[DDI_FILENAME_MAX + 1];    /* ends in ".tpb"; no '/', no control character */
        uint64_t size;
        uint8_t sha256[SHA256_DIGEST_SIZE];
        char *url;                      /* _links.download.href, or download-http's when allow_http and
                                           there is no download link (owned) */
        char model[DDI_MODEL_MAX + 1];  /* its chunk's metadata DDI_MODEL_KEY value; "" when it has none */
} DdiArtifact;

typedef struct DdiDeployment {
        char id[DDI_ID_MAX + 1];
        DdiHandling download, update;   /* DDI_HANDLING_FORCED when absent; _INVALID only when refused */
        DdiArtifact artifacts[DDI_ARTIFACTS_MAX];       /* the .tpb artifacts of every chunk, in order */
        size_t n_artifacts;
        /*
         * The action is named, but cannot be carried out: .code < 0 and .message
         * says why (a bad download or update value, a bad .tpb artifact, a cap, no
         * .tpb artifact at all: "the deployment holds no .tpb artifact"); there are
         * no artifacts then. The client closes the action with this as the reason.
         * Artifacts of other chunk types (not "*.tpb") are skipped unchecked, beyond
         * their filename.
         */
        TpError refused;
} DdiDeployment;

void ddi_deployment_done(DdiDeployment *d);
/*
 * 0 when "id" is a valid id and "deployment" an object, even when the rest is
 * refused (see .refused); < 0 when the document does not name an action.
 */
_warn_unused_result_ int ddi_deployment_parse(const char *data, size_t len, bool allow_http, DdiDeployment *ret,
                                              TpError *err);

/* ---- a cancel: GET .../cancelAction/{actionId} ---- */

typedef struct DdiCancel {
        char id[DDI_ID_MAX + 1];        /* the cancel action: its feedback goes to cancelAction/{id}/feedback */
        char stop_id[DDI_ID_MAX + 1];   /* cancelAction.stopId: the action to stop */
} DdiCancel;

_warn_unused_result_ int ddi_cancel_parse(const char *data, size_t len, DdiCancel *ret, TpError *err);

/* True when @s is an action id as the parsers accept it. */
bool ddi_id_valid(const char *s);

/* ---- what the device sends ---- */

/* status.execution of a feedback. */
typedef enum DdiExecution {
        DDI_EXECUTION_CLOSED,
        DDI_EXECUTION_PROCEEDING,
        DDI_EXECUTION_CANCELED,
        DDI_EXECUTION_SCHEDULED,
        DDI_EXECUTION_REJECTED,
        DDI_EXECUTION_RESUMED,
        DDI_EXECUTION_DOWNLOADED,
        DDI_EXECUTION_DOWNLOAD,
        _DDI_EXECUTION_MAX,
        _DDI_EXECUTION_INVALID = -EINVAL,
} DdiExecution;

/* status.result.finished of a feedback. */
typedef enum DdiFinished {
        DDI_FINISHED_SUCCESS,
        DDI_FINISHED_FAILURE,
        DDI_FINISHED_NONE,
        _DDI_FINISHED_MAX,
        _DDI_FINISHED_INVALID = -EINVAL,
} DdiFinished;

const char *ddi_execution_to_string(DdiExecution e);
const char *ddi_finished_to_string(DdiFinished f);

/*
 * The body of a feedback POST (deploymentBase/{id}/feedback, cancelAction/{id}/feedback):
 *   {"id": ID, "status": {"execution": E, "result": {"finished": F}, "details": [DETAIL]}}
 * with "details" empty when @detail is NULL or "" (or not valid UTF-8). The caller owns
 * the result; NULL when out of memory or @e, @f are out of range.
 */
json_t *ddi_feedback_new(const char *id, DdiExecution e, DdiFinished f, const char *detail);

/* The body of the configData PUT: {"mode": "merge", "data": @data}; @data (an object of strings) is stolen. */
json_t *ddi_config_data_new(json_t *data);
