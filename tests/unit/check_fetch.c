/* SPDX-License-Identifier: MIT */
/*
 * daemon/taskpatchd-fetch.c against a fake host (tests/unit/fake-host.h), without a
 * network (test-fleet.sh has the round trips): the decisions on plain data (which bundle
 * to download for this base, whether an install switches, what to switch to), the
 * manager's channel policy (taskpatchd-policy.c: a replayed serial, the technician's pin),
 * and the fetcher on a real event loop once a channel is verified: what it submits to the
 * host, when, and what it reports as the update's outcome.
 */

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>

#include "check-main.h"
#include "fake-host.h"
#include "taskpatchd-fetch.h"

#define URL "https://127.0.0.1:9/stable.channel"

typedef struct B {
        const char *task;
        uint64_t version;
        uint8_t base;                   /* every byte of its base_sha256 (the device's is 0x11) */
        ArtifactKind kind;
} B;

#define OURS(task, version) { task, version, 0x11, ARTIFACT_GGUF }

/* A format-1 channel as channel_parse() leaves one: @bs sorted by task, then version. */
static Channel *make_channel(uint64_t serial, const char *desired, const B *bs, size_t n) {
        Channel *c = calloc(1, sizeof(Channel));
        ck_assert_ptr_nonnull(c);
        snprintf(c->name, sizeof(c->name), "stable");
        c->format = CHANNEL_FORMAT_1;
        c->serial = serial;
        c->models = calloc(1, sizeof(ChannelModel));
        ck_assert_ptr_nonnull(c->models);
        c->n_models = 1;
        snprintf(c->models[0].desired, sizeof(c->models[0].desired), "%s", desired ? desired : "");
        c->models[0].n_bundles = n;
        c->bundles = calloc(n ? n : 1, sizeof(ChannelBundle));
        ck_assert_ptr_nonnull(c->bundles);
        for (size_t i = 0; i < n; i++) {
                ChannelBundle *b = &c->bundles[i];
                snprintf(b->task, sizeof(b->task), "%s", bs[i].task);
                b->version = bs[i].version;
                snprintf(b->path, sizeof(b->path), "%s-%llu.tpb", bs[i].task, (unsigned long long) bs[i].version);
                b->size = 5;
                b->kind = bs[i].kind;
                memset(b->base_sha256, bs[i].base, SHA256_DIGEST_SIZE);
        }
        c->n_bundles = n;
        return c;
}

/* ---- which bundle to download ---- */

typedef struct NextCase {
        const char *name;
        const char *desired;
        B bundles[4];
        size_t n;
        FakeInstalled installed, accepted, refused;
        const char *task;               /* expected; NULL: none */
        uint64_t version;
} NextCase;

static const NextCase next_cases[] = {
        { "made for this base", NULL, { OURS("json", 1) }, 1, {}, {}, {}, "json", 1 },
        { "made for another base", NULL, { { "json", 1, 0x22, ARTIFACT_GGUF } }, 1, {}, {}, {}, NULL, 0 },
        { "made for another kind", NULL, { { "json", 1, 0x11, ARTIFACT_ONNX } }, 1, {}, {}, {}, NULL, 0 },
        { "only the newest of a task", NULL, { OURS("json", 1), OURS("json", 2) }, 2, {}, {}, {}, "json", 2 },
        { "the newest for this base, when a newer one is for another", NULL,
          { OURS("json", 1), { "json", 2, 0x22, ARTIFACT_GGUF } }, 2, {}, {}, {}, "json", 1 },
        { "installed already", NULL, { OURS("json", 2) }, 1, { "json", 2 }, {}, {}, NULL, 0 },
        { "older than the installed", NULL, { OURS("json", 2) }, 1, { "json", 3 }, {}, {}, NULL, 0 },
        { "newer than the installed", NULL, { OURS("json", 3) }, 1, { "json", 2 }, {}, {}, "json", 3 },
        { "below the anti-rollback floor", NULL, { OURS("json", 3) }, 1, {}, { "json", 5 }, {}, NULL, 0 },
        { "at the floor (its bundle was removed)", NULL, { OURS("json", 3) }, 1, {}, { "json", 3 }, {}, "json", 3 },
        { "refused under this serial", NULL, { OURS("json", 2) }, 1, {}, {}, { "json", 2 }, NULL, 0 },
        { "another version than the refused one", NULL, { OURS("json", 3) }, 1, {}, {}, { "json", 2 }, "json", 3 },
        { "the channel's order without a desired task", NULL, { OURS("json", 1), OURS("shout", 1) }, 2, {}, {}, {},
          "json", 1 },
        { "the desired task first", "shout", { OURS("json", 1), OURS("shout", 1) }, 2, {}, {}, {}, "shout", 1 },
        { "the desired task is up to date: the others", "shout", { OURS("json", 1), OURS("shout", 1) }, 2,
          { "shout", 1 }, {}, {}, "json", 1 },
        { "an empty channel", "json", {}, 0, {}, {}, {}, NULL, 0 },
};

