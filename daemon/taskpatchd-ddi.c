/* SPDX-License-Identifier: MIT */
/* hawkBit DDI documents, parsed and built (taskpatchd-ddi.h). */

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "jsonline.h"
#include "manifest.h"
#include "parse.h"
#include "taskpatchd-ddi.h"

#define WHERE_MAX 100                   /* "artifact '<64 bytes>': ", "deployment.chunks[N].artifacts[N]." */

static const char *const handling_names[_DDI_HANDLING_MAX] = {
        [DDI_HANDLING_SKIP] = "skip",
        [DDI_HANDLING_ATTEMPT] = "attempt",
        [DDI_HANDLING_FORCED] = "forced",
};

static const char *const execution_names[_DDI_EXECUTION_MAX] = {
        [DDI_EXECUTION_CLOSED] = "closed",
        [DDI_EXECUTION_PROCEEDING] = "proceeding",
        [DDI_EXECUTION_CANCELED] = "canceled",
        [DDI_EXECUTION_SCHEDULED] = "scheduled",
        [DDI_EXECUTION_REJECTED] = "rejected",
        [DDI_EXECUTION_RESUMED] = "resumed",
        [DDI_EXECUTION_DOWNLOADED] = "downloaded",
        [DDI_EXECUTION_DOWNLOAD] = "download",
};

static const char *const finished_names[_DDI_FINISHED_MAX] = {
        [DDI_FINISHED_SUCCESS] = "success",
        [DDI_FINISHED_FAILURE] = "failure",
        [DDI_FINISHED_NONE] = "none",
};

const char *ddi_handling_to_string(DdiHandling h) {
        return h >= 0 && h < _DDI_HANDLING_MAX ? handling_names[h] : NULL;
}

DdiHandling ddi_handling_from_string(const char *s) {
        for (DdiHandling h = 0; s && h < _DDI_HANDLING_MAX; h++)
                if (strcmp(s, handling_names[h]) == 0)
                        return h;
        return _DDI_HANDLING_INVALID;
}

const char *ddi_execution_to_string(DdiExecution e) {
        return e >= 0 && e < _DDI_EXECUTION_MAX ? execution_names[e] : NULL;
}

const char *ddi_finished_to_string(DdiFinished f) {
        return f >= 0 && f < _DDI_FINISHED_MAX ? finished_names[f] : NULL;
}

/* tp_error(), with the message made valid UTF-8: names are cut at a byte count, and it goes into JSON. */
static int fail(TpError *err, int code, const char *fmt, ...) _printf_(3, 4);
static int fail(TpError *err, int code, const char *fmt, ...) {
        char buf[TP_ERROR_MAX];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(buf, sizeof(buf), fmt, ap);
        va_end(ap);
        jsonline_scrub_utf8(buf);
        return tp_error(err, code, "%s", buf);
}

static const char *type_name(const json_t *v) {
        switch (json_typeof(v)) {
        case JSON_OBJECT:
                return "an object";
        case JSON_ARRAY:
                return "an array";
        case JSON_STRING:
                return "a string";
        case JSON_INTEGER:
                return "an integer";
        case JSON_REAL:
                return "a real number";
        case JSON_TRUE:
        case JSON_FALSE:
                return "a boolean";
        case JSON_NULL:
                return "null";
        }
        return "something else";
}

/* The body as a JSON object (duplicate keys refused, as hawkBit never sends them). */
static int load(const char *data, size_t len, json_t **ret, TpError *err) {
        json_error_t je;
        json_t *j;

        if (len > DDI_BODY_MAX)
                return fail(err, -E2BIG, "%zu bytes, more than the %u a DDI document may hold", len, DDI_BODY_MAX);
        j = json_loadb(data, len, JSON_REJECT_DUPLICATES, &je);
        if (!j)
                return fail(err, -EBADMSG, "%s", je.text);
        if (!json_is_object(j)) {
                json_decref(j);
                return fail(err, -EBADMSG, "expected a JSON object, found an array");
        }
        *ret = j;
        return 0;
}

/* @o's @key (named "<where><key>" in errors): *ret = NULL when absent, -EBADMSG when not of @type. */
static int member(json_t *o, const char *key, json_type type, const char *where, json_t **ret, TpError *err) {
        json_t *v = json_object_get(o, key);
        static const char *const expected[] = {
                [JSON_OBJECT] = "an object", [JSON_ARRAY] = "an array", [JSON_STRING] = "a string",
                [JSON_INTEGER] = "an integer",
        };

        if (v && json_typeof(v) != type)
                return fail(err, -EBADMSG, "%s%s: expected %s, found %s", where, key,
                            (size_t) type < ELEMENTSOF(expected) && expected[type] ? expected[type] : "another type",
                            type_name(v));
        *ret = v;
        return 0;
}

