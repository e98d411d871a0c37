#!/bin/bash
# LoRA-predicted spans (issue 20, item 1): `taskpatch create --lora ADAPTER` sends a tensor the
# adapter adapts as the adapter's factors and a residual against the device's prediction
# quantize(dequantize(base) + scale·B·A), when that is the smallest of raw, delta and lora.
# The task models are made the way a producer makes them: `taskpatch fold` of a float base and a
# llama.cpp adapter, quantized (Q8_0, Q4_K_M), or folded into an F16 base (as llama-export-lora
# does), in the base's layout and sorted by name (llama-export-lora's layout). Each bundle
# applies byte for byte, on the producer and on a device (in place and relocating, a sibling
# switch between two adapters' tasks and back); the adapter makes the bundles far smaller; and
# bad input is refused: an adapter for another model, NaN factors, a manifest whose lora fields
# lie. The F16 model llama.cpp's own llama-export-lora merges, and its Q8_0. With --imatrix, a Q4_0 task quantized with an importance matrix from a quantization-aware
# base (tests/tools/qat-snap.py): the spans predicted with the imatrix's rows, on the producer
# and on a device, and the lies about a row.
# shellcheck disable=SC2034  # DPID, SOCK, MODEL, CONF are read by daemon-lib.sh
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/daemon-lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
export PYTHONPATH="$root/tests/tools"

fix="$(dirname "$BIN")/tools/gguf-fixture"
ggml=$(sh "$root/tests/tools/npm-ggml.sh" "$root/build/npm" 2> "$TMP/npm.err" | tail -n 1)
[ -e "$ggml/libggml-base.so" ] || { fail "ggml from npm: $(cat "$TMP/npm.err")"; finish; exit 1; }
sh "$root/tests/tools/make-pki.sh" "$TMP/pki" > /dev/null || fail "make-pki.sh"
dims=(--ggml "$ggml" --dim 512 --ff 1024 --layers 2 --vocab 300)
lo=(--mode lora --targets "attn_q,attn_v,ffn_down" --rank 8 --alpha 16)
{
    "$fix" "${dims[@]}" --type f32 -o "$TMP/base-f32.gguf" &&
    "$fix" "${dims[@]}" --type f32 "${lo[@]}" --adapter "$TMP/lora.gguf" -o "$TMP/ref1.gguf" &&
    "$fix" "${dims[@]}" --type f32 "${lo[@]}" --task-seed 9 --adapter "$TMP/lora2.gguf" -o "$TMP/ref2.gguf" &&
    "$fix" --ggml "$ggml" --dim 256 --ff 512 --layers 2 --vocab 300 --type f32 "${lo[@]}" \
        --adapter "$TMP/small-lora.gguf" -o "$TMP/small.gguf" &&
    tp quantize "$TMP/base-f32.gguf" "$TMP/base-f16.gguf" F16
} > "$TMP/fix.log" 2>&1 || { fail "fixtures: $(tail -n 3 "$TMP/fix.log")"; finish; exit 1; }

# The base and two tasks of each type: folded from the F32 base (Q8_0, Q4_K_M), or into the F16 base.
for t in Q8_0 Q4_K_M F16; do
    src="$TMP/base-f32.gguf"
    [ "$t" = F16 ] && src="$TMP/base-f16.gguf"
    tp quantize "$src" "$TMP/base-$t.gguf" "$t" > /dev/null &&
        tp fold "$src" "$TMP/lora.gguf" "$TMP/task-$t.gguf" "$t" > /dev/null &&
        tp fold "$src" "$TMP/lora2.gguf" "$TMP/task2-$t.gguf" "$t" > /dev/null ||
        fail "fold and quantize $t"
done

