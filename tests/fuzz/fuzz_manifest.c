/* SPDX-License-Identifier: MIT */
/* libFuzzer target for the manifest parser and the YAML tree under it. */

#include <stdint.h>
#include <stdlib.h>

#include "manifest.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        Manifest *m = NULL;
        TpError err = {};
        int r = manifest_parse((const char *) data, size, &m, &err);

        if (r < 0) {
                if (m || (!err.message[0] && r != -ENOMEM))
                        abort();
                return 0;
        }
        /* A parsed manifest re-serialises. */
        char *text = NULL;
        size_t len;
        if (manifest_write(m, &text, &len, &err) < 0)
                abort();
        free(text);
        manifest_free(m);
        return 0;
}
