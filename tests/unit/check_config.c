/* SPDX-License-Identifier: MIT */
/* common/device/config.c: defaults, every key, every refusal, loading, and config/taskpatchd.yaml. */

#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "check-main.h"
#include "config.h"

/* The documented example, relative to the repository root (where the tests run). */
#define EXAMPLE_PATH "config/taskpatchd.yaml"

static void str_eq_or_null(const char *a, const char *b, const char *field) {
        if (!a || !b)
                ck_assert_msg(a == b, "%s: '%s' != '%s'", field, a ? a : "(null)", b ? b : "(null)");
        else
                ck_assert_msg(strcmp(a, b) == 0, "%s: '%s' != '%s'", field, a, b);
}

static void config_assert_eq(const DaemonConfig *a, const DaemonConfig *b) {
        str_eq_or_null(a->state_dir, b->state_dir, "state_dir");
        str_eq_or_null(a->socket, b->socket, "socket");
        str_eq_or_null(a->admin_group, b->admin_group, "admin_group");
        str_eq_or_null(a->model_path, b->model_path, "model_path");
        str_eq_or_null(a->trust.ca, b->trust.ca, "trust.ca");
        ck_assert_uint_eq(a->trial.timeout, b->trial.timeout);
        str_eq_or_null(a->trial.health_command, b->trial.health_command, "trial.health_command");
        str_eq_or_null(a->trial.health_url, b->trial.health_url, "trial.health_url");
        ck_assert_uint_eq(a->trial.health_interval, b->trial.health_interval);
        ck_assert_uint_eq(a->keep_versions, b->keep_versions);
        ck_assert_int_eq(a->verify, b->verify);
        ck_assert_uint_eq(a->scrub_interval, b->scrub_interval);
        ck_assert_uint_eq(a->limits.manifest_bytes, b->limits.manifest_bytes);
        ck_assert_uint_eq(a->limits.manifest_spans, b->limits.manifest_spans);
        ck_assert_uint_eq(a->channel.n_urls, b->channel.n_urls);
        for (size_t i = 0; i < a->channel.n_urls; i++)
                str_eq_or_null(a->channel.urls[i], b->channel.urls[i], "channel.url");
        ck_assert_uint_eq(a->channel.interval, b->channel.interval);
        ck_assert_uint_eq(a->channel.max_download_rate, b->channel.max_download_rate);
        ck_assert_uint_eq(a->channel.low_speed_time, b->channel.low_speed_time);
        ck_assert_int_eq(a->channel.allow_http, b->channel.allow_http);
        str_eq_or_null(a->tls.ca, b->tls.ca, "tls.ca");
        str_eq_or_null(a->spool, b->spool, "spool");
        str_eq_or_null(a->hawkbit.url, b->hawkbit.url, "hawkbit.url");
        str_eq_or_null(a->hawkbit.tenant, b->hawkbit.tenant, "hawkbit.tenant");
        str_eq_or_null(a->hawkbit.controller_id, b->hawkbit.controller_id, "hawkbit.controller_id");
        str_eq_or_null(a->hawkbit.token_file, b->hawkbit.token_file, "hawkbit.token_file");
        ck_assert_uint_eq(a->notify.n_restart_units, b->notify.n_restart_units);
        for (size_t i = 0; i < a->notify.n_restart_units; i++)
                str_eq_or_null(a->notify.restart_units[i], b->notify.restart_units[i], "notify.restart_units");
        ck_assert_uint_eq(a->notify.n_reload_units, b->notify.n_reload_units);
        for (size_t i = 0; i < a->notify.n_reload_units; i++)
                str_eq_or_null(a->notify.reload_units[i], b->notify.reload_units[i], "notify.reload_units");
        str_eq_or_null(a->notify.exec, b->notify.exec, "notify.exec");
        ck_assert_uint_eq(a->disk_budget, b->disk_budget);
        ck_assert_int_eq(a->models_map, b->models_map);
        ck_assert_uint_eq(a->n_models, b->n_models);
        for (size_t i = 0; i < a->n_models; i++) {
                str_eq_or_null(a->models[i].name, b->models[i].name, "models[].name");
                str_eq_or_null(a->models[i].state_dir, b->models[i].state_dir, "models[].state_dir");
                str_eq_or_null(a->models[i].model_path, b->models[i].model_path, "models[].model_path");
                ck_assert_uint_eq(a->models[i].trial.timeout, b->models[i].trial.timeout);
                ck_assert_uint_eq(a->models[i].disk_budget, b->models[i].disk_budget);
        }
}

static void parse_ok(const char *text, DaemonConfig *c) {
        TpError err = {};
        int r = config_parse(text, strlen(text), "test.yaml", c, &err);
        ck_assert_msg(r == 0, "'%s' refused: %s", text, err.message);
}

/* Every key set to something other than its default. */
static const char all_keys[] =
        "state_dir: /srv/tp\n"
        "socket: /run/tp.sock\n"
        "admin_group: wheel\n"
        "model_path: /srv/models/current.gguf\n"
        "trust:\n"
        "  ca: /etc/tp/ca.d\n"
        "  channel_ca: /etc/tp/channel-ca.pem\n"
        "  root_ca: /etc/tp/root-ca.pem\n"
        "  crl: /etc/tp/crl.d\n"
        "  crl_expired: warn\n"
        "  threshold: 3\n"
        "  bundle_threshold: 2\n"
        "  max_version_jump: 1000\n"
        "trial:\n"
        "  timeout: 604800\n"
        "  health_command: \"curl -fsS localhost:8080/ready || exit 75\"\n"
        "  health_url: https://127.0.0.1:8080/health\n"
        "  health_interval: 3600\n"
        "keep_versions: 1000\n"
        "verify: incremental\n"
        "scrub_interval: 0\n"
        "limits:\n"
        "  manifest_bytes: 4096\n"
        "  manifest_spans: 1048576\n"
        "channel:\n"
        "  url: [http://mirror-a/stable.channel, https://mirror-b/x/stable.channel]\n"
        "  interval: 1\n"
        "  max_download_rate: 1000000\n"
        "  low_speed_time: 3600\n"
        "  allow_http: true\n"
        "tls:\n"
        "  ca: /etc/tp/tls-ca.pem\n"
        "spool: /media/usb/taskpatch/\n"
        "hawkbit:\n"
        "  url: \"\"\n"
        "  tenant: fleet-7\n"
        "  controller_id: pi-0042\n"
        "  token_file: /etc/tp/hawkbit.token\n"
        "notify:\n"
        "  restart_units: [llama-server.service, ocr@1.service]\n"
        "  reload_units: onnx-app.service\n"
        "  exec: logger -t taskpatch $TASKPATCH_EVENT\n";

