#!/bin/bash
# Notifying inference services: after every activation and rollback, taskpatchd asks systemd
# over D-Bus to restart (RestartUnit) or reload (ReloadOrRestartUnit) the configured units and
# runs the configured command with the event in its environment. No systemd runs here: a
# private dbus-daemon and tests/tools/fake-systemd (owning org.freedesktop.systemd1 there)
# stand in for them. A failing unit or an unreachable bus is reported and never undoes a switch.
# shellcheck disable=SC2034  # DPID, SOCK, MODEL, CONF are read by daemon-lib.sh
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/daemon-lib.sh"
BUS_PID='' FAKE_PID=''
trap 'stop_daemon; kill $FAKE_PID $BUS_PID 2> /dev/null; rm -rf "$TMP"' EXIT

need_fixtures
command -v dbus-daemon > /dev/null || { fail "dbus-daemon is not installed (make deps installs it)"; finish; exit 1; }
cat > "$TMP/bus.conf" <<EOC
<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path=$TMP/bus</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
EOC
dbus-daemon --config-file="$TMP/bus.conf" --nofork --nopidfile > "$TMP/bus.log" 2>&1 &
BUS_PID=$!
for _ in $(seq 50); do [ -S "$TMP/bus" ] && break; sleep 0.1; done
export DBUS_SYSTEM_BUS_ADDRESS="unix:path=$TMP/bus"
"$(dirname "$BIN")/tools/fake-systemd" "$TMP/units.log" > "$TMP/fake.out" 2>&1 &
FAKE_PID=$!
for _ in $(seq 50); do grep -q ready "$TMP/fake.out" 2> /dev/null && break; sleep 0.1; done
check "a private bus with a stand-in for systemd" grep -q ready "$TMP/fake.out"

# wait_for FILE PATTERN: until FILE has a line matching PATTERN (5 s).
wait_for() {
    for _ in $(seq 50); do grep -q "$2" "$1" 2> /dev/null && return 0; sleep 0.1; done
    return 1
}
# The command writes its whole environment under a temporary name and renames it to
# exec/REASON.env last, so a file of that name is complete; HOOK_PID is the shell the daemon ran.
# hook_done REASON [LINE]: until exec/REASON.env is there and the daemon has reaped that shell (a
# zombie still answers kill -0), so the next change finds no command running (one that comes
# while it runs would wait for it) (10 s); then, with LINE, the file has that line.
hook_done() {
    local pid
    for _ in $(seq 100); do
        pid=$(sed -n 's/^HOOK_PID=//p' "$TMP/exec/$1.env" 2> /dev/null)
        if [ -n "$pid" ] && ! kill -0 "$pid" 2> /dev/null; then
            [ -z "${2:-}" ] || grep -qx "$2" "$TMP/exec/$1.env"
            return
        fi
        sleep 0.1
    done
    return 1
}

# The trials here end by rollback, mark-good or the daemon's stop; a timeout that runs out
# between two steps on a loaded machine would roll back under the test.
mkdir -p "$TMP/exec"
write_config "trial:
  timeout: 600
notify:
  restart_units: [llama-server.service]
  reload_units: [onnx-app.service]
  exec: env | sort > $TMP/exec/.\$\$ && echo HOOK_PID=\$\$ >> $TMP/exec/.\$\$ && mv $TMP/exec/.\$\$ $TMP/exec/\$TASKPATCH_REASON.env"
# A NOTIFY_SOCKET the daemon has (sd_notify to a missing socket fails quietly) and the command must not.
NOTIFY_SOCKET="$TMP/notify.sock" need_daemon
tpctl provision "$TMP/base.gguf" > /dev/null
# Provision's calls and command finish before the switch: none of them is taken for the switch's.
check "provision: the command ran and ended" hook_done provision
check "... systemd asked to reload onnx-app.service (the last call)" \
    wait_for "$TMP/units.log" "^ReloadOrRestartUnit onnx-app.service replace$"
tpctl install "$TMP/json.tpb" > /dev/null
: > "$TMP/units.log"
tpctl switch json > /dev/null

