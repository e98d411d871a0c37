/* SPDX-License-Identifier: MIT */
/* common/bundle/manifest.c: write/parse round trip and every validation rule. */

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "check-main.h"
#include "ggml.h"
#include "manifest-sample.h"
#include "manifest.h"

START_TEST(test_round_trip) {
        Manifest *m = sample(), *p = NULL;
        size_t len;
        char *text = write_text(m, &len);
        TpError err = {};

        ck_assert_msg(manifest_parse(text, len, &p, &err) == 0, "%s\n%.*s", err.message, (int) len, text);
        ck_assert_str_eq(p->task, "json");
        ck_assert_uint_eq(p->version, 3);
        ck_assert_int_eq(p->created, 1790000000);
        ck_assert_int_eq(p->expires, 1800000000);
        ck_assert_int_eq(p->kind, ARTIFACT_GGUF);
        ck_assert_uint_eq(p->n_sites, 2);
        ck_assert_str_eq(p->sites[1], "blk.0.attn_v.weight");
        ck_assert_uint_eq(p->n_spans, 2);
        ck_assert_int_eq(p->spans[1].encoding, SPAN_DELTA);
        ck_assert_str_eq(p->spans[1].layout, "q4_0");
        ck_assert_str_eq(p->spans[1].site, "blk.0.attn_q.weight");
        ck_assert_ptr_null(p->spans[0].site);
        ck_assert_mem_eq(p->spans[1].new_sha256, m->spans[1].new_sha256, 32);
        ck_assert_mem_eq(p->target.chunk_root, m->target.chunk_root, 32);

        /* Writing the parsed manifest gives the same bytes: one spelling per manifest. */
        size_t len2;
        char *text2 = write_text(p, &len2);
        ck_assert_uint_eq(len, len2);
        ck_assert_mem_eq(text, text2, len);
        free(text);
        free(text2);
        manifest_free(m);
        manifest_free(p);
}
END_TEST

/* Each mutation of the sample must be refused with a message holding the given words. */
typedef void (*Mutate)(Manifest *m);
static void m_overlap(Manifest *m) { m->spans[1].offset = 120; }
static void m_order(Manifest *m) { m->spans[0].offset = 5000; }
static void m_past_end(Manifest *m) { m->spans[1].offset = 999999; }
static void m_frame_gap(Manifest *m) { m->spans[1].frame_offset = 101; }
static void m_frame_sum(Manifest *m) { m->payload.size = 301; }
static void m_site_order(Manifest *m) {
        char *t = m->sites[0];
        m->sites[0] = m->sites[1];
        m->sites[1] = t;
}
static void m_fingerprint(Manifest *m) { m->sites_fingerprint[0] ^= 1; }
static void m_chunk(Manifest *m) { m->target.chunk_size = 1000; }
static void m_empty_span(Manifest *m) { m->spans[0].length = 0; }
static void m_format(Manifest *m) { m->format = 3; }

static const struct {
        Mutate mutate;
        const char *words;
} bad_cases[] = {
        { m_overlap, "overlaps or precedes" },
        { m_order, "overlaps or precedes" },
        { m_past_end, "runs past the target size" },
        { m_frame_gap, "frames are back to back" },
        { m_frame_sum, "frames add up to 300 bytes" },
        { m_site_order, "out of order or repeated" },
        { m_fingerprint, "fingerprint does not match" },
        { m_chunk, "chunk_size 1000" },
        { m_empty_span, "empty span" },
        { m_format, "format 3 is not supported" },
};

START_TEST(test_refusals) {
        Manifest *m = sample(), *p = NULL;
        TpError err = {};
        size_t len;

        bad_cases[_i].mutate(m);
        char *text = write_text(m, &len);
        int r = manifest_parse(text, len, &p, &err);
        ck_assert_msg(r < 0, "case %d parsed", _i);
        ck_assert_ptr_null(p);
        ck_assert_msg(strstr(err.message, bad_cases[_i].words), "case %d: '%s' lacks '%s'", _i, err.message,
                      bad_cases[_i].words);
        free(text);
        manifest_free(m);
}
END_TEST