START_TEST(test_defaults) {
        DaemonConfig c = {};

        ck_assert_int_eq(config_init(&c), 0);
        ck_assert_str_eq(c.state_dir, "/var/lib/taskpatch");
        ck_assert_str_eq(c.socket, "/run/taskpatch/taskpatchd.sock");
        ck_assert_str_eq(c.admin_group, "taskpatch-admin");
        ck_assert_str_eq(c.model_path, "/var/lib/taskpatch/model.gguf");
        ck_assert_str_eq(c.trust.ca, "/etc/taskpatch/ca.pem");
        ck_assert_str_eq(config_bundle_ca(&c), "/etc/taskpatch/ca.pem");        /* the roles default to trust.ca */
        ck_assert_str_eq(config_channel_ca(&c), "/etc/taskpatch/ca.pem");
        ck_assert_str_eq(config_root_ca(&c), "/etc/taskpatch/ca.pem");
        ck_assert_ptr_null(c.trust.crl);
        ck_assert(!c.trust.crl_expired_warn);           /* an out-of-date CRL refuses by default */
        ck_assert_uint_eq(c.trust.threshold, 1);
        ck_assert_uint_eq(c.trust.bundle_threshold, 1);
        ck_assert_uint_eq(c.trust.max_version_jump, UINT64_C(4294967296));
        ck_assert_uint_eq(c.trial.timeout, 120);
        ck_assert_ptr_null(c.trial.health_command);
        ck_assert_ptr_null(c.trial.health_url);
        ck_assert_uint_eq(c.trial.health_interval, 2);
        ck_assert_uint_eq(c.keep_versions, 2);
        ck_assert_int_eq(c.verify, VERIFY_FULL);
        ck_assert_uint_eq(c.scrub_interval, 168);
        ck_assert_uint_eq(c.limits.manifest_bytes, 8u << 20);
        ck_assert_uint_eq(c.limits.manifest_spans, 128u << 10);
        config_done(&c);
}
END_TEST

/* Documents that say nothing give the defaults; so do sections with every key commented out. */
static const char *const empty_docs[] = {
        "",
        "\n\n",
        "# nothing here\n",
        "  # indented comment\n\t\n# another\r\n",
        "\xef\xbb\xbf# with a BOM\n",
        "---\n",
        "--- ~\n",
        "{}\n",
        "trial:\n#  timeout: 5\ntrust:\n",
        "trial: {}\ntrust: ~\n",
};

START_TEST(test_empty) {
        DaemonConfig c = {}, d = {};

        ck_assert_int_eq(config_init(&d), 0);
        parse_ok(all_keys, &c);  /* parsing replaces everything: nothing of this survives */
        parse_ok(empty_docs[_i], &c);
        config_assert_eq(&c, &d);
        config_done(&c);
        config_done(&d);
}
END_TEST

START_TEST(test_all_keys) {
        DaemonConfig c = {};

        parse_ok(all_keys, &c);
        ck_assert_str_eq(c.state_dir, "/srv/tp");
        ck_assert_str_eq(c.socket, "/run/tp.sock");
        ck_assert_str_eq(c.admin_group, "wheel");
        ck_assert_str_eq(c.model_path, "/srv/models/current.gguf");
        ck_assert_str_eq(c.trust.ca, "/etc/tp/ca.d");
        ck_assert_str_eq(config_bundle_ca(&c), "/etc/tp/ca.d");
        ck_assert_str_eq(config_channel_ca(&c), "/etc/tp/channel-ca.pem");
        ck_assert_str_eq(config_root_ca(&c), "/etc/tp/root-ca.pem");
        ck_assert_str_eq(c.trust.crl, "/etc/tp/crl.d");
        ck_assert(c.trust.crl_expired_warn);
        ck_assert_uint_eq(c.trust.threshold, 3);
        ck_assert_uint_eq(c.trust.bundle_threshold, 2);
        ck_assert_uint_eq(c.trust.max_version_jump, 1000);
        ck_assert_uint_eq(c.trial.timeout, 604800);
        ck_assert_str_eq(c.trial.health_command, "curl -fsS localhost:8080/ready || exit 75");
        ck_assert_str_eq(c.trial.health_url, "https://127.0.0.1:8080/health");
        ck_assert_uint_eq(c.trial.health_interval, 3600);
        ck_assert_uint_eq(c.keep_versions, 1000);
        ck_assert_int_eq(c.verify, VERIFY_INCREMENTAL);
        ck_assert_uint_eq(c.scrub_interval, 0);
        ck_assert_uint_eq(c.limits.manifest_bytes, 4096);
        ck_assert_uint_eq(c.limits.manifest_spans, 1048576);
        ck_assert_uint_eq(c.channel.n_urls, 2);
        ck_assert_str_eq(c.channel.urls[0], "http://mirror-a/stable.channel");
        ck_assert_str_eq(c.channel.urls[1], "https://mirror-b/x/stable.channel");
        ck_assert_uint_eq(c.channel.interval, 1);
        ck_assert_uint_eq(c.channel.max_download_rate, 1000000);
        ck_assert_uint_eq(c.channel.low_speed_time, 3600);
        ck_assert(c.channel.allow_http);
        ck_assert_str_eq(c.tls.ca, "/etc/tp/tls-ca.pem");
        ck_assert_str_eq(c.spool, "/media/usb/taskpatch/");
        ck_assert_ptr_null(c.hawkbit.url);
        ck_assert_str_eq(c.hawkbit.tenant, "fleet-7");
        ck_assert_str_eq(c.hawkbit.controller_id, "pi-0042");
        ck_assert_str_eq(c.hawkbit.token_file, "/etc/tp/hawkbit.token");
        ck_assert_uint_eq(c.notify.n_restart_units, 2);
        ck_assert_str_eq(c.notify.restart_units[1], "ocr@1.service");
        ck_assert_uint_eq(c.notify.n_reload_units, 1);
        ck_assert_str_eq(c.notify.reload_units[0], "onnx-app.service");
        ck_assert_str_eq(c.notify.exec, "logger -t taskpatch $TASKPATCH_EVENT");
        config_done(&c);
        parse_ok("hawkbit:\n  url: https://hawkbit.example.com:8443\n  controller_id: a.b-c_d\n", &c);
        ck_assert_str_eq(c.hawkbit.url, "https://hawkbit.example.com:8443");
        ck_assert_str_eq(c.hawkbit.tenant, "DEFAULT");
        ck_assert_ptr_null(c.hawkbit.token_file);
        config_done(&c);
        /* One URL as a plain string. */
        parse_ok("channel:\n  url: https://updates.example.com/stable.channel\n", &c);
        ck_assert_uint_eq(c.channel.n_urls, 1);
        ck_assert_str_eq(c.channel.urls[0], "https://updates.example.com/stable.channel");
        ck_assert(!c.channel.allow_http);
        ck_assert_ptr_null(c.tls.ca);
        config_done(&c);
}
END_TEST

