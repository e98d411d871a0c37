/* SPDX-License-Identifier: MIT */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>

#include "artifact.h"
#include "channel.h"
#include "cli.h"
#include "clock.h"          /* clock_wall(): the time every command reads */
#include "create.h"
#include "encryption.h"
#include "manifest.h"
#include "quantize.h"
#include "sign.h"

/* ---- What the verbs share (taskpatch-common.c) ---- */

/* Select kernels per TASKPATCH_KERNEL; complain and return -errno when it names nothing usable. */
int cli_init_kernels(void);

/*
 * Open the model at @path, a file or a directory (a set of files), and parse it; prints the
 * error and returns -errno on failure. Free with model_set_done().
 */
int cli_open_model(const char *path, ModelSet *ret);

/* Where offset @off of a model's space lies, for people: "path+offset" in a directory, else the offset. */
#define CLI_WHERE_MAX (FILESET_MAX_PATH + 24)
const char *cli_where(const FileSet *set, uint64_t off, char buf[CLI_WHERE_MAX]);

/*
 * The signers of create, publish and revoke: each a key file (--key) or a key in a PKCS#11
 * token (--pkcs11-uri), with its certificate chain (--cert); the n-th --cert is the n-th key's.
 * Several sign one file together (a set of signatures, sigset.h).
 */
#define CLI_SIGNERS_MAX 8
typedef struct CliSigners {
        const char *keys[CLI_SIGNERS_MAX];      /* a key file, or NULL when uris[i] names a token's key */
        const char *uris[CLI_SIGNERS_MAX];
        const char *certs[CLI_SIGNERS_MAX];
        size_t n_keys, n_certs;
        bool too_many;
} CliSigners;

/* The signer options' getopt values, the same in every command that signs (above its own). */
enum { CLI_OPT_KEY = 0x1000, CLI_OPT_PKCS11_URI, CLI_OPT_CERT };
#define CLI_SIGNER_OPTIONS \
        { "key", required_argument, NULL, CLI_OPT_KEY }, \
        { "pkcs11-uri", required_argument, NULL, CLI_OPT_PKCS11_URI }, \
        { "cert", required_argument, NULL, CLI_OPT_CERT }
/* Record --key, --pkcs11-uri or --cert (@opt, getopt's value) with its @arg. */
void cli_signers_option(CliSigners *s, int opt, const char *arg);
/* Whether some key or certificate was given; whether they pair up (as many of each, 1..8). */
bool cli_signers_any(const CliSigners *s);
bool cli_signers_valid(const CliSigners *s);
/* Load them all, the first one first (its dates are what create checks); prints the error, -errno. */
int cli_load_signers(const CliSigners *s, Signer **ret);

/* The keys of create --encrypt-to (encryption.h), in the order given. */
typedef struct RecipientKeys {
        RecipientKey **keys;
        size_t n;
} RecipientKeys;
void recipient_keys_freep(RecipientKeys *k);
/* Load each of @paths; prints the error, -errno. None: an empty set. */
int cli_load_recipients(const char *const *paths, size_t n, RecipientKeys *ret);

/* The taskpatch subcommands, one file each (taskpatch-<verb>.c). Each returns an exit code. */

int verb_hash(int argc, char *argv[]);
/* The set digest of the model directory @path (fileset.h), and its files' total size and count. */
int hash_model_dir(const char *path, uint8_t digest[SHA256_DIGEST_SIZE], uint64_t *ret_size, size_t *ret_files);
int verb_caps(int argc, char *argv[]);
int verb_create(int argc, char *argv[]);
/* create with its argument vector; with --json and @ret_json the summary is returned there, not printed. */
int create_run(int argc, char *argv[], json_t **ret_json);
int verb_inspect(int argc, char *argv[]);
int verb_verify(int argc, char *argv[]);
int verb_apply(int argc, char *argv[]);
int verb_diff(int argc, char *argv[]);
int verb_publish(int argc, char *argv[]);
int verb_fold(int argc, char *argv[]);
int verb_quantize(int argc, char *argv[]);

/* What fold and quantize share (taskpatch-quantize.c). */
void quantize_list_types(FILE *f);
int quantize_parse_type(const char *name, const QuantFtype **ret);
int quantize_open_model(const char *path, int *ret_fd, Gguf **ret);
int quantize_open_imatrix(const char *path, Imatrix **ret);
void quantize_progress(void *userdata, size_t i, size_t n, const GgufTensor *t, uint32_t type);
bool quantize_want_progress(bool quiet, bool json);
int quantize_parse_threads(const char *s, unsigned *ret);
unsigned quantize_default_threads(void);
double quantize_now(void);
json_t *quantize_result_json(const char *in, const char *out, const QuantizeOptions *o, const QuantizeResult *r,
                             double seconds);
void quantize_print_result(const char *out, const QuantizeOptions *o, const QuantizeResult *r, double seconds);

/* taskpatch-inspect.c: a bundle's spans, for inspect and create --dry-run (@costs: each span's
 * candidates, create.h; @target: the target model, which names the sites a span without one of
 * its own covers; both NULL for inspect). */
json_t *span_list_json(const Manifest *m, const CreateSpanCost *costs, const Artifact *target);
void span_list_print(const Manifest *m, const CreateSpanCost *costs, const Artifact *target);

/* Channel files (taskpatch-channel.c), for inspect, verify and publish. */
bool cli_is_channel(const char *path);
/* Whether the file at @path starts with the 8-byte @magic. */
bool cli_has_magic(const char *path, const char *magic);
/* A signer certificate as inspect shows it: subject, issuer, serial, key_sha256 (what revoke names). */
json_t *signer_json(const SignatureInfo *info);
void signer_print(const SignatureInfo *info);
/* A signature section's signers (one block or a set: sigset.h), read without verifying. */
bool signers_first(const uint8_t *sig, size_t len, SignatureInfo *ret);
json_t *signers_json(const uint8_t *sig, size_t len);
void signers_print(const uint8_t *sig, size_t len);
json_t *channel_to_json(const Channel *c);
void channel_print(const Channel *c);
int channel_inspect(const char *path, bool json);
int channel_verify_files(const char *path, const char *ca_path, unsigned threshold);

/* Revocation lists (taskpatch-revoke.c), for revoke, inspect and verify. */
int verb_revoke(int argc, char *argv[]);
int verb_sign(int argc, char *argv[]);
int revocations_inspect(const char *path, bool json);
int revocations_verify_file(const char *path, const char *ca_path, unsigned threshold);
int verb_root(int argc, char *argv[]);
/* taskpatch-root.c: a trust root in inspect and verify (@ca_path: a CA file, or the trust root held) */
int trust_root_inspect(const char *path, bool json);
int trust_root_verify_file(const char *path, const char *ca_path, unsigned threshold);