START_TEST(test_next_bundle) {
        const NextCase *t = &next_cases[_i];
        FakeHost fake;
        FetchRefused refused = {};

        fake_host_init(&fake);
        if (t->installed.task[0])
                fake_add_installed(&fake, t->installed.task, t->installed.version);
        if (t->accepted.task[0])
                ck_assert_int_eq(state_accept(&fake.ps, t->accepted.task, t->accepted.version), 1);
        if (t->refused.task[0])
                fetch_refused_add(&refused, t->refused.task, t->refused.version);
        Channel *c = make_channel(1, t->desired, t->bundles, t->n);
        const ChannelBundle *b = fetch_next_bundle(c, &c->models[0], &fake.device, &refused, &fake.host);
        if (!t->task)
                ck_assert_msg(!b, "%s: picked %s v%llu", t->name, b ? b->task : "", b ? (unsigned long long) b->version : 0);
        else {
                ck_assert_msg(b, "%s: picked nothing", t->name);
                ck_assert_msg(strcmp(b->task, t->task) == 0 && b->version == t->version, "%s: picked %s v%llu", t->name,
                              b->task, (unsigned long long) b->version);
        }
        channel_free(c);
}
END_TEST

START_TEST(test_refused_set) {
        FetchRefused r = {};
        char task[16];

        ck_assert(!fetch_refused_has(&r, "json", 1));
        for (unsigned i = 0; i < FETCH_REFUSED_MAX + 4; i++) {
                snprintf(task, sizeof(task), "t%u", i);
                fetch_refused_add(&r, task, i + 1);
        }
        ck_assert_uint_eq(r.n, FETCH_REFUSED_MAX);     /* capped: the rest are not remembered */
        ck_assert(fetch_refused_has(&r, "t0", 1));
        ck_assert(!fetch_refused_has(&r, "t0", 2));
        ck_assert(fetch_refused_has(&r, "t15", 16));
        ck_assert(!fetch_refused_has(&r, "t16", 17));
}
END_TEST

/* ---- whether to switch, and to what ---- */

START_TEST(test_then_switch) {
        const B bs[] = { OURS("json", 1), OURS("shout", 1) };
        Channel *c = make_channel(1, "json", bs, 2), *none = make_channel(1, NULL, bs, 2);
        ChannelView free_ = {}, pinned = { .have_serial = true, .serial = 1, .pinned = true };

        ck_assert(fetch_then_switch(&c->models[0], &free_, "json"));
        ck_assert(!fetch_then_switch(&c->models[0], &free_, "shout"));  /* installed only */
        ck_assert(!fetch_then_switch(&c->models[0], &pinned, "json"));  /* the technician's choice holds */
        ck_assert(!fetch_then_switch(&none->models[0], &free_, "json"));
        channel_free(c);
        channel_free(none);
}
END_TEST

