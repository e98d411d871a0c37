/* SPDX-License-Identifier: MIT */
#pragma once

/* What the command-line tools share: messages to stderr, exit codes, version. */

#include <jansson.h>
#include <stdbool.h>

#include "macro.h"

#ifndef TASKPATCH_VERSION
#  define TASKPATCH_VERSION "unknown"
#endif

/* Exit codes of taskpatch (tpctl has its own set, documented in tpctl(1)). */
enum {
        EXIT_OK = 0,
        EXIT_FAILED = 1,        /* something did not hold or could not be done */
        EXIT_USAGE = 2,         /* bad arguments */
};

/* "taskpatch hash" etc.: the prefix of every message. Set once by main. */
extern const char *cli_program;

/* Print "<program>: <message>\n" to stderr. */
_printf_(1, 2) void cli_error(const char *fmt, ...);

/*
 * A failure of a command that has --json: the message on stderr as cli_error() prints it and, when
 * @json, {"ok": false, "error": MESSAGE} on standard output, so a script parsing the output always
 * gets one object. Returns EXIT_FAILED.
 */
_printf_(2, 3) int cli_fail(bool json, const char *fmt, ...);

/*
 * Print @j (taken: freed here) on standard output, indented, keys in insertion order. NULL (what
 * json_pack() returns for a string that is not UTF-8, or out of memory) is an error, printed on stderr.
 * Returns 0 or -EINVAL.
 */
int cli_print_json(json_t *j);

/* Select kernels per TASKPATCH_KERNEL; complain and return -errno when it names nothing usable. */
int cli_init_kernels(void);

#include <stdint.h>

#include "artifact.h"
#include "clock.h"          /* clock_wall(): the time every command reads */

/*
 * Open the model at @path, a file or a directory (a set of files), and parse it; prints the
 * error and returns -errno on failure. Free with model_set_done().
 */
int cli_open_model(const char *path, ModelSet *ret);

/* Where offset @off of a model's space lies, for people: "path+offset" in a directory, else the offset. */
#define CLI_WHERE_MAX (FILESET_MAX_PATH + 24)
const char *cli_where(const FileSet *set, uint64_t off, char buf[CLI_WHERE_MAX]);

/* A number of days, 1..36500 (a validity), as seconds; prints "--NAME: ..." and returns -EINVAL when bad. */
int cli_parse_days(const char *option, const char *value, int64_t *ret_seconds);

/* Parse a decimal unsigned integer option value; prints "--NAME: ..." and returns -EINVAL when bad. */
int cli_parse_u64(const char *option, const char *value, uint64_t *ret);

#include "encryption.h"
#include "sign.h"

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