/* Hand-edited documents: unknown keys, bad task names, missing fields. */
START_TEST(test_text_refusals) {
        Manifest *m = sample(), *p = NULL;
        TpError err = {};
        size_t len;
        char *text = write_text(m, &len);
        char *edited = malloc(len + 64);

        /* An unknown top-level key. */
        memcpy(edited, text, len);
        memcpy(edited + len, "extra: 1\n", 9);
        ck_assert_int_lt(manifest_parse(edited, len + 9, &p, &err), 0);
        ck_assert_ptr_nonnull(strstr(err.message, "unknown key 'extra'"));

        /* A task name with a slash. */
        char *t = strstr(text, "task: json");
        ck_assert_ptr_nonnull(t);
        memcpy(t, "task: j/on", 10);
        ck_assert_int_lt(manifest_parse(text, len, &p, &err), 0);
        ck_assert_ptr_nonnull(strstr(err.message, "invalid task name"));

        /* Truncations never parse into something else silently (the fingerprint or frames catch it). */
        memcpy(t, "task: json", 10);
        for (size_t cut = 0; cut < len; cut++) {
                int r = manifest_parse(text, cut, &p, &err);
                if (r == 0) {
                        /* Only a cut inside the final trailing newline/spans may still be a valid document. */
                        ck_assert_uint_ge(cut, len - 2);
                        manifest_free(p);
                        p = NULL;
                }
        }
        free(edited);
        free(text);
        manifest_free(m);
}
END_TEST

/* sample()'s delta span as a lora span of a q4_0 tensor [in 512, out 8] from element @first, @length bytes. */
static void make_lora(Manifest *m, uint64_t first, uint64_t length, bool importance) {
        ManifestSpan *s = &m->spans[1];
        s->encoding = SPAN_LORA;
        s->length = length;
        s->lora = (LoraShape) { .type = GGML_TYPE_Q4_0, .in = 512, .out = 8, .rank = 4, .a_type = GGML_TYPE_F16,
                                .b_type = GGML_TYPE_F32, .factor = 0.5f, .importance = importance };
        s->lora_first = first;
}

/* A lora span's importance row: written, read back; its span whole rows of the tensor (a row: 288 bytes). */
START_TEST(test_lora_importance) {
        static const struct {
                uint64_t first, length;
                bool importance;
                const char *refusal;    /* NULL: parses */
        } cases[] = {
                { 0, 1152, true, NULL },
                { 1024, 864, true, NULL },
                { 256, 1152, false, NULL },
                { 256, 1152, true, "whole rows" },      /* from the middle of a row */
                { 0, 720, true, "whole rows" },         /* two and a half rows */
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                Manifest *m = sample(), *p = NULL;
                TpError err = {};
                size_t len;

                make_lora(m, cases[i].first, cases[i].length, cases[i].importance);
                char *text = write_text(m, &len);
                ck_assert_msg((strstr(text, "imatrix: true") != NULL) == cases[i].importance, "case %zu", i);
                int r = manifest_parse(text, len, &p, &err);
                if (cases[i].refusal) {
                        ck_assert_msg(r == -EBADMSG && strstr(err.message, cases[i].refusal), "case %zu: %d '%s'", i, r,
                                      err.message);
                } else {
                        ck_assert_msg(r == 0, "case %zu: %s", i, err.message);
                        ck_assert(p->spans[1].lora.importance == cases[i].importance);
                        ck_assert_uint_eq(p->spans[1].lora_first, cases[i].first);
                        manifest_free(p);
                }
                free(text);
                manifest_free(m);
        }
}
END_TEST

