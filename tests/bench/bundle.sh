#!/bin/bash
# Producer benchmarks (issue "Producer"), printed as ratios against named peers in one run:
#  1. realistic pairs (LoRA folded, quantized by ggml's own quantizer) for q4_0, q8_0, q4_K,
#     q6_K: bundle vs bsdiff, xdelta3 -9 -e -s, zstd -19 --long --patch-from;
#  2. worst case (random replacement) and ONNX INT8 (64 layers, 10 changed): bundle vs the
#     changed sites' bytes (<= 1.05x + 64 KiB) and vs the contiguous first..last changed span;
#  3. apply time vs cp + openssl dgst -sha256 of the base (page cache warm, no fsync);
#  4. peak RSS (VmHWM) of apply on a 2 GiB file;
#  5. layout-changing pairs (tests/tools/gguf-relayout.py on the LoRA-folded task: tensors sorted
#     by name, general.name grown, imatrix keys added, output.weight grown by 16 rows; make-onnx.py
#     --classes for ONNX): bundle vs the same peers as 1, apply checked byte for byte. A row over
#     the ratio or whose apply fails is marked, the section goes on; the script then exits 1 if
#     any apply was not byte-identical;
#  6. models of several files, 20 tensors changed (randomly, and by a low-rank delta): a ~300 MB
#     ONNX model with external data (make-onnx.py --kind matmul --external one) and a two-shard
#     BF16 safetensors model with its index (safetensors-shards.py): random, bundle vs the
#     changed tensors' bytes (<= 1.05x + 64 KiB); low-rank, bundle vs the same peers run per
#     file and summed (<= 0.9x); apply checked file for file. MULTI_MB sets the size (300);
#  7. base bundles (issue 18): a re-release of the q4_0 base with two tensors retrained: the base
#     delta vs the same peers as 1 (<= 0.9x), the full base bundle vs the model's size (<= 1.005x);
#  8. lora spans (issue 20): tasks `taskpatch fold` makes from an F32 base and a llama.cpp adapter
#     (F16 factors), rank 8 and 32 on attn_q,attn_v, the base quantized by `taskpatch quantize`
#     (Q8_0, Q4_K_M, Q4_0), and F16 and BF16 tasks folded into the F16 or BF16 base, as
#     llama-export-lora merges: the bundle with --lora vs without it vs the same peers as 1, and
#     F16/BF16 vs the adapter's own size; apply checked byte for byte.
#  9. the same with an importance matrix frozen from the base (make-imatrix.py), created with --lora
#     --imatrix: Q4_K_M, base and task quantized with it (<= 0.65x); Q4_0 from a quantization-aware
#     base (qat-snap.py: its floats on the Q4_0 grid); and llama.cpp's own llama-export-lora
#     (tests/tools/build-export-lora.sh) merging the adapter into an F16 base (<= 0.1x the best peer,
#     <= 1.2x the adapter), then that merge quantized to Q8_0 (<= 0.7x) and Q4_K_M (<= 0.65x).
# 10. ONNX INT8 conv stacks (issue 20, item 4): fine-tunes requantized with ONNX Runtime's rules
#     (make-onnx.py --mode finetune: 24 layers of 128 channels, 20 changed; a per-channel drift as a
#     folded BatchNorm makes plus dense noise of --noise times the weights' spread), QDQ and
#     QLinearConv, per-tensor and per-channel scales: the bundle (rescale spans where they pay) vs
#     the same without the graph's pairing (its op types renamed: no rescale span) vs the same peers
#     as 1 (<= 0.8x the best peer); apply checked byte for byte.
# Section 6 creates its bundles with --lowrank (the low-rank change found in the change itself).
# Usage: tests/bench/bundle.sh BUILD_DIR   (RECORD=1 also writes tests/bench/results/bundle.json;
#        SECTIONS="5" runs only the sections listed, default "1 2 3 4 5 6 7 8 9 10", and carries the
#        recorded cases of the others over, marked so and with their own conditions)
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
# One creation time for every bundle of the run: the same inputs make the same bytes, so two
# ways of making a bundle compare by their content (signatures are deterministic).
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(date +%s)}
dims=(--dim 1024 --ff 2816 --layers 4 --vocab 2048)
# The smaller model of section 5.
rdims=(--dim 512 --ff 1536 --layers 2 --vocab 2048)
results="$work/results.jsonl"
: > "$results"

