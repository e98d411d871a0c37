#!/bin/bash
# make check-runtimes: real inference runtimes load the models taskpatchd rebuilds, and an
# inference service follows its slot changes.
#
#   - the example socket client in packaging/docs/protocol.md (tests/runtime/watch-client.c)
#     is the file compiled here, and it prints the slot-changed event of a switch;
#   - llama.cpp (node-llama-cpp 3.21.1's prebuilt build): a base and two sibling tasks from
#     gguf-fixture, bundles by taskpatch create, each task rebuilt by the daemon (tpctl
#     switch); the daemon's model_path decodes greedily the same tokens, with the same
#     probabilities bit for bit, as the directly produced task model, and not the base's;
#   - ONNX Runtime (onnxruntime-node 1.22.0): make-onnx.py's INT8 conv stack and a task,
#     rebuilt by a daemon; the output tensor's raw bytes equal the direct task model's and
#     differ from the base's; make-onnx.py's external-data layouts (one data file, a file per
#     tensor) of the conv stack and of a float32 MatMul stack load and give the inline models'
#     outputs bit for bit, and so do the task directories taskpatch apply rebuilds from bundles
#     and the ones a daemon in directory mode rebuilds into its slot directories (model_path a
#     link to the slot; ONNX Runtime given model_path/model.onnx), each layout, both stacks;
#   - llama.cpp loads a split GGUF (three shards) rebuilt by taskpatch apply and decodes the
#     task's tokens bit for bit; and given the first shard under the model_path of a daemon in
#     directory mode, the split base provisioned: json, then shout (a sibling switch between
#     directory tasks), then the base again, each its directly made model's tokens bit for bit;
#   - the example service (tests/runtime/service.mjs) behind the trial's health_url: a switch
#     changes its answers and is committed by health; a broken task (random bytes, NaN logits)
#     is rolled back, and the answers are the previous task's again.
#
# Usage: tests/runtime/run.sh BUILD_DIR; prints a line per check and "N passed, N failed".
# The runtimes come from tests/tools/npm-runtimes.sh (cached in build/npm-runtimes).
# shellcheck disable=SC2034,SC2154  # root, STATE, CONF: shared with daemon-lib.sh
set -u
BIN=$(cd "$1/bin" && pwd) || exit 1
export BIN
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../integration/lib.sh"
. "$here/../integration/daemon-lib.sh"
SPID=
trap 'stop_service; stop_daemon; [ -n "${KEEP:-}" ] || rm -rf "$TMP"' EXIT
fix="$(dirname "$BIN")/tools/gguf-fixture"

give_up() {
    fail "$1"
    finish
    exit 1
}

# ---- the runtimes and the fixtures ------------------------------------------------------------

runtimes=$(sh "$root/tests/tools/npm-runtimes.sh" "$root/build/npm-runtimes" 2> "$TMP/npm.err") ||
    give_up "runtimes from npm: $(cat "$TMP/npm.err")"
export TASKPATCH_NPM_RUNTIMES=$runtimes
ggml=$(sh "$root/tests/tools/npm-ggml.sh" "$root/build/npm" 2> "$TMP/npm.err") ||
    give_up "ggml from npm: $(cat "$TMP/npm.err")"
[ -x "$fix" ] || give_up "no $fix (make tools first)"

# A small llama: 4 layers of dim 256, a 512-token byte-level SentencePiece vocabulary, Q4_0.
dims=(--ggml "$ggml" --type q4_0 --dim 256 --ff 768 --layers 4 --vocab 512)
sh "$root/tests/tools/make-pki.sh" "$TMP/pki" > /dev/null || give_up "test PKI"
{
    "$fix" "${dims[@]}" -o "$TMP/base.gguf" &&
    "$fix" "${dims[@]}" --mode lora --targets attn_q,ffn_down --task-seed 7 -o "$TMP/json.gguf" &&
    "$fix" "${dims[@]}" --mode lora --targets attn_v,ffn_up --task-seed 9 -o "$TMP/shout.gguf" &&
    "$fix" "${dims[@]}" --mode random --targets ffn_down --task-seed 13 -o "$TMP/broken.gguf" &&
    make_bundle json.gguf json.tpb json 1 && make_bundle shout.gguf shout.tpb shout 1 &&
    make_bundle broken.gguf broken.tpb broken 1
} > "$TMP/fixtures.log" 2>&1 || give_up "GGUF fixtures: $(tail -n 3 "$TMP/fixtures.log")"

