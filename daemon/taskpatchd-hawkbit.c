/* SPDX-License-Identifier: MIT */
/* The Eclipse hawkBit DDI client (taskpatchd-hawkbit.h). */

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "cpu.h"
#include "taskpatchd-ddi.h"
#include "taskpatchd-download.h"
#include "taskpatchd-hawkbit.h"
#include "taskpatchd-log.h"
#include "yaml-doc.h"

#define BODY_MAX DDI_BODY_MAX          /* a controller resource, deployment or cancel answer */
#define DEFAULT_SLEEP_USEC (300 * 1000000ULL)
#define RETRY_USEC (30 * 1000000ULL)    /* after a failed poll */
#define ID_MAX (DDI_ID_MAX + 1)

/* Where the action stands (polls run beside it, on their own handle). */
typedef enum HawkbitPhase {
        HB_IDLE,
        HB_DOWNLOADING,
        HB_INSTALLING,
        HB_SWITCHING,                   /* the last bundle's install + switch, or its trial */
        _HB_PHASE_MAX,
} HawkbitPhase;

static const char *const phase_names[_HB_PHASE_MAX] = {
        [HB_IDLE] = "idle",
        [HB_DOWNLOADING] = "downloading",
        [HB_INSTALLING] = "installing",
        [HB_SWITCHING] = "switching",
};

/* An artifact of the action (taskpatchd-ddi.h), and how far it got. */
typedef struct HawkbitArtifact {
        DdiArtifact ddi;
        size_t model;                   /* the index of its model's target (its chunk names it, else the first) */
        bool switches;                  /* the last of its model's: its install switches to the task */
        char *path;                     /* downloads/...part once complete */
        bool installed;
} HawkbitArtifact;

/* A feedback or configData call waiting for the control handle. */
typedef struct Request {
        struct Request *next;
        char *url;
        char *body;
        bool put;
} Request;

struct Hawkbit {
        SourceTarget targets[CONFIG_MAX_MODELS];        /* the models it serves, each through its host */
        size_t n_targets;
        const SourceHost *host;         /* the first model's: for what concerns the device (errors, events) */
        const DaemonConfig *config;     /* the first model's view: the device-wide keys */
        sd_event *event;
        CurlGlue *glue;                 /* borrowed */
        CURL *easy;                     /* polls and the resources they point to, one at a time */
        CURL *dl_easy;                  /* downloads, beside the polls (a cancel can arrive meanwhile) */
        CURL *control;                  /* feedback and configData, in order */
        struct curl_slist *headers;     /* Accept (+ Authorization) */
        struct curl_slist *json_headers; /* the same + Content-Type */
        sd_event_source *timer, *defer;
        HawkbitPhase phase;
        bool fetching;                  /* easy is busy */
        uint64_t sleep_usec;            /* the server's config.polling.sleep */
        char *base_url;                 /* {url}/{tenant}/controller/v1/{controller_id} */
        HttpBody body;
        int (*on_body)(Hawkbit *h, TpError *err);  /* what to do with the resource fetched (h->body) */

        /* the action being carried out */
        char action[ID_MAX];            /* "" when none */
        HawkbitArtifact artifacts[DDI_ARTIFACTS_MAX];
        size_t n_artifacts;
        bool download_only;             /* deployment.update is "skip" (a maintenance window) */
        bool sent_downloaded;
        Download dl;
        size_t dl_index;
        char transaction[TRANSACTION_ID_SIZE];
        char finished[ID_MAX];          /* the last action closed, and what was said, to say it again */
        char *finished_body;

        Request *queue;
        bool sending;

        char last_error[TP_ERROR_MAX];
        int64_t last_poll;
        struct {
                char action[ID_MAX];
                const char *result;     /* "pending", "success", "failure", "canceled" */
                char reason[TP_ERROR_MAX];
        } outcome;
};

static void step(Hawkbit *h);