sections=" ${SECTIONS:-1 2 3 4 5 6 7 8 9 10} "
apply_failed=0

size() { stat -c %s "$1"; }
emit() { echo "$1" >> "$results"; }
best_of() { printf '%s\n' "$@" | sort -n | head -n 1; }
# peers BASE TARGET [WINDOW-LOG]: bsdiff, xdelta3 -9 -e and zstd -19 --long --patch-from of TARGET
# against BASE, their sizes in p_bs, p_xd, p_zs.
peers() {
    bsdiff "$1" "$2" "$work/p.bsdiff"
    xdelta3 -f -9 -e -s "$1" "$2" "$work/p.xd3"
    zstd -q -f -19 --long="${3:-27}" --patch-from="$1" "$2" -o "$work/p.zst" 2> /dev/null
    p_bs=$(size "$work/p.bsdiff") p_xd=$(size "$work/p.xd3") p_zs=$(size "$work/p.zst")
}
want() { case $sections in *" $1 "*) return 0 ;; esac; return 1; }

if want 1; then
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
    peers "$b" "$k"
    ours=$(size "$work/$t.tpb") bs=$p_bs xd=$p_xd zs=$p_zs
    best=$(best_of "$bs" "$xd" "$zs")
    ratio=$(awk -v a="$ours" -v b="$best" 'BEGIN {printf "%.3f", a / b}')
    printf '%-6s %10d %10d %10d %10d %10d %7sx\n' "$t" "$changed" "$ours" "$bs" "$xd" "$zs" "$ratio"
    emit "{\"case\": \"realistic-$t\", \"changed_site_bytes\": $changed, \"bundle\": $ours, \"bsdiff\": $bs, \"xdelta3\": $xd, \"zstd_patch_from\": $zs, \"ratio_to_best_peer\": $ratio}"
done
echo "   required: ratio <= 1.0 for every type; goal 0.9"
fi  # section 1

if want 2; then
echo
echo "2. worst case and ONNX"
b="$work/base-q4_0.gguf" k="$work/random-q4_0.gguf"
[ -f "$b" ] || "$fix" --ggml "$ggml" --type q4_0 "${dims[@]}" -o "$b" > /dev/null    # section 1's base
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
fi  # section 2

if want 3; then
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
fi  # section 3

if want 4; then
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
fi  # section 4