decode() { node "$here/llama-decode.mjs" --tokens 16 --threads 1 "$@"; }
# field JSON-LINE KEY: one key of a JSON line, re-serialised (compact, keys as given).
field() { python3 -c 'import json, sys; print(json.dumps(json.loads(sys.argv[1])[sys.argv[2]], separators=(",", ":")))' "$1" "$2"; }
# decoded: tokens and probabilities of a llama-decode line, without the model's path.
decoded() { echo "$(field "$1" tokens) $(field "$1" confidences)"; }
short() { cut -c1-12 <<< "$1"; }

decode "$TMP/base.gguf" "$TMP/json.gguf" "$TMP/shout.gguf" "$TMP/broken.gguf" > "$TMP/direct.jsonl" 2> "$TMP/decode.err" ||
    give_up "llama.cpp cannot decode the fixtures: $(tail -n 3 "$TMP/decode.err")"
direct_base=$(decoded "$(sed -n 1p "$TMP/direct.jsonl")")
direct_json=$(decoded "$(sed -n 2p "$TMP/direct.jsonl")")
direct_shout=$(decoded "$(sed -n 3p "$TMP/direct.jsonl")")
check "llama.cpp loads the fixtures: base, json and shout decode three different token streams" \
    test "$direct_base" != "$direct_json" -a "$direct_base" != "$direct_shout" -a "$direct_json" != "$direct_shout"
check "... and the broken task's probabilities are NaN (random bytes in ffn_down)" \
    grep -q '"confidences":\[\[null' <<< "$(sed -n 4p "$TMP/direct.jsonl")"

# ---- the example client of protocol.md ----------------------------------------------------------

# The C block under "## Example client" in protocol.md must be watch-client.c, verbatim.
quoted=$(awk '/^## Example client/ {on = 1} on && /^```c$/ {c = 1; next} c && /^```$/ {exit} c' \
    "$root/packaging/docs/protocol.md")
check "protocol.md quotes tests/runtime/watch-client.c verbatim" test "$quoted" = "$(cat "$here/watch-client.c")"
cc -std=c11 -O2 -Wall -Wextra -Wformat=2 -Wshadow -Werror -o "$TMP/watch-client" "$here/watch-client.c" \
    > "$TMP/cc.log" 2>&1 || fail "watch-client.c does not compile: $(head -n 3 "$TMP/cc.log")"

need_daemon
tpctl provision "$TMP/base.gguf" > /dev/null && tpctl install "$TMP/json.tpb" > /dev/null &&
    tpctl install "$TMP/shout.tpb" > /dev/null || give_up "provision and install: $(tail -n 3 "$TMP/daemon.log")"
"$TMP/watch-client" "$SOCK" > "$TMP/watch.out" 2> "$TMP/watch.err" &
wpid=$!
for _ in $(seq 100); do grep -q subscribed "$TMP/watch.err" && break; sleep 0.05; done
tpctl switch json > /dev/null
for _ in $(seq 50); do grep -q '"event":"slot-changed"' "$TMP/watch.out" && break; sleep 0.1; done
kill "$wpid" 2> /dev/null
wait "$wpid" 2> /dev/null
check "watch-client prints the switch's slot-changed event with task json and the model path" \
    python3 -c 'import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
sys.exit(not any(e["event"] == "slot-changed" and e["task"] == "json" and e["model_path"] == sys.argv[2] for e in ev))' \
    "$TMP/watch.out" "$MODEL"

# ---- llama.cpp loads what the daemon rebuilt ------------------------------------------------------

