/* SPDX-License-Identifier: MIT */

#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "config.h"
#include "config-values.h"
#include "manifest.h"
#include "yaml-doc.h"

#define SOCKET_PATH_MAX sizeof(((struct sockaddr_un *) NULL)->sun_path)
_Static_assert(SOCKET_PATH_MAX == 108, "the socket path message says 107 bytes");

static const char *const verify_mode_table[_VERIFY_MODE_MAX] = {
        [VERIFY_FULL] = "full",
        [VERIFY_INCREMENTAL] = "incremental",
};

const char *verify_mode_to_string(VerifyMode m) {
        return m >= 0 && m < _VERIFY_MODE_MAX ? verify_mode_table[m] : NULL;
}

VerifyMode verify_mode_from_string(const char *s) {
        for (VerifyMode m = 0; s && m < _VERIFY_MODE_MAX; m++)
                if (strcmp(verify_mode_table[m], s) == 0)
                        return m;
        return _VERIFY_MODE_INVALID;
}

static const char *const clock_policy_table[_CLOCK_POLICY_MAX] = {
        [CLOCK_BUILD_FLOOR] = "build-floor",
        [CLOCK_STRICT] = "strict",
};

const char *clock_policy_to_string(ClockPolicy p) {
        return p >= 0 && p < _CLOCK_POLICY_MAX ? clock_policy_table[p] : NULL;
}

ClockPolicy clock_policy_from_string(const char *s) {
        for (ClockPolicy p = 0; s && p < _CLOCK_POLICY_MAX; p++)
                if (strcmp(clock_policy_table[p], s) == 0)
                        return p;
        return _CLOCK_POLICY_INVALID;
}

static int default_model(DaemonConfig *c);

int config_init(DaemonConfig *c) {
        DaemonConfig d = {
                .state_dir = strdup("/var/lib/taskpatch"),
                .socket = strdup("/run/taskpatch/taskpatchd.sock"),
                .admin_group = strdup("taskpatch-admin"),
                .model_path = strdup("/var/lib/taskpatch/model.gguf"),
                .trust.ca = strdup("/etc/taskpatch/ca.pem"),
                .trust.max_version_jump = CONFIG_DEFAULT_VERSION_JUMP,
                .trust.threshold = 1,
                .trust.bundle_threshold = 1,
                .trial.timeout = 120,
                .trial.health_interval = 2,
                .keep_versions = 2,
                .limits = { .manifest_bytes = CONFIG_DEFAULT_MANIFEST_BYTES, .manifest_spans = CONFIG_DEFAULT_MANIFEST_SPANS },
                .verify = VERIFY_FULL,
                .scrub_interval = 168,
                .hawkbit.tenant = strdup("DEFAULT"),
                .channel.interval = 300,
                .channel.low_speed_time = 60,
        };

        if (!d.state_dir || !d.socket || !d.admin_group || !d.model_path || !d.trust.ca || !d.hawkbit.tenant ||
            default_model(&d) < 0) {
                config_done(&d);
                return -ENOMEM;
        }
        *c = d;
        return 0;
}

static void trial_done(TrialConfig *t) {
        free(t->health_command);
        free(t->health_url);
}

static void notify_done(NotifyConfig *n) {
        for (size_t i = 0; i < n->n_restart_units; i++)
                free(n->restart_units[i]);
        for (size_t i = 0; i < n->n_reload_units; i++)
                free(n->reload_units[i]);
        free(n->exec);
}

static int strdup_or_null(char **ret, const char *s) {
        *ret = NULL;
        return s && !(*ret = strdup(s)) ? -ENOMEM : 0;
}

/* Deep copies for a model's settings, which start as the top-level ones. */
static int trial_copy(TrialConfig *to, const TrialConfig *from) {
        *to = *from;
        int a = strdup_or_null(&to->health_command, from->health_command);
        int b = strdup_or_null(&to->health_url, from->health_url);
        return a < 0 || b < 0 ? -ENOMEM : 0;
}

static int notify_copy(NotifyConfig *to, const NotifyConfig *from) {
        int r = 0;

        *to = (NotifyConfig) {};
        for (size_t i = 0; i < from->n_restart_units; i++, to->n_restart_units++)
                r |= strdup_or_null(&to->restart_units[i], from->restart_units[i]);
        for (size_t i = 0; i < from->n_reload_units; i++, to->n_reload_units++)
                r |= strdup_or_null(&to->reload_units[i], from->reload_units[i]);
        r |= strdup_or_null(&to->exec, from->exec);
        return r < 0 ? -ENOMEM : 0;
}

