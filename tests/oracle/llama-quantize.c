/* SPDX-License-Identifier: MIT */

/*
 * llama-quantize harness for tests/oracle/file-oracle.sh: llama.cpp's own
 * llama_model_quantize() with its default parameters and the given ftype (a
 * LLAMA_FTYPE_* number), so a whole file written by `taskpatch quantize` can be
 * compared byte for byte with llama.cpp's. Built at test time against the
 * include/llama.h of the pinned source (tests/tools/npm-llama-src.sh) and linked to
 * the pinned prebuilt libllama.v0.4.0.so (tests/tools/npm-ggml.sh); never part of the
 * build proper. Exit 0 when llama.cpp reports success.
 *
 * With --imatrix FILE it does what the llama-quantize tool does with one: the file read as
 * tools/quantize/quantize.cpp reads it (the GGUF form through ggml's own gguf reader, the
 * legacy form as common/imatrix-loader.cpp parses it), each entry normalized the same way,
 * passed as params.imatrix, and the quantize.imatrix.* keys it adds as KV overrides.
 * Independent of TaskPatch's reader (common/model/imatrix.c), which this is the judge of.
 *
 * Usage: llama-quantize [--imatrix FILE] IN.gguf OUT.gguf FTYPE [NTHREAD]
 */

#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "llama.h"

static void quiet_log(enum ggml_log_level level, const char *text, void *user_data) {
        (void) user_data;
        if (level == GGML_LOG_LEVEL_ERROR || level == GGML_LOG_LEVEL_WARN)
                fputs(text, stderr);
}

static int parse_uint(const char *s, unsigned long max, unsigned long *ret) {
        char *end;

        errno = 0;
        unsigned long v = strtoul(s, &end, 10);
        if (errno || end == s || *end || v > max)
                return -1;
        *ret = v;
        return 0;
}

/* The imatrix entries as llama-quantize passes them, and what its KV overrides need. */
typedef struct Imatrix {
        struct llama_model_imatrix_data *entries; /* NULL-name terminated */
        size_t n;
        char dataset[128];
        long chunks;
} Imatrix;

static void die(const char *what) {
        fprintf(stderr, "llama-quantize harness: %s\n", what);
        exit(1);
}

static void add_entry(Imatrix *im, const char *name, float *values, size_t n) {
        for (size_t i = 0; i < im->n; i++)
                if (strcmp(im->entries[i].name, name) == 0) { /* std::map: the later one wins */
                        free((void *) im->entries[i].data);
                        im->entries[i].data = values;
                        im->entries[i].size = n;
                        return;
                }
        im->entries = realloc(im->entries, (im->n + 2) * sizeof(*im->entries));
        if (!im->entries)
                die("out of memory");
        im->entries[im->n++] = (struct llama_model_imatrix_data) { strdup(name), values, n };
        im->entries[im->n] = (struct llama_model_imatrix_data) { NULL, NULL, 0 };
}

static int read_i32(FILE *f, int32_t *v) {
        return fread(v, sizeof(*v), 1, f) == 1 ? 0 : -1;
}

/* common_imatrix_load_legacy, then load_imatrix's division by ncall. */
static void load_legacy(const char *path, Imatrix *im) {
        FILE *f = fopen(path, "rbe");
        int32_t n_entries, len, ncall, nval;

        if (!f || read_i32(f, &n_entries) < 0 || n_entries < 1)
                die("legacy imatrix: no entries");
        for (int32_t e = 0; e < n_entries; e++) {
                if (read_i32(f, &len) < 0 || len < 0 || len > 4096)
                        die("legacy imatrix: bad name length");
                char name[4097] = { 0 };
                if (fread(name, 1, (size_t) len, f) != (size_t) len || read_i32(f, &ncall) < 0 ||
                    read_i32(f, &nval) < 0 || nval < 1)
                        die("legacy imatrix: truncated entry");
                float *v = malloc((size_t) nval * sizeof(float));
                if (!v || fread(v, sizeof(float), (size_t) nval, f) != (size_t) nval)
                        die("legacy imatrix: truncated values");
                if (ncall > 0)
                        for (int32_t i = 0; i < nval; i++)
                                v[i] = v[i] / (float) (int64_t) ncall;
                add_entry(im, name, v, (size_t) nval);
        }
        int32_t chunks;
        if (read_i32(f, &chunks) == 0) {
                im->chunks = chunks;
                if (read_i32(f, &len) == 0 && len > 0) {
                        char *ds = calloc(1, (size_t) len + 1);
                        if (ds && fread(ds, 1, (size_t) len, f) == (size_t) len)
                                snprintf(im->dataset, sizeof(im->dataset), "%s", ds);
                        free(ds);
                }
        }
        fclose(f);
}

