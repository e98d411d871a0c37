/* SPDX-License-Identifier: MIT */
/*
 * daemon/taskpatchd-fetch.c on a real event loop against a fake host (tests/unit/fake-host.h),
 * without a network (test-fleet.sh has the round trips), once a channel is verified: what it
 * submits to the host, when, and what it reports as the update's outcome; a device of several
 * models. The decisions on plain data are in check_fetch_plan.c.
 */

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>

#include "check-main.h"
#include "fake-host.h"
#include "fetch-channel.h"
#include "taskpatchd-fetch.h"

#define URL "https://127.0.0.1:9/stable.channel"

/* ---- the fetcher on a loop, once a channel is verified ---- */

typedef struct Fixture {
        char root[64];
        DaemonConfig config;
        char *urls[1];
        sd_event *e;
        CurlGlue *glue;
        FakeHost fake;
        Fetcher *f;
        FetchModel *fm;                 /* its one model */
} Fixture;

static void setup(Fixture *fx) {
        TpError err = {};

        *fx = (Fixture) {};
        snprintf(fx->root, sizeof(fx->root), "/tmp/check-fetch.XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(fx->root));
        fx->config.state_dir = fx->root;
        fx->config.channel.urls[0] = (char *) URL;
        fx->config.channel.n_urls = 1;
        fx->config.channel.interval = 300;
        fx->config.channel.low_speed_time = 60;
        ck_assert_int_ge(sd_event_new(&fx->e), 0);
        ck_assert_int_eq(curl_glue_new(fx->e, &fx->glue), 0);
        fake_host_init(&fx->fake);
        SourceTarget target = { &fx->config, &fx->fake.host };
        ck_assert_int_eq(fetcher_new(fx->e, &target, 1, fx->glue, &fx->f, &err), 0);
        ck_assert_ptr_nonnull(fx->f);
        fx->fm = fetcher_model(fx->f, 0);
}

static void teardown(Fixture *fx) {
        char cmd[128];
        fetcher_free(fx->f);
        curl_glue_free(fx->glue);
        sd_event_unref(fx->e);
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", fx->root);
        ck_assert_int_eq(system(cmd), 0);
}

/* The status field at @path ("update.result"), as a string; "" when absent or null. */
static const char *status_str(Fixture *fx, const char *key, const char *sub, char *buf, size_t n) {
        json_t *o = fetcher_status(fx->fm), *v = json_object_get(o, key);
        if (sub)
                v = json_object_get(v, sub);
        snprintf(buf, n, "%s", json_is_string(v) ? json_string_value(v) : "");
        json_decref(o);
        return buf;
}

#define STATUS(fx, key, sub) status_str(fx, key, sub, (char[TP_ERROR_MAX]) {}, TP_ERROR_MAX)

/* A verified channel listing json v1 and v2, desired json, at @serial. */
static int take(Fixture *fx, uint64_t serial) {
        const B bs[] = { OURS("json", 1), OURS("json", 2) };
        TpError err = {};
        int r = fetcher_take_channel(fx->f, make_channel(serial, "json", bs, 2), URL, &err);
        pump(fx->e, 30);
        return r;
}

static void outcome(Fixture *fx, int r, bool on_trial) {
        OperationOutcome o = { .transaction = fx->fake.transaction, .cmd = "switch", .task = "json", .version = 2,
                               .r = r, .error = r < 0 ? "staging failed (fake)" : NULL, .on_trial = on_trial };
        fetcher_source.operation_done(fx->fm, &o);
        pump(fx->e, 30);
}

START_TEST(test_not_configured) {
        DaemonConfig config = {};
        FakeHost fake;
        Fetcher *f = (Fetcher *) 1;
        sd_event *e = NULL;
        TpError err = {};

        fake_host_init(&fake);
        ck_assert_int_ge(sd_event_new(&e), 0);
        SourceTarget target = { &config, &fake.host };
        ck_assert_int_eq(fetcher_new(e, &target, 1, NULL, &f, &err), 0);
        ck_assert_ptr_null(f);
        sd_event_unref(e);
}
END_TEST

START_TEST(test_switch_committed) {
        Fixture fx;

        setup(&fx);
        fake_add_installed(&fx.fake, "json", 2);
        ck_assert_int_eq(take(&fx, 5), 0);
        ck_assert_uint_eq(fx.fake.ps.channel_serial, 5);
        ck_assert_uint_eq(fx.fake.installs, 0);
        ck_assert_uint_eq(fx.fake.switches, 1);
        ck_assert_str_eq(fx.fake.last_switch_task, "json");
        ck_assert_uint_eq(fx.fake.last_switch_version, 2);
        ck_assert_int_eq(fx.fake.last_switch_origin, ORIGIN_CHANNEL);
        ck_assert_str_eq(STATUS(&fx, "state", NULL), "switching");
        ck_assert_str_eq(STATUS(&fx, "name", NULL), "stable");
        ck_assert_str_eq(STATUS(&fx, "desired", NULL), "json");
        ck_assert_str_eq(STATUS(&fx, "update", "result"), "pending");

        /* Another operation ends meanwhile: not ours, nothing changes. */
        OperationOutcome other = { .transaction = "0123456789abcdef0123456789abcdef", .cmd = "install",
                                   .task = "shout", .version = 1 };
        fetcher_source.operation_done(fx.fm, &other);
        pump(fx.e, 30);
        ck_assert_str_eq(STATUS(&fx, "update", "result"), "pending");

        /* Staged, on trial: "success" only once the trial commits. */
        outcome(&fx, 0, true);
        ck_assert_str_eq(STATUS(&fx, "state", NULL), "switching");
        ck_assert_str_eq(STATUS(&fx, "update", "result"), "pending");
        snprintf(fx.fake.device.active_task, sizeof(fx.fake.device.active_task), "json");
        fx.fake.device.active_version = 2;
        fetcher_source.trial_done(fx.fm, fx.fake.transaction, true, "health check passed");
        pump(fx.e, 30);
        ck_assert_str_eq(STATUS(&fx, "state", NULL), "idle");
        ck_assert_str_eq(STATUS(&fx, "update", "result"), "success");
        ck_assert_uint_eq(fx.fake.switches, 1);         /* it runs: nothing more to do */
        teardown(&fx);
}
END_TEST

START_TEST(test_switch_rolled_back) {
        Fixture fx;

        setup(&fx);
        fake_add_installed(&fx.fake, "json", 2);
        ck_assert_int_eq(take(&fx, 5), 0);
        ck_assert_uint_eq(fx.fake.switches, 1);
        outcome(&fx, 0, true);
        fetcher_source.trial_done(fx.fm, fx.fake.transaction, false, "health check failed: HTTP 500");
        pump(fx.e, 30);
        ck_assert_str_eq(STATUS(&fx, "update", "result"), "failure");
        ck_assert_str_eq(STATUS(&fx, "update", "reason"), "health check failed: HTTP 500");
        /* Not tried again under this serial, whatever wakes the fetcher. */
        fetcher_source.idle(fx.fm);
        ck_assert_int_eq(take(&fx, 5), 0);
        ck_assert_uint_eq(fx.fake.switches, 1);
        /* A new serial: tried again. */
        ck_assert_int_eq(take(&fx, 6), 0);
        ck_assert_uint_eq(fx.fake.switches, 2);
        teardown(&fx);
}
END_TEST

START_TEST(test_switch_failed) {
        Fixture fx;

        setup(&fx);
        fake_add_installed(&fx.fake, "json", 2);
        ck_assert_int_eq(take(&fx, 5), 0);
        outcome(&fx, -EIO, false);
        ck_assert_str_eq(STATUS(&fx, "state", NULL), "idle");
        ck_assert_str_eq(STATUS(&fx, "update", "result"), "failure");
        ck_assert_str_eq(STATUS(&fx, "last_error", NULL), "switch json v2: staging failed (fake)");
        ck_assert_str_eq(fx.fake.last_error_code, "channel");
        fetcher_source.idle(fx.fm);
        pump(fx.e, 30);
        ck_assert_uint_eq(fx.fake.switches, 1);
        teardown(&fx);
}
END_TEST

START_TEST(test_switch_refused_at_once) {
        Fixture fx;

        setup(&fx);
        fake_add_installed(&fx.fake, "json", 2);
        fx.fake.switch_result = -EBADMSG;
        ck_assert_int_eq(take(&fx, 5), 0);
        ck_assert_uint_eq(fx.fake.switches, 1);
        ck_assert_str_eq(STATUS(&fx, "state", NULL), "idle");
        ck_assert_str_eq(STATUS(&fx, "update", "result"), "failure");
        ck_assert_str_eq(STATUS(&fx, "last_error", NULL), "switch to json v2: the switch is refused (fake)");
        fetcher_source.idle(fx.fm);
        pump(fx.e, 30);
        ck_assert_uint_eq(fx.fake.switches, 1);
        teardown(&fx);
}
END_TEST

START_TEST(test_replayed_serial) {
        Fixture fx;

        setup(&fx);
        fake_add_installed(&fx.fake, "json", 2);
        fx.fake.switch_result = 0;      /* what runs: the fetcher stays idle */
        ck_assert_int_eq(take(&fx, 5), 0);
        unsigned errors = fx.fake.errors;
        ck_assert_int_eq(fx.fake.ps.time_floor, 1700000005);  /* the clock is not trusted before its time */
        ck_assert_int_eq(take(&fx, 4), -ESTALE);
        ck_assert_uint_eq(fx.fake.ps.channel_serial, 5);
        ck_assert_int_eq(fx.fake.ps.time_floor, 1700000005);  /* a replay moves nothing */
        ck_assert_uint_eq(fx.fake.errors, errors + 1);
        ck_assert_str_eq(fx.fake.last_error_code, "channel");
        const char *e = STATUS(&fx, "last_error", NULL);
        ck_assert_msg(strstr(e, URL ": serial 4 is older than the accepted 5 (a replayed channel): refused"), "%s", e);
        json_t *st = fetcher_status(fx.fm);
        ck_assert_int_eq(json_integer_value(json_object_get(st, "serial")), 5);
        json_decref(st);
        teardown(&fx);
}
END_TEST

START_TEST(test_serial_not_recorded) {
        Fixture fx;

        setup(&fx);
        fx.fake.save_fails = true;
        ck_assert_int_eq(take(&fx, 5), -EIO);
        const char *e = STATUS(&fx, "last_error", NULL);
        ck_assert_msg(strstr(e, "cannot record the channel's serial: state.json: No space left"), "%s", e);
        ck_assert_str_eq(STATUS(&fx, "name", NULL), "");       /* not followed */
        ck_assert_uint_eq(fx.fake.switches, 0);
        teardown(&fx);
}
END_TEST

START_TEST(test_pinned) {
        Fixture fx;
        TpError err = {};
        bool unpinned;

        setup(&fx);
        fake_add_installed(&fx.fake, "json", 2);
        ck_assert_int_eq(policy_channel_serial(&fx.fake.ps, 5, &unpinned, &err), 1);
        ck_assert(policy_pin(&fx.fake.ps, ORIGIN_SOCKET, "switch", 0));
        ck_assert_int_eq(take(&fx, 5), 0);
        ck_assert_uint_eq(fx.fake.switches, 0);
        json_t *st = fetcher_status(fx.fm);
        ck_assert(json_is_true(json_object_get(st, "pinned")));
        json_decref(st);
        /* The channel's serial changes: the pin is gone, the desired task is switched to. */
        ck_assert_int_eq(take(&fx, 6), 0);
        ck_assert(!fx.fake.ps.pinned);
        ck_assert_uint_eq(fx.fake.switches, 1);
        teardown(&fx);
}
END_TEST

START_TEST(test_waits_for_idle) {
        Fixture fx;

        setup(&fx);
        fake_add_installed(&fx.fake, "json", 2);
        fx.fake.can_start = false;
        ck_assert_int_eq(take(&fx, 5), 0);
        ck_assert_uint_eq(fx.fake.switches, 0);
        ck_assert_str_eq(STATUS(&fx, "state", NULL), "idle");
        fx.fake.can_start = true;
        fetcher_source.idle(fx.fm);
        pump(fx.e, 30);
        ck_assert_uint_eq(fx.fake.switches, 1);
        teardown(&fx);
}
END_TEST

/* A bundle whose bytes are all on disk already (an earlier run) is installed at once, with its switch. */
/* A download whose bytes are all on disk already (an earlier run): <downloads>/@name.part holding
 * "hello", its path in @part, its SHA-256 in @sha256. */
static void downloaded(Fixture *fx, const char *name, char part[192], uint8_t sha256[SHA256_DIGEST_SIZE]) {
        char dir[128];
        Sha256 h;

        snprintf(dir, sizeof(dir), "%s/downloads", fx->root);
        snprintf(part, 192, "%s/%s.part", dir, name);
        ck_assert_int_eq(mkdir(dir, 0750), 0);
        int fd = open(part, O_WRONLY | O_CREAT | O_CLOEXEC, 0640);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write(fd, "hello", 5), 5);
        close(fd);
        sha256_init(&h);
        sha256_update(&h, "hello", 5);
        sha256_final(&h, sha256);
}