/* "" (and a YAML null) unset the optional strings; the lowest values of each range are accepted. */
START_TEST(test_unset_and_edges) {
        DaemonConfig c = {};

        parse_ok("admin_group: \"\"\ntrial:\n  health_command: ''\n  health_url: \"\"\n  timeout: 1\n"
                 "  health_interval: 1\nkeep_versions: 1\nscrub_interval: 8760\nverify: full\n",
                 &c);
        ck_assert_ptr_null(c.admin_group);
        ck_assert_ptr_null(c.trial.health_command);
        ck_assert_ptr_null(c.trial.health_url);
        ck_assert_uint_eq(c.trial.timeout, 1);
        ck_assert_uint_eq(c.trial.health_interval, 1);
        ck_assert_uint_eq(c.keep_versions, 1);
        ck_assert_uint_eq(c.scrub_interval, 8760);
        ck_assert_int_eq(c.verify, VERIFY_FULL);

        parse_ok("admin_group:\ntrial:\n  health_url: ~\n  health_command: null\n", &c);
        ck_assert_ptr_null(c.admin_group);
        ck_assert_ptr_null(c.trial.health_url);
        ck_assert_ptr_null(c.trial.health_command);

        /* A quoted enum is the same enum. */
        parse_ok("verify: \"incremental\"\n", &c);
        ck_assert_int_eq(c.verify, VERIFY_INCREMENTAL);

        /* A quoted "null" is a string; http:// works as well as https://; multi-line commands are kept. */
        parse_ok("admin_group: \"null\"\ntrial:\n  health_url: http://[::1]:80/\n"
                 "  health_command: |\n    test -e /run/ready\n    exit 0\n",
                 &c);
        ck_assert_str_eq(c.admin_group, "null");
        ck_assert_str_eq(c.trial.health_url, "http://[::1]:80/");
        ck_assert_str_eq(c.trial.health_command, "test -e /run/ready\nexit 0\n");

        /* 107 bytes is the longest socket path sun_path holds. */
        char doc[160] = "socket: /";
        memset(doc + 9, 's', 106);
        memcpy(doc + 115, "\n", 2);
        parse_ok(doc, &c);
        ck_assert_uint_eq(strlen(c.socket), 107);
        config_done(&c);
}
END_TEST

#define A32 "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define X01_8 "\\x01\\x01\\x01\\x01\\x01\\x01\\x01\\x01"

