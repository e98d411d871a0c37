/* SPDX-License-Identifier: MIT */
/* The spool folder (taskpatchd-spool.h): bundles dropped into a folder are installed. */

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bundle.h"
#include "fileio.h"
#include "taskpatchd-log.h"
#include "taskpatchd-spool.h"

struct Spool {
        SourceTarget targets[CONFIG_MAX_MODELS];        /* the models it serves */
        size_t n_targets;
        const SourceHost *host;         /* the host of the bundle being installed */
        const char *dir;
        sd_event_source *watch;         /* inotify on the folder */
        sd_event_source *defer;         /* spool_next() once the current callback has returned */
        char current[NAME_MAX + 1];     /* the bundle being installed, "" when none */
        char transaction[TRANSACTION_ID_SIZE];
        /* The bundles that are whole: there at start, or closed after writing or renamed in since
         * (inotify). One still being copied in is not among them, so it is not taken half-written. */
        char **ready;
        size_t n_ready;
};

/* Far more than a folder holds between two installs; past it a bundle waits for the next start. */
#define SPOOL_READY_MAX 4096

static ssize_t ready_find(const Spool *s, const char *name) {
        for (size_t i = 0; i < s->n_ready; i++)
                if (strcmp(s->ready[i], name) == 0)
                        return (ssize_t) i;
        return -1;
}

static void ready_add(Spool *s, const char *name) {
        if (ready_find(s, name) >= 0)
                return;
        char **x = s->n_ready < SPOOL_READY_MAX ? reallocarray(s->ready, s->n_ready + 1, sizeof(char *)) : NULL;
        char *copy = x ? strdup(name) : NULL;
        if (x)
                s->ready = x;
        if (!copy) {
                log_warning("spool: %s: more than %d bundles wait (or no memory): it is taken at the next start", name,
                            SPOOL_READY_MAX);
                return;
        }
        s->ready[s->n_ready++] = copy;
}

static void ready_remove(Spool *s, const char *name) {
        ssize_t i = ready_find(s, name);
        if (i < 0)
                return;
        free(s->ready[i]);
        s->ready[i] = s->ready[--s->n_ready];
}

static void kick(Spool *s) {
        (void) sd_event_source_set_enabled(s->defer, SD_EVENT_ONESHOT);
}

static bool is_bundle_name(const char *name) {
        size_t n = strlen(name);
        return name[0] != '.' && n > 4 && strcmp(name + n - 4, ".tpb") == 0;
}

/* Move @name into @sub/ of the spool (created if needed), replacing an older file of that name. */
static int move_to(Spool *s, const char *name, const char *sub) {
        _cleanup_free_ char *dir = NULL, *from = NULL, *to = NULL;
        int r;

        if (asprintf(&dir, "%s/%s", s->dir, sub) < 0 || asprintf(&from, "%s/%s", s->dir, name) < 0 ||
            asprintf(&to, "%s/%s", dir, name) < 0)
                return -ENOMEM;
        if ((r = mkdir_durable(dir, 0700)) < 0)
                return r;
        if (rename(from, to) < 0)
                return -errno;
        return fsync_parent_dir(from);
}

static void finish(Spool *s, const char *name, bool ok, const char *why) {
        int r;

        if (ok) {
                log_info("spool: %s installed, moved to installed/", name);
                r = move_to(s, name, "installed");
        } else {
                _cleanup_free_ char *reason = NULL;
                log_warning("spool: %s refused: %s", name, why);
                r = move_to(s, name, "rejected");
                if (r >= 0 && asprintf(&reason, "%s/rejected/%s.reason", s->dir, name) >= 0) {
                        char text[TP_ERROR_MAX + 2];
                        int n = snprintf(text, sizeof(text), "%s\n", why);
                        if (atomic_file_write(reason, text, (size_t) n) < 0)
                                log_warning("spool: cannot write %s", reason);
                }
        }
        if (r < 0)
                log_error("spool: cannot move %s aside: %s (it stays where it is and is not retried)", name,
                          strerror(-r));
        ready_remove(s, name);
        s->current[0] = '\0';
        s->transaction[0] = '\0';
}

/*
 * The host of the model the bundle @fd names (its manifest, read but not verified here: the
 * model's manager verifies everything, that name included); NULL and @err when it names none
 * of this device's. With one model, that model's, whatever the bundle says (its manager says
 * what is wrong).
 */
static const SourceHost *bundle_host(Spool *s, int fd, TpError *err) {
        _cleanup_(bundle_freep) Bundle *b = NULL;
        char names[CONFIG_MAX_MODELS * (TASK_NAME_MAX + 2)];
        int dup, r;

        if (s->n_targets == 1)
                return s->targets[0].host;
        if ((dup = fcntl(fd, F_DUPFD_CLOEXEC, 3)) < 0) {
                (void) tp_error(err, -errno, "%s", strerror(errno));
                return NULL;
        }
        if ((r = bundle_open_fd(dup, "the bundle", &b, err)) < 0)
                return NULL;
        size_t i = source_target_find(s->targets, s->n_targets, b->manifest->model);
        if (i < s->n_targets)
                return s->targets[i].host;
        source_target_names(s->targets, s->n_targets, names, sizeof(names));
        (void) tp_error(err, -ENOENT, "made for model '%s'; this device's models are %s", b->manifest->model, names);
        return NULL;
}

/*
 * Install @name: 1 when an install was started, 0 when its model cannot start one now (it
 * waits), < 0 when it was refused at once (and moved aside).
 */