typedef struct SwitchCase {
        const char *name;
        const char *desired;
        FakeInstalled installed;
        const char *active_task;
        uint64_t active_version;
        bool pinned, refused;
        bool expect;                    /* json v2 */
} SwitchCase;

static const SwitchCase switch_cases[] = {
        { "installed, the base runs", "json", { "json", 2 }, "", 0, false, false, true },
        { "another version of it runs", "json", { "json", 2 }, "json", 1, false, false, true },
        { "not installed yet", "json", {}, "", 0, false, false, false },
        { "only another version installed: never that one", "json", { "json", 1 }, "", 0, false, false, false },
        { "it runs already", "json", { "json", 2 }, "json", 2, false, false, false },
        { "its trial failed under this serial", "json", { "json", 2 }, "", 0, false, true, false },
        { "pinned by a technician's switch", "json", { "json", 2 }, "shout", 1, true, false, false },
        { "no desired task", NULL, { "json", 2 }, "", 0, false, false, false },
        { "the desired task is not in the channel", "lora", { "json", 2 }, "", 0, false, false, false },
};

START_TEST(test_switch_target) {
        const SwitchCase *t = &switch_cases[_i];
        const B bs[] = { OURS("json", 1), OURS("json", 2), OURS("shout", 1) };
        FakeHost fake;
        FetchRefused refused = {};
        ChannelView cv = { .have_serial = true, .serial = 1, .pinned = t->pinned };

        fake_host_init(&fake);
        if (t->installed.task[0])
                fake_add_installed(&fake, t->installed.task, t->installed.version);
        snprintf(fake.device.active_task, sizeof(fake.device.active_task), "%s", t->active_task);
        fake.device.active_version = t->active_version;
        if (t->refused)
                fetch_refused_add(&refused, "json", 2);
        Channel *c = make_channel(1, t->desired, bs, 3);
        const ChannelBundle *b = fetch_switch_target(c, &c->models[0], &fake.device, &cv, &refused, &fake.host);
        if (t->expect)
                ck_assert_msg(b && strcmp(b->task, "json") == 0 && b->version == 2, "%s: %s", t->name,
                              b ? b->task : "nothing");
        else
                ck_assert_msg(!b, "%s: switched to %s v%llu", t->name, b ? b->task : "",
                              b ? (unsigned long long) b->version : 0);
        channel_free(c);
}
END_TEST

/* ---- the manager's policy: the serial and the pin ---- */

START_TEST(test_policy_serial) {
        PersistentState ps = {};
        TpError err = {};
        bool unpinned = true;

        ck_assert_int_eq(policy_channel_serial(&ps, 5, &unpinned, &err), 1);     /* the first one */
        ck_assert(ps.have_channel && ps.channel_serial == 5 && !unpinned);
        ck_assert_int_eq(policy_channel_serial(&ps, 5, &unpinned, &err), 0);     /* the same again (a 200 after a restart) */
        ck_assert_int_eq(policy_channel_serial(&ps, 4, &unpinned, &err), -ESTALE);
        ck_assert_msg(strstr(err.message, "serial 4 is older than the accepted 5") && strstr(err.message, "replayed"),
                      "%s", err.message);
        ck_assert_uint_eq(ps.channel_serial, 5);
        ck_assert_int_eq(policy_channel_serial(&ps, 0, &unpinned, &err), -ESTALE);
        ck_assert_int_eq(policy_channel_serial(&ps, 9, &unpinned, &err), 1);     /* serials may jump */
        ck_assert_uint_eq(ps.channel_serial, 9);
}
END_TEST