/* Each document must be refused with a message holding every one of the given words. */
static const struct {
        const char *text;
        const char *words[4];
} bad_cases[] = {
        /* wrong types */
        { "trial:\n  timeout: soon\n", { "line 2", "'timeout'", "an integer from 1 to 604800", "found 'soon'" } },
        { "keep_versions: -1\n", { "line 1", "'keep_versions'", "from 1 to 1000", "found '-1'" } },
        { "keep_versions: 2.5\n", { "line 1", "'keep_versions'", "from 1 to 1000", "found '2.5'" } },
        { "keep_versions: \"3\"\n", { "line 1", "'keep_versions'", "from 1 to 1000", "quoted string \"3\"" } },
        { "keep_versions:\n", { "line 1", "'keep_versions'", "from 1 to 1000", "found ''" } },
        { "scrub_interval: [1]\n", { "line 1", "'scrub_interval'", "from 0 to 8760", "found a list" } },
        { "state_dir: {a: b}\n", { "line 1", "'state_dir'", "an absolute path", "found a mapping" } },
        { "admin_group: [a, b]\n", { "line 1", "'admin_group'", "a group name", "found a list" } },
        { "trial:\n  health_command: {a: 1}\n", { "line 2", "'health_command'", "a shell command", "a mapping" } },
        /* out of range */
        { "trial:\n  timeout: 0\n", { "line 2", "'timeout'", "from 1 to 604800", "found '0'" } },
        { "trial:\n  timeout: 604801\n", { "line 2", "'timeout'", "from 1 to 604800", "found '604801'" } },
        { "trial:\n  health_interval: 0\n", { "line 2", "'health_interval'", "from 1 to 3600", "found '0'" } },
        { "\ntrial:\n  health_interval: 3601\n", { "line 3", "'health_interval'", "from 1 to 3600", "'3601'" } },
        { "keep_versions: 0\n", { "line 1", "'keep_versions'", "from 1 to 1000", "found '0'" } },
        { "keep_versions: 1001\n", { "line 1", "'keep_versions'", "from 1 to 1000", "found '1001'" } },
        { "scrub_interval: 8761\n", { "line 1", "'scrub_interval'", "from 0 to 8760", "found '8761'" } },
        { "limits:\n  manifest_bytes: 4095\n", { "line 2", "'manifest_bytes'", "from 4096 to 67108864" } },
        { "limits:\n  manifest_spans: 0\n", { "line 2", "'manifest_spans'", "from 1 to 1048576" } },
        { "limits:\n  manifest_size: 1\n", { "line 2", "manifest_size" } },
        { "scrub_interval: 99999999999999999999\n", { "line 1", "'scrub_interval'", "from 0 to 8760", "'9999" } },
        /* paths */
        { "state_dir: var/lib/taskpatch\n", { "line 1", "'state_dir'", "an absolute path", "'var/lib/taskpatch'" } },
        { "# c\nsocket: taskpatchd.sock\n", { "line 2", "'socket'", "an absolute path", "'taskpatchd.sock'" } },
        { "model_path: ./model.gguf\n", { "line 1", "'model_path'", "an absolute path", "'./model.gguf'" } },
        { "trust:\n  ca: ca.pem\n", { "line 2", "'ca'", "an absolute path", "found 'ca.pem'" } },
        { "state_dir: \"\"\n", { "line 1", "'state_dir'", "an absolute path", "quoted string \"\"" } },
        { "state_dir: /var/lib/../../etc\n", { "line 1", "'state_dir'", "without '..'", "'/var/lib/../../etc'" } },
        { "trust:\n  ca: /etc/taskpatch/..\n", { "line 2", "'ca'", "without '..'", "'/etc/taskpatch/..'" } },
        { "model_path: /var/lib/taskpatch/\n", { "line 1", "'model_path'", "no trailing '/'", "found '/var" } },
        { "state_dir: \"/var/lib/a\\nb\"\n", { "line 1", "'state_dir'", "control characters", "\"/var/lib/a\\nb\"" } },
        { "socket: /run/taskpatch/0123456789012345678901234567890123456789012345678901234567890123456789"
          "0123456789012345678901234567890123456789.sock\n",
          { "line 1", "'socket'", "at most 107 bytes", "found '/run/taskpatch/" } },
        /* what was found is shown escaped and cut */
        { "state_dir: " A32 A32 A32 "\n", { "line 1", "'state_dir'", "found '" A32 A32 "...'" } },
        { "trial:\n  health_url: \"" X01_8 X01_8 X01_8 "\"\n",
          { "line 2", "'health_url'", "found the quoted string \"\\x01\\x01", "\\x01...\"" } },
        /* unknown and duplicate keys */
        { "state_dir: /a\nstatedir: /b\n", { "line 2", "unknown key 'statedir'" } },
        { "trial:\n  timeout: 5\n  retries: 3\n", { "line 3", "unknown key 'retries'" } },
        { "trust:\n  ca: /a\n  crls: /b\n", { "line 3", "unknown key 'crls'" } },
        { "trust:\n  crl_expired: ignore\n", { "line 2", "'crl_expired'", "refuse or warn" } },
        { "trust:\n  threshold: 9\n", { "line 2", "'threshold'" } },
        { "trust:\n  bundle_threshold: 0\n", { "line 2", "'bundle_threshold'" } },
        { "trust:\n  crl: relative.crl\n", { "line 2", "'crl'" } },
        { "trust:\n  root_ca: relative.pem\n", { "line 2", "'root_ca'" } },
        { "trust:\n  max_version_jump: -1\n", { "line 2", "'max_version_jump'", "expected an integer" } },
        { "trust:\n  bundle_ca: relative.pem\n", { "line 2", "'bundle_ca'" } },
        { "verify: full\nverify: full\n", { "line 2", "duplicate key 'verify'" } },
        /* enums and URLs */
        { "verify: fast\n", { "line 1", "'verify'", "full or incremental", "found 'fast'" } },
        { "verify: FULL\n", { "line 1", "'verify'", "full or incremental", "found 'FULL'" } },
        { "trial:\n  health_url: ftp://host/health\n", { "line 2", "'health_url'", "http:// or https://", "'ftp:" } },
        { "trial:\n  health_url: localhost:8080/health\n", { "line 2", "'health_url'", "http://", "'localhost:" } },
        { "trial:\n  health_url: http://\n", { "line 2", "'health_url'", "http://", "found 'http://'" } },
        { "trial:\n  health_url: http://a b/\n", { "line 2", "'health_url'", "http://", "found 'http://a b/'" } },
        { "trial:\n  health_command: \" \"\n", { "line 2", "'health_command'", "a shell command", "\" \"" } },
        { "admin_group: \"task patch\"\n", { "line 1", "'admin_group'", "a group name", "\"task patch\"" } },
        { "admin_group: a:b\n", { "line 1", "'admin_group'", "a group name", "found 'a:b'" } },
        { "channel:\n  url: http://a/s.channel\n", { "line 2", "'url'", "needs allow_http: true", "'http://a/" } },
        { "channel:\n  url: [https://a/c, ftp://b/c]\n", { "line 2", "'url'", "an https:// URL", "'ftp://b/c'" } },
        { "channel:\n  url: []\n", { "line 2", "'url'", "a list of 1 to 8 URLs", "found a list" } },
        { "channel:\n  url: [a, b, c, d, e, f, g, h, i]\n", { "line 2", "'url'", "1 to 8 URLs", "a list" } },
        { "channel:\n  allow_http: yes\n", { "line 2", "'allow_http'", "true or false", "found 'yes'" } },
        { "channel:\n  interval: 0\n", { "line 2", "'interval'", "from 1 to 604800", "found '0'" } },
        { "channel:\n  low_speed_time: 0\n", { "line 2", "'low_speed_time'", "from 1 to 3600", "'0'" } },
        { "channel:\n  mirrors: 2\n", { "line 2", "unknown key 'mirrors'" } },
        { "tls:\n  ca: tls.pem\n", { "line 2", "'ca'", "an absolute path", "found 'tls.pem'" } },
        { "spool: spool/\n", { "line 1", "'spool'", "an absolute path", "found 'spool/'" } },
        { "hawkbit:\n  url: https://h\n", { "line 2", "'url' needs 'controller_id'" } },
        { "hawkbit:\n  url: http://h\n  controller_id: x\n", { "line 2", "'url'", "needs channel.allow_http" } },
        { "hawkbit:\n  controller_id: a/b\n", { "line 2", "'controller_id'", "letters, digits", "'a/b'" } },
        { "hawkbit:\n  url: https://h\n  controller_id: x\nchannel:\n  url: https://c/s.channel\n",
          { "a channel or a hawkBit server, not both" } },
        { "notify:\n  restart_units: [llama-server]\n", { "line 2", "'restart_units'", "unit names", "'llama-server'" } },
        { "notify:\n  reload_units: [\"a b.service\"]\n", { "line 2", "'reload_units'", "unit names" } },
        { "notify:\n  exec: \" \"\n", { "line 2", "'exec'", "a shell command" } },
        /* the wrong shape */
        { "trial: [1, 2]\n", { "line 1", "'trial'", "expected a mapping", "found a list" } },
        { "trial:\n  - timeout: 5\n", { "line 2", "'trial'", "expected a mapping", "found a list" } },
        { "trust: /etc/taskpatch/ca.pem\n", { "line 1", "'trust'", "expected a mapping", "found '/etc/task" } },
        { "- state_dir: /a\n", { "line 1", "expected a mapping of settings", "found a list" } },
        { "just a string\n", { "line 1", "expected a mapping of settings", "found a scalar" } },
        /* YAML syntax */
        { "state_dir: /a\n socket: /b\n", { "line 2", "mapping values are not allowed" } },
        { "trial:\n  timeout: [5\nverify: full\n", { "line 3", "test.yaml" } },
        { "state_dir: &a /a\nsocket: *a\n", { "line 1", "anchors are not allowed" } },
        { "state_dir: /a\n---\nstate_dir: /b\n", { "line 2", "only one YAML document" } },
        /* model_path must not name what the daemon owns (found from outside: provision destroyed slot a) */
        { "state_dir: /s\nmodel_path: /s/slots/a.gguf\n", { "model_path /s/slots/a.gguf", "lies in /s/slots",
                                                             "which the daemon owns" } },
        { "state_dir: /s\nmodel_path: /s/state.json\n", { "lies in /s/state.json", "which the daemon owns" } },
        { "state_dir: /s/\nmodel_path: /s//./tasks/json/1.tpb\n", { "lies in /s/tasks" } },
        { "state_dir: /s\nmodel_path: /s/floor.json\n", { "lies in /s/floor.json" } },
        { "state_dir: /s\nmodel_path: /s/downloads/x\n", { "lies in /s/downloads" } },
        { "state_dir: /s\nmodel_path: /s/taskpatchd.lock\n", { "lies in /s/taskpatchd.lock" } },
        { "state_dir: /s/m\nmodel_path: /s\n", { "is the state directory /s/m or holds it" } },
        { "state_dir: /s\nmodel_path: /run/x.sock\nsocket: /run/x.sock\n", { "model_path and socket" } },
        { "model_path: /in/a.gguf\nspool: /in\n", { "lies in the spool folder /in" } },
        /* models: */
        { "models:\n  llm:\n    trial:\n      timeout: 5\n", { "line 3", "models: 'llm' has no model_path" } },
        { "models:\n  LLM:\n    model_path: /m/llm.gguf\n", { "line 2", "'LLM' is no model name" } },
        { "models:\n  ../x:\n    model_path: /m/llm.gguf\n", { "line 2", "'../x' is no model name" } },
        { "models: {}\n", { "line 1", "an empty map" } },
        { "disk_budget: -1\n", { "line 1", "'disk_budget'", "an integer from 0 to 9223372036854775807" } },
        { "models:\n  llm:\n    model_path: /m/a.gguf\n    disk_budget: 2G\n", { "line 4", "'disk_budget'", "'2G'" } },
        { "models: [a, b]\n", { "line 1", "'models'", "expected a mapping" } },
        { "models:\n  llm: /m/llm.gguf\n", { "line 2", "models: 'llm': expected a mapping" } },
        { "models:\n  llm:\n    model_path: /m/llm.gguf\n    weights: 3\n", { "line 4", "unknown key 'weights'" } },
        { "models:\n  llm:\n    model_path: m.gguf\n", { "line 3", "'model_path'", "an absolute path" } },
        { "models:\n  llm:\n    model_path: /m/a.gguf\n    trial:\n      timeout: 0\n",
          { "line 5", "'timeout'", "from 1 to 604800" } },
        { "model_path: /m/a.gguf\nmodels:\n  llm:\n    model_path: /m/b.gguf\n",
          { "line 1", "model_path and models: both set" } },
        { "models:\n  llm:\n    model_path: /m/a\n  cam:\n    model_path: /m/a/cam.onnx\n",
          { "models 'llm' and 'cam'", "model_path /m/a and /m/a/cam.onnx overlap" } },
        { "models:\n  llm:\n    model_path: /m/a.gguf\n  cam:\n    model_path: /m//a.gguf\n", { "overlap" } },
        { "state_dir: /s\nmodels:\n  cam:\n    model_path: /s/models/x/cam.onnx\n",
          { "model 'cam'", "lies in /s/models", "which the daemon owns" } },
        { "models:\n  a0: {model_path: /m/0}\n  a1: {model_path: /m/1}\n  a2: {model_path: /m/2}\n"
          "  a3: {model_path: /m/3}\n  a4: {model_path: /m/4}\n  a5: {model_path: /m/5}\n  a6: {model_path: /m/6}\n"
          "  a7: {model_path: /m/7}\n  a8: {model_path: /m/8}\n  a9: {model_path: /m/9}\n  b0: {model_path: /m/10}\n"
          "  b1: {model_path: /m/11}\n  b2: {model_path: /m/12}\n  b3: {model_path: /m/13}\n"
          "  b4: {model_path: /m/14}\n  b5: {model_path: /m/15}\n  b6: {model_path: /m/16}\n",
          { "line 2", "17 models, at most 16" } },
};

