/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * For the manifest unit tests (check_manifest*.c): a valid sample manifest in both formats, and
 * its YAML text written, parsed and edited. Everything aborts the test on failure.
 */

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "manifest.h"

/* A valid manifest with two spans (one raw, one delta) and two sites. */
static inline Manifest *sample(void) {
        Manifest *m = calloc(1, sizeof(*m));
        ck_assert_ptr_nonnull(m);
        m->format = MANIFEST_FORMAT;
        m->task = strdup("json");
        m->version = 3;
        m->created = 1790000000;
        m->expires = 1800000000;
        m->kind = ARTIFACT_GGUF;
        memset(m->base.sha256, 0x11, 32);
        m->base.size = 1000000;
        memset(m->base.layout, 0x22, 32);
        memset(m->target.sha256, 0x33, 32);
        m->target.size = 1000000;
        m->target.chunk_size = 1 << 20;
        memset(m->target.chunk_root, 0x44, 32);
        m->n_sites = 2;
        m->sites = calloc(2, sizeof(char *));
        m->sites[0] = strdup("blk.0.attn_q.weight");
        m->sites[1] = strdup("blk.0.attn_v.weight");
        sites_fingerprint(m->sites, 2, m->sites_fingerprint);
        m->payload.size = 300;
        memset(m->payload.sha256, 0x55, 32);
        m->n_spans = 2;
        m->spans = calloc(2, sizeof(ManifestSpan));
        m->spans[0] = (ManifestSpan) { .offset = 100, .length = 50, .encoding = SPAN_RAW, .frame_offset = 0,
                                       .frame_size = 100 };
        m->spans[1] = (ManifestSpan) { .offset = 4096, .length = 1152, .encoding = SPAN_DELTA,
                                       .layout = strdup("q4_0"), .site = strdup("blk.0.attn_q.weight"),
                                       .frame_offset = 100, .frame_size = 200 };
        memset(m->spans[1].base_sha256, 0x66, 32);
        memset(m->spans[1].new_sha256, 0x77, 32);
        return m;
}

/* The YAML of @m, NUL-terminated (manifest_write() does not: the tests search the text with strstr()). */
static inline char *write_text(const Manifest *m, size_t *len) {
        char *written = NULL, *text;
        TpError err = {};
        ck_assert_msg(manifest_write(m, &written, len, &err) == 0, "%s", err.message);
        text = realloc(written, *len + 1);
        ck_assert_ptr_nonnull(text);
        text[*len] = '\0';
        return text;
}

/* The sample as a relocating manifest: a copy, an i8 delta and a raw span tile a 10000-byte target. */
static inline Manifest *sample2(void) {
        Manifest *m = sample();

        m->format = MANIFEST_FORMAT_RELOCATING;
        m->target.size = 10000;
        m->spans = realloc(m->spans, 3 * sizeof(ManifestSpan));
        ck_assert_ptr_nonnull(m->spans);
        m->n_spans = 3;
        free(m->spans[0].layout);
        free(m->spans[0].site);
        m->spans[0] = (ManifestSpan) { .offset = 0, .length = 4096, .encoding = SPAN_COPY, .base_offset = 20000,
                                       .base_length = 4096 };
        memset(m->spans[0].new_sha256, 0x88, 32);
        memcpy(m->spans[0].base_sha256, m->spans[0].new_sha256, 32);
        free(m->spans[1].layout);
        m->spans[1].layout = strdup("i8");
        m->spans[1].base_offset = 4096;
        m->spans[1].base_length = 1152;
        m->spans[1].frame_offset = 0;
        m->spans[2] = (ManifestSpan) { .offset = 5248, .length = 4752, .encoding = SPAN_RAW, .frame_offset = 200,
                                       .frame_size = 100 };
        memset(m->spans[2].new_sha256, 0x99, 32);
        return m;
}

/* Parse the NUL-terminated @text. */
static inline int parse_text(const char *text, Manifest **ret, TpError *err) {
        return manifest_parse(text, strlen(text), ret, err);
}

static inline char *replaced(const char *text, const char *from, const char *to) {
        const char *at = strstr(text, from);
        ck_assert_msg(at, "'%s' not in the text", from);
        char *out = NULL;
        ck_assert_int_ge(asprintf(&out, "%.*s%s%s", (int) (at - text), text, to, at + strlen(from)), 0);
        return out;
}