static void model_done(ModelConfig *m) {
        free(m->name);
        free(m->state_dir);
        free(m->model_path);
        trial_done(&m->trial);
        notify_done(&m->notify);
}

void config_done(DaemonConfig *c) {
        if (!c)
                return;
        for (size_t i = 0; i < c->n_models; i++)
                model_done(&c->models[i]);
        free(c->state_dir);
        free(c->socket);
        free(c->admin_group);
        free(c->model_path);
        free(c->trust.ca);
        free(c->trust.bundle_ca);
        free(c->trust.decrypt_key);
        free(c->trust.channel_ca);
        free(c->trust.root_ca);
        free(c->trust.crl);
        trial_done(&c->trial);
        for (size_t i = 0; i < c->channel.n_urls; i++)
                free(c->channel.urls[i]);
        free(c->tls.ca);
        free(c->spool);
        free(c->device_id);
        notify_done(&c->notify);
        free(c->hawkbit.url);
        free(c->hawkbit.tenant);
        free(c->hawkbit.controller_id);
        free(c->hawkbit.token_file);
        *c = (DaemonConfig) {};
}

/* Blank would be "sh -c ' '": healthy at once, which is never what was meant. */
static bool command_valid(const char *s) {
        return s[strspn(s, " \t\r\n")] != '\0';
}

/* Loose on purpose (NSS decides what exists), strict about what breaks group(5) lines or logs. */
static bool group_name_valid(const char *s) {
        size_t n = strlen(s);

        if (n > 255)
                return false;
        for (size_t i = 0; i < n; i++)
                if ((unsigned char) s[i] <= ' ' || s[i] == 0x7f || s[i] == ':' || s[i] == '/')
                        return false;
        return true;
}

/* A device id for rollouts: printable ASCII without blanks, 1..CONFIG_DEVICE_ID_MAX bytes. */
static bool device_id_valid(const char *s) {
        size_t n = strlen(s);

        if (n > CONFIG_DEVICE_ID_MAX)
                return false;
        for (size_t i = 0; i < n; i++)
                if ((unsigned char) s[i] <= ' ' || (unsigned char) s[i] >= 0x7f)
                        return false;
        return true;
}

static bool url_valid(const char *s) {
        const char *host;

        if (strncmp(s, "http://", 7) == 0)
                host = s + 7;
        else if (strncmp(s, "https://", 8) == 0)
                host = s + 8;
        else
                return false;
        if (*host == '\0' || *host == '/')
                return false;
        for (const char *p = s; *p; p++)
                if ((unsigned char) *p <= ' ' || *p == 0x7f)
                        return false;
        return true;
}

/* ---- the document ---------------------------------------------------------- */

/* Nothing but blank lines and comments (libyaml reports no document at all for these). */
static bool text_is_empty(const char *text, size_t len) {
        size_t i = 0;

        if (len >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0)
                i = 3;
        while (i < len) {
                char c = text[i];
                if (c == '#')
                        while (i < len && text[i] != '\n')
                                i++;
                else if (c == ' ' || c == '\t' || c == '\r' || c == '\n')
                        i++;
                else
                        return false;
        }
        return true;
}

static int parse_trust(const YamlNode *map, const char *what, DaemonConfig *c, TpError *err) {
        static const char *const keys[] = { "ca", "bundle_ca", "channel_ca", "root_ca", "crl", "crl_expired",
                                            "threshold", "bundle_threshold", "clock", "max_version_jump",
                                            "decrypt_key", NULL };
        const YamlNode *clock = yaml_map_get(map, "clock"), *crl_expired = yaml_map_get(map, "crl_expired");
        int r;

        if (crl_expired) {
                bool warn = crl_expired->kind == YAML_SCALAR && strcmp(crl_expired->scalar, "warn") == 0;
                if (!warn && (crl_expired->kind != YAML_SCALAR || strcmp(crl_expired->scalar, "refuse") != 0))
                        return config_bad_value(crl_expired, "crl_expired", what, "refuse or warn", err);
                c->trust.crl_expired_warn = warn;
        }
        if (clock) {
                ClockPolicy p = clock->kind == YAML_SCALAR ? clock_policy_from_string(clock->scalar)
                                                           : _CLOCK_POLICY_INVALID;
                if (p < 0)
                        return config_bad_value(clock, "clock", what, "build-floor or strict", err);
                c->trust.clock = p;
        }
        if ((r = yaml_check_keys(map, keys, what, err)) < 0 ||
            (r = config_get_path(map, "ca", PATH_MAX, false, what, &c->trust.ca, err)) < 0 ||
            (r = config_get_path(map, "bundle_ca", PATH_MAX, false, what, &c->trust.bundle_ca, err)) < 0 ||
            (r = config_get_path(map, "channel_ca", PATH_MAX, false, what, &c->trust.channel_ca, err)) < 0 ||
            (r = config_get_path(map, "root_ca", PATH_MAX, false, what, &c->trust.root_ca, err)) < 0 ||
            (r = config_get_path(map, "crl", PATH_MAX, false, what, &c->trust.crl, err)) < 0 ||
            (r = config_get_path(map, "decrypt_key", PATH_MAX, false, what, &c->trust.decrypt_key, err)) < 0 ||
            (r = config_get_uint(map, "threshold", 1, 8, what, &c->trust.threshold, err)) < 0 ||
            (r = config_get_uint(map, "bundle_threshold", 1, 8, what, &c->trust.bundle_threshold, err)) < 0 ||
            (r = config_get_uint(map, "max_version_jump", 0, INT64_MAX, what, &c->trust.max_version_jump, err)) < 0)
                return r;
        return 0;
}

