/* SPDX-License-Identifier: MIT */
/* The models of a device, one manager each, and the routing of requests to them. */

#include <string.h>

#include "fileio.h"
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
        for (size_t i = 0; i < config->n_models; i++) {
                s->views[i] = config_model_view(config, i);
                if ((r = make_model_dirs(config, &s->views[i], err)) < 0 ||
                    (r = manager_new(e, &s->views[i], &s->managers[i], err)) < 0)
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
        for (size_t i = 0; i < s->n; i++)
                manager_free(s->managers[i]);
        free(s);
        return NULL;
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

/* A request without "model" on a device of several: what it can mean, answered for all of them. */
static void handle_unnamed(Models *s, Client *c, const Command *cmd) {
        char names[1024];

        if (strcmp(cmd->name, "status") == 0 || strcmp(cmd->name, "list") == 0) {
                json_t *models = json_object();
                for (size_t i = 0; i < s->n; i++)
                        json_object_set_new(models, s->managers[i]->model,
                                            cmd->name[0] == 's' ? manager_status(s->managers[i])
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
        if (name) {
                Manager *m = models_find(s, name);
                if (!m) {
                        safe_close(fd);
                        model_names(s, names, sizeof(names));
                        client_reply_error(c, "not-found", "%s: no model '%.64s' on this device (%s)", cmd->name, name,
                                           names);
                        return;
                }
                manager_handle_request(m, c, req, fd);
        } else if (s->n == 1)
                manager_handle_request(s->managers[0], c, req, fd);
        else {
                safe_close(fd);
                handle_unnamed(s, c, cmd);
        }
}
