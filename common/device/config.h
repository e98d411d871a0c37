/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The daemon's configuration file (taskpatchd.yaml(5)), parsed with the
 * YAML document tree: unknown keys and bad values are errors that name the
 * line and the key. Absent keys take the defaults below, which are also
 * what config/taskpatchd.yaml documents.
 */

#include <stdbool.h>
#include <stdint.h>

#include "error.h"

#define CONFIG_DEFAULT_PATH "/etc/taskpatch/taskpatchd.yaml"
#define CONFIG_MAX_BYTES (256u << 10)
#define CONFIG_MAX_MIRRORS 8
#define CONFIG_MAX_UNITS 16
#define CONFIG_MAX_MODELS 16
#define CONFIG_DEVICE_ID_MAX 128
#define CONFIG_DEFAULT_VERSION_JUMP (UINT64_C(1) << 32)  /* room for date-like versions (2026120301) */
/* The model of a configuration without "models:": its state is state_dir itself. */
#define CONFIG_DEFAULT_MODEL "default"

typedef enum VerifyMode {
        VERIFY_FULL,            /* full SHA-256 of the staged slot on every switch (the default) */
        VERIFY_INCREMENTAL,     /* rehash only the chunks a switch touched, against the signed chunk root */
        _VERIFY_MODE_MAX,
        _VERIFY_MODE_INVALID = -EINVAL,
} VerifyMode;

/* What the daemon does when it cannot trust its clock for a signature's dates (trust.clock). */
typedef enum ClockPolicy {
        CLOCK_BUILD_FLOOR,      /* a clock before the floor is unknown: dates are not checked (the default) */
        CLOCK_STRICT,           /* ... or not synchronized: nothing is verified until it is */
        _CLOCK_POLICY_MAX,
        _CLOCK_POLICY_INVALID = -EINVAL,
} ClockPolicy;

const char *clock_policy_to_string(ClockPolicy p);     /* "build-floor", "strict" */
ClockPolicy clock_policy_from_string(const char *s);

typedef struct TrialConfig {
        uint64_t timeout;               /* seconds, 1..604800; default 120 */
        char *health_command;           /* NULL when "" or absent; run with /bin/sh -c */
        char *health_url;               /* NULL when "" or absent; http:// or https:// */
        uint64_t health_interval;       /* seconds between probes, 1..3600; default 2 */
} TrialConfig;

typedef struct NotifyConfig {
        char *restart_units[CONFIG_MAX_UNITS];  /* restarted after every activation and rollback */
        size_t n_restart_units;
        char *reload_units[CONFIG_MAX_UNITS];   /* reloaded (or restarted when they cannot reload) */
        size_t n_reload_units;
        char *exec;                     /* run with /bin/sh -c, the event in its environment; NULL: none */
} NotifyConfig;

/*
 * One model the daemon manages: its own slots, tasks, trial and notifications. Without a
 * "models:" map the configuration has one, named CONFIG_DEFAULT_MODEL, made of the top-level
 * model_path, trial and notify; with one, each model starts from the top-level trial and
 * notify (and disk_budget) and overrides what it sets.
 */
typedef struct ModelConfig {
        char *name;                     /* [a-z0-9][a-z0-9._-]{0,63} (bundles name it: taskpatch create --model) */
        char *state_dir;                /* state_dir for "default", else <state_dir>/models/<name> */
        char *model_path;               /* absolute; required for each model of a "models:" map */
        TrialConfig trial;
        NotifyConfig notify;
        uint64_t disk_budget;           /* bytes its state (slots, undo records, bundles, downloads) may take; 0: no cap */
} ModelConfig;