/* A models: map: each model's state directory, model_path, and the top-level trial and notify
 * as defaults a model overrides key by key; the view a model's manager reads. */
START_TEST(test_models) {
        DaemonConfig c = {};

        ck_assert_int_eq(config_init(&c), 0);
        ck_assert_uint_eq(c.n_models, 1);             /* without the map: "default", of the top level */
        ck_assert_str_eq(c.models[0].name, CONFIG_DEFAULT_MODEL);
        ck_assert_str_eq(c.models[0].state_dir, c.state_dir);
        ck_assert_str_eq(c.models[0].model_path, c.model_path);
        ck_assert(!c.models_map);
        parse_ok("state_dir: /s\nmodel_path: /m/x.gguf\ntrial:\n  timeout: 9\ndisk_budget: 1000\n", &c);
        ck_assert_uint_eq(c.models[0].disk_budget, 1000);
        ck_assert_uint_eq(c.n_models, 1);
        ck_assert_str_eq(c.models[0].model_path, "/m/x.gguf");
        ck_assert_str_eq(c.models[0].state_dir, "/s");
        ck_assert_uint_eq(c.models[0].trial.timeout, 9);

        parse_ok("state_dir: /s\n"
                 "trial:\n  timeout: 30\n  health_url: http://127.0.0.1:8080/health\n"
                 "notify:\n  restart_units: [llm.service]\n  exec: logger x\n"
                 "disk_budget: 5000000000\n"
                 "models:\n"
                 "  default:\n    model_path: /m/llm.gguf\n"
                 "  detector:\n    model_path: /m/detector\n"
                 "    trial:\n      timeout: 10\n      health_url: \"\"\n"
                 "    notify:\n      restart_units: [cam.service, cam-ui.service]\n"
                 "    disk_budget: 200000000\n",
                 &c);
        ck_assert(c.models_map);
        ck_assert_uint_eq(c.n_models, 2);
        const ModelConfig *llm = config_find_model(&c, "default"), *det = config_find_model(&c, "detector");
        ck_assert_ptr_eq(llm, &c.models[0]);
        ck_assert_ptr_eq(det, &c.models[1]);
        ck_assert_ptr_null(config_find_model(&c, "camera"));
        ck_assert_str_eq(llm->state_dir, "/s");                       /* "default" keeps the top level's state */
        ck_assert_str_eq(det->state_dir, "/s/models/detector");
        ck_assert_uint_eq(llm->trial.timeout, 30);
        ck_assert_str_eq(llm->trial.health_url, "http://127.0.0.1:8080/health");
        ck_assert_uint_eq(det->trial.timeout, 10);
        ck_assert_ptr_null(det->trial.health_url);                     /* "" unsets the inherited one */
        ck_assert_uint_eq(llm->notify.n_restart_units, 1);
        ck_assert_uint_eq(det->notify.n_restart_units, 2);            /* a list is replaced, not appended to */
        ck_assert_str_eq(det->notify.restart_units[1], "cam-ui.service");
        ck_assert_str_eq(det->notify.exec, "logger x");
        ck_assert_uint_eq(llm->disk_budget, 5000000000u);             /* the top level's */
        ck_assert_uint_eq(det->disk_budget, 200000000u);

        DaemonConfig v = config_model_view(&c, 1);
        ck_assert_str_eq(v.state_dir, "/s/models/detector");
        ck_assert_str_eq(v.model_path, "/m/detector");
        ck_assert_uint_eq(v.trial.timeout, 10);
        ck_assert_uint_eq(v.notify.n_restart_units, 2);
        ck_assert_uint_eq(v.disk_budget, 200000000u);
        ck_assert_str_eq(v.socket, c.socket);                          /* the rest is the daemon's */

        /* A refused document leaves the map as it was. */
        TpError err = {};
        ck_assert_int_lt(config_parse("models:\n  x: {}\n", 16, "t", &c, &err), 0);
        ck_assert_uint_eq(c.n_models, 2);
        ck_assert_str_eq(c.models[1].name, "detector");
        /* A state_dir of "/": the models' directories are still /models/NAME. */
        parse_ok("state_dir: /\nmodels:\n  cam:\n    model_path: /m/cam.onnx\n", &c);
        ck_assert_str_eq(c.models[0].state_dir, "/models/cam");
        config_done(&c);
}
END_TEST