if want 5; then
echo
# Smaller than section 1 (f16 at its dims is 110 MB; bsdiff needs ~17x the base in RAM and
# ~40 s for 30 MB): the section runs in about 5 minutes on 2 cores.
relayout=(python3 "$root/tests/tools/gguf-relayout.py")
echo "5. layout-changing pairs: $(echo "${rdims[@]}"), task = LoRA rank 8 on attn_q,attn_v, then relaid out"
printf '%-24s %10s %10s %10s %10s %8s  %s\n' case bundle bsdiff xdelta3 zstd-pf "vs best" status
# One row: create, apply + cmp, the three peers; marks rather than stops on a failure.
relayout_row() {
    local name=$1 b=$2 k=$3 ours status ratio bs xd zs best
    status=ok ours=0
    if "$tp" create "$b" "$k" -o "$work/r.tpb" --task bench "${sign[@]}" > /dev/null 2> "$work/r.err"; then
        ours=$(size "$work/r.tpb")
        if ! "$tp" apply "$b" "$work/r.tpb" -o "$work/r-out" --ca "$work/pki/ca.pem" > /dev/null 2>> "$work/r.err" ||
            ! cmp -s "$work/r-out" "$k"; then
            status="APPLY FAILS" apply_failed=1
        fi
    else
        status="CREATE FAILS" apply_failed=1
    fi
    peers "$b" "$k"
    bs=$p_bs xd=$p_xd zs=$p_zs
    best=$(best_of "$bs" "$xd" "$zs")
    ratio=$(awk -v a="$ours" -v b="$best" 'BEGIN {printf "%.3f", a / b}')
    if [ "$status" = ok ] && awk -v r="$ratio" 'BEGIN {exit !(r > 1.0)}'; then
        status=OVER
    fi
    printf '%-24s %10d %10d %10d %10d %7sx  %s\n' "$name" "$ours" "$bs" "$xd" "$zs" "$ratio" "$status"
    [ "$status" = ok ] || [ "$status" = OVER ] || sed 's/^/      /' "$work/r.err" | head -n 3
    emit "{\"case\": \"$name\", \"bundle\": $ours, \"bsdiff\": $bs, \"xdelta3\": $xd, \"zstd_patch_from\": $zs, \"ratio_to_best_peer\": $ratio, \"apply_identical\": $([ "$status" = ok ] || [ "$status" = OVER ] && echo true || echo false), \"status\": \"$status\"}"
}
longname="taskpatch-fixture-$(printf 'the task name grown by sixty characters, as a release renames' | cut -c1-60)"
for t in f16 q8_0 q4_0 q4_K; do
    b="$work/rbase-$t.gguf" k="$work/rtask-$t.gguf"
    "$fix" --ggml "$ggml" --type "$t" "${rdims[@]}" -o "$b" > /dev/null
    "$fix" --ggml "$ggml" --type "$t" "${rdims[@]}" --mode lora --targets attn_q,attn_v -o "$k" > /dev/null
    "${relayout[@]}" "$k" -o "$work/rt-sorted.gguf" --sort-by-name
    "${relayout[@]}" "$k" -o "$work/rt-name.gguf" --set-string "general.name=$longname"
    "${relayout[@]}" "$k" -o "$work/rt-imatrix.gguf" --add-key quantize.imatrix.file=/models/imatrix.dat \
        --add-key quantize.imatrix.dataset=/data/calibration.txt \
        --add-u32 quantize.imatrix.entries_count=14 --add-u32 quantize.imatrix.chunks_count=125
    "${relayout[@]}" "$k" -o "$work/rt-rows.gguf" --grow-rows output.weight=16
    for kind in sorted name imatrix rows; do
        relayout_row "relayout-$kind-$t" "$b" "$work/rt-$kind.gguf"
    done
done
python3 "$root/tests/tools/make-onnx.py" --layers 64 --seed 1 -o "$work/rbase.onnx" \
    --task-out "$work/rtask.onnx" --change-layers 10 --classes 40 > /dev/null
relayout_row relayout-classes-onnx_int8 "$work/rbase.onnx" "$work/rtask.onnx"
echo "   sorted: tensors by name; name: general.name +60 chars; imatrix: 4 quantize.imatrix.* keys;"
echo "   rows: output.weight +16 rows; onnx_int8: 64 layers, 10 fine-tuned, classifier 32 -> 40 classes"
echo "   required: ratio <= 1.0 for every pair; goal 0.9"
rm -f "$work"/rt-*.gguf "$work/r-out" "$work/r.tpb" "$work/r.err"
fi  # section 5

