/* SPDX-License-Identifier: MIT */
/* tpctl: the technician's client of taskpatchd over its Unix socket. */

#include <stdio.h>
#include <string.h>

#include "cli.h"

static void help(void) {
        printf("Usage: tpctl [--help] [--version]\n"
               "\n"
               "Client of taskpatchd, the on-device update daemon.\n"
               "This build has no daemon commands yet: status, list, provision, install,\n"
               "switch, mark-good, rollback and watch arrive with the device daemon.\n");
}

int main(int argc, char *argv[]) {
        cli_program = "tpctl";
        if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
                help();
                return EXIT_OK;
        }
        if (argc >= 2 && strcmp(argv[1], "--version") == 0) {
                printf("tpctl %s\n", TASKPATCH_VERSION);
                return EXIT_OK;
        }
        if (argc < 2)
                cli_error("missing command (try 'tpctl --help')");
        else
                cli_error("unknown command '%s': this build has no daemon commands yet", argv[1]);
        return 1;
}