/* Where model_path may be: beside the daemon's own entries, or anywhere else. */
START_TEST(test_model_path_allowed) {
        static const char *const ok[] = {
                "state_dir: /s\nmodel_path: /s/model.gguf\n",
                "state_dir: /s\nmodel_path: /s/slotsx/model.gguf\n",
                "state_dir: /s\nmodel_path: /srv/model.gguf\n",
                "state_dir: /s\nmodel_path: /models/s/slots/a.gguf\n",
        };
        for (size_t i = 0; i < ELEMENTSOF(ok); i++) {
                DaemonConfig c = {};
                ck_assert_int_eq(config_init(&c), 0);
                parse_ok(ok[i], &c);
                config_done(&c);
        }
}
END_TEST

START_TEST(test_refusals) {
        DaemonConfig c = {}, before = {};
        TpError err = {};
        const char *text = bad_cases[_i].text;

        /* A previous configuration that differs from the defaults in every field. */
        parse_ok(all_keys, &c);
        parse_ok(all_keys, &before);
        int r = config_parse(text, strlen(text), "test.yaml", &c, &err);
        ck_assert_msg(r < 0, "case %d parsed: %s", _i, text);
        ck_assert_int_eq(err.code, r);
        ck_assert_msg(strncmp(err.message, "test.yaml: ", 11) == 0, "case %d: '%s' does not name the document", _i,
                      err.message);
        for (size_t w = 0; w < ELEMENTSOF(bad_cases[_i].words) && bad_cases[_i].words[w]; w++)
                ck_assert_msg(strstr(err.message, bad_cases[_i].words[w]), "case %d: '%s' lacks '%s'", _i,
                              err.message, bad_cases[_i].words[w]);
        config_assert_eq(&c, &before);
        config_done(&c);
        config_done(&before);
}
END_TEST

/* Every prefix of a full document either parses or is refused cleanly (ASan watches the rest). */
START_TEST(test_truncations) {
        DaemonConfig c = {};
        size_t len = strlen(all_keys);

        ck_assert_int_eq(config_init(&c), 0);
        for (size_t cut = 0; cut <= len; cut++) {
                TpError err = {};
                int r = config_parse(all_keys, cut, "cut.yaml", &c, &err);
                ck_assert_msg(r == 0 || (r < 0 && err.message[0]), "cut %zu: %d without a message", cut, r);
        }
        config_done(&c);
}
END_TEST

static char tmpdir[64];

