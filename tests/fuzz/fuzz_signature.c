/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the signature section parsers, without any crypto: the block
 * (common/bundle/sign.c) and the set of blocks several signers make (sigset.c). Every block a
 * set yields lies inside the input, and each parses (or is refused) as a block on its own.
 */

#include <stdint.h>
#include <stdlib.h>

#include "sigset.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        SignatureInfo info;
        SignatureSet set;
        TpError err = {};
        int r = signature_parse_info(data, size, &info, &err);

        if (r < 0 && !err.message[0] && r != -ENOMEM)
                abort();
        err = (TpError) {};
        r = signature_set_parse(data, size, &set, &err);
        if (r < 0) {
                if (!err.message[0])
                        abort();
                return 0;
        }
        if (set.n == 0 || set.n > SIGNATURE_SET_MAX)
                abort();
        for (size_t i = 0; i < set.n; i++) {
                if (set.sigs[i].block < data || set.sigs[i].len > size ||
                    set.sigs[i].block + set.sigs[i].len > data + size)
                        abort();
                err = (TpError) {};
                r = signature_parse_info(set.sigs[i].block, set.sigs[i].len, &info, &err);
                if (r < 0 && !err.message[0] && r != -ENOMEM)
                        abort();
        }
        return 0;
}