if want 6; then
mb=${MULTI_MB:-300}
echo "6. models of several files (~$mb MB), 20 tensors changed: random (vs changed bytes), low-rank (vs peers per file, summed)"
printf '%-28s %10s %10s %10s %10s %10s %8s  %s\n' case changed bundle bsdiff xdelta3 zstd-pf ratio status
# multi_row NAME BASE_DIR TASK_DIR MODE: the bundle, applied and compared; the peers per file.
multi_row() {
    local name=$1 b=$2 k=$3 mode=$4 ours changed status=ok bs=0 xd=0 zs=0 f ratio best
    rm -rf "$work/m-out"
    "$tp" create "$b" "$k" -o "$work/m.tpb" --task bench "${sign[@]}" --lowrank > /dev/null
    ours=$(size "$work/m.tpb")
    "$tp" apply "$b" "$work/m.tpb" -o "$work/m-out" --ca "$work/pki/ca.pem" --no-sync > /dev/null &&
        diff -r -q "$work/m-out" "$k" > /dev/null || { status="APPLY FAILS" apply_failed=1; }
    changed=$("$tp" diff --json "$b" "$k" | python3 -c 'import json,sys; j=json.load(sys.stdin); print(sum(r["site_bytes"] or r["length"] for r in j["regions"]) if j["regions"] else j["changed_bytes"])')
    for f in $(cd "$k" && find . -type f | sort); do
        peers "$b/$f" "$k/$f" 30
        bs=$((bs + p_bs)) xd=$((xd + p_xd)) zs=$((zs + p_zs))
    done
    best=$(best_of "$bs" "$xd" "$zs")
    if [ "$mode" = random ]; then
        ratio=$(awk -v a="$ours" -v c="$changed" 'BEGIN {printf "%.3f", a / c}')
        [ "$status" = ok ] && awk -v a="$ours" -v c="$changed" 'BEGIN {exit !(a > 1.05 * c + 65536)}' && status=OVER
    else
        ratio=$(awk -v a="$ours" -v b="$best" 'BEGIN {printf "%.3f", a / b}')
        [ "$status" = ok ] && awk -v r="$ratio" 'BEGIN {exit !(r > 0.9)}' && status=OVER
    fi
    printf '%-28s %10d %10d %10d %10d %10d %7sx  %s\n' "$name" "$changed" "$ours" "$bs" "$xd" "$zs" "$ratio" "$status"
    emit "{\"case\": \"$name\", \"changed_site_bytes\": $changed, \"bundle\": $ours, \"bsdiff\": $bs, \"xdelta3\": $xd, \"zstd_patch_from\": $zs, \"ratio\": $ratio, \"ratio_to\": \"$([ "$mode" = random ] && echo changed_bytes || echo best_peer)\", \"status\": \"$status\", \"create\": \"--lowrank\"}"
    rm -rf "$work/m-out" "$work/m.tpb"
}
onnx=(python3 "$root/tests/tools/make-onnx.py" --kind matmul --dim $((mb >= 200 ? 1024 : 512)) --size-mb "$mb" --external one)
shards=(python3 "$root/tests/tools/safetensors-shards.py" --size-mb "$mb" --shards 2)
for mode in random lowrank; do
    rm -rf "$work/mo-b" "$work/mo-t" "$work/ms-b" "$work/ms-t"
    "${onnx[@]}" -o "$work/mo-b/model.onnx" --task-out "$work/mo-t/model.onnx" --change 20 --mode "$mode" > /dev/null
    multi_row "multi-onnx_external-$mode" "$work/mo-b" "$work/mo-t" "$mode"
    "${shards[@]}" "$work/ms-b" > /dev/null
    "${shards[@]}" "$work/ms-t" --change 20 --mode "$mode" > /dev/null
    multi_row "multi-safetensors_2shard-$mode" "$work/ms-b" "$work/ms-t" "$mode"
done
echo "   random: ratio = bundle / changed tensor bytes, required <= 1.05 (+ 64 KiB)"
echo "   lowrank: ratio = bundle / best peer (bsdiff, xdelta3, zstd --patch-from, per file, summed), required <= 0.9"
rm -rf "$work/mo-b" "$work/mo-t" "$work/ms-b" "$work/ms-t"
fi  # section 6

if want 7; then
echo
echo "7. base bundles (issue 18): a re-release of the q4_0 base with two ffn_gate tensors retrained (LoRA folded)"
b="$work/base-q4_0.gguf" k="$work/rerelease-q4_0.gguf"
[ -f "$b" ] || "$fix" --ggml "$ggml" --type q4_0 "${dims[@]}" -o "$b" > /dev/null    # section 1's base
"$fix" --ggml "$ggml" --type q4_0 "${dims[@]}" --mode lora --targets blk.0.ffn_gate.weight,blk.2.ffn_gate.weight \
    --task-seed 21 -o "$k" > /dev/null