# rebuilt TASK EXPECTED: switch to TASK (already done for the first), mark it good, decode model_path.
rebuilt() {
    local task=$1 expected=$2 st sha got
    [ "$(tpctl --json status | jget active.task)" = "$task" ] || tpctl switch "$task" > /dev/null
    tpctl mark-good > /dev/null
    st=$(tpctl --json status)
    sha=$(jget active.sha256 <<< "$st")
    got=$(decode "$(jget model_path <<< "$st")" 2> "$TMP/decode.err") ||
        { fail "llama.cpp cannot load the daemon's $task: $(tail -n 2 "$TMP/decode.err")"; return; }
    got=$(decoded "$got")
    if [ "$got" = "$expected" ] && [ "$got" != "$direct_base" ]; then
        ok "llama.cpp: the daemon's $task (${3:-switch from the base}, sha256 $(short "$sha")) decodes 3x16 tokens and probabilities identical to the directly made $task's, not the base's"
    else
        fail "llama.cpp: the daemon's $task decodes $(cut -c1-120 <<< "$got"), the direct one $(cut -c1-120 <<< "$expected")"
    fi
}
rebuilt json "$direct_json"
rebuilt shout "$direct_shout" "sibling switch from json"
rebuilt json "$direct_json" "sibling switch back from shout"
stop_daemon

# ---- ONNX Runtime loads what the daemon rebuilt ---------------------------------------------------

python3 "$root/tests/tools/make-onnx.py" --layers 16 --channels 16 --seed 5 -o "$TMP/base.onnx" \
    --task-out "$TMP/task.onnx" --change-layers 3 > "$TMP/onnx.log" 2>&1 &&
    "$BIN/taskpatch" create "$TMP/base.onnx" "$TMP/task.onnx" -o "$TMP/detect.tpb" --task detect --version 1 \
        --key "$TMP/pki/signer.key" --cert "$TMP/pki/signer.crt" > "$TMP/onnx.log" 2>&1 ||
    give_up "ONNX fixtures: $(tail -n 3 "$TMP/onnx.log")"
SOCK=$TMP/onnx.sock STATE=$TMP/onnx-state MODEL=$TMP/onnx-state/model.onnx CONF=$TMP/onnx.yaml
write_config
need_daemon
tpctl provision "$TMP/base.onnx" > /dev/null && tpctl install "$TMP/detect.tpb" > /dev/null &&
    tpctl switch detect > /dev/null && tpctl mark-good > /dev/null ||
    give_up "ONNX provision, install, switch: $(tail -n 3 "$TMP/daemon.log")"
st=$(tpctl --json status)
node "$here/onnx-run.mjs" "$(jget model_path <<< "$st")" "$TMP/task.onnx" "$TMP/base.onnx" > "$TMP/onnx.jsonl" \
    2> "$TMP/onnx.err" || give_up "ONNX Runtime cannot run the models: $(tail -n 3 "$TMP/onnx.err")"
out_rebuilt=$(field "$(sed -n 1p "$TMP/onnx.jsonl")" bytes)
out_task=$(field "$(sed -n 2p "$TMP/onnx.jsonl")" bytes)
out_base=$(field "$(sed -n 3p "$TMP/onnx.jsonl")" bytes)
if [ "$out_rebuilt" = "$out_task" ] && [ "$out_rebuilt" != "$out_base" ]; then
    ok "ONNX Runtime: the daemon's detect (sha256 $(short "$(jget active.sha256 <<< "$st")")) outputs $(field "$(sed -n 1p "$TMP/onnx.jsonl")" dims) float32 bit-identical to the direct task model's, not the base's"
else
    fail "ONNX Runtime: rebuilt output $(short "$out_rebuilt")... task $(short "$out_task")... base $(short "$out_base")..."
fi
stop_daemon

# ---- ONNX Runtime reads external data as make-onnx.py writes it --------------------------------

