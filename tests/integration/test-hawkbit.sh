#!/bin/bash
# The hawkBit DDI client against a DDI fixture (tests/tools/ddi-server.py: hawkBit's documented
# JSON shapes over HTTPS, strict about what the device sends): configData with the device's
# attributes; a deployment downloaded, installed and switched to, reported "closed"/"success"
# only after the trial commits; a rollback reported as "failure" with its reason; a damaged
# artifact refused; a cancelAction honoured during the download; and no request the fixture
# had to reject.
# shellcheck disable=SC2034  # DPID, SOCK, MODEL, CONF are read by daemon-lib.sh
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/daemon-lib.sh"
. "$(dirname "$0")/nginx-lib.sh"       # server_cert
DDI_PID=
trap 'stop_daemon; [ -n "$DDI_PID" ] && kill "$DDI_PID" 2> /dev/null; rm -rf "$TMP"' EXIT

need_fixtures
ddi="$TMP/ddi"
mkdir -p "$ddi/files"
server_cert "$TMP/pki" || { fail "server certificate"; finish; exit 1; }
echo "s3cr3t-token" > "$TMP/token"
cp "$TMP/json.tpb" "$ddi/files/json-1.tpb"
cp "$TMP/json-v2.tpb" "$ddi/files/json-2.tpb"
cp "$TMP/shout.tpb" "$ddi/files/shout-1.tpb"

# state JSON: what the fixture offers now.
state() { echo "$1" > "$ddi/state.json.new" && mv "$ddi/state.json.new" "$ddi/state.json"; }
state '{"sleep": "00:00:01", "config": true, "action": null, "cancel": null}'
for _ in 1 2 3 4 5; do
    port=$((20000 + RANDOM % 20000))
    python3 "$(dirname "$0")/../tools/ddi-server.py" --dir "$ddi" --port "$port" --cert "$TMP/pki/server.crt" \
        --key "$TMP/pki/server.key" --token s3cr3t-token --controller pi-0042 > "$TMP/ddi.out" 2>&1 &
    DDI_PID=$!
    wait_until 20 sh -c 'grep -q ready "$1" || ! kill -0 "$2"' sh "$TMP/ddi.out" "$DDI_PID" 2> /dev/null
    grep -q ready "$TMP/ddi.out" && break   # else the port was taken: another one
    kill "$DDI_PID" 2> /dev/null
    DDI_PID=
done
[ -n "$DDI_PID" ] || { fail "the DDI fixture did not start: $(tail -n 2 "$TMP/ddi.out")"; finish; exit 1; }

# hawkbit_config TRIAL-YAML: the daemon's configuration for the fixture.
hawkbit_config() {
    write_config "$1
tls:
  ca: $TMP/pki/ca.pem
hawkbit:
  url: https://127.0.0.1:$port
  controller_id: pi-0042
  token_file: $TMP/token"
}
hawkbit_config "$LONG_TRIAL"
need_daemon
tpctl provision "$TMP/base.gguf" > /dev/null

# logged PYTHON-EXPR [SECONDS]: until a request in the fixture's log satisfies the expression over `e`.
logged() {
    local i
    for ((i = 0; i < ${2:-15} * 10; i++)); do
        python3 -c "
import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line)
    if $1:
        sys.exit(0)
sys.exit(1)" "$ddi/log.jsonl" 2> /dev/null && return 0
        sleep 0.1
    done
    echo "    not logged: $1"
    return 1
}
closed() { echo "e['method'] == 'POST' and '/deploymentBase/$1/feedback' in e['path'] and e['status'] == 200 and e['body']['status']['execution'] == 'closed'"; }

check "configData sent with the device's attributes" \
    logged "e['method'] == 'PUT' and e['status'] == 200 and e['body']['data']['active_task'] == 'base' and len(e['body']['data']['base_sha256']) == 64 and e['body']['data']['cpu_arch'] in ('x86_64', 'aarch64')"

