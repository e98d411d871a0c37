/* SPDX-License-Identifier: MIT */
/* taskpatchd: the on-device update daemon. */

#include <stdio.h>
#include <string.h>

#ifndef TASKPATCH_VERSION
#  define TASKPATCH_VERSION "unknown"
#endif

static void help(void) {
        printf("Usage: taskpatchd [--help] [--version]\n"
               "\n"
               "The TaskPatch on-device update daemon. This build carries only the\n"
               "foundation (kernels, hashing); the update service is not built yet.\n");
}

int main(int argc, char *argv[]) {
        if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
                help();
                return 0;
        }
        if (argc >= 2 && strcmp(argv[1], "--version") == 0) {
                printf("taskpatchd %s\n", TASKPATCH_VERSION);
                return 0;
        }
        fprintf(stderr, "<3>taskpatchd: the update service is not built yet; see --help\n");
        return 1;
}