echo "# the producer"
bundle_bytes() { stat -c %s "$1"; }
for t in Q8_0 Q4_K_M F16; do
    tp create "$TMP/base-$t.gguf" "$TMP/task-$t.gguf" -o "$TMP/plain-$t.tpb" --task json --unsigned > /dev/null
    tp create "$TMP/base-$t.gguf" "$TMP/task-$t.gguf" -o "$TMP/lora-$t.tpb" --task json --unsigned \
        --lora "$TMP/lora.gguf" --json > "$TMP/create.json" 2> "$TMP/create.err"
    n=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["encodings"]["lora"])' "$TMP/create.json" \
        2> /dev/null)
    p=$(bundle_bytes "$TMP/plain-$t.tpb") l=$(bundle_bytes "$TMP/lora-$t.tpb")
    check "$t: create --lora makes lora spans ($n) and a smaller bundle: $l vs $p bytes" \
        sh -c "test '${n:-0}' -ge 1 && test $l -lt $p"
    tp apply "$TMP/base-$t.gguf" "$TMP/lora-$t.tpb" -o "$TMP/out-$t.gguf" --allow-unsigned --no-sync > /dev/null 2>&1
    check "$t: apply rebuilds the task byte for byte" cmp -s "$TMP/out-$t.gguf" "$TMP/task-$t.gguf"
done
check "Q8_0: the lora bundle is at most half the delta-coded one" \
    test $(($(bundle_bytes "$TMP/lora-Q8_0.tpb") * 2)) -le "$(bundle_bytes "$TMP/plain-Q8_0.tpb")"