echo "# a deployment: success only after the commit"
state '{"sleep": "00:00:01", "action": {"id": "7", "artifacts": ["json-1.tpb"]}, "cancel": null}'
check "proceeding feedback" logged "'/deploymentBase/7/feedback' in e['path'] and e['body']['status']['execution'] == 'proceeding'"
check "downloaded feedback" logged "'/deploymentBase/7/feedback' in e['path'] and e['body']['status']['execution'] == 'downloaded'"
check "installed and switched: on trial" wait_status 's["state"] == "trial" and s["active"]["task"] == "json"' 30
check "... json active" same "$TMP/json.gguf"
check "... no 'closed' while on trial" sh -c "! grep -q '/deploymentBase/7/feedback.*closed' '$ddi/log.jsonl'"
tpctl mark-good > /dev/null
check "after mark-good: closed/success" logged "$(closed 7) and e['body']['status']['result']['finished'] == 'success'"
check "... status says success" test "$(tpctl --json status | jget hawkbit.update.result)" = success

echo "# a rollback is a failure, with its reason"
stop_daemon
hawkbit_config "trial:
  timeout: 3"
need_daemon
state '{"sleep": "00:00:01", "action": {"id": "8", "artifacts": ["json-2.tpb"]}, "cancel": null}'
check "json v2 on trial, not confirmed: closed/failure naming the rollback" \
    logged "$(closed 8) and e['body']['status']['result']['finished'] == 'failure' and 'not confirmed' in e['body']['status']['details'][0]" 60
check "... model_path is json v1 again" same "$TMP/json.gguf"

echo "# a damaged artifact"
state '{"sleep": "00:00:01", "action": {"id": "9", "artifacts": ["shout-1.tpb"], "bad_hash": true}, "cancel": null}'
check "an artifact that does not hash as declared: closed/failure" \
    logged "$(closed 9) and e['body']['status']['result']['finished'] == 'failure' and 'do not hash' in e['body']['status']['details'][0]"
check "... nothing switched" same "$TMP/json.gguf"

echo "# a cancel during the download"
state '{"sleep": "00:00:01", "action": {"id": "10", "artifacts": ["shout-1.tpb"], "slow": true}, "cancel": null}'
check "the slow download runs" wait_status 's["hawkbit"]["state"] == "downloading"' 20
state '{"sleep": "00:00:01", "action": {"id": "10", "artifacts": ["shout-1.tpb"], "slow": true}, "cancel": "10"}'
check "cancelAction answered closed/success" \
    logged "'/cancelAction/10/feedback' in e['path'] and e['status'] == 200 and e['body']['status']['execution'] == 'closed'"
check "... status says canceled" test "$(tpctl --json status | jget hawkbit.update.result)" = canceled
check "... nothing installed or switched" same "$TMP/json.gguf"
check "... the partial download is removed" test -z "$(ls "$STATE/downloads" 2> /dev/null)"

echo "# a device of two models: a software module per model"
stop_daemon
make_bundle json.gguf ddi/files/json-llm.tpb json 1 --model llm
make_bundle shout.gguf ddi/files/shout-det.tpb shout 1 --model det
MODEL="$TMP/llm.gguf"
write_models_config "$LONG_TRIAL
tls:
  ca: $TMP/pki/ca.pem
hawkbit:
  url: https://127.0.0.1:$port
  controller_id: pi-0042
  token_file: $TMP/token" llm det
rm -rf "$STATE"
need_daemon
tpctl -m llm provision "$TMP/base.gguf" > /dev/null
tpctl -m det provision "$TMP/base.gguf" > /dev/null
state '{"sleep": "00:00:01", "config": true, "action": null, "cancel": null}'
check "configData names both models' tasks" \
    logged "e['method'] == 'PUT' and e['body']['data'].get('models') == 'llm,det' and e['body']['data'].get('det.active_task') == 'base' and e['body']['data'].get('active_task') == 'base'"
