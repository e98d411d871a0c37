/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the daemon's state file (state_load() in
 * daemon/taskpatchd-store.c, linked from libtaskpatchd.a). It takes a path,
 * so the input goes into a memfd opened as /proc/self/fd/N. A failure must
 * carry a message and leave *ret alone; a loaded state must be one
 * state_save() could have written, and save and load back to the same
 * values. The same input as a floor file (floor_load()): refused with a
 * message, or it only raises what it is merged into.
 */

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz-input.h"
#include "taskpatchd-store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool state_equal(const PersistentState *a, const PersistentState *b) {
        if (a->provisioned != b->provisioned || a->provisioning != b->provisioning || a->committed != b->committed ||
            a->trial.on != b->trial.on)
                return false;
        if ((a->provisioned || a->provisioning) &&
            (memcmp(a->base.sha256, b->base.sha256, SHA256_DIGEST_SIZE) != 0 || a->base.size != b->base.size ||
             memcmp(a->base.layout, b->base.layout, SHA256_DIGEST_SIZE) != 0 || a->base.kind != b->base.kind ||
             a->base.chunk_size != b->base.chunk_size ||
             memcmp(a->base.chunk_root, b->base.chunk_root, SHA256_DIGEST_SIZE) != 0))
                return false;
        if (a->trial.on && (a->trial.slot != b->trial.slot || strcmp(a->trial.task, b->trial.task) != 0 ||
                            a->trial.version != b->trial.version ||
                            strcmp(a->trial.transaction, b->trial.transaction) != 0 ||
                            a->trial.started != b->trial.started || a->trial.rollback != b->trial.rollback))
                return false;
        if (a->n_history != b->n_history || a->n_failed != b->n_failed ||
            memcmp(a->history, b->history, a->n_history * sizeof(TaskRef)) != 0 ||
            memcmp(a->failed, b->failed, a->n_failed * sizeof(TaskRef)) != 0)
                return false;
        return true;
}

static void check(const PersistentState *s) {
        if (!slot_id_to_string(s->committed))
                abort();
        if ((s->provisioned || s->provisioning) && !artifact_kind_to_string(s->base.kind))
                abort();
        if (s->trial.on) {
                if (!slot_id_to_string(s->trial.slot) || s->trial.started < 0 || s->trial.version > INT64_MAX ||
                    !memchr(s->trial.task, '\0', sizeof(s->trial.task)) ||
                    !memchr(s->trial.transaction, '\0', sizeof(s->trial.transaction)))
                        abort();
                if (s->trial.task[0] && !task_name_valid(s->trial.task))
                        abort();
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        int fd = fuzz_input_fd(data, size, 0);
        PersistentState s, before, again;
        TpError err = {};
        char path[64], buf[128];
        uint64_t bytes = 0;
        int r;

        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        PersistentState floor = { 0 };
        (void) state_accept(&floor, "json", 5);
        r = floor_load(path, &floor, &err);
        if (r < 0 ? !err.message[0] || err.code != r : r != 0)
                abort();
        if (state_accepted(&floor, "json") < 5 || floor.n_accepted > STATE_MAX_TASKS)
                abort();
        for (size_t i = 0; i < floor.n_accepted; i++)
                if (!task_name_valid(floor.accepted[i].task) || (i > 0 && strcmp(floor.accepted[i - 1].task,
                                                                                 floor.accepted[i].task) >= 0))
                        abort();
        err = (TpError) { 0 };
        memset(&s, 0xa5, sizeof(s));
        memcpy(&before, &s, sizeof(s));
        r = state_load(path, &s, &err);
        if (r < 0) {
                if ((r != -EBADMSG && r != -EPROTONOSUPPORT) || !err.message[0] || err.code != r ||
                    memcmp(&s, &before, sizeof(s)) != 0)
                        abort();
                return 0;
        }
        if (r != 0)
                abort();
        check(&s);

        fuzz_scratch_path("fuzz-state", "state.json", buf);
        if (state_save(buf, &s, &bytes, &err) < 0 || bytes == 0)
                abort();
        memset(&again, 0x5a, sizeof(again));
        if (state_load(buf, &again, &err) < 0 || !state_equal(&s, &again))
                abort();
        if (unlink(buf) < 0)
                abort();
        return 0;
}
