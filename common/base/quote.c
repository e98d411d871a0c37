/* SPDX-License-Identifier: MIT */

#include <stdio.h>
#include <string.h>

#include "quote.h"

const char *quote_bytes(const char *s, size_t n, char buf[static QUOTE_BUF]) {
        size_t o = 0;

        for (size_t i = 0; s && i < n; i++) {
                unsigned char c = (unsigned char) s[i];
                if (o >= QUOTE_MAX) {
                        memcpy(buf + o, "...", 3);
                        o += 3;
                        break;
                }
                if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'')
                        buf[o++] = (char) c;
                else
                        o += (size_t) snprintf(buf + o, 5, "\\x%02x", c);
        }
        buf[o] = '\0';
        return buf;
}

const char *quote(const char *s, char buf[static QUOTE_BUF]) {
        return quote_bytes(s, s ? strlen(s) : 0, buf);
}
