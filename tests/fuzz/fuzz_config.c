/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the daemon's configuration (common/device/config.c over
 * common/text/yaml-doc.c). A failure must carry a message and leave the caller's
 * config as it was; a success must keep every promise config.h makes about
 * the values. Anything else aborts.
 */

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "manifest.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_path(const char *p, size_t max, bool file) {
        size_t n;

        if (!p || p[0] != '/')
                abort();
        n = strlen(p);
        if (n >= max || strstr(p, "/../") || (n >= 3 && strcmp(p + n - 3, "/..") == 0) || (file && p[n - 1] == '/'))
                abort();
        for (size_t i = 0; i < n; i++)
                if ((unsigned char) p[i] < 0x20 || p[i] == 0x7f)
                        abort();
}

static void check(const DaemonConfig *c) {
        check_path(c->state_dir, PATH_MAX, false);
        check_path(c->socket, 108, true);
        check_path(c->model_path, PATH_MAX, true);
        check_path(c->trust.ca, PATH_MAX, false);
        if (c->admin_group) {
                size_t n = strlen(c->admin_group);
                if (n == 0 || n > 255)
                        abort();
                for (size_t i = 0; i < n; i++) {
                        unsigned char ch = (unsigned char) c->admin_group[i];
                        if (ch <= ' ' || ch == 0x7f || ch == ':' || ch == '/')
                                abort();
                }
        }
        if (c->trial.health_command && !c->trial.health_command[0])
                abort();
        if (c->trial.health_url && strncmp(c->trial.health_url, "http://", 7) != 0 &&
            strncmp(c->trial.health_url, "https://", 8) != 0)
                abort();
        if (c->trial.timeout < 1 || c->trial.timeout > 604800 || c->trial.health_interval < 1 ||
            c->trial.health_interval > 3600 || c->keep_versions < 1 || c->keep_versions > 1000 ||
            c->scrub_interval > 8760 || !verify_mode_to_string(c->verify))
                abort();
        /* Models: at least one, each named, with its own state directory and model_path. */
        if (c->n_models < 1 || c->n_models > CONFIG_MAX_MODELS)
                abort();
        for (size_t i = 0; i < c->n_models; i++) {
                const ModelConfig *m = &c->models[i];
                if (!m->name || !task_name_valid(m->name) || !m->state_dir || config_find_model(c, m->name) != m)
                        abort();
                check_path(m->model_path, PATH_MAX, true);
                if (m->trial.timeout < 1 || m->trial.timeout > 604800)
                        abort();
        }
}

/* Field by field: a failed parse must not have touched a single pointer or value. */
static bool unchanged(const DaemonConfig *a, const DaemonConfig *b) {
        return a->state_dir == b->state_dir && a->socket == b->socket && a->admin_group == b->admin_group &&
               a->model_path == b->model_path && a->trust.ca == b->trust.ca && a->trial.timeout == b->trial.timeout &&
               a->trial.health_command == b->trial.health_command && a->trial.health_url == b->trial.health_url &&
               a->trial.health_interval == b->trial.health_interval && a->keep_versions == b->keep_versions &&
               a->verify == b->verify && a->scrub_interval == b->scrub_interval;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        DaemonConfig c = {}, before;
        TpError err = {};
        int r;

        /* Parse over a config that already holds values, as a reload would. */
        if (config_init(&c) < 0)
                abort();
        before = c;
        r = config_parse((const char *) data, size, "fuzz.yaml", &c, &err);
        if (r < 0) {
                if (!err.message[0] || err.code != r || !unchanged(&c, &before))
                        abort();
        } else {
                if (r != 0)
                        abort();
                check(&c);
        }
        config_done(&c);
        return 0;
}