static void kick(Hawkbit *h) {
        (void) sd_event_source_set_enabled(h->defer, SD_EVENT_ONESHOT);
}

#define set_error(h, ...) source_error((h)->host, "hawkbit", (h)->last_error, __VA_ARGS__)

static void schedule_poll(Hawkbit *h, uint64_t usec) {
        (void) sd_event_source_set_time_relative(h->timer, usec);
        (void) sd_event_source_set_enabled(h->timer, SD_EVENT_ONESHOT);
}

/* ---- feedback and configData, one at a time on the control handle ---- */

static void send_next(Hawkbit *h);

static void request_free(Request *r) {
        free(r->url);
        free(r->body);
        free(r);
}

static void on_control_done(CurlGlue *g _unused_, CURL *easy, CURLcode result, void *userdata) {
        Hawkbit *h = userdata;
        Request *r = h->queue;
        long status = 0;

        (void) curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
        if (result != CURLE_OK || status < 200 || status > 299) {
                char why[TP_ERROR_MAX];
                http_describe(h->config, result, status, r->url, why, sizeof(why));
                set_error(h, "%s (the server keeps the action open: it is said again)", why);
        }
        h->queue = r->next;
        request_free(r);
        h->sending = false;
        send_next(h);
}

static void send_next(Hawkbit *h) {
        Request *r = h->queue;

        if (h->sending || !r)
                return;
        if (http_setup(h->control, h->config, r->url) < 0 ||
            curl_easy_setopt(h->control, CURLOPT_HTTPHEADER, h->json_headers) ||
            curl_easy_setopt(h->control, CURLOPT_COPYPOSTFIELDS, r->body) ||
            (r->put && curl_easy_setopt(h->control, CURLOPT_CUSTOMREQUEST, "PUT")) ||
            curl_glue_add(h->glue, h->control, on_control_done, h) < 0) {
                set_error(h, "%s: cannot send (out of memory?)", r->url);
                h->queue = r->next;
                request_free(r);
                return;
        }
        h->sending = true;
}

/* Queue @body (reference stolen) for @path under the controller resource. */
static void queue_request(Hawkbit *h, const char *path, json_t *body, bool put) {
        Request *r = calloc(1, sizeof(Request)), **tail = &h->queue;

        if (!r || asprintf(&r->url, "%s/%s", h->base_url, path) < 0 ||
            !(r->body = json_dumps(body, JSON_COMPACT | JSON_SORT_KEYS))) {
                log_error("hawkbit: out of memory");
                if (r)
                        request_free(r);
                json_decref(body);
                return;
        }
        json_decref(body);
        r->put = put;
        while (*tail)
                tail = &(*tail)->next;
        *tail = r;
        send_next(h);
}

static void feedback(Hawkbit *h, DdiExecution execution, DdiFinished finished, const char *detail) {
        char path[ID_MAX + 40];
        snprintf(path, sizeof(path), "deploymentBase/%s/feedback", h->action);
        queue_request(h, path, ddi_feedback_new(h->action, execution, finished, detail), false);
}

/* A model's attributes into @data, each key after @prefix ("" for the first model, else "NAME."). */
static void model_attributes(json_t *data, const SourceTarget *t, const char *prefix) {
        char hex[SHA256_HEX_SIZE], version[24], key[DDI_MODEL_MAX + 32];
        DeviceView d;

        t->host->device(t->host, &d);
        if (!d.provisioned)
                return;
        sha256_to_hex(d.base_sha256, hex);
        snprintf(version, sizeof(version), "%" PRIu64, d.active_version);
#define ATTR(name, value) (snprintf(key, sizeof(key), "%s%s", prefix, name), \
                           json_object_set_new(data, key, json_string(value)))
        ATTR("base_sha256", hex);
        ATTR("base_kind", artifact_kind_to_string(d.base_kind));
        ATTR("active_task", d.active_task[0] ? d.active_task : "base");
        ATTR("active_version", version);