check "switch: systemd asked to restart llama-server.service" wait_for "$TMP/units.log" "^RestartUnit llama-server.service replace$"
check "... and to reload onnx-app.service" wait_for "$TMP/units.log" "^ReloadOrRestartUnit onnx-app.service replace$"
env_file="$TMP/exec/switch.env"
check "... the command ran with the event in its environment" hook_done switch TASKPATCH_EVENT=slot-changed
check "... task, reason, model path, SHA-256" \
    sh -c "grep -q '^TASKPATCH_TASK=json$' '$env_file' && grep -q '^TASKPATCH_REASON=switch$' '$env_file' &&
        grep -q '^TASKPATCH_MODEL_PATH=$MODEL$' '$env_file' && grep -Eq '^TASKPATCH_SHA256=[0-9a-f]{64}$' '$env_file'"
check "... and without the daemon's NOTIFY_SOCKET" sh -c "grep -q '^TASKPATCH_' '$env_file' && ! grep -q '^NOTIFY_SOCKET=' '$env_file'"

: > "$TMP/units.log"
tpctl rollback > /dev/null
check "rollback: llama-server.service restarted again" wait_for "$TMP/units.log" "^RestartUnit llama-server.service replace$"
check "... and onnx-app.service reloaded again" wait_for "$TMP/units.log" "^ReloadOrRestartUnit onnx-app.service replace$"
check "... the command says why" hook_done rollback TASKPATCH_REASON=rollback
tpctl --json status > "$TMP/st.json"
# Two units and one command for each of provision, switch and rollback.
check "status counts the calls (6) and the commands (3), no error" \
    test "$(jget notify.unit_calls < "$TMP/st.json") $(jget notify.exec_runs < "$TMP/st.json") $(jget notify.last_error < "$TMP/st.json")" = "6 3 null"
stop_daemon

# A unit systemd does not know, and no bus at all: reported, the switch stands.
write_config "trial:
  timeout: 600
notify:
  restart_units: [missing.service]"
need_daemon
tpctl switch json > /dev/null
for _ in $(seq 50); do tpctl --json status > "$TMP/st.json"; grep -q "not found" "$TMP/st.json" && break; sleep 0.1; done
check "a unit systemd does not know: the error is in status" grep -q "Unit missing.service not found" "$TMP/st.json"
check "... the switch stands (on trial, json)" test "$(jget state < "$TMP/st.json") $(jget active.task < "$TMP/st.json")" = "trial json"
tpctl mark-good > /dev/null
stop_daemon
DBUS_SYSTEM_BUS_ADDRESS="unix:path=$TMP/no-bus" need_daemon
tpctl switch --base > /dev/null
tpctl --json status > "$TMP/st.json"
check "no bus: 'cannot reach systemd' in status" grep -q "cannot reach systemd" "$TMP/st.json"
check "... the switch stands" test "$(jget state < "$TMP/st.json")" = trial
tpctl mark-good > /dev/null
stop_daemon

# A slow command and two changes in a row (found from outside: the second was dropped): the
# second runs when the first ends, never at the same time.
rm -f "$TMP/exec"/*
write_config "trial:
  timeout: 600
notify:
  exec: while [ ! -e $TMP/exec/go ]; do sleep 0.05; done; env | sort > $TMP/exec/.\$\$ && mv $TMP/exec/.\$\$ $TMP/exec/\$TASKPATCH_REASON.env"
need_daemon
tpctl switch json > /dev/null
tpctl rollback > /dev/null
check "while the first command runs, the second waits" test ! -e "$TMP/exec/rollback.env"
touch "$TMP/exec/go"
check "the first command ran (switch)" wait_for "$TMP/exec/switch.env" "^TASKPATCH_REASON=switch$"
check "... and then the second (rollback), not dropped" wait_for "$TMP/exec/rollback.env" "^TASKPATCH_REASON=rollback$"
tpctl --json status > "$TMP/st.json"
check "status counts both runs, no error" \
    test "$(jget notify.exec_runs < "$TMP/st.json") $(jget notify.last_error < "$TMP/st.json")" = "2 null"

# A restart during a trial rolls back before anyone listens: the command is told all the same.
rm -f "$TMP/exec/switch.env"
tpctl switch json > /dev/null
check "json on trial, its command ran" wait_for "$TMP/exec/switch.env" "^TASKPATCH_TASK=json$"
crash_daemon
rm -f "$TMP/exec/rollback.env"
start_daemon
check "restarted during the trial: the command runs for the start-up rollback" \
    wait_for "$TMP/exec/rollback.env" "^TASKPATCH_REASON=rollback$"
check "... and model_path is the base again" same "$TMP/base.gguf"
daemon_finish