changed=$("$tp" diff --json "$b" "$k" | python3 -c 'import json,sys; print(sum(r["site_bytes"] or r["length"] for r in json.load(sys.stdin)["regions"]))')
"$tp" create "$b" "$k" --base-bundle -o "$work/base-delta.tpb" --version 2 "${sign[@]}" > /dev/null
"$tp" apply "$b" "$work/base-delta.tpb" -o "$work/out.gguf" --ca "$work/pki/ca.pem" > /dev/null
cmp -s "$work/out.gguf" "$k" || { echo "bundle.sh: the base delta's apply is not byte-identical" >&2; exit 1; }
t0=$(date +%s%N)
"$tp" create --base-bundle --full "$k" -o "$work/base-full.tpb" --version 2 "${sign[@]}" > /dev/null
t_full=$(( ($(date +%s%N) - t0) / 1000000 ))
"$tp" apply "$work/base-full.tpb" -o "$work/out.gguf" --ca "$work/pki/ca.pem" > /dev/null
cmp -s "$work/out.gguf" "$k" || { echo "bundle.sh: the full base bundle's apply is not byte-identical" >&2; exit 1; }
peers "$b" "$k"
ours=$(size "$work/base-delta.tpb") bs=$p_bs xd=$p_xd zs=$p_zs
best=$(best_of "$bs" "$xd" "$zs")
ratio=$(awk -v a="$ours" -v b="$best" 'BEGIN {printf "%.3f", a / b}')
full=$(size "$work/base-full.tpb") model=$(size "$k")
over=$(awk -v a="$full" -v b="$model" 'BEGIN {printf "%.4f", a / b}')
printf '   base delta: changed %d B, bundle %d B; bsdiff %d, xdelta3 %d, zstd --patch-from %d: %sx the best (required <= 0.9)\n' \
    "$changed" "$ours" "$bs" "$xd" "$zs" "$ratio"
printf '   full base bundle: %d B for a %d-byte model: %sx its size (required <= 1.005), made in %d ms\n' \
    "$full" "$model" "$over" "$t_full"
emit "{\"case\": \"base-delta-q4_0\", \"changed_site_bytes\": $changed, \"bundle\": $ours, \"bsdiff\": $bs, \"xdelta3\": $xd, \"zstd_patch_from\": $zs, \"ratio_to_best_peer\": $ratio}"
emit "{\"case\": \"base-full-q4_0\", \"model_bytes\": $model, \"bundle\": $full, \"ratio_to_model\": $over, \"create_ms\": $t_full}"
fi  # section 7

# lora_row CASE BASE TASK ADAPTER LIMIT [vs-adapter LIMIT]: --lora (and lora_extra's options), without, the
# peers; applied and compared (sections 8 and 9).
lora_extra=()
lora_row() {
    local name=$1 b=$2 k=$3 a=$4 limit=$5 alimit=${6:-} ours today best ratio vs_today status=ok av=""
    "$tp" create "$b" "$k" -o "$work/l.tpb" --task bench "${sign[@]}" --lora "$a" "${lora_extra[@]}" > /dev/null
    "$tp" create "$b" "$k" -o "$work/t.tpb" --task bench "${sign[@]}" > /dev/null
    ours=$(size "$work/l.tpb") today=$(size "$work/t.tpb")
    "$tp" apply "$b" "$work/l.tpb" -o "$work/out.gguf" --ca "$work/pki/ca.pem" --no-sync > /dev/null &&
        cmp -s "$work/out.gguf" "$k" || { status="APPLY FAILS" apply_failed=1; }
    peers "$b" "$k"
    best=$(best_of "$p_bs" "$p_xd" "$p_zs")
    ratio=$(awk -v a="$ours" -v b="$best" 'BEGIN {printf "%.3f", a / b}')
    vs_today=$(awk -v a="$ours" -v b="$today" 'BEGIN {printf "%.3f", a / b}')
    if [ "$limit" = today ]; then
        [ "$status" = ok ] && [ "$ours" -gt "$today" ] && status="OVER: larger than without --lora"
    else
        [ "$status" = ok ] && awk -v r="$ratio" -v l="$limit" 'BEGIN {exit !(r > l)}' && status="OVER $limit"
    fi
    if [ -n "$alimit" ]; then
        av=$(awk -v a="$ours" -v b="$(size "$a")" 'BEGIN {printf "%.3f", a / b}')
        [ "$status" = ok ] && awk -v r="$av" -v l="$alimit" 'BEGIN {exit !(r > l)}' && status="OVER $alimit x adapter"
    fi
    printf '%-22s %10d %10d %10d %10d %10d %10d %7sx %7sx  %s%s\n' "$name" "$(size "$a")" "$ours" "$today" "$p_bs" \
        "$p_xd" "$p_zs" "$ratio" "$vs_today" "$status" "${av:+ (${av}x the adapter)}"
    emit "{\"case\": \"lora-$name\", \"adapter\": $(size "$a"), \"bundle\": $ours, \"bundle_without_lora\": $today, \"bsdiff\": $p_bs, \"xdelta3\": $p_xd, \"zstd_patch_from\": $p_zs, \"ratio_to_best_peer\": $ratio, \"ratio_to_without_lora\": $vs_today, \"ratio_to_adapter\": ${av:-null}, \"required\": \"$limit\", \"status\": \"$status\"}"
    rm -f "$work/l.tpb" "$work/t.tpb" "$work/out.gguf"
}

