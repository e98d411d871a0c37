/* SPDX-License-Identifier: MIT */
/* taskpatch diff: which sites changed between two models, and how much: the locality report. */

#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "create.h"
#include "diff.h"
#include "match.h"
#include "ggml.h"
#include "safetensors.h"
#include "taskpatch.h"

static void help(void) {
        printf("Usage: taskpatch diff BASE TARGET [--json]\n"
               "\n"
               "List the sites (tensors / initializers) and header bytes that differ, with byte\n"
               "counts. A task folded into the weights and quantized with the same settings\n"
               "changes few sites; many changed sites mean the patch lost its point. BASE and\n"
               "TARGET may be model directories (a tensor may move from one shard to another).\n"
               "\n"
               "When the layout moved (tensors reordered, metadata grown, a tensor resized or\n"
               "added), sites are matched by name and listed by fate: changed, resized, added,\n"
               "renamed and removed first, then those that only moved.\n"
               "\n"
               "changed_bytes (--json, and in every taskpatch command): the target bytes a\n"
               "bundle codes, everything not copied from the base as it is; differing_bytes:\n"
               "the bytes that differ at the same offset (equal layouts only).\n");
}

static const char *type_name(const Artifact *a, const Site *s, char buf[16]) {
        if (a->kind == ARTIFACT_GGUF && ggml_type((uint32_t) s->type))
                return ggml_type((uint32_t) s->type)->name;
        if (a->kind == ARTIFACT_SAFETENSORS && safetensors_dtype_to_string(s->type))
                return safetensors_dtype_to_string(s->type);
        snprintf(buf, 16, "%d", s->type);
        return buf;
}

static size_t sites_changed(const Match *m, const Artifact *target) {
        return target->n_sites - m->count[SITE_SAME] - m->count[SITE_MOVED];
}

/* Every target site's fate and counterpart, and the removed base sites. */
static json_t *match_json(const Match *m, const Artifact *base, const Artifact *target) {
        json_t *list = json_array();
        for (size_t i = 0; i < target->n_sites; i++) {
                const Site *t = &target->sites[i];
                const Site *b = m->counterpart[i] >= 0 ? &base->sites[m->counterpart[i]] : NULL;
                json_array_append_new(list, json_pack("{s:s, s:s, s:I, s:I, s:o, s:o, s:o}", "site", t->name, "fate",
                                                      site_fate_to_string(m->fate[i]), "offset", (json_int_t) t->offset,
                                                      "length", (json_int_t) t->length, "base_site",
                                                      b ? json_string(b->name) : json_null(), "base_offset",
                                                      b ? json_integer((json_int_t) b->offset) : json_null(),
                                                      "base_length", b ? json_integer((json_int_t) b->length) : json_null()));
        }
        for (size_t j = 0; j < m->n_removed; j++) {
                const Site *b = &base->sites[m->removed[j]];
                json_array_append_new(list, json_pack("{s:s, s:s, s:o, s:o, s:s, s:I, s:I}", "site", b->name, "fate",
                                                      "removed", "offset", json_null(), "length", json_null(),
                                                      "base_site", b->name, "base_offset", (json_int_t) b->offset,
                                                      "base_length", (json_int_t) b->length));
        }
        return list;
}