static int missing(const char *where, const char *key, TpError *err) {
        return fail(err, -EBADMSG, "%s%s: missing", where, key);
}

/* A string member of at most @max bytes; *ret = NULL when absent. */
static int string_member(json_t *o, const char *key, const char *where, size_t max, const char **ret, TpError *err) {
        json_t *v;
        int r = member(o, key, JSON_STRING, where, &v, err);

        if (r < 0)
                return r;
        if (v && json_string_length(v) > max)
                return fail(err, -E2BIG, "%s%s: %zu bytes, more than %zu", where, key, json_string_length(v), max);
        *ret = v ? json_string_value(v) : NULL;
        return 0;
}

bool ddi_id_valid(const char *s) {
        size_t n = strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-");
        return n > 0 && n <= DDI_ID_MAX && s[n] == '\0';
}

/* A required action id: it goes into request paths and file names. */
static int id_member(json_t *o, const char *key, const char *where, char ret[static DDI_ID_MAX + 1], TpError *err) {
        const char *s;
        int r = string_member(o, key, where, DDI_ID_MAX, &s, err);

        if (r < 0)
                return r;
        if (!s)
                return missing(where, key, err);
        if (!ddi_id_valid(s))
                return fail(err, -EBADMSG, "%s%s: '%.64s' is not an action id (1 to %d of A-Z a-z 0-9 _ -)", where,
                            key, s, DDI_ID_MAX);
        memcpy(ret, s, strlen(s) + 1);
        return 0;
}

/* What http_setup() lets through: https://HOST... (or http:// when allowed), without spaces or controls. */
static int check_url(const char *url, bool allow_http, const char *where, TpError *err) {
        size_t scheme;

        for (const char *p = url; *p; p++)
                if ((unsigned char) *p <= ' ' || *p == 0x7f)
                        return fail(err, -EBADMSG, "%shref: contains a space or control character (at byte %td)",
                                    where, p - url);
        if (strncasecmp(url, "https://", 8) == 0)
                scheme = 8;
        else if (allow_http && strncasecmp(url, "http://", 7) == 0)
                scheme = 7;
        else
                return fail(err, -EBADMSG, "%shref: '%.200s' is not an https:// URL%s", where, url,
                            allow_http ? " (nor http://)" : " (http:// only with channel.allow_http)");
        if (strchr("/?#", url[scheme]))        /* the NUL too */
                return fail(err, -EBADMSG, "%shref: '%.200s' names no host", where, url);
        return 0;
}

/* @links' @name.href, checked; *ret = NULL when that link is absent. */
static int href_member(json_t *links, const char *name, const char *where, bool allow_http, const char **ret,
                       TpError *err) {
        char here[WHERE_MAX + 64];     /* + "_links." + "download-http." */
        const char *href;
        json_t *link;
        int r = member(links, name, JSON_OBJECT, where, &link, err);

        if (r < 0)
                return r;
        if (!link) {
                *ret = NULL;
                return 0;
        }
        snprintf(here, sizeof(here), "%s%s.", where, name);
        if ((r = string_member(link, "href", here, DDI_URL_MAX, &href, err)) < 0)
                return r;
        if (!href)
                return missing(here, "href", err);
        if ((r = check_url(href, allow_http, here, err)) < 0)
                return r;
        *ret = href;
        return 0;
}

/* ---- the controller base resource ---- */

void ddi_controller_done(DdiController *c) {
        if (!c)
                return;
        free(c->deployment_href);
        free(c->cancel_href);
        *c = (DdiController) {};
}

/* "H[HH]:M[M]:S[S]", digits only, as microseconds. */
static int parse_sleep(const char *s, uint64_t *ret) {
        static const size_t width[3] = { 3, 2, 2 };
        uint64_t v[3];

        for (size_t i = 0; i < 3; i++) {
                size_t n = 0;
                for (v[i] = 0; n < width[i] && s[n] >= '0' && s[n] <= '9'; n++)
                        v[i] = v[i] * 10 + (uint64_t) (s[n] - '0');
                if (n == 0 || s[n] != (i < 2 ? ':' : '\0'))
                        return -EINVAL;
                s += n + (i < 2);
        }
        if (v[0] > DDI_SLEEP_HOURS_MAX || v[1] > 59 || v[2] > 59)
                return -EINVAL;
        *ret = (v[0] * 3600 + v[1] * 60 + v[2]) * 1000000ULL;
        return 0;
}

