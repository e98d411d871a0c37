#!/bin/bash
# Producer benchmarks (issue "Producer"), printed as ratios against named peers in one run:
#  1. realistic pairs (LoRA folded, quantized by ggml's own quantizer) for q4_0, q8_0, q4_K,
#     q6_K: bundle vs bsdiff, xdelta3 -9 -e -s, zstd -19 --long --patch-from;
#  2. worst case (random replacement) and ONNX INT8 (64 layers, 10 changed): bundle vs the
#     changed sites' bytes (<= 1.05x + 64 KiB) and vs the contiguous first..last changed span;
#  3. apply time vs cp + openssl dgst -sha256 of the base (page cache warm, no fsync);
#  4. peak RSS (VmHWM) of apply on a 2 GiB file.
# Usage: tests/bench/bundle.sh BUILD_DIR   (RECORD=1 also writes tests/bench/results/bundle.json)
set -eu
build=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
tp="$build/bin/taskpatch"
fix="$build/tools/gguf-fixture"
work="$build/bench/bundle"
mkdir -p "$work"
ggml=$(sh "$root/tests/tools/npm-ggml.sh" "$root/build/npm" | tail -n 1)
sh "$root/tests/tools/make-pki.sh" "$work/pki" > /dev/null
sign=(--key "$work/pki/signer.key" --cert "$work/pki/signer.crt")
dims=(--dim 1024 --ff 2816 --layers 4 --vocab 2048)
results="$work/results.jsonl"
: > "$results"

size() { stat -c %s "$1"; }
emit() { echo "$1" >> "$results"; }

echo "1. realistic pairs: $(echo "${dims[@]}") LoRA rank 8 on attn_q,attn_v, quantized by ggml"
printf '%-6s %10s %10s %10s %10s %10s %8s\n' type changed bundle bsdiff xdelta3 zstd-pf "vs best"
for t in q4_0 q8_0 q4_K q6_K; do
    b="$work/base-$t.gguf" k="$work/task-$t.gguf"
    "$fix" --ggml "$ggml" --type "$t" "${dims[@]}" -o "$b" > /dev/null
    "$fix" --ggml "$ggml" --type "$t" "${dims[@]}" --mode lora --targets attn_q,attn_v -o "$k" > /dev/null
    changed=$("$tp" diff --json "$b" "$k" | python3 -c 'import json,sys; print(sum(r["site_bytes"] or r["length"] for r in json.load(sys.stdin)["regions"]))')
    "$tp" create "$b" "$k" -o "$work/$t.tpb" --task bench "${sign[@]}" > /dev/null
    "$tp" apply "$b" "$work/$t.tpb" -o "$work/out.gguf" --ca "$work/pki/ca.pem" > /dev/null
    cmp -s "$work/out.gguf" "$k" || { echo "bundle.sh: $t: apply is not byte-identical" >&2; exit 1; }
    bsdiff "$b" "$k" "$work/p.bsdiff"
    xdelta3 -f -9 -e -s "$b" "$k" "$work/p.xd3"
    zstd -q -f -19 --long=27 --patch-from="$b" "$k" -o "$work/p.zst" 2> /dev/null
    ours=$(size "$work/$t.tpb") bs=$(size "$work/p.bsdiff") xd=$(size "$work/p.xd3") zs=$(size "$work/p.zst")
    best=$(printf '%s\n' "$bs" "$xd" "$zs" | sort -n | head -n 1)
    ratio=$(awk -v a="$ours" -v b="$best" 'BEGIN {printf "%.3f", a / b}')
    printf '%-6s %10d %10d %10d %10d %10d %7sx\n' "$t" "$changed" "$ours" "$bs" "$xd" "$zs" "$ratio"
    emit "{\"case\": \"realistic-$t\", \"changed_site_bytes\": $changed, \"bundle\": $ours, \"bsdiff\": $bs, \"xdelta3\": $xd, \"zstd_patch_from\": $zs, \"ratio_to_best_peer\": $ratio}"
done
echo "   required: ratio <= 1.0 for every type; goal 0.9"

echo
echo "2. worst case and ONNX"
b="$work/base-q4_0.gguf" k="$work/random-q4_0.gguf"
"$fix" --ggml "$ggml" --type q4_0 "${dims[@]}" --mode random --targets attn_q,attn_v -o "$k" > /dev/null
changed=$("$tp" diff --json "$b" "$k" | python3 -c 'import json,sys; print(sum(r["site_bytes"] or r["length"] for r in json.load(sys.stdin)["regions"]))')
"$tp" create "$b" "$k" -o "$work/random.tpb" --task bench "${sign[@]}" > /dev/null
ours=$(size "$work/random.tpb")
limit=$((changed * 105 / 100 + 65536))
printf '   random replacement (q4_0): changed sites %d B, bundle %d B, limit 1.05x + 64 KiB = %d B: %s\n' \
    "$changed" "$ours" "$limit" "$([ "$ours" -le "$limit" ] && echo ok || echo OVER)"
emit "{\"case\": \"random-q4_0\", \"changed_site_bytes\": $changed, \"bundle\": $ours, \"limit\": $limit}"

python3 "$root/tests/tools/make-onnx.py" --layers 64 --seed 1 -o "$work/base.onnx" \
    --task-out "$work/task.onnx" --change-layers 10 > /dev/null