static int parse_trial(const YamlNode *map, const char *what, TrialConfig *t, TpError *err) {
        static const char *const keys[] = { "timeout", "health_command", "health_url", "health_interval", NULL };
        int r;

        if ((r = yaml_check_keys(map, keys, what, err)) < 0 ||
            (r = config_get_uint(map, "timeout", 1, 604800, what, &t->timeout, err)) < 0 ||
            (r = config_get_optional(map, "health_command", command_valid, "a shell command or \"\"", what,
                              &t->health_command, err)) < 0 ||
            (r = config_get_optional(map, "health_url", url_valid, "an http:// or https:// URL or \"\"", what,
                              &t->health_url, err)) < 0 ||
            (r = config_get_uint(map, "health_interval", 1, 3600, what, &t->health_interval, err)) < 0)
                return r;
        return 0;
}

static int parse_limits(const YamlNode *map, const char *what, DaemonConfig *c, TpError *err) {
        static const char *const keys[] = { "manifest_bytes", "manifest_spans", NULL };
        int r;

        if ((r = yaml_check_keys(map, keys, what, err)) < 0 ||
            (r = config_get_uint(map, "manifest_bytes", 4096, MANIFEST_MAX_BYTES, what, &c->limits.manifest_bytes, err)) < 0 ||
            (r = config_get_uint(map, "manifest_spans", 1, MANIFEST_MAX_SPANS, what, &c->limits.manifest_spans, err)) < 0)
                return r;
        return 0;
}

static bool channel_url_valid(const char *s, const DaemonConfig *c) {
        return url_valid(s) && (c->channel.allow_http || strncmp(s, "http://", 7) != 0);
}

static int parse_channel(const YamlNode *map, const char *what, DaemonConfig *c, TpError *err) {
        static const char *const keys[] = { "url", "interval", "max_download_rate", "low_speed_time", "allow_http",
                                            NULL };
        int r;

        if ((r = yaml_check_keys(map, keys, what, err)) < 0 ||
            (r = config_get_bool(map, "allow_http", what, &c->channel.allow_http, err)) < 0 ||
            (r = config_get_list(map, "url", 1, CONFIG_MAX_MIRRORS, "a URL or a list of 1 to 8 URLs", channel_url_valid,
                          "an https:// URL (plain http:// needs allow_http: true)", what, c, c->channel.urls,
                          &c->channel.n_urls, err)) < 0 ||
            (r = config_get_uint(map, "interval", 1, 604800, what, &c->channel.interval, err)) < 0 ||
            (r = config_get_uint(map, "max_download_rate", 0, UINT32_MAX, what, &c->channel.max_download_rate, err)) < 0 ||
            (r = config_get_uint(map, "low_speed_time", 1, 3600, what, &c->channel.low_speed_time, err)) < 0)
                return r;
        return 0;
}

static bool path_valid(const char *s) {
        return config_path_problem(s, PATH_MAX, true) == NULL;
}

static bool dir_valid(const char *s) {
        return config_path_problem(s, PATH_MAX, false) == NULL;
}

static int parse_tls(const YamlNode *map, const char *what, DaemonConfig *c, TpError *err) {
        static const char *const keys[] = { "ca", NULL };
        int r;

        if ((r = yaml_check_keys(map, keys, what, err)) < 0 ||
            (r = config_get_optional(map, "ca", path_valid, "an absolute path, or \"\" for the system store", what,
                              &c->tls.ca, err)) < 0)
                return r;
        return 0;
}