int ddi_controller_parse(const char *data, size_t len, bool allow_http, DdiController *ret, TpError *err) {
        json_auto_t *j = NULL;
        json_t *config = NULL, *polling = NULL, *links = NULL;
        const char *sleep = NULL, *deploy = NULL, *cancel = NULL;
        DdiController c = {};
        int r;

        if ((r = load(data, len, &j, err)) < 0 || (r = member(j, "config", JSON_OBJECT, "", &config, err)) < 0 ||
            (config && (r = member(config, "polling", JSON_OBJECT, "config.", &polling, err)) < 0) ||
            (polling && (r = string_member(polling, "sleep", "config.polling.", 16, &sleep, err)) < 0))
                return r;
        if (sleep && parse_sleep(sleep, &c.sleep_usec) < 0)
                return fail(err, -EBADMSG, "config.polling.sleep: '%s' is not HH:MM:SS (hours up to %d)", sleep,
                            DDI_SLEEP_HOURS_MAX);
        if ((r = member(j, "_links", JSON_OBJECT, "", &links, err)) < 0)
                return r;
        if (links) {
                if ((r = href_member(links, "deploymentBase", "_links.", allow_http, &deploy, err)) < 0 ||
                    (r = href_member(links, "cancelAction", "_links.", allow_http, &cancel, err)) < 0)
                        return r;
                /* Only its presence counts: the attributes go to {controller}/configData. */
                c.config_data = json_object_get(links, "configData") != NULL;
        }
        if ((deploy && !(c.deployment_href = strdup(deploy))) || (cancel && !(c.cancel_href = strdup(cancel)))) {
                ddi_controller_done(&c);
                return -ENOMEM;
        }
        *ret = c;
        return 0;
}

/* ---- a deployment ---- */

static void artifacts_free(DdiDeployment *d) {
        for (size_t i = 0; i < d->n_artifacts; i++)
                free(d->artifacts[i].url);
        memset(d->artifacts, 0, sizeof(d->artifacts));
        d->n_artifacts = 0;
}

void ddi_deployment_done(DdiDeployment *d) {
        if (!d)
                return;
        artifacts_free(d);
        *d = (DdiDeployment) {};
}

static int handling_member(json_t *dep, const char *key, DdiHandling *ret, TpError *err) {
        const char *s;
        int r = string_member(dep, key, "deployment.", 32, &s, err);

        if (r < 0)
                return r;
        if (!s)
                return 0;               /* stays forced */
        if ((*ret = ddi_handling_from_string(s)) < 0)
                return fail(err, -EBADMSG, "deployment.%s: '%s' is not skip, attempt or forced", key, s);
        return 0;
}

static bool plain_name(const char *s) {
        for (; *s; s++)
                if (*s == '/' || (unsigned char) *s < ' ' || *s == 0x7f)
                        return false;
        return true;
}

/*
 * The model chunk @i's bundles are for: the value of its metadata entry DDI_MODEL_KEY (a
 * software module's metadata marked target-visible), "" when it has none.
 */
static int chunk_model(json_t *chunk, size_t i, char model[DDI_MODEL_MAX + 1], TpError *err) {
        char where[WHERE_MAX];
        json_t *meta, *e;
        size_t k;
        int r;

        model[0] = '\0';
        snprintf(where, sizeof(where), "deployment.chunks[%zu].", i);
        if ((r = member(chunk, "metadata", JSON_ARRAY, where, &meta, err)) < 0 || !meta)
                return r;
        if (json_array_size(meta) > DDI_METADATA_MAX)
                return fail(err, -E2BIG, "%smetadata: %zu entries, more than %d", where, json_array_size(meta),
                            DDI_METADATA_MAX);
        json_array_foreach(meta, k, e) {
                const char *key, *value;
                snprintf(where, sizeof(where), "deployment.chunks[%zu].metadata[%zu]", i, k);
                if (!json_is_object(e))
                        return fail(err, -EBADMSG, "%s: expected an object, found %s", where, type_name(e));
                snprintf(where, sizeof(where), "deployment.chunks[%zu].metadata[%zu].", i, k);
                if ((r = string_member(e, "key", where, SIZE_MAX, &key, err)) < 0 ||
                    (r = string_member(e, "value", where, SIZE_MAX, &value, err)) < 0)
                        return r;
                if (!key)
                        return missing(where, "key", err);
                if (strcmp(key, DDI_MODEL_KEY) != 0)
                        continue;
                if (!value || !task_name_valid(value))
                        return fail(err, -EBADMSG, "%svalue: '%.80s' is not a model name ([a-z0-9][a-z0-9._-]{0,63})",
                                    where, value ? value : "");
                if (model[0])
                        return fail(err, -EBADMSG, "%skey: a second '" DDI_MODEL_KEY "' entry", where);
                snprintf(model, DDI_MODEL_MAX + 1, "%s", value);
        }
        return 0;
}

