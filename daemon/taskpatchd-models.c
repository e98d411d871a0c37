/* SPDX-License-Identifier: MIT */
/* The models of a device, one manager each, and the routing of requests to them. */

#include <fcntl.h>
#include <string.h>

#include "fileio.h"
#include "manifest.h"
#include "taskpatchd-log.h"
#include "taskpatchd-models.h"
#include "taskpatchd-requests.h"

/* A model other than "default" keeps its state in state_dir/models/NAME: make its parents. */
static int make_model_dirs(const DaemonConfig *config, const DaemonConfig *view, TpError *err) {
        _cleanup_free_ char *models = NULL;
        int r;

        if (strcmp(view->state_dir, config->state_dir) == 0)
                return 0;
        if (asprintf(&models, "%s/models", config->state_dir) < 0)
                return -ENOMEM;
        const char *dirs[] = { config->state_dir, models };
        for (size_t i = 0; i < ELEMENTSOF(dirs); i++)
                if ((r = mkdir_durable(dirs[i], 0750)) < 0)
                        return tp_error(err, r, "%s: %s", dirs[i], strerror(-r));
        return 0;
}

int models_new(sd_event *e, const DaemonConfig *config, Models **ret, TpError *err) {
        _cleanup_(models_freep) Models *s = calloc(1, sizeof(*s));
        int r;

        if (!s)
                return -ENOMEM;
        s->config = config;
        if ((r = trust_store_load(&s->trust, config, err)) < 0)
                return r;
        if (err->message[0]) {
                log_error("%s: not used (a newer list replaces it)", err->message);
                *err = (TpError) {};
        }
        if (config->trust.decrypt_key && !trust_store_decrypt_key(&s->trust, config, err)) {
                log_warning("%s: encrypted bundles are refused until it loads", err->message);
                *err = (TpError) {};
        }
        for (size_t i = 0; i < config->n_models; i++) {
                s->views[i] = config_model_view(config, i);
                if ((r = make_model_dirs(config, &s->views[i], err)) < 0 ||
                    (r = manager_new(e, &s->views[i], &s->trust, &s->managers[i], err)) < 0)
                        return config->n_models > 1 ? tp_error_prefix(err, r, "model %s", config->models[i].name) : r;
                s->n++;
        }
        for (size_t i = 0; i < s->n; i++) {
                s->managers[i]->peers = s->managers;
                s->managers[i]->n_peers = s->n;
        }
        *ret = TAKE_PTR(s);
        return 0;
}

Models *models_free(Models *s) {
        if (!s)
                return NULL;
        s->fetcher = fetcher_free(s->fetcher);  /* before the managers, whose hosts they hold */
        s->hawkbit = hawkbit_free(s->hawkbit);
        s->spool = spool_free(s->spool);
        for (size_t i = 0; i < s->n; i++)
                manager_free(s->managers[i]);
        trust_store_done(&s->trust);
        free(s);
        return NULL;
}

int models_add_sources(Models *s, CurlGlue *glue, TpError *err) {
        SourceTarget targets[CONFIG_MAX_MODELS];
        int r;

        for (size_t i = 0; i < s->n; i++)
                targets[i] = (SourceTarget) { .config = &s->views[i], .host = &s->managers[i]->host };
        /* Each manager tells its sources in this order (the order the daemon always had). */
        if ((r = fetcher_new(s->managers[0]->event, targets, s->n, glue, &s->fetcher, err)) < 0)
                return r;
        for (size_t i = 0; s->fetcher && i < s->n; i++) {
                s->managers[i]->fetch = fetcher_model(s->fetcher, i);
                if ((r = manager_register_source(s->managers[i], &fetcher_source, s->managers[i]->fetch)) < 0)
                        return tp_error(err, r, "cannot register the channel's fetcher: %s", strerror(-r));
        }
        if ((r = spool_new(s->managers[0]->event, targets, s->n, &s->spool, err)) < 0)
                return r;
        for (size_t i = 0; s->spool && i < s->n; i++)
                if ((r = manager_register_source(s->managers[i], &spool_source, s->spool)) < 0)
                        return tp_error(err, r, "cannot register the spool: %s", strerror(-r));
        if ((r = hawkbit_new(s->managers[0]->event, targets, s->n, glue, &s->hawkbit, err)) < 0)
                return r;
        for (size_t i = 0; s->hawkbit && i < s->n; i++) {
                s->managers[i]->hawkbit = s->hawkbit;
                if ((r = manager_register_source(s->managers[i], &hawkbit_source, s->hawkbit)) < 0)
                        return tp_error(err, r, "cannot register the hawkBit client: %s", strerror(-r));
        }
        return 0;
}

Manager *models_find(Models *s, const char *name) {
        for (size_t i = 0; i < s->n; i++)
                if (strcmp(s->managers[i]->model, name) == 0)
                        return s->managers[i];
        return NULL;
}

void models_set_server(Models *s, Server *server) {
        for (size_t i = 0; i < s->n; i++)
                manager_set_server(s->managers[i], server);
}

