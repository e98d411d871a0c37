/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the daemon's request decoder: what a client's bytes
 * go through before the manager sees them. The input is one connection's
 * byte stream, fed to a LineReader with the daemon's cap in the pieces the
 * server reads (16 KiB, daemon/taskpatchd-server.c); each line is parsed
 * (common/text/jsonline.c) and checked by request_check()
 * (daemon/taskpatchd-requests.c, from libtaskpatchd.a): command, keys,
 * types. It needs no manager and no socket, so the real code runs without
 * a daemon. fuzz_jsonline covers the framing in odd-sized pieces; this
 * target covers what the requests mean.
 *
 * What must hold: every refusal carries a message that the server can put
 * into a reply (valid UTF-8: a message jansson refuses would turn the error
 * reply into a bare {"ok":true}); an accepted request names that command
 * and holds only keys it allows, with the types the handlers rely on
 * (they read "version" as an integer, "task" as a string or null, without
 * checking again).
 */

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "jsonline.h"
#include "manifest.h"
#include "taskpatchd-requests.h"
#include "yaml-doc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define RECV_PIECE (16u << 10)

/* The reply the server would build (client_reply_error()): it must encode, and fit a daemon line. */
static void check_error_reply(const char *code, const TpError *err, int r) {
        json_t *reply;
        char *text = NULL;
        size_t n;

        if (r != -EINVAL && r != -EBADMSG)
                abort();
        if (!err->message[0] || err->code != r)
                abort();
        reply = json_pack("{s:b, s:{s:s, s:s}}", "ok", 0, "error", "code", code, "message", err->message);
        if (!reply)
                abort();
        if (jsonline_dump(reply, JSONLINE_MAX_MESSAGE, &text, &n) < 0)
                abort();
        free(text);
        json_decref(reply);
}

static bool allowed(const Command *cmd, const char *key) {
        if (strcmp(key, "cmd") == 0 || strcmp(key, "model") == 0)      /* every command may name its model */
                return true;
        for (size_t i = 0; cmd->keys[i]; i++)
                if (strcmp(key, cmd->keys[i]) == 0)
                        return true;
        return false;
}

/* What the handlers in taskpatchd-requests.c take for granted once the check passed. */
static void check_accepted(json_t *req, const Command *cmd) {
        const char *key;
        json_t *v;

        if (!cmd || !cmd->name || strcmp(cmd->name, json_string_value(json_object_get(req, "cmd"))) != 0)
                abort();
        if (cmd->access != ACCESS_READ && cmd->access != ACCESS_ADMIN)
                abort();
        json_object_foreach(req, key, v) {
                if (!allowed(cmd, key))
                        abort();
                if ((strcmp(key, "wait") == 0 || strcmp(key, "switch") == 0 ||
                     strcmp(key, "allow_downgrade") == 0) && !json_is_boolean(v))
                        abort();
                if (strcmp(key, "version") == 0 && !(json_is_integer(v) && json_integer_value(v) > 0))
                        abort();
                if ((strcmp(key, "sha256") == 0 || strcmp(key, "model") == 0) && !json_is_string(v))
                        abort();
                if (strcmp(key, "task") == 0 && !json_is_string(v) && !json_is_null(v))
                        abort();
        }

        /* The pure parts of the handlers: they must take any string without harm. */
        const char *s = json_string_value(json_object_get(req, "sha256"));
        if (s) {
                uint8_t digest[SHA256_DIGEST_SIZE];
                if (parse_sha256_hex(s, digest) == 0 && strlen(s) != 2 * SHA256_DIGEST_SIZE)
                        abort();
        }
        /* A name switch_new() accepts becomes a file name in the state directory. */
        s = json_string_value(json_object_get(req, "task"));
        if (s && task_name_valid(s) && (s[0] == '.' || strchr(s, '/') || strlen(s) > TASK_NAME_MAX))
                abort();
}

static void decode(const char *line, size_t len) {
        json_t *req = NULL;
        const Command *cmd = NULL;
        TpError err = {};
        int r;

        r = jsonline_parse(line, len, &req, &err);
        if (r < 0) {
                if (req)
                        abort();
                check_error_reply("usage", &err, r);
                return;
        }
        r = request_check(req, &cmd, &err);
        if (r < 0)
                check_error_reply("usage", &err, r);
        else if (r != 0)
                abort();
        else
                check_accepted(req, cmd);
        json_decref(req);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        LineReader lr = LINE_READER_INIT(JSONLINE_MAX_REQUEST);
        char *line;
        size_t len;
        int r;

        for (size_t off = 0; off < size; off += RECV_PIECE) {
                size_t n = size - off < RECV_PIECE ? size - off : RECV_PIECE;

                r = line_reader_feed(&lr, data + off, n);
                if (r == -EMSGSIZE)
                        break;          /* the server answers too-large and closes the connection */
                if (r < 0)
                        abort();
                while (line_reader_next(&lr, &line, &len) > 0)
                        decode(line, len);
        }
        line_reader_done(&lr);
        return 0;
}
