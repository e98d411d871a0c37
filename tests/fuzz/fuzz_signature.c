/* SPDX-License-Identifier: MIT */
/* libFuzzer target for the signature block parser (common/bundle/sign.c), without any crypto. */

#include <stdint.h>
#include <stdlib.h>

#include "sign.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        SignatureInfo info;
        TpError err = {};
        int r = signature_parse_info(data, size, &info, &err);

        if (r < 0 && !err.message[0] && r != -ENOMEM)
                abort();
        return 0;
}