START_TEST(test_policy_pin) {
        PersistentState ps = {};
        TpError err = {};
        bool unpinned;

        /* Before any channel was accepted there is nothing to pin against. */
        ck_assert(!policy_pin(&ps, ORIGIN_SOCKET, "switch", 0));
        ck_assert(!ps.pinned);
        ck_assert_int_eq(policy_channel_serial(&ps, 5, &unpinned, &err), 1);

        ck_assert(!policy_pin(&ps, ORIGIN_CHANNEL, "switch", 0));       /* the channel's own switch */
        ck_assert(!policy_pin(&ps, ORIGIN_SOCKET, "switch", -EIO));     /* a failed one */
        ck_assert(!policy_pin(&ps, ORIGIN_SOCKET, "install", 0));       /* installed only */
        ck_assert(!policy_pin(&ps, ORIGIN_SOCKET, "rollback", 0));
        ck_assert(!policy_pin(&ps, ORIGIN_SOCKET, "scrub", 0));
        ck_assert(!ps.pinned);
        ck_assert(policy_pin(&ps, ORIGIN_SOCKET, "switch", 0));         /* tpctl switch, install --switch */
        ck_assert(ps.pinned && ps.pinned_serial == 5);

        /* The same serial again keeps the pin; another one drops it. */
        ck_assert_int_eq(policy_channel_serial(&ps, 5, &unpinned, &err), 0);
        ck_assert(ps.pinned && !unpinned);
        ck_assert_int_eq(policy_channel_serial(&ps, 6, &unpinned, &err), 1);
        ck_assert(!ps.pinned && unpinned);

        /* Any source but the channel pins (hawkBit's install that switched). */
        ck_assert(policy_pin(&ps, ORIGIN_HAWKBIT, "switch", 0));
        ck_assert(ps.pinned && ps.pinned_serial == 6);
}
END_TEST

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
        ck_assert_int_eq(take(&fx, 4), -ESTALE);
        ck_assert_uint_eq(fx.fake.ps.channel_serial, 5);
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
START_TEST(test_install_downloaded) {
        Fixture fx;
        const B bs[] = { OURS("json", 2), OURS("shout", 1) };
        char dir[128], part[192];
        TpError err = {};
        struct stat st;

        setup(&fx);
        snprintf(dir, sizeof(dir), "%s/downloads", fx.root);
        snprintf(part, sizeof(part), "%s/json-2.tpb.part", dir);
        ck_assert_int_eq(mkdir(dir, 0750), 0);
        int fd = open(part, O_WRONLY | O_CREAT | O_CLOEXEC, 0640);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write(fd, "hello", 5), 5);
        close(fd);
        ck_assert_int_eq(stat(part, &st), 0);

        Channel *c = make_channel(5, "json", bs, 2);
        Sha256 h;
        sha256_init(&h);
        sha256_update(&h, "hello", 5);
        sha256_final(&h, c->bundles[0].sha256);
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
        char dir[128], part[192];
        TpError err = {};
        Sha256 h;

        setup(&fx);
        snprintf(dir, sizeof(dir), "%s/downloads", fx.root);
        snprintf(part, sizeof(part), "%s/base-2.tpb.part", dir);
        ck_assert_int_eq(mkdir(dir, 0750), 0);
        int fd = open(part, O_WRONLY | O_CREAT | O_CLOEXEC, 0640);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write(fd, "hello", 5), 5);
        close(fd);

        Channel *c = make_channel(5, "json", bs, 2);
        ChannelModel *cm = &c->models[0];
        cm->has_base = true;
        memset(cm->base_sha256, 0x22, SHA256_DIGEST_SIZE);
        c->bundles[0].role = MANIFEST_ROLE_BASE;
        memset(c->bundles[0].target_sha256, 0x22, SHA256_DIGEST_SIZE);
        memset(c->bundles[1].base_sha256, 0x22, SHA256_DIGEST_SIZE);   /* json: a task of the new base */
        sha256_init(&h);
        sha256_update(&h, "hello", 5);
        sha256_final(&h, c->bundles[0].sha256);
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

/* ---- rollouts and bases ---- */

