/* SPDX-License-Identifier: MIT */
/* taskpatchd: the on-device update daemon. Arguments, configuration, event loop, run. */

#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>
#include <systemd/sd-event.h>

#include "config.h"
#include "dispatch.h"
#include "encryption.h"
#include "taskpatchd-curl.h"
#include "taskpatchd-log.h"
#include "taskpatchd-manager.h"
#include "taskpatchd-models.h"
#include "taskpatchd-server.h"

static void help(void) {
        printf("Usage: taskpatchd [--config FILE] [--check-config]\n"
               "\n"
               "The TaskPatch on-device update daemon: keeps two model slots, stages\n"
               "signed task bundles into the inactive one, switches model_path to it\n"
               "atomically, and rolls back a task that is not confirmed in time.\n"
               "Controlled with tpctl(1) over a Unix socket.\n"
               "\n"
               "  -c, --config FILE   configuration (default %s)\n"
               "      --check-config  parse the configuration, print the result, exit\n"
               "  -h, --help          this text\n"
               "      --version       the version\n"
               "\n"
               "Environment: TASKPATCHD_LOG_LEVEL=debug|info|notice|warning|err, TASKPATCH_KERNEL.\n"
               "See taskpatchd(8), taskpatchd.yaml(5), tpctl(1).\n",
               CONFIG_DEFAULT_PATH);
}

static int on_hangup(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata) {
        (void) s;
        (void) si;
        (void) userdata;
        log_notice("SIGHUP: the configuration is read only at start; restart taskpatchd to apply changes");
        return 0;
}

static int on_stop(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata) {
        (void) userdata;
        log_info("received %s: stopping", strsignal((int) si->ssi_signo));
        (void) sd_notify(false, "STOPPING=1");
        return sd_event_exit(sd_event_source_get_event(s), 0);
}

/*
 * trust.decrypt_key opens every bundle of the fleet (or of this device): one that does not load
 * is a configuration error, one that others can read is said loudly. A missing one is only
 * named (config_check_files()): it may be provisioned after the daemon starts.
 */
static int check_decrypt_key(const DaemonConfig *c, char *warning, size_t size) {
        _cleanup_(decrypt_key_freep) DecryptKey *k = NULL;
        TpError err = {};
        struct stat st;
        int r;

        if (!c->trust.decrypt_key || stat(c->trust.decrypt_key, &st) < 0)
                return 0;
        if ((r = decrypt_key_load(c->trust.decrypt_key, &k, &err)) < 0) {
                log_error("trust.decrypt_key: %s", tp_error_message(&err, r));
                return r;
        }
        if (st.st_mode & 0077) {
                log_warning("trust.decrypt_key %s is open to group or others (mode %04o): whoever reads it decrypts "
                            "the bundles sent to it; make it 0600, owned by the daemon's user", c->trust.decrypt_key,
                            (unsigned) (st.st_mode & 07777));
                snprintf(warning, size, "; warning: trust.decrypt_key is mode %04o", (unsigned) (st.st_mode & 07777));
        }
        return 0;
}

