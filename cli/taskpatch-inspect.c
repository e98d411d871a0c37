/* SPDX-License-Identifier: MIT */
/* taskpatch inspect: what a bundle holds, without trusting or applying it. */

#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "bundle.h"
#include "cli.h"
#include "create.h"
#include "ggml.h"
#include "encryption.h"
#include "sign.h"
#include "yaml-doc.h"
#include "revoke.h"
#include "trust-root.h"
#include "taskpatch.h"

static void help(void) {
        printf("Usage: taskpatch inspect BUNDLE|CHANNEL [--json]\n"
               "\n"
               "Show a bundle's manifest: task, version, base and target, the sites it changes,\n"
               "its spans and encodings, sizes and signer; or a channel's serial, dates, desired\n"
               "task and bundles. Nothing is verified here: use 'taskpatch verify' for that.\n");
}

static json_t *sha_json(const uint8_t d[32]) {
        char hex[SHA256_HEX_SIZE];
        sha256_to_hex(d, hex);
        return json_string(hex);
}

/* A directory model's files: [{path, size, sha256}]. */
static json_t *files_json(const ManifestFiles *f) {
        json_t *list = json_array();
        for (size_t i = 0; i < f->set.n_files; i++)
                json_array_append_new(list, json_pack("{s:s, s:I, s:o}", "path", f->set.files[i].path, "size",
                                                      (json_int_t) f->set.files[i].size, "sha256", sha_json(f->sha256[i])));
        return list;
}

static void files_print(const char *which, const ManifestFiles *f) {
        char hex[SHA256_HEX_SIZE];

        if (f->set.n_files == 0)
                return;
        printf("  %s files %zu:\n", which, f->set.n_files);
        for (size_t i = 0; i < f->set.n_files; i++) {
                sha256_to_hex(f->sha256[i], hex);
                printf("    %.16s  %12" PRIu64 "  %s\n", hex, f->set.files[i].size, f->set.files[i].path);
        }
}

/* Where a span's offset lies: its file and the offset in it (a directory), else just the offset. */
static const FileSetFile *file_of(const ManifestFiles *f, uint64_t off) {
        return f->set.n_files ? &f->set.files[fileset_locate(&f->set, off)] : NULL;
}

/* An encrypted bundle's recipients: each key's SHA-256 (of its SubjectPublicKeyInfo) and name. */
static json_t *encryption_json(const Encryption *e) {
        if (!e)
                return json_null();
        json_t *list = json_array();
        for (size_t i = 0; i < e->n_recipients; i++) {
                char hex[SHA256_HEX_SIZE];
                sha256_to_hex(e->recipients[i].key_sha256, hex);
                json_array_append_new(list, json_pack("{s:s, s:o}", "key_sha256", hex, "name",
                                                      e->recipients[i].name ? json_string(e->recipients[i].name)
                                                                            : json_null()));
        }
        return json_pack("{s:s, s:s, s:o}", "cipher", ENCRYPTION_CIPHER, "key_wrap", ENCRYPTION_KEY_WRAP,
                         "recipients", list);
}

static void encryption_print(const Encryption *e) {
        for (size_t i = 0; e && i < e->n_recipients; i++) {
                char hex[SHA256_HEX_SIZE];
                sha256_to_hex(e->recipients[i].key_sha256, hex);
                printf("recipient %s%s%s\n", hex, e->recipients[i].name ? "  " : "",
                       e->recipients[i].name ? e->recipients[i].name : "");
        }
}

static json_t *cost_json(uint64_t v) {
        return v == UINT64_MAX ? json_null() : json_integer((json_int_t) v);
}

/*
 * The sites of @target that a span at [@offset, +@length) overlaps: how many, the first and the
 * last (@target's sites are sorted by offset and do not overlap).
 */
typedef struct CoveredSites {
        size_t n;
        const Site *first, *last;
        uint64_t bytes;                 /* of the span that are site bytes */
} CoveredSites;

