/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Untrusted names (a tensor's, a key's) made safe to put in an error message: printable
 * ASCII other than '\\' and '\'' kept, every other byte written as \xNN, and the result cut
 * with "..." after QUOTE_MAX characters. Cannot fail.
 */

#include <stddef.h>

#define QUOTE_MAX 64u
#define QUOTE_BUF (QUOTE_MAX + 4 + 3 + 1) /* an escape may start at QUOTE_MAX - 1, then "...", NUL */

/* The first @n bytes of @s (which may hold NULs) quoted into @buf; returns @buf. */
const char *quote_bytes(const char *s, size_t n, char buf[static QUOTE_BUF]);

/* The NUL-terminated @s (NULL: "") quoted into @buf; returns @buf. */
const char *quote(const char *s, char buf[static QUOTE_BUF]);
