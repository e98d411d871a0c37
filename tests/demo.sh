#!/bin/sh
# make demo: the TaskPatch story as far as it exists today — the producer side. Provisions a
# small llama-architecture model (quantized by ggml's own quantizer), folds a "json" task into
# it, ships only the changed bytes as a signed bundle, and rebuilds the task model from the base
# byte for byte. Grows with the device daemon (install, switch, rollback) when it lands.
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

bold "4. A device verifies it against its trusted CA before reading any payload byte"
run "$tp" verify "$work/json.tpb" --ca "$work/pki/ca.pem"

bold "5. ...and rebuilds the task model from the base it already has"
run "$tp" apply "$work/base.gguf" "$work/json.tpb" -o "$work/rebuilt.gguf" --ca "$work/pki/ca.pem"

bold "6. The proof: SHA-256 of the rebuilt model and of the model the producer made"
run "$tp" hash "$work/rebuilt.gguf" "$work/json.gguf"
a=$("$tp" hash "$work/rebuilt.gguf" | cut -c1-64)
b=$("$tp" hash "$work/json.gguf" | cut -c1-64)
[ "$a" = "$b" ] && echo "=> identical, byte for byte" || { echo "=> MISMATCH" >&2; exit 1; }

bold "7. What went over the wire"
full=$(bytes "$work/json.gguf")
shipped=$(bytes "$work/json.tpb")
awk -v s="$shipped" -v f="$full" 'BEGIN {
    printf "bundle %d bytes vs the full model %d bytes: %.1f%% (%.1fx less)\n", s, f, 100 * s / f, f / s }'

bold "8. A tampered bundle is refused, and nothing is written"
python3 -c "
import sys; b = bytearray(open(sys.argv[1], 'rb').read()); b[len(b) // 2] ^= 1; open(sys.argv[2], 'wb').write(b)" \
    "$work/json.tpb" "$work/tampered.tpb"
if "$tp" apply "$work/base.gguf" "$work/tampered.tpb" -o "$work/bad.gguf" --ca "$work/pki/ca.pem"; then
    echo "=> tampered bundle ACCEPTED" >&2
    exit 1
fi
[ ! -e "$work/bad.gguf" ] && echo "=> refused; no output file"

printf '\nNext: the device daemon (taskpatchd) installs such bundles into A/B slots, switches\n'
printf 'atomically, and rolls back unless the task is confirmed.\n'