static CoveredSites covered_sites(const Artifact *target, uint64_t offset, uint64_t length) {
        CoveredSites c = {};

        for (size_t i = artifact_site_after(target, offset); i < target->n_sites && target->sites[i].offset < offset + length; i++) {
                if (target->sites[i].length == 0)
                        continue;
                const Site *site = &target->sites[i];
                uint64_t from = site->offset > offset ? site->offset : offset;
                uint64_t to = site->offset + site->length < offset + length ? site->offset + site->length
                                                                              : offset + length;
                c.first = c.first ? c.first : site;
                c.last = site;
                c.bytes += to - from;
                c.n++;
        }
        return c;
}

/* Every span: where it writes, how, what it costs in the payload, which base bytes it reads. */
json_t *span_list_json(const Manifest *m, const CreateSpanCost *costs, const Artifact *target) {
        json_t *list = json_array();
        for (size_t i = 0; i < m->n_spans; i++) {
                const ManifestSpan *sp = &m->spans[i];
                json_t *j = json_pack("{s:I, s:I, s:s, s:o, s:I, s:I}", "offset", (json_int_t) sp->offset, "length",
                                      (json_int_t) sp->length, "encoding", span_encoding_to_string(sp->encoding), "site",
                                      sp->site ? json_string(sp->site) : json_null(), "base_offset",
                                      (json_int_t) sp->base_offset, "payload_bytes", (json_int_t) sp->frame_size);
                const FileSetFile *t = file_of(&m->target.files, sp->offset);
                const FileSetFile *b = sp->base_length ? file_of(&m->base.files, sp->base_offset) : NULL;
                if (sp->layout)
                        json_object_set_new(j, "layout", json_string(sp->layout));
                if (!sp->site && target) {
                        CoveredSites c = covered_sites(target, sp->offset, sp->length);
                        json_t *sites = json_pack("{s:I, s:I}", "count", (json_int_t) c.n, "site_bytes",
                                                  (json_int_t) c.bytes);
                        if (c.n) {
                                json_object_set_new(sites, "first", json_string(c.first->name));
                                json_object_set_new(sites, "last", json_string(c.last->name));
                        }
                        json_object_set_new(j, "sites", sites);
                }
                if (t) {
                        json_object_set_new(j, "file", json_string(t->path));
                        json_object_set_new(j, "file_offset", json_integer((json_int_t) (sp->offset - t->offset)));
                }
                if (b) {
                        json_object_set_new(j, "base_file", json_string(b->path));
                        json_object_set_new(j, "base_file_offset",
                                            json_integer((json_int_t) (sp->base_offset - b->offset)));
                }
                if (sp->encoding == SPAN_LORA)
                        json_object_set_new(j, "lora", json_pack("{s:s, s:I, s:I, s:I, s:I, s:f, s:b, s:b, s:s, s:s, s:s}",
                                                                 "type", ggml_type(sp->lora.type)->name,
                                                                 "in", (json_int_t) sp->lora.in,
                                                                 "out", (json_int_t) sp->lora.out,
                                                                 "rank", (json_int_t) sp->lora.rank,
                                                                 "first", (json_int_t) sp->lora_first,
                                                                 "factor", (double) sp->lora.factor,
                                                                 "imatrix", sp->lora.importance,
                                                                 "embd", sp->lora.embd,
                                                                 "a", ggml_type(sp->lora.a_type)->name,
                                                                 "b", ggml_type(sp->lora.b_type)->name,
                                                                 "residual", sp->lora.ac ? "ac" : "planes"));
                if (sp->encoding == SPAN_RESCALE)
                        json_object_set_new(j, "rescale", json_pack("{s:s, s:I, s:I, s:I}", "type",
                                                                    sp->rescale.is_signed ? "int8" : "uint8", "channels",
                                                                    (json_int_t) sp->rescale.channels, "inner",
                                                                    (json_int_t) sp->rescale.inner, "first",
                                                                    (json_int_t) sp->rescale_first));
                if (costs && sp->encoding != SPAN_COPY) {
                        const char *names[_CREATE_COST_MAX] = { "raw", sp->encoding == SPAN_REF ? "ref" : "delta",
                                                                "lora", "lora_imatrix", "rescale" };
                        json_t *screened = json_array();
                        for (int k = 0; k < _CREATE_COST_MAX; k++)
                                if (costs[i].screened & (1u << k))
                                        json_array_append_new(screened, json_string(names[k]));
                        json_object_set_new(j, "candidates", json_pack("{s:o, s:o, s:o, s:o, s:o, s:o}", names[0],
                                                                       cost_json(costs[i].raw), names[1],
                                                                       cost_json(costs[i].alt), names[2],
                                                                       cost_json(costs[i].lora), names[3],
                                                                       cost_json(costs[i].lora_imatrix), names[4],
                                                                       cost_json(costs[i].rescale), "screened",
                                                                       screened));
                }
                json_array_append_new(list, j);
        }
        return list;
}