START_TEST(test_install_downloaded) {
        Fixture fx;
        const B bs[] = { OURS("json", 2), OURS("shout", 1) };
        char part[192];
        TpError err = {};
        struct stat st;

        setup(&fx);
        Channel *c = make_channel(5, "json", bs, 2);
        downloaded(&fx, "json-2.tpb", part, c->bundles[0].sha256);
        ck_assert_int_eq(stat(part, &st), 0);
        ck_assert_int_eq(fetcher_take_channel(fx.f, c, URL, &err), 0);
        pump(fx.e, 30);

        ck_assert_uint_eq(fx.fake.installs, 1);
        ck_assert_uint_eq(fx.fake.last_install_st.st_ino, st.st_ino);
        ck_assert(fx.fake.last_install.then_switch);    /* the desired task */
        ck_assert(!fx.fake.last_install.allow_downgrade);
        ck_assert_int_eq(fx.fake.last_install.origin, ORIGIN_CHANNEL);
        ck_assert_str_eq(STATUS(&fx, "state", NULL), "switching");
        ck_assert_str_eq(STATUS(&fx, "update", "result"), "pending");

        /* Installed and on trial: the download goes (the store has its copy). */
        OperationOutcome o = { .transaction = fx.fake.transaction, .cmd = "switch", .task = "json", .version = 2,
                               .on_trial = true };
        fetcher_source.operation_done(fx.fm, &o);
        pump(fx.e, 30);
        ck_assert_int_eq(access(part, F_OK), -1);
        ck_assert_uint_eq(fx.fake.installs, 1);
        teardown(&fx);
}
END_TEST

