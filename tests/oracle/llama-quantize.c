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
 * Usage: llama-quantize IN.gguf OUT.gguf FTYPE [NTHREAD]
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

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

int main(int argc, char *argv[]) {
        unsigned long ftype = 0, nthread = 0;

        if (argc < 4 || argc > 5 || parse_uint(argv[3], 1023, &ftype) < 0 ||
            (argc == 5 && parse_uint(argv[4], 1024, &nthread) < 0)) {
                fprintf(stderr, "usage: %s IN.gguf OUT.gguf FTYPE [NTHREAD]\n", argv[0]);
                return 2;
        }
        if (!getenv("LLAMA_QUANTIZE_VERBOSE"))
                llama_log_set(quiet_log, NULL);
        llama_backend_init();

        llama_model_quantize_params params = llama_model_quantize_default_params();
        params.ftype = (enum llama_ftype) ftype;
        params.nthread = (int) nthread;
        uint32_t r = llama_model_quantize(argv[1], argv[2], &params);

        llama_backend_free();
        if (r != 0) {
                fprintf(stderr, "%s: llama_model_quantize failed (%u)\n", argv[0], r);
                return 1;
        }
        return 0;
}
