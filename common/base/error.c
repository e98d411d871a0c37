/* SPDX-License-Identifier: MIT */

#include <stdio.h>
#include <string.h>

#include "error.h"

int tp_error(TpError *e, int code, const char *fmt, ...) {
        va_list ap;

        if (!e)
                return code;
        va_start(ap, fmt);
        vsnprintf(e->message, sizeof(e->message), fmt, ap);
        va_end(ap);
        e->code = code;
        return code;
}

int tp_error_prefix(TpError *e, int code, const char *fmt, ...) {
        char prefix[TP_ERROR_MAX], old[TP_ERROR_MAX];
        va_list ap;

        if (!e)
                return code;
        va_start(ap, fmt);
        vsnprintf(prefix, sizeof(prefix), fmt, ap);
        va_end(ap);
        snprintf(old, sizeof(old), "%s", e->message[0] ? e->message : strerror(-code));
        /* Truncation is fine: the start of a message says the most. */
        size_t n = strnlen(prefix, sizeof(e->message) - 1);
        memcpy(e->message, prefix, n);
        e->message[n] = '\0';
        if (n + 2 < sizeof(e->message)) {
                memcpy(e->message + n, ": ", 2);
                size_t m = strnlen(old, sizeof(e->message) - n - 3);
                memcpy(e->message + n + 2, old, m);
                e->message[n + 2 + m] = '\0';
        }
        e->code = code;
        return code;
}

const char *tp_error_message(const TpError *e, int code) {
        if (e && e->message[0])
                return e->message;
        return strerror(code < 0 ? -code : code);
}