/* "  (raw ~1200, delta 800, lora 90)": what each candidate cost, for create --dry-run; "~" marks a
 * screening size (a candidate the fast level ruled out: CreateSpanCost). */
static void costs_print(const ManifestSpan *sp, const CreateSpanCost *c) {
        const uint64_t v[_CREATE_COST_MAX] = { c->raw, c->alt, c->lora, c->lora_imatrix, c->rescale };
        const char *names[_CREATE_COST_MAX] = { "raw", sp->encoding == SPAN_REF ? "ref" : "delta", "lora",
                                                "lora+imatrix", "rescale" };

        if (sp->encoding == SPAN_COPY)
                return;
        for (int k = 0; k < _CREATE_COST_MAX; k++)
                if (v[k] != UINT64_MAX)
                        printf("%s%s %s%" PRIu64, k ? ", " : "  (", names[k], c->screened & (1u << k) ? "~" : "",
                               v[k]);
        printf(")");
}

/* A span's site column: its site, or what it covers instead. */
static const char *site_column(const ManifestSpan *sp, const Artifact *target, char *buf, size_t size) {
        if (sp->site)
                return sp->site;
        if (!target)
                return "(header, gaps or several sites)";
        CoveredSites c = covered_sites(target, sp->offset, sp->length);
        if (c.n == 0)
                return "(header/gap)";
        const char *gaps = c.bytes < sp->length ? ", and header/gap bytes" : "";
        if (c.n == 1)
                snprintf(buf, size, "(part of %s%s)", c.first->name, gaps);
        else
                snprintf(buf, size, "(%zu sites: %s .. %s%s)", c.n, c.first->name, c.last->name, gaps);
        return buf;
}

void span_list_print(const Manifest *m, const CreateSpanCost *costs, const Artifact *target) {
        if (m->target.files.set.n_files == 0 && m->base.files.set.n_files == 0)
                printf("span list (target offset, bytes, encoding, payload bytes, base offset, site):\n");
        else
                printf("span list (target file+offset, bytes, encoding, payload bytes, base file+offset, site):\n");
        for (size_t i = 0; i < m->n_spans; i++) {
                const ManifestSpan *sp = &m->spans[i];
                char wt[CLI_WHERE_MAX], wb[CLI_WHERE_MAX], site[600];
                const FileSet *bf = m->base.files.set.n_files && sp->base_length ? &m->base.files.set : NULL;
                printf("  %12s %12" PRIu64 " %-5s %10" PRIu64 " %12s  %s",
                       cli_where(m->target.files.set.n_files ? &m->target.files.set : NULL, sp->offset, wt), sp->length,
                       span_encoding_to_string(sp->encoding), sp->frame_size, cli_where(bf, sp->base_offset, wb),
                       site_column(sp, target, site, sizeof(site)));
                if (sp->encoding == SPAN_LORA && sp->lora.importance)
                        printf(" [imatrix]");
                if (sp->encoding == SPAN_LORA && sp->lora.ac)
                        printf(" [residual ac]");
                if (sp->encoding == SPAN_LORA)
                        printf(" [factors %s, %s]", ggml_type(sp->lora.a_type)->name, ggml_type(sp->lora.b_type)->name);
                if (sp->encoding == SPAN_RESCALE)
                        printf(" [%" PRIu64 " channel%s]", sp->rescale.channels, sp->rescale.channels == 1 ? "" : "s");
                if (costs)
                        costs_print(sp, &costs[i]);
                printf("\n");
        }
}

