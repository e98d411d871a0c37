/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the channel reader (common/bundle/channel.c) and the YAML
 * tree under it: header, index, caps, paths. The signature is checked by
 * channel_verify(), not by channel_parse(), so every parser is reached
 * without a valid signature. A parsed channel must re-serialise and parse
 * back to the same bundles.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "channel.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        Channel *c = NULL, *back = NULL;
        TpError err = {};
        char *text = NULL;
        uint8_t *file = NULL;
        size_t len, file_len;
        int r = channel_parse(data, size, "fuzz", &c, &err);

        if (r < 0) {
                if (c || (!err.message[0] && r != -ENOMEM))
                        abort();
                return 0;
        }
        for (size_t i = 0; i < c->n_bundles; i++)
                if (!channel_path_valid(c->bundles[i].path) || !task_name_valid(c->bundles[i].task))
                        abort();
        if (channel_index_write(c, &text, &len, &err) < 0 ||
            channel_pack(c->format, text, len, c->signature, c->signature_len, &file, &file_len) < 0 ||
            channel_parse(file, file_len, "fuzz again", &back, &err) < 0 || back->n_bundles != c->n_bundles ||
            back->serial != c->serial || back->format != c->format || back->n_models != c->n_models)
                abort();
        for (size_t i = 0; i < c->n_models; i++)
                if (memcmp(&back->models[i], &c->models[i], sizeof(ChannelModel)) != 0 ||
                    c->models[i].first + c->models[i].n_bundles > c->n_bundles ||
                    (c->models[i].rollout.set && c->models[i].rollout.percent > 100))
                        abort();
        for (size_t i = 0; i < c->n_bundles; i++)
                if (memcmp(&back->bundles[i], &c->bundles[i], sizeof(ChannelBundle)) != 0)
                        abort();
        free(text);
        free(file);
        channel_free(back);
        channel_free(c);
        return 0;
}
