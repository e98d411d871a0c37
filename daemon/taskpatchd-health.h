/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Trial health probes, run asynchronously on the daemon's event loop: a
 * command (exit 0 healthy, 75 = EX_TEMPFAIL not yet, anything else
 * failing) and/or a URL (200 healthy; 503, a refused connection or a
 * timeout not yet -- the service may still be loading its model; any other
 * answer failing). With both configured, both must be healthy.
 */

#include <stdint.h>
#include <systemd/sd-event.h>

#include "macro.h"

typedef enum HealthResult {
        HEALTH_OK,
        HEALTH_NOT_YET,
        HEALTH_FAILING,
        _HEALTH_RESULT_MAX,
        _HEALTH_RESULT_INVALID = -EINVAL,
} HealthResult;

const char *health_result_to_string(HealthResult r);    /* "ok", "not-yet", "failing" */

/* Called once per probe. @detail says what was seen ("exit status 3", "HTTP 500", "connection refused"). */
typedef void (*HealthCallback)(void *userdata, HealthResult result, const char *detail);

typedef struct HealthCheck HealthCheck;

/*
 * @command and/or @url (NULL when not configured; at least one is set).
 * @probe_timeout_usec bounds each probe (a command still running then is
 * killed with SIGKILL and counts as not yet).
 */
_warn_unused_result_ int health_check_new(sd_event *e, const char *command, const char *url,
                                          uint64_t probe_timeout_usec, HealthCheck **ret);
/* Cancels a running probe (kills its child, drops its transfer) without calling back. NULL-safe. */
HealthCheck *health_check_free(HealthCheck *h);
DEFINE_POINTER_CLEANUP(HealthCheck, health_check_free)

/* Start one probe; @cb runs later from the event loop, never from inside this call. -EBUSY if one is running. */
_warn_unused_result_ int health_check_probe(HealthCheck *h, HealthCallback cb, void *userdata);