/* The GGUF form through ggml's reader: <name>.in_sum2 / <name>.counts per expert, or ones. */
static int load_gguf(const char *path, Imatrix *im) {
        struct ggml_context *ctx = NULL;
        struct gguf_init_params p = { .no_alloc = false, .ctx = &ctx };
        struct gguf_context *g = gguf_init_from_file(path, p);

        if (!g)
                return -1;
        int64_t ds = gguf_find_key(g, "imatrix.datasets"), cc = gguf_find_key(g, "imatrix.chunk_count");
        if (ds < 0 || cc < 0 || gguf_find_key(g, "imatrix.chunk_size") < 0)
                die("GGUF imatrix without its metadata");
        if (gguf_get_arr_n(g, ds) > 0)
                snprintf(im->dataset, sizeof(im->dataset), "%s", gguf_get_arr_str(g, ds, 0));
        im->chunks = gguf_get_val_u32(g, cc);
        for (struct ggml_tensor *t = ggml_get_first_tensor(ctx); t; t = ggml_get_next_tensor(ctx, t)) {
                size_t len = strlen(t->name);
                if (len <= 8 || strcmp(t->name + len - 8, ".in_sum2") != 0)
                        continue;
                char name[GGML_MAX_NAME + 8];
                snprintf(name, sizeof(name), "%.*s.counts", (int) (len - 8), t->name);
                struct ggml_tensor *c = ggml_get_tensor(ctx, name);
                if (!c || t->type != GGML_TYPE_F32 || c->type != GGML_TYPE_F32)
                        die("GGUF imatrix: an entry without F32 counts");
                int64_t nval = ggml_nelements(t), ncounts = ggml_nelements(c), ne0 = nval / ncounts;
                float *v = malloc((size_t) nval * sizeof(float));
                if (!v)
                        die("out of memory");
                for (int64_t j = 0; j < ncounts; j++) {
                        float count = (float) lroundf(((const float *) c->data)[j]);
                        for (int64_t i = 0; i < ne0; i++)
                                v[j * ne0 + i] = count > 0.0f ? ((const float *) t->data)[j * ne0 + i] / count : 1;
                }
                name[len - 8] = '\0';
                add_entry(im, name, v, (size_t) nval);
        }
        gguf_free(g);
        ggml_free(ctx);
        return 0;
}

int main(int argc, char *argv[]) {
        unsigned long ftype = 0, nthread = 0;
        const char *imatrix_path = NULL;
        Imatrix im = { .chunks = -1 };
        struct llama_model_kv_override kvo[5];
        size_t n_kvo = 0;

        if (argc > 2 && strcmp(argv[1], "--imatrix") == 0) {
                imatrix_path = argv[2];
                argv += 2;
                argc -= 2;
        }
        if (argc < 4 || argc > 5 || parse_uint(argv[3], 1023, &ftype) < 0 ||
            (argc == 5 && parse_uint(argv[4], 1024, &nthread) < 0)) {
                fprintf(stderr, "usage: %s [--imatrix FILE] IN.gguf OUT.gguf FTYPE [NTHREAD]\n", argv[0]);
                return 2;
        }
        if (!getenv("LLAMA_QUANTIZE_VERBOSE"))
                llama_log_set(quiet_log, NULL);
        llama_backend_init();

        llama_model_quantize_params params = llama_model_quantize_default_params();
        params.ftype = (enum llama_ftype) ftype;
        params.nthread = (int) nthread;
        if (imatrix_path) {
                if (load_gguf(imatrix_path, &im) < 0)
                        load_legacy(imatrix_path, &im);
                params.imatrix = im.entries;
                memset(kvo, 0, sizeof(kvo));
                kvo[n_kvo].tag = LLAMA_KV_OVERRIDE_TYPE_STR;
                snprintf(kvo[n_kvo].key, sizeof(kvo[n_kvo].key), "quantize.imatrix.file");
                snprintf(kvo[n_kvo++].val_str, 128, "%.127s", imatrix_path);
                if (im.dataset[0]) {
                        kvo[n_kvo].tag = LLAMA_KV_OVERRIDE_TYPE_STR;
                        snprintf(kvo[n_kvo].key, sizeof(kvo[n_kvo].key), "quantize.imatrix.dataset");
                        snprintf(kvo[n_kvo++].val_str, 128, "%s", im.dataset);
                }
                kvo[n_kvo].tag = LLAMA_KV_OVERRIDE_TYPE_INT;
                snprintf(kvo[n_kvo].key, sizeof(kvo[n_kvo].key), "quantize.imatrix.entries_count");
                kvo[n_kvo++].val_i64 = (int64_t) im.n;
                if (im.chunks > 0) {
                        kvo[n_kvo].tag = LLAMA_KV_OVERRIDE_TYPE_INT;
                        snprintf(kvo[n_kvo].key, sizeof(kvo[n_kvo].key), "quantize.imatrix.chunks_count");
                        kvo[n_kvo++].val_i64 = im.chunks;
                }
                params.kv_overrides = kvo; /* kvo[n_kvo].key[0] == 0 ends the list */
        }
        uint32_t r = llama_model_quantize(argv[1], argv[2], &params);
        llama_backend_free();
        if (r != 0) {
                fprintf(stderr, "%s: llama_model_quantize failed (%u)\n", argv[0], r);
                return 1;
        }
        return 0;
}