#undef ATTR
}

static void send_config_data(Hawkbit *h) {
        char features[512] = "", prefix[DDI_MODEL_MAX + 2], models[CONFIG_MAX_MODELS * (DDI_MODEL_MAX + 1)] = "";
        uint64_t caps = cpu_detect();
        size_t n = 0;

        for (CpuFeature f = 0; f < _CPU_FEATURE_MAX; f++)
                if (cpu_feature_native(f) && (caps & CPU_BIT(f)) && n < sizeof(features) - 16)
                        n += (size_t) snprintf(features + n, sizeof(features) - n, "%s%s", n ? "," : "",
                                               cpu_feature_to_string(f));
        /* hawkBit keeps attributes as strings. */
        json_t *data = json_pack("{s:s, s:s, s:s, s:s}", "taskpatch_version", TASKPATCH_VERSION, "cpu_arch", cpu_arch(),
                                 "cpu_features", features, "model_path", h->config->model_path);
        model_attributes(data, &h->targets[0], "");
        if (h->n_targets > 1) {
                /* The other models' as "NAME.active_task" and so on; "models" lists them all. */
                n = 0;
                for (size_t i = 0; i < h->n_targets; i++) {
                        n += (size_t) snprintf(models + n, sizeof(models) - n, "%s%s", i ? "," : "",
                                               source_target_model(&h->targets[i]));
                        snprintf(prefix, sizeof(prefix), "%s.", source_target_model(&h->targets[i]));
                        if (i > 0)
                                model_attributes(data, &h->targets[i], prefix);
                }
                json_object_set_new(data, "models", json_string(models));
        }
        queue_request(h, "configData", ddi_config_data_new(data), true);
}

/* ---- the action ---- */

/* The action is over (closed or canceled): its downloads, partial or whole, go too. */
static void clear_action(Hawkbit *h) {
        download_remove(&h->dl);
        for (size_t i = 0; i < h->n_artifacts; i++) {
                if (h->artifacts[i].path)
                        (void) unlink(h->artifacts[i].path);
                free(h->artifacts[i].ddi.url);
                free(h->artifacts[i].path);
                h->artifacts[i] = (HawkbitArtifact) {};
        }
        h->n_artifacts = 0;
        h->action[0] = '\0';
        h->transaction[0] = '\0';
        h->sent_downloaded = false;
        h->phase = HB_IDLE;
}

static void set_outcome(Hawkbit *h, const char *result, const char *reason) {
        snprintf(h->outcome.action, sizeof(h->outcome.action), "%s", h->action);
        h->outcome.result = result;
        snprintf(h->outcome.reason, sizeof(h->outcome.reason), "%s", reason ? reason : "");
}

/* Close the action on the server: success only after the commit, failure with the reason. */
static void finish_action(Hawkbit *h, bool success, const char *reason) {
        DdiFinished finished = success ? DDI_FINISHED_SUCCESS : DDI_FINISHED_FAILURE;
        json_t *body = ddi_feedback_new(h->action, DDI_EXECUTION_CLOSED, finished, reason);

        log_info("hawkbit: action %s closed: %s%s%s", h->action, success ? "success" : "failure", reason ? ": " : "",
                 reason ? reason : "");
        set_outcome(h, success ? "success" : "failure", reason);
        free(h->finished_body);
        h->finished_body = json_dumps(body, JSON_COMPACT | JSON_SORT_KEYS);
        snprintf(h->finished, sizeof(h->finished), "%s", h->action);
        feedback(h, DDI_EXECUTION_CLOSED, finished, reason);
        json_decref(body);
        clear_action(h);
        kick(h);
}

static int resolve_models(Hawkbit *h, char *why);