static void tmpdir_setup(void) {
        snprintf(tmpdir, sizeof(tmpdir), "/tmp/check_config.XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void tmpdir_teardown(void) {
        char p[128];
        snprintf(p, sizeof(p), "%s/taskpatchd.yaml", tmpdir);
        unlink(p);
        rmdir(tmpdir);
}

static void write_file(const char *path, const char *text, size_t len) {
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write(fd, text, len), (ssize_t) len);
        close(fd);
}

static void write_str(const char *path, const char *text) {
        write_file(path, text, strlen(text));
}

START_TEST(test_load) {
        DaemonConfig c = {}, before = {};
        TpError err = {};
        char path[128];

        snprintf(path, sizeof(path), "%s/taskpatchd.yaml", tmpdir);
        parse_ok(all_keys, &before);

        /* A good file. */
        write_str(path, "trial:\n  timeout: 30\n");
        ck_assert_int_eq(config_init(&c), 0);
        ck_assert_msg(config_load(path, &c, &err) == 0, "%s", err.message);
        ck_assert_uint_eq(c.trial.timeout, 30);
        config_done(&c);

        /* A bad value names the file, the line and the key. */
        parse_ok(all_keys, &c);
        write_str(path, "verify: full\nkeep_versions: many\n");
        ck_assert_int_lt(config_load(path, &c, &err), 0);
        ck_assert_ptr_nonnull(strstr(err.message, path));
        ck_assert_msg(strstr(err.message, ": line 2: 'keep_versions': expected an integer from 1 to 1000, "
                                          "found 'many'"),
                      "%s", err.message);
        config_assert_eq(&c, &before);

        /* A FIFO is refused at once (found from outside: it hung), naming what it is. */
        char fifo[160];
        snprintf(fifo, sizeof(fifo), "%s/fifo.yaml", tmpdir);
        ck_assert_int_eq(mkfifo(fifo, 0600), 0);
        ck_assert_int_eq(config_load(fifo, &c, &err), -EINVAL);
        ck_assert_msg(strstr(err.message, "not a regular file (a FIFO)"), "%s", err.message);
        config_assert_eq(&c, &before);

        /* The files a configuration names: a FIFO as trust.ca is refused; a missing one is reported. */
        DaemonConfig f = {};
        const char *missing = NULL;
        ck_assert_int_eq(config_init(&f), 0);
        free(f.trust.ca);
        f.trust.ca = strdup(fifo);
        ck_assert_int_eq(config_check_files(&f, &missing, &err), -EINVAL);
        ck_assert_msg(strstr(err.message, "trust.ca") && strstr(err.message, "FIFO"), "%s", err.message);
        free(f.trust.ca);
        f.trust.ca = strdup("/nonexistent/ca.pem");
        ck_assert_int_eq(config_check_files(&f, &missing, &err), 0);
        ck_assert_str_eq(missing, "trust.ca");
        /* Every role with CAs of its own: trust.ca is not used, its absence no matter. */
        f.trust.bundle_ca = strdup(path);
        f.trust.root_ca = strdup(path);
        f.trust.channel_ca = strdup("/nonexistent/channel-ca.pem");
        missing = NULL;
        ck_assert_int_eq(config_check_files(&f, &missing, &err), 0);
        ck_assert_str_eq(missing, "trust.channel_ca");
        free(f.trust.channel_ca);
        f.trust.channel_ca = strdup(path);
        missing = NULL;
        ck_assert_int_eq(config_check_files(&f, &missing, &err), 0);
        ck_assert_ptr_null(missing);
        /* trust.crl may be a directory; one that does not exist is reported (every chain would fail). */
        f.trust.crl = strdup(tmpdir);
        ck_assert_int_eq(config_check_files(&f, &missing, &err), 0);
        ck_assert_ptr_null(missing);
        free(f.trust.crl);
        f.trust.crl = strdup("/nonexistent/ca.crl");
        ck_assert_int_eq(config_check_files(&f, &missing, &err), 0);
        ck_assert_str_eq(missing, "trust.crl");
        free(f.trust.crl);
        f.trust.crl = NULL;
        free(f.trust.ca);
        f.trust.ca = strdup(path);
        ck_assert_int_eq(config_check_files(&f, &missing, &err), 0);
        ck_assert_ptr_null(missing);
        config_done(&f);
        unlink(fifo);

        /* One byte over the cap, even of comments only. */
        size_t big = CONFIG_MAX_BYTES + 1;
        char *text = malloc(big);
        ck_assert_ptr_nonnull(text);
        memset(text, '#', big);
        write_file(path, text, big);
        ck_assert_int_eq(config_load(path, &c, &err), -EFBIG);
        ck_assert_ptr_nonnull(strstr(err.message, path));
        ck_assert_msg(strstr(err.message, "262145 bytes exceed the 262144-byte cap"), "%s", err.message);
        config_assert_eq(&c, &before);
        /* The same through config_parse. */
        ck_assert_int_eq(config_parse(text, big, "big.yaml", &c, &err), -EFBIG);
        ck_assert_msg(strstr(err.message, "big.yaml: 262145 bytes exceed the 262144-byte cap"), "%s", err.message);
        free(text);

        /* Exactly at the cap is fine. */
        ck_assert_int_eq(truncate(path, CONFIG_MAX_BYTES), 0);
        ck_assert_msg(config_load(path, &c, &err) == 0, "%s", err.message);
        config_done(&c);
        parse_ok(all_keys, &c);

        /* A missing file, a directory. */
        ck_assert_int_eq(unlink(path), 0);
        ck_assert_int_eq(config_load(path, &c, &err), -ENOENT);
        ck_assert_ptr_nonnull(strstr(err.message, path));
        ck_assert_msg(strstr(err.message, "No such file or directory"), "%s", err.message);
        ck_assert_int_eq(config_load(tmpdir, &c, &err), -EISDIR);
        ck_assert_ptr_nonnull(strstr(err.message, tmpdir));
        config_assert_eq(&c, &before);

        /* A stream (a pipe, opened again through /dev/fd) is no configuration file: refused before reading. */
        int p[2];
        ck_assert_int_eq(pipe(p), 0);
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                static char hashes[4096];
                close(p[0]);
                memset(hashes, '#', sizeof(hashes));
                for (size_t sent = 0; sent < CONFIG_MAX_BYTES + sizeof(hashes); sent += sizeof(hashes))
                        if (write(p[1], hashes, sizeof(hashes)) != (ssize_t) sizeof(hashes))
                                _exit(1);
                _exit(0);
        }
        close(p[1]);
        char fdpath[32];
        snprintf(fdpath, sizeof(fdpath), "/dev/fd/%d", p[0]);
        ck_assert_int_eq(config_load(fdpath, &c, &err), -EINVAL);
        ck_assert_msg(strstr(err.message, "not a regular file (a FIFO)"), "%s", err.message);
        close(p[0]);
        ck_assert_int_eq(waitpid(pid, NULL, 0), pid);
        config_assert_eq(&c, &before);

        config_done(&c);
        config_done(&before);
}
END_TEST

