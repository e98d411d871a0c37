#!/bin/bash
# Models by name (taskpatchd.yaml's models: map, taskpatch create --model, tpctl --model): a
# device whose one model is "detector" keeps its state in state_dir/models/detector, takes
# bundles made for detector and refuses those made for "default", and the other way round.
# A device of two models (a GGUF language model, an ONNX detector) behind one socket: each is
# provisioned, installed, switched and rolled back on its own; a command that changes state
# without --model is a usage error listing the models, but install, whose bundle names its
# model, goes to that model; status and list show both; events name
# their model (watch --model shows one); an operation of one model makes another's wait (busy);
# a restart finds both. The map's mistakes are refused at start.
# shellcheck disable=SC2034,SC2154  # DPID, SOCK, MODEL, CONF are read by daemon-lib.sh; root is set there
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/daemon-lib.sh"

need_fixtures
make_bundle json.gguf json-det.tpb json 1 --model detector
make_bundle shout.gguf shout-det.tpb shout 1 --model detector

# models_config NAME...: the test daemon's configuration with a models: map of NAMEs (the first
# one's model_path is $MODEL, the others' beside it).
models_config() {
    {
        printf 'state_dir: %s\nsocket: %s\ntrust:\n  ca: %s\n%s\nmodels:\n' "$STATE" "$SOCK" "$TMP/pki/ca.pem" "$LONG_TRIAL"
        printf '  %s:\n    model_path: %s\n' "$1" "$MODEL"
        shift
        for n in "$@"; do printf '  %s:\n    model_path: %s/%s.gguf\n' "$n" "$TMP" "$n"; done
    } > "$CONF"
}

MODEL="$TMP/detector.gguf"
models_config detector
check "taskpatchd --check: OK, naming the model" sh -c "'$BIN/taskpatchd' --config '$CONF' --check | grep -q 'model_path $MODEL, verify full, model detector)'"
need_daemon
check "provision detector" tpctl provision "$TMP/base.gguf"
check "its state is state_dir/models/detector" test -f "$STATE/models/detector/state.json"
check "... and model_path points into it" test "$(readlink "$MODEL")" = "$STATE/models/detector/slots/a.gguf"
check "nothing of it at the top of state_dir" test ! -e "$STATE/state.json" -a ! -e "$STATE/slots"
tpctl install "$TMP/json.tpb" > "$TMP/out" 2>&1
check "a bundle made for the default model: refused (exit 2)" test $? -eq 2
check "... saying for which model it was made" grep -q "made for model 'default'; this device's model is 'detector'" "$TMP/out"
check "install json made for detector" tpctl install "$TMP/json-det.tpb"
check "switch json" tpctl switch json
check "... model_path is json's bytes" same "$TMP/json.gguf"
check "mark-good" tpctl mark-good
check "the daemon log names the model" grep -q "ready (model detector," "$TMP/daemon.log"
stop_daemon

# The same state after a restart: the model's directory is found again.
need_daemon
check "after a restart: json still active" test "$(tpctl --json status | jget active.task)" = json
stop_daemon

# A one-model device (no map) is the model "default": detector's bundles are refused there.
MODEL="$STATE/model.gguf"
write_config
need_daemon
tpctl provision "$TMP/base.gguf" > /dev/null
tpctl install "$TMP/shout-det.tpb" > "$TMP/out" 2>&1
check "the default model refuses a bundle made for detector" grep -q "made for model 'detector'; this device's model is 'default'" "$TMP/out"
check "... and takes its own" tpctl install "$TMP/shout.tpb"
stop_daemon

# ---- disk_budget: a model's state may take this many bytes -------------------------------------

