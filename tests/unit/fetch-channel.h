/* SPDX-License-Identifier: MIT */
#pragma once
/* Channels as channel_parse() leaves them, for the fetcher's unit tests (check_fetch*.c). */

#include <stdlib.h>

#include "channel.h"
#include "check-main.h"

typedef struct B {
        const char *task;
        uint64_t version;
        uint8_t base;                   /* every byte of its base_sha256 (the device's is 0x11) */
        ArtifactKind kind;
} B;

#define OURS(task, version) { task, version, 0x11, ARTIFACT_GGUF }

/* A format-1 channel as channel_parse() leaves one: @bs sorted by task, then version. */
static Channel *make_channel(uint64_t serial, const char *desired, const B *bs, size_t n) {
        Channel *c = calloc(1, sizeof(Channel));
        ck_assert_ptr_nonnull(c);
        snprintf(c->name, sizeof(c->name), "stable");
        c->format = CHANNEL_FORMAT_1;
        c->serial = serial;
        c->created = 1700000000 + (int64_t) serial;   /* signed at: each serial a second later */
        c->models = calloc(1, sizeof(ChannelModel));
        ck_assert_ptr_nonnull(c->models);
        c->n_models = 1;
        snprintf(c->models[0].desired, sizeof(c->models[0].desired), "%s", desired ? desired : "");
        c->models[0].n_bundles = n;
        c->bundles = calloc(n ? n : 1, sizeof(ChannelBundle));
        ck_assert_ptr_nonnull(c->bundles);
        for (size_t i = 0; i < n; i++) {
                ChannelBundle *b = &c->bundles[i];
                snprintf(b->task, sizeof(b->task), "%s", bs[i].task);
                b->version = bs[i].version;
                snprintf(b->path, sizeof(b->path), "%s-%llu.tpb", bs[i].task, (unsigned long long) bs[i].version);
                b->size = 5;
                b->kind = bs[i].kind;
                memset(b->base_sha256, bs[i].base, SHA256_DIGEST_SIZE);
        }
        c->n_bundles = n;
        return c;
}
