/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for common/codec/delta.c: the first byte picks a layout, the rest is split into
 * base bytes and a group's delta (a bundle's bytes: anything at all). Decoding must stay inside
 * its buffers (the sanitizers watch) and be a function of its inputs. Then what it decoded must
 * round-trip: a bijective layout encodes it back to the very delta; i8ac and i8acp, whose coded
 * groups are not every byte string, encode it to a delta that decodes to it again, or say it does
 * not fit. i8acp is also told of float runs the input places (so that its rules are found and
 * decoded: predictions from anything, NaNs and infinities included).
 */

#include <stdbool.h>
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
        bool coded = l == DELTA_I8AC || l == DELTA_I8ACP;
        if (delta_encode(l, base, out, len, again)) {
                if (!coded && memcmp(again, delta, len) != 0)
                        abort();
                delta_decode(l, base, again, len, back);
                if (memcmp(back, out, len) != 0)
                        abort();
        } else if (!coded) {
                abort();
        }
        if (l == DELTA_I8ACP && len >= 8) {
                /* The input's base bytes as a target, against what was decoded, with float runs placed by
                 * the delta's first bytes (the corpus holds bases whose second run is the first times a
                 * constant): the rules found must decode back to it. */
                uint32_t n = 1 + delta[0] % 64, at = delta[1] % 16;
                DeltaFloatRun runs[3] = { { at, n }, { at + 4 * n + delta[2] % 8, n }, { at + 8 * n + 16, n } };
                if (delta_encode_floats(l, out, base, len, runs, 3, again)) {
                        delta_decode(l, out, again, len, back);
                        if (memcmp(back, base, len) != 0)
                                abort();
                }
        }
        free(out);
        free(again);
        free(back);
        return 0;
}
