/* SPDX-License-Identifier: MIT */
/* taskpatch caps: the CPU's capabilities and the kernels dispatch chose for them. */

#include <getopt.h>
#include <jansson.h>
#include <stdio.h>

#include "cli.h"
#include "cpu.h"
#include "dispatch.h"
#include "taskpatch.h"

static void help(void) {
        printf("Usage: taskpatch caps [--json]\n"
               "\n"
               "Show the CPU features TaskPatch looks for on this architecture, and which\n"
               "kernel implementation each compute family uses (best available, or the\n"
               "one TASKPATCH_KERNEL forces).\n"
               "\n"
               "  --json   {\"arch\": ..., \"features\": {NAME: bool, ...}, \"kernels\": {FAMILY: NAME, ...}}\n");
}

static json_t *caps_json(uint64_t cpu) {
        json_t *features = json_object(), *kernels = json_object();

        for (CpuFeature f = 0; f < _CPU_FEATURE_MAX; f++)
                if (cpu_feature_native(f))
                        json_object_set_new(features, cpu_feature_to_string(f), json_boolean(cpu & CPU_BIT(f)));
        for (KernelFamily k = 0; k < _KERNEL_FAMILY_MAX; k++)
                json_object_set_new(kernels, kernel_family_to_string(k), json_string(kernel_active(k)));

        return json_pack("{s:s, s:o, s:o}", "arch", cpu_arch(), "features", features, "kernels", kernels);
}

static void caps_print(uint64_t cpu) {
        printf("arch:     %s\n", cpu_arch());

        printf("present: ");
        for (CpuFeature f = 0; f < _CPU_FEATURE_MAX; f++)
                if (cpu_feature_native(f) && (cpu & CPU_BIT(f)))
                        printf(" %s", cpu_feature_to_string(f));
        printf("\nabsent:  ");
        for (CpuFeature f = 0; f < _CPU_FEATURE_MAX; f++)
                if (cpu_feature_native(f) && !(cpu & CPU_BIT(f)))
                        printf(" %s", cpu_feature_to_string(f));

        printf("\n\nkernels:\n");
        for (KernelFamily k = 0; k < _KERNEL_FAMILY_MAX; k++) {
                const char *name;
                bool ok;

                printf("  %-13s %-9s (built:", kernel_family_to_string(k), kernel_active(k));
                for (size_t i = 0; (name = kernel_impl(k, i, &ok)); i++)
                        printf(" %s%s", name, ok ? "" : "[unsupported]");
                printf(")\n");
        }
}

int verb_caps(int argc, char *argv[]) {
        static const struct option options[] = {
                { "help", no_argument, NULL, 'h' },
                { "json", no_argument, NULL, 'j' },
                {},
        };
        bool json = false;
        int c;

        cli_program = "taskpatch caps";
        while ((c = getopt_long(argc, argv, "h", options, NULL)) >= 0)
                switch (c) {
                case 'h':
                        help();
                        return EXIT_OK;
                case 'j':
                        json = true;
                        break;
                default:
                        return EXIT_USAGE;
                }
        if (optind < argc) {
                cli_error("unexpected argument '%s'", argv[optind]);
                return EXIT_USAGE;
        }

        uint64_t cpu = cpu_detect();
        if (json) {
                json_t *j = caps_json(cpu);
                if (!j) {
                        cli_error("out of memory");
                        return EXIT_FAILED;
                }
                json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
                fputc('\n', stdout);
                json_decref(j);
        } else
                caps_print(cpu);

        return fflush(stdout) == 0 ? EXIT_OK : EXIT_FAILED;
}
