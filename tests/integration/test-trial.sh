#!/bin/bash
# The trial and rollback as a technician and an inference service meet them (found from outside):
# an install during a trial keeps the trial; 'tpctl rollback' outside a trial returns to the
# previously committed task through a trial and refuses a task that failed its trial, a version
# below the anti-rollback floor, or nothing; it never toggles; a subscription starts with a
# snapshot; a rollback made at start-up is told to the first subscriber; last_event replaces
# what came before, so an old failure does not stay.
# shellcheck disable=SC2034  # DPID, SOCK, MODEL, CONF are read by daemon-lib.sh
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/daemon-lib.sh"

need_fixtures
make_bundle shout.gguf shout-v2.tpb shout 2 || fail "shout v2 bundle"
# A short trial, so that "nothing rolls back after the trial's timeout" is checked for real.
write_config "trial:
  timeout: 8"
need_daemon

# raw JSON: one request on the socket, its reply line on stdout.
raw() {
    python3 - "$SOCK" "$1" <<'EOF'
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(sys.argv[2].encode() + b"\n")
f = s.makefile()
print(f.readline().strip())
EOF
}

# subscribe_first N OUT: subscribe, write the reply and the first N events to OUT (10 s at most).
subscribe_first() {
    python3 - "$SOCK" "$1" "$2" <<'EOF'
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(10)
s.connect(sys.argv[1])
s.sendall(b'{"cmd": "subscribe"}\n')
f = s.makefile()
with open(sys.argv[3], "w") as out:
    for _ in range(int(sys.argv[2]) + 1):
        out.write(f.readline())
EOF
}

st() { tpctl --json status > "$TMP/st.json" && jget "$1" < "$TMP/st.json"; }

tpctl provision "$TMP/base.gguf" > /dev/null
tpctl install "$TMP/json.tpb" > /dev/null
tpctl install "$TMP/shout.tpb" > /dev/null

echo "# a subscription starts with a snapshot"
subscribe_first 1 "$TMP/snap"
check "snapshot: state, active slot and task, sha256, model_path, trial" python3 -c "
import json, hashlib
lines = [json.loads(l) for l in open('$TMP/snap')]
assert lines[0] == {'ok': True}, lines[0]
e = lines[1]
assert e['event'] == 'snapshot' and e['state'] == 'idle' and e['trial'] is None, e
assert e['active']['slot'] == 'a' and e['active']['task'] is None and e['model_path'] == '$MODEL', e
assert e['active']['sha256'] == hashlib.sha256(open('$TMP/base.gguf', 'rb').read()).hexdigest(), e
assert 'time' in e, e"

echo "# rollback outside a trial"
tpctl switch json > /dev/null
tpctl mark-good > /dev/null
tpctl switch shout > /dev/null
tpctl mark-good > /dev/null
tpctl rollback > "$TMP/out" 2>&1
check "rollback outside a trial: exit 0" test $? -eq 0
check "... back to the previously committed json, on trial" test "$(st state) $(st active.task)" = "trial json"
check "... model_path == json.gguf" same "$TMP/json.gguf"
tpctl mark-good > /dev/null
check "... committed json" test "$(st state) $(st active.task)" = "idle json"
tpctl rollback > "$TMP/out" 2>&1
check "pressed again: it does not toggle back to shout (goes further back: the base)" \
    test "$(st active.task)" = null
tpctl mark-good > /dev/null
tpctl rollback > "$TMP/out" 2>&1
check "nothing committed before the base: refused (exit 2 or more)" test $? -ge 2
check "... and says why" grep -q "nothing was committed before" "$TMP/out"
check "... the base still runs" same "$TMP/base.gguf"