static int start_install(Spool *s, const char *name) {
        _cleanup_free_ char *path = NULL;
        InstallRequest req = { .origin = ORIGIN_SPOOL };
        char transaction[TRANSACTION_ID_SIZE];
        const SourceHost *host = NULL;
        TpError err = {};
        int fd, r;

        if (asprintf(&path, "%s/%s", s->dir, name) < 0)
                return -ENOMEM;
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW | O_NONBLOCK);
        if (fd < 0) {
                r = tp_error(&err, -errno, "%s: %s", path, strerror(errno));
        } else {
                struct stat st;
                if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
                        safe_close(fd);
                        r = tp_error(&err, -EINVAL, "%s: not a regular file", path);
                } else if (!(host = bundle_host(s, fd, &err))) {
                        safe_close(fd);
                        r = err.code < 0 ? err.code : -EINVAL;
                } else if (!host->can_start(host)) {
                        safe_close(fd);
                        return 0;       /* its model is busy: the host says when it is idle */
                } else {
                        snprintf(s->current, sizeof(s->current), "%s", name);
                        s->host = host;
                        r = host->submit_install(host, fd, &req, transaction, &err);
                }
        }
        if (r < 0) {
                snprintf(s->current, sizeof(s->current), "%s", name);
                finish(s, name, false, tp_error_message(&err, r));
                return r;
        }
        log_info("spool: installing %s", name);
        memcpy(s->transaction, transaction, sizeof(transaction));
        return 1;
}

/* Whether any model could start an install now. */
static bool any_can_start(const Spool *s) {
        for (size_t i = 0; i < s->n_targets; i++)
                if (s->targets[i].host->can_start(s->targets[i].host))
                        return true;
        return false;
}

/* The next bundle in the folder (oldest name first, for a predictable order), when the host can start one. */
static void spool_next(Spool *s) {
        _cleanup_free_ char *pick = NULL;
        struct dirent *de;
        DIR *d;

        if (s->current[0] || !any_can_start(s))
                return;
        d = opendir(s->dir);
        if (!d) {
                log_warning("spool: %s: %s", s->dir, strerror(errno));
                return;
        }
        while ((de = readdir(d)))
                if (is_bundle_name(de->d_name) && ready_find(s, de->d_name) >= 0 &&
                    (!pick || strcmp(de->d_name, pick) < 0)) {
                        free(pick);
                        pick = strdup(de->d_name);
                }
        closedir(d);
        if (pick && start_install(s, pick) < 0)
                kick(s);        /* refused at once: look at the next one */
}

static int on_defer(sd_event_source *src _unused_, void *userdata) {
        spool_next(userdata);
        return 0;
}

static int on_inotify(sd_event_source *src _unused_, const struct inotify_event *ev, void *userdata) {
        Spool *s = userdata;

        if (ev->len > 0 && is_bundle_name(ev->name)) {
                ready_add(s, ev->name);
                kick(s);
        }
        return 0;
}

static void on_operation_done(void *userdata, const OperationOutcome *o) {
        Spool *s = userdata;

        if (s->transaction[0] && strcmp(o->transaction, s->transaction) == 0) {
                char name[NAME_MAX + 1];
                snprintf(name, sizeof(name), "%s", s->current);
                finish(s, name, o->r >= 0, o->error);
        }
        kick(s);
}

static void on_idle(void *userdata) {
        kick(userdata);
}

const UpdateSource spool_source = {
        .name = "spool",
        .operation_done = on_operation_done,
        .idle = on_idle,
};

int spool_new(sd_event *e, const SourceTarget *targets, size_t n, Spool **ret, TpError *err) {
        const DaemonConfig *c = targets[0].config;
        Spool *s;
        int r;

        *ret = NULL;
        if (!c->spool)
                return 0;
        if (n == 0 || n > CONFIG_MAX_MODELS)
                return tp_error(err, -EINVAL, "spool: %zu models", n);
        if ((r = mkdir_durable(c->spool, 0700)) < 0)
                return tp_error(err, r, "spool: %s: %s", c->spool, strerror(-r));
        s = calloc(1, sizeof(Spool));
        if (!s)
                return -ENOMEM;
        memcpy(s->targets, targets, n * sizeof(SourceTarget));
        s->n_targets = n;
        s->dir = c->spool;
        if ((r = sd_event_add_inotify(e, &s->watch, s->dir, IN_CLOSE_WRITE | IN_MOVED_TO | IN_ONLYDIR, on_inotify,
                                      s)) < 0 ||
            (r = sd_event_add_defer(e, &s->defer, on_defer, s)) < 0) {
                spool_free(s);
                return tp_error(err, r, "spool: cannot watch %s: %s", c->spool, strerror(-r));
        }
        (void) sd_event_source_set_description(s->watch, "spool");
        (void) sd_event_source_set_description(s->defer, "spool-next");
        log_info("watching the spool folder %s for bundles", s->dir);
        /* What arrived while the daemon was down (watched from now on: nothing arrives unseen). */
        DIR *d = opendir(s->dir);
        for (struct dirent *de; d && (de = readdir(d));)
                if (is_bundle_name(de->d_name))
                        ready_add(s, de->d_name);
        if (d)
                closedir(d);
        *ret = s;
        kick(s);
        return 0;
}

Spool *spool_free(Spool *s) {
        if (!s)
                return NULL;
        sd_event_source_disable_unref(s->watch);
        sd_event_source_disable_unref(s->defer);
        for (size_t i = 0; i < s->n_ready; i++)
                free(s->ready[i]);
        free(s->ready);
        free(s);
        return NULL;
}