# lora_section TITLE: the title of section 8 or 9, its table's header, and the float32 base both
# fold from ($b32, made once).
lora_section() {
    echo
    echo "$1 ($(echo "${dims[@]}"))"
    printf '%-22s %10s %10s %10s %10s %10s %10s %8s %8s  %s\n' case adapter "--lora" today bsdiff xdelta3 zstd-pf \
        "vs best" "vs today" status
    b32="$work/lora-base-f32.gguf"
    [ -f "$b32" ] || "$fix" --ggml "$ggml" --type f32 "${dims[@]}" -o "$b32" > /dev/null
}

if want 8; then
lora_section "8. lora spans: taskpatch fold of an F32 base and an F16 adapter on attn_q,attn_v"
"$tp" quantize "$b32" "$work/lora-base-F16.gguf" F16 > /dev/null
"$tp" quantize "$b32" "$work/lora-base-BF16.gguf" BF16 > /dev/null
for rank in 8 32; do
    a="$work/lora-r$rank.gguf"
    "$fix" --ggml "$ggml" --type f32 "${dims[@]}" --mode lora --targets attn_q,attn_v --rank "$rank" --alpha 16 \
        --adapter "$a" --adapter-type f16 -o "$work/lora-ref.gguf" > /dev/null
    for t in Q8_0 Q4_K_M Q4_0 F16 BF16; do
        src=$b32
        case $t in F16 | BF16) src="$work/lora-base-$t.gguf" ;; esac
        "$tp" quantize "$src" "$work/lora-b.gguf" "$t" > /dev/null
        "$tp" fold "$src" "$a" "$work/lora-k.gguf" "$t" > /dev/null
        case $t in
        Q8_0) lora_row "$t-r$rank" "$work/lora-b.gguf" "$work/lora-k.gguf" "$a" 0.7 ;;
        Q4_K_M) lora_row "$t-r$rank" "$work/lora-b.gguf" "$work/lora-k.gguf" "$a" 0.65 ;;
        Q4_0) lora_row "$t-r$rank" "$work/lora-b.gguf" "$work/lora-k.gguf" "$a" today ;;
        *) lora_row "$t-r$rank" "$work/lora-b.gguf" "$work/lora-k.gguf" "$a" 0.1 1.2 ;;
        esac
    done
done
echo "   required: Q8_0 <= 0.7x the best peer (goal 0.55), Q4_K_M <= 0.65x (goal 0.5), F16 and BF16 <= 0.1x and <= 1.2x"
echo "   the adapter's size; Q4_0 no worse than without --lora (the per-span choice keeps the delta where it is smaller)"
rm -f "$work/lora-b.gguf" "$work/lora-k.gguf" "$work/lora-ref.gguf"
fi  # section 8

if want 9; then
lora_section "9. lora spans with an importance matrix, and llama.cpp's own llama-export-lora"
# The importance matrix frozen from the base, and a quantization-aware base: its floats on the Q4_0 grid.
im="$work/lora-imatrix.gguf"
python3 "$root/tests/tools/make-imatrix.py" "$b32" "$im" > /dev/null
"$tp" quantize --imatrix "$im" "$b32" "$work/lora-grid.gguf" Q4_0 > /dev/null
PYTHONPATH="$root/tests/tools" python3 "$root/tests/tools/qat-snap.py" "$b32" "$work/lora-grid.gguf" \
    "$work/lora-base-qat.gguf" > /dev/null