/* "llm, detector": the models' names, for messages. */
static void model_names(const Models *s, char *buf, size_t size) {
        size_t o = 0;

        buf[0] = '\0';
        for (size_t i = 0; i < s->n && o < size; i++)
                o += (size_t) snprintf(buf + o, size - o, "%s%s", i ? ", " : "", s->managers[i]->model);
}

/*
 * The model an install is for, read from the bundle @fd holds (its signed manifest names it):
 * the manager, or NULL with the refusal sent to @c. @fd stays open and is not moved.
 */
static Manager *bundle_model(Models *s, Client *c, int fd) {
        _cleanup_(bundle_freep) Bundle *b = NULL;
        TpError err = {};
        time_t now;
        /* Only to read the manifest: the manager's own open refuses a clock it does not trust, saying why. */
        if (manager_dates_now(s->managers[0], &now, &err) < 0)
                now = SIGNATURE_CLOCK_UNKNOWN;
        err = (TpError) {};
        BundleTrust trust = manager_bundle_trust(s->managers[0], now);
        char names[1024];
        int dup, r;

        /* A descriptor of its own: bundle_open_verified_fd() takes it; reads are positioned. */
        if ((dup = fcntl(fd, F_DUPFD_CLOEXEC, 3)) < 0) {
                client_reply_error(c, "io", "install: %s", strerror(errno));
                return NULL;
        }
        if ((r = bundle_open_verified_fd(dup, "the bundle", &trust, &b, &err)) < 0) {
                client_reply_error(c, r == -ENOMEM || r == -EIO ? "io" : "refused", "%s", tp_error_message(&err, r));
                return NULL;
        }
        Manager *m = models_find(s, b->manifest->model);
        if (!m) {
                model_names(s, names, sizeof(names));
                client_reply_error(c, "refused", "the bundle: made for model '%s'; this device's models are %s",
                                   b->manifest->model, names);
        }
        return m;
}

/* A request without "model" on a device of several: what it can mean, answered for all of them. */
static void handle_unnamed(Models *s, Client *c, const Command *cmd) {
        char names[1024];

        if (strcmp(cmd->name, "status") == 0 || strcmp(cmd->name, "list") == 0) {
                json_t *models = json_object();
                for (size_t i = 0; i < s->n; i++)
                        json_object_set_new(models, s->managers[i]->model,
                                            strcmp(cmd->name, "status") == 0 ? manager_status(s->managers[i])
                                                                             : manager_list(s->managers[i]));
                client_reply(c, json_pack("{s:o, s:s}", "models", models, "version", TASKPATCH_VERSION));
        } else if (strcmp(cmd->name, "subscribe") == 0) {
                client_subscribe(c);
                client_reply(c, NULL);
                for (size_t i = 0; i < s->n; i++)
                        manager_send_snapshot(s->managers[i], c);
        } else {
                model_names(s, names, sizeof(names));
                client_reply_error(c, "usage", "%s: this device has %zu models (%s): name one (tpctl --model NAME)",
                                   cmd->name, s->n, names);
        }
}

void models_handle_request(void *userdata, Client *c, json_t *req, int fd) {
        Models *s = userdata;
        const char *name = json_string_value(json_object_get(req, "model"));
        const Command *cmd;
        TpError err = {};
        char names[1024];

        if (request_check(req, &cmd, &err) < 0) {
                safe_close(fd);
                client_reply_error(c, "usage", "%s", err.message);
                return;
        }
        if (strcmp(cmd->name, "trust-update") == 0) {
                if (!client_is_admin(c)) {
                        safe_close(fd);
                        client_reply_error(c, "permission", "trust-update changes what the device trusts: only root "
                                           "and members of '%s' may do that", s->config->admin_group ?
                                           s->config->admin_group : "(no admin group)");
                        return;
                }
                models_trust_update(s, c, fd);
                return;
        }
        if (name && !task_name_valid(name)) {
                /* Not echoed: it may be anything, and the reply must stay valid UTF-8. */
                safe_close(fd);
                client_reply_error(c, "usage", "%s: 'model' is no model name ([a-z0-9][a-z0-9._-]{0,63})", cmd->name);
                return;
        }
        if (name) {
                Manager *m = models_find(s, name);
                if (!m) {
                        safe_close(fd);
                        model_names(s, names, sizeof(names));
                        client_reply_error(c, "not-found", "%s: no model '%s' on this device (%s)", cmd->name, name,
                                           names);
                        return;
                }
                manager_handle_request(m, c, req, fd);
        } else if (s->n == 1)
                manager_handle_request(s->managers[0], c, req, fd);
        else if (strcmp(cmd->name, "install") == 0 && fd >= 0) {
                /* A bundle names its model: it goes to that one (the manager checks it all again).
                 * A reader gets its permission error first: it may not make the daemon verify. */
                Manager *m = client_is_admin(c) ? bundle_model(s, c, fd) : s->managers[0];
                if (m)
                        manager_handle_request(m, c, req, fd);
                else
                        safe_close(fd);
        } else {
                safe_close(fd);
                handle_unnamed(s, c, cmd);
        }
}
