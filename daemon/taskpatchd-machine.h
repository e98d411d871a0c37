/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The update state machine as a table: state x event -> next state. It
 * knows nothing of slots, files or sockets; the manager asks it whether a
 * change is allowed and tells it what happened, and it tells the manager
 * (MachineHost) each change it makes. A transition the table does not list
 * is refused: machine_fire() returns -EPROTO and changes nothing (release
 * builds, NDEBUG) or aborts (debug and test builds), so the daemon can
 * never claim one state while acting in another.
 *
 * "On trial" is a property of the state (TRIAL, TRIAL_INSTALLING) and of
 * nothing else: an install may run while a task is on trial, and the
 * trial's commit or rollback leaves the install running.
 *
 *   UNPROVISIONED --provision--> PROVISIONING --done/failed--> IDLE   (--lost--> UNPROVISIONED)
 *   IDLE --install--> INSTALLING --done/failed--> IDLE
 *   IDLE --switch--> STAGING --trial--> TRIAL --commit/rollback--> IDLE
 *        INSTALLING --switch--> STAGING --done/failed--> IDLE
 *   TRIAL --install--> TRIAL_INSTALLING --done/failed--> TRIAL
 *        TRIAL_INSTALLING --commit/rollback--> INSTALLING
 *   IDLE --repair--> IDLE        (a damaged active slot replaced by the clean other one)
 */

#include <errno.h>
#include <stdbool.h>

typedef enum ManagerState {
        STATE_UNPROVISIONED,
        STATE_PROVISIONING,
        STATE_IDLE,
        STATE_INSTALLING,
        STATE_STAGING,
        STATE_TRIAL,
        STATE_TRIAL_INSTALLING,         /* an install runs while a task is on trial */
        _STATE_MAX,
        _STATE_INVALID = -EINVAL,
} ManagerState;

typedef enum ManagerEvent {
        EVENT_PROVISION,                /* a provisioning starts */
        EVENT_INSTALL,                  /* an install starts */
        EVENT_SWITCH,                   /* staging starts: a switch, a rollback to the committed task, install --switch */
        EVENT_TRIAL,                    /* the staged slot is active and on trial */
        EVENT_DONE,                     /* the operation ended well (nothing new on trial) */
        EVENT_FAILED,                   /* the operation failed; what was active stays active */
        EVENT_LOST,                     /* a provisioning failed after the old base was given up */
        EVENT_COMMIT,                   /* the trial was confirmed (mark-good, health check) */
        EVENT_ROLLBACK,                 /* the trial ended in a rollback */
        EVENT_REPAIR,                   /* the damaged active slot was replaced by the clean other slot */
        _EVENT_MAX,
        _EVENT_INVALID = -EINVAL,
} ManagerEvent;

const char *manager_state_to_string(ManagerState s);
ManagerState manager_state_from_string(const char *s);
const char *manager_event_to_string(ManagerEvent e);

/* TRIAL or TRIAL_INSTALLING. */
bool manager_state_on_trial(ManagerState s);
/* An operation runs in this state (provisioning, installing, staging). */
bool manager_state_busy(ManagerState s);

/* The next state, or _STATE_INVALID when the table has no such transition. */
ManagerState machine_next(ManagerState s, ManagerEvent e);
/* Rows in the table (for tests and the report). */
unsigned machine_transitions(void);

typedef struct MachineHost {
        /* After each change (from != to, or a self-transition such as repair). */
        void (*changed)(void *userdata, ManagerState from, ManagerEvent e, ManagerState to);
} MachineHost;

typedef struct Machine {
        ManagerState state;
        const MachineHost *host;
        void *userdata;
} Machine;

void machine_init(Machine *mc, ManagerState initial, const MachineHost *host, void *userdata);
/*
 * Apply @e: 0 and the host told, or -EPROTO when the table has no such
 * transition (the state unchanged; aborts unless NDEBUG).
 */
int machine_fire(Machine *mc, ManagerEvent e);
/* Whether @e may fire now. */
bool machine_can(const Machine *mc, ManagerEvent e);
