#!/bin/bash
# Models by name (taskpatchd.yaml's models: map, taskpatch create --model): a device whose one
# model is "detector" keeps its state in state_dir/models/detector, takes bundles made for
# detector and refuses those made for "default", and the other way round; a configuration
# naming several models is refused at start with a clear error (this version runs one), and
# so are the map's mistakes (a model without model_path, model_path beside models:).
# shellcheck disable=SC2034  # DPID, SOCK, MODEL, CONF are read by daemon-lib.sh
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

# refused_config WHAT PATTERN: taskpatchd does not start on $CONF, and says PATTERN.
refused_config() {
    "$BIN/taskpatchd" --config "$CONF" > "$TMP/out" 2>&1
    local rc=$?
    check "$1: taskpatchd exits 1 (got $rc)" test "$rc" -eq 1
    check "... saying '$2'" grep -q "$2" "$TMP/out"
}
models_config default detector
refused_config "two models" "models: names 2 models; this version of taskpatchd manages one"
printf 'state_dir: %s\nsocket: %s\nmodel_path: %s\nmodels:\n  llm:\n    model_path: /m/x.gguf\n' "$STATE" "$SOCK" "$MODEL" > "$CONF"
refused_config "model_path beside models:" "model_path and models: both set"
printf 'state_dir: %s\nsocket: %s\nmodels:\n  llm:\n    trial:\n      timeout: 5\n' "$STATE" "$SOCK" > "$CONF"
refused_config "a model without a model_path" "line 5: models: 'llm' has no model_path"
daemon_finish
