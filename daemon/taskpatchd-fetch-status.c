/* SPDX-License-Identifier: MIT */
/* The fetcher's part of a model's status (fetcher_status(), taskpatchd-fetch.h). */

#include <limits.h>
#include <stdio.h>

#include "parse.h"
#include "taskpatchd-fetch.h"

static const char *const phase_names[_FETCH_PHASE_MAX] = {
        [FETCH_IDLE] = "idle",
        [FETCH_DOWNLOADING] = "downloading",
        [FETCH_INSTALLING] = "installing",
        [FETCH_SWITCHING] = "switching",
};

/* Why the model does or does not take the channel's update, in words (for status). */
static void describe(const FetchModel *fm, const ChannelModel *cm, const ChannelView *cv, char *why,
                     unsigned *ret_cohort) {
        char rollout[TP_ERROR_MAX];
        DeviceView d;

        *ret_cohort = UINT_MAX;
        if (!fm->f->channel) {
                snprintf(why, TP_ERROR_MAX, "no channel accepted yet");
                return;
        }
        if (!cm) {
                snprintf(why, TP_ERROR_MAX, "the channel has no section for this model: nothing to take");
                return;
        }
        if (!fetch_in_rollout(cm, fm->f->device_id, ret_cohort, rollout)) {
                snprintf(why, TP_ERROR_MAX, "%s", rollout);
                return;
        }
        fm->host->device(fm->host, &d);
        const ChannelBundle *nb;
        if (!fetch_on_base(fm->f->channel, cm, &d, &fm->refused, &nb, why))
                return;
        if (cv->pinned)
                snprintf(why, TP_ERROR_MAX, "pinned: a technician's switch holds the task until the channel's "
                         "serial changes");
        else if (!cm->desired[0])
                snprintf(why, TP_ERROR_MAX, "following the channel (%.200s): no desired task, bundles are "
                         "installed only", rollout);
        else if (!channel_desired(fm->f->channel, cm, d.base_sha256))
                snprintf(why, TP_ERROR_MAX, "the desired task %s has no bundle for this device's base", cm->desired);
        else
                snprintf(why, TP_ERROR_MAX, "following the channel (%.200s)", rollout);
}

static json_t *rollout_json(const ChannelModel *cm, unsigned cohort) {
        if (!cm || !cm->rollout.set)
                return json_null();
        return json_pack("{s:i, s:I, s:o, s:b}", "percent", (int) cm->rollout.percent, "seed",
                         (json_int_t) cm->rollout.seed, "cohort",
                         cohort == UINT_MAX ? json_null() : json_integer(cohort), "included",
                         cohort == UINT_MAX ? cm->rollout.percent >= 100 : cohort < cm->rollout.percent);
}

json_t *fetcher_status(const FetchModel *fm) {
        const Fetcher *f = fm->f;
        const ChannelModel *cm = fetch_model_section(fm);
        char when[21], why[TP_ERROR_MAX];
        unsigned cohort;
        ChannelView cv;
        json_t *urls = json_array();

        fm->host->channel(fm->host, &cv);
        describe(fm, cm, &cv, why, &cohort);
        for (size_t i = 0; i < f->config->channel.n_urls; i++)
                json_array_append_new(urls, json_string(f->config->channel.urls[i]));
        const char *error = fm->last_error[0] ? fm->last_error : f->last_error[0] ? f->last_error : NULL;
        const char *state = fm->phase != FETCH_IDLE ? phase_names[fm->phase] : f->polling ? "polling" : "idle";
        json_t *o = json_pack("{s:o, s:s, s:o, s:o, s:s}", "urls", urls, "state", state, "serial",
                              cv.have_serial ? json_integer((json_int_t) cv.serial) : json_null(), "last_error",
                              error ? json_string(error) : json_null(), "device_id_source", f->device_id_source);
        if (f->channel) {
                json_object_set_new(o, "name", json_string(f->channel->name));
                json_object_set_new(o, "format", json_integer(f->channel->format));
                json_object_set_new(o, "desired", cm && cm->desired[0] ? json_string(cm->desired) : json_null());
                json_object_set_new(o, "rollout", rollout_json(cm, cohort));
                json_object_set_new(o, "decision", json_string(why));
        }
        json_object_set_new(o, "pinned", json_boolean(cv.pinned));
        if (f->last_poll) {
                format_time_utc(f->last_poll, when);
                json_object_set_new(o, "last_poll", json_string(when));
                json_object_set_new(o, "last_poll_http_status", json_integer(f->last_status));
                json_object_set_new(o, "last_poll_bytes", json_integer((json_int_t) f->last_poll_bytes));
                json_object_set_new(o, "polls", json_integer((json_int_t) f->polls));
        }
        if (f->dl_model == fm && f->dl.easy)
                json_object_set_new(o, "download",
                                    download_json(&f->dl, json_pack("{s:s, s:I, s:s}", "task", f->dl_what.task,
                                                                    "version", (json_int_t) f->dl_what.version,
                                                                    "url", f->dl.url)));
        if (fm->update.result)
                json_object_set_new(o, "update",
                                    json_pack("{s:s, s:I, s:s, s:o}", "task", fm->update.what.task, "version",
                                              (json_int_t) fm->update.what.version, "result", fm->update.result,
                                              "reason", fm->update.reason[0] ? json_string(fm->update.reason) :
                                                                               json_null()));
        return o;
}
