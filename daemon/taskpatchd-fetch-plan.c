/* SPDX-License-Identifier: MIT */
/* The fetcher's decisions on plain data (taskpatchd-fetch.h): which bundle, which switch, which cohort. */

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "taskpatchd-fetch.h"

bool fetch_refused_has(const FetchRefused *f, const char *task, uint64_t version) {
        for (size_t i = 0; i < f->n; i++)
                if (strcmp(f->list[i].task, task) == 0 && f->list[i].version == version)
                        return true;
        return false;
}

void fetch_refused_add(FetchRefused *f, const char *task, uint64_t version) {
        if (f->n >= FETCH_REFUSED_MAX)
                return;
        snprintf(f->list[f->n].task, sizeof(f->list[f->n].task), "%s", task);
        f->list[f->n++].version = version;
}

const ChannelModel *fetch_section(const Channel *c, size_t index, const char *name) {
        if (c->format == CHANNEL_FORMAT_1)
                return index == 0 ? &c->models[0] : NULL;
        return channel_model(c, name);
}

bool fetch_in_rollout(const ChannelModel *cm, const char *device_id, unsigned *ret_cohort, char *why) {
        const ChannelRollout *ro = &cm->rollout;

        *ret_cohort = UINT_MAX;
        if (!ro->set) {
                snprintf(why, TP_ERROR_MAX, "no rollout: every device takes the update");
                return true;
        }
        if (!device_id[0]) {
                /* No id, no cohort: only a rollout to every device (or none) can be decided. */
                snprintf(why, TP_ERROR_MAX, "rollout at %" PRIu32 "%%: this device has no id (set device_id, or "
                         "give it /etc/machine-id), so it takes the update only at 100%%", ro->percent);
                return ro->percent >= 100;
        }
        *ret_cohort = channel_cohort(device_id, ro->seed);
        bool in = *ret_cohort < ro->percent;
        snprintf(why, TP_ERROR_MAX, "rollout at %" PRIu32 "%%: this device's cohort is %u, %s", ro->percent,
                 *ret_cohort, in ? "in" : "not in yet (it joins when the percent is raised above it)");
        return in;
}

bool fetch_on_base(const Channel *c, const ChannelModel *cm, const DeviceView *d, const FetchRefused *refused,
                   const ChannelBundle **ret_base, char *why) {
        char want[SHA256_HEX_SIZE], have[SHA256_HEX_SIZE];

        *ret_base = NULL;
        if (!cm->has_base || memcmp(cm->base_sha256, d->base_sha256, SHA256_DIGEST_SIZE) == 0)
                return true;
        sha256_to_hex(cm->base_sha256, want);
        sha256_to_hex(d->base_sha256, have);
        const ChannelBundle *b = channel_base_bundle(c, cm, d->base_sha256);
        if (b && fetch_refused_has(refused, b->task, b->version))
                snprintf(why, TP_ERROR_MAX, "the channel's base is %.12s…, this device runs %.12s…: base bundle %s v%"
                         PRIu64 " failed here; it waits for another", want, have, b->task, b->version);
        else if (b) {
                snprintf(why, TP_ERROR_MAX, "the channel's base is %.12s…, this device runs %.12s…: replacing it "
                         "with base bundle %s v%" PRIu64 " (%s)", want, have, b->task, b->version,
                         channel_bundle_full(b) ? "the whole model" : "a delta from this base");
                *ret_base = b;
        } else
                snprintf(why, TP_ERROR_MAX, "the channel's base is %.12s…, this device runs %.12s…: it waits for a "
                         "base bundle from its base", want, have);
        return false;
}

const ChannelBundle *fetch_next_bundle(const Channel *c, const ChannelModel *cm, const DeviceView *d,
                                       const FetchRefused *refused, const SourceHost *host) {
        const ChannelBundle *pick = NULL;

        for (size_t i = cm->first; i < cm->first + cm->n_bundles; i++) {
                const ChannelBundle *b = &c->bundles[i];
                /* A base bundle: this daemon does not replace its base from one yet (provision does). */
                if (b->role != MANIFEST_ROLE_TASK ||
                    memcmp(b->base_sha256, d->base_sha256, SHA256_DIGEST_SIZE) != 0 || b->kind != d->base_kind ||
                    channel_find(c, cm, b->task, d->base_sha256) != b ||
                    fetch_refused_has(refused, b->task, b->version) ||
                    b->version <= host->newest_installed(host, b->task) || b->version < host->accepted(host, b->task))
                        continue;
                if (strcmp(b->task, cm->desired) == 0)
                        return b;
                if (!pick)
                        pick = b;
        }
        return pick;
}

bool fetch_then_switch(const ChannelModel *cm, const ChannelView *cv, const char *task) {
        return cm->desired[0] && strcmp(task, cm->desired) == 0 && !cv->pinned;
}

const ChannelBundle *fetch_switch_target(const Channel *c, const ChannelModel *cm, const DeviceView *d,
                                         const ChannelView *cv, const FetchRefused *refused,
                                         const SourceHost *host) {
        const ChannelBundle *want = cv->pinned ? NULL : channel_desired(c, cm, d->base_sha256);

        if (!want || memcmp(want->base_sha256, d->base_sha256, SHA256_DIGEST_SIZE) != 0 ||
            !host->installed(host, want->task, want->version) ||
            (strcmp(d->active_task, want->task) == 0 && d->active_version == want->version) ||
            fetch_refused_has(refused, want->task, want->version))
                return NULL;
        return want;
}
