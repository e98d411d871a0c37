/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The models of a device (taskpatchd.yaml's models:), one Manager each, behind one socket.
 * A request names its model ("model"); on a device of one model it need not. Without one,
 * on a device of several, status and list answer for every model, subscribe sends each
 * model's snapshot (events name their model), and a command that changes state is a usage
 * error that lists the models. Operations run one at a time across models
 * (manager_peer_busy()).
 */

#include <jansson.h>
#include <systemd/sd-event.h>

#include "config.h"
#include "taskpatchd-manager.h"
#include "taskpatchd-server.h"

typedef struct Models {
        DaemonConfig views[CONFIG_MAX_MODELS];  /* each model's view of the configuration (borrowed from it) */
        Manager *managers[CONFIG_MAX_MODELS];
        size_t n;
        Fetcher *fetcher;                       /* the channel's, for every model; NULL when none */
        Hawkbit *hawkbit;                       /* the hawkBit client, for every model; NULL when none */
        Spool *spool;                           /* the spool folder's watcher, for every model; NULL when none */
        TrustStore trust;                       /* the revocation list, for every model */
        const DaemonConfig *config;             /* the whole configuration (borrowed) */
} Models;

/*
 * A manager for each model of @config (which must outlive the result), their state
 * directories made first (state_dir/models/NAME for a model other than "default").
 */
_warn_unused_result_ int models_new(sd_event *e, const DaemonConfig *config, Models **ret, TpError *err);
Models *models_free(Models *s);
DEFINE_POINTER_CLEANUP(Models, models_free)

/*
 * The update sources, for every model, their transfers on @glue (borrowed: it must outlive
 * @s): the channel's fetcher (one poll), the spool folder and the hawkBit client.
 */
_warn_unused_result_ int models_add_sources(Models *s, CurlGlue *glue, TpError *err);

/* The model named @name, or NULL. */
Manager *models_find(Models *s, const char *name);
/* The "trust-update" request (taskpatchd-revoke.c): a revocation list passed as @fd (taken). */
void models_trust_update(Models *s, Client *c, int fd);
/* The socket server's request handler (RequestHandler): routes each request to its model. */
void models_handle_request(void *userdata, Client *c, json_t *req, int fd);
void models_set_server(Models *s, Server *server);