/* A lora span's factor types round trip by name (f32, f16, bf16, i8); another name is refused. */
START_TEST(test_lora_factor_types) {
        static const uint32_t types[] = { GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_I8 };
        for (size_t i = 0; i < ELEMENTSOF(types); i++) {
                Manifest *m = sample(), *p = NULL;
                TpError err = {};
                char want[16];
                size_t len;

                make_lora(m, 0, 1152, false);
                m->spans[1].lora.a_type = types[i];
                m->spans[1].lora.b_type = types[(i + 1) % ELEMENTSOF(types)];
                char *text = write_text(m, &len);
                snprintf(want, sizeof(want), "a: %s,", ggml_type(types[i])->name);
                ck_assert_msg(strstr(text, want), "'%s' lacks '%s'", text, want);
                ck_assert_msg(manifest_parse(text, len, &p, &err) == 0, "%s", err.message);
                ck_assert_uint_eq(p->spans[1].lora.a_type, types[i]);
                ck_assert_uint_eq(p->spans[1].lora.b_type, types[(i + 1) % ELEMENTSOF(types)]);
                manifest_free(p);
                p = NULL;
                char *at = strstr(text, want);
                memset(at + 3, 'z', strlen(want) - 4);          /* "a: zz," and such: no factor type */
                ck_assert_int_eq(manifest_parse(text, len, &p, &err), -EBADMSG);
                ck_assert_msg(strstr(err.message, "expected f32, f16, bf16 or i8"), "%s", err.message);
                free(text);
                manifest_free(m);
        }
}
END_TEST

/* The model a bundle is for: absent means "default" (and is written so); any other name round trips. */
START_TEST(test_model) {
        Manifest *m = sample(), *p = NULL;
        TpError err = {};
        size_t len;
        char *text = write_text(m, &len);

        ck_assert_ptr_null(strstr(text, "model:"));
        ck_assert_msg(manifest_parse(text, len, &p, &err) == 0, "%s", err.message);
        ck_assert_str_eq(p->model, MANIFEST_DEFAULT_MODEL);
        free(text);
        text = write_text(p, &len);                     /* the default is not spelt out */
        ck_assert_ptr_null(strstr(text, "model:"));
        free(text);
        manifest_free(p);
        p = NULL;

        m->model = strdup("detector");
        text = write_text(m, &len);
        ck_assert_ptr_nonnull(strstr(text, "model: detector\n"));
        ck_assert_msg(manifest_parse(text, len, &p, &err) == 0, "%s", err.message);
        ck_assert_str_eq(p->model, "detector");
        manifest_free(p);
        p = NULL;

        /* A name that is no name, by hand, is refused by the parser; the writer refuses it too. */
        char *t = strstr(text, "model: detector");
        memcpy(t, "model: ../tector", 15);
        ck_assert_int_lt(manifest_parse(text, len, &p, &err), 0);
        ck_assert_ptr_nonnull(strstr(err.message, "invalid model name '../tecto"));
        ck_assert_ptr_null(p);
        free(m->model);
        m->model = strdup("Cam");
        char *bad = NULL;
        ck_assert_int_lt(manifest_write(m, &bad, &len, &err), 0);
        ck_assert_ptr_nonnull(strstr(err.message, "invalid model name 'Cam'"));
        free(text);
        manifest_free(m);
}
END_TEST

/* "role: base" marks a base bundle; base.size 0 (nothing to build from) only a full one may have. */
START_TEST(test_role) {
        Manifest *m = sample(), *p = NULL;
        TpError err = {};
        size_t len;
        char *text = write_text(m, &len);

        ck_assert_ptr_null(strstr(text, "role:"));              /* a task says nothing */
        ck_assert_msg(manifest_parse(text, len, &p, &err) == 0, "%s", err.message);
        ck_assert_int_eq(p->role, MANIFEST_ROLE_TASK);
        manifest_free(p);
        p = NULL;
        free(text);

        m->role = MANIFEST_ROLE_BASE;
        text = write_text(m, &len);
        ck_assert_ptr_nonnull(strstr(text, "format: 1\nrole: base\ntask: json\n"));
        ck_assert_msg(manifest_parse(text, len, &p, &err) == 0, "%s", err.message);
        ck_assert_int_eq(p->role, MANIFEST_ROLE_BASE);
        ck_assert_str_eq(manifest_role_to_string(p->role), "base");
        manifest_free(p);
        p = NULL;

        char *r = strstr(text, "role: base");
        memcpy(r, "role: bass", 10);
        ck_assert_int_eq(manifest_parse(text, len, &p, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "role 'bass' is neither task nor base"), "%s", err.message);
        free(text);

        /* base.size 0: refused for a task, and for a base bundle patching in place. */
        m->base.size = 0;
        m->spans[1].encoding = SPAN_RAW;        /* no base bytes to read */
        free(m->spans[1].layout);
        m->spans[1].layout = NULL;
        m->role = MANIFEST_ROLE_TASK;
        text = write_text(m, &len);
        ck_assert_int_eq(manifest_parse(text, len, &p, &err), -EBADMSG);
        ck_assert_msg(strstr(err.message, "base.size is 0, which only a full base bundle"), "%s", err.message);
        free(text);
        m->role = MANIFEST_ROLE_BASE;
        text = write_text(m, &len);
        ck_assert_int_eq(manifest_parse(text, len, &p, &err), -EBADMSG);       /* format 1 */
        ck_assert_msg(strstr(err.message, "(role: base, format 2)"), "%s", err.message);
        free(text);
        manifest_free(m);
}
END_TEST