/* One artifact of chunk @i (#@k in it): a .tpb one is checked and added, another is skipped. */
static int take_artifact(json_t *a, size_t i, size_t k, bool allow_http, DdiDeployment *d, TpError *err) {
        char where[WHERE_MAX], here[WHERE_MAX + 16];
        const char *name, *sha, *url = NULL;
        json_t *size, *hashes, *links;
        size_t len;
        int r;

        snprintf(where, sizeof(where), "deployment.chunks[%zu].artifacts[%zu]", i, k);
        if (!json_is_object(a))
                return fail(err, -EBADMSG, "%s: expected an object, found %s", where, type_name(a));
        snprintf(where, sizeof(where), "deployment.chunks[%zu].artifacts[%zu].", i, k);
        if ((r = string_member(a, "filename", where, SIZE_MAX, &name, err)) < 0)
                return r;
        if (!name)
                return missing(where, "filename", err);
        len = strlen(name);
        if (len < 5 || strcmp(name + len - 4, ".tpb") != 0)
                return 0;               /* not ours (another chunk type) */

        snprintf(where, sizeof(where), "artifact '%.64s': ", name);
        if (len > DDI_FILENAME_MAX)
                return fail(err, -E2BIG, "%sfilename: %zu bytes, more than %d", where, len, DDI_FILENAME_MAX);
        if (!plain_name(name))
                return fail(err, -EBADMSG, "%sfilename: not a plain file name (a '/' or a control character)",
                            where);
        if (d->n_artifacts == DDI_ARTIFACTS_MAX)
                return fail(err, -E2BIG, "%smore than %d .tpb artifacts in one deployment", where,
                            DDI_ARTIFACTS_MAX);
        for (size_t n = 0; n < d->n_artifacts; n++)
                if (strcmp(d->artifacts[n].filename, name) == 0)
                        return fail(err, -EBADMSG, "%slisted twice (the downloads would share a file)", where);

        DdiArtifact *art = &d->artifacts[d->n_artifacts];
        if ((r = member(a, "size", JSON_INTEGER, where, &size, err)) < 0)
                return r;
        if (!size)
                return missing(where, "size", err);
        if (json_integer_value(size) < 0)
                return fail(err, -EBADMSG, "%ssize: %" JSON_INTEGER_FORMAT " is negative", where,
                            json_integer_value(size));
        if ((r = member(a, "hashes", JSON_OBJECT, where, &hashes, err)) < 0)
                return r;
        if (!hashes)
                return missing(where, "hashes", err);
        snprintf(here, sizeof(here), "%shashes.", where);
        if ((r = string_member(hashes, "sha256", here, SIZE_MAX, &sha, err)) < 0)
                return r;
        if (!sha)
                return missing(here, "sha256", err);
        if (parse_sha256_hex(sha, art->sha256) < 0)
                return fail(err, -EBADMSG, "%ssha256: '%.80s' is not 64 lowercase hex digits", here, sha);
        if ((r = member(a, "_links", JSON_OBJECT, where, &links, err)) < 0)
                return r;
        if (!links)
                return missing(where, "_links", err);
        snprintf(here, sizeof(here), "%s_links.", where);
        if ((r = href_member(links, "download", here, allow_http, &url, err)) < 0 ||
            (!url && allow_http && (r = href_member(links, "download-http", here, allow_http, &url, err)) < 0))
                return r;
        if (!url)
                return fail(err, -EBADMSG, "%s_links: no download link%s", where,
                            allow_http ? " (download or download-http)"
                                       : " (download; download-http needs channel.allow_http)");
        if (!(art->url = strdup(url)))
                return -ENOMEM;
        memcpy(art->filename, name, len + 1);
        art->size = (uint64_t) json_integer_value(size);
        d->n_artifacts++;
        return 0;
}

