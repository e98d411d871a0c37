#!/bin/bash
# make demo: the TaskPatch story on this machine, in under a minute, no root needed. The
# producer makes a small llama-architecture model (quantized by ggml's own quantizer) and three
# tasks, signs bundles of just the changed bytes and publishes a channel; a real nginx serves it
# over HTTPS on loopback; the device (taskpatchd on a scratch directory) fetches the channel,
# installs the bundles and switches to the fleet's task with a SHA-256 proof; a technician
# switches by hand; an inference service (real llama.cpp, tests/runtime/service.mjs) follows every
# switch, and its health check commits a trial or, for a broken task, rolls it back; a tampered
# bundle is refused. Then the device gains a second model, an ONNX detector, and a phased rollout
# (50%, then 100%) of its task on the same plain channel updates it without touching the first;
# last, a new release of the language model's base replaces the old one the same way (a base
# bundle, 50% then 100%), and both slots end on it.
# Usage: tests/demo.sh BUILD_DIR
set -eu
build=$(cd "$1" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
tp="$build/bin/taskpatch"
fix="$build/tools/gguf-fixture"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/taskpatch-demo.XXXXXX")
work=$TMP
daemon='' service=''
. "$root/tests/integration/nginx-lib.sh"
trap '[ -n "$service" ] && kill "$service" 2> /dev/null; [ -n "$daemon" ] && kill "$daemon" 2> /dev/null
    stop_nginx; rm -rf "$work"' EXIT

if [ -t 1 ]; then
    bold() { printf '\n\033[1m%s\033[0m\n' "$*"; }
else
    bold() { printf '\n%s\n' "$*"; }
fi
run() { printf '$ %s\n' "$*"; "$@"; }
quiet() { printf '$ %s\n' "$*"; "$@" > /dev/null; }     # the command, not its output
bytes() { stat -c %s "$1"; }
sha() { "$tp" hash "$1" | cut -c1-64; }
sign=(--key "$work/pki/signer.key" --cert "$work/pki/signer.crt")

bold "0. This machine: CPU features and the SHA-256 kernels TaskPatch picked"
run "$tp" caps

bold "1. The producer: a base model (llama architecture, Q4_0, quantized by ggml itself)"
ggml=$(sh "$root/tests/tools/npm-ggml.sh" "$root/build/npm" | tail -n 1)
dims=(--type q4_0 --dim 1024 --ff 2816 --layers 4 --vocab 4096)
"$fix" --ggml "$ggml" "${dims[@]}" -o "$work/base.gguf" > /dev/null
echo "base.gguf: $(bytes "$work/base.gguf") bytes"

bold "2. A task: a LoRA (rank 8) folded into attn_q and attn_v, re-quantized the same way"
"$fix" --ggml "$ggml" "${dims[@]}" --mode lora --targets attn_q,attn_v --task-seed 7 \
    --adapter "$work/json.lora.gguf" -o "$work/json.gguf" > /dev/null
run "$tp" diff "$work/base.gguf" "$work/json.gguf"

bold "3. A bundle of just those changes, signed (a test CA made with openssl)"
sh "$root/tests/tools/make-pki.sh" "$work/pki" > /dev/null
mkdir -p "$work/www"
run "$tp" create "$work/base.gguf" "$work/json.gguf" -o "$work/www/json-1.tpb" --task json --version 1 \
    "${sign[@]}" --expect-sites "$work/json.lora.gguf"

bold "4. Two more tasks from the same base, shout and bullet (a bad build: garbage in one tensor),
   and a channel that says: run shout"
"$fix" --ggml "$ggml" "${dims[@]}" --mode lora --targets attn_v,ffn_up --task-seed 9 -o "$work/shout.gguf" > /dev/null
"$fix" --ggml "$ggml" "${dims[@]}" --mode random --targets blk.1.ffn_down --task-seed 13 -o "$work/bullet.gguf" > /dev/null
for t in shout bullet; do
    "$tp" create "$work/base.gguf" "$work/$t.gguf" -o "$work/www/$t-1.tpb" --task "$t" --version 1 "${sign[@]}" > /dev/null
done
run "$tp" publish "$work/www" --channel stable --serial 1 --desired shout "${sign[@]}"

bold "5. Any HTTPS server will do: here Debian's nginx on loopback, serving that folder"
start_nginx > "$work/nginx.out" 2>&1 || { cat "$work/nginx.out"; exit 1; }
url="https://127.0.0.1:$HTTPS_PORT/stable.channel"
echo "channel: $url"

bold "6. The device: an inference service (llama.cpp) and taskpatchd, which polls the channel every 2 s"
echo "tests/runtime/service.mjs serves the active model with real llama.cpp (node-llama-cpp), follows"
echo "the daemon's socket and reloads on slot-changed; its /health gates every trial."
TASKPATCH_NPM_RUNTIMES=$(sh "$root/tests/tools/npm-runtimes.sh" "$root/build/npm-runtimes" | tail -n 1)
export TASKPATCH_NPM_RUNTIMES
node "$root/tests/runtime/service.mjs" --socket "$work/taskpatchd.sock" --port 0 --port-file "$work/port" \
    --threads 1 2> "$work/service.log" &
service=$!
for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.05; done
[ -s "$work/port" ] || { cat "$work/service.log"; exit 1; }
svc="http://127.0.0.1:$(cat "$work/port")"
cat > "$work/taskpatchd.yaml" <<EOF
state_dir: $work/device
socket: $work/taskpatchd.sock
model_path: $work/device/model.gguf
trust:
  ca: $work/pki/ca.pem
trial:
  timeout: 20
  health_url: $svc/health
  health_interval: 1
channel:
  url: $url
  interval: 2
tls:
  ca: $work/pki/ca.pem
EOF
sed -n '/^trial:/,$p' "$work/taskpatchd.yaml"
TASKPATCHD_LOG_LEVEL=warning "$build/bin/taskpatchd" --config "$work/taskpatchd.yaml" 2> "$work/daemon.log" &
daemon=$!
for _ in $(seq 100); do [ -S "$work/taskpatchd.sock" ] && break; sleep 0.05; done
export TASKPATCH_SOCKET="$work/taskpatchd.sock"
tpctl() { printf '$ tpctl %s\n' "$*"; "$build/bin/tpctl" "$@"; }
status() { "$build/bin/tpctl" --json status | python3 -c "import json,sys
s = json.load(sys.stdin); print(eval(sys.argv[1]))" "$1"; }
update() { status "'%s v%d: %s%s' % (s['channel']['update']['task'], s['channel']['update']['version'],
    s['channel']['update']['result'], ' (' + s['channel']['update']['reason'] + ')' if s['channel']['update']['reason'] else '')"; }
# until_status EXPR: wait (at most 30 s) for a status expression over `s` to hold, saying what changes.
seen=""
until_status() {
    local now
    for _ in $(seq 300); do
        now=$(status "'daemon ' + s['state'] + ', channel ' + s['channel']['state']")
        [ "$now" != "$seen" ] && echo "  ... $now" && seen=$now
        [ "$(status "$1")" = True ] && return 0
        sleep 0.1
    done
    echo "  (timed out)"
    return 1
}
# ask: the service's greedy completion of a fixed prompt, and which model gave it.
ask() {
    curl -s --max-time 10 -X POST -d '{"prompt":"Once upon a time","tokens":12}' "$svc/complete" |
        python3 -c 'import json, sys; a = json.load(sys.stdin)
print("%s v%s (sha256 %s...): %s" % (a["task"] or "base", a["version"], a["sha256"][:12], json.dumps(a["completion"])))'
}
# answering TASK: the service's answers come from TASK (cheap enough to poll every 10 ms).
answering() {
    curl -s --max-time 10 -X POST -d '{"prompt":"Once upon a time","tokens":1}' "$svc/complete" |
        grep -q "\"task\":\"$1\""
}
# service_log: the service's log lines since the last call.
svc_seen=0
service_log() {
    sed -n "$((svc_seen + 1)),\$p" "$work/service.log" | sed 's/^/  /'
    svc_seen=$(wc -l < "$work/service.log")
}
model="$work/device/model.gguf"
tpctl provision "$work/base.gguf"
echo "The device fetches the channel, downloads the three bundles and switches to shout;"
echo "the service loads it, answers /health with 200, and that commits the trial:"
until_status "(s['channel'].get('update') or {}).get('result') == 'success'"
echo "  update $(update) (reported only once the trial committed)"
service_log
printf '$ curl -d '"'"'{"prompt":"Once upon a time","tokens":12}'"'"' %s/complete\n' "$svc"
ask

bold "7. A technician switches this device to json by hand (the channel's shout waits)"
echo "the service before: $(ask)"
t0=$(date +%s%N)
tpctl switch json &
switch=$!
ms=
for _ in $(seq 1000); do
    answering json && ms=$(( ($(date +%s%N) - t0) / 1000000 )) && break
    sleep 0.01
done
wait "$switch"
echo "the service after:  $(ask)"
echo "=> tpctl switch -> the service answering with the new model: ${ms:-?} ms"
service_log
tpctl status

bold "8. The proof: SHA-256 of the model the device serves and of the model the producer made"
run "$tp" hash "$model" "$work/json.gguf"
[ "$(sha "$model")" = "$(sha "$work/json.gguf")" ] && echo "=> identical, byte for byte" ||
    { echo "=> MISMATCH" >&2; exit 1; }

bold "9. What went over the wire, and what the device wrote"
full=$(bytes "$work/json.gguf")
served=$(awk '$1 == "GET" && $2 ~ /\.tpb$/ {s += $4} END {print s + 0}' "$NGINX_LOG")
polls=$(awk '$1 == "GET" && $2 ~ /\.channel$/ && $3 == 304 {n++} END {print n + 0}' "$NGINX_LOG")
awk -v s="$served" -v f="$full" 'BEGIN {
    printf "three bundles: %d bytes from nginx, vs one full model: %d bytes (%.1f%%)\n", s, f, 100 * s / f }'
echo "idle polls of the unchanged channel so far: $polls, each one 304 of $(status "s['channel']['last_poll_bytes']") bytes of HTTP"
echo "json <- shout wrote $(status "s['counters']['last_switch_slot_bytes']") bytes into the inactive slot"

bold "10. The fleet moves to bullet (serial 2): the service finds NaN logits, /health says 500,
    and the trial rolls back"
"$tp" publish "$work/www" --channel stable --serial 2 --desired bullet "${sign[@]}" > /dev/null
echo "published serial 2 (desired bullet); the technician's pin ends with the new serial"
until_status "(s['channel'].get('update') or {}).get('result') == 'failure'"
echo "  update $(update)"
until_status "s['state'] == 'idle'" > /dev/null
for _ in $(seq 100); do answering json && break; sleep 0.05; done
service_log
echo "the service now: $(ask)"
[ "$(sha "$model")" = "$(sha "$work/json.gguf")" ] && echo "=> back on json, byte for byte"

bold "11. A tampered bundle is refused; the active model is untouched"
python3 -c "
import sys; b = bytearray(open(sys.argv[1], 'rb').read()); b[len(b) // 2] ^= 1; open(sys.argv[2], 'wb').write(b)" \
    "$work/www/json-1.tpb" "$work/tampered.tpb"
if tpctl install "$work/tampered.tpb"; then
    echo "=> tampered bundle ACCEPTED" >&2
    exit 1
fi
[ "$(sha "$model")" = "$(sha "$work/json.gguf")" ] && echo "=> refused; the device still serves json"

bold "12. The device gains a second model, an ONNX detector: taskpatchd.yaml's models: map
    (the language model keeps its state as the model 'default'), and a restart"
python3 "$root/tests/tools/make-onnx.py" --layers 8 --channels 16 -o "$work/detector.onnx" \
    --task-out "$work/night.onnx" --change-layers 2 > /dev/null
"$tp" create "$work/detector.onnx" "$work/night.onnx" -o "$work/www/night-1.tpb" --task night --model detector \
    "${sign[@]}" > /dev/null
echo "detector.onnx: $(bytes "$work/detector.onnx") bytes; its task night (2 of 8 convolutions retrained):" \
    "a bundle of $(bytes "$work/www/night-1.tpb") bytes"
kill "$daemon"
wait "$daemon" 2> /dev/null || true
cat > "$work/taskpatchd.yaml" <<EOF
state_dir: $work/device
socket: $work/taskpatchd.sock
device_id: pi-0042
trust:
  ca: $work/pki/ca.pem
channel:
  url: $url
  interval: 2
tls:
  ca: $work/pki/ca.pem
models:
  default:
    model_path: $work/device/model.gguf
    trial:
      timeout: 20
      health_url: $svc/health
      health_interval: 1
  detector:
    model_path: $work/device/detector.onnx
EOF
sed -n '/^device_id:/,$p' "$work/taskpatchd.yaml"
TASKPATCHD_LOG_LEVEL=warning "$build/bin/taskpatchd" --config "$work/taskpatchd.yaml" 2>> "$work/daemon.log" &
daemon=$!
for _ in $(seq 100); do "$build/bin/tpctl" -m default status > /dev/null 2>&1 && break; sleep 0.05; done
status() { "$build/bin/tpctl" -m "${model_name:-default}" --json status | python3 -c "import json,sys
s = json.load(sys.stdin); print(eval(sys.argv[1]))" "$1"; }
tpctl -m detector provision "$work/detector.onnx"
echo "the language model is still on json: $(status "s['active']['task']")"

bold "13. A phased rollout of night on a plain channel: 50% of the fleet first, then everyone"
# The seed that puts this device (device_id pi-0042) in the later half, by the documented formula.
seed=$(python3 -c 'import hashlib
c = lambda s: int.from_bytes(hashlib.sha256(f"taskpatch-rollout\npi-0042\n{s}".encode()).digest()[:8], "big") % 100
print(next(s for s in range(1, 1000) if c(s) >= 50))')
quiet "$tp" publish "$work/www" --channel stable --serial 3 "${sign[@]}" --model default --desired json \
    --model detector --desired night --rollout 50 --rollout-seed "$seed"
model_name=detector
until_status "s['channel'].get('serial') == 3" > /dev/null
echo "detector: $(status "s['channel']['decision']")"
echo "  (this device is in the half the rollout has not reached; the detector still runs its base)"
quiet "$tp" publish "$work/www" --channel stable --serial 4 "${sign[@]}" --model default --desired json \
    --model detector --desired night --rollout 100 --rollout-seed "$seed"
until_status "s['state'] == 'trial' and s['active']['task'] == 'night'"
echo "detector: $(status "s['channel']['decision']")"
echo "(no detector service in this demo: a technician confirms it)"
tpctl -m detector mark-good
until_status "(s['channel'].get('update') or {}).get('result') == 'success'" > /dev/null
echo "  update $(update)"
[ "$(sha "$work/device/detector.onnx")" = "$(sha "$work/night.onnx")" ] &&
    echo "=> the detector serves night, byte for byte; the language model: $(model_name=default status "s['active']['task']")"

bold "14. A new release of the language model's base (its ffn_gate retrained) replaces the old one
    over the same channel: a base bundle, rolled out to 50% first, then to everyone"
"$fix" --ggml "$ggml" "${dims[@]}" --mode lora --targets ffn_gate --task-seed 21 -o "$work/base2.gguf" > /dev/null
run "$tp" create "$work/base.gguf" "$work/base2.gguf" --base-bundle -o "$work/www/base-2.tpb" --version 2 "${sign[@]}"
quiet "$tp" publish "$work/www" --channel stable --serial 5 "${sign[@]}" --model default --base "$work/base2.gguf" \
    --rollout 50 --rollout-seed "$seed" --model detector --desired night
model_name=default
until_status "s['channel'].get('serial') == 5" > /dev/null
echo "language model: $(status "s['channel']['decision']")"
quiet "$tp" publish "$work/www" --channel stable --serial 6 "${sign[@]}" --model default --base "$work/base2.gguf" \
    --rollout 100 --rollout-seed "$seed" --model detector --desired night
until_status "s['state'] == 'trial' and (s['trial'] or {}).get('new_base') is not None"
echo "language model: $(status "s['channel']['decision']")"
echo "the new base is on trial; the service loads it and its /health commits it:"
until_status "s['base']['sha256'] == '$(sha "$work/base2.gguf")' and not s['reprovision'] and s['operation'] is None"
service_log
tpctl -m default status | sed -n '/^Slot/p;/^Base:/p;/^Installed:/p'
[ "$(sha "$model")" = "$(sha "$work/base2.gguf")" ] &&
    echo "=> the language model runs the new base, byte for byte; both slots hold it (the second one"
echo "   re-provisioned from the first in the background); the old base's tasks are no longer offered"
awk -v b="$(bytes "$work/www/base-2.tpb")" -v f="$(bytes "$work/base2.gguf")" 'BEGIN {
    printf "the base bundle: %d bytes for a %d-byte model (%.1f%%)\n", b, f, 100 * b / f }'
echo "the detector, untouched: $(model_name=detector status "s['active']['task']")"

kill "$service" "$daemon"
wait "$service" "$daemon" 2> /dev/null || true
service='' daemon=''
printf '\nNext: the Debian package and its systemd units; make check-runtimes. See README.md.\n'
