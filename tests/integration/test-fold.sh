#!/bin/bash
# The producer side end to end, with TaskPatch's own fold and quantize:
#   patch(quantize(base), bundle) == quantize(fold(base, lora))   byte for byte
# gguf-fixture makes a float base and a llama.cpp LoRA adapter; `taskpatch fold` makes the task
# model, `taskpatch quantize` the base; create + apply rebuild the task exactly, and the diff
# touches only the adapter's tensors. The fold's arithmetic is checked against the fixture's
# independent (double precision) W + (alpha/rank)·B·A. Then every refusal: wrong shape or
# architecture, a lora_a without lora_b, rank mismatch, quantized base, NaN weights, usage.
. "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
export PYTHONPATH="$root/tests/tools"    # gguf_header.py, for the checks below
fix="$(dirname "$BIN")/tools/gguf-fixture"

ggml=$(sh "$root/tests/tools/npm-ggml.sh" "$root/build/npm" 2> "$TMP/npm.err" | tail -n 1)
if [ ! -e "$ggml/libggml-base.so" ]; then
    fail "ggml from npm is not available: $(cat "$TMP/npm.err")"
    finish
    exit 1
fi
sh "$root/tests/tools/make-pki.sh" "$TMP/pki" > /dev/null || fail "make-pki.sh"
K=(--key "$TMP/pki/signer.key" --cert "$TMP/pki/signer.crt")
CA=(--ca "$TMP/pki/ca.pem")

dims=(--ggml "$ggml" --dim 256 --ff 512 --layers 4 --vocab 512)
targets=attn_q,attn_v,ffn_down,token_embd
"$fix" "${dims[@]}" --type f32 -o "$TMP/base.gguf" > "$TMP/fix.log" 2>&1 &&
"$fix" "${dims[@]}" --type f16 -o "$TMP/base16.gguf" >> "$TMP/fix.log" 2>&1 &&
"$fix" "${dims[@]}" --type f32 --mode lora --targets "$targets" --rank 8 --alpha 16 \
    --adapter "$TMP/lora.gguf" -o "$TMP/ref-task-f32.gguf" >> "$TMP/fix.log" 2>&1
if [ $? -ne 0 ]; then
    fail "fixtures: $(tail -n 3 "$TMP/fix.log")"
    finish
    exit 1
fi
n_targets=$((4 * 3 + 1))

# The changed sites of BASE -> TASK, one per line, sorted.
changed_sites() {
    tp diff --json "$1" "$2" | python3 -c '
import json, sys
for r in json.load(sys.stdin)["regions"]:
    if r.get("site"): print(r["site"])' | sort -u
}
expected_sites=$(python3 - "$TMP/lora.gguf" <<'PY'
import sys
import gguf_header
h = gguf_header.read(sys.argv[1])
print("\n".join(sorted({name.rsplit(".", 1)[0] for name, _, _, _ in h.tensors})))
PY
)

# ---- the round trip, for a plain and a K-quant mix, from F32 and F16 bases ------------------
roundtrip() { # roundtrip BASE TYPE LABEL [--imatrix FILE]
    local base=$1 type=$2 label=$3
    local bq="$TMP/$label-base.gguf" task="$TMP/$label-task.gguf" out="$TMP/$label-out.gguf"
    shift 3
    tp fold "$@" "$base" "$TMP/lora.gguf" "$task" "$type" > "$TMP/fold.log" 2>&1
    check "$label: fold BASE LORA TASK $type $* exits 0" test $? -eq 0
    tp quantize "$@" "$base" "$bq" "$type" > "$TMP/q.log" 2>&1
    check "$label: quantize BASE $type exits 0" test $? -eq 0
    check "$label: the diff touches exactly the adapter's $n_targets tensors" \
        test "$(changed_sites "$bq" "$task")" = "$expected_sites"
    tp create "$bq" "$task" -o "$TMP/$label.tpb" --task fold "${K[@]}" --expect-sites "$TMP/lora.gguf" \
        > "$TMP/create.log" 2>&1
    check "$label: create (--expect-sites LORA) exits 0" test $? -eq 0
    tp apply "$bq" "$TMP/$label.tpb" -o "$out" "${CA[@]}" > "$TMP/apply.log" 2>&1
    check "$label: apply exits 0" test $? -eq 0
    check "$label: patch(quantize(base), bundle) == fold(base, lora): cmp" cmp -s "$out" "$task"
    check "$label: ... and sha256" test "$(sha256sum < "$out")" = "$(sha256sum < "$task")"
}
roundtrip "$TMP/base.gguf" Q4_0 f32-q4_0
roundtrip "$TMP/base.gguf" Q4_K_M f32-q4_k_m
roundtrip "$TMP/base16.gguf" Q4_K_M f16-q4_k_m
roundtrip "$TMP/base16.gguf" Q8_0 f16-q8_0

