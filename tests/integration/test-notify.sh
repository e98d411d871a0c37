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

mkdir -p "$TMP/exec"
write_config "trial:
  timeout: 3
notify:
  restart_units: [llama-server.service]
  reload_units: [onnx-app.service]
  exec: env | grep ^TASKPATCH_ | sort > $TMP/exec/\$(date +%s%N).env"
need_daemon
tpctl provision "$TMP/base.gguf" > /dev/null
tpctl install "$TMP/json.tpb" > /dev/null
: > "$TMP/units.log"
rm -f "$TMP/exec"/*
tpctl switch json > /dev/null

# wait_for FILE PATTERN: until FILE has a line matching PATTERN (5 s).
wait_for() {
    for _ in $(seq 50); do grep -q "$2" "$1" 2> /dev/null && return 0; sleep 0.1; done
    return 1
}
check "switch: systemd asked to restart llama-server.service" wait_for "$TMP/units.log" "^RestartUnit llama-server.service replace$"
check "... and to reload onnx-app.service" wait_for "$TMP/units.log" "^ReloadOrRestartUnit onnx-app.service replace$"
for _ in $(seq 50); do [ -n "$(cat "$TMP"/exec/*.env 2> /dev/null)" ] && break; sleep 0.1; done
env_file=$(ls "$TMP"/exec/*.env 2> /dev/null | head -n 1)
check "... the command ran with the event in its environment" grep -q "^TASKPATCH_EVENT=slot-changed$" "$env_file"
check "... task, reason, model path, SHA-256" \
    sh -c "grep -q '^TASKPATCH_TASK=json$' '$env_file' && grep -q '^TASKPATCH_REASON=switch$' '$env_file' &&
        grep -q '^TASKPATCH_MODEL_PATH=$MODEL$' '$env_file' && grep -Eq '^TASKPATCH_SHA256=[0-9a-f]{64}$' '$env_file'"
check "... and without the daemon's NOTIFY_SOCKET" sh -c "! grep -q NOTIFY_SOCKET '$env_file'"

: > "$TMP/units.log"
rm -f "$TMP/exec"/*
tpctl rollback > /dev/null
check "rollback: llama-server.service restarted again" wait_for "$TMP/units.log" "^RestartUnit llama-server.service replace$"
for _ in $(seq 50); do [ -n "$(cat "$TMP"/exec/*.env 2> /dev/null)" ] && break; sleep 0.1; done
check "... the command says why" grep -q "^TASKPATCH_REASON=rollback$" "$TMP"/exec/*.env
tpctl --json status > "$TMP/st.json"
# Two units for each of provision, switch and rollback.
check "status counts the calls (6), no error" \
    test "$(jget notify.unit_calls < "$TMP/st.json") $(jget notify.last_error < "$TMP/st.json")" = "6 null"
stop_daemon

# A unit systemd does not know, and no bus at all: reported, the switch stands.
write_config "trial:
  timeout: 3
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
daemon_finish
