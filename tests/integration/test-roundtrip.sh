#!/bin/bash
# Round trips on real model formats: GGUF of every quantization type (fixtures made by
# ggml's own quantizer, from the pinned npm package) and ONNX INT8 conv stacks:
# create -> verify -> apply must rebuild the task model byte for byte; the changed site set
# is what the LoRA adapter names (--expect-sites), and a different set is refused.
. "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
fix="$(dirname "$BIN")/tools/gguf-fixture"

ggml=$(sh "$root/tests/tools/npm-ggml.sh" "$root/build/npm" 2> "$TMP/npm.err" | tail -n 1)
if [ ! -e "$ggml/libggml-base.so" ]; then
    fail "ggml from npm is not available: $(cat "$TMP/npm.err")"
    finish
    exit 1
fi

dims=(--dim 256 --ff 512 --layers 2 --vocab 300)
for t in f32 f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 q2_K q3_K q4_K q5_K q6_K; do
    b="$TMP/b-$t.gguf" k="$TMP/k-$t.gguf"
    if ! "$fix" --ggml "$ggml" --type "$t" "${dims[@]}" -o "$b" > "$TMP/fix.log" 2>&1 ||
       ! "$fix" --ggml "$ggml" --type "$t" "${dims[@]}" --mode lora --targets attn_q,ffn_down \
            --adapter "$TMP/a-$t.gguf" -o "$k" >> "$TMP/fix.log" 2>&1; then
        fail "$t: fixture generation: $(tail -n 3 "$TMP/fix.log")"
        continue
    fi
    if tp create "$b" "$k" -o "$TMP/$t.tpb" --task "rt-${t,,}" --unsigned --level 3 \
           --expect-sites "$TMP/a-$t.gguf" > "$TMP/create.log" 2>&1 &&
       tp verify "$TMP/$t.tpb" --allow-unsigned > /dev/null 2>&1 &&
       tp apply "$b" "$TMP/$t.tpb" -o "$TMP/o-$t.gguf" --allow-unsigned > /dev/null 2>&1 &&
       cmp -s "$TMP/o-$t.gguf" "$k"; then
        ok "$t: create (sites = the adapter's), verify, apply: byte-identical"
    else
        fail "$t: round trip: $(tail -n 3 "$TMP/create.log")"
    fi
done

# Delta coding is in use where it pays: the q4_0 bundle carries delta spans.
tp inspect --json "$TMP/q4_0.tpb" > "$TMP/q4.json"
check "q4_0 spans are delta-coded" python3 -c "
import json; j = json.load(open('$TMP/q4.json')); assert j['encodings']['delta'] >= 1, j['encodings']"

# --expect-sites: a different changed set is an error, and no bundle is written.
printf 'blk.0.attn_q.weight\n# a comment\n\nblk.1.attn_q.weight\n' > "$TMP/expect.txt"
tp create "$TMP/b-q4_0.gguf" "$TMP/k-q4_0.gguf" -o "$TMP/x.tpb" --task x --unsigned --expect-sites "$TMP/expect.txt" \
    > "$TMP/out" 2>&1
rc=$?
check "--expect-sites mismatch: exit 1" test $rc -eq 1
check "--expect-sites mismatch: names the unexpected site" grep -q "site 'blk.0.ffn_down.weight' changed but is not expected" "$TMP/out"
check "--expect-sites mismatch: no bundle written" test ! -e "$TMP/x.tpb"

# A non-local change (every tensor differs) is reported.
"$fix" --ggml "$ggml" --type q4_0 "${dims[@]}" --seed 2 -o "$TMP/other.gguf" > /dev/null 2>&1
tp create "$TMP/b-q4_0.gguf" "$TMP/other.gguf" -o "$TMP/nl.tpb" --task nl --unsigned --level 1 > "$TMP/out" 2>&1
check "a non-local change warns" grep -q "the change is not local" "$TMP/out"

# diff --json: the locality report.
tp diff --json "$TMP/b-q4_0.gguf" "$TMP/k-q4_0.gguf" > "$TMP/diff.json"
check "diff --json lists exactly the changed tensors" python3 -c "
import json; j = json.load(open('$TMP/diff.json'))
sites = sorted(r['site'] for r in j['regions'] if r['site'])
assert sites == ['blk.0.attn_q.weight', 'blk.0.ffn_down.weight', 'blk.1.attn_q.weight', 'blk.1.ffn_down.weight'], sites
assert j['sites_changed'] == 4 and j['layout_changed'] is False, j"

# ONNX: an INT8 conv stack with 3 changed layers, plain and random replacement.
for mode in "" --random; do
    python3 "$root/tests/tools/make-onnx.py" --layers 12 --channels 8 --seed 3 -o "$TMP/b.onnx" \
        --task-out "$TMP/k.onnx" --change-layers 3 $mode > /dev/null 2>&1
    tp create "$TMP/b.onnx" "$TMP/k.onnx" -o "$TMP/o.tpb" --task onnx --unsigned --level 3 > /dev/null 2>&1 &&
        tp apply "$TMP/b.onnx" "$TMP/o.tpb" -o "$TMP/o.onnx" --allow-unsigned > /dev/null 2>&1
    check "ONNX INT8 ${mode:-(requantized)}: apply is byte-identical" cmp -s "$TMP/o.onnx" "$TMP/k.onnx"
    n=$(tp inspect --json "$TMP/o.tpb" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["sites"]))')
    check "ONNX ${mode:-(requantized)}: 3 layers x (weight, scale) = 6 sites changed, got $n" test "$n" -eq 6
done

# An external-data .onnx given alone (without its data files) is refused with a pointer to its
# directory, not silently diffed as if its tensors were inline (test-model-formats.sh does the rest).
python3 "$root/tests/tools/make-onnx.py" --layers 4 --channels 8 -o "$TMP/ext-base.onnx" --external one \
    --external-dir "$TMP/ext" > /dev/null 2>&1
extfile=$(ls "$TMP"/ext/*.onnx 2> /dev/null | head -n 1)
tp diff "$extfile" "$extfile" > "$TMP/out" 2>&1
check "external-data .onnx alone: refused, naming external data and the directory" \
    grep -q "external data files: give the model's directory" "$TMP/out"

finish
