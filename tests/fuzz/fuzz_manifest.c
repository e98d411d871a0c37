/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the manifest parser and the YAML tree under it, and for format 2's
 * manifest section (one zstd frame of the YAML: the frame checks, then the same parser).
 */

#include <stdint.h>
#include <stdlib.h>

#include "manifest.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A parsed manifest re-serialises, and its section parses again. */
static void rewrite(const Manifest *m) {
        Manifest *again = NULL;
        char *text = NULL;
        size_t len;
        TpError err = {};

        if (manifest_write(m, &text, &len, &err) < 0)
                abort();
        free(text);
        if (manifest_section_write(m, &text, &len, &err) < 0 ||
            manifest_section_parse(m->format, text, len, 0, &again, &err) < 0)
                abort();
        free(text);
        manifest_free(again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        Manifest *m = NULL;
        TpError err = {};
        int r = manifest_parse((const char *) data, size, &m, &err);

        if (r < 0) {
                if (m || (!err.message[0] && r != -ENOMEM))
                        abort();
        } else {
                rewrite(m);
                m = manifest_free(m);
        }

        /* The same bytes as a format-2 section (a cap on the YAML, to keep the fuzzer's memory small). */
        err = (TpError) {};
        r = manifest_section_parse(MANIFEST_FORMAT_RELOCATING, (const char *) data, size, 1u << 20, &m, &err);
        if (r < 0) {
                if (m || (!err.message[0] && r != -ENOMEM))
                        abort();
                return 0;
        }
        if (m->format != MANIFEST_FORMAT_RELOCATING)
                abort();
        rewrite(m);
        manifest_free(m);
        return 0;
}