a16=$(python3 -c '
import sys, gguf_header
h = gguf_header.read(sys.argv[1])
print(sum(ne[0] * ne[1] * 2 for _, ne, _, _ in h.tensors))' "$TMP/lora.gguf")
check "F16 folded into the F16 base: the bundle ($(bundle_bytes "$TMP/lora-F16.tpb") B) is about the adapter's F32 factors ($((a16 * 2)) B)" \
    test "$(bundle_bytes "$TMP/lora-F16.tpb")" -le $((a16 * 2 * 12 / 10))
tp inspect --json "$TMP/lora-Q8_0.tpb" > "$TMP/inspect.json"
check "inspect shows each lora span's tensor (type, shape, rank, first element), the adapter's F32 factors carried as I8 (smaller than F16 and BF16 here), the residual range-coded (ac)" python3 - "$TMP/inspect.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
spans = [s for s in j["span_list"] if s["encoding"] == "lora"]
ok = spans and all(s["lora"]["type"] == "q8_0" and s["lora"]["rank"] == 8 and s["lora"]["first"] == 0 and
                   s["lora"]["a"] == "i8" and s["lora"]["b"] == "i8" and s["lora"]["residual"] == "ac" and
                   s["site"].endswith(".weight") for s in spans) and j["encodings"]["lora"] == len(spans)
sys.exit(0 if ok else 1)
PY
tp inspect --json "$TMP/lora-Q4_K_M.tpb" > "$TMP/inspect.json"
check "Q4_K_M: the K types' residual range-coded as well (each lora span's sub-scales, then its elements in their sub-block's places)" \
    python3 - "$TMP/inspect.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
spans = [s for s in j["span_list"] if s["encoding"] == "lora"]
sys.exit(0 if spans and all(s["lora"]["type"] in ("q4_K", "q6_K") and s["lora"]["residual"] == "ac" for s in spans) else 1)
PY
# Folded at 32 times the adapter's strength, the change outgrows the weights: BF16's or I8's rounding
# of the factors would move more of the task's steps than their shorter bytes save, and F16 stays.
tp fold "$TMP/base-f32.gguf" "$TMP/lora.gguf" "$TMP/task-x32.gguf" Q8_0 --scale 32 > /dev/null &&
    tp create "$TMP/base-Q8_0.gguf" "$TMP/task-x32.gguf" -o "$TMP/x32.tpb" --task json --unsigned \
        --lora "$TMP/lora.gguf" --lora-scale 32 > /dev/null &&
    tp inspect --json "$TMP/x32.tpb" > "$TMP/inspect.json" || fail "a task folded at --scale 32"
tp apply "$TMP/base-Q8_0.gguf" "$TMP/x32.tpb" -o "$TMP/out-x32.gguf" --allow-unsigned --no-sync > /dev/null 2>&1
check "... folded at --scale 32: the factors kept as F16 (the smaller form there), applied byte for byte" \
    sh -c "cmp -s '$TMP/out-x32.gguf' '$TMP/task-x32.gguf' && python3 -c '
import json, sys
spans = [s for s in json.load(open(sys.argv[1]))[\"span_list\"] if s[\"encoding\"] == \"lora\"]
sys.exit(0 if spans and all(s[\"lora\"][\"a\"] == \"f16\" for s in spans) else 1)' '$TMP/inspect.json'"
tp verify "$TMP/lora-Q8_0.tpb" --allow-unsigned > "$TMP/out" 2>&1
check "verify decodes every frame of a lora bundle (factors and residual) without the base" grep -q "OK:" "$TMP/out"
tp create "$TMP/base-Q8_0.gguf" "$TMP/task-Q8_0.gguf" --task json --lora "$TMP/lora.gguf" --dry-run > "$TMP/out"
check "create --dry-run shows what each candidate cost" grep -q "lora .* (raw ~\?[0-9]*, delta ~\?[0-9]*, lora [0-9]*)" "$TMP/out"

# fold --bundle: the task and its bundle against the base quantized the same way, in one command.
tp fold "$TMP/base-f32.gguf" "$TMP/lora.gguf" "$TMP/fb-task.gguf" Q8_0 --bundle "$TMP/fb.tpb" --task json \
    --version 3 --key "$TMP/pki/signer.key" --cert "$TMP/pki/signer.crt" -q > "$TMP/out" 2>&1
tp apply "$TMP/base-Q8_0.gguf" "$TMP/fb.tpb" -o "$TMP/fb-out.gguf" --ca "$TMP/pki/ca.pem" --no-sync > /dev/null 2>&1
check "fold --bundle: the task, and its signed lora bundle against the Q8_0 base, applied byte for byte" \
    sh -c "cmp -s '$TMP/fb-task.gguf' '$TMP/task-Q8_0.gguf' && cmp -s '$TMP/fb-out.gguf' '$TMP/task-Q8_0.gguf' &&
           grep -q '6 lora' '$TMP/out' && ! ls '$TMP'/.taskpatch-base.* > /dev/null 2>&1"

tp fold "$TMP/base-f32.gguf" "$TMP/lora.gguf" "$TMP/fbj-task.gguf" Q8_0 --bundle "$TMP/fbj.tpb" --task json \
    --unsigned --json > "$TMP/fbj.json" 2> "$TMP/err"
check "fold --bundle --json: one object, the fold's summary with create's under \"bundle\"" python3 - "$TMP/fbj.json" "$TMP/fbj.tpb" <<'PY'
import json, os, sys
j = json.load(open(sys.argv[1]))
b = j["bundle"]
sys.exit(0 if j["folded"] == 6 and b["bundle"] == sys.argv[2] and b["encodings"]["lora"] == 6 and
         b["bundle_bytes"] == os.path.getsize(sys.argv[2]) and b["task"] == "json" else 1)
PY
tp fold "$TMP/base-f32.gguf" "$TMP/lora.gguf" "$TMP/fbj-task.gguf" Q8_0 --bundle "$TMP/fbj.tpb" --task json \
    --bundle-base "$TMP/no-such-base.gguf" --unsigned --json > "$TMP/fbj.json" 2> "$TMP/err"
rc=$?
check "fold --bundle --json, the bundle failing: exit 1, the fold's summary with \"bundle\": null, the error on stderr" \
    sh -c "test $rc = 1 && python3 -c 'import json,sys; j = json.load(open(sys.argv[1])); sys.exit(0 if j[\"bundle\"] is None and j[\"folded\"] == 6 else 1)' '$TMP/fbj.json' && grep -q 'no-such-base' '$TMP/err'"

# llama-export-lora writes its output with the tensors sorted by name: a relocating bundle.
for t in Q8_0 F16; do
    python3 "$root/tests/tools/gguf-relayout.py" "$TMP/task-$t.gguf" -o "$TMP/sorted-$t.gguf" --sort-by-name
    tp create "$TMP/base-$t.gguf" "$TMP/sorted-$t.gguf" -o "$TMP/sorted-plain-$t.tpb" --task json --unsigned > /dev/null
    tp create "$TMP/base-$t.gguf" "$TMP/sorted-$t.gguf" -o "$TMP/sorted-$t.tpb" --task sorted --unsigned \
        --lora "$TMP/lora.gguf" > /dev/null
    tp apply "$TMP/base-$t.gguf" "$TMP/sorted-$t.tpb" -o "$TMP/out.gguf" --allow-unsigned --no-sync > /dev/null 2>&1
    check "$t sorted by name (format 2): each adapted tensor its own lora span, applied byte for byte, $(bundle_bytes "$TMP/sorted-$t.tpb") vs $(bundle_bytes "$TMP/sorted-plain-$t.tpb") B" \
        sh -c "cmp -s '$TMP/out.gguf' '$TMP/sorted-$t.gguf' &&
               '$BIN/taskpatch' inspect --json '$TMP/sorted-$t.tpb' | grep -q '\"lora\": 6' &&
               test $(bundle_bytes "$TMP/sorted-$t.tpb") -lt $(bundle_bytes "$TMP/sorted-plain-$t.tpb")"
done

echo "# llama.cpp's own llama-export-lora"
# The real tool (tests/tools/build-export-lora.sh: the pinned source against the pinned
# libraries) merges the adapter into the F16 base and writes the tensors in its own order: a
# relocating bundle, and each merged tensor a lora span of about the adapter's bytes. Then
# llama-quantize's Q8_0 of the base and of the merged model (taskpatch quantize writes its bytes,
# make check-oracle proves it), as a pipeline quantizes what it merged.
if xl=$(sh "$root/tests/tools/build-export-lora.sh" "$TMP/llama-export-lora" 2> "$TMP/xl.err") &&
    "$xl" -m "$TMP/base-F16.gguf" --lora "$TMP/lora.gguf" -o "$TMP/xl-F16.gguf" -t 1 > "$TMP/xl.log" 2>&1; then
    tp create "$TMP/base-F16.gguf" "$TMP/xl-F16.gguf" -o "$TMP/xl-F16.tpb" --task merged --unsigned \
        --lora "$TMP/lora.gguf" --json > "$TMP/create.json"
    n=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["encodings"]["lora"])' "$TMP/create.json" \
        2> /dev/null)
    a=$(bundle_bytes "$TMP/lora.gguf") l=$(bundle_bytes "$TMP/xl-F16.tpb")
    check "llama-export-lora's F16 model: $n lora spans, a bundle of $l B, at most 1.2x the adapter's $a B" \
        sh -c "test '${n:-0}' -eq 6 && test $((l * 10)) -le $((a * 12))"
    tp apply "$TMP/base-F16.gguf" "$TMP/xl-F16.tpb" -o "$TMP/out.gguf" --allow-unsigned --no-sync > /dev/null 2>&1
    check "... applied byte for byte" cmp -s "$TMP/out.gguf" "$TMP/xl-F16.gguf"
    tp quantize "$TMP/base-F16.gguf" "$TMP/xl-base-Q8_0.gguf" Q8_0 > /dev/null &&
        tp quantize "$TMP/xl-F16.gguf" "$TMP/xl-Q8_0.gguf" Q8_0 > /dev/null || fail "quantize the merged model"
    tp create "$TMP/xl-base-Q8_0.gguf" "$TMP/xl-Q8_0.gguf" -o "$TMP/xl-plain.tpb" --task merged --unsigned > /dev/null
    tp create "$TMP/xl-base-Q8_0.gguf" "$TMP/xl-Q8_0.gguf" -o "$TMP/xl-Q8_0.tpb" --task merged --unsigned \
        --lora "$TMP/lora.gguf" > /dev/null
    tp apply "$TMP/xl-base-Q8_0.gguf" "$TMP/xl-Q8_0.tpb" -o "$TMP/out.gguf" --allow-unsigned --no-sync > /dev/null 2>&1
    p=$(bundle_bytes "$TMP/xl-plain.tpb") l=$(bundle_bytes "$TMP/xl-Q8_0.tpb")
    check "... quantized to Q8_0 after the merge: $l B with --lora vs $p B without, applied byte for byte" \
        sh -c "test $((l * 10)) -le $((p * 7)) && cmp -s '$TMP/out.gguf' '$TMP/xl-Q8_0.gguf'"
else
    fail "llama-export-lora: $(tail -c 300 "$TMP/xl.err") $(tail -n 2 "$TMP/xl.log" 2> /dev/null)"
fi

echo "# with an importance matrix: a quantization-aware base (its floats on the Q4_0 grid)"
# A QAT checkpoint's weights are what its quantizer gives back: the prediction with the
# imatrix's rows then makes the task's blocks themselves, and the residual all but vanishes.
{
    python3 "$root/tests/tools/make-imatrix.py" "$TMP/base-f32.gguf" "$TMP/imatrix.gguf" --seed 2 &&
        tp quantize --imatrix "$TMP/imatrix.gguf" "$TMP/base-f32.gguf" "$TMP/grid.gguf" Q4_0 &&
        python3 "$root/tests/tools/qat-snap.py" "$TMP/base-f32.gguf" "$TMP/grid.gguf" "$TMP/qat-f32.gguf" &&
        tp quantize --imatrix "$TMP/imatrix.gguf" "$TMP/qat-f32.gguf" "$TMP/base-qat.gguf" Q4_0 &&
        tp fold --imatrix "$TMP/imatrix.gguf" "$TMP/qat-f32.gguf" "$TMP/lora.gguf" "$TMP/task-qat.gguf" Q4_0
} > "$TMP/qat.log" 2>&1 || fail "the QAT fixture: $(tail -n 3 "$TMP/qat.log")"
tp create "$TMP/base-qat.gguf" "$TMP/task-qat.gguf" -o "$TMP/qat-lora.tpb" --task json --unsigned \
    --lora "$TMP/lora.gguf" > /dev/null 2>&1
tp create "$TMP/base-qat.gguf" "$TMP/task-qat.gguf" -o "$TMP/qat-imatrix.tpb" --task json --unsigned \
    --lora "$TMP/lora.gguf" --imatrix "$TMP/imatrix.gguf" --json > "$TMP/create.json" 2> "$TMP/create.err"
n=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["encodings"]["lora_imatrix"])' \
    "$TMP/create.json" 2> /dev/null)
p=$(bundle_bytes "$TMP/qat-lora.tpb") l=$(bundle_bytes "$TMP/qat-imatrix.tpb")
check "Q4_0 with an imatrix: --imatrix predicts $n spans with its rows, a bundle of $l B vs $p B without" \
    sh -c "test '${n:-0}' -ge 4 && test $((l * 10)) -le $((p * 9))"
tp apply "$TMP/base-qat.gguf" "$TMP/qat-imatrix.tpb" -o "$TMP/out-qat.gguf" --allow-unsigned --no-sync > /dev/null 2>&1
check "... applied byte for byte" cmp -s "$TMP/out-qat.gguf" "$TMP/task-qat.gguf"
tp verify "$TMP/qat-imatrix.tpb" --allow-unsigned > "$TMP/out" 2>&1
check "... verify decodes every frame (factors, rows, residual)" grep -q "OK:" "$TMP/out"
check "... inspect marks the spans that carry a row; their near-exact residual went in the planes (smaller than range-coded)" \
    python3 - "$TMP/qat-imatrix.tpb" "$BIN/taskpatch" "$n" <<'PY'
import json, subprocess, sys
j = json.loads(subprocess.run([sys.argv[2], "inspect", "--json", sys.argv[1]], capture_output=True).stdout)
rows = [s for s in j["span_list"] if s["encoding"] == "lora" and s["lora"]["imatrix"]]
sys.exit(0 if len(rows) == int(sys.argv[3]) and all(s["lora"]["type"] == "q4_0" and s["lora"]["residual"] == "planes"
                                                    for s in rows) else 1)
PY
tp fold --imatrix "$TMP/imatrix.gguf" "$TMP/qat-f32.gguf" "$TMP/lora.gguf" "$TMP/fq-task.gguf" Q4_0 \
    --bundle "$TMP/fq.tpb" --task json --unsigned --json > "$TMP/fq.json" 2> /dev/null
check "fold --imatrix --bundle: the bundle against the base quantized with it predicts with its rows" python3 -c '
import json, sys
b = json.load(open(sys.argv[1]))["bundle"]
sys.exit(0 if b["encodings"]["lora_imatrix"] >= 4 else 1)' "$TMP/fq.json"
tp create "$TMP/base-qat.gguf" "$TMP/task-qat.gguf" --task json --unsigned --lora "$TMP/lora.gguf" \
    --imatrix "$TMP/imatrix.gguf" --dry-run > "$TMP/out"
check "... --dry-run shows both predictions' cost" grep -q "\[imatrix\] .*lora ~\?[0-9]*, lora+imatrix ~\?[0-9]*)" "$TMP/out"
tp create "$TMP/base-qat.gguf" "$TMP/task-qat.gguf" -o "$TMP/other.tpb" --task json --unsigned \
    --imatrix "$TMP/imatrix.gguf" > "$TMP/out" 2>&1
check "--imatrix without --lora: usage error (exit 2)" sh -c "test $? -eq 2 && grep -q 'give --lora' '$TMP/out'"
python3 "$root/tests/tools/make-imatrix.py" "$TMP/small.gguf" "$TMP/small-imatrix.gguf" > /dev/null
tp create "$TMP/base-qat.gguf" "$TMP/task-qat.gguf" -o "$TMP/other.tpb" --task json --unsigned \
    --lora "$TMP/lora.gguf" --imatrix "$TMP/small-imatrix.gguf" --json > "$TMP/create.json" 2> /dev/null
check "an imatrix for another model (rows of another length): no span carries its rows, the bundle still made" \
    python3 -c 'import json,sys; sys.exit(json.load(open(sys.argv[1]))["encodings"]["lora_imatrix"] != 0)' \
    "$TMP/create.json"
tp create "$TMP/base-qat.gguf" "$TMP/task-qat.gguf" -o "$TMP/qat-plain.tpb" --task json --unsigned \
    --lora "$TMP/lora.gguf" --imatrix "$TMP/imatrix.gguf" --plain-manifest > /dev/null 2>&1
# Same-length edits (the header counts the manifest's bytes): the row said absent, and a value that is no boolean.
# And (the Q8_0 bundle's spans are range-coded) the residual's coder said absent (the planes then decode
# it: the span's digest refuses), or named wrongly.
tp create "$TMP/base-Q8_0.gguf" "$TMP/task-Q8_0.gguf" -o "$TMP/q8-plain.tpb" --task json --unsigned \
    --lora "$TMP/lora.gguf" --plain-manifest > /dev/null 2>&1
for lie in "qat-plain base-qat , imatrix: true\([,}]\)/, embd: false  \1" \
    "qat-plain base-qat imatrix: true\([,}]\)/imatrix: yes \1" \
    "q8-plain base-Q8_0 , residual: ac}/              }" "q8-plain base-Q8_0 residual: ac/residual: xy"; do
    read -r bundle base edit <<< "$lie"
    sed "s/$edit/" "$TMP/$bundle.tpb" > "$TMP/lie.tpb"
    rm -f "$TMP/lie.gguf"
    tp apply "$TMP/$base.gguf" "$TMP/lie.tpb" -o "$TMP/lie.gguf" --allow-unsigned --no-sync > "$TMP/out" 2>&1
    rc=$?
    check "a span's lie (${edit%%/*}): refused (exit $rc), nothing written: $(tail -c 90 "$TMP/out")" \
        sh -c "test $rc -ne 0 && ! cmp -s '$TMP/lie.tpb' '$TMP/$bundle.tpb' && test ! -e '$TMP/lie.gguf'"
done

echo "# without an adapter: --lowrank finds the change's factors (ONNX, safetensors)"
python3 "$root/tests/tools/make-onnx.py" --kind matmul --dim 256 --size-mb 4 --change 3 --mode lowrank --external one \
    -o "$TMP/onnx-base/model.onnx" --task-out "$TMP/onnx-task/model.onnx" > /dev/null &&
    python3 "$root/tests/tools/safetensors-shards.py" "$TMP/st-base" --size-mb 6 --shards 2 > /dev/null &&
    python3 "$root/tests/tools/safetensors-shards.py" "$TMP/st-task" --size-mb 6 --shards 2 --change 3 --mode lowrank \
        --task-seed 7 > /dev/null || fail "ONNX and safetensors fixtures"
for m in onnx st; do
    tp create "$TMP/$m-base" "$TMP/$m-task" -o "$TMP/$m-plain.tpb" --task "$m" --unsigned > /dev/null
    tp create "$TMP/$m-base" "$TMP/$m-task" -o "$TMP/$m-lowrank.tpb" --task "$m" --unsigned --lowrank --json \
        > "$TMP/create.json"
    n=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["encodings"]["lora"])' "$TMP/create.json" \
        2> /dev/null)
    p=$(bundle_bytes "$TMP/$m-plain.tpb") l=$(bundle_bytes "$TMP/$m-lowrank.tpb")
    check "$m: --lowrank makes 3 lora spans and a bundle of $l B, at most a quarter of the delta-coded $p B" \
        sh -c "test '${n:-0}' -eq 3 && test $((l * 4)) -le $p"
    rm -rf "$TMP/$m-out"
    tp apply "$TMP/$m-base" "$TMP/$m-lowrank.tpb" -o "$TMP/$m-out" --allow-unsigned --no-sync > /dev/null 2>&1
    check "$m: apply rebuilds the model directory file for file" diff -r "$TMP/$m-out" "$TMP/$m-task"
done

# A task whose adapted tensor is random bytes (no prediction helps): the range-coded residual does not
# fit, the planes take it, the smallest candidate wins, and the bundle still applies.
"$fix" "${dims[@]}" --type q8_0 -o "$TMP/fx-base.gguf" > /dev/null &&
    "$fix" "${dims[@]}" --type q8_0 --mode random --targets attn_q -o "$TMP/fx-random.gguf" > /dev/null ||
    fail "random fixtures"
tp create "$TMP/fx-base.gguf" "$TMP/fx-random.gguf" -o "$TMP/random.tpb" --task json --unsigned \
    --lora "$TMP/lora.gguf" > /dev/null 2>&1
tp apply "$TMP/fx-base.gguf" "$TMP/random.tpb" -o "$TMP/random-out.gguf" --allow-unsigned --no-sync > /dev/null 2>&1
check "random bytes where the adapter predicts: the bundle made (the residual's coders fall back) and applied byte for byte" \
    cmp -s "$TMP/random-out.gguf" "$TMP/fx-random.gguf"

echo "# bad input"
tp create "$TMP/base-Q8_0.gguf" "$TMP/task-Q8_0.gguf" -o "$TMP/x.tpb" --task json --unsigned \
    --lora "$TMP/small-lora.gguf" > /dev/null 2> "$TMP/out"
check "an adapter for another model (other shapes): refused, no bundle" \
    sh -c "grep -q \"adapter's factors make \[256, 256\]\" '$TMP/out' && test ! -e '$TMP/x.tpb'"
python3 - "$TMP/lora.gguf" "$TMP/nan-lora.gguf" <<'PY'
import struct, sys, gguf_header
h = gguf_header.read(sys.argv[1])
d = bytearray(open(sys.argv[1], "rb").read())
name, _, _, off = h.tensors[0]
struct.pack_into("<f", d, h.data_offset + off + 40, float("nan"))
open(sys.argv[2], "wb").write(d)
PY
tp create "$TMP/base-Q8_0.gguf" "$TMP/task-Q8_0.gguf" -o "$TMP/x.tpb" --task json --unsigned \
    --lora "$TMP/nan-lora.gguf" > /dev/null 2> "$TMP/out"
check "NaN in a factor: refused, naming it, no bundle" sh -c "grep -q 'NaN or infinity' '$TMP/out' && test ! -e '$TMP/x.tpb'"
# A manifest whose lora fields lie (unsigned, its manifest plain YAML: --plain-manifest).
tp create "$TMP/base-Q8_0.gguf" "$TMP/task-Q8_0.gguf" -o "$TMP/lora-plain.tpb" --task json --unsigned \
    --lora "$TMP/lora.gguf" --plain-manifest > /dev/null
for edit in "rank: 8/rank: 4" "rank: 8/rank: 0" "first: 0/first: 8" "factor: 40000000/factor: 40100000" \
    "in: 512/in: 500"; do
    sed "s/$edit/" "$TMP/lora-plain.tpb" > "$TMP/lie.tpb"
    rm -f "$TMP/lie.gguf"
    tp apply "$TMP/base-Q8_0.gguf" "$TMP/lie.tpb" -o "$TMP/lie.gguf" --allow-unsigned --no-sync > "$TMP/out" 2>&1
    rc=$?
    check "lora '${edit%%/*}' made '${edit#*/}': refused (exit $rc) with a message, nothing written: $(tail -c 90 "$TMP/out")" \
        sh -c "test $rc -ne 0 && test -s '$TMP/out' && test ! -e '$TMP/lie.gguf'"
done

echo "# a device"
MODEL="$STATE/model.gguf"
write_config
need_daemon
tpctl provision "$TMP/base-Q8_0.gguf" > /dev/null
for n in 1 2; do
    src="$TMP/task-Q8_0.gguf" lora="$TMP/lora.gguf" task=json
    [ $n = 2 ] && src="$TMP/task2-Q8_0.gguf" lora="$TMP/lora2.gguf" task=shout
    tp create "$TMP/base-Q8_0.gguf" "$src" -o "$TMP/dev-$task.tpb" --task "$task" --lora "$lora" \
        --key "$TMP/pki/signer.key" --cert "$TMP/pki/signer.crt" > /dev/null
done
tpctl install "$TMP/dev-json.tpb" --switch > /dev/null 2>&1
check "install --switch of a lora bundle: on trial" wait_status 's["state"] == "trial" and s["active"]["task"] == "json"'
check "... byte for byte" same "$TMP/task-Q8_0.gguf"
tpctl mark-good > /dev/null
tpctl install "$TMP/dev-shout.tpb" --switch > /dev/null 2>&1
check "a sibling switch to another adapter's task" wait_status 's["state"] == "trial" and s["active"]["task"] == "shout"'
check "... byte for byte" same "$TMP/task2-Q8_0.gguf"
tpctl mark-good > /dev/null
tpctl switch json > /dev/null 2>&1
check "back to the first (its lora spans staged again over the other's undone)" \
    wait_status 's["state"] == "trial" and s["active"]["task"] == "json"'
check "... byte for byte" same "$TMP/task-Q8_0.gguf"
tpctl mark-good > /dev/null
tp create "$TMP/base-Q8_0.gguf" "$TMP/sorted-Q8_0.gguf" -o "$TMP/dev-sorted.tpb" --task sorted --lora "$TMP/lora.gguf" \
    --key "$TMP/pki/signer.key" --cert "$TMP/pki/signer.crt" > /dev/null
tpctl install "$TMP/dev-sorted.tpb" --switch > /dev/null 2>&1
check "a relocating lora bundle (sorted by name), built into a fresh file" \
    wait_status 's["state"] == "trial" and s["active"]["task"] == "sorted"'
check "... byte for byte" same "$TMP/sorted-Q8_0.gguf"
stop_daemon

# A Q4_0 task predicted with the imatrix's rows, on a device.
rm -rf "$STATE"
write_config
need_daemon
tpctl provision "$TMP/base-qat.gguf" > /dev/null
tp create "$TMP/base-qat.gguf" "$TMP/task-qat.gguf" -o "$TMP/dev-qat.tpb" --task qat --lora "$TMP/lora.gguf" \
    --imatrix "$TMP/imatrix.gguf" --key "$TMP/pki/signer.key" --cert "$TMP/pki/signer.crt" > /dev/null
tpctl install "$TMP/dev-qat.tpb" --switch > /dev/null 2>&1
check "a bundle of spans predicted with imatrix rows: installed and switched to" \
    wait_status 's["state"] == "trial" and s["active"]["task"] == "qat"'
check "... byte for byte" same "$TMP/task-qat.gguf"
stop_daemon

# A directory model (ONNX with external data) and a bundle of found factors.
MODEL="$STATE/detector"
rm -rf "$STATE"
write_config
need_daemon
tpctl provision "$TMP/onnx-base" > /dev/null
tp create "$TMP/onnx-base" "$TMP/onnx-task" -o "$TMP/dev-onnx.tpb" --task onnx --lowrank \
    --key "$TMP/pki/signer.key" --cert "$TMP/pki/signer.crt" > /dev/null
tpctl install "$TMP/dev-onnx.tpb" --switch > /dev/null 2>&1
check "an ONNX directory model: the --lowrank bundle installed and switched to" \
    wait_status 's["state"] == "trial" and s["active"]["task"] == "onnx"'
check "... file for file" diff -r "$MODEL/" "$TMP/onnx-task/"
daemon_finish