"$tp" create "$work/base.onnx" "$work/task.onnx" -o "$work/onnx.tpb" --task bench "${sign[@]}" > /dev/null
read -r changed first last < <("$tp" diff --json "$work/base.onnx" "$work/task.onnx" | python3 -c '
import json, sys
r = json.load(sys.stdin)["regions"]
print(sum(x["site_bytes"] or x["length"] for x in r), r[0]["offset"], r[-1]["offset"] + r[-1]["length"])')
ours=$(size "$work/onnx.tpb")
contig=$((last - first))
limit=$((changed * 105 / 100 + 65536))
printf '   ONNX INT8, 64 layers, 10 changed: changed sites %d B, bundle %d B (limit %d: %s); contiguous span %d B: ratio %s (required <= 0.2)\n' \
    "$changed" "$ours" "$limit" "$([ "$ours" -le "$limit" ] && echo ok || echo OVER)" "$contig" \
    "$(awk -v a="$ours" -v b="$contig" 'BEGIN {printf "%.3f", a / b}')"
emit "{\"case\": \"onnx-int8-64x10\", \"changed_site_bytes\": $changed, \"bundle\": $ours, \"limit\": $limit, \"contiguous_span\": $contig}"

echo
echo "3. apply time vs cp + openssl dgst -sha256 (page cache warm, no fsync, best of 5, alternated)"
big="$work/big-base.gguf" bigt="$work/big-task.gguf"
bigdims=(--dim 2048 --ff 5632 --layers 8 --vocab 32000)
[ -f "$big" ] || "$fix" --ggml "$ggml" --type q4_0 "${bigdims[@]}" -o "$big" > /dev/null
[ -f "$bigt" ] || "$fix" --ggml "$ggml" --type q4_0 "${bigdims[@]}" --mode lora --targets attn_q,attn_v -o "$bigt" > /dev/null
"$tp" create "$big" "$bigt" -o "$work/big.tpb" --task bench --unsigned --level 3 > /dev/null
# Settle the writeback of the files just made, warm the cache, then alternate the two
# commands so both see the same machine; best of 5 each.
sync
cat "$big" "$work/big.tpb" > /dev/null
wall() { local t0 t1; t0=$(date +%s%N); "$@" > /dev/null; t1=$(date +%s%N); echo $((t1 - t0)); }
b_apply="" b_ref=""
for _ in 1 2 3 4 5; do
    t=$(wall "$tp" apply "$big" "$work/big.tpb" -o "$work/big-out.gguf" --allow-unsigned --no-sync)
    if [ -z "$b_apply" ] || [ "$t" -lt "$b_apply" ]; then b_apply=$t; fi
    t=$(wall sh -c "cp '$big' '$work/big-copy.gguf' && openssl dgst -sha256 '$work/big-copy.gguf'")
    if [ -z "$b_ref" ] || [ "$t" -lt "$b_ref" ]; then b_ref=$t; fi
done
t_apply=$(awk -v t="$b_apply" 'BEGIN {printf "%.4f", t / 1e9}')
t_ref=$(awk -v t="$b_ref" 'BEGIN {printf "%.4f", t / 1e9}')
cmp -s "$work/big-out.gguf" "$bigt" || { echo "bundle.sh: big apply differs" >&2; exit 1; }
rm -f "$work/big-copy.gguf"
mb=$(($(size "$big") / 1000000))
printf '   %d MB model: apply %s s, cp + openssl dgst %s s: ratio %s (required <= 1.3)\n' "$mb" "$t_apply" "$t_ref" \
    "$(awk -v a="$t_apply" -v b="$t_ref" 'BEGIN {printf "%.3f", a / b}')"
emit "{\"case\": \"apply-time\", \"model_mb\": $mb, \"apply_s\": $t_apply, \"cp_plus_dgst_s\": $t_ref}"

echo
echo "4. peak RSS of apply on a 2 GiB file"
python3 - "$work" <<'PY'
import os, sys
d = sys.argv[1]
size = 2 << 30
with open(f"{d}/rss-base.bin", "wb") as f:
    f.truncate(size)
    for off in range(0, size, 64 << 20):  # some non-zero data throughout
        f.seek(off); f.write(os.urandom(4096))
import shutil
shutil.copyfile(f"{d}/rss-base.bin", f"{d}/rss-target.bin")
with open(f"{d}/rss-target.bin", "r+b") as f:
    for off in (1 << 20, 1 << 30, size - (8 << 20)):
        f.seek(off); f.write(os.urandom(4 << 20))
PY
"$tp" create "$work/rss-base.bin" "$work/rss-target.bin" -o "$work/rss.tpb" --task bench --unsigned --level 3 > /dev/null
/usr/bin/time -f '%M' -o "$work/rss.txt" "$tp" apply "$work/rss-base.bin" "$work/rss.tpb" -o "$work/rss-out.bin" --allow-unsigned > /dev/null
cmp -s "$work/rss-out.bin" "$work/rss-target.bin" || { echo "bundle.sh: 2 GiB apply differs" >&2; exit 1; }
rss_kb=$(cat "$work/rss.txt")
printf '   VmHWM %d KB (required <= 32 MB)\n' "$rss_kb"
emit "{\"case\": \"apply-peak-rss-2GiB\", \"vmhwm_kb\": $rss_kb}"
rm -f "$work"/rss-*.bin "$work/big-out.gguf" "$work/out.gguf"

BENCH_DIR="$root/tests/bench" python3 - "$results" "$work/bundle.json" <<'PY'
import json, os, sys
sys.path.insert(0, os.environ["BENCH_DIR"])
from conditions import conditions
cases = [json.loads(l) for l in open(sys.argv[1])]
cond = conditions(path=os.path.dirname(sys.argv[2]), page_cache="warm", flush="excluded (apply --no-sync, plain cp)")
json.dump({"benchmark": "bundle", "conditions": cond, "cases": cases}, open(sys.argv[2], "w"), indent=2)
PY
if [ "${RECORD:-0}" = 1 ]; then
    mkdir -p "$root/tests/bench/results"
    cp "$work/bundle.json" "$root/tests/bench/results/bundle.json"
    echo "recorded tests/bench/results/bundle.json"
fi