/* A deploymentBase: a new action is taken on; one closed before is said again; the one in progress goes on. */
static int on_deployment(Hawkbit *h, TpError *err) {
        _cleanup_(ddi_deployment_done) DdiDeployment d = {};
        char why[TP_ERROR_MAX];
        int r = ddi_deployment_parse((const char *) h->body.data, h->body.len, h->config->channel.allow_http, &d, err);

        if (r < 0)
                return r;
        if (strcmp(d.id, h->finished) == 0 && h->finished_body) {
                /* Closed before, but the server did not hear it: say it again. */
                char path[ID_MAX + 40];
                snprintf(path, sizeof(path), "deploymentBase/%s/feedback", d.id);
                queue_request(h, path, json_loads(h->finished_body, 0, NULL), false);
                return 0;
        }
        if (h->action[0]) {
                if (strcmp(d.id, h->action) == 0)
                        h->download_only = d.update == DDI_HANDLING_SKIP;
                return 0;       /* in progress (or another one waits until this one is closed) */
        }
        snprintf(h->action, sizeof(h->action), "%s", d.id);
        h->download_only = d.update == DDI_HANDLING_SKIP;
        log_info("hawkbit: action %s", d.id);
        if (d.refused.code < 0) {
                finish_action(h, false, d.refused.message);
                return 0;
        }
        for (size_t i = 0; i < d.n_artifacts; i++) {
                h->artifacts[i] = (HawkbitArtifact) { .ddi = d.artifacts[i] };
                d.artifacts[i].url = NULL;      /* moved */
        }
        h->n_artifacts = d.n_artifacts;
        if (resolve_models(h, why) < 0) {
                finish_action(h, false, why);
                return 0;
        }
        set_outcome(h, "pending", NULL);
        snprintf(why, sizeof(why), "downloading %zu bundle(s)", h->n_artifacts);
        feedback(h, DDI_EXECUTION_PROCEEDING, DDI_FINISHED_NONE, why);
        return 0;
}

/*
 * Each artifact's model: the one its chunk's metadata names (an unknown one refuses the
 * action, @why says so), else the first; the last artifact of each model switches.
 */
static int resolve_models(Hawkbit *h, char *why) {
        char names[CONFIG_MAX_MODELS * (DDI_MODEL_MAX + 2)];

        for (size_t i = 0; i < h->n_artifacts; i++) {
                HawkbitArtifact *a = &h->artifacts[i];
                size_t t = a->ddi.model[0] ? source_target_find(h->targets, h->n_targets, a->ddi.model) : 0;
                if (t == h->n_targets) {
                        source_target_names(h->targets, h->n_targets, names, sizeof(names));
                        snprintf(why, TP_ERROR_MAX, "%.100s: its module is for model '%s', which this device does "
                                 "not have (it has %.250s)", a->ddi.filename, a->ddi.model, names);
                        return -ENOENT;
                }
                a->model = t;
        }
        for (size_t i = 0; i < h->n_artifacts; i++) {
                h->artifacts[i].switches = true;
                for (size_t k = i + 1; k < h->n_artifacts; k++)
                        if (h->artifacts[k].model == h->artifacts[i].model)
                                h->artifacts[i].switches = false;
        }
        return 0;
}

/* A cancelAction: honoured until the first bundle is installed, rejected after. */
static int on_cancel(Hawkbit *h, TpError *err) {
        DdiCancel c;
        char path[ID_MAX + 40];
        int r = ddi_cancel_parse((const char *) h->body.data, h->body.len, &c, err);

        if (r < 0)
                return r;
        snprintf(path, sizeof(path), "cancelAction/%s/feedback", c.id);
        bool applied = h->phase == HB_INSTALLING || h->phase == HB_SWITCHING;
        for (size_t i = 0; i < h->n_artifacts; i++)
                applied = applied || h->artifacts[i].installed;
        if (strcmp(c.stop_id, h->action) == 0 && applied) {
                queue_request(h, path,
                              ddi_feedback_new(c.id, DDI_EXECUTION_REJECTED, DDI_FINISHED_NONE,
                                               "the update is being applied"),
                              false);
                return 0;
        }
        if (strcmp(c.stop_id, h->action) == 0) {
                log_info("hawkbit: action %s canceled by the server", c.stop_id);
                set_outcome(h, "canceled", NULL);
                clear_action(h);
        }
        queue_request(h, path, ddi_feedback_new(c.id, DDI_EXECUTION_CLOSED, DDI_FINISHED_SUCCESS, "canceled"), false);
        return 0;
}