START_TEST(test_task_names) {
        ck_assert(task_name_valid("json"));
        ck_assert(task_name_valid("a"));
        ck_assert(task_name_valid("v1.2_beta-3"));
        ck_assert(!task_name_valid(""));
        ck_assert(!task_name_valid(".."));
        ck_assert(!task_name_valid("a/b"));
        ck_assert(!task_name_valid("-a"));
        ck_assert(!task_name_valid("Json"));
        ck_assert(!task_name_valid("0123456789012345678901234567890123456789012345678901234567890123456789"));
        ck_assert(task_name_valid("0123456789012345678901234567890123456789012345678901234567890123"));
}
END_TEST

/* MANIFEST_MAX_VERSION: a version JSON cannot carry is refused by the writer and by the parser. */
START_TEST(test_version_cap) {
        Manifest *m = sample(), *p = NULL;
        TpError err = {};
        char *text = NULL, *edited;
        size_t len;

        m->version = MANIFEST_MAX_VERSION;
        text = write_text(m, &len);
        ck_assert_msg(manifest_parse(text, len, &p, &err) == 0, "%s", err.message);
        ck_assert_uint_eq(p->version, MANIFEST_MAX_VERSION);
        manifest_free(p);
        p = NULL;

        /* One more, written by hand: the digit count is the same. */
        edited = strstr(text, "version: 9223372036854775807");
        ck_assert_ptr_nonnull(edited);
        memcpy(edited, "version: 9223372036854775808", 28);
        ck_assert_int_eq(manifest_parse(text, len, &p, &err), -EBADMSG);
        ck_assert_ptr_null(p);
        ck_assert_msg(strstr(err.message, "manifest: version 9223372036854775808 exceeds the cap of 9223372036854775807"),
                      "%s", err.message);
        free(text);
        text = NULL;

        m->version = (uint64_t) MANIFEST_MAX_VERSION + 1;
        ck_assert_int_eq(manifest_write(m, &text, &len, &err), -EINVAL);
        ck_assert_ptr_null(text);
        ck_assert_msg(strstr(err.message, "version 9223372036854775808 exceeds the cap"), "%s", err.message);
        manifest_free(m);
}
END_TEST

/* A minimal manifest text whose sites' names and spans are @names and @spans (YAML flow sequences). */
static char *caps_text(const char *names, const char *spans, size_t *ret_len) {
        static const char z64[] = "0000000000000000000000000000000000000000000000000000000000000000";
        char *text = NULL;
        int n = asprintf(&text,
                         "format: 1\ntask: caps\nversion: 1\ncreated: 2026-01-01T00:00:00Z\nkind: raw\n"
                         "base: {sha256: %s, size: 10, layout: %s}\n"
                         "target: {sha256: %s, size: 10, chunk_size: 4096, chunk_root: %s}\n"
                         "sites: {fingerprint: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855, "
                         "names: %s}\npayload: {size: 0, sha256: %s}\nspans: %s\n",
                         z64, z64, z64, z64, names, z64, spans);
        ck_assert_int_gt(n, 0);
        *ret_len = (size_t) n;
        return text;
}