START_TEST(test_cohort) {
        unsigned counts[100] = {}, in5 = 0;
        char id[32];

        /* The formula the documentation gives (checked with Python's hashlib). */
        ck_assert_uint_eq(channel_cohort("device-1", 7), 71);
        ck_assert_uint_eq(channel_cohort("device-2", 7), 70);
        ck_assert_uint_eq(channel_cohort("0123456789abcdef0123456789abcdef", 4242), 54);
        /* Spread over the buckets: 10000 devices, 5% of them in a 5% rollout give or take. */
        for (unsigned i = 0; i < 10000; i++) {
                snprintf(id, sizeof(id), "dev-%u", i);
                unsigned c = channel_cohort(id, 99);
                ck_assert_uint_lt(c, 100);
                counts[c]++;
                in5 += c < 5;
        }
        for (unsigned i = 0; i < 100; i++)
                ck_assert_msg(counts[i] > 50 && counts[i] < 150, "bucket %u: %u", i, counts[i]);
        ck_assert_msg(in5 > 400 && in5 < 600, "%u of 10000 in a 5%% rollout", in5);
        /* Another seed picks other devices. */
        unsigned same = 0;
        for (unsigned i = 0; i < 1000; i++) {
                snprintf(id, sizeof(id), "dev-%u", i);
                same += (channel_cohort(id, 99) < 10) == (channel_cohort(id, 100) < 10) && channel_cohort(id, 99) < 10;
        }
        ck_assert_msg(same < 40, "%u of ~100 devices in both 10%% cohorts", same);
}
END_TEST

START_TEST(test_in_rollout) {
        ChannelModel cm = {};
        char why[TP_ERROR_MAX];
        unsigned cohort;

        ck_assert(fetch_in_rollout(&cm, "device-1", &cohort, why));     /* no rollout: everyone */
        ck_assert_uint_eq(cohort, UINT_MAX);
        cm.rollout = (ChannelRollout) { .set = true, .percent = 71, .seed = 7 };
        ck_assert(!fetch_in_rollout(&cm, "device-1", &cohort, why));    /* cohort 71 is not below 71 */
        ck_assert_uint_eq(cohort, 71);
        ck_assert_msg(strstr(why, "rollout at 71%: this device's cohort is 71, not in yet"), "%s", why);
        cm.rollout.percent = 72;                                        /* raised: the same cohort grows */
        ck_assert(fetch_in_rollout(&cm, "device-1", &cohort, why));
        ck_assert(fetch_in_rollout(&cm, "device-2", &cohort, why));     /* 70: in before, in still */
        cm.rollout.percent = 0;
        ck_assert(!fetch_in_rollout(&cm, "device-2", &cohort, why));
        cm.rollout.percent = 100;
        ck_assert(fetch_in_rollout(&cm, "device-2", &cohort, why));
        /* No device id: only a rollout to every device takes it. */
        ck_assert(fetch_in_rollout(&cm, "", &cohort, why));
        ck_assert_uint_eq(cohort, UINT_MAX);
        cm.rollout.percent = 99;
        ck_assert(!fetch_in_rollout(&cm, "", &cohort, why));
        ck_assert_msg(strstr(why, "no id"), "%s", why);
}
END_TEST