# llama.cpp's tool, built from the pinned source; its base: the model in F16.
xl=$(sh "$root/tests/tools/build-export-lora.sh" "$work/llama-export-lora")
"$tp" quantize "$b32" "$work/xl-base-F16.gguf" F16 > /dev/null
for rank in 8 32; do
    a="$work/lora-r$rank.gguf"
    "$fix" --ggml "$ggml" --type f32 "${dims[@]}" --mode lora --targets attn_q,attn_v --rank "$rank" --alpha 16 \
        --adapter "$a" --adapter-type f16 -o "$work/lora-ref.gguf" > /dev/null
    lora_extra=(--imatrix "$im")
    for t in Q4_K_M Q4_0; do
        src=$b32 limit=0.65 name=$t-imatrix
        [ "$t" = Q4_0 ] && src="$work/lora-base-qat.gguf" limit=today name=Q4_0-qat-imatrix
        "$tp" quantize --imatrix "$im" "$src" "$work/lora-b.gguf" "$t" > /dev/null
        "$tp" fold --imatrix "$im" "$src" "$a" "$work/lora-k.gguf" "$t" > /dev/null
        lora_row "$name-r$rank" "$work/lora-b.gguf" "$work/lora-k.gguf" "$a" "$limit"
    done
    lora_extra=()
    # llama-export-lora merges the adapter into the F16 base (F16 out, its own tensor order); a
    # pipeline then quantizes the merged model (taskpatch quantize: llama-quantize's bytes).
    "$xl" -m "$work/xl-base-F16.gguf" --lora "$a" -o "$work/xl-F16.gguf" -t 1 > /dev/null 2>&1
    lora_row "export-lora-F16-r$rank" "$work/xl-base-F16.gguf" "$work/xl-F16.gguf" "$a" 0.1 1.2
    for t in Q8_0 Q4_K_M; do
        "$tp" quantize "$work/xl-base-F16.gguf" "$work/lora-b.gguf" "$t" > /dev/null
        "$tp" quantize "$work/xl-F16.gguf" "$work/lora-k.gguf" "$t" > /dev/null
        case $t in
        Q8_0) lora_row "export-lora-$t-r$rank" "$work/lora-b.gguf" "$work/lora-k.gguf" "$a" 0.7 ;;
        *) lora_row "export-lora-$t-r$rank" "$work/lora-b.gguf" "$work/lora-k.gguf" "$a" 0.65 ;;
        esac
    done
done
echo "   *-imatrix: base and task quantized with an imatrix frozen from the base, created with --lora --imatrix;"
echo "   export-lora-*: llama-export-lora's F16 merge (<= 0.1x the best peer and <= 1.2x the adapter), then quantized"
rm -f "$work/lora-b.gguf" "$work/lora-k.gguf" "$work/lora-ref.gguf" "$work/lora-grid.gguf" "$work/lora-base-qat.gguf" \
    "$work/xl-F16.gguf" "$work/xl-base-F16.gguf" "$im"
fi  # section 9