# onnx_external NAME MAKE-ONNX-ARGS...: a base and a task written inline and as model directories,
# one data file (offsets aligned to 4096, SHA-1 checksums) and a file per tensor. ONNX Runtime,
# given a model's path, reads the data files next to it: each layout's output is bit-identical to
# the inline model's, and the task's differs from the base's.
onnx_external() {
    local name=$1 d=$TMP/ext-${1%% *} m=$root/tests/tools/make-onnx.py out=() i
    shift
    {
        python3 "$m" "$@" -o "$d/inline/base.onnx" --task-out "$d/inline/task.onnx" &&
        python3 "$m" "$@" -o "$d/one/base/model.onnx" --task-out "$d/one/task/model.onnx" --external one \
            --align 4096 --align-above 0 --checksum &&
        python3 "$m" "$@" -o "$d/per-tensor/base/model.onnx" --task-out "$d/per-tensor/task/model.onnx" \
            --external per-tensor
    } > "$TMP/ext.log" 2>&1 || { fail "make-onnx.py, $name: $(tail -n 2 "$TMP/ext.log")"; return; }
    node "$here/onnx-run.mjs" "$d"/inline/{base,task}.onnx "$d"/one/{base,task}/model.onnx \
        "$d"/per-tensor/{base,task}/model.onnx > "$d/out.jsonl" 2> "$TMP/ext.err" ||
        { fail "ONNX Runtime cannot run the $name models with external data: $(grep -m 1 Error "$TMP/ext.err")"; return; }
    for i in 1 2 3 4 5 6; do out[i]=$(field "$(sed -n "${i}p" "$d/out.jsonl")" bytes); done
    # taskpatch rebuilds each task directory from its base directory and a signed bundle; the
    # rebuilt model (model.onnx beside its rebuilt data files) gives the task's output.
    local layout rebuilt
    for layout in one per-tensor; do
        if ! "$BIN/taskpatch" create "$d/$layout/base" "$d/$layout/task" -o "$d/$layout.tpb" --task ext --version 1 \
            --key "$TMP/pki/signer.key" --cert "$TMP/pki/signer.crt" > "$TMP/ext.log" 2>&1 ||
            ! "$BIN/taskpatch" apply "$d/$layout/base" "$d/$layout.tpb" --ca "$TMP/pki/ca.pem" -o "$d/$layout/rebuilt" \
                > "$TMP/ext.log" 2>&1; then
            fail "taskpatch create/apply, $name ($layout): $(tail -n 2 "$TMP/ext.log")"
            continue
        fi
        rebuilt=$(node "$here/onnx-run.mjs" "$d/$layout/rebuilt/model.onnx" 2> "$TMP/ext.err") ||
            { fail "ONNX Runtime cannot run the rebuilt $name ($layout): $(grep -m 1 Error "$TMP/ext.err")"; continue; }
        if [ "$(field "$rebuilt" bytes)" = "${out[2]}" ]; then
            ok "ONNX Runtime: $name rebuilt by taskpatch apply from a $(stat -c %s "$d/$layout.tpb")-byte bundle ($layout), its data files resolved beside it: output bit-identical to the task's"
        else
            fail "ONNX Runtime, $name rebuilt ($layout): output $(short "$(field "$rebuilt" bytes)"), the task's $(short "${out[2]}")"
        fi
        onnx_daemon "$name" "$d" "$layout" "${out[2]}" "${out[1]}"
    done
    # The weights really are outside: the per-tensor files hold most of the inline model's bytes,
    # and both external models are smaller by at least half of that.
    local inline data files held
    inline=$(stat -c %s "$d/inline/base.onnx")
    data=$(stat -c %s "$d/one/base/model.onnx.data")
    files=$(find "$d/per-tensor/base" -type f ! -name model.onnx | wc -l)
    held=$(find "$d/per-tensor/base" -type f ! -name model.onnx -printf '%s\n' | awk '{n += $1} END {print n + 0}')
    if [ "$held" -lt $((inline / 2)) ] || [ "$data" -lt "$held" ] ||
        [ $(($(stat -c %s "$d/one/base/model.onnx") + held / 2)) -gt "$inline" ] ||
        [ $(($(stat -c %s "$d/per-tensor/base/model.onnx") + held / 2)) -gt "$inline" ]; then
        fail "ONNX Runtime, $name: make-onnx.py kept the data inline (inline model $inline bytes, data file $data, $files per-tensor files of $held)"
    elif [ "${out[1]}" != "${out[2]}" ] && [ "${out[3]}" = "${out[1]}" ] && [ "${out[5]}" = "${out[1]}" ] &&
        [ "${out[4]}" = "${out[2]}" ] && [ "${out[6]}" = "${out[2]}" ]; then
        ok "ONNX Runtime: $name base and task with external data (one $data-byte file; $files files per tensor) output bit-identical to the inline models', the task's not the base's"
    else
        fail "ONNX Runtime, $name: outputs inline $(short "${out[1]}")/$(short "${out[2]}"), one file $(short "${out[3]}")/$(short "${out[4]}"), per tensor $(short "${out[5]}")/$(short "${out[6]}")"
    fi
}
# onnx_daemon NAME D LAYOUT TASK-OUT BASE-OUT: a daemon in directory mode provisioned with the
# base directory D/LAYOUT/base, the bundle D/LAYOUT.tpb installed, switched to and marked good:
# model_path links to the slot directory the daemon rebuilt, and ONNX Runtime, given
# model_path/model.onnx, reads the data files beside it and outputs the task's bytes.
onnx_daemon() {
    local name=$1 d=$2 layout=$3 want=$4 base=$5 st path slot got
    SOCK=$d/$layout.sock STATE=$d/$layout-state MODEL=$d/$layout-state/model CONF=$d/$layout.yaml
    write_config
    if ! start_daemon > /dev/null || ! tpctl provision "$d/$layout/base" > /dev/null ||
        ! tpctl install "$d/$layout.tpb" > /dev/null || ! tpctl switch ext > /dev/null || ! tpctl mark-good > /dev/null; then
        fail "ONNX Runtime, $name ($layout) in the daemon: start, provision, install, switch: $(tail -n 2 "$TMP/daemon.log")"
        stop_daemon
        return
    fi
    st=$(tpctl --json status)
    path=$(jget model_path <<< "$st")
    slot=$(jget active.slot <<< "$st")
    got=$(node "$here/onnx-run.mjs" "$path/model.onnx" 2> "$TMP/ext.err") ||
        got="(ONNX Runtime failed: $(grep -m 1 Error "$TMP/ext.err"))"
    if [ "$(readlink "$path")" != "$STATE/slots/$slot.dir" ]; then
        fail "ONNX Runtime, $name ($layout) in the daemon: model_path $path links to $(readlink "$path"), not slots/$slot.dir"
    elif [ "$(field "$got" bytes 2> /dev/null)" = "$want" ] && [ "$want" != "$base" ]; then
        ok "ONNX Runtime: $name rebuilt by the daemon into slot $slot.dir from the $(stat -c %s "$d/$layout.tpb")-byte bundle ($layout, set digest $(short "$(jget active.sha256 <<< "$st")")), model_path/model.onnx and its $(find "$path/" -type f ! -name model.onnx | wc -l) data file(s): output bit-identical to the task's, not the base's"
    else
        fail "ONNX Runtime, $name ($layout) in the daemon: output $(short "$(field "$got" bytes 2> /dev/null || echo "$got")"), the task's $(short "$want"), the base's $(short "$base")"
    fi
    stop_daemon
}
# The conv stack with onnx's default threshold (scales and zero points stay inline); the MatMul
# stack's biases, "onnx::Add_<l>", are no file names: their files are named by a UUID.
onnx_external "INT8 conv" --layers 16 --channels 16 --seed 5 --change 3 --mode lowrank --size-threshold 1024
onnx_external "float32 MatMul" --kind matmul --dim 512 --layers 6 --seed 5 --change 2 --mode lowrank

