/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * JSON lines over a Unix stream socket, shared by taskpatchd and tpctl
 * (packaging/docs/protocol.md): a bounded line splitter, JSON encoding and
 * decoding of one line with jansson, and sending/receiving a file
 * descriptor with SCM_RIGHTS. No I/O policy here: callers own the sockets.
 */

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"

#define JSONLINE_MAX_REQUEST (64u << 10)        /* a client's line, newline included */
#define JSONLINE_MAX_MESSAGE (1u << 20)         /* a daemon's line, newline included */
#define JSONLINE_MAX_FDS 4                      /* descriptors accepted per recvmsg() */

/* Splits a byte stream into lines of at most @max bytes (newline included). */
typedef struct LineReader {
        char *buf;
        size_t len;             /* bytes held */
        size_t start;           /* start of the first unconsumed line */
        size_t max;
} LineReader;

#define LINE_READER_INIT(m) ((LineReader) { .max = (m) })

/* Append @n bytes. -EMSGSIZE when an unfinished line would exceed max (the reader is then unusable). */
_warn_unused_result_ int line_reader_feed(LineReader *r, const void *data, size_t n);
/*
 * The next complete line without its newline (NUL-terminated in place,
 * valid until the next feed): 1, or 0 when no full line is held.
 */
_warn_unused_result_ int line_reader_next(LineReader *r, char **ret_line, size_t *ret_len);
void line_reader_done(LineReader *r);

/*
 * Parse one line as a JSON object. Errors (-EBADMSG) say where:
 * "line is not JSON: '[' or '{' expected near 'x' at column 1", "a request must be a JSON object".
 */
_warn_unused_result_ int jsonline_parse(const char *line, size_t len, json_t **ret, TpError *err);
/*
 * Make the NUL-terminated @text valid UTF-8 in place: each byte that starts no
 * well-formed sequence becomes '?'. For messages that go into a JSON string
 * (jansson refuses invalid UTF-8, and a reply that cannot be encoded is lost).
 */
void jsonline_scrub_utf8(char *text);
/* Encode @obj compactly followed by "\n" (malloc'ed, NUL-terminated); -EMSGSIZE when longer than @max. */
_warn_unused_result_ int jsonline_dump(const json_t *obj, size_t max, char **ret, size_t *ret_len);

/* A SHA-256 digest as a JSON string of 64 hex digits; NULL when out of memory (a json_pack() using it then fails too). */
json_t *json_sha256(const uint8_t digest[32]);

/*
 * Write @o (a reference stolen, NULL = out of memory) to @path atomically (atomic_file_write():
 * temporary, fsync, rename, fsync of the directory) as JSON dumped with @flags and a final
 * newline; *@ret_bytes (may be NULL) = bytes written. Errors name the path.
 */
_warn_unused_result_ int json_save_atomic(const char *path, json_t *o, size_t flags, uint64_t *ret_bytes,
                                          TpError *err);

/* sendmsg() all @n bytes; the first sendmsg carries @fd with SCM_RIGHTS when @fd >= 0. */
_warn_unused_result_ int jsonline_send(int sock, const void *data, size_t n, int fd);
/*
 * recvmsg() up to @n bytes; descriptors that came along are stored (O_CLOEXEC)
 * in @fds (at most JSONLINE_MAX_FDS; extra ones are closed) and counted in
 * *@ret_nfds. Returns bytes read (0 at EOF) or -errno (-EAGAIN when non-blocking and empty).
 */
_warn_unused_result_ ssize_t jsonline_recv(int sock, void *buf, size_t n, int fds[JSONLINE_MAX_FDS], size_t *ret_nfds);