/* "[x, x, ...]" with @n items. */
static char *flow_seq(const char *item, size_t n) {
        size_t k = strlen(item);
        char *s = malloc(2 + n * (k + 1) + 1), *p = s;

        ck_assert_ptr_nonnull(s);
        *p++ = '[';
        for (size_t i = 0; i < n; i++) {
                if (i)
                        *p++ = ',';
                memcpy(p, item, k);
                p += k;
        }
        *p++ = ']';
        *p = '\0';
        return s;
}

/* MANIFEST_MAX_SPANS and MANIFEST_MAX_SITES: the count is refused before any item is read. */
START_TEST(test_count_caps) {
        Manifest *p = NULL;
        TpError err = {};
        size_t len;
        char *seq = flow_seq("0", MANIFEST_MAX_SPANS + 1), *text;

        text = caps_text("[]", seq, &len);
        ck_assert_int_eq(manifest_parse(text, len, &p, &err), -E2BIG);
        ck_assert_ptr_null(p);
        ck_assert_msg(strstr(err.message, "manifest: line 10: 1048577 spans exceed the cap of 1048576"), "%s",
                      err.message);
        free(text);
        free(seq);

        seq = flow_seq("a", MANIFEST_MAX_SITES + 1);
        text = caps_text(seq, "[]", &len);
        ck_assert_int_eq(manifest_parse(text, len, &p, &err), -E2BIG);
        ck_assert_msg(strstr(err.message, "manifest: line 8: 1048577 sites exceed the cap of 1048576"), "%s",
                      err.message);
        free(text);
        free(seq);

        /* The same document with no spans and no sites is fine. */
        text = caps_text("[]", "[]", &len);
        ck_assert_msg(manifest_parse(text, len, &p, &err) == 0, "%s", err.message);
        manifest_free(p);
        free(text);
}
END_TEST

/* MANIFEST_MAX_BYTES: the writer refuses a manifest it could not read back. */
START_TEST(test_write_cap) {
        static char site[4097];
        Manifest *m = sample();
        ManifestSpan *two = m->spans;
        size_t n = MANIFEST_MAX_BYTES / sizeof(site) + 1, len = 0;
        char *text = NULL;
        TpError err = {};

        /* Spans whose long site names alone outgrow the cap. */
        memset(site, 's', sizeof(site) - 1);
        m->spans = calloc(n, sizeof(ManifestSpan));
        ck_assert_ptr_nonnull(m->spans);
        for (size_t i = 0; i < n; i++)
                m->spans[i] = (ManifestSpan) { .offset = i, .length = 1, .encoding = SPAN_RAW, .site = site,
                                               .frame_offset = i, .frame_size = 1 };
        m->n_spans = n;
        ck_assert_int_eq(manifest_write(m, &text, &len, &err), -EMSGSIZE);
        ck_assert_ptr_null(text);
        ck_assert_msg(strstr(err.message, "manifest: larger than the 67108864-byte cap"), "%s", err.message);
        free(m->spans);
        m->spans = two;
        m->n_spans = 2;
        manifest_free(m);
}
END_TEST

/* ---- the section: format 2's is one zstd frame of the YAML ---------------------------------- */

static void section_of(const Manifest *m, bool compress, char **ret, size_t *ret_len) {
        TpError err = {};
        ck_assert_msg(manifest_section_write(m, compress, ret, ret_len, &err) == 0, "%s", err.message);
}