/* A systemd unit name: "name.type" from systemd's alphabet (unit_name_is_valid), at most 255 bytes. */
static bool unit_name_valid(const char *s, const DaemonConfig *c _unused_) {
        const char *dot = strrchr(s, '.');
        size_t n = strlen(s);

        if (n == 0 || n > 255 || !dot || dot == s || !dot[1])
                return false;
        for (size_t i = 0; i < n; i++)
                if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') ||
                      strchr(":_.\\@-", s[i])))
                        return false;
        return true;
}

/* A model's notify section replaces the lists it names (not appended to the top-level ones). */
static void clear_units(char **units, size_t *n, const YamlNode *map, const char *key) {
        if (!yaml_map_get(map, key))
                return;
        for (size_t i = 0; i < *n; i++)
                free(units[i]);
        *n = 0;
}

static int parse_notify(const YamlNode *map, const char *what, DaemonConfig *c, NotifyConfig *n, TpError *err) {
        static const char *const keys[] = { "restart_units", "reload_units", "exec", NULL };
        const char *units = "systemd unit names such as llama-server.service";
        int r;

        clear_units(n->restart_units, &n->n_restart_units, map, "restart_units");
        clear_units(n->reload_units, &n->n_reload_units, map, "reload_units");
        if ((r = yaml_check_keys(map, keys, what, err)) < 0 ||
            (r = config_get_list(map, "restart_units", 0, CONFIG_MAX_UNITS, "a list of at most 16 unit names", unit_name_valid,
                          units, what, c, n->restart_units, &n->n_restart_units, err)) < 0 ||
            (r = config_get_list(map, "reload_units", 0, CONFIG_MAX_UNITS, "a list of at most 16 unit names", unit_name_valid,
                          units, what, c, n->reload_units, &n->n_reload_units, err)) < 0 ||
            (r = config_get_optional(map, "exec", command_valid, "a shell command or \"\"", what, &n->exec, err)) < 0)
                return r;
        return 0;
}

/* A tenant or controllerId goes into URL paths: letters, digits and "._-" only. */
static bool ddi_name_valid(const char *s) {
        size_t n = strlen(s);
        if (n == 0 || n > 128)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') ||
                      s[i] == '.' || s[i] == '_' || s[i] == '-'))
                        return false;
        return true;
}

static int parse_hawkbit(const YamlNode *map, const char *what, DaemonConfig *c, TpError *err) {
        static const char *const keys[] = { "url", "tenant", "controller_id", "token_file", NULL };
        const char *names = "letters, digits and ._- (at most 128)";
        int r;

        if ((r = yaml_check_keys(map, keys, what, err)) < 0 ||
            (r = config_get_optional(map, "url", url_valid, "an https:// URL or \"\"", what, &c->hawkbit.url, err)) < 0 ||
            (r = config_get_optional(map, "tenant", ddi_name_valid, names, what, &c->hawkbit.tenant, err)) < 0 ||
            (r = config_get_optional(map, "controller_id", ddi_name_valid, names, what, &c->hawkbit.controller_id, err)) <
                    0 ||
            (r = config_get_optional(map, "token_file", path_valid, "an absolute path or \"\"", what, &c->hawkbit.token_file,
                              err)) < 0)
                return r;
        if (c->hawkbit.url && strncmp(c->hawkbit.url, "http://", 7) == 0 && !c->channel.allow_http)
                return config_bad_value(yaml_map_get(map, "url"), "url", what,
                                 "an https:// URL (plain http:// needs channel.allow_http: true)", err);
        if (c->hawkbit.url && (!c->hawkbit.controller_id || !c->hawkbit.tenant))
                return tp_error(err, -EBADMSG, "%s: line %u: hawkbit: 'url' needs 'controller_id' (and 'tenant')",
                                what, map->line);
        return 0;
}

/* @p with "//" and "/./" collapsed and no trailing '/' (the paths are absolute and have no ".."). */
static char *path_normalize(const char *p) {
        char *n = malloc(strlen(p) + 2), *o = n;

        if (!n)
                return NULL;
        for (const char *s = p; *s;) {
                if (s[0] == '/' && (s[1] == '/' || (s[1] == '.' && (s[2] == '/' || s[2] == '\0')))) {
                        s += s[1] == '/' ? 1 : 2;
                        continue;
                }
                *o++ = *s++;
        }
        while (o > n + 1 && o[-1] == '/')
                o--;
        if (o == n)
                *o++ = '/';
        *o = '\0';
        return n;
}

