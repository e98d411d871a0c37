/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the hawkBit DDI documents (daemon/taskpatchd-ddi.c, linked
 * from libtaskpatchd.a): every input goes through the controller, deployment and
 * cancel parsers, each with and without allow_http. A refusal must carry a
 * message that is valid UTF-8 and leave *ret alone; what is accepted must keep
 * every rule the header promises (ids, hrefs, caps, .tpb names), accepting
 * without allow_http must imply accepting with it, and an accepted action must
 * build a feedback body that reads back with its reason.
 */

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "manifest.h"
#include "taskpatchd-ddi.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define POISON 0xa5
#define SLEEP_MAX_USEC ((DDI_SLEEP_HOURS_MAX * 3600ULL + 59 * 60 + 59) * 1000000ULL)

static bool utf8_ok(const char *s) {
        json_t *j = json_string(s);
        json_decref(j);
        return j != NULL;
}

static void check_refusal(int r, const TpError *err, const void *ret, size_t n) {
        if (r >= 0 || (r != -ENOMEM && (!err->message[0] || err->code != r || !utf8_ok(err->message))))
                abort();
        for (size_t i = 0; i < n; i++)
                if (((const uint8_t *) ret)[i] != POISON)
                        abort();
}

static bool controls(const char *s) {
        for (; *s; s++)
                if ((unsigned char) *s < ' ' || *s == 0x7f)
                        return true;
        return false;
}

static void check_url(const char *url, bool allow_http) {
        size_t n = strlen(url);
        if (n > DDI_URL_MAX || controls(url) || strchr(url, ' '))
                abort();
        size_t scheme = strncasecmp(url, "https://", 8) == 0                   ? 8
                        : allow_http && strncasecmp(url, "http://", 7) == 0 ? 7
                                                                              : 0;
        if (!scheme || strchr("/?#", url[scheme]))     /* a host follows (the NUL is in the set) */
                abort();
}

static void controller(const char *doc, size_t size) {
        DdiController c[2];
        TpError err = {};
        int r[2];

        for (int http = 0; http < 2; http++) {
                memset(&c[http], POISON, sizeof(c[http]));
                r[http] = ddi_controller_parse(doc, size, http, &c[http], &err);
                if (r[http] < 0) {
                        check_refusal(r[http], &err, &c[http], sizeof(c[http]));
                        continue;
                }
                if (c[http].sleep_usec > SLEEP_MAX_USEC || c[http].sleep_usec % 1000000 != 0)
                        abort();
                if (c[http].deployment_href)
                        check_url(c[http].deployment_href, http);
                if (c[http].cancel_href)
                        check_url(c[http].cancel_href, http);
        }
        if (r[0] == 0 && (r[1] != 0 || c[0].sleep_usec != c[1].sleep_usec || c[0].config_data != c[1].config_data))
                abort();
        for (int http = 0; http < 2; http++)
                if (r[http] == 0)
                        ddi_controller_done(&c[http]);
}

/* The closed/failure feedback for @d, read back: the id and the reason survive. */
static void check_feedback(const DdiDeployment *d) {
        const char *reason = d->refused.code < 0 ? d->refused.message : "committed";
        json_t *body = ddi_feedback_new(d->id, DDI_EXECUTION_CLOSED, DDI_FINISHED_FAILURE, reason);
        char *text = json_dumps(body, JSON_COMPACT | JSON_SORT_KEYS);
        json_t *back = text ? json_loads(text, 0, NULL) : NULL;
        json_t *status = json_object_get(back, "status");

        if (!body || !back || strcmp(json_string_value(json_object_get(back, "id")), d->id) != 0 ||
            strcmp(json_string_value(json_object_get(status, "execution")), "closed") != 0 ||
            strcmp(json_string_value(json_array_get(json_object_get(status, "details"), 0)), reason) != 0)
                abort();
        json_decref(back);
        free(text);
        json_decref(body);
}

static void check_deployment(const DdiDeployment *d, bool allow_http) {
        if (!ddi_id_valid(d->id) || d->refused.code > 0)
                abort();
        if (d->refused.code < 0) {
                if (d->n_artifacts != 0 || !d->refused.message[0] || !utf8_ok(d->refused.message))
                        abort();
                for (size_t i = 0; i < DDI_ARTIFACTS_MAX; i++)
                        if (d->artifacts[i].url)
                                abort();
                return;
        }
        if (!ddi_handling_to_string(d->download) || !ddi_handling_to_string(d->update) || d->n_artifacts == 0 ||
            d->n_artifacts > DDI_ARTIFACTS_MAX)
                abort();
        for (size_t i = 0; i < d->n_artifacts; i++) {
                const DdiArtifact *a = &d->artifacts[i];
                size_t len = strnlen(a->filename, sizeof(a->filename));
                if (len < 5 || len > DDI_FILENAME_MAX || strcmp(a->filename + len - 4, ".tpb") != 0 ||
                    strchr(a->filename, '/') || controls(a->filename) || !a->url || a->size > INT64_MAX ||
                    (a->model[0] && !task_name_valid(a->model)))
                        abort();
                check_url(a->url, allow_http);
                for (size_t k = 0; k < i; k++)
                        if (strcmp(d->artifacts[k].filename, a->filename) == 0)
                                abort();
        }
}

static void deployment(const char *doc, size_t size) {
        static DdiDeployment d[2];
        TpError err = {};
        int r[2];

        for (int http = 0; http < 2; http++) {
                memset(&d[http], POISON, sizeof(d[http]));
                r[http] = ddi_deployment_parse(doc, size, http, &d[http], &err);
                if (r[http] < 0) {
                        check_refusal(r[http], &err, &d[http], sizeof(d[http]));
                        continue;
                }
                check_deployment(&d[http], http);
                check_feedback(&d[http]);
        }
        /* allow_http only adds: a deployment accepted without it is the same one with it */
        if (r[0] == 0 && (r[1] != 0 || strcmp(d[0].id, d[1].id) != 0 || d[0].update != d[1].update ||
                          (d[0].refused.code == 0 && (d[1].refused.code != 0 || d[0].n_artifacts != d[1].n_artifacts))))
                abort();
        for (int http = 0; http < 2; http++)
                if (r[http] == 0)
                        ddi_deployment_done(&d[http]);
}

static void cancel(const char *doc, size_t size) {
        DdiCancel c;
        TpError err = {};
        int r;

        memset(&c, POISON, sizeof(c));
        r = ddi_cancel_parse(doc, size, &c, &err);
        if (r < 0)
                check_refusal(r, &err, &c, sizeof(c));
        else if (r != 0 || !ddi_id_valid(c.id) || !ddi_id_valid(c.stop_id))
                abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        const char *doc = (const char *) data;

        controller(doc, size);
        deployment(doc, size);
        cancel(doc, size);
        return 0;
}
