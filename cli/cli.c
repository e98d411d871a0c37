/* SPDX-License-Identifier: MIT */

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "error.h"
#include "parse.h"

const char *cli_program = "taskpatch";

void cli_error(const char *fmt, ...) {
        va_list ap;

        fflush(stdout);
        fprintf(stderr, "%s: ", cli_program);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
}

int cli_fail(bool json, const char *fmt, ...) {
        char message[TP_ERROR_MAX + 256];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(message, sizeof(message), fmt, ap);
        va_end(ap);
        cli_error("%s", message);
        if (json) {
                json_t *j = json_pack("{s:b, s:s}", "ok", false, "error", message);
                if (!j)         /* not UTF-8 (a file name): still one object */
                        j = json_pack("{s:b, s:s}", "ok", false, "error", "(not UTF-8: see standard error)");
                (void) cli_print_json(j);
        }
        return EXIT_FAILED;
}

int cli_print_json(json_t *j) {
        if (!j) {
                cli_error("cannot print the result as JSON (a name that is not UTF-8, or out of memory)");
                return -EINVAL;
        }
        json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        fputc('\n', stdout);
        json_decref(j);
        return 0;
}

int cli_parse_days(const char *option, const char *value, int64_t *ret_seconds) {
        uint64_t v;

        if (parse_u64(value, &v) < 0 || v == 0 || v > 36500) {
                cli_error("--%s: expected a number of days, 1..36500, got '%s'", option, value);
                return -EINVAL;
        }
        *ret_seconds = (int64_t) v * 86400;
        return 0;
}

int cli_parse_u64(const char *option, const char *value, uint64_t *ret) {
        if (parse_u64(value, ret) < 0) {
                cli_error("--%s: expected a non-negative integer, got '%s'", option, value);
                return -EINVAL;
        }
        return 0;
}