# ---- with an importance matrix (llama-imatrix's GGUF form and its legacy .dat) ---------------
python3 "$root/tests/tools/make-imatrix.py" "$TMP/base.gguf" "$TMP/imatrix.gguf" --seed 2 &&
    python3 "$root/tests/tools/make-imatrix.py" "$TMP/base.gguf" "$TMP/imatrix.dat" --legacy --seed 2 ||
    fail "make-imatrix.py"
roundtrip "$TMP/base.gguf" Q4_K_M f32-q4_k_m-imatrix --imatrix "$TMP/imatrix.gguf"
roundtrip "$TMP/base16.gguf" Q4_0 f16-q4_0-imatrix --imatrix "$TMP/imatrix.dat"
check "the imatrix changes the quantized bytes" \
    bash -c "! cmp -s '$TMP/f32-q4_k_m-imatrix-base.gguf' '$TMP/f32-q4_k_m-base.gguf'"
check "... and the keys llama-quantize adds (file, dataset, entries, chunks)" python3 - \
    "$TMP/f32-q4_k_m-imatrix-base.gguf" "$TMP/imatrix.gguf" <<'PY'
import sys
import gguf_header
kv = {k: v for k, _, _, v in gguf_header.read(sys.argv[1]).kvs}
raw = open(sys.argv[1], "rb").read(200000)
for s in (sys.argv[2].encode(), b"wiki.train.raw", b"quantize.imatrix.entries_count", b"quantize.imatrix.chunks_count"):
    assert s in raw, s
assert kv["quantize.imatrix.chunks_count"] == 10, kv["quantize.imatrix.chunks_count"]
PY
tp quantize --json --imatrix "$TMP/imatrix.gguf" "$TMP/base.gguf" "$TMP/imx.gguf" Q4_0 > "$TMP/imx.json" 2> "$TMP/err"
check "quantize --imatrix --json: the imatrix's entries, all used (token_embd has none: quantized without)" \
    python3 - "$TMP/imx.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
im = j["imatrix"]
assert im["entries"] == 4 * 7 + 1 and im["tensors"] == 4 * 7 + 1 and im["tensors_without"] == 1, im
PY
python3 "$root/tests/tools/make-imatrix.py" "$TMP/base.gguf" "$TMP/partial.gguf" --skip blk.1.attn_q.weight
tp quantize --json --imatrix "$TMP/partial.gguf" "$TMP/base.gguf" "$TMP/imx.gguf" Q4_K_M > "$TMP/imx.json" 2> "$TMP/err"
check "a tensor the imatrix has no entry for is quantized without one, and counted" python3 -c '
import json, sys
im = json.load(open(sys.argv[1]))["imatrix"]
assert im["tensors_without"] == 2 and im["tensors"] == 4 * 7, im' "$TMP/imx.json"