/* ---- polling ---- */

static void fetch(Hawkbit *h, const char *url, int (*then)(Hawkbit *h, TpError *err));

static int on_controller(Hawkbit *h, TpError *err) {
        _cleanup_(ddi_controller_done) DdiController c = {};
        int r = ddi_controller_parse((const char *) h->body.data, h->body.len, h->config->channel.allow_http, &c, err);

        if (r < 0)
                return r;
        h->sleep_usec = c.sleep_usec ? c.sleep_usec : DEFAULT_SLEEP_USEC;
        if (c.config_data)
                send_config_data(h);
        if (c.cancel_href)
                fetch(h, c.cancel_href, on_cancel);
        else if (c.deployment_href)
                fetch(h, c.deployment_href, on_deployment);
        return 0;
}

static void on_fetch_done(CurlGlue *g _unused_, CURL *easy, CURLcode result, void *userdata) {
        Hawkbit *h = userdata;
        char url[1024] = "", why[TP_ERROR_MAX];
        const char *effective = NULL;
        long status = 0;
        TpError err = {};

        (void) curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
        (void) curl_easy_getinfo(easy, CURLINFO_EFFECTIVE_URL, &effective);
        snprintf(url, sizeof(url), "%s", effective ? effective : "?");
        h->fetching = false;
        if (h->body.capped || result != CURLE_OK || status != 200) {
                if (h->body.capped)
                        snprintf(why, sizeof(why), "%.400s: more than %u bytes: cut", url, BODY_MAX);
                else
                        http_describe(h->config, result, status, url, why, sizeof(why));
                set_error(h, "%s", why);
                schedule_poll(h, RETRY_USEC < h->sleep_usec ? RETRY_USEC : h->sleep_usec);
                kick(h);
                return;
        }
        int (*then)(Hawkbit *h, TpError *err) = h->on_body;
        int r = then(h, &err);
        if (r < 0)
                set_error(h, "%.400s: not the DDI answer expected: %s", url, tp_error_message(&err, r));
        else if (then == on_controller)
                h->last_error[0] = '\0';
        if (then == on_controller)
                schedule_poll(h, h->sleep_usec);
        kick(h);
}

static void fetch(Hawkbit *h, const char *url, int (*then)(Hawkbit *h, TpError *err)) {
        h->on_body = then;
        h->fetching = true;
        if (http_setup_get(h->easy, h->config, url, h->headers, 120L, &h->body) < 0 ||
            curl_glue_add(h->glue, h->easy, on_fetch_done, h) < 0) {
                set_error(h, "%s: cannot start the transfer", url);
                h->fetching = false;
                schedule_poll(h, RETRY_USEC);
        }
}

static int on_timer(sd_event_source *s _unused_, uint64_t usec _unused_, void *userdata) {
        Hawkbit *h = userdata;

        if (h->fetching) {
                schedule_poll(h, h->sleep_usec);        /* the last poll still runs: after it */
                return 0;
        }
        h->last_poll = (int64_t) clock_wall();
        fetch(h, h->base_url, on_controller);
        return 0;
}

/* ---- downloading and installing ---- */

static void on_download(Download *d, DownloadResult result, const char *why, void *userdata) {
        Hawkbit *h = userdata;
        HawkbitArtifact *a = &h->artifacts[h->dl_index];

        h->phase = HB_IDLE;
        if (result == DOWNLOAD_OK) {
                a->path = TAKE_PTR(d->path);
                download_stop(d);
                kick(h);
                return;
        }
        download_stop(d);
        if (result == DOWNLOAD_BAD) {
                finish_action(h, false, why);
                return;
        }
        set_error(h, "%s (resumed at the next poll)", why);     /* the next poll's deployment kicks us again */
}

