/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Strict text-to-value parsers, shared by the YAML documents (yaml-doc.h),
 * the configuration and the command lines. Each accepts exactly one
 * spelling per value, so a signed document cannot say the same thing two
 * ways: no sign, no leading zeros, lowercase hex, "YYYY-MM-DDTHH:MM:SSZ".
 * They return 0 or -EINVAL (-ERANGE for a number past UINT64_MAX) and leave
 * @ret untouched on failure.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "macro.h"
#include "sha256.h"

_warn_unused_result_ int parse_u64(const char *s, uint64_t *ret);
/* Exactly 2 * @n lowercase hex digits into @n bytes. */
_warn_unused_result_ int parse_hex(const char *s, uint8_t *ret, size_t n);
/* @n bytes as 2 * @n lowercase hex digits and a NUL into @ret. */
void format_hex(const uint8_t *p, size_t n, char *ret);
_warn_unused_result_ int parse_sha256_hex(const char *s, uint8_t ret[SHA256_DIGEST_SIZE]);
/* A hex digit's value (either case), or -1. */
int hex_digit(char c);
/* ISO 8601 UTC "YYYY-MM-DDTHH:MM:SSZ" as seconds since the epoch; out-of-range fields (Feb 30) are refused. */
_warn_unused_result_ int parse_time_utc(const char *s, int64_t *ret);
/* Format @t as "YYYY-MM-DDTHH:MM:SSZ"; @buf must hold 21 bytes. */
void format_time_utc(int64_t t, char buf[21]);

/* A task's or model's name, [a-z0-9][a-z0-9._-]{0,63}: safe as a file name component, no "/" or "..". */
#define TASK_NAME_MAX 64
bool task_name_valid(const char *name);
