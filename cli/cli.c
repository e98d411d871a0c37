/* SPDX-License-Identifier: MIT */

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "dispatch.h"

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

int cli_init_kernels(void) {
        int r = kernels_init();

        if (r == -ENOENT)
                cli_error("TASKPATCH_KERNEL=%s names no kernel (see 'taskpatch caps' for the names)",
                          getenv("TASKPATCH_KERNEL"));
        else if (r == -ENOTSUP)
                cli_error("TASKPATCH_KERNEL=%s: this CPU cannot run that kernel (see 'taskpatch caps')",
                          getenv("TASKPATCH_KERNEL"));
        return r;
}
