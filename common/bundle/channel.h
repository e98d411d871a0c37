/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The channel index (NAME.channel): what a fleet should run, signed with
 * the bundles' signature scheme. `taskpatch publish` writes it next to the
 * bundles it lists; a device fetches it over HTTPS, verifies it, and
 * fetches the bundles it names. See packaging/docs/channel-format.md.
 *
 *   offset 0   "TPCHANL\0"        magic
 *          8   u32 format         CHANNEL_FORMAT
 *         12   u32 flags          0
 *         16   u64 index_size     bytes of YAML, 1..CHANNEL_MAX_INDEX
 *         24   u64 signature_size 1..BUNDLE_MAX_SIGNATURE (a channel is always signed)
 *         32   32 bytes           0
 *   then the index (exactly the signed bytes), then the signature block;
 *   the file ends there. All little-endian.
 *
 * The index, format 2 (format 1 is read too: one section for the device's first model,
 * its desired task at the top level and no models: key):
 *
 *   format: 2
 *   channel: stable
 *   serial: 42                      # raised by every publish; a device never goes back
 *   created: 2026-11-29T12:00:00Z
 *   expires: 2026-12-29T12:00:00Z   # optional
 *   revocations: {version: 3, path: stable.revocations, size: 1294, sha256: ...}   # optional, either format
 *   root: {version: 2, path: fleet.root, size: 3317, sha256: ...}  # optional, either format
 *   models:                         # sorted by model, each once
 *   - model: llm
 *     base: ...                     # optional: the SHA-256 of the base the fleet should run
 *     desired: json                 # optional: the task the fleet should run
 *     rollout: {percent: 5, seed: 7}   # optional: only devices whose cohort is below 5 take it
 *     bundles:
 *     - {task: json, version: 3, path: json-3.tpb, size: 12400000, sha256: ..., kind: gguf,
 *        base_sha256: ..., base_layout: ...}
 *     - {role: base, task: base, version: 2, ...}  # a base bundle (taskpatch create --base-bundle)
 *
 * Untrusted input: parsed with caps on the text, the bundle count and each
 * field; paths are relative, without "..", and limited to a safe alphabet.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "artifact.h"
#include "bundle.h"
#include "error.h"
#include "manifest.h"
#include "sha256.h"
#include "revoke.h"
#include "sign.h"

#define CHANNEL_MAGIC "TPCHANL"         /* 8 bytes with its NUL */
#define CHANNEL_FORMAT 2                /* the newest this build reads and writes */
#define CHANNEL_FORMAT_1 1              /* still read, and written when it says all (one model, "default") */
#define CHANNEL_HEADER_SIZE 64
#define CHANNEL_MAX_INDEX (1u << 20)
#define CHANNEL_MAX_BUNDLES 2048             /* reachable within CHANNEL_MAX_INDEX (~300 bytes each) */
#define CHANNEL_NAME_MAX 64             /* same alphabet as task names */
#define CHANNEL_PATH_MAX 255
#define CHANNEL_MAX_MODELS 64

typedef struct ChannelBundle {
        char model[TASK_NAME_MAX + 1];          /* its section's model ("" in format 1) */
        char task[TASK_NAME_MAX + 1];           /* a base bundle's: its line of bases */
        uint64_t version;
        ManifestRole role;                      /* format 2's "role: base" marks a base bundle */
        char path[CHANNEL_PATH_MAX + 1];        /* relative to the channel's own URL */
        uint64_t size;
        uint8_t sha256[SHA256_DIGEST_SIZE];     /* of the whole .tpb file */
        ArtifactKind kind;
        uint8_t base_sha256[SHA256_DIGEST_SIZE];
        uint8_t base_layout[SHA256_DIGEST_SIZE];
        uint8_t target_sha256[SHA256_DIGEST_SIZE];      /* a base bundle's: the base it makes */
} ChannelBundle;

/* A phased rollout: a device takes its model's update only when its cohort is below percent. */
typedef struct ChannelRollout {
        bool set;                               /* false: every device takes it */
        uint32_t percent;                       /* 0..100 */
        uint64_t seed;                          /* a new seed picks other devices; the same seed widens the cohort */
} ChannelRollout;

/* What one model of the fleet should run, and its bundles. */
typedef struct ChannelModel {
        char name[TASK_NAME_MAX + 1];           /* "" in format 1: the device's first model */
        char desired[TASK_NAME_MAX + 1];        /* "": no wish */
        bool has_base;                          /* the fleet's base for this model is base_sha256 */
        uint8_t base_sha256[SHA256_DIGEST_SIZE];
        ChannelRollout rollout;
        size_t first, n_bundles;                /* its bundles: Channel.bundles[first .. first + n_bundles) */
} ChannelModel;

/*
 * A revocation list (revoke.h) or a trust root (trust-root.h) the channel carries, fetched
 * beside it when newer than the device's.
 */
