/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The socket requests (packaging/docs/protocol.md). request_check() is the
 * pure half of the decoder: it needs no manager, no client and no socket, so
 * the daemon and tests/fuzz/fuzz_request.c run the very same checks.
 */

#include <jansson.h>

#include "error.h"

typedef enum Access {
        ACCESS_READ,
        ACCESS_ADMIN,
} Access;

typedef struct Command {
        const char *name;
        Access access;
        const char *const keys[5];      /* allowed besides "cmd", NULL-terminated */
} Command;

/*
 * Check a parsed request (a JSON object, borrowed): "cmd" names a known
 * command, every other key is one that command allows or "model" (any command
 * may name its model), with the right type ("wait", "switch",
 * "allow_downgrade": boolean; "version": integer > 0; "sha256", "model":
 * string; "task": string or null). Returns 0 and the command in
 * *@ret_cmd (static), or -EINVAL with the "usage" message the client gets in
 * @err: "a request needs a string field 'cmd'", "unknown command '...'",
 * "<cmd>: unknown field '...'", "<cmd>: field '...' has the wrong type".
 * Names are quoted up to 64 bytes, cut on a UTF-8 character boundary, so the
 * message is always valid UTF-8 that fits a reply.
 */
_warn_unused_result_ int request_check(json_t *req, const Command **ret_cmd, TpError *err);