/* @path is @dir or lies below it. */
static bool path_at_or_below(const char *path, const char *dir) {
        size_t n = strlen(dir);
        if (n == 1)
                return true;            /* "/" */
        return strncmp(path, dir, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

const char *const config_state_entries[] = { "state.json", "floor.json", "taskpatchd.lock", "slots", "tasks",
                                             "downloads", "models", "revocations", NULL };

/*
 * model_path is replaced by a symlink at every switch: it must not name anything else the
 * daemon keeps (provisioning into "slots/a.gguf" would destroy slot a, into "state.json" the
 * state), nor the state directory, the socket or the spool folder.
 */
static int check_model_path(const DaemonConfig *c, const char *model_path, const char *what, TpError *err) {
        _cleanup_free_ char *mp = path_normalize(model_path), *sd = path_normalize(c->state_dir);
        _cleanup_free_ char *sock = path_normalize(c->socket), *spool = c->spool ? path_normalize(c->spool) : NULL;

        if (!mp || !sd || !sock || (c->spool && !spool))
                return -ENOMEM;
        if (path_at_or_below(sd, mp))
                return tp_error(err, -EBADMSG, "%s: model_path %s is the state directory %s or holds it", what,
                                model_path, c->state_dir);
        for (size_t i = 0; config_state_entries[i]; i++) {
                _cleanup_free_ char *e = NULL;
                if (asprintf(&e, "%s/%s", strcmp(sd, "/") == 0 ? "" : sd, config_state_entries[i]) < 0)
                        return -ENOMEM;
                if (path_at_or_below(mp, e))
                        return tp_error(err, -EBADMSG, "%s: model_path %s lies in %s, which the daemon owns: "
                                        "choose a path outside it (for example %s/model.gguf)", what, model_path,
                                        e, sd);
        }
        if (strcmp(mp, sock) == 0)
                return tp_error(err, -EBADMSG, "%s: model_path and socket are the same path (%s)", what, model_path);
        if (spool && path_at_or_below(mp, spool))
                return tp_error(err, -EBADMSG, "%s: model_path %s lies in the spool folder %s", what, model_path,
                                c->spool);
        return 0;
}

static int check_regular_or_dir(const char *key, const char *path, bool dir_ok, const char **ret_missing,
                                TpError *err) {
        struct stat st;

        if (!path)
                return 0;
        if (stat(path, &st) < 0) {
                if (errno != ENOENT)
                        return tp_error(err, negative_errno(), "%s %s: %s", key, path, strerror(errno));
                if (ret_missing && !*ret_missing)
                        *ret_missing = key;
                return 0;
        }
        if (!S_ISREG(st.st_mode) && !(dir_ok && S_ISDIR(st.st_mode)))
                return tp_error(err, -EINVAL, "%s %s: not a regular file (%s)", key, path,
                                S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO" : "a device or socket");
        return 0;
}

static int check_regular(const char *key, const char *path, const char **ret_missing, TpError *err) {
        return check_regular_or_dir(key, path, false, ret_missing, err);
}

int config_check_files(const DaemonConfig *c, const char **ret_trust_missing, TpError *err) {
        const char *missing = NULL;
        bool ca_used = !c->trust.bundle_ca || !c->trust.channel_ca || !c->trust.root_ca;
        int r;

        /* The roles' own files first: a missing one is named rather than trust.ca behind it. */
        if ((r = check_regular("trust.bundle_ca", c->trust.bundle_ca, &missing, err)) < 0 ||
            (r = check_regular("trust.channel_ca", c->trust.channel_ca, &missing, err)) < 0 ||
            (r = check_regular("trust.root_ca", c->trust.root_ca, &missing, err)) < 0 ||
            (r = check_regular("trust.ca", ca_used ? c->trust.ca : NULL, &missing, err)) < 0 ||
            (r = check_regular_or_dir("trust.crl", c->trust.crl, true, &missing, err)) < 0 ||
            (r = check_regular("trust.decrypt_key", c->trust.decrypt_key, &missing, err)) < 0 ||
            (r = check_regular("tls.ca", c->tls.ca, NULL, err)) < 0 ||
            (r = check_regular("hawkbit.token_file", c->hawkbit.token_file, NULL, err)) < 0)
                return r;
        *ret_trust_missing = missing;
        return 0;
}

/* A model's entry of the "models:" map, over the top-level trial and notify. */
static int parse_model(const YamlNode *key, const YamlNode *map, const char *what, DaemonConfig *c, ModelConfig *m,
                       TpError *err) {
        static const char *const keys[] = { "model_path", "trial", "notify", "disk_budget", NULL };
        const YamlNode *trial, *notify;
        int r;

        if (key->kind != YAML_SCALAR || !task_name_valid(key->scalar))
                return tp_error(err, -EBADMSG, "%s: line %u: models: '%.80s' is no model name (expected "
                                "[a-z0-9][a-z0-9._-]{0,63})", what, key->line,
                                key->kind == YAML_SCALAR ? key->scalar : "(not a scalar)");
        if (config_find_model(c, key->scalar))
                return tp_error(err, -EBADMSG, "%s: line %u: models: '%s' appears twice", what, key->line, key->scalar);
        if (!(m->name = strdup(key->scalar)) || trial_copy(&m->trial, &c->trial) < 0 ||
            notify_copy(&m->notify, &c->notify) < 0)
                return -ENOMEM;
        m->disk_budget = c->disk_budget;
        if (strcmp(m->name, CONFIG_DEFAULT_MODEL) == 0)
                m->state_dir = strdup(c->state_dir);
        else if (asprintf(&m->state_dir, "%s/models/%s", strcmp(c->state_dir, "/") == 0 ? "" : c->state_dir,
                          m->name) < 0)
                m->state_dir = NULL;
        if (!m->state_dir)
                return -ENOMEM;
        if (map->kind != YAML_MAPPING)
                return tp_error(err, -EBADMSG, "%s: line %u: models: '%s': expected a mapping (model_path, trial, "
                                "notify, disk_budget)", what, map->line, m->name);
        if ((r = yaml_check_keys(map, keys, what, err)) < 0 ||
            (r = config_get_path(map, "model_path", PATH_MAX, true, what, &m->model_path, err)) < 0 ||
            (r = config_get_section(map, "trial", what, &trial, err)) < 0 ||
            (trial && (r = parse_trial(trial, what, &m->trial, err)) < 0) ||
            (r = config_get_section(map, "notify", what, &notify, err)) < 0 ||
            (notify && (r = parse_notify(notify, what, c, &m->notify, err)) < 0) ||
            (r = config_get_uint(map, "disk_budget", 0, INT64_MAX, what, &m->disk_budget, err)) < 0)
                return r;
        if (!m->model_path)
                return tp_error(err, -EBADMSG, "%s: line %u: models: '%s' has no model_path", what, map->line, m->name);
        return 0;
}

static int parse_models(const YamlNode *map, const char *what, DaemonConfig *c, TpError *err) {
        int r;

        if (map->n == 0)
                return tp_error(err, -EBADMSG, "%s: line %u: models: an empty map (name at least one model)", what,
                                map->line);
        if (map->n > CONFIG_MAX_MODELS)
                return tp_error(err, -EBADMSG, "%s: line %u: models: %zu models, at most %d", what, map->line, map->n,
                                CONFIG_MAX_MODELS);
        for (size_t i = 0; i < c->n_models; i++)
                model_done(&c->models[i]);
        c->n_models = 0;
        for (size_t i = 0; i < map->n; i++) {
                /* Counted first, so that config_done() frees what a failure left half made. */
                ModelConfig *m = &c->models[c->n_models++];
                *m = (ModelConfig) {};
                if ((r = parse_model(map->items[2 * i], map->items[2 * i + 1], what, c, m, err)) < 0)
                        return r;
        }
        return 0;
}

/* Every model's model_path is its own: not another's, not inside another's (a directory model). */
static int check_models(const DaemonConfig *c, const char *what, TpError *err) {
        int r;

        for (size_t i = 0; i < c->n_models; i++) {
                _cleanup_free_ char *a = path_normalize(c->models[i].model_path);
                if (!a)
                        return -ENOMEM;
                char where[256];
                snprintf(where, sizeof(where), c->models_map ? "%s: model '%s'" : "%s", what, c->models[i].name);
                if ((r = check_model_path(c, c->models[i].model_path, where, err)) < 0)
                        return r;
                for (size_t j = 0; j < i; j++) {
                        _cleanup_free_ char *b = path_normalize(c->models[j].model_path);
                        if (!b)
                                return -ENOMEM;
                        if (path_at_or_below(a, b) || path_at_or_below(b, a))
                                return tp_error(err, -EBADMSG, "%s: models '%s' and '%s': model_path %s and %s overlap "
                                                "(each model needs a path of its own)", what, c->models[j].name,
                                                c->models[i].name, c->models[j].model_path, c->models[i].model_path);
                }
        }
        return 0;
}

static int parse_root(const YamlNode *root, const char *what, DaemonConfig *c, TpError *err) {
        static const char *const keys[] = { "state_dir", "socket", "admin_group", "model_path", "trust", "trial",
                                            "keep_versions", "verify", "scrub_interval", "limits", "channel", "tls", "spool",
                                            "hawkbit", "notify", "models", "disk_budget", "device_id", NULL };
        const YamlNode *trust, *trial, *limits, *channel, *tls, *hawkbit, *notify, *models;
        int r;

        if (config_node_is_null(root))
                return 0;  /* "---" and nothing else */
        if (root->kind != YAML_MAPPING)
                return tp_error(err, -EBADMSG, "%s: line %u: expected a mapping of settings, found %s", what,
                                root->line, root->kind == YAML_SEQUENCE ? "a list" : "a scalar");
        if ((r = yaml_check_keys(root, keys, what, err)) < 0 ||
            (r = config_get_path(root, "state_dir", PATH_MAX, false, what, &c->state_dir, err)) < 0 ||
            (r = config_get_path(root, "socket", SOCKET_PATH_MAX, true, what, &c->socket, err)) < 0 ||
            (r = config_get_optional(root, "admin_group", group_name_valid,
                              "a group name (no blanks, ':' or '/'; at most 255 bytes) or \"\"", what, &c->admin_group,
                              err)) < 0 ||
            (r = config_get_path(root, "model_path", PATH_MAX, true, what, &c->model_path, err)) < 0 ||
            (r = config_get_section(root, "trust", what, &trust, err)) < 0 ||
            (trust && (r = parse_trust(trust, what, c, err)) < 0) ||
            (r = config_get_section(root, "trial", what, &trial, err)) < 0 ||
            (trial && (r = parse_trial(trial, what, &c->trial, err)) < 0) ||
            (r = config_get_uint(root, "keep_versions", 1, 1000, what, &c->keep_versions, err)) < 0 ||
            (r = config_get_verify(root, "verify", what, &c->verify, err)) < 0 ||
            (r = config_get_uint(root, "scrub_interval", 0, 8760, what, &c->scrub_interval, err)) < 0 ||
            (r = config_get_section(root, "limits", what, &limits, err)) < 0 ||
            (limits && (r = parse_limits(limits, what, c, err)) < 0) ||
            (r = config_get_section(root, "channel", what, &channel, err)) < 0 ||
            (channel && (r = parse_channel(channel, what, c, err)) < 0) ||
            (r = config_get_section(root, "tls", what, &tls, err)) < 0 ||
            (tls && (r = parse_tls(tls, what, c, err)) < 0) ||
            (r = config_get_optional(root, "spool", dir_valid, "an absolute path, or \"\" for none", what, &c->spool,
                              err)) < 0 ||
            (r = config_get_section(root, "hawkbit", what, &hawkbit, err)) < 0 ||
            (hawkbit && (r = parse_hawkbit(hawkbit, what, c, err)) < 0) ||
            (r = config_get_section(root, "notify", what, &notify, err)) < 0 ||
            (notify && (r = parse_notify(notify, what, c, &c->notify, err)) < 0) ||
            (r = config_get_uint(root, "disk_budget", 0, INT64_MAX, what, &c->disk_budget, err)) < 0 ||
            (r = config_get_optional(root, "device_id", device_id_valid,
                                     "printable ASCII without blanks, at most 128 bytes, or \"\" for /etc/machine-id",
                                     what, &c->device_id, err)) < 0 ||
            (r = config_get_section(root, "models", what, &models, err)) < 0)
                return r;
        if (c->hawkbit.url && c->channel.n_urls > 0)
                return tp_error(err, -EBADMSG, "%s: a device follows a channel or a hawkBit server, not both "
                                "(channel.url and hawkbit.url are set)", what);
        if (models && yaml_map_get(root, "model_path"))
                return tp_error(err, -EBADMSG, "%s: line %u: model_path and models: both set: with a models: map, "
                                "each model names its own model_path", what, yaml_map_get(root, "model_path")->line);
        c->models_map = models != NULL;
        if (models && (r = parse_models(models, what, c, err)) < 0)
                return r;
        return 0;
}

/* Without a "models:" map: the one model, "default", of the top-level settings. */
static int default_model(DaemonConfig *c) {
        ModelConfig *m = &c->models[0];

        for (size_t i = 0; i < c->n_models; i++)
                model_done(&c->models[i]);
        c->n_models = 1;
        *m = (ModelConfig) { .disk_budget = c->disk_budget };
        if (!(m->name = strdup(CONFIG_DEFAULT_MODEL)) || !(m->state_dir = strdup(c->state_dir)) ||
            !(m->model_path = strdup(c->model_path)) || trial_copy(&m->trial, &c->trial) < 0 ||
            notify_copy(&m->notify, &c->notify) < 0)
                return -ENOMEM;
        return 0;
}

const ModelConfig *config_find_model(const DaemonConfig *c, const char *name) {
        for (size_t i = 0; i < c->n_models; i++)
                if (c->models[i].name && strcmp(c->models[i].name, name) == 0)
                        return &c->models[i];
        return NULL;
}

DaemonConfig config_model_view(const DaemonConfig *c, size_t i) {
        DaemonConfig v = *c;
        const ModelConfig *m = &c->models[i];

        v.state_dir = m->state_dir;
        v.model_path = m->model_path;
        v.trial = m->trial;
        v.notify = m->notify;
        v.disk_budget = m->disk_budget;
        v.model = m->name;
        v.model_index = i;
        return v;
}

int config_parse(const char *text, size_t len, const char *what, DaemonConfig *ret, TpError *err) {
        _cleanup_(config_done) DaemonConfig c = {};
        _cleanup_(yaml_node_freep) YamlNode *root = NULL;
        int r;

        if (!what)
                what = "config";
        if (len > CONFIG_MAX_BYTES)
                return tp_error(err, -EFBIG, "%s: %zu bytes exceed the %u-byte cap", what, len, CONFIG_MAX_BYTES);
        r = config_init(&c);
        if (r < 0)
                return tp_error(err, r, "%s: out of memory", what);
        if (len > 0 && !text_is_empty(text, len)) {
                r = yaml_doc_parse(text, len, CONFIG_MAX_BYTES, what, &root, err);
                if (r < 0)
                        return r;
                r = parse_root(root, what, &c, err);
                if (r >= 0 && !c.models_map)
                        r = default_model(&c);
                if (r >= 0)
                        r = check_models(&c, what, err);
                if (r == -ENOMEM)
                        return tp_error(err, r, "%s: out of memory", what);
                if (r < 0)
                        return r;
        }
        config_done(ret);
        *ret = c;
        c = (DaemonConfig) {};
        return 0;
}

int config_load(const char *path, DaemonConfig *ret, TpError *err) {
        _cleanup_close_ int fd = -1;
        _cleanup_free_ char *buf = NULL;
        size_t n = 0;
        struct stat st;

        /* O_NONBLOCK: opening a FIFO must not wait for a writer; a regular file ignores it. */
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        if (fd < 0)
                return tp_error(err, negative_errno(), "%s: cannot open: %s", path, strerror(errno));
        if (fstat(fd, &st) < 0)
                return tp_error(err, negative_errno(), "%s: cannot stat: %s", path, strerror(errno));
        if (S_ISDIR(st.st_mode))
                return tp_error(err, -EISDIR, "%s: is a directory, not a configuration file", path);
        if (!S_ISREG(st.st_mode))
                return tp_error(err, -EINVAL, "%s: not a regular file (%s): a configuration is a file", path,
                                S_ISFIFO(st.st_mode) ? "a FIFO" : "a device or socket");
        if ((uint64_t) st.st_size > CONFIG_MAX_BYTES)
                return tp_error(err, -EFBIG, "%s: %" PRIu64 " bytes exceed the %u-byte cap", path,
                                (uint64_t) st.st_size, CONFIG_MAX_BYTES);

        /* One byte more than the cap, so a file that grew past it is caught too. */
        buf = malloc(CONFIG_MAX_BYTES + 1);
        if (!buf)
                return tp_error(err, -ENOMEM, "%s: out of memory", path);
        for (;;) {
                ssize_t k = read(fd, buf + n, CONFIG_MAX_BYTES + 1 - n);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0)
                        return tp_error(err, negative_errno(), "%s: cannot read: %s", path, strerror(errno));
                if (k == 0)
                        break;
                n += (size_t) k;
                if (n > CONFIG_MAX_BYTES)
                        return tp_error(err, -EFBIG, "%s: more than the %u-byte cap", path, CONFIG_MAX_BYTES);
        }
        return config_parse(buf, n, path, ret, err);
}