START_TEST(test_section_round_trip) {
        Manifest *m1 = sample(), *m2 = sample2(), *p = NULL;
        char *text, *section;
        size_t len, slen;
        TpError err = {};

        /* Format 1: the section is the YAML itself, or (compressed) one zstd frame of it. */
        text = write_text(m1, &len);
        section_of(m1, false, &section, &slen);
        ck_assert_uint_eq(len, slen);
        ck_assert_mem_eq(text, section, len);
        ck_assert_int_eq(manifest_section_parse(MANIFEST_FORMAT, false, section, slen, 0, &p, &err), 0);
        p = manifest_free(p);
        free(section);
        section_of(m1, true, &section, &slen);
        ck_assert_mem_eq(section, "\x28\xb5\x2f\xfd", 4);
        ck_assert_uint_lt(slen, len);
        ck_assert_msg(manifest_section_parse(MANIFEST_FORMAT, true, section, slen, 0, &p, &err) == 0, "%s", err.message);
        ck_assert_int_eq(p->format, MANIFEST_FORMAT);
        /* ... not as another format's, nor read as plain YAML. */
        p = manifest_free(p);
        ck_assert_int_eq(manifest_section_parse(MANIFEST_FORMAT_RELOCATING, true, section, slen, 0, &p, &err), -EBADMSG);
        ck_assert_ptr_nonnull(strstr(err.message, "a format-1 manifest in the section of a format-2 bundle"));
        ck_assert_int_eq(manifest_section_parse(MANIFEST_FORMAT, false, section, slen, 0, &p, &err), -EBADMSG);
        ck_assert_ptr_null(p);
        free(text);
        free(section);

        /* Format 2: one zstd frame of it, smaller, which parses back to the same YAML. */
        text = write_text(m2, &len);
        section_of(m2, false, &section, &slen);
        ck_assert_mem_eq(section, "\x28\xb5\x2f\xfd", 4);
        ck_assert_uint_lt(slen, len);
        ck_assert_msg(manifest_section_parse(MANIFEST_FORMAT_RELOCATING, true, section, slen, 0, &p, &err) == 0, "%s",
                      err.message);
        ck_assert_uint_eq(p->n_spans, 3);
        ck_assert_int_eq(p->spans[0].encoding, SPAN_COPY);
        ck_assert_uint_eq(p->spans[0].base_offset, 20000);
        ck_assert_str_eq(p->spans[1].layout, "i8");
        char *text2 = write_text(p, &slen);
        ck_assert_uint_eq(len, slen);
        ck_assert_mem_eq(text, text2, len);
        free(text);
        free(text2);
        free(section);
        manifest_free(p);
        manifest_free(m1);
        manifest_free(m2);
}
END_TEST

/* A zstd frame of @n bytes of @src: level 3, with or without the decoded size in its header. */
static char *zframe(const char *src, size_t n, bool with_size, size_t *ret_len) {
        size_t cap = ZSTD_compressBound(n);
        char *z = malloc(cap + 16);
        ZSTD_CCtx *c = ZSTD_createCCtx();
        ck_assert(z && c);
        ZSTD_CCtx_setParameter(c, ZSTD_c_contentSizeFlag, with_size);
        ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, 3);
        ZSTD_inBuffer in = { src, n, 0 };
        ZSTD_outBuffer out = { z, cap, 0 };
        ck_assert_uint_eq(ZSTD_compressStream2(c, &out, &in, ZSTD_e_end), 0);
        ZSTD_freeCCtx(c);
        *ret_len = out.pos;
        return z;
}