echo "# a task that failed its trial is never rolled back to"
tpctl switch json > /dev/null
tpctl mark-good > /dev/null
tpctl switch shout > /dev/null
tpctl mark-good > /dev/null
tpctl rollback > /dev/null          # json on trial ...
tpctl rollback > /dev/null          # ... rolled back during its trial: json failed
check "json rolled back during its trial: shout active" test "$(st state) $(st active.task)" = "idle shout"
tpctl rollback > "$TMP/out" 2>&1
check "rollback to json (failed its trial): refused" test $? -ge 2
check "... says it failed its trial" grep -q "failed its trial" "$TMP/out"
check "... shout still runs" same "$TMP/shout.gguf"
tpctl switch json > /dev/null
check "an explicit switch to json still works" test "$(st active.task)" = json
tpctl mark-good > /dev/null

echo "# the anti-rollback floor"
tpctl install "$TMP/json-v2.tpb" > /dev/null
tpctl switch json --version 2 > /dev/null
tpctl mark-good > /dev/null
check "json v2 committed" test "$(st active.task) $(st active.version)" = "json 2"
tpctl rollback > "$TMP/out" 2>&1
check "rollback to json v1 (below the accepted v2): refused" test $? -ge 2
check "... names the floor and --allow-downgrade" grep -q "allow-downgrade" "$TMP/out"
check "tpctl rollback --allow-downgrade" tpctl rollback --allow-downgrade
check "... json v1 on trial" test "$(st state) $(st active.task) $(st active.version)" = "trial json 1"
tpctl mark-good > /dev/null
raw '{"cmd": "rollback", "allow_downgrade": "yes"}' > "$TMP/reply"
check "the protocol's allow_downgrade must be a boolean" grep -q "wrong type" "$TMP/reply"

echo "# install during a trial"
tpctl switch shout > /dev/null
check "shout on trial" test "$(st state)" = trial
t0=$(date +%s)
tpctl install "$TMP/shout-v2.tpb" > "$TMP/out" 2>&1
check "install during the trial: exit 0" test $? -eq 0
check "... still on trial, the trial names shout v1" test "$(st state) $(st trial.task) $(st trial.version)" = "trial shout 1"
check "mark-good after the install commits" tpctl mark-good
check "... committed: idle, shout active" test "$(st state) $(st active.task)" = "idle shout"
# Nothing may roll back later: the trial's timer (8 s) must not fire.
while [ $(($(date +%s) - t0)) -lt 10 ]; do
    [ "$(st active.task)" = shout ] || break
    sleep 0.2
done
check "... and nothing rolls back after the trial's timeout" test "$(st active.task) $(st last_event.kind)" = "shout committed"
check "last_event: committed, why" grep -q "marked good by uid" "$TMP/st.json"
check "last_error: none" test "$(st last_error)" = null

echo "# a restart during a trial is told to the first subscriber"
tpctl switch shout > /dev/null
check "shout v2 on trial" test "$(st state) $(st trial.version)" = "trial 2"
crash_daemon
start_daemon
subscribe_first 3 "$TMP/first"
check "first subscriber: snapshot (shout v1 active), then slot-changed and rolled-back (shout v2)" python3 -c "
import json
lines = [json.loads(l) for l in open('$TMP/first')]
ev = [l.get('event') for l in lines[1:]]
assert ev == ['snapshot', 'slot-changed', 'rolled-back'], ev
snap, changed, back = lines[1:]
assert snap['active']['task'] == 'shout' and snap['active']['version'] == 1, snap
assert snap['last_event']['kind'] == 'rolled-back', snap
assert changed['task'] == 'shout' and changed['version'] == 1 and changed['reason'] == 'rollback', changed
assert changed['model_path'] == '$MODEL', changed
assert back['task'] == 'shout' and back['version'] == 2 and 'restarted' in back['reason'], back
assert changed['transaction'] == back['transaction'], (changed, back)"
subscribe_first 1 "$TMP/second"
check "a later subscriber gets the snapshot only" python3 -c "
import json
lines = [json.loads(l) for l in open('$TMP/second')]
assert [l.get('event') for l in lines[1:]] == ['snapshot'], lines"
check "last_error names the rollback" test "$(st last_error.code)" = rolled-back
tpctl switch shout > /dev/null
tpctl mark-good > /dev/null
check "a later commit clears last_error" test "$(st last_error) $(st last_event.kind)" = "null committed"

daemon_finish
