/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The update sources (the channel fetcher, the hawkBit client, the spool folder) and the
 * manager that carries out what they ask for, each seen through this header only.
 *
 * A source knows the manager as a SourceHost: it asks whether it may start, submits an
 * install or a switch, reads what the device runs, has the channel's serial checked, and
 * emits events. It never reads the manager's state, never builds or starts an operation
 * itself and never calls another source. The manager knows a source as an UpdateSource:
 * it tells each registered source, in the order they were registered, how every
 * operation ended (its own and the others'), how a trial ended, and that it is idle again.
 * The policy (which serial a channel may have, when the technician's switch pins the
 * channel's task) is the manager's.
 *
 * Everything runs on the daemon's event loop. The host calls a source back from the loop,
 * never from inside one of the source's own calls to it.
 */

#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "artifact.h"
#include "config.h"
#include "error.h"
#include "manifest.h"
#include "sha256.h"
#include "taskpatchd-store.h"
#include "trust-root.h"

/* Who asked for an operation: for the log, and for the pin (a switch the channel did not ask for). */
typedef enum UpdateOrigin {
        ORIGIN_SOCKET,                  /* tpctl, or the daemon's own work (a scrub); the zero value */
        ORIGIN_CHANNEL,
        ORIGIN_HAWKBIT,
        ORIGIN_SPOOL,
        ORIGIN_DAEMON,                  /* the daemon's own decision (a revoked model replaced): never pins */
        _ORIGIN_MAX,
        _ORIGIN_INVALID = -EINVAL,
} UpdateOrigin;

const char *update_origin_to_string(UpdateOrigin o);   /* "socket", "channel", "hawkbit", "spool", "daemon" */

/* What the device runs, as the manager fills it (a copy: it does not change under the reader). */
typedef struct DeviceView {
        bool provisioned;               /* false: nothing below is meaningful */
        uint8_t base_sha256[SHA256_DIGEST_SIZE];
        ArtifactKind base_kind;
        char active_task[TASK_NAME_MAX + 1];    /* "" = the base */
        uint64_t active_version;
} DeviceView;

/* The channel's record kept by the manager (state.json). */
typedef struct ChannelView {
        bool have_serial;               /* a channel was ever accepted */
        uint64_t serial;                /* the last accepted serial */
        bool pinned;                    /* a technician's switch: the channel's desired task waits for a new serial */
} ChannelView;

typedef struct InstallRequest {
        bool allow_downgrade;
        bool then_switch;               /* install --switch: the task goes on trial once installed */
        UpdateOrigin origin;
        const uint8_t *expect_target;   /* a base bundle must make this base (what the channel names); NULL: any */
} InstallRequest;

/* How an operation ended, told to every source (@transaction tells a source its own). */
typedef struct OperationOutcome {
        const char *transaction;
        const char *cmd;                /* "install", "switch" (also an install that went on to switch), ... */
        const char *task;               /* "" = the base */
        uint64_t version;
        int r;                          /* 0, or the negative errno it failed with */
        const char *error;              /* r < 0: what went wrong, in words; else NULL */
        bool on_trial;                  /* it put its task on trial: trial_done() tells how that ends */
} OperationOutcome;

typedef struct SourceHost SourceHost;

/*
 * A model a source serves: its view of the configuration (config_model_view(): its state_dir
 * holds its downloads, ->model names it) and its manager's host.
 */
typedef struct SourceTarget {
        const DaemonConfig *config;
        const SourceHost *host;
} SourceTarget;

/* The name of @t's model ("default" on a device without a models: map). */
const char *source_target_model(const SourceTarget *t);
/* The index of the target of the model named @name among the @n of @targets; @n when none. */
size_t source_target_find(const SourceTarget *targets, size_t n, const char *name);
/* Their model names, "llm, det", into @buf of @size bytes (for "this device's models are ..."). */
void source_target_names(const SourceTarget *targets, size_t n, char *buf, size_t size);

/*
 * The manager's side, lent to a source at its creation (it outlives the source). Every
 * function is set; @host is the struct itself and @host->userdata the manager's.
 */
struct SourceHost {
        /* Idle, provisioned, writable, no operation running and no task on trial. */
        bool (*can_start)(const SourceHost *host);
        /*
         * Start an install of the bundle @fd (taken in every case). 1 and the operation's
         * transaction id in @ret_transaction, or a negative errno and @err when it was
         * refused at once (a bad bundle, an older version, no space, busy).
         */
        int (*submit_install)(const SourceHost *host, int fd, const InstallRequest *req,
                              char ret_transaction[TRANSACTION_ID_SIZE], TpError *err);
        /*
         * Start a switch to @task (NULL or "": the base) at @version (0: the newest
         * installed). 1 and the transaction, 0 when it is what runs already (nothing
         * started, @ret_transaction untouched), or a negative errno and @err.
         */
        int (*submit_switch)(const SourceHost *host, const char *task, uint64_t version, UpdateOrigin origin,
                             char ret_transaction[TRANSACTION_ID_SIZE], TpError *err);

        void (*device)(const SourceHost *host, DeviceView *ret);
        /* The device's revocation list (valid until the next call into the host), NULL when it has none. */
        const Revocations *(*revocations)(const SourceHost *host);
        /* The device's trust root (the same), NULL when it has none (the configuration's roles hold). */
        const TrustRoot *(*trust_root)(const SourceHost *host);
        /*
         * Give the device a revocation list or a trust root (@len bytes; @what names it): 1
         * taken (every model lists its bundles again and replaces what is no longer trusted),
         * 0 the one held, < 0 and @err refused (taskpatchd-trust.h: trust_store_update()).
         */
        int (*take_trust)(const SourceHost *host, const uint8_t *data, size_t len, const char *what, TpError *err);
        /* The newest installed version of @task, 0 when none. */
        uint64_t (*newest_installed)(const SourceHost *host, const char *task);
        bool (*installed)(const SourceHost *host, const char *task, uint64_t version);
        /* The anti-rollback floor of @task: the newest version this device accepted, 0 when none. */
        uint64_t (*accepted)(const SourceHost *host, const char *task);

        void (*channel)(const SourceHost *host, ChannelView *ret);
        /*
         * A verified channel's @serial: -ESTALE (and @err) when it is below the accepted one
         * (a replay), 0 when it is the accepted one, 1 when it is new (recorded in
         * state.json with its @created time, which the clock is not trusted before from
         * then on; a pin made under another serial is dropped); -EIO (and @err) when it
         * is new but state.json cannot be written (the manager holds it from now on all the
         * same, and writes it with the next change; the channel is not followed).
         */
        int (*channel_accept_serial)(const SourceHost *host, uint64_t serial, int64_t created, TpError *err);
        /*
         * The time a signature's dates are checked at (sign.h: SIGNATURE_CLOCK_UNKNOWN when
         * they are not), under trust.clock; < 0 and @err when nothing may be verified now
         * (strict: the clock is not to be trusted).
         */
        int (*dates_now)(const SourceHost *host, time_t *ret, TpError *err);

        /* Send @event (reference stolen) to the subscribers; the time is added. */
        void (*emit)(const SourceHost *host, json_t *event);
        /* Record an error for status (last_event, last_error) and send an "error" event. */
        void (*report_error)(const SourceHost *host, const char *code, const char *message, const char *cmd);

        void *userdata;
};

/*
 * A source's side, registered with the manager next to the source's own pointer
 * (@userdata below). Any callback may be NULL.
 */
typedef struct UpdateSource {
        const char *name;               /* "channel", "hawkbit", "spool" */
        /* Every operation that ends, the source's own or not. */
        void (*operation_done)(void *userdata, const OperationOutcome *outcome);
        /* A trial ended: committed, or rolled back (@reason says why). */
        void (*trial_done)(void *userdata, const char *transaction, bool committed, const char *reason);
        /* The manager is idle again: whatever waited for can_start() may go now. */
        void (*idle)(void *userdata);
} UpdateSource;

/*
 * For the sources: an error in words, into @buf (TP_ERROR_MAX bytes, cut at a character,
 * valid UTF-8 for the status JSON), logged as a warning "@name: ..." and reported to
 * @host with code @name for the command "fetch".
 */
void source_error(const SourceHost *host, const char *name, char *buf, const char *fmt, ...) _printf_(4, 5);