state '{"sleep": "00:00:01", "action": {"id": "11", "artifacts": [{"file": "json-llm.tpb", "model": "llm"}, {"file": "shout-det.tpb", "model": "det"}]}, "cancel": null}'
check "llm's module first: json on trial for llm" wait_model llm 's["state"] == "trial" and s["active"]["task"] == "json"'
check "... det waits for llm's trial" wait_model det 's["state"] == "idle" and s["active"]["task"] is None'
check "... no 'closed' yet" sh -c "! grep -q '/deploymentBase/11/feedback.*closed' '$ddi/log.jsonl'"
tpctl -m llm mark-good > /dev/null
check "llm committed: det's module goes on trial (shout)" wait_model det 's["state"] == "trial" and s["active"]["task"] == "shout"'
check "... still no 'closed'" sh -c "! grep -q '/deploymentBase/11/feedback.*closed' '$ddi/log.jsonl'"
tpctl -m det mark-good > /dev/null
check "both committed: closed/success" logged "$(closed 11) and e['body']['status']['result']['finished'] == 'success'"
check "... each model runs its own task" sh -c "cmp -s '$TMP/llm.gguf' '$TMP/json.gguf' && cmp -s '$TMP/det.gguf' '$TMP/shout.gguf'"
check "... no download left behind" test -z "$(find "$STATE" -path '*/downloads/*' -type f)"
state '{"sleep": "00:00:01", "action": {"id": "12", "artifacts": [{"file": "shout-det.tpb", "model": "wake"}]}, "cancel": null}'
check "a module for a model the device does not have: closed/failure naming it" \
    logged "$(closed 12) and e['body']['status']['result']['finished'] == 'failure' and \"model 'wake', which this device does not have (it has llm, det)\" in e['body']['status']['details'][0]"

echo "# a base bundle in a module: det's base replaced"
$WRAP "$BIN/taskpatch" create "$TMP/base.gguf" "$TMP/json.gguf" --base-bundle --model det -o "$ddi/files/base-det.tpb" \
    --version 2 --key "$TMP/pki/signer.key" --cert "$TMP/pki/signer.crt" --level 3 > /dev/null
state '{"sleep": "00:00:01", "action": {"id": "13", "artifacts": [{"file": "base-det.tpb", "model": "det"}]}, "cancel": null}'
check "det switches to the new base: on trial" \
    wait_model det 's["state"] == "trial" and s["trial"]["task"] == "base" and s["trial"].get("new_base") is not None' 30
check "... no 'closed' while on trial" sh -c "! grep -q '/deploymentBase/13/feedback.*closed' '$ddi/log.jsonl'"
tpctl -m det mark-good > /dev/null
check "committed: closed/success" logged "$(closed 13) and e['body']['status']['result']['finished'] == 'success'"
newbase=$(sha256sum "$TMP/json.gguf" | cut -d' ' -f1)
check "... det's base is the new one, both slots of it" \
    wait_model det 's["base"]["sha256"] == "'"$newbase"'" and not s["reprovision"] and all(v["state"] == "clean" for v in s["slots"].values())' 30
state '{"sleep": "00:00:01", "config": true, "action": null, "cancel": null}'
check "... configData (asked again) names det's new base" \
    logged "e['method'] == 'PUT' and e['body']['data'].get('det.base_sha256') == '$newbase'" 30
check "... llm untouched" cmp -s "$TMP/llm.gguf" "$TMP/json.gguf"

# 400/401: a malformed or unauthenticated request. (A 404 is not one: a deployment closed between
# a poll and the fetch of its link is gone, as on a real server.)
check "the fixture rejected no request" \
    sh -c "! grep -Eq '\"status\": 40[01]' '$ddi/log.jsonl'"
grep -E '"status": 40[01]' "$ddi/log.jsonl" | head -n 3
stop_daemon
echo "wrong-token" > "$TMP/token"
need_daemon
check "a wrong token: the 401 shows in status" wait_status '"HTTP 401" in json.dumps(s)' 20
daemon_finish