/* The documented example is exactly the defaults. */
START_TEST(test_example_file) {
        DaemonConfig c = {}, d = {};
        TpError err = {};
        struct stat st;

        ck_assert_msg(stat(EXAMPLE_PATH, &st) == 0, "run the tests from the repository root (%s)", EXAMPLE_PATH);
        parse_ok(all_keys, &c);
        ck_assert_msg(config_load(EXAMPLE_PATH, &c, &err) == 0, "%s", err.message);
        ck_assert_int_eq(config_init(&d), 0);
        config_assert_eq(&c, &d);
        config_done(&c);
        config_done(&d);
}
END_TEST

/* Every key the parser knows appears in the example (uncommented), so the file documents them all. */
START_TEST(test_example_has_every_key) {
        static const char *const keys[] = { "\nstate_dir: ", "\nsocket: ", "\nadmin_group: ", "\nmodel_path: ",
                                            "\ntrust:\n", "\n  ca: ", "\ntrial:\n", "\n  timeout: ",
                                            "\n  health_command: ", "\n  health_url: ", "\n  health_interval: ",
                                            "\nkeep_versions: ", "\nverify: ", "\nscrub_interval: ", "\nlimits:\n",
                                            "\n  manifest_bytes: ", "\n  manifest_spans: ", "\nchannel:\n",
                                            "\n  url: ", "\n  interval: ", "\n  max_download_rate: ",
                                            "\n  low_speed_time: ", "\n  allow_http: ", "\ntls:\n", "\nspool: ",
                                            "\nhawkbit:\n", "\n  tenant: ", "\n  controller_id: ",
                                            "\n  token_file: ", "\nnotify:\n", "\n  restart_units: ",
                                            "\n  reload_units: ", "\n  exec: ", "\n# models:\n",
                                            "\ndisk_budget: " };
        char text[16384];
        FILE *f = fopen(EXAMPLE_PATH, "re");

        ck_assert_ptr_nonnull(f);
        text[0] = '\n';
        size_t n = fread(text + 1, 1, sizeof(text) - 2, f);
        fclose(f);
        text[n + 1] = '\0';
        for (size_t i = 0; i < ELEMENTSOF(keys); i++)
                ck_assert_msg(strstr(text, keys[i]), "%s lacks '%s'", EXAMPLE_PATH, keys[i] + 1);
}
END_TEST

START_TEST(test_done) {
        DaemonConfig c = {};

        config_done(&c);  /* zero-filled */
        config_done(NULL);
        ck_assert_int_eq(config_init(&c), 0);
        config_done(&c);
        ck_assert_ptr_null(c.state_dir);
        config_done(&c);  /* twice */

        /* config_parse into a zero-filled struct works too. */
        parse_ok("keep_versions: 3\n", &c);
        ck_assert_uint_eq(c.keep_versions, 3);
        ck_assert_str_eq(c.socket, "/run/taskpatch/taskpatchd.sock");

        /* Without a TpError the code alone says what went wrong. */
        ck_assert_int_eq(config_parse("verify: x\n", 10, "t", &c, NULL), -EBADMSG);
        ck_assert_uint_eq(c.keep_versions, 3);
        config_done(&c);
}
END_TEST

START_TEST(test_verify_mode_names) {
        for (VerifyMode m = 0; m < _VERIFY_MODE_MAX; m++)
                ck_assert_int_eq(verify_mode_from_string(verify_mode_to_string(m)), m);
        ck_assert_str_eq(verify_mode_to_string(VERIFY_FULL), "full");
        ck_assert_str_eq(verify_mode_to_string(VERIFY_INCREMENTAL), "incremental");
        ck_assert_ptr_null(verify_mode_to_string(_VERIFY_MODE_MAX));
        ck_assert_ptr_null(verify_mode_to_string(_VERIFY_MODE_INVALID));
        ck_assert_int_eq(verify_mode_from_string("Full"), _VERIFY_MODE_INVALID);
        ck_assert_int_eq(verify_mode_from_string(""), _VERIFY_MODE_INVALID);
        ck_assert_int_eq(verify_mode_from_string(NULL), _VERIFY_MODE_INVALID);
}
END_TEST

static Suite *config_suite(void) {
        Suite *s = suite_create("config");
        TCase *tc = tcase_create("config");
        TCase *files = tcase_create("files");

        tcase_add_test(tc, test_defaults);
        tcase_add_loop_test(tc, test_empty, 0, (int) ELEMENTSOF(empty_docs));
        tcase_add_test(tc, test_all_keys);
        tcase_add_test(tc, test_unset_and_edges);
        tcase_add_loop_test(tc, test_refusals, 0, (int) ELEMENTSOF(bad_cases));
        tcase_add_test(tc, test_truncations);
        tcase_add_test(tc, test_model_path_allowed);
        tcase_add_test(tc, test_models);
        tcase_add_test(tc, test_done);
        tcase_add_test(tc, test_verify_mode_names);
        suite_add_tcase(s, tc);

        tcase_add_checked_fixture(files, tmpdir_setup, tmpdir_teardown);
        tcase_add_test(files, test_load);
        tcase_add_test(files, test_example_file);
        tcase_add_test(files, test_example_has_every_key);
        suite_add_tcase(s, files);
        return s;
}

CHECK_MAIN(config_suite)
