/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Telling inference services that model_path changed, after every activation and rollback
 * (config "notify:"), beside the socket's slot-changed event:
 *   restart_units / reload_units  systemd is asked over D-Bus (sd-bus, asynchronous, on the
 *                  event loop): org.freedesktop.systemd1.Manager.RestartUnit or
 *                  ReloadOrRestartUnit(unit, "replace"), on the system bus
 *                  (DBUS_SYSTEM_BUS_ADDRESS when set);
 *   exec           a command run with /bin/sh -c, the event's fields in its environment as
 *                  TASKPATCH_EVENT, TASKPATCH_TASK, TASKPATCH_VERSION, ... (upper-cased).
 * Failures are logged and shown in status (notify.last_error); they never undo a switch: the
 * trial's health check decides whether the service came up with the new model.
 */

#include <jansson.h>
#include <systemd/sd-event.h>

#include "config.h"
#include "error.h"

typedef struct Notifier Notifier;

/* For @config's notify: settings, on @e (both borrowed, outliving it); *ret = NULL (and 0) when nothing is configured. */
_warn_unused_result_ int notifier_new(sd_event *e, const DaemonConfig *config, Notifier **ret, TpError *err);
Notifier *notifier_free(Notifier *n);
/* @ev: the slot-changed event (borrowed). NULL-safe. */
void notifier_slot_changed(Notifier *n, json_t *ev);
/* The "notify" object of the status. */
json_t *notifier_status(const Notifier *n);