tp fold "$TMP/base.gguf" "$TMP/lora.gguf" "$TMP/again.gguf" Q4_K_M > /dev/null 2>&1
check "fold is deterministic (same bytes twice)" cmp -s "$TMP/again.gguf" "$TMP/f32-q4_k_m-task.gguf"
tp fold -t 1 "$TMP/base.gguf" "$TMP/lora.gguf" "$TMP/t1.gguf" Q4_K_M > /dev/null 2>&1
tp fold --threads 3 "$TMP/base.gguf" "$TMP/lora.gguf" "$TMP/t3.gguf" Q4_K_M > /dev/null 2>&1
check "fold with 1 and 3 threads: the same bytes" cmp -s "$TMP/t1.gguf" "$TMP/t3.gguf"
check "... as the default" cmp -s "$TMP/t1.gguf" "$TMP/f32-q4_k_m-task.gguf"
tp fold "$TMP/base.gguf" "$TMP/lora.gguf" "$TMP/scale0.gguf" Q4_K_M --scale 0 > /dev/null 2>&1
check "--scale 0 gives the quantized base exactly" cmp -s "$TMP/scale0.gguf" "$TMP/f32-q4_k_m-base.gguf"
tp fold "$TMP/base.gguf" "$TMP/lora.gguf" "$TMP/scale2.gguf" Q4_K_M --scale 2 > /dev/null 2>&1
check "--scale 2 changes the same tensors, differently" test "$(changed_sites "$TMP/f32-q4_k_m-task.gguf" \
    "$TMP/scale2.gguf")" = "$expected_sites"

tp fold --json "$TMP/base.gguf" "$TMP/lora.gguf" "$TMP/j.gguf" Q4_K_M > "$TMP/fold.json" 2> "$TMP/err"
check "fold --json: type, counts, targets, alpha, scale" python3 - "$TMP/fold.json" "$n_targets" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); n = int(sys.argv[2])
assert j["type"] == "Q4_K_M" and j["file_type"] == 15, j
assert j["folded"] == n and len(j["targets"]) == n, j
assert j["alpha"] == 16 and j["scale"] == 1, j
assert j["tensors"] == j["converted"] + j["copied"], j
assert j["types"]["q6_K"] >= 1 and j["types"]["f32"] == 9, j["types"]
PY
check "fold --json prints no progress on stderr" test ! -s "$TMP/err"

# ---- the arithmetic: F32 output against the fixture's double-precision fold ---------------------
tp fold "$TMP/base.gguf" "$TMP/lora.gguf" "$TMP/task-f32.gguf" F32 > /dev/null 2>&1
check "fold to F32 matches an independent W + (alpha/rank)·B·A (token_embd's swapped layout too)" \
    python3 - "$TMP/base.gguf" "$TMP/task-f32.gguf" "$TMP/ref-task-f32.gguf" "$n_targets" <<'PY'
import sys
from array import array
import gguf_header
def tensors(path):
    h = gguf_header.read(path)
    b = open(path, "rb").read()
    out = {}
    for name, ne, t, off in h.tensors:
        assert t == 0, (name, t)
        start = h.data_offset + off
        out[name] = array("f", b[start:start + 4 * h.elements(ne)])
    return out
base, got, ref = (tensors(p) for p in sys.argv[1:4])
changed = 0
for name, w in base.items():
    g, r = got[name], ref[name]
    err = max(abs(x - y) for x, y in zip(g, r))
    delta = max(abs(x - y) for x, y in zip(g, w))
    if delta == 0:
        assert g == r, name
        continue
    changed += 1
    # float32 sums of 8 products against double: far below the change itself
    assert err < 1e-7 and delta > 1e-3, (name, err, delta)
assert changed == int(sys.argv[4]), changed
PY

# An input with general.alignment 64 keeps it (llama.cpp would pad to 32 under a key saying 64).
"$fix" "${dims[@]}" --type f32 --alignment 64 -o "$TMP/a64.gguf" > /dev/null 2>&1
tp quantize -q "$TMP/a64.gguf" "$TMP/a64-q.gguf" Q4_K_M > /dev/null 2>&1
check "general.alignment 64 is kept and honoured (every tensor 64-aligned, the file parses)" \
    python3 - "$TMP/a64-q.gguf" <<'PY'
