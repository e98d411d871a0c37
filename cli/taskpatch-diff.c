/* SPDX-License-Identifier: MIT */
/* taskpatch diff: which sites changed between two models, and how much: the locality report. */

#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "diff.h"
#include "ggml.h"
#include "taskpatch.h"

static void help(void) {
        printf("Usage: taskpatch diff BASE TARGET [--json]\n"
               "\n"
               "List the sites (tensors / initializers) and header bytes that differ, with byte\n"
               "counts. A task folded into the weights and quantized with the same settings\n"
               "changes few sites; many changed sites mean the patch lost its point.\n");
}

static const char *type_name(const Artifact *a, const Site *s, char buf[16]) {
        if (a->kind == ARTIFACT_GGUF && ggml_type((uint32_t) s->type))
                return ggml_type((uint32_t) s->type)->name;
        snprintf(buf, 16, "%d", s->type);
        return buf;
}

int verb_diff(int argc, char *argv[]) {
        static const struct option options[] = {
                { "help", no_argument, NULL, 'h' },
                { "json", no_argument, NULL, 'j' },
                {},
        };
        _cleanup_(artifact_freep) Artifact *base = NULL, *target = NULL;
        _cleanup_(diff_freep) Diff *d = NULL;
        _cleanup_close_ int base_fd = -1, target_fd = -1;
        TpError err = {};
        bool json = false;
        int c, r;

        cli_program = "taskpatch diff";
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
        if (argc - optind != 2) {
                cli_error("expected BASE TARGET (see --help)");
                return EXIT_USAGE;
        }
        if (cli_open_artifact(argv[optind], &base_fd, &base) < 0 ||
            cli_open_artifact(argv[optind + 1], &target_fd, &target) < 0)
                return EXIT_FAILED;
        r = diff_compute(base_fd, base, target_fd, target, &d, &err);
        if (r < 0) {
                cli_error("%s", tp_error_message(&err, r));
                return EXIT_FAILED;
        }

        if (json) {
                json_t *regions = json_array();
                for (size_t i = 0; i < d->n_regions; i++) {
                        const DiffRegion *g = &d->regions[i];
                        const Site *s = g->site >= 0 ? &target->sites[g->site] : NULL;
                        char tb[16];
                        json_array_append_new(regions, json_pack("{s:o, s:o, s:o, s:I, s:I, s:I}",
                                "site", s ? json_string(s->name) : json_null(),
                                "type", s ? json_string(type_name(target, s, tb)) : json_null(),
                                "site_bytes", s ? json_integer((json_int_t) s->length) : json_null(),
                                "offset", (json_int_t) g->offset, "length", (json_int_t) g->length,
                                "changed_bytes", (json_int_t) g->changed_bytes));
                }
                json_t *j = json_pack("{s:s, s:b, s:I, s:I, s:I, s:I, s:o}", "kind", artifact_kind_to_string(target->kind),
                                      "layout_changed", d->layout_changed, "sites_total", (json_int_t) d->sites_total,
                                      "sites_changed", (json_int_t) d->sites_changed, "changed_bytes",
                                      (json_int_t) d->changed_bytes, "target_bytes", (json_int_t) target->size,
                                      "regions", regions);
                json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
                fputc('\n', stdout);
                json_decref(j);
                return EXIT_OK;
        }

        printf("%s: %s, %zu sites; %zu changed; %" PRIu64 " of %" PRIu64 " bytes differ (%.3f%%)\n",
               argv[optind + 1], artifact_kind_to_string(target->kind), d->sites_total, d->sites_changed,
               d->changed_bytes, target->size, target->size ? 100.0 * (double) d->changed_bytes / (double) target->size : 0.0);
        if (d->layout_changed)
                printf("layout changed: tensors moved or the size changed; a bundle rewrites the whole file\n");
        for (size_t i = 0; i < d->n_regions; i++) {
                const DiffRegion *g = &d->regions[i];
                char tb[16];
                if (g->site >= 0) {
                        const Site *s = &target->sites[g->site];
                        printf("  %-40s %-6s %12" PRIu64 " of %12" PRIu64 " bytes differ\n", s->name,
                               type_name(target, s, tb), g->changed_bytes, s->length);
                } else
                        printf("  %-40s %-6s %12" PRIu64 " of %12" PRIu64 " bytes differ (offset %" PRIu64 ")\n",
                               "(header/gap)", "-", g->changed_bytes, g->length, g->offset);
        }
        return EXIT_OK;
}