/* A section on another base: its base bundle (on disk already) is installed and switched to, held to make that base. */
START_TEST(test_install_base_bundle) {
        Fixture fx;
        const B bs[] = { OURS("base", 2), OURS("json", 1) };
        char part[192];
        TpError err = {};

        setup(&fx);
        Channel *c = make_channel(5, "json", bs, 2);
        downloaded(&fx, "base-2.tpb", part, c->bundles[0].sha256);
        ChannelModel *cm = &c->models[0];
        cm->has_base = true;
        memset(cm->base_sha256, 0x22, SHA256_DIGEST_SIZE);
        c->bundles[0].role = MANIFEST_ROLE_BASE;
        memset(c->bundles[0].target_sha256, 0x22, SHA256_DIGEST_SIZE);
        memset(c->bundles[1].base_sha256, 0x22, SHA256_DIGEST_SIZE);   /* json: a task of the new base */
        ck_assert_int_eq(fetcher_take_channel(fx.f, c, URL, &err), 0);
        pump(fx.e, 30);

        ck_assert_uint_eq(fx.fake.installs, 1);
        ck_assert(fx.fake.last_install.then_switch);    /* a base bundle is switched to */
        ck_assert_ptr_nonnull(fx.fake.last_install.expect_target);
        ck_assert_uint_eq(fx.fake.last_install.expect_target[0], 0x22);
        ck_assert_str_eq(STATUS(&fx, "state", NULL), "switching");
        ck_assert_ptr_nonnull(strstr(STATUS(&fx, "decision", NULL), "replacing it with base bundle base v2"));
        teardown(&fx);
}
END_TEST