int verb_diff(int argc, char *argv[]) {
        static const struct option options[] = {
                { "help", no_argument, NULL, 'h' },
                { "json", no_argument, NULL, 'j' },
                {},
        };
        _cleanup_(model_set_done) ModelSet bm = MODEL_SET_NULL, tm = MODEL_SET_NULL;
        _cleanup_(diff_freep) Diff *d = NULL;
        _cleanup_(match_freep) Match *match = NULL;
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
        if (cli_open_model(argv[optind], &bm) < 0 || cli_open_model(argv[optind + 1], &tm) < 0)
                return EXIT_FAILED;
        const Artifact *base = bm.artifact, *target = tm.artifact;
        r = diff_compute(&bm.files, base, &tm.files, target, &d, &err);
        if (r < 0) {
                cli_error("%s", tp_error_message(&err, r));
                return EXIT_FAILED;
        }
        if (d->layout_changed && (r = match_compute(&bm.files, base, &tm.files, target, NULL, &match, &err)) < 0) {
                cli_error("%s", tp_error_message(&err, r));
                return EXIT_FAILED;
        }
        uint64_t changed = bundle_changed_bytes(base, target, d, match);

        if (json) {
                json_t *regions = json_array();
                for (size_t i = 0; !match && i < d->n_regions; i++) {
                        const DiffRegion *g = &d->regions[i];
                        const Site *s = g->site >= 0 ? &target->sites[g->site] : NULL;
                        char tb[16];
                        json_array_append_new(regions, json_pack("{s:o, s:o, s:o, s:I, s:I, s:I}",
                                "site", s ? json_string(s->name) : json_null(),
                                "type", s ? json_string(type_name(target, s, tb)) : json_null(),
                                "site_bytes", s ? json_integer((json_int_t) s->length) : json_null(),
                                "offset", (json_int_t) g->offset, "length", (json_int_t) g->length,
                                "differing_bytes", (json_int_t) g->changed_bytes));
                }
                json_t *j = json_pack("{s:s, s:b, s:I, s:I, s:I, s:I, s:I, s:o}", "kind",
                                      artifact_kind_to_string(target->kind), "layout_changed", d->layout_changed,
                                      "sites_total", (json_int_t) d->sites_total, "sites_changed",
                                      (json_int_t) (match ? sites_changed(match, target) : d->sites_changed),
                                      "changed_bytes", (json_int_t) changed, "differing_bytes",
                                      (json_int_t) (match ? changed : d->changed_bytes), "target_bytes",
                                      (json_int_t) target->size, "regions", regions);
                if (match)
                        json_object_set_new(j, "sites", match_json(match, base, target));
                json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
                fputc('\n', stdout);
                json_decref(j);
                return EXIT_OK;
        }

        if (match) {
                printf("%s: %s, %zu sites; the layout moved (a relocating bundle): %zu same, %zu moved, %zu renamed, "
                       "%zu changed, %zu resized, %zu added, %zu removed; a bundle codes %" PRIu64 " of %" PRIu64
                       " bytes (%.3f%%), the rest are copies of base bytes\n",
                       argv[optind + 1], artifact_kind_to_string(target->kind), target->n_sites, match->count[SITE_SAME],
                       match->count[SITE_MOVED], match->count[SITE_RENAMED], match->count[SITE_CHANGED],
                       match->count[SITE_RESIZED], match->count[SITE_ADDED], match->n_removed, changed, target->size,
                       target->size ? 100.0 * (double) changed / (double) target->size : 0.0);
                /* Changed sites first, then the ones that only moved: the locality report is about changes. */
                for (int pass = 0; pass < 2; pass++)
                        for (size_t i = 0; i < target->n_sites; i++) {
                                SiteFate f = match->fate[i];
                                bool moved_only = f == SITE_SAME || f == SITE_MOVED;
                                if (f == SITE_SAME || moved_only != (pass == 1))
                                        continue;
                                const Site *t = &target->sites[i];
                                char tb[16];
                                if (f == SITE_RENAMED)
                                        printf("  %-8s %-40s %-6s %12" PRIu64 " bytes, was %s\n", site_fate_to_string(f),
                                               t->name, type_name(target, t, tb), t->length,
                                               base->sites[match->counterpart[i]].name);
                                else if (match->counterpart[i] >= 0) {
                                        char wb[CLI_WHERE_MAX], wt[CLI_WHERE_MAX];
                                        printf("  %-8s %-40s %-6s %12" PRIu64 " bytes (base: %" PRIu64 " bytes at %s, "
                                               "now at %s)\n", site_fate_to_string(f), t->name,
                                               type_name(target, t, tb), t->length,
                                               base->sites[match->counterpart[i]].length,
                                               cli_where(&bm.files, base->sites[match->counterpart[i]].offset, wb),
                                               cli_where(&tm.files, t->offset, wt));
                                }
                                else
                                        printf("  %-8s %-40s %-6s %12" PRIu64 " bytes\n", site_fate_to_string(f), t->name,
                                               type_name(target, t, tb), t->length);
                        }
                for (size_t j = 0; j < match->n_removed; j++) {
                        const Site *b = &base->sites[match->removed[j]];
                        char tb[16];
                        printf("  %-8s %-40s %-6s %12" PRIu64 " bytes\n", "removed", b->name, type_name(base, b, tb),
                               b->length);
                }
                return EXIT_OK;
        }
        printf("%s: %s, %zu sites; %zu changed; %" PRIu64 " of %" PRIu64 " bytes differ (%.3f%%); a bundle codes %"
               PRIu64 "\n", argv[optind + 1], artifact_kind_to_string(target->kind), d->sites_total, d->sites_changed,
               d->changed_bytes, target->size,
               target->size ? 100.0 * (double) d->changed_bytes / (double) target->size : 0.0, changed);
        for (size_t i = 0; i < d->n_regions; i++) {
                const DiffRegion *g = &d->regions[i];
                char tb[16];
                if (g->site >= 0) {
                        const Site *s = &target->sites[g->site];
                        printf("  %-40s %-6s %12" PRIu64 " of %12" PRIu64 " bytes differ\n", s->name,
                               type_name(target, s, tb), g->changed_bytes, s->length);
                } else {
                        char w[CLI_WHERE_MAX];
                        printf("  %-40s %-6s %12" PRIu64 " of %12" PRIu64 " bytes differ (offset %s)\n",
                               "(header/gap)", "-", g->changed_bytes, g->length, cli_where(&tm.files, g->offset, w));
                }
        }
        return EXIT_OK;
}