# ---- llama.cpp loads a split GGUF that taskpatch or the daemon rebuilt ---------------------------

# The base, json and shout split in three (llama-gguf-split's layout, tests/tools/gguf-split.py);
# bundles of the shard directories. json's is applied offline; llama.cpp, given the first shard,
# finds the others beside it and decodes json's tokens and probabilities bit for bit.
split=(python3 "$root/tests/tools/gguf-split.py")
shard=model-00001-of-00003.gguf
# split_bundle TASK: TASK's shard directory and its bundle against the base's, $TMP/split-TASK.tpb.
split_bundle() {
    "${split[@]}" "$TMP/$1.gguf" "$TMP/split/$1" --shards 3 --prefix model &&
        "$BIN/taskpatch" create "$TMP/split/base" "$TMP/split/$1" -o "$TMP/split-$1.tpb" --task "$1" --version 1 \
            --key "$TMP/pki/signer.key" --cert "$TMP/pki/signer.crt"
}
if "${split[@]}" "$TMP/base.gguf" "$TMP/split/base" --shards 3 --prefix model > "$TMP/split.log" 2>&1 &&
    split_bundle json > "$TMP/split.log" 2>&1 && split_bundle shout > "$TMP/split.log" 2>&1 &&
    "$BIN/taskpatch" apply "$TMP/split/base" "$TMP/split-json.tpb" --ca "$TMP/pki/ca.pem" -o "$TMP/split/rebuilt" \
        > "$TMP/split.log" 2>&1; then
    line=$(decode "$TMP/split/rebuilt/$shard" 2> "$TMP/decode.err") ||
        line="(llama.cpp failed: $(tail -n 1 "$TMP/decode.err"))"
    if [ "$(decoded "$line")" = "$direct_json" ]; then
        ok "llama.cpp: json split in 3 shards and rebuilt by taskpatch apply ($(stat -c %s "$TMP/split-json.tpb")-byte bundle) decodes json's tokens and probabilities bit for bit"
    else
        fail "llama.cpp: the rebuilt split json decodes $(short "$line"), not json's"
    fi
    split_ok=1