typedef struct DaemonConfig {
        char *state_dir;                /* "/var/lib/taskpatch"; absolute */
        char *socket;                   /* "/run/taskpatch/taskpatchd.sock"; absolute */
        char *admin_group;              /* "taskpatch-admin"; NULL when set to "" */
        char *model_path;               /* "/var/lib/taskpatch/model.gguf"; absolute */
        struct {
                char *ca;               /* "/etc/taskpatch/ca.pem"; absolute */
                /* The roles' own trust, NULL when not set (then trust.ca): config_bundle_ca(), config_channel_ca(). */
                char *bundle_ca, *channel_ca;
                char *root_ca;          /* the root role (revocation lists), NULL: trust.ca; config_root_ca() */
                char *crl;              /* X.509 CRLs checked with every chain: a file or a directory; NULL: none */
                char *decrypt_key;      /* the private key encrypted bundles are opened with; NULL: none */
                bool crl_expired_warn;  /* "crl_expired: refuse|warn": a CRL past its next update; default refuse */
                uint64_t threshold;     /* distinct signers a channel and a revocation list need, 1..8; default 1 */
                uint64_t bundle_threshold;      /* ... and a bundle, 1..8; default 1 */
                ClockPolicy clock;      /* "clock: build-floor|strict"; default build-floor */
                uint64_t max_version_jump;      /* the most a task's version may rise at once; 0: no cap;
                                                 * default CONFIG_DEFAULT_VERSION_JUMP */
        } trust;
        TrialConfig trial;
        uint64_t keep_versions;         /* installed bundles kept per task, 1..1000; default 2 */
        VerifyMode verify;              /* "verify: full|incremental"; default full */
        uint64_t scrub_interval;        /* hours between full scrubs of both slots, 0 = never; default 168 */
        struct {
                uint64_t manifest_bytes;        /* a bundle's manifest, 4096..64 MiB; default 8 MiB */
                uint64_t manifest_spans;        /* spans in one manifest, 1..1048576; default 131072 */
        } limits;
        struct {
                char *urls[CONFIG_MAX_MIRRORS]; /* the channel's URL and its mirrors, tried in order */
                size_t n_urls;          /* 0 (url: "" or absent): no channel is polled */
                uint64_t interval;      /* seconds between polls, 1..604800, +-20% jitter; default 300 */
                uint64_t max_download_rate; /* bytes/s, 0 = unlimited */
                uint64_t low_speed_time; /* a transfer under 1 KiB/s for this many seconds is cut; 1..3600, default 60 */
                bool allow_http;        /* accept http:// (tests only); default false */
        } channel;
        struct {
                char *ca;               /* server certificates' trust for HTTPS; NULL: the system store */
        } tls;
        char *spool;                    /* a folder whose dropped bundles are installed; NULL when "" or absent */
        NotifyConfig notify;
        struct {
                char *url;              /* the server's base URL (https://host:port); NULL: no hawkBit */
                char *tenant;           /* default "DEFAULT" */
                char *controller_id;    /* this device's controllerId; required with url */
                char *token_file;       /* a file holding the target security token; NULL: none sent */
        } hawkbit;
        uint64_t disk_budget;           /* the models' default disk_budget (a view: its model's); 0: no cap */
        char *device_id;                /* who the device is to a channel's rollouts; NULL: /etc/machine-id */
        ModelConfig models[CONFIG_MAX_MODELS];  /* at least one after config_parse(); in the file's order */
        size_t n_models;
        bool models_map;                /* the file has a "models:" map (else models[0] is "default") */
        const char *model;              /* a view's model (config_model_view()); NULL in the file's configuration */
        size_t model_index;             /* a view's index in models[] */
} DaemonConfig;

const char *verify_mode_to_string(VerifyMode m);       /* "full", "incremental" */
VerifyMode verify_mode_from_string(const char *s);

#define CONFIG_DEFAULT_MANIFEST_BYTES (8u << 20)
#define CONFIG_DEFAULT_MANIFEST_SPANS (128u << 10)

/* What bundles' and channels' signatures chain to: trust.bundle_ca and trust.channel_ca, else trust.ca. */
static inline const char *config_bundle_ca(const DaemonConfig *c) {
        return c->trust.bundle_ca ? c->trust.bundle_ca : c->trust.ca;
}
static inline const char *config_channel_ca(const DaemonConfig *c) {
        return c->trust.channel_ca ? c->trust.channel_ca : c->trust.ca;
}
/* What revocation lists' signatures chain to: trust.root_ca, else trust.ca. */
static inline const char *config_root_ca(const DaemonConfig *c) {
        return c->trust.root_ca ? c->trust.root_ca : c->trust.ca;
}

/* Fill @c with the defaults (allocating the strings). */
_warn_unused_result_ int config_init(DaemonConfig *c);
/* Free the strings; @c may be zero-filled. */
void config_done(DaemonConfig *c);

/*
 * Parse @len bytes of YAML over the defaults: @what names the document in
 * errors ("taskpatchd.yaml: line 4: 'timeout': expected an integer from 1
 * to 604800, found 'soon'"). On failure @ret is left as it was.
 */
_warn_unused_result_ int config_parse(const char *text, size_t len, const char *what, DaemonConfig *ret,
                                      TpError *err);
/* Read @path (a regular file, at most CONFIG_MAX_BYTES) and parse it. */
_warn_unused_result_ int config_load(const char *path, DaemonConfig *ret, TpError *err);

/* The model named @name, or NULL. */
const ModelConfig *config_find_model(const DaemonConfig *c, const char *name);

/*
 * @c as model @i sees it: state_dir, model_path, trial and notify are the model's (borrowed
 * from @c, which must outlive it: never config_done() a view).
 */
DaemonConfig config_model_view(const DaemonConfig *c, size_t i);

/* The entries of state_dir the daemon owns; model_path may name none of them or anything in them (NULL-ended). */
extern const char *const config_state_entries[];

/*
 * The files the configuration names (trust.ca, trust.bundle_ca, trust.channel_ca, trust.root_ca,
 * trust.crl, trust.decrypt_key, tls.ca, hawkbit.token_file) must be regular files where they
 * exist: a FIFO or a device would hang or mislead the daemon. 0, or a negative errno naming the
 * key; *@ret_trust_missing is the key of a trust file the daemon uses that does not exist (what
 * it verifies or decrypts would all be refused), else NULL. trust.ca is not used when both roles have their own.
 */
_warn_unused_result_ int config_check_files(const DaemonConfig *c, const char **ret_trust_missing, TpError *err);