static Channel *make_channel2(uint64_t serial, const B *det, size_t n_det, const B *llm, size_t n_llm,
                              ChannelRollout llm_rollout) {
        Channel *c = make_channel(serial, NULL, det, n_det);
        c->format = CHANNEL_FORMAT;
        c->models = realloc(c->models, 2 * sizeof(ChannelModel));
        c->bundles = realloc(c->bundles, (n_det + n_llm) * sizeof(ChannelBundle));
        ck_assert(c->models && c->bundles);
        c->n_models = 2;
        c->models[0] = (ChannelModel) { .name = "det", .desired = "json", .n_bundles = n_det };
        c->models[1] = (ChannelModel) { .name = "llm", .desired = "json", .rollout = llm_rollout, .first = n_det,
                                        .n_bundles = n_llm };
        for (size_t i = 0; i < n_llm; i++) {
                ChannelBundle *b = &c->bundles[n_det + i];
                *b = (ChannelBundle) { .version = llm[i].version, .size = 5, .kind = llm[i].kind };
                snprintf(b->task, sizeof(b->task), "%s", llm[i].task);
                snprintf(b->path, sizeof(b->path), "llm-%s.tpb", llm[i].task);
                memset(b->base_sha256, llm[i].base, SHA256_DIGEST_SIZE);
        }
        for (size_t i = 0; i < n_det + n_llm; i++)
                snprintf(c->bundles[i].model, sizeof(c->bundles[i].model), "%s", i < n_det ? "det" : "llm");
        c->n_bundles = n_det + n_llm;
        return c;
}

