/* SPDX-License-Identifier: MIT */
/* taskpatch: the producer and offline tools. This file only dispatches to the verbs. */

#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "taskpatch.h"

static const struct {
        const char *name;
        int (*run)(int argc, char *argv[]);
        const char *summary;
} verbs[] = {
        { "create", verb_create, "diff two models and write a signed bundle of the changes" },
        { "inspect", verb_inspect, "show what a bundle holds" },
        { "verify", verb_verify, "check a bundle's signature, manifest and payload" },
        { "apply", verb_apply, "rebuild the target model from the base and a bundle" },
        { "publish", verb_publish, "list a folder's bundles in a signed channel for devices to poll" },
        { "revoke", verb_revoke, "write a signed revocation list: signers devices must no longer trust" },
        { "root", verb_root, "write a signed trust root: the CAs and thresholds of each role, to rotate keys" },
        { "sign", verb_sign, "add a signature to a bundle, channel or revocation list (several signers)" },
        { "diff", verb_diff, "which sites changed between two models (locality report)" },
        { "fold", verb_fold, "fold a LoRA adapter into a float model and quantize it (the task model)" },
        { "quantize", verb_quantize, "quantize a float GGUF model as llama-quantize does, byte for byte" },
        { "hash", verb_hash, "SHA-256 of files, output as sha256sum prints it" },
        { "caps", verb_caps, "CPU capabilities and the kernels chosen for them" },
};

static void help(void) {
        printf("Usage: taskpatch [--help] [--version] COMMAND [ARGS...]\n"
               "\n"
               "Build, inspect, apply and publish TaskPatch task bundles, offline.\n"
               "\n"
               "Commands:\n");
        for (size_t i = 0; i < ELEMENTSOF(verbs); i++)
                printf("  %-8s %s\n", verbs[i].name, verbs[i].summary);
        printf("\n"
               "Run 'taskpatch COMMAND --help' for a command's options.\n"
               "\n"
               "Environment:\n"
               "  TASKPATCH_KERNEL=NAME  force a compute kernel (e.g. generic); see 'taskpatch caps'\n"
               "\n"
               "Exit status: 0 success, 1 failure, 2 usage error.\n");
}

int main(int argc, char *argv[]) {
        if (argc < 2) {
                help();
                return EXIT_USAGE;
        }
        if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
                help();
                return EXIT_OK;
        }
        if (strcmp(argv[1], "--version") == 0) {
                printf("taskpatch %s\n", TASKPATCH_VERSION);
                return EXIT_OK;
        }

        for (size_t i = 0; i < ELEMENTSOF(verbs); i++) {
                if (strcmp(argv[1], verbs[i].name) != 0)
                        continue;
                if (cli_init_kernels() < 0)
                        return EXIT_USAGE;
                return verbs[i].run(argc - 1, argv + 1);
        }

        cli_error("unknown command '%s' (try 'taskpatch --help')", argv[1]);
        return EXIT_USAGE;
}
