#!/bin/sh
# make demo: the TaskPatch story as far as it exists today. The producer makes a small
# llama-architecture model (quantized by ggml's own quantizer) and three tasks, and signs
# bundles of just the changed bytes; the device (taskpatchd on a scratch directory, driven by
# tpctl as a technician would) provisions, installs, switches with a SHA-256 proof, writes
# O(patch) bytes per switch, rolls back an unconfirmed task and refuses a tampered bundle.
# Grows with fleet delivery and the inference services as they land.
# Usage: tests/demo.sh BUILD_DIR
set -eu
build=$1
root=$(cd "$(dirname "$0")/.." && pwd)
tp="$build/bin/taskpatch"
fix="$build/tools/gguf-fixture"
work=$(mktemp -d "${TMPDIR:-/tmp}/taskpatch-demo.XXXXXX")
trap 'rm -rf "$work"' EXIT

if [ -t 1 ]; then
    bold() { printf '\n\033[1m%s\033[0m\n' "$*"; }
else
    bold() { printf '\n%s\n' "$*"; }
fi
run() { printf '$ %s\n' "$*"; "$@"; }
bytes() { stat -c %s "$1"; }

bold "0. This machine: CPU features and the SHA-256 kernels TaskPatch picked"
run "$tp" caps

bold "1. Provision: a base model (llama architecture, Q4_0, quantized by ggml itself)"
ggml=$(sh "$root/tests/tools/npm-ggml.sh" "$root/build/npm" | tail -n 1)
dims="--type q4_0 --dim 1024 --ff 2816 --layers 4 --vocab 4096"
# shellcheck disable=SC2086
"$fix" --ggml "$ggml" $dims -o "$work/base.gguf" > /dev/null
echo "base.gguf: $(bytes "$work/base.gguf") bytes"

bold "2. A task: a LoRA (rank 8) folded into attn_q and attn_v, re-quantized the same way"
# shellcheck disable=SC2086
"$fix" --ggml "$ggml" $dims --mode lora --targets attn_q,attn_v --task-seed 7 \
    --adapter "$work/json.lora.gguf" -o "$work/json.gguf" > /dev/null
run "$tp" diff "$work/base.gguf" "$work/json.gguf"

bold "3. The producer signs a bundle of just those changes (test CA made with openssl)"
sh "$root/tests/tools/make-pki.sh" "$work/pki" > /dev/null
run "$tp" create "$work/base.gguf" "$work/json.gguf" -o "$work/json.tpb" --task json --version 1 \
    --key "$work/pki/signer.key" --cert "$work/pki/signer.crt" --expect-sites "$work/json.lora.gguf"

bold "4. Two more tasks from the same base: shout and bullet"
for t in shout bullet; do
    if [ "$t" = shout ]; then seed=9 targets=attn_v,ffn_up; else seed=13 targets=attn_q,ffn_down; fi
    # shellcheck disable=SC2086
    "$fix" --ggml "$ggml" $dims --mode lora --targets "$targets" --task-seed "$seed" -o "$work/$t.gguf" > /dev/null
    "$tp" create "$work/base.gguf" "$work/$t.gguf" -o "$work/$t.tpb" --task "$t" --version 1 \
        --key "$work/pki/signer.key" --cert "$work/pki/signer.crt" > /dev/null
    echo "$t.tpb: $(bytes "$work/$t.tpb") bytes"
done

bold "5. The device: taskpatchd on a scratch state directory, driven by tpctl as a technician would"
cat > "$work/taskpatchd.yaml" <<EOF
state_dir: $work/device
socket: $work/taskpatchd.sock
model_path: $work/device/model.gguf
trust:
  ca: $work/pki/ca.pem
trial:
  timeout: 5
EOF
TASKPATCHD_LOG_LEVEL=warning "$build/bin/taskpatchd" --config "$work/taskpatchd.yaml" 2> "$work/daemon.log" &
daemon=$!
trap 'kill $daemon 2> /dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 100); do [ -S "$work/taskpatchd.sock" ] && break; sleep 0.05; done
TASKPATCH_SOCKET="$work/taskpatchd.sock"
export TASKPATCH_SOCKET
tpctl() { printf '$ tpctl %s\n' "$*"; "$build/bin/tpctl" "$@"; }
model="$work/device/model.gguf"
sha() { "$tp" hash "$1" | cut -c1-64; }
tpctl provision "$work/base.gguf"
tpctl install "$work/json.tpb"
tpctl install "$work/shout.tpb"
tpctl install "$work/bullet.tpb"

bold "6. tpctl switch json: staged into the inactive slot, verified, activated, on trial"
tpctl switch json
tpctl mark-good
tpctl status

bold "7. The proof: SHA-256 of the model the device serves and of the model the producer made"
run "$tp" hash "$model" "$work/json.gguf"
[ "$(sha "$model")" = "$(sha "$work/json.gguf")" ] && echo "=> identical, byte for byte" ||
    { echo "=> MISMATCH" >&2; exit 1; }

bold "8. What went over the wire, and what the device wrote"
full=$(bytes "$work/json.gguf")
shipped=$(bytes "$work/json.tpb")
awk -v s="$shipped" -v f="$full" 'BEGIN {
    printf "bundle %d bytes vs the full model %d bytes: %.1f%% (%.1fx less)\n", s, f, 100 * s / f, f / s }'
tpctl switch shout
"$build/bin/tpctl" mark-good > /dev/null
written=$("$build/bin/tpctl" --json status | python3 -c 'import json,sys; print(json.load(sys.stdin)["counters"]["last_switch_slot_bytes"])')
awk -v w="$written" -v f="$full" 'BEGIN {
    printf "json -> shout wrote %d bytes into the inactive slot (undo json, write shout): %.1f%% of the model\n", w, 100 * w / f }'

bold "9. A task nobody confirms is rolled back when its trial ends (5 s here)"
tpctl switch bullet
sleep 6
tpctl status | grep -E '^(Active|Last error):'
[ "$(sha "$model")" = "$(sha "$work/shout.gguf")" ] && echo "=> back on shout, byte for byte"

bold "10. A tampered bundle is refused; the active model is untouched"
python3 -c "
import sys; b = bytearray(open(sys.argv[1], 'rb').read()); b[len(b) // 2] ^= 1; open(sys.argv[2], 'wb').write(b)" \
    "$work/json.tpb" "$work/tampered.tpb"
if tpctl install "$work/tampered.tpb"; then
    echo "=> tampered bundle ACCEPTED" >&2
    exit 1
fi
[ "$(sha "$model")" = "$(sha "$work/shout.gguf")" ] && echo "=> refused; the device still serves shout"

kill "$daemon"
wait "$daemon" 2> /dev/null || true
printf '\nNext: fleet delivery (signed channels over HTTPS), inference services following the\n'
printf 'switch, and the Debian package. See README.md.\n'
