/* SPDX-License-Identifier: MIT */
/* The update state machine's table (taskpatchd-machine.h): every transition the daemon may make, and nothing else. */

#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "taskpatchd-log.h"
#include "taskpatchd-machine.h"

static const char *const state_names[_STATE_MAX] = {
        [STATE_UNPROVISIONED] = "unprovisioned",
        [STATE_PROVISIONING] = "provisioning",
        [STATE_IDLE] = "idle",
        [STATE_INSTALLING] = "installing",
        [STATE_STAGING] = "staging",
        [STATE_TRIAL] = "trial",
        [STATE_TRIAL_INSTALLING] = "trial-installing",
};

static const char *const event_names[_EVENT_MAX] = {
        [EVENT_PROVISION] = "provision", [EVENT_INSTALL] = "install", [EVENT_SWITCH] = "switch",
        [EVENT_TRIAL] = "trial",         [EVENT_DONE] = "done",       [EVENT_FAILED] = "failed",
        [EVENT_LOST] = "lost",           [EVENT_COMMIT] = "commit",   [EVENT_ROLLBACK] = "rollback",
        [EVENT_REPAIR] = "repair",
};

typedef struct Transition {
        ManagerState from;
        ManagerEvent event;
        ManagerState to;
} Transition;

/* Read it as sentences: in <from>, on <event>, go to <to>. */
static const Transition table[] = {
        { STATE_UNPROVISIONED, EVENT_PROVISION, STATE_PROVISIONING },

        { STATE_PROVISIONING, EVENT_DONE, STATE_IDLE },
        { STATE_PROVISIONING, EVENT_FAILED, STATE_IDLE },               /* the old base is still there */
        { STATE_PROVISIONING, EVENT_LOST, STATE_UNPROVISIONED },

        { STATE_IDLE, EVENT_PROVISION, STATE_PROVISIONING },
        { STATE_IDLE, EVENT_INSTALL, STATE_INSTALLING },
        { STATE_IDLE, EVENT_SWITCH, STATE_STAGING },
        { STATE_IDLE, EVENT_REPAIR, STATE_IDLE },

        { STATE_INSTALLING, EVENT_DONE, STATE_IDLE },
        { STATE_INSTALLING, EVENT_FAILED, STATE_IDLE },
        { STATE_INSTALLING, EVENT_SWITCH, STATE_STAGING },             /* install --switch */

        { STATE_STAGING, EVENT_TRIAL, STATE_TRIAL },
        { STATE_STAGING, EVENT_DONE, STATE_IDLE },                      /* nothing to stage: already active */
        { STATE_STAGING, EVENT_FAILED, STATE_IDLE },

        { STATE_TRIAL, EVENT_INSTALL, STATE_TRIAL_INSTALLING },
        { STATE_TRIAL, EVENT_COMMIT, STATE_IDLE },
        { STATE_TRIAL, EVENT_ROLLBACK, STATE_IDLE },

        { STATE_TRIAL_INSTALLING, EVENT_DONE, STATE_TRIAL },
        { STATE_TRIAL_INSTALLING, EVENT_FAILED, STATE_TRIAL },
        { STATE_TRIAL_INSTALLING, EVENT_COMMIT, STATE_INSTALLING },
        { STATE_TRIAL_INSTALLING, EVENT_ROLLBACK, STATE_INSTALLING },
};

const char *manager_state_to_string(ManagerState s) {
        return s >= 0 && s < _STATE_MAX ? state_names[s] : NULL;
}

ManagerState manager_state_from_string(const char *s) {
        for (ManagerState i = 0; s && i < _STATE_MAX; i++)
                if (strcmp(s, state_names[i]) == 0)
                        return i;
        return _STATE_INVALID;
}

const char *manager_event_to_string(ManagerEvent e) {
        return e >= 0 && e < _EVENT_MAX ? event_names[e] : NULL;
}

bool manager_state_on_trial(ManagerState s) {
        return s == STATE_TRIAL || s == STATE_TRIAL_INSTALLING;
}

bool manager_state_busy(ManagerState s) {
        return s == STATE_PROVISIONING || s == STATE_INSTALLING || s == STATE_STAGING || s == STATE_TRIAL_INSTALLING;
}

ManagerState machine_next(ManagerState s, ManagerEvent e) {
        for (size_t i = 0; i < ELEMENTSOF(table); i++)
                if (table[i].from == s && table[i].event == e)
                        return table[i].to;
        return _STATE_INVALID;
}

unsigned machine_transitions(void) {
        return (unsigned) ELEMENTSOF(table);
}

void machine_init(Machine *mc, ManagerState initial, const MachineHost *host, void *userdata) {
        *mc = (Machine) { .state = initial, .host = host, .userdata = userdata };
}

bool machine_can(const Machine *mc, ManagerEvent e) {
        return machine_next(mc->state, e) >= 0;
}

int machine_fire(Machine *mc, ManagerEvent e) {
        ManagerState from = mc->state, to = machine_next(from, e);

        if (to < 0) {
                log_error("state machine: no transition from %s on %s: refused", manager_state_to_string(from),
                          manager_event_to_string(e) ?: "(invalid event)");
#ifndef NDEBUG
                abort();
#endif
                return -EPROTO;
        }
        mc->state = to;
        if (mc->host && mc->host->changed)
                mc->host->changed(mc->userdata, from, e, to);
        return 0;
}