static void on_download_progress(Download *d, void *userdata) {
        Hawkbit *h = userdata;
        h->host->emit(h->host, download_json(d, json_pack("{s:s, s:s, s:s}", "event", "download", "file",
                                                          h->artifacts[h->dl_index].ddi.filename, "action",
                                                          h->action)));
}

static void start_download(Hawkbit *h, size_t i) {
        HawkbitArtifact *a = &h->artifacts[i];
        char name[ID_MAX + 300];
        DownloadSpec spec = { .url = a->ddi.url, .name = name, .size = a->ddi.size, .sha256 = a->ddi.sha256,
                              .headers = h->headers };
        int r;

        snprintf(name, sizeof(name), "hawkbit-%s-%s", h->action, a->ddi.filename);
        h->dl_index = i;
        h->phase = HB_DOWNLOADING;
        log_info("hawkbit: downloading %s (%" PRIu64 " bytes)", a->ddi.url, a->ddi.size);
        /* Under its model's state_dir: its disk budget counts it. */
        r = download_start(&h->dl, h->targets[a->model].config, h->event, h->glue, h->dl_easy, &spec, on_download,
                           on_download_progress, h);
        if (r < 0) {
                download_stop(&h->dl);
                h->phase = HB_IDLE;
                set_error(h, "%s: cannot download: %s", a->ddi.filename, strerror(-r));
        }
}

