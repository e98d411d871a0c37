#!/bin/bash
# make demo: the TaskPatch story on this machine, in under a minute, no root needed. The
# producer makes a small llama-architecture model (quantized by ggml's own quantizer) and three
# tasks, signs bundles of just the changed bytes and publishes a channel; a real nginx serves it
# over HTTPS on loopback; the device (taskpatchd on a scratch directory) fetches the channel,
# installs the bundles and switches to the fleet's task with a SHA-256 proof; a technician
# switches by hand; an update nobody confirms is rolled back; a tampered bundle is refused.
# Usage: tests/demo.sh BUILD_DIR
set -eu
build=$(cd "$1" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
tp="$build/bin/taskpatch"
fix="$build/tools/gguf-fixture"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/taskpatch-demo.XXXXXX")
work=$TMP
daemon=
. "$root/tests/integration/nginx-lib.sh"
trap '[ -n "$daemon" ] && kill "$daemon" 2> /dev/null; stop_nginx; rm -rf "$work"' EXIT

if [ -t 1 ]; then
    bold() { printf '\n\033[1m%s\033[0m\n' "$*"; }
else
    bold() { printf '\n%s\n' "$*"; }
fi
run() { printf '$ %s\n' "$*"; "$@"; }
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

bold "4. Two more tasks from the same base, shout and bullet, and a channel that says: run shout"
for t in shout bullet; do
    if [ "$t" = shout ]; then seed=9 targets=attn_v,ffn_up; else seed=13 targets=attn_q,ffn_down; fi
    "$fix" --ggml "$ggml" "${dims[@]}" --mode lora --targets "$targets" --task-seed "$seed" -o "$work/$t.gguf" > /dev/null
    "$tp" create "$work/base.gguf" "$work/$t.gguf" -o "$work/www/$t-1.tpb" --task "$t" --version 1 "${sign[@]}" > /dev/null
done
run "$tp" publish "$work/www" --channel stable --serial 1 --desired shout "${sign[@]}"

bold "5. Any HTTPS server will do: here Debian's nginx on loopback, serving that folder"
start_nginx > "$work/nginx.out" 2>&1 || { cat "$work/nginx.out"; exit 1; }
url="https://127.0.0.1:$HTTPS_PORT/stable.channel"
echo "channel: $url"

bold "6. The device: taskpatchd on a scratch state directory, polling the channel every 2 s"
cat > "$work/taskpatchd.yaml" <<EOF
state_dir: $work/device
socket: $work/taskpatchd.sock
model_path: $work/device/model.gguf
trust:
  ca: $work/pki/ca.pem
trial:
  timeout: 5
channel:
  url: $url
  interval: 2
tls:
  ca: $work/pki/ca.pem
EOF
sed -n '/^channel:/,$p' "$work/taskpatchd.yaml"
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
model="$work/device/model.gguf"
tpctl provision "$work/base.gguf"
echo "The device fetches the channel, downloads the three bundles and switches to shout:"
until_status "s['state'] == 'trial' and s['active']['task'] == 'shout'"
echo "  update $(update)"
tpctl mark-good
until_status "s['channel']['update']['result'] == 'success'"
echo "  update $(update) (reported only once the trial committed)"

bold "7. A technician switches this device to json by hand (the channel's shout waits)"
tpctl switch json
tpctl mark-good
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

bold "10. The fleet moves to bullet (serial 2): nobody confirms it, so its trial rolls it back"
"$tp" publish "$work/www" --channel stable --serial 2 --desired bullet "${sign[@]}" > /dev/null
echo "published serial 2 (desired bullet); the technician's pin ends with the new serial"
until_status "s['state'] == 'trial' and s['active']['task'] == 'bullet'"
until_status "s['channel']['update']['result'] == 'failure'"
echo "  update $(update)"
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

kill "$daemon"
wait "$daemon" 2> /dev/null || true
daemon=
printf '\nNext: inference services following the switch, and the Debian package. See README.md.\n'