/* Every way a format-2 section can be wrong: refused, with what was expected and what was found. */
START_TEST(test_section_refusals) {
        Manifest *m1 = sample(), *m2 = sample2(), *p = NULL;
        size_t len, zlen, one_len;
        char *text = write_text(m2, &len), *z, *one = write_text(m1, &one_len);
        TpError err = {};

#define REFUSED(section, n, cap, words)                                                                          \
        do {                                                                                                     \
                ck_assert_int_eq(manifest_section_parse(MANIFEST_FORMAT_RELOCATING, true, section, n, cap, &p, &err), \
                                 -EBADMSG);                                                                      \
                ck_assert_ptr_null(p);                                                                           \
                ck_assert_msg(strstr(err.message, words), "'%s' lacks '%s'", err.message, words);               \
        } while (0)

        /* The YAML itself, uncompressed; a skippable frame; nothing. */
        REFUSED(text, len, 0, "does not start with the zstd magic 28 b5 2f fd");
        ck_assert_int_eq(manifest_section_parse(MANIFEST_FORMAT_RELOCATING, false, text, len, 0, &p, &err), -EBADMSG);
        ck_assert_ptr_nonnull(strstr(err.message, "a format-2 manifest is always compressed"));
        REFUSED("\x50\x2a\x4d\x18\x00\x00\x00\x00", 8, 0, "does not start with the zstd magic");
        REFUSED("", 0, 0, "does not start with the zstd magic");
        /* A frame that does not say how much it holds, or says it holds more than the cap. */
        z = zframe(text, len, false, &zlen);
        REFUSED(z, zlen, 0, "declares no decoded size");
        free(z);
        z = zframe(text, len, true, &zlen);
        REFUSED(z, zlen, 100, "more than the cap of 100");
        /* Trailing bytes, a truncated frame, a damaged one. */
        memcpy(z + zlen, "\x28\xb5\x2f\xfd", 4);
        REFUSED(z, zlen + 1, 0, "1 bytes after the zstd frame");
        REFUSED(z, zlen - 1, 0, "damaged or truncated");
        z[zlen - 3] ^= 0x5a;
        ck_assert_int_eq(manifest_section_parse(MANIFEST_FORMAT_RELOCATING, true, z, zlen, 0, &p, &err), -EBADMSG);
        ck_assert_ptr_null(p);
        free(z);
        /* An empty frame; a format-1 manifest compressed. */
        z = zframe("", 0, true, &zlen);
        REFUSED(z, zlen, 0, "declares an empty manifest");
        free(z);
        z = zframe(one, one_len, true, &zlen);
        REFUSED(z, zlen, 0, "a format-1 manifest in the section of a format-2 bundle");
        free(z);
        /* A YAML error inside still names its line. */
        char *bad = strdup(text);
        memcpy(strstr(bad, "task:"), "tusk:", 5);
        z = zframe(bad, len, true, &zlen);
        REFUSED(z, zlen, 0, "line 3");
        free(z);
        free(bad);
#undef REFUSED
        free(one);
        free(text);
        manifest_free(m1);
        manifest_free(m2);
}
END_TEST

/* A directory model: files listed, spans naming their file with offsets inside it. */
static void set_files(ManifestFiles *f, const char *const *paths, const uint64_t *sizes, size_t n, uint8_t ret[32]) {
        FileSet set = FILESET_NULL;
        uint8_t sha[4][32];
        for (size_t i = 0; i < n; i++) {
                ck_assert_int_eq(fileset_add(&set, paths[i], sizes[i]), 0);
                memset(sha[i], 0xa0 + (int) i, 32);
        }
        ck_assert_int_eq(manifest_files_set(f, &set, (const uint8_t (*)[32]) sha), 0);
        fileset_digest(&set, (const uint8_t (*)[32]) sha, ret);
        fileset_done(&set);
}

static Manifest *sample_dir(uint64_t first_target_file) {
        Manifest *m = sample2();
        set_files(&m->base.files, (const char *[]) { "a.bin", "b.bin" }, (uint64_t[]) { 600000, 400000 }, 2,
                  m->base.sha256);
        set_files(&m->target.files, (const char *[]) { "a.bin", "w/b.bin" },
                  (uint64_t[]) { first_target_file, 10000 - first_target_file }, 2, m->target.sha256);
        return m;
}