if want 10; then
echo
echo "10. ONNX INT8 conv stacks, fine-tuned and requantized (24 layers of 128 channels, 20 changed)"
printf '%-26s %10s %10s %10s %10s %10s %8s %8s\n' case bundle "no rescale" bsdiff xdelta3 zstd-pf "vs best" rescale
onnx_row() {  # onnx_row QUANT GRAPH NOISE
    local name b="$work/ob.onnx" k="$work/ot.onnx" status=ok
    # The case's name carries the noise in thousandths (a dot would cut claims.py's paths).
    name="onnx-int8-finetune-$1-$2-n$(awk -v n="$3" 'BEGIN {printf "%d", n * 1000 + 0.5}')"
    python3 "$root/tests/tools/make-onnx.py" --channels 128 --layers 24 --seed 7 --change 20 --mode finetune \
        --quant "$1" --graph "$2" --noise "$3" -o "$b" --task-out "$k" > /dev/null
    "$tp" create "$b" "$k" -o "$work/onnx.tpb" --task bench "${sign[@]}" --json > "$work/onnx.json"
    "$tp" apply "$b" "$work/onnx.tpb" -o "$work/onnx.out" --ca "$work/pki/ca.pem" --no-sync > /dev/null
    cmp -s "$work/onnx.out" "$k" || { echo "bundle.sh: $name: apply is not byte-identical" >&2; exit 1; }
    # The same producer without the graph's pairing: the quantizing ops renamed (same lengths).
    sed 's/DequantizeLinear/DequantizeLinaer/g; s/QLinearConv/QLinearConw/g' "$b" > "$work/ob-nog.onnx"
    sed 's/DequantizeLinear/DequantizeLinaer/g; s/QLinearConv/QLinearConw/g' "$k" > "$work/ot-nog.onnx"
    "$tp" create "$work/ob-nog.onnx" "$work/ot-nog.onnx" -o "$work/onnx-nog.tpb" --task bench "${sign[@]}" > /dev/null
    peers "$b" "$k"
    local ours nog best ratio n
    ours=$(size "$work/onnx.tpb") nog=$(size "$work/onnx-nog.tpb")
    best=$(best_of "$p_bs" "$p_xd" "$p_zs")
    ratio=$(awk -v a="$ours" -v b="$best" 'BEGIN {printf "%.3f", a / b}')
    n=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["encodings"]["rescale"])' "$work/onnx.json")
    awk -v r="$ratio" 'BEGIN {exit !(r > 0.8)}' && status=OVER
    printf '%-26s %10d %10d %10d %10d %10d %7sx %8d %s\n' "$1-$2 noise $3" "$ours" "$nog" "$p_bs" "$p_xd" "$p_zs" \
        "$ratio" "$n" "$([ $status = ok ] || echo "$status")"
    emit "{\"case\": \"$name\", \"bundle\": $ours, \"bundle_without_rescale\": $nog, \"bsdiff\": $p_bs, \"xdelta3\": $p_xd, \"zstd_patch_from\": $p_zs, \"best_peer\": $best, \"ratio_to_best_peer\": $ratio, \"rescale_spans\": $n, \"noise\": $3, \"required\": 0.8, \"status\": \"$status\"}"
}
for q in per-tensor per-channel; do
    for g in qdq qlinear; do
        onnx_row "$q" "$g" 0.01
    done
done
for n in 0.005 0.02; do
    onnx_row per-tensor qdq "$n"
    onnx_row per-channel qdq "$n"
done
echo "   required: <= 0.8x the best peer; noise: the fine-tune's dense change, in units of each channel's spread"
rm -f "$work/ob.onnx" "$work/ot.onnx" "$work/ob-nog.onnx" "$work/ot-nog.onnx" "$work/onnx.out"
fi  # section 10

# SECTIONS given: the recorded cases of the sections not run are carried over, each with the
# conditions it was measured under, so that a record of some sections keeps the others' numbers.
kept=
[ -n "${SECTIONS:-}" ] && [ -f "$root/tests/bench/results/bundle.json" ] && kept="$root/tests/bench/results/bundle.json"
BENCH_DIR="$root/tests/bench" python3 - "$results" "$work/bundle.json" "$kept" <<'PY'
import json, os, sys
sys.path.insert(0, os.environ["BENCH_DIR"])
from conditions import conditions
cases = [json.loads(l) for l in open(sys.argv[1])]
cond = conditions(path=os.path.dirname(sys.argv[2]), page_cache="warm", flush="excluded (apply --no-sync, plain cp)")
if sys.argv[3]:
    old = json.load(open(sys.argv[3]))
    measured = {c["case"] for c in cases}
    for c in old["cases"]:
        if c["case"] not in measured:
            c.setdefault("conditions", old["conditions"])
            c.setdefault("carried_over", "SECTIONS=%s: not measured in this run" % os.environ.get("SECTIONS", ""))
            cases.append(c)
json.dump({"benchmark": "bundle", "conditions": cond, "cases": cases}, open(sys.argv[2], "w"), indent=2)
PY
if [ "${RECORD:-0}" = 1 ]; then
    mkdir -p "$root/tests/bench/results"
    cp "$work/bundle.json" "$root/tests/bench/results/bundle.json"
    echo "recorded tests/bench/results/bundle.json"
fi
if [ "$apply_failed" != 0 ]; then
    echo "bundle.sh: a layout-changing pair was not rebuilt byte for byte (section 5)" >&2
    exit 1
fi
