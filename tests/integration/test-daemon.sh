#!/bin/bash
# taskpatchd + tpctl, the device's story: provision, install two sibling tasks with different
# site sets, switch A -> B -> A with byte identity each time, trial: mark-good, timeout
# rollback, manual rollback, health checks, restart persistence, restart during a trial.
# shellcheck disable=SC2034  # DPID, SOCK, MODEL, CONF are read by daemon-lib.sh
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/daemon-lib.sh"

need_fixtures
need_daemon

# The daemon verifies and never signs: no signing code, so no PKCS#11 module loader in its process.
needed=$(needed_libs "$BIN/taskpatchd")
check "taskpatchd links no PKCS#11 (needs: $needed)" bash -c "! echo '$needed' | grep -q libp11"

check "a fresh daemon is unprovisioned" test "$(tpctl --json status | jget state)" = unprovisioned
tpctl switch json > "$TMP/out" 2>&1
check "switch before provisioning: refused (exit 2)" test $? -eq 2
check "... and says what to do" grep -q "provision" "$TMP/out"

# Provision: both slots hold the base, model_path points at slot a.
check "provision" tpctl provision "$TMP/base.gguf"
check "model_path holds the base" same "$TMP/base.gguf"
check "model_path is a symlink to slot a" test "$(readlink "$MODEL")" = "$STATE/slots/a.gguf"
tpctl --json status > "$TMP/st.json"
check "both slots clean after provisioning" test "$(jget slots.a.state < "$TMP/st.json")/$(jget slots.b.state < "$TMP/st.json")" = clean/clean
check "status: state idle, active slot a, task null" \
    test "$(jget state < "$TMP/st.json") $(jget active.slot < "$TMP/st.json") $(jget active.task < "$TMP/st.json")" = "idle a null"
check "status: the base's SHA-256" test "$(jget base.sha256 < "$TMP/st.json")" = "$(sha256sum < "$TMP/base.gguf" | cut -d' ' -f1)"

# Install two sibling tasks.
check "install json" tpctl install "$TMP/json.tpb"
check "install shout" tpctl install "$TMP/shout.tpb"
tpctl --json list > "$TMP/list.json"
check "list: both tasks" python3 -c "
import json; t = json.load(open('$TMP/list.json'))['tasks']
assert sorted((x['task'], x['version']) for x in t) == [('json', 1), ('shout', 1)], t"
check "the active model is untouched by installs" same "$TMP/base.gguf"

# Watch the events of one switch.
tpctl --json watch > "$TMP/events" 2>&1 &
watcher=$!
check "watch: subscribed (its first line, the snapshot)" wait_until 20 grep -q '"snapshot"' "$TMP/events"

# A -> B -> A, byte identity each time; slot bytes O(patch).
tpctl switch json > "$TMP/out" 2>&1
check "switch json: exit 0" test $? -eq 0
check "switch json: model_path == json.gguf" same "$TMP/json.gguf"
check "switch json: staged into slot b" test "$(readlink "$MODEL")" = "$STATE/slots/b.gguf"
check "switch json: on trial" test "$(tpctl --json status | jget state)" = trial
check "mark-good" tpctl mark-good
check "mark-good: committed (idle)" test "$(tpctl --json status | jget state)" = idle
check "watch: the commit arrives" wait_until 20 grep -q '"committed"' "$TMP/events"
kill "$watcher" 2> /dev/null
wait "$watcher" 2> /dev/null
check "watch: staging, staged, slot-changed, trial-started, committed in order" python3 -c "
import json
ev = [json.loads(l)['event'] for l in open('$TMP/events') if l.startswith('{') and '\"event\"' in l]
order = [e for e in ev if e in ('staged', 'slot-changed', 'trial-started', 'committed')]
assert 'staging' in ev and order == ['staged', 'slot-changed', 'trial-started', 'committed'], ev"
check "slot-changed names slot, task, sha256 and model_path" python3 -c "
import json, hashlib
e = [json.loads(l) for l in open('$TMP/events') if '\"slot-changed\"' in l][0]
assert e['slot'] == 'b' and e['task'] == 'json' and e['version'] == 1 and e['model_path'] == '$MODEL', e
assert e['sha256'] == hashlib.sha256(open('$TMP/json.gguf', 'rb').read()).hexdigest(), e"