import os, sys
import gguf_header
h = gguf_header.read(sys.argv[1])
assert h.alignment == 64, h.alignment
assert all(off % 64 == 0 for _, _, _, off in h.tensors), "a tensor is not 64-aligned"
assert h.data_offset % 64 == 0 and os.path.getsize(sys.argv[1]) % 64 == 0
PY
tp diff "$TMP/a64-q.gguf" "$TMP/a64-q.gguf" > /dev/null 2>&1
check "... and TaskPatch's own GGUF reader accepts it" test $? -eq 0

# ---- refusals: exit 1, a message naming the problem, no output, no temporary -----------------
refused() { # refused DESCRIPTION EXPECTED_WORDS COMMAND...
    local desc=$1 words=$2
    shift 2
    rm -f "$TMP/refused.gguf"
    "$@" > "$TMP/rout" 2>&1
    local rc=$?
    if [ $rc -eq 1 ] && [ ! -e "$TMP/refused.gguf" ] && grep -q -- "$words" "$TMP/rout" &&
       ! compgen -G "$TMP/.refused.gguf.*" > /dev/null; then
        ok "$desc"
    else
        fail "$desc (exit $rc): $(head -c 300 "$TMP/rout")"
    fi
}
# patch_gguf IN OUT PYTHON: rewrite the header of a GGUF file with a Python expression on b (bytearray).
patch_gguf() {
    python3 - "$1" "$2" "$3" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
exec(sys.argv[3])
open(sys.argv[2], "wb").write(b)
PY
}

"$fix" --ggml "$ggml" --dim 512 --ff 512 --layers 4 --vocab 512 --type f32 -o "$TMP/wide.gguf" > /dev/null 2>&1
refused "an adapter for another shape" "\[256, 256\] but\|is \[512, 512\]" \
    tp fold "$TMP/wide.gguf" "$TMP/lora.gguf" "$TMP/refused.gguf" Q4_0
"$fix" --ggml "$ggml" --dim 256 --ff 512 --layers 2 --vocab 512 --type f32 -o "$TMP/short.gguf" > /dev/null 2>&1
refused "an adapter for more layers than the base has" "does not exist in the base model" \
    tp fold "$TMP/short.gguf" "$TMP/lora.gguf" "$TMP/refused.gguf" Q4_0
patch_gguf "$TMP/lora.gguf" "$TMP/arch.gguf" 'i = b.index(b"\x05\0\0\0\0\0\0\0llama"); b[i + 8:i + 13] = b"qwen2"'
refused "an adapter for another architecture" "architecture 'qwen2'" \
    tp fold "$TMP/base.gguf" "$TMP/arch.gguf" "$TMP/refused.gguf" Q4_0
patch_gguf "$TMP/lora.gguf" "$TMP/nob.gguf" 'i = b.index(b"blk.1.attn_q.weight.lora_b"); b[i + 16:i + 17] = b"X"'
refused "a lora_a without its lora_b" "no matching" \
    tp fold "$TMP/base.gguf" "$TMP/nob.gguf" "$TMP/refused.gguf" Q4_0
# lora_b ne = [8, 256] -> [4, 512]: same bytes, rank 4 against lora_a's 8.
patch_gguf "$TMP/lora.gguf" "$TMP/rank.gguf" '
import struct
n = b"blk.0.attn_q.weight.lora_b"; i = b.index(n) + len(n) + 4
assert struct.unpack_from("<QQ", b, i) == (8, 256)
struct.pack_into("<QQ", b, i, 4, 512)'
refused "a rank mismatch between lora_a and lora_b" "rank mismatch" \
    tp fold "$TMP/base.gguf" "$TMP/rank.gguf" "$TMP/refused.gguf" Q4_0
patch_gguf "$TMP/lora.gguf" "$TMP/odd.gguf" 'i = b.index(b"blk.0.attn_q.weight.lora_a"); b[i + 20:i + 26] = b"xora_a"'
refused "a tensor that is neither lora_a nor lora_b" "neither a lora_a nor a lora_b" \
    tp fold "$TMP/base.gguf" "$TMP/odd.gguf" "$TMP/refused.gguf" Q4_0
