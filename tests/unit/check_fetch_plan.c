/* SPDX-License-Identifier: MIT */
/*
 * daemon/taskpatchd-fetch-plan.c and taskpatchd-policy.c: the fetcher's decisions on plain
 * data, against a fake host (tests/unit/fake-host.h): which bundle to download for this base,
 * whether an install switches, what to switch to, the cohort of a rollout, what a model on
 * another base than its section's takes, which section a model follows; and the manager's
 * channel policy (a replayed serial, the technician's pin). check_fetch.c has the fetcher on
 * an event loop.
 */

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>

#include "check-main.h"
#include "fake-host.h"
#include "fetch-channel.h"
#include "taskpatchd-fetch.h"

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

/* ---- the manager's policy: the serial, the pin, the clock ---- */

START_TEST(test_policy_dates) {
        TpError err = {};
        time_t now = 1;

        /* Past the build and the newest channel: the clock is trusted (strict: only when synchronized). */
        ck_assert_int_eq(policy_dates_now(CLOCK_BUILD_FLOOR, 2000, 1000, 1500, false, &now, &err), 0);
        ck_assert_int_eq(now, 2000);
        ck_assert_int_eq(policy_dates_now(CLOCK_STRICT, 2000, 1000, 1500, true, &now, &err), 0);
        ck_assert_int_eq(now, 2000);
        ck_assert_int_eq(policy_dates_now(CLOCK_STRICT, 2000, 1000, 0, false, &now, &err), -EKEYREJECTED);
        ck_assert_msg(strstr(err.message, "not synchronized"), "%s", err.message);
        /* Before the build: dates are not checked (build-floor), or nothing is verified (strict). */
        ck_assert_int_eq(policy_dates_now(CLOCK_BUILD_FLOOR, 999, 1000, 0, true, &now, &err), 0);
        ck_assert_int_eq(now, SIGNATURE_CLOCK_UNKNOWN);
        ck_assert_int_eq(policy_dates_now(CLOCK_STRICT, 999, 1000, 0, true, &now, &err), -EKEYREJECTED);
        ck_assert_msg(strstr(err.message, "the clock reads 1970-01-01T00:16:39Z, before 1970-01-01T00:16:40Z (this "
                             "build)"), "%s", err.message);
        ck_assert_int_eq(policy_dates_now(CLOCK_STRICT, 0, 0, 0, true, &now, &err), -EKEYREJECTED); /* no clock at all */
        /* Behind the newest channel accepted: time does not go back (build-floor checks dates at that time). */
        ck_assert_int_eq(policy_dates_now(CLOCK_BUILD_FLOOR, 1200, 1000, 1500, true, &now, &err), 0);
        ck_assert_int_eq(now, 1500);
        ck_assert_int_eq(policy_dates_now(CLOCK_BUILD_FLOOR, 10, 1000, 1500, true, &now, &err), 0);
        ck_assert_int_eq(now, 1500);            /* even a clock in 1970, once a channel was seen */
        ck_assert_int_eq(policy_dates_now(CLOCK_STRICT, 1200, 1000, 1500, true, &now, &err), -EKEYREJECTED);
        ck_assert_msg(strstr(err.message, "(the newest channel accepted)"), "%s", err.message);
}
END_TEST

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


/* A format-1 channel speaks for the first model only. */
START_TEST(test_format1_first_model) {
        const B bs[] = { OURS("json", 2) };
        Channel *c = make_channel(1, "json", bs, 1);

        ck_assert_ptr_eq(fetch_section(c, 0, "llm"), &c->models[0]);
        ck_assert_ptr_null(fetch_section(c, 1, "det"));
        channel_free(c);
}
END_TEST

static Suite *fetch_plan_suite(void) {
        Suite *s = suite_create("fetch_plan");
        TCase *tc = tcase_create("decisions");
        tcase_add_loop_test(tc, test_next_bundle, 0, (int) ELEMENTSOF(next_cases));
        tcase_add_test(tc, test_refused_set);
        tcase_add_test(tc, test_then_switch);
        tcase_add_loop_test(tc, test_switch_target, 0, (int) ELEMENTSOF(switch_cases));
        tcase_add_test(tc, test_cohort);
        tcase_add_test(tc, test_in_rollout);
        tcase_add_test(tc, test_on_base);
        tcase_add_test(tc, test_format1_first_model);
        suite_add_tcase(s, tc);

        tc = tcase_create("policy");
        tcase_add_test(tc, test_policy_serial);
        tcase_add_test(tc, test_policy_pin);
        tcase_add_test(tc, test_policy_dates);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(fetch_plan_suite)