int verb_inspect(int argc, char *argv[]) {
        static const struct option options[] = {
                { "help", no_argument, NULL, 'h' },
                { "json", no_argument, NULL, 'j' },
                {},
        };
        _cleanup_(bundle_freep) Bundle *b = NULL;
        TpError err = {};
        bool json = false;
        int c, r;

        cli_program = "taskpatch inspect";
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
        if (argc - optind != 1) {
                cli_error("expected one BUNDLE (see --help)");
                return EXIT_USAGE;
        }
        if (cli_is_channel(argv[optind]))
                return channel_inspect(argv[optind], json);
        if (cli_has_magic(argv[optind], REVOCATIONS_MAGIC))
                return revocations_inspect(argv[optind], json);
        if (cli_has_magic(argv[optind], TRUST_ROOT_MAGIC))
                return trust_root_inspect(argv[optind], json);
        r = bundle_open(argv[optind], &b, &err);
        if (r < 0) {
                cli_error("%s", tp_error_message(&err, r));
                return EXIT_FAILED;
        }

        const Manifest *m = b->manifest;
        SignatureInfo info = {};
        bool have_signer = signers_first(b->signature, b->signature_len, &info);
        uint64_t n_enc[_SPAN_ENCODING_MAX] = {}, span_bytes = 0, copied = 0;
        for (size_t i = 0; i < m->n_spans; i++) {
                /* changed_bytes: what the spans code; copies are the base's bytes (create.h). */
                if (m->spans[i].encoding == SPAN_COPY)
                        copied += m->spans[i].length;
                else
                        span_bytes += m->spans[i].length;
                n_enc[m->spans[i].encoding]++;
        }
        const uint64_t n_raw = n_enc[SPAN_RAW], n_delta = n_enc[SPAN_DELTA];
        char created[21], expires[21];
        format_time_utc(m->created, created);
        format_time_utc(m->expires, expires);

        if (json) {
                json_t *sites = json_array();
                for (size_t i = 0; i < m->n_sites; i++)
                        json_array_append_new(sites, json_string(m->sites[i]));
                json_t *j = json_pack("{s:s, s:I, s:s, s:s, s:o, s:{s:o, s:I, s:o}, s:{s:o, s:I, s:I, s:o}, s:o, "
                                      "s:I, s:{s:I, s:I}, s:I, s:I, s:I, s:b, s:o}",
                                      "task", m->task, "version", (json_int_t) m->version, "kind",
                                      artifact_kind_to_string(m->kind), "created", created, "expires",
                                      m->expires ? json_string(expires) : json_null(), "base", "sha256",
                                      sha_json(m->base.sha256), "size", (json_int_t) m->base.size, "layout",
                                      sha_json(m->base.layout), "target", "sha256", sha_json(m->target.sha256), "size",
                                      (json_int_t) m->target.size, "chunk_size", (json_int_t) m->target.chunk_size,
                                      "chunk_root", sha_json(m->target.chunk_root), "sites", sites, "spans",
                                      (json_int_t) m->n_spans, "encodings", "raw", (json_int_t) n_raw, "delta",
                                      (json_int_t) n_delta, "changed_bytes", (json_int_t) span_bytes,
                                      "payload_bytes", (json_int_t) m->payload.size, "bundle_bytes",
                                      (json_int_t) b->file_size, "signed", b->signature != NULL, "signer",
                                      have_signer ? json_string(info.subject) : json_null());
                json_t *enc = json_object_get(j, "encodings");
                json_object_set_new(enc, "copy", json_integer((json_int_t) n_enc[SPAN_COPY]));
                json_object_set_new(enc, "ref", json_integer((json_int_t) n_enc[SPAN_REF]));
                json_object_set_new(enc, "lora", json_integer((json_int_t) n_enc[SPAN_LORA]));
                json_object_set_new(enc, "rescale", json_integer((json_int_t) n_enc[SPAN_RESCALE]));
                json_object_set_new(j, "format", json_integer((json_int_t) m->format));
                json_object_set_new(j, "model", json_string(m->model));
                json_object_set_new(j, "role", json_string(manifest_role_to_string(m->role)));
                json_object_set_new(j, "copied_bytes", json_integer((json_int_t) copied));
                if (have_signer)
                        json_object_set_new(j, "signer_certificate", signer_json(&info));
                json_object_set_new(j, "signers", signers_json(b->signature, b->signature_len));
                if (m->base.files.set.n_files)
                        json_object_set_new(json_object_get(j, "base"), "files", files_json(&m->base.files));
                if (m->target.files.set.n_files)
                        json_object_set_new(json_object_get(j, "target"), "files", files_json(&m->target.files));
                json_object_set_new(j, "encryption", encryption_json(m->encryption));
                json_object_set_new(j, "span_list", span_list_json(m, NULL, NULL));
                json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
                fputc('\n', stdout);
                json_decref(j);
                return EXIT_OK;
        }

        char hex[SHA256_HEX_SIZE];
        printf("bundle    %s (%" PRIu64 " bytes)\n", b->what, b->file_size);
        printf("task      %s version %" PRIu64 "\n", m->task, m->version);
        if (m->role == MANIFEST_ROLE_BASE)
                printf("role      base bundle (%s): its target is the model's new base\n",
                       m->base.size == 0 ? "full: it needs no base" : "a delta from the base below");
        printf("model     %s\n", m->model);
        printf("kind      %s\n", artifact_kind_to_string(m->kind));
        printf("created   %s%s%s\n", created, m->expires ? ", expires " : "", m->expires ? expires : "");
        sha256_to_hex(m->base.sha256, hex);
        printf("base      %s  %" PRIu64 " bytes%s\n", hex, m->base.size, m->base.files.set.n_files ? " (a directory)" : "");
        files_print("base", &m->base.files);
        sha256_to_hex(m->target.sha256, hex);
        printf("target    %s  %" PRIu64 " bytes%s\n", hex, m->target.size,
               m->target.files.set.n_files ? " (a directory)" : "");
        files_print("target", &m->target.files);
        signers_print(b->signature, b->signature_len);
        printf("format    %" PRIu64 "%s\n", m->format,
               m->format == MANIFEST_FORMAT_RELOCATING ? " (relocating: the spans tile the target)" : " (in place)");
        printf("spans     %zu (%" PRIu64 " delta, %" PRIu64 " lora, %" PRIu64 " rescale, %" PRIu64 " raw, %" PRIu64
               " ref, %" PRIu64 " copy), coding %" PRIu64 " bytes, copying %" PRIu64 "\n", m->n_spans, n_delta,
               n_enc[SPAN_LORA], n_enc[SPAN_RESCALE], n_raw, n_enc[SPAN_REF], n_enc[SPAN_COPY], span_bytes, copied);
        printf("payload   %" PRIu64 " bytes%s\n", m->payload.size,
               m->encryption ? ", encrypted (" ENCRYPTION_CIPHER ", key wrapped with " ENCRYPTION_KEY_WRAP ")" : "");
        encryption_print(m->encryption);
        printf("sites     %zu:\n", m->n_sites);
        for (size_t i = 0; i < m->n_sites; i++)
                printf("  %s\n", m->sites[i]);
        span_list_print(m, NULL, NULL);
        return EXIT_OK;
}