/* deployment.chunks[].artifacts[] into d->artifacts. */
static int take_chunks(json_t *dep, bool allow_http, DdiDeployment *d, TpError *err) {
        json_t *chunks, *chunk, *arts, *a;
        char where[WHERE_MAX];
        size_t i, k;
        int r;

        if ((r = member(dep, "chunks", JSON_ARRAY, "deployment.", &chunks, err)) < 0)
                return r;
        if (json_array_size(chunks) > DDI_CHUNKS_MAX)
                return fail(err, -E2BIG, "deployment.chunks: %zu chunks, more than %d", json_array_size(chunks),
                            DDI_CHUNKS_MAX);
        json_array_foreach(chunks, i, chunk) {
                char model[DDI_MODEL_MAX + 1];
                size_t first = d->n_artifacts;
                if (!json_is_object(chunk))
                        return fail(err, -EBADMSG, "deployment.chunks[%zu]: expected an object, found %s", i,
                                    type_name(chunk));
                snprintf(where, sizeof(where), "deployment.chunks[%zu].", i);
                if ((r = member(chunk, "artifacts", JSON_ARRAY, where, &arts, err)) < 0)
                        return r;
                if (json_array_size(arts) > DDI_CHUNK_ARTIFACTS_MAX)
                        return fail(err, -E2BIG, "%sartifacts: %zu artifacts, more than %d", where,
                                    json_array_size(arts), DDI_CHUNK_ARTIFACTS_MAX);
                json_array_foreach(arts, k, a) {
                        if ((r = take_artifact(a, i, k, allow_http, d, err)) < 0)
                                return r;
                }
                /* Only a chunk of ours: another module's metadata is none of our business. */
                if (first < d->n_artifacts && (r = chunk_model(chunk, i, model, err)) < 0)
                        return r;
                for (size_t n = first; n < d->n_artifacts; n++)
                        memcpy(d->artifacts[n].model, model, sizeof(model));
        }
        if (d->n_artifacts == 0)
                return fail(err, -ENOENT, "the deployment holds no .tpb artifact");
        return 0;
}

int ddi_deployment_parse(const char *data, size_t len, bool allow_http, DdiDeployment *ret, TpError *err) {
        json_auto_t *j = NULL;
        json_t *dep;
        DdiDeployment d = { .download = DDI_HANDLING_FORCED, .update = DDI_HANDLING_FORCED };
        TpError e1 = {}, e2 = {};
        int r, r1, r2;

        if ((r = load(data, len, &j, err)) < 0 || (r = id_member(j, "id", "", d.id, err)) < 0 ||
            (r = member(j, "deployment", JSON_OBJECT, "", &dep, err)) < 0)
                return r;
        if (!dep)
                return missing("", "deployment", err);
        /* Both are read even when one is bad: the client follows update for an action in progress. */
        r1 = handling_member(dep, "download", &d.download, &e1);
        r2 = handling_member(dep, "update", &d.update, &e2);
        if (r1 < 0 || r2 < 0)
                d.refused = r1 < 0 ? e1 : e2;
        else if ((r = take_chunks(dep, allow_http, &d, &d.refused)) < 0) {
                artifacts_free(&d);
                if (r == -ENOMEM)
                        return r;
        }
        *ret = d;
        return 0;
}

/* ---- a cancel ---- */

int ddi_cancel_parse(const char *data, size_t len, DdiCancel *ret, TpError *err) {
        json_auto_t *j = NULL;
        json_t *ca;
        DdiCancel c = {};
        int r;

        if ((r = load(data, len, &j, err)) < 0 || (r = id_member(j, "id", "", c.id, err)) < 0 ||
            (r = member(j, "cancelAction", JSON_OBJECT, "", &ca, err)) < 0)
                return r;
        if (!ca)
                return missing("", "cancelAction", err);
        if ((r = id_member(ca, "stopId", "cancelAction.", c.stop_id, err)) < 0)
                return r;
        *ret = c;
        return 0;
}

/* ---- what the device sends ---- */

json_t *ddi_feedback_new(const char *id, DdiExecution e, DdiFinished f, const char *detail) {
        const char *execution = ddi_execution_to_string(e), *finished = ddi_finished_to_string(f);
        json_t *details;

        if (!id || !execution || !finished || !(details = json_array()))
                return NULL;
        if (detail && detail[0])
                (void) json_array_append_new(details, json_string(detail));
        return json_pack("{s:s, s:{s:s, s:{s:s}, s:o}}", "id", id, "status", "execution", execution, "result",
                         "finished", finished, "details", details);
}

json_t *ddi_config_data_new(json_t *data) {
        return json_pack("{s:s, s:o}", "mode", "merge", "data", data);
}