refused "a model given as the adapter" "expected 'adapter'" \
    tp fold "$TMP/base.gguf" "$TMP/base.gguf" "$TMP/refused.gguf" Q4_0
"$fix" "${dims[@]}" --type q8_0 -o "$TMP/base-q8.gguf" > /dev/null 2>&1
refused "fold into a quantized base" "float (F32, F16 or BF16) base" \
    tp fold "$TMP/base-q8.gguf" "$TMP/lora.gguf" "$TMP/refused.gguf" Q4_0
refused "quantize a quantized model to another type" "requantizing is not supported" \
    tp quantize "$TMP/base-q8.gguf" "$TMP/refused.gguf" Q4_0
patch_gguf "$TMP/base.gguf" "$TMP/nan.gguf" '
import struct
size = len(b); struct.pack_into("<f", b, size - 4 * 100, float("nan"))'
refused "NaN in the base weights (quantize)" "NaN or infinity" \
    tp quantize "$TMP/nan.gguf" "$TMP/refused.gguf" Q4_0
refused "NaN in the base weights (fold)" "NaN or infinity" \
    tp fold "$TMP/nan.gguf" "$TMP/lora.gguf" "$TMP/refused.gguf" Q4_0
patch_gguf "$TMP/base.gguf" "$TMP/gemma.gguf" 'i = b.index(b"\x05\0\0\0\0\0\0\0llama"); b[i + 8:i + 13] = b"gemma"'
refused "quantize an architecture whose mixes are not implemented" "only llama" \
    tp quantize "$TMP/gemma.gguf" "$TMP/refused.gguf" Q4_K_M
refused "a missing adapter file" "No such file" \
    tp fold "$TMP/base.gguf" "$TMP/nonexistent.gguf" "$TMP/refused.gguf" Q4_0
"$fix" --ggml "$ggml" --dim 512 --ff 512 --layers 4 --vocab 512 --type f32 -o "$TMP/wide.gguf" > /dev/null 2>&1
python3 "$root/tests/tools/make-imatrix.py" "$TMP/wide.gguf" "$TMP/wide-imatrix.gguf"
refused "an imatrix made for another model (another row length)" "an imatrix made for another model" \
    tp quantize --imatrix "$TMP/wide-imatrix.gguf" "$TMP/base.gguf" "$TMP/refused.gguf" Q4_K_M
head -c 100 "$TMP/imatrix.dat" > "$TMP/cut.dat"
refused "a truncated imatrix" "cut.dat" tp quantize --imatrix "$TMP/cut.dat" "$TMP/base.gguf" "$TMP/refused.gguf" Q4_0
refused "a missing imatrix" "No such file" \
    tp fold --imatrix "$TMP/nonexistent.dat" "$TMP/base.gguf" "$TMP/lora.gguf" "$TMP/refused.gguf" Q4_0

tp fold "$TMP/base.gguf" "$TMP/lora.gguf" "$TMP/refused.gguf" IQ2_XS > "$TMP/rout" 2>&1
check "an unsupported TYPE is a usage error (exit 2) that lists the types" \
    bash -c "test $? -eq 2 && grep -q Q4_K_M '$TMP/rout'"
tp fold "$TMP/base.gguf" "$TMP/lora.gguf" "$TMP/refused.gguf" > /dev/null 2>&1
check "fold without TYPE: usage error (exit 2)" test $? -eq 2
tp fold "$TMP/base.gguf" "$TMP/lora.gguf" "$TMP/refused.gguf" Q4_0 --scale nan > /dev/null 2>&1
check "--scale nan: usage error (exit 2)" test $? -eq 2
tp quantize --help | grep -q "Q4_K_M"
check "quantize --help lists the types" test $? -eq 0
tp --help | grep -q "fold" && tp --help | grep -q "quantize"
check "taskpatch --help lists fold and quantize" test $? -eq 0

finish