check "switch shout" tpctl switch shout
check "switch shout: model_path == shout.gguf" same "$TMP/shout.gguf"
tpctl mark-good > /dev/null
tpctl --json status > "$TMP/st.json"
span() { python3 -c "
import json; print(sum(t['span_bytes'] for t in json.load(open('$TMP/list.json'))['tasks'] if t['task'] == '$1'))"; }
written=$(jget counters.last_switch_slot_bytes < "$TMP/st.json")
budget=$(( ($(span json) + $(span shout)) * 11 / 10 ))
check "switch shout wrote O(patch): $written bytes <= 1.1 x (json + shout spans) = $budget" test "$written" -le "$budget"
check "switch shout wrote something" test "$written" -gt 0

check "switch back to json" tpctl switch json
check "A -> B -> A: model_path == json.gguf" same "$TMP/json.gguf"
check "the slot already held json: 0 bytes written" test "$(tpctl --json status | jget counters.last_switch_slot_bytes)" -eq 0
tpctl mark-good > /dev/null
check "switch --base" tpctl switch --base
check "switch --base: model_path == base.gguf" same "$TMP/base.gguf"
tpctl mark-good > /dev/null
check "switch json again" tpctl switch json
check "base -> json: model_path == json.gguf" same "$TMP/json.gguf"
tpctl mark-good > /dev/null

# Trial timeout: no confirmation within the trial (4 s here) rolls back.
stop_daemon
write_config "trial:
  timeout: 4"
start_daemon
tpctl --json switch shout > "$TMP/out" 2>&1
check "switch shout (left on trial)" test "$(jget state < "$TMP/out")" = trial
check "on trial: model_path == shout.gguf" same "$TMP/shout.gguf"
check "trial timeout: rolled back, idle, active task json" \
    wait_status 's["state"] == "idle" and s["active"]["task"] == "json" and s["last_event"]["kind"] == "rolled-back"' 20
check "trial timeout: back to json" same "$TMP/json.gguf"
check "trial timeout: last_error says why" grep -q "not confirmed within 4 s" "$TMP/st.json"
stop_daemon
write_config
start_daemon

# Manual rollback during a trial.
tpctl switch shout > /dev/null
tpctl rollback > "$TMP/out" 2>&1
check "rollback during the trial: exit 0" test $? -eq 0
check "rollback: model_path == json.gguf" same "$TMP/json.gguf"
tpctl mark-good > "$TMP/out" 2>&1
check "mark-good without a trial: refused (exit 2)" test $? -eq 2

# Restart persistence.
stop_daemon
check "stopped daemon: model_path still json" same "$TMP/json.gguf"
start_daemon
tpctl --json status > "$TMP/st.json"
check "restart: active json in slot $(jget active.slot < "$TMP/st.json"), idle" \
    test "$(jget active.task < "$TMP/st.json") $(jget state < "$TMP/st.json")" = "json idle"
check "restart: installed bundles listed again" test "$(tpctl --json list | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["tasks"]))')" -eq 2

# A restart during a trial rolls back.
tpctl switch shout > /dev/null
check "before the crash: shout on trial" test "$(tpctl --json status | jget state)" = trial
$WRAP "$BIN/taskpatchd" --config "$CONF" > "$TMP/second.log" 2>&1
check "a second daemon on the same state dir refuses to start" grep -q "in use by another taskpatchd" "$TMP/second.log"
check "... and disturbs nothing: still on trial, model_path == shout.gguf" \
    test "$(tpctl --json status | jget state)" = trial -a "$(readlink "$MODEL")" = "$STATE/slots/a.gguf"
crash_daemon
start_daemon
tpctl --json status > "$TMP/st.json"
check "crash during the trial: back to json" same "$TMP/json.gguf"
check "crash during the trial: idle, reason recorded" grep -q "restarted during its trial" "$TMP/st.json"
check "crash during the trial: next switch works" tpctl switch shout
check "... model_path == shout.gguf" same "$TMP/shout.gguf"
tpctl mark-good > /dev/null

# Versions: v2 installs, v1 again is a downgrade.
check "install json v2" tpctl install "$TMP/json-v2.tpb"
tpctl install "$TMP/json.tpb" > "$TMP/out" 2>&1
check "install json v1 after v2: refused (exit 2)" test $? -eq 2
check "... names the downgrade" grep -q "older than the installed v2" "$TMP/out"
check "install --allow-downgrade json v1" tpctl install --allow-downgrade "$TMP/json.tpb"
check "switch json picks the newest (v2)" tpctl switch json
check "... model_path == json2.gguf" same "$TMP/json2.gguf"
tpctl mark-good > /dev/null
check "switch json --version 1" tpctl switch json --version 1
check "... model_path == json.gguf" same "$TMP/json.gguf"
tpctl mark-good > /dev/null

# install --switch in one step.
make_bundle json2.gguf json-v3.tpb json 3 > /dev/null
check "install --switch json v3" tpctl install --switch "$TMP/json-v3.tpb"
check "... model_path == json2.gguf" same "$TMP/json2.gguf"
check "... on trial" test "$(tpctl --json status | jget state)" = trial
tpctl mark-good > /dev/null
check "keep_versions 2: json v1 removed after the commit" test ! -e "$STATE/tasks/json/1.tpb"
check "keep_versions 2: json v2 and v3 kept" test -e "$STATE/tasks/json/2.tpb" -a -e "$STATE/tasks/json/3.tpb"

# Health checks decide the trial.
stop_daemon
write_config "trial:
  timeout: 60
  health_command: \"exit 0\"
  health_interval: 1"
start_daemon
tpctl switch shout > "$TMP/out" 2>&1
check "health check passes: switch exits 0" test $? -eq 0
check "... and reports committed" grep -q committed "$TMP/out"
check "... state idle, shout active" test "$(tpctl --json status | jget active.task)" = shout
stop_daemon
write_config "trial:
  timeout: 60
  health_command: \"echo broken >&2; exit 3\"
  health_interval: 1"
start_daemon
tpctl switch json > "$TMP/out" 2>&1
check "health check fails: switch exits 4 (rolled back)" test $? -eq 4
check "... back to shout" same "$TMP/shout.gguf"
check "... the reason names the check" grep -q "exit status 3" "$TMP/out"

stop_daemon
check "daemon log has no errors besides the expected ones" python3 -c "
import re
bad = [l for l in open('$TMP/daemon.log') if l.startswith(('<0>', '<1>', '<2>'))]
assert not bad, bad"
daemon_finish
