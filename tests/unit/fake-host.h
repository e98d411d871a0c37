/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * A SourceHost (daemon/taskpatchd-source.h) without a manager, for the update sources'
 * unit tests: it answers from plain fields the test sets, records what a source submits,
 * emits and reports, and keeps the channel's record with the manager's real policy
 * (taskpatchd-policy.c). And pump(), to run an sd-event loop for a while.
 */

#include <check.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <systemd/sd-event.h>
#include <time.h>
#include <unistd.h>

#include "taskpatchd-policy.h"
#include "taskpatchd-source.h"

#define FAKE_INSTALLED_MAX 8

typedef struct FakeInstalled {
        char task[TASK_NAME_MAX + 1];
        uint64_t version;
} FakeInstalled;

typedef struct FakeHost {
        SourceHost host;

        /* what it answers */
        bool can_start;
        DeviceView device;
        PersistentState ps;             /* the channel's record and the accepted versions */
        FakeInstalled installed[FAKE_INSTALLED_MAX];
        size_t n_installed;
        int install_result;             /* submit_install: 1, or a negative errno */
        int switch_result;              /* submit_switch: 1, 0 (already active), or a negative errno */
        bool save_fails;                /* channel_accept_serial: the state cannot be written */

        /* what it saw */
        unsigned installs, switches, emits, errors;
        InstallRequest last_install;
        struct stat last_install_st;    /* of the descriptor submitted */
        char last_switch_task[TASK_NAME_MAX + 1];
        uint64_t last_switch_version;
        UpdateOrigin last_switch_origin;
        char transaction[TRANSACTION_ID_SIZE];  /* the last one handed out */
        char last_error_code[32];
        char last_error[TP_ERROR_MAX];
        char last_event[64];            /* the last event's "event" field */
} FakeHost;

static inline FakeHost *fake_of(const SourceHost *h) {
        return h->userdata;
}

static inline bool fake_can_start(const SourceHost *h) {
        return fake_of(h)->can_start;
}

static inline void fake_new_transaction(FakeHost *f, char ret[TRANSACTION_ID_SIZE]) {
        snprintf(f->transaction, sizeof(f->transaction), "%032x", f->installs + f->switches);
        memcpy(ret, f->transaction, TRANSACTION_ID_SIZE);
}

static inline int fake_submit_install(const SourceHost *h, int fd, const InstallRequest *req,
                                      char ret_transaction[TRANSACTION_ID_SIZE], TpError *err) {
        FakeHost *f = fake_of(h);

        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(fstat(fd, &f->last_install_st), 0);
        close(fd);
        f->installs++;
        f->last_install = *req;
        if (f->install_result < 0)
                return tp_error(err, f->install_result, "the bundle is refused (fake)");
        fake_new_transaction(f, ret_transaction);
        return 1;
}

static inline int fake_submit_switch(const SourceHost *h, const char *task, uint64_t version, UpdateOrigin origin,
                                     char ret_transaction[TRANSACTION_ID_SIZE], TpError *err) {
        FakeHost *f = fake_of(h);

        f->switches++;
        snprintf(f->last_switch_task, sizeof(f->last_switch_task), "%s", task ? task : "");
        f->last_switch_version = version;
        f->last_switch_origin = origin;
        if (f->switch_result < 0)
                return tp_error(err, f->switch_result, "the switch is refused (fake)");
        if (f->switch_result == 0)
                return 0;
        fake_new_transaction(f, ret_transaction);
        return 1;
}

static inline void fake_device(const SourceHost *h, DeviceView *ret) {
        *ret = fake_of(h)->device;
}

/* No revocation list: the fetcher's own tests do not carry one (test-revocation does, end to end). */
static inline const Revocations *fake_revocations(const SourceHost *h) {
        (void) h;
        return NULL;
}

/* No trust root either: the configuration's roles hold. */
static inline const TrustRoot *fake_trust_root(const SourceHost *h) {
        (void) h;
        return NULL;
}

static inline int fake_take_trust(const SourceHost *h, const uint8_t *data, size_t len, const char *what,
                                  TpError *err) {
        (void) h;
        (void) data;
        (void) len;
        return tp_error(err, -EOPNOTSUPP, "%s: the fake host takes no revocation list or trust root", what);
}