int main(int argc, char *argv[]) {
        static const struct option options[] = {
                { "config", required_argument, NULL, 'c' },
                { "check-config", no_argument, NULL, 'C' },
                { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, 'V' },
                {},
        };
        const char *config_path = CONFIG_DEFAULT_PATH;
        bool check_only = false;
        DaemonConfig config = { 0 };
        sd_event *e = NULL;
        Models *models = NULL;
        Server *server = NULL;
        CurlGlue *glue = NULL;
        TpError err = {};
        sigset_t mask;
        int c, r;

        while ((c = getopt_long(argc, argv, "c:h", options, NULL)) >= 0)
                switch (c) {
                case 'c':
                        config_path = optarg;
                        break;
                case 'C':
                        check_only = true;
                        break;
                case 'h':
                        help();
                        return 0;
                case 'V':
                        printf("taskpatchd %s\n", TASKPATCH_VERSION);
                        return 0;
                default:
                        fprintf(stderr, "Try 'taskpatchd --help'.\n");
                        return 2;
                }
        if (optind < argc) {
                fprintf(stderr, "taskpatchd: unexpected argument '%s'\n", argv[optind]);
                return 2;
        }
        log_setup();
        r = kernels_init();
        if (r < 0) {
                log_error("TASKPATCH_KERNEL=%s: %s", getenv("TASKPATCH_KERNEL"),
                          r == -ENOENT ? "names no kernel" : "this CPU cannot run it");
                return 1;
        }
        if ((r = config_init(&config)) < 0 || (r = config_load(config_path, &config, &err)) < 0) {
                log_error("%s", tp_error_message(&err, r));
                config_done(&config);
                return 1;
        }
        const char *trust_missing = NULL;
        if ((r = config_check_files(&config, &trust_missing, &err)) < 0) {
                log_error("%s: %s", config_path, tp_error_message(&err, r));
                config_done(&config);
                return 1;
        }
        /* The first model's settings (the top level's without models:): what --check prints of one model. */
        DaemonConfig view = config_model_view(&config, 0);
        if (trust_missing)
                log_warning("%s: %s does not exist: the bundles or channels it verifies are refused until it does",
                            config_path, trust_missing);
        char warning[64] = "";
        if (check_decrypt_key(&config, warning, sizeof(warning)) < 0) {
                config_done(&config);
                return 1;
        }
        if (trust_missing)
                snprintf(warning, sizeof(warning), "; warning: %s does not exist", trust_missing);
        if (check_only && config.n_models == 1)
                printf("%s: OK (state_dir %s, socket %s, model_path %s, verify %s, model %s)%s\n", config_path,
                       view.state_dir, view.socket, view.model_path, verify_mode_to_string(view.verify), view.model,
                       warning);
        else if (check_only) {
                printf("%s: OK (state_dir %s, socket %s, verify %s, %zu models:", config_path, config.state_dir,
                       config.socket, verify_mode_to_string(config.verify), config.n_models);
                for (size_t i = 0; i < config.n_models; i++)
                        printf("%s %s model_path %s", i ? "," : "", config.models[i].name, config.models[i].model_path);
                printf(")%s\n", warning);
        }
        if (check_only) {
                config_done(&config);
                return 0;
        }

        /* sd-event wants the signals it handles blocked; SIGPIPE never kills us (clients go away). */
        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGCHLD);
        sigaddset(&mask, SIGHUP);
        sigprocmask(SIG_BLOCK, &mask, NULL);
        signal(SIGPIPE, SIG_IGN);

        r = sd_event_default(&e);
        if (r < 0) {
                log_error("sd_event_default: %s", strerror(-r));
                goto out;
        }
        (void) sd_event_add_signal(e, NULL, SIGTERM, on_stop, NULL);
        (void) sd_event_add_signal(e, NULL, SIGINT, on_stop, NULL);
        (void) sd_event_add_signal(e, NULL, SIGHUP, on_hangup, NULL);
        (void) sd_event_set_watchdog(e, true);  /* WATCHDOG=1 when WATCHDOG_USEC is set */

        r = models_new(e, &config, &models, &err);
        if (r < 0) {
                log_error("%s", tp_error_message(&err, r));
                goto out;
        }
        r = server_new(e, config.socket, config.admin_group, models_handle_request, models, &server, &err);
        if (r < 0) {
                log_error("%s", tp_error_message(&err, r));
                goto out;
        }
        models_set_server(models, server);
        /*
         * One libcurl multi handle for every update source's transfers. The channel serves every
         * model, the spool and hawkBit the first; each model tells its own services.
         */
        r = curl_glue_new(e, &glue);
        if (r < 0)
                (void) tp_error(&err, r, "cannot set up libcurl: %s", strerror(-r));
        if (r >= 0)
                r = models_add_sources(models, glue, &err);
        for (size_t i = 0; r >= 0 && i < models->n; i++)
                r = notifier_new(e, &models->views[i], &models->managers[i]->notifier, &err);
        if (r < 0) {
                log_error("%s", tp_error_message(&err, r));
                goto out;
        }
        for (size_t i = 0; i < models->n; i++)
                log_info("taskpatchd %s ready (model %s, state %s, kernel %s)", TASKPATCH_VERSION,
                         models->views[i].model, models->views[i].state_dir, kernel_active(KERNEL_SHA256));
        (void) sd_notify(false, "READY=1");
        manager_send_status(models->managers[0]);
        r = sd_event_loop(e);
        if (r < 0)
                log_error("event loop: %s", strerror(-r));
out:
        server_free(server);
        models_free(models);    /* the sources first: their transfers leave the glue */
        curl_glue_free(glue);
        sd_event_unref(e);
        config_done(&config);
        return r < 0 ? 1 : 0;
}