START_TEST(test_files) {
        Manifest *m = sample_dir(4096), *p = NULL;
        TpError err = {};
        size_t len;
        char *text = write_text(m, &len);

        ck_assert_msg(manifest_parse(text, len, &p, &err) == 0, "%s\n%s", err.message, text);
        ck_assert_uint_eq(p->target.files.set.n_files, 2);
        ck_assert_str_eq(p->target.files.set.files[1].path, "w/b.bin");
        ck_assert_uint_eq(p->target.files.set.files[1].offset, 4096);
        ck_assert_mem_eq(p->target.files.sha256[1], m->target.files.sha256[1], 32);
        /* Offsets in the set's space in memory; in the text, the file and the offset inside it. */
        ck_assert_uint_eq(p->spans[1].offset, 4096);
        ck_assert_uint_eq(p->spans[0].base_offset, 20000);
        ck_assert_uint_eq(p->spans[2].offset, 5248);
        ck_assert_msg(strstr(text, "{file: 1, offset: 1152, length: 4752"), "%s", text);
        ck_assert_msg(strstr(text, "base_file: 0, base_offset: 20000"), "%s", text);
        size_t len2;
        char *text2 = write_text(p, &len2);
        ck_assert_uint_eq(len, len2);
        ck_assert_mem_eq(text, text2, len);
        free(text2);
        manifest_free(p);
        p = NULL;

        static const struct {
                const char *from, *to, *words;
        } edits[] = {
                { "{file: 1, offset: 1152", "{file: 2, offset: 1152", "file 2 is not one of the target's 2 files" },
                { "{file: 1, offset: 1152", "{offset: 1152", "'file'" },
                { "{file: 1, offset: 1152", "{file: 1, offset: 1153", "runs past the end of target file 'w/b.bin'" },
                { "base_file: 0, base_offset: 20000", "base_file: 1, base_offset: 399000", "runs past the end of base file" },
                { "path: w/b.bin", "path: ../b.bin", "not a relative path" },
                { "path: w/b.bin", "path: a.bin", "out of order" },
                { "size: 5904", "size: 5905", "do not add up" },
        };
        for (size_t i = 0; i < sizeof(edits) / sizeof(*edits); i++) {
                char *bad = replaced(text, edits[i].from, edits[i].to);
                ck_assert_msg(parse_text(bad, &p, &err) < 0, "edit %zu parsed", i);
                ck_assert_msg(strstr(err.message, edits[i].words), "edit %zu: '%s' lacks '%s'", i, err.message,
                              edits[i].words);
                free(bad);
        }
        free(text);
        manifest_free(m);

        /* A file's digest that is not the one the set's sha256 binds. */
        m = sample_dir(4096);
        m->target.files.sha256[0][0] ^= 1;
        text = write_text(m, &len);
        ck_assert_int_lt(manifest_parse(text, len, &p, &err), 0);
        ck_assert_msg(strstr(err.message, "do not match its sha256"), "%s", err.message);
        free(text);
        manifest_free(m);

        /* The copy [0, 4096) would cross the end of a 4000-byte first file. */
        m = sample_dir(4000);
        text = write_text(m, &len);
        ck_assert_int_lt(manifest_parse(text, len, &p, &err), 0);
        ck_assert_msg(strstr(err.message, "runs past the end of target file 'a.bin'"), "%s", err.message);
        free(text);
        manifest_free(m);

        /* In place, the files must be the base's. */
        m = sample_dir(4096);
        m->format = MANIFEST_FORMAT;
        text = write_text(m, &len);
        ck_assert_int_lt(manifest_parse(text, len, &p, &err), 0);
        ck_assert_msg(strstr(err.message, "base.files and target.files differ"), "%s", err.message);
        free(text);
        manifest_free(m);
}
END_TEST

static Suite *manifest_suite(void) {
        Suite *s = suite_create("manifest");
        TCase *tc = tcase_create("manifest");

        tcase_add_test(tc, test_round_trip);
        tcase_add_test(tc, test_files);
        tcase_add_loop_test(tc, test_refusals, 0, (int) (sizeof(bad_cases) / sizeof(bad_cases[0])));
        tcase_add_test(tc, test_text_refusals);
        tcase_add_test(tc, test_task_names);
        tcase_add_test(tc, test_model);
        tcase_add_test(tc, test_lora_importance);
        tcase_add_test(tc, test_lora_factor_types);
        tcase_add_test(tc, test_role);
        tcase_add_test(tc, test_section_round_trip);
        tcase_add_test(tc, test_section_refusals);
        suite_add_tcase(s, tc);

        tc = tcase_create("caps");
        tcase_set_timeout(tc, 60);      /* a million items each, under ASan on a slow box */
        tcase_add_test(tc, test_version_cap);
        tcase_add_test(tc, test_count_caps);
        tcase_add_test(tc, test_write_cap);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(manifest_suite)