START_TEST(test_on_base) {
        /* Base bundles of line "base": v2 full, v3 a delta from 0x11, v4 a delta from 0x33; all make 0x22. */
        static const B bs[] = { { "base", 2, 0, ARTIFACT_GGUF }, OURS("base", 3), { "base", 4, 0x33, ARTIFACT_GGUF } };
        Channel *c = make_channel(1, NULL, bs, 3);
        ChannelModel *cm = &c->models[0];
        const ChannelBundle *nb = NULL;
        FetchRefused refused = {};
        DeviceView d = {};
        char why[TP_ERROR_MAX];
        Sha256 h;

        for (size_t i = 0; i < 3; i++) {
                c->bundles[i].role = MANIFEST_ROLE_BASE;
                memset(c->bundles[i].target_sha256, 0x22, SHA256_DIGEST_SIZE);
        }
        sha256_init(&h);
        sha256_final(&h, c->bundles[0].base_sha256);    /* made from nothing */
        ck_assert(channel_bundle_full(&c->bundles[0]) && !channel_bundle_full(&c->bundles[1]));
        memset(d.base_sha256, 0x11, SHA256_DIGEST_SIZE);
        ck_assert(fetch_on_base(c, cm, &d, &refused, &nb, why));        /* the section names no base */
        cm->has_base = true;
        memset(cm->base_sha256, 0x11, SHA256_DIGEST_SIZE);
        ck_assert(fetch_on_base(c, cm, &d, &refused, &nb, why));        /* ... or the device's */
        ck_assert_ptr_null(nb);
        memset(cm->base_sha256, 0x22, SHA256_DIGEST_SIZE);
        ck_assert(!fetch_on_base(c, cm, &d, &refused, &nb, why));
        ck_assert_msg(strstr(why, "the channel's base is 222222222222…, this device runs 111111111111…"), "%s", why);
        /* The delta from the device's base, not the newer one from another base, nor the full one. */
        ck_assert_ptr_eq(nb, &c->bundles[1]);
        ck_assert_msg(strstr(why, "base bundle base v3 (a delta from this base)"), "%s", why);
        /* That one failed here: it waits (the full one is not taken behind a failed delta's back). */
        fetch_refused_add(&refused, "base", 3);
        ck_assert(!fetch_on_base(c, cm, &d, &refused, &nb, why));
        ck_assert_ptr_null(nb);
        ck_assert_msg(strstr(why, "failed here"), "%s", why);
        /* A device on a base no delta starts from: the full one. */
        refused.n = 0;
        memset(d.base_sha256, 0x44, SHA256_DIGEST_SIZE);
        ck_assert(!fetch_on_base(c, cm, &d, &refused, &nb, why));
        ck_assert_ptr_eq(nb, &c->bundles[0]);
        ck_assert_msg(strstr(why, "(the whole model)"), "%s", why);
        /* No base bundle makes the section's base: it waits. */
        memset(cm->base_sha256, 0x55, SHA256_DIGEST_SIZE);
        ck_assert(!fetch_on_base(c, cm, &d, &refused, &nb, why));
        ck_assert_ptr_null(nb);
        ck_assert_msg(strstr(why, "it waits for a base bundle from its base"), "%s", why);
        channel_free(c);
}
END_TEST

/* A format-2 channel of two models, "det" (bundles @det) and "llm" (bundles @llm), desired "json" in each. */
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

/* A format-1 channel speaks for the first model only. */
START_TEST(test_format1_first_model) {
        const B bs[] = { OURS("json", 2) };
        Channel *c = make_channel(1, "json", bs, 1);

        ck_assert_ptr_eq(fetch_section(c, 0, "llm"), &c->models[0]);
        ck_assert_ptr_null(fetch_section(c, 1, "det"));
        channel_free(c);
}
END_TEST

static Suite *fetch_suite(void) {
        Suite *s = suite_create("fetch");
        TCase *tc = tcase_create("decisions");
        tcase_add_loop_test(tc, test_next_bundle, 0, (int) ELEMENTSOF(next_cases));
        tcase_add_test(tc, test_refused_set);
        tcase_add_test(tc, test_then_switch);
        tcase_add_test(tc, test_install_base_bundle);
        tcase_add_loop_test(tc, test_switch_target, 0, (int) ELEMENTSOF(switch_cases));
        tcase_add_test(tc, test_cohort);
        tcase_add_test(tc, test_in_rollout);
        tcase_add_test(tc, test_on_base);
        tcase_add_test(tc, test_format1_first_model);
        suite_add_tcase(s, tc);

        tc = tcase_create("policy");
        tcase_add_test(tc, test_policy_serial);
        tcase_add_test(tc, test_policy_pin);
        suite_add_tcase(s, tc);

        tc = tcase_create("fetcher");
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
        tcase_add_test(tc, test_models);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(fetch_suite)