else
    fail "split GGUF: $(tail -n 2 "$TMP/split.log")"
    split_ok=
fi

# The daemon in directory mode (model_path without an extension): the split base provisioned,
# both bundles installed; each switch rebuilds a slot directory and model_path links to it. The
# first shard under model_path decodes the active model's tokens and probabilities bit for bit.
# rebuilt_dir TASK EXPECTED HOW: switch to TASK ("base": back to the base), mark it good, decode.
rebuilt_dir() {
    local task=$1 expected=$2 how=$3 st path slot got what args=("$1") unlike=", not the base's"
    [ $# -lt 4 ] || unlike=$4
    [ "$task" = base ] && args=(--base)
    tpctl switch "${args[@]}" > /dev/null && tpctl mark-good > /dev/null ||
        { fail "llama.cpp, split $task in the daemon: switch: $(tail -n 2 "$TMP/daemon.log")"; return; }
    st=$(tpctl --json status)
    path=$(jget model_path <<< "$st")
    slot=$(jget active.slot <<< "$st")
    if [ "$path" != "$MODEL" ] || [ "$(readlink "$path")" != "$STATE/slots/$slot.dir" ]; then
        fail "llama.cpp, split $task in the daemon: model_path $path links to $(readlink "$path"), not slots/$slot.dir"
        return
    fi
    got=$(decode "$path/$shard" 2> "$TMP/decode.err") ||
        { fail "llama.cpp cannot load the daemon's split $task: $(tail -n 2 "$TMP/decode.err")"; return; }
    got=$(decoded "$got")
    if [ "$task" = base ]; then what=base; else what="$task from a $(stat -c %s "$TMP/split-$task.tpb")-byte bundle"; fi
    if [ "$got" = "$expected" ] && { [ "$task" = base ] || [ "$got" != "$direct_base" ]; }; then
        ok "llama.cpp: the daemon's split $what ($how, slot $slot.dir, set digest $(short "$(jget active.sha256 <<< "$st")")), its first shard under model_path: 3x16 tokens and probabilities identical to the directly made model's$unlike"
    else
        fail "llama.cpp: the daemon's split $task decodes $(cut -c1-120 <<< "$got"), the direct one $(cut -c1-120 <<< "$expected")"
    fi
}
if [ -n "$split_ok" ]; then
    SOCK=$TMP/split.sock STATE=$TMP/split-state MODEL=$TMP/split-state/llm CONF=$TMP/split.yaml
    write_config
    need_daemon
    if tpctl provision "$TMP/split/base" > /dev/null && tpctl install "$TMP/split-json.tpb" > /dev/null &&
        tpctl install "$TMP/split-shout.tpb" > /dev/null; then
        rebuilt_dir json "$direct_json" "switch from the base"
        rebuilt_dir shout "$direct_shout" "sibling switch from json"
        rebuilt_dir base "$direct_base" "switch back to the base" ", not json's or shout's"
    else
        fail "split GGUF in the daemon: provision, install: $(tail -n 3 "$TMP/daemon.log")"
    fi
    stop_daemon
fi

# ---- the example service: switches, health commits, a broken task rolls back -----------------

SOCK=$TMP/taskpatchd.sock STATE=$TMP/state MODEL=$TMP/state/model.gguf CONF=$TMP/service.yaml
stop_service() {
    [ -n "$SPID" ] || return 0
    kill "$SPID" 2> /dev/null
    wait "$SPID" 2> /dev/null
    SPID=
}
node "$here/service.mjs" --socket "$SOCK" --port 0 --port-file "$TMP/port" --threads 1 2> "$TMP/service.log" &
SPID=$!
for _ in $(seq 100); do [ -s "$TMP/port" ] && break; sleep 0.1; done
[ -s "$TMP/port" ] || give_up "the service did not start: $(tail -n 3 "$TMP/service.log")"
url="http://127.0.0.1:$(cat "$TMP/port")"
write_config "trial:
  timeout: 30
  health_url: $url/health
  health_interval: 1"
need_daemon     # the state of the llama.cpp checks: json active, shout installed
tpctl install "$TMP/broken.tpb" > /dev/null || give_up "install broken: $(tail -n 3 "$TMP/daemon.log")"

# answer: the service's /complete for the first prompt of llama-decode.mjs, as "TASK TOKENS".
answer() {
    curl -s --max-time 10 -X POST -d '{"prompt":"The quick brown fox","tokens":16}' "$url/complete" |
        python3 -c 'import json, sys; a = json.load(sys.stdin); print(a["task"], json.dumps(a["tokens"], separators=(",", ":")))' 2> /dev/null
}
# first_tokens: the tokens of the first prompt in a decoded line.
first_tokens() { python3 -c 'import json, sys; print(json.dumps(json.loads(sys.argv[1].split(" ")[0])[0], separators=(",", ":")))' "$1"; }
health() { curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$url/health"; }
for _ in $(seq 100); do [ "$(health)" = 200 ] && break; sleep 0.1; done
check "service: healthy, answering with json's tokens (as llama-decode.mjs decodes the direct json)" \
    test "$(answer)" = "json $(first_tokens "$direct_json")"

# Switch to shout: time from the switch request to the first answer by the new model.
t0=$(date +%s%N)
tpctl --json switch shout > "$TMP/switch.json" 2>&1 &
tpid=$!
ms=
for _ in $(seq 1000); do
    curl -s --max-time 10 -X POST -d '{"prompt":"x","tokens":1}' "$url/complete" | grep -q '"task":"shout"' &&
        ms=$(( ($(date +%s%N) - t0) / 1000000 )) && break
    sleep 0.01
done
wait "$tpid"
rc=$?
check "service: tpctl switch shout is committed by the health check (exit $rc, $(jget state < "$TMP/switch.json" 2> /dev/null))" \
    test "$rc $(jget state < "$TMP/switch.json" 2> /dev/null)" = "0 committed"
check "service: answers with shout's tokens after the switch (${ms:-no} ms from tpctl switch to the first answer)" \
    test "$(answer)" = "shout $(first_tokens "$direct_shout")"

# The broken task: the service finds NaN logits, /health says 500, the daemon rolls back.
tpctl --json switch broken > "$TMP/switch.json" 2>&1
rc=$?
check "service: tpctl switch broken is rolled back by the health check (exit $rc: $(grep -o '"message":"[^"]*"' "$TMP/switch.json" | cut -c1-90))" \
    test "$rc $(tpctl --json status | jget active.task)" = "4 shout"
check "service: the service reported the broken model (NaN logits) to the health check" \
    grep -q "broken: broken v1.*not finite" "$TMP/service.log"
for _ in $(seq 100); do [ "$(health)" = 200 ] && break; sleep 0.1; done
check "service: healthy again after the rollback, answering with shout's tokens" \
    test "$(health) $(answer)" = "200 shout $(first_tokens "$direct_shout")"
echo "  switch -> the service answering with the new model: ${ms:-?} ms"
stop_service
daemon_finish