static inline uint64_t fake_newest_installed(const SourceHost *h, const char *task) {
        const FakeHost *f = fake_of(h);
        uint64_t v = 0;
        for (size_t i = 0; i < f->n_installed; i++)
                if (strcmp(f->installed[i].task, task) == 0 && f->installed[i].version > v)
                        v = f->installed[i].version;
        return v;
}

static inline bool fake_installed(const SourceHost *h, const char *task, uint64_t version) {
        const FakeHost *f = fake_of(h);
        for (size_t i = 0; i < f->n_installed; i++)
                if (strcmp(f->installed[i].task, task) == 0 && f->installed[i].version == version)
                        return true;
        return false;
}

static inline uint64_t fake_accepted(const SourceHost *h, const char *task) {
        return state_accepted(&fake_of(h)->ps, task);
}

static inline void fake_channel(const SourceHost *h, ChannelView *ret) {
        const PersistentState *ps = &fake_of(h)->ps;
        *ret = (ChannelView) { .have_serial = ps->have_channel, .serial = ps->channel_serial, .pinned = ps->pinned };
}

static inline int fake_channel_accept_serial(const SourceHost *h, uint64_t serial, int64_t created, TpError *err) {
        FakeHost *f = fake_of(h);
        bool unpinned;
        int r = policy_channel_serial(&f->ps, serial, &unpinned, err);
        if (r > 0 && created > f->ps.time_floor)
                f->ps.time_floor = created;
        if (r > 0 && f->save_fails)
                return tp_error(err, -EIO, "state.json: No space left on device (fake)");
        return r;
}

static inline void fake_emit(const SourceHost *h, json_t *event) {
        FakeHost *f = fake_of(h);
        f->emits++;
        snprintf(f->last_event, sizeof(f->last_event), "%s", json_string_value(json_object_get(event, "event")));
        json_decref(event);
}

static inline void fake_report_error(const SourceHost *h, const char *code, const char *message, const char *cmd) {
        FakeHost *f = fake_of(h);
        f->errors++;
        snprintf(f->last_error_code, sizeof(f->last_error_code), "%s", code);
        snprintf(f->last_error, sizeof(f->last_error), "%s", message);
        ck_assert_str_eq(cmd, "fetch");
}

/* Dates are checked at the real time, under the build floor. */
static inline int fake_dates_now(const SourceHost *h, time_t *ret, TpError *err) {
        (void) h;
        (void) err;
        *ret = time(NULL);
        return 0;
}

/* Idle, provisioned on a GGUF base whose digest is all 0x11, the base active, nothing installed. */
static inline void fake_host_init(FakeHost *f) {
        *f = (FakeHost) {
                .host = { .can_start = fake_can_start, .submit_install = fake_submit_install,
                          .submit_switch = fake_submit_switch, .device = fake_device,
                          .revocations = fake_revocations,
                          .trust_root = fake_trust_root, .take_trust = fake_take_trust,
                          .newest_installed = fake_newest_installed, .installed = fake_installed,
                          .accepted = fake_accepted, .channel = fake_channel,
                          .channel_accept_serial = fake_channel_accept_serial, .emit = fake_emit,
                          .report_error = fake_report_error, .dates_now = fake_dates_now, .userdata = f },
                .can_start = true,
                .device = { .provisioned = true, .base_kind = ARTIFACT_GGUF },
                .install_result = 1,
                .switch_result = 1,
        };
        memset(f->device.base_sha256, 0x11, SHA256_DIGEST_SIZE);
}

static inline void fake_add_installed(FakeHost *f, const char *task, uint64_t version) {
        ck_assert_uint_lt(f->n_installed, FAKE_INSTALLED_MAX);
        snprintf(f->installed[f->n_installed].task, sizeof(f->installed[0].task), "%s", task);
        f->installed[f->n_installed++].version = version;
}

/* Run @e's loop for @ms milliseconds (what is ready is dispatched; timers due meanwhile fire). */
static inline void pump(sd_event *e, unsigned ms) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t now = (uint64_t) ts.tv_sec * 1000000 + (uint64_t) ts.tv_nsec / 1000, end = now + ms * 1000ULL;
        while (now < end) {
                ck_assert_int_ge(sd_event_run(e, end - now), 0);
                clock_gettime(CLOCK_MONOTONIC, &ts);
                now = (uint64_t) ts.tv_sec * 1000000 + (uint64_t) ts.tv_nsec / 1000;
        }
}
