/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for common/codec/delta.c: the first byte picks a layout, the rest is split into
 * base bytes and a group's delta (a bundle's bytes: anything at all). Decoding must stay inside
 * its buffers (the sanitizers watch) and be a function of its inputs. Then what it decoded must
 * round-trip: a bijective layout encodes it back to the very delta; i8ac, whose coded groups are
 * not every byte string, encodes it to a delta that decodes to it again, or says it does not fit.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "delta.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (size < 1)
                return 0;
        DeltaLayout l = (DeltaLayout) (data[0] % _DELTA_LAYOUT_MAX);
        size_t len = (size - 1) / 2, unit = delta_unit(l);
        if (len > delta_group_bytes(l))
                len = delta_group_bytes(l);
        len -= len % unit;
        const uint8_t *base = data + 1, *delta = data + 1 + len;
        uint8_t *out = malloc(len + 1), *again = malloc(len + 1), *back = malloc(len + 1);
        if (!out || !again || !back)
                abort();

        delta_decode(l, base, delta, len, out);
        memset(again, 0x5a, len);
        delta_decode(l, base, delta, len, again);
        if (memcmp(out, again, len) != 0)
                abort();
        if (delta_encode(l, base, out, len, again)) {
                if (l != DELTA_I8AC && memcmp(again, delta, len) != 0)
                        abort();
                delta_decode(l, base, again, len, back);
                if (memcmp(back, out, len) != 0)
                        abort();
        } else if (l != DELTA_I8AC) {
                abort();
        }
        free(out);
        free(again);
        free(back);
        return 0;
}