static void start_install(Hawkbit *h, size_t i) {
        HawkbitArtifact *a = &h->artifacts[i];
        const SourceHost *host = h->targets[a->model].host;
        InstallRequest req = { .then_switch = a->switches, .origin = ORIGIN_HAWKBIT };
        TpError err = {};
        char why[TP_ERROR_MAX], transaction[TRANSACTION_ID_SIZE];
        int fd = open(a->path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        int r = fd < 0 ? -errno : host->submit_install(host, fd, &req, transaction, &err);

        if (r < 0) {
                snprintf(why, sizeof(why), "%s: %s", a->ddi.filename,
                         fd < 0 ? strerror(-r) : tp_error_message(&err, r));
                finish_action(h, false, why);
                return;
        }
        h->dl_index = i;
        h->phase = req.then_switch ? HB_SWITCHING : HB_INSTALLING;
        memcpy(h->transaction, transaction, sizeof(transaction));
}

/* What the action needs next: a download, the "downloaded" feedback, an install. */
static void step(Hawkbit *h) {
        size_t i;

        send_next(h);
        if (!h->action[0] || h->phase != HB_IDLE || h->dl.easy)
                return;
        for (i = 0; i < h->n_artifacts && h->artifacts[i].path; i++)
                ;
        if (i < h->n_artifacts) {
                start_download(h, i);
                return;
        }
        if (!h->sent_downloaded) {
                feedback(h, DDI_EXECUTION_DOWNLOADED, DDI_FINISHED_NONE,
                         "every bundle downloaded and its SHA-256 checked");
                h->sent_downloaded = true;
        }
        for (i = 0; i < h->n_artifacts && h->artifacts[i].installed; i++)
                ;
        if (i == h->n_artifacts || h->download_only)
                return;         /* nothing left, or a maintenance window */
        const SourceHost *host = h->targets[h->artifacts[i].model].host;
        if (host->can_start(host))
                start_install(h, i);    /* else busy: the host tells us when it is idle */
}

/* Whether an artifact of the action is still to be installed (another model's, after a switch). */
static bool artifacts_left(const Hawkbit *h) {
        for (size_t i = 0; i < h->n_artifacts; i++)
                if (!h->artifacts[i].installed)
                        return true;
        return false;
}

/* A model's switch ended well: the next model's artifacts, or the action is closed with success. */
static void switched(Hawkbit *h, const char *reason) {
        h->transaction[0] = '\0';
        h->phase = HB_IDLE;
        if (artifacts_left(h)) {
                kick(h);
                return;
        }
        finish_action(h, true, reason);
}

static int on_defer(sd_event_source *s _unused_, void *userdata) {
        step(userdata);
        return 0;
}

static void on_operation_done(void *userdata, const OperationOutcome *o) {
        Hawkbit *h = userdata;

        if (!h->transaction[0] || strcmp(o->transaction, h->transaction) != 0) {
                kick(h);
                return;
        }
        HawkbitArtifact *a = &h->artifacts[h->dl_index];
        if (o->r < 0) {
                char why[TP_ERROR_MAX];
                snprintf(why, sizeof(why), "%s: %s", a->ddi.filename, o->error);
                finish_action(h, false, why);
                return;
        }
        a->installed = true;
        (void) unlink(a->path);         /* the store has its copy */
        if (h->phase == HB_SWITCHING && o->on_trial)
                return;                 /* on_trial_done() closes the action */
        if (h->phase == HB_SWITCHING) {
                switched(h, "installed and active (no trial)");
                return;
        }
        h->transaction[0] = '\0';
        h->phase = HB_IDLE;
        kick(h);
}

static void on_trial_done(void *userdata, const char *transaction, bool committed, const char *reason) {
        Hawkbit *h = userdata;

        if (h->action[0] && h->transaction[0] && strcmp(transaction, h->transaction) == 0) {
                if (committed)
                        switched(h, "committed");
                else
                        finish_action(h, false, reason);
        }
        kick(h);
}

static void on_idle(void *userdata) {
        kick(userdata);
}

const UpdateSource hawkbit_source = {
        .name = "hawkbit",
        .operation_done = on_operation_done,
        .trial_done = on_trial_done,
        .idle = on_idle,
};

json_t *hawkbit_status(const Hawkbit *h) {
        char when[21];
        json_t *o = json_pack("{s:s, s:s, s:s, s:o}", "url", h->config->hawkbit.url, "controller_id",
                              h->config->hawkbit.controller_id, "state",
                              h->phase == HB_IDLE && h->fetching ? "polling" : phase_names[h->phase], "last_error",
                              h->last_error[0] ? json_string(h->last_error) : json_null());
        if (h->last_poll) {
                format_time_utc(h->last_poll, when);
                json_object_set_new(o, "last_poll", json_string(when));
        }
        json_object_set_new(o, "action", h->action[0] ? json_string(h->action) : json_null());
        if (h->dl.easy)
                json_object_set_new(o, "download",
                                    download_json(&h->dl, json_pack("{s:s}", "file",
                                                                    h->artifacts[h->dl_index].ddi.filename)));
        if (h->outcome.result)
                json_object_set_new(o, "update",
                                    json_pack("{s:s, s:s, s:o}", "action", h->outcome.action, "result",
                                              h->outcome.result, "reason",
                                              h->outcome.reason[0] ? json_string(h->outcome.reason) : json_null()));
        return o;
}

/* ---- life ---- */

static int read_token(const char *path, char *buf, size_t n, TpError *err) {
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        ssize_t k;

        if (fd < 0)
                return tp_error(err, -errno, "hawkbit.token_file: %s: %s", path, strerror(errno));
        k = read(fd, buf, n - 1);
        safe_close(fd);
        if (k < 0)
                return tp_error(err, -errno, "hawkbit.token_file: %s: %s", path, strerror(errno));
        buf[k] = '\0';
        buf[strcspn(buf, "\r\n")] = '\0';
        if (!buf[0] || (size_t) k == n - 1)
                return tp_error(err, -EINVAL, "hawkbit.token_file: %s: expected one line holding the token", path);
        return 0;
}

int hawkbit_new(sd_event *e, const SourceTarget *targets, size_t n, CurlGlue *glue, Hawkbit **ret,
                TpError *err) {
        const DaemonConfig *c = targets[0].config;
        char token[512], auth[600];
        Hawkbit *h;
        int r;

        *ret = NULL;
        if (!c->hawkbit.url)
                return 0;
        if (n == 0 || n > CONFIG_MAX_MODELS)
                return tp_error(err, -EINVAL, "hawkbit: %zu models", n);
        if (c->hawkbit.token_file && (r = read_token(c->hawkbit.token_file, token, sizeof(token), err)) < 0)
                return r;
        h = calloc(1, sizeof(Hawkbit));
        if (!h)
                return -ENOMEM;
        *h = (Hawkbit) { .host = targets[0].host, .config = c, .event = e, .glue = glue, .dl = DOWNLOAD_NULL,
                         .n_targets = n };
        memcpy(h->targets, targets, n * sizeof(SourceTarget));
        h->sleep_usec = DEFAULT_SLEEP_USEC;
        h->headers = curl_slist_append(NULL, "Accept: application/hal+json");
        if (c->hawkbit.token_file) {
                snprintf(auth, sizeof(auth), "Authorization: TargetToken %s", token);
                h->headers = curl_slist_append(h->headers, auth);
        }
        h->json_headers = curl_slist_append(NULL, "Content-Type: application/json");
        h->json_headers = curl_slist_append(h->json_headers, "Accept: application/hal+json");
        if (c->hawkbit.token_file)
                h->json_headers = curl_slist_append(h->json_headers, auth);
        h->easy = curl_easy_init();
        h->dl_easy = curl_easy_init();
        h->control = curl_easy_init();
        if (!h->headers || !h->json_headers || http_body_init(&h->body, BODY_MAX) < 0 || !h->easy || !h->dl_easy || !h->control ||
            asprintf(&h->base_url, "%s/%s/controller/v1/%s", c->hawkbit.url, c->hawkbit.tenant,
                     c->hawkbit.controller_id) < 0) {
                hawkbit_free(h);
                return -ENOMEM;
        }
        if ((r = sd_event_add_time_relative(e, &h->timer, CLOCK_BOOTTIME, 1000000, 0, on_timer, h)) < 0 ||
            (r = sd_event_add_defer(e, &h->defer, on_defer, h)) < 0) {
                hawkbit_free(h);
                return tp_error(err, r, "hawkbit: cannot set up polling: %s", strerror(-r));
        }
        (void) sd_event_source_set_enabled(h->defer, SD_EVENT_OFF);
        (void) sd_event_source_set_description(h->timer, "hawkbit-poll");
        (void) sd_event_source_set_description(h->defer, "hawkbit-next");
        log_info("hawkbit: polling %s", h->base_url);
        *ret = h;
        return 0;
}

Hawkbit *hawkbit_free(Hawkbit *h) {
        if (!h)
                return NULL;
        download_stop(&h->dl);
        curl_glue_remove(h->glue, h->easy);
        curl_glue_remove(h->glue, h->control);
        for (size_t i = 0; i < h->n_artifacts; i++) {
                free(h->artifacts[i].ddi.url);
                free(h->artifacts[i].path);     /* complete downloads stay for the next start */
        }
        while (h->queue) {
                Request *r = h->queue;
                h->queue = r->next;
                request_free(r);
        }
        if (h->easy)
                curl_easy_cleanup(h->easy);
        if (h->dl_easy)
                curl_easy_cleanup(h->dl_easy);
        if (h->control)
                curl_easy_cleanup(h->control);
        curl_slist_free_all(h->headers);
        curl_slist_free_all(h->json_headers);
        sd_event_source_disable_unref(h->timer);
        sd_event_source_disable_unref(h->defer);
        free(h->finished_body);
        free(h->base_url);
        http_body_done(&h->body);
        free(h);
        return NULL;
}