typedef struct ChannelTrustFile {
        bool set;
        uint64_t version;                       /* the file's own version */
        char path[CHANNEL_PATH_MAX + 1];        /* relative to the channel's URL */
        uint64_t size;                          /* of the whole file, at most its kind's cap */
        uint8_t sha256[SHA256_DIGEST_SIZE];
} ChannelTrustFile;

typedef struct Channel {
        uint32_t format;                        /* CHANNEL_FORMAT_1 or CHANNEL_FORMAT */
        char name[CHANNEL_NAME_MAX + 1];
        uint64_t serial;
        int64_t created;
        int64_t expires;                        /* 0: never */
        ChannelModel *models;                   /* sorted by name, each once; format 1: exactly one, "" */
        size_t n_models;
        ChannelBundle *bundles;                 /* sorted by model, task, version; (model, task, version) unique */
        size_t n_bundles;
        ChannelTrustFile revocations;           /* either format */
        ChannelTrustFile root;                  /* either format */
        /* filled by channel_parse */
        char *index_text;                       /* exactly the signed bytes */
        size_t index_len;
        uint8_t *signature;
        size_t signature_len;
} Channel;

Channel *channel_free(Channel *c);
DEFINE_POINTER_CLEANUP(Channel, channel_free)

/* A path a channel may name: relative, [A-Za-z0-9._/+-], no empty, "." or ".." component. */
bool channel_path_valid(const char *path);

/*
 * Parse a channel file held in memory (@what names it in errors): header,
 * index and the signature block's presence; not the signature itself.
 * -EBADMSG (or -EPROTONOSUPPORT for another format) with a message naming
 * the field and line.
 */
_warn_unused_result_ int channel_parse(const uint8_t *data, size_t len, const char *what, Channel **ret, TpError *err);

/* channel_parse() of the file at @path (at most CHANNEL_MAX_FILE bytes); -ENOENT when there is none. */
#define CHANNEL_MAX_FILE (CHANNEL_HEADER_SIZE + CHANNEL_MAX_INDEX + BUNDLE_MAX_SIGNATURE)
_warn_unused_result_ int channel_load(const char *path, Channel **ret, TpError *err);

/*
 * The trust decision: the signature chains to @trust's CA at its clock (0: clock unknown,
 * dates skipped; CRLs and a revocation list in @trust apply) and the channel has not
 * expired. On success @ret_signer (256 bytes, may be NULL) names the signer.
 */
_warn_unused_result_ int channel_verify(const Channel *c, const char *what, const SignatureTrust *trust,
                                        char *ret_signer, TpError *err);

/* The section of model @name ("" finds format 1's one section), or NULL. */
const ChannelModel *channel_model(const Channel *c, const char *name);

/* The newest task bundle of @task in @cm made for the base @base_sha256 (NULL: any base), or NULL. */
const ChannelBundle *channel_find(const Channel *c, const ChannelModel *cm, const char *task,
                                  const uint8_t *base_sha256);

/* A full base bundle (made from nothing: its base_sha256 is the SHA-256 of no bytes), for any base. */
bool channel_bundle_full(const ChannelBundle *b);
/*
 * The base bundle that brings a device on @device_base to @cm's base: the newest delta from
 * @device_base, else the newest full one. NULL when the section names no base, the device
 * runs it already, or none is listed.
 */
const ChannelBundle *channel_base_bundle(const Channel *c, const ChannelModel *cm, const uint8_t *device_base);

/*
 * The bundle @cm's desired task names for a device on @device_base: the newest made for
 * the section's base when it names one, else for @device_base (NULL: any). NULL: no
 * desired task, or none for that base.
 */
const ChannelBundle *channel_desired(const Channel *c, const ChannelModel *cm, const uint8_t *device_base);

/*
 * A device's cohort for a rollout seeded @seed, 0..99: the first 8 bytes of
 * SHA-256("taskpatch-rollout\n" device_id "\n" seed-in-decimal), big-endian, mod 100.
 * The device takes the update when cohort < percent; raising percent keeps every device
 * that was in.
 */
unsigned channel_cohort(const char *device_id, uint64_t seed);

/*
 * Serialise @c (its format, name, serial, dates, models and bundles: sorted here, each
 * bundle under the section of its model, which must exist) and sign it with @signer: *ret_data (malloc'd) holds the whole file. The two
 * halves: the index text (malloc'd), and a file from an index and a
 * signature block.
 */
_warn_unused_result_ int channel_index_write(Channel *c, char **ret_text, size_t *ret_len, TpError *err);
_warn_unused_result_ int channel_pack(uint32_t format, const char *text, size_t text_len, const uint8_t *sig,
                                      size_t sig_len, uint8_t **ret_data, size_t *ret_len);
_warn_unused_result_ int channel_write(Channel *c, Signer *signer, uint8_t **ret_data, size_t *ret_len, TpError *err);