/* One poll serves every model: each follows its own section, the rollout gates its model only. */
START_TEST(test_models) {
        const B det[] = { OURS("json", 3) }, llm[] = { OURS("json", 8) };
        DaemonConfig cfg[2] = {};
        FakeHost fake[2];
        Fetcher *f = NULL;
        sd_event *e = NULL;
        TpError err = {};

        ck_assert_int_ge(sd_event_new(&e), 0);
        for (size_t i = 0; i < 2; i++) {
                cfg[i].state_dir = (char *) "/nonexistent";
                cfg[i].channel.urls[0] = (char *) URL;
                cfg[i].channel.n_urls = 1;
                cfg[i].channel.interval = 300;
                cfg[i].device_id = (char *) "device-1";        /* cohort 71 for seed 7 */
                cfg[i].model = i == 0 ? "det" : "llm";
                cfg[i].model_index = i;
                fake_host_init(&fake[i]);
        }
        fake_add_installed(&fake[0], "json", 3);
        fake_add_installed(&fake[1], "json", 8);
        SourceTarget targets[2] = { { &cfg[0], &fake[0].host }, { &cfg[1], &fake[1].host } };
        ck_assert_int_eq(fetcher_new(e, targets, 2, NULL, &f, &err), 0);

        /* llm's rollout at 50%: this device (cohort 71) is out; det has none and switches. */
        ChannelRollout half = { .set = true, .percent = 50, .seed = 7 };
        ck_assert_int_eq(fetcher_take_channel(f, make_channel2(5, det, 1, llm, 1, half), URL, &err), 0);
        pump(e, 30);
        ck_assert_uint_eq(fake[0].ps.channel_serial, 5);
        ck_assert_uint_eq(fake[1].ps.channel_serial, 5);        /* both record the serial */
        ck_assert_uint_eq(fake[0].switches, 1);
        ck_assert_uint_eq(fake[0].last_switch_version, 3);
        ck_assert_uint_eq(fake[1].switches, 0);
        json_t *st = fetcher_status(fetcher_model(f, 1));
        json_t *ro = json_object_get(st, "rollout");
        ck_assert_int_eq(json_integer_value(json_object_get(ro, "cohort")), 71);
        ck_assert(json_is_false(json_object_get(ro, "included")));
        ck_assert_str_eq(json_string_value(json_object_get(st, "device_id_source")), "device_id");
        const char *why = json_string_value(json_object_get(st, "decision"));
        ck_assert_msg(strstr(why, "rollout at 50%: this device's cohort is 71, not in yet"), "%s", why);
        json_decref(st);

        /* Raised to 80%: the device joins; det, which runs its task, is left alone. */
        snprintf(fake[0].device.active_task, sizeof(fake[0].device.active_task), "json");
        fake[0].device.active_version = 3;
        OperationOutcome o = { .transaction = fake[0].transaction, .cmd = "switch", .task = "json", .version = 3 };
        fetcher_source.operation_done(fetcher_model(f, 0), &o);
        half.percent = 80;
        ck_assert_int_eq(fetcher_take_channel(f, make_channel2(6, det, 1, llm, 1, half), URL, &err), 0);
        pump(e, 30);
        ck_assert_uint_eq(fake[0].switches, 1);
        ck_assert_uint_eq(fake[1].switches, 1);
        ck_assert_uint_eq(fake[1].last_switch_version, 8);
        st = fetcher_status(fetcher_model(f, 1));
        ck_assert(json_is_true(json_object_get(json_object_get(st, "rollout"), "included")));
        json_decref(st);

        /* A replay is refused for every model, whichever recorded the higher serial. */
        fake[1].ps.channel_serial = 9;
        ck_assert_int_eq(fetcher_take_channel(f, make_channel2(7, det, 1, llm, 1, half), URL, &err), -ESTALE);
        ck_assert_uint_eq(fake[0].ps.channel_serial, 6);
        fetcher_free(f);
        sd_event_unref(e);
}
END_TEST

static Suite *fetch_suite(void) {
        Suite *s = suite_create("fetch");
        TCase *tc = tcase_create("fetcher");
        tcase_set_timeout(tc, 30);
        tcase_add_test(tc, test_not_configured);
        tcase_add_test(tc, test_switch_committed);
        tcase_add_test(tc, test_switch_rolled_back);
        tcase_add_test(tc, test_switch_failed);
        tcase_add_test(tc, test_switch_refused_at_once);
        tcase_add_test(tc, test_replayed_serial);
        tcase_add_test(tc, test_serial_not_recorded);
        tcase_add_test(tc, test_pinned);
        tcase_add_test(tc, test_waits_for_idle);
        tcase_add_test(tc, test_install_downloaded);
        tcase_add_test(tc, test_install_base_bundle);
        tcase_add_test(tc, test_models);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(fetch_suite)