# budget_config BYTES: the one-model device again, its state capped.
budget_config() { write_config "$LONG_TRIAL
disk_budget: $1"; }
rm -rf "$STATE"
size=$(stat -c %s "$TMP/base.gguf")
budget_config $((2 * size))
need_daemon
tpctl provision "$TMP/base.gguf" > "$TMP/out" 2>&1
check "provision over the disk_budget (two slots do not fit): refused (exit 3, no-space)" test $? -eq 3
check "... saying the budget" grep -q "(model default's disk_budget: $((2 * size)) bytes" "$TMP/out"
check "... nothing provisioned" test "$(tpctl --json status | jget state)" = unprovisioned
stop_daemon
budget_config 1000000000000
need_daemon
check "provision under a large budget" tpctl provision "$TMP/base.gguf"
used=$(tpctl --json status | jget disk.used)
check "status shows the state's use of the budget ($used bytes)" test "$used" -gt $((2 * size))
stop_daemon
j=$(stat -c %s "$TMP/json.tpb")
# Room for all but one block of json's bundle and the 1 MiB margin: refused; a MiB more: taken.
budget_config $((used + j + 1048576 - 4096))
need_daemon
tpctl install "$TMP/json.tpb" > "$TMP/out" 2>&1
check "install over the budget: refused (exit 3)" test $? -eq 3
check "... the message names the budget and the use" grep -q "disk_budget: $((used + j + 1048576 - 4096)) bytes, [0-9]* in use" "$TMP/out"
check "... nothing stored" test "$(tpctl --json list | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["tasks"]))')" = 0
stop_daemon
budget_config $((used + j + 2 * 1048576))
need_daemon
check "install under a budget a MiB larger" tpctl install "$TMP/json.tpb"
stop_daemon

# ---- two models behind one socket ----------------------------------------------------------

python3 "$root/tests/tools/make-onnx.py" --layers 4 --channels 8 -o "$TMP/det-base.onnx" --task-out "$TMP/det.onnx" \
    --change-layers 1 > "$TMP/onnx.log" 2>&1 || { fail "ONNX fixtures: $(tail -n 2 "$TMP/onnx.log")"; daemon_finish; exit 1; }
"$BIN/taskpatch" create "$TMP/det-base.onnx" "$TMP/det.onnx" -o "$TMP/det.tpb" --task det --model detector \
    --key "$TMP/pki/signer.key" --cert "$TMP/pki/signer.crt" --level 1 > /dev/null
rm -rf "$STATE"
MODEL="$STATE/model.gguf"
DET="$TMP/detector.onnx"
{
    printf 'state_dir: %s\nsocket: %s\ntrust:\n  ca: %s\n%s\nmodels:\n' "$STATE" "$SOCK" "$TMP/pki/ca.pem" "$LONG_TRIAL"
    printf '  default:\n    model_path: %s\n  detector:\n    model_path: %s\n' "$MODEL" "$DET"
} > "$CONF"
check "taskpatchd --check lists both models" sh -c "'$BIN/taskpatchd' --config '$CONF' --check | grep -q '2 models: default model_path $MODEL, detector model_path $DET)'"
need_daemon
tpctl provision "$TMP/base.gguf" > "$TMP/out" 2>&1
check "provision without --model: a usage error (exit 2)" test $? -eq 2
check "... listing the models" grep -q "provision: this device has 2 models (default, detector): name one" "$TMP/out"
python3 -c 'import socket, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
s.sendall(b"{\"cmd\":\"status\",\"model\":\"\xc3\xa9\xc3\xa9/../x\"}\n")
print(s.makefile().readline(), end="")' "$SOCK" > "$TMP/raw.out" 2>&1
check "a request's model that is no name: usage, not echoed" grep -q '"code":"usage","message":"status: .model. is no model name' "$TMP/raw.out"
tpctl -m camera status > "$TMP/out" 2>&1
check "--model of no such model: not-found, naming the models" grep -q "no model 'camera' on this device (default, detector)" "$TMP/out"
check "provision default (GGUF)" tpctl --model default provision "$TMP/base.gguf"
check "provision detector (ONNX)" tpctl -m detector provision "$TMP/det-base.onnx"
check "detector's slots are in state_dir/models/detector" test "$(readlink "$DET")" = "$STATE/models/detector/slots/a.onnx"
check "install json for default" tpctl -m default install "$TMP/json.tpb"
tpctl -m detector install "$TMP/json.tpb" > "$TMP/out" 2>&1
check "json (made for default) refused by detector" grep -q "made for model 'default'; this device's model is 'detector'" "$TMP/out"
check "install det without --model: the bundle names detector, so it goes there" tpctl install "$TMP/det.tpb"
check "... detector lists it" sh -c "'$BIN/tpctl' --socket '$SOCK' -m detector --json list | grep -q '\"task\": *\"det\"'"
check "... default does not" sh -c "! '$BIN/tpctl' --socket '$SOCK' -m default --json list | grep -q '\"task\": *\"det\"'"
make_bundle shout.gguf shout-cam.tpb shout 1 --model camera
tpctl install "$TMP/shout-cam.tpb" > "$TMP/out" 2>&1
check "a bundle for a model the device does not have: refused (exit 2)" test $? -eq 2
check "... naming the models it has" grep -q "made for model 'camera'; this device's models are default, detector" "$TMP/out"

tpctl --json status > "$TMP/st.json"
check "status without --model: both models" python3 -c "
import json, sys
s = json.load(open(sys.argv[1]))['models']
sys.exit(not (sorted(s) == ['default', 'detector'] and s['default']['model'] == 'default' and
              s['detector']['model_path'] == sys.argv[2] and s['detector']['base']['kind'] == 'onnx'))" "$TMP/st.json" "$DET"
tpctl status > "$TMP/st.txt"
check "... and tpctl status prints a section for each" test "$(grep -c '^== model ' "$TMP/st.txt")" = 2
tpctl list > "$TMP/list.txt"
check "tpctl list: each model's tasks under its heading" sh -c "sed -n '/== model detector/,\$p' '$TMP/list.txt' | grep -q ' det ' && ! sed -n '/== model detector/,\$p' '$TMP/list.txt' | grep -q ' json '"

comp="$root/packaging/completion/tpctl"
check "bash completion: --model offers the device's models" bash -c "
. '$comp'
words=('$BIN/tpctl' --socket '$SOCK' --model '')
test \"\$(_tpctl_models | tr '\n' ' ')\" = 'default detector '"
check "bash completion: 'tpctl -m detector switch' offers detector's tasks" bash -c "
. '$comp'
words=('$BIN/tpctl' --socket '$SOCK' -m detector switch '')
test \"\$(_tpctl_tasks | tr '\n' ' ')\" = 'det '"

# Events name their model; watch --model shows that model's only.
tpctl --json watch > "$TMP/all.events" 2>&1 &
W1=$!
tpctl --json -m default watch > "$TMP/default.events" 2>&1 &
W2=$!
for _ in $(seq 200); do [ "$(grep -c '"snapshot"' "$TMP/all.events" 2> /dev/null)" = 2 ] && [ -s "$TMP/default.events" ] && break; sleep 0.05; done
check "a subscription without --model gets a snapshot of each model" test "$(grep -c '"event":"snapshot"' "$TMP/all.events")" = 2
check "switch detector to det" tpctl -m detector switch det
check "... detector's model_path is det's bytes" cmp -s "$DET" "$TMP/det.onnx"
check "... default's still the base" same "$TMP/base.gguf"
for _ in $(seq 200); do grep -q '"slot-changed"' "$TMP/all.events" && break; sleep 0.05; done
check "the slot-changed event names model detector" grep -q '"event":"slot-changed","model":"detector"' "$TMP/all.events"
check "status of default: idle (its trial is its own)" test "$(tpctl -m default --json status | jget state)" = idle
check "switch default to json while detector is on trial" tpctl -m default switch json
check "... default's model_path is json's bytes" same "$TMP/json.gguf"
check "rollback detector" tpctl -m detector rollback
check "... detector's model_path is its base again" cmp -s "$DET" "$TMP/det-base.onnx"
check "... default untouched: json, still on trial" test "$(tpctl -m default --json status | jget trial.task)" = json
check "mark-good default" tpctl -m default mark-good
check "the daemon log names the model of each line: detector's rollback" \
    grep -q "\[detector\] rolled-back: det v1 in slot" "$TMP/daemon.log"
check "... default's install" grep -q "\[default\] installed json v1" "$TMP/daemon.log"
tpctl watch > "$TMP/human.events" 2>&1 &
W3=$!
for _ in $(seq 200); do [ "$(grep -c 'snapshot' "$TMP/human.events" 2> /dev/null)" = 2 ] && break; sleep 0.05; done
check "tpctl watch (human): each line of detector's says [detector]" grep -q "snapshot: \[detector\]" "$TMP/human.events"
kill "$W1" "$W2" "$W3" 2> /dev/null
wait "$W1" "$W2" "$W3" 2> /dev/null
check "watch --model default printed none of detector's events" sh -c "! grep -q '\"model\":\"detector\"' '$TMP/default.events' && grep -q '\"model\":\"default\"' '$TMP/default.events'"
stop_daemon

need_daemon
tpctl -m default install "$TMP/shout.tpb" > /dev/null
check "switch default to shout" tpctl -m default switch shout
check "... mark-good default" tpctl -m default mark-good
check "switch detector to det (left on trial)" tpctl -m detector switch det
stop_daemon

# sd_notify's STATUS= names every model (a listener on NOTIFY_SOCKET writes a line per datagram).
python3 -c 'import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
while True:
    with open(sys.argv[2], "ab") as f:
        f.write(s.recv(65536) + b"\n")' "$TMP/notify.sock" "$TMP/notify.log" &
NL=$!
for _ in $(seq 200); do [ -S "$TMP/notify.sock" ] && break; sleep 0.05; done
NOTIFY_SOCKET="$TMP/notify.sock" need_daemon
status_lists_both() { grep "^STATUS=" "$TMP/notify.log" | tail -n 1 | grep -q "^STATUS=default: idle: shout v1 active in slot [ab]; detector: idle: base v0 active in slot a$"; }
for _ in $(seq 200); do status_lists_both && break; sleep 0.05; done
check "sd_notify STATUS= names both models: $(grep "^STATUS=" "$TMP/notify.log" | tail -n 1)" status_lists_both
kill "$NL" 2> /dev/null
wait "$NL" 2> /dev/null
check "after a restart: detector's det (on trial) rolled back, default's shout (committed) kept" test "$(tpctl -m detector --json status | jget active.task) $(tpctl -m default --json status | jget active.task)" = "null shout"
check "... the files agree" sh -c "cmp -s '$DET' '$TMP/det-base.onnx' && cmp -s '$MODEL' '$TMP/shout.gguf'"

# One operation at a time across models: detector's switch while default's provision runs is
# busy. A 256 MiB provision is copied and hashed in slices, the socket served between them, so
# the status that first shows it running comes long before it ends.
truncate -s 256M "$TMP/big.bin" && head -c 1048576 /dev/urandom | dd of="$TMP/big.bin" conv=notrunc status=none
tpctl -m default provision "$TMP/big.bin" > "$TMP/prov.out" 2>&1 &
PV=$!
for _ in $(seq 400); do [ "$(tpctl -m default --json status | jget operation.cmd 2> /dev/null)" = provision ] && break; sleep 0.05; done
tpctl -m detector switch det > "$TMP/out" 2>&1
rc=$?
check "detector's switch while default's provision runs: busy (exit 3, got $rc)" test "$rc" -eq 3
check "... saying model default is running provision" grep -q "model default: provision is running" "$TMP/out"
wait "$PV"
check "default's provision finished" grep -q "base model provisioned" "$TMP/prov.out"
check "... and detector's switch works now" tpctl -m detector switch det
rm -f "$TMP/big.bin"
stop_daemon

# refused_config WHAT PATTERN: taskpatchd does not start on $CONF, and says PATTERN.
refused_config() {
    "$BIN/taskpatchd" --config "$CONF" > "$TMP/out" 2>&1
    local rc=$?
    check "$1: taskpatchd exits 1 (got $rc)" test "$rc" -eq 1
    check "... saying '$2'" grep -q "$2" "$TMP/out"
}
printf 'state_dir: %s\nsocket: %s\nmodel_path: %s\nmodels:\n  llm:\n    model_path: /m/x.gguf\n' "$STATE" "$SOCK" "$MODEL" > "$CONF"
refused_config "model_path beside models:" "model_path and models: both set"
printf 'state_dir: %s\nsocket: %s\nmodels:\n  llm:\n    trial:\n      timeout: 5\n' "$STATE" "$SOCK" > "$CONF"
refused_config "a model without a model_path" "line 5: models: 'llm' has no model_path"
daemon_finish
