#!/bin/bash
# Producer benchmark (issue 9): `taskpatch quantize` and `taskpatch fold` on a measured F32
# llama model (dim 1024, ff 2816, 8 layers, vocab 32000: ~168 M weights, ~674 MB) with a
# rank-16 LoRA on every linear layer, to Q4_K_M; llama.cpp's own llama_model_quantize() on the
# same input in the same run as the reference (the pinned libllama.v0.4.0.so, through the
# tests/oracle/llama-quantize.c harness). Wall time best of RUNS (default 3), CPU time
# (user + sys) and peak RSS (VmHWM, /usr/bin/time) of each; page cache warm, the output's
# fsync included. Then the extrapolation to a 0.5B-class model:
#     t(W) = t_measured × W / W_measured       (W = weights; both passes are linear in W:
#                                                one quantizer pass per weight, rank MACs
#                                                per adapted weight at the same rank)
#     peak RSS: constant (row chunks of 4 MiB of floats + one tensor's LoRA factors)
# Prints the numbers; writes build/bench/fold.json (and tests/bench/results/fold.json with RECORD=1).
# Usage: tests/bench/fold.sh BUILD_DIR
set -eu
build=$(cd "$1" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
tp="$build/bin/taskpatch" fix="$build/tools/gguf-fixture"
work="$build/bench/fold"
runs=${RUNS:-3}
mkdir -p "$work"
lib=$(sh "$root/tests/tools/npm-ggml.sh" "$root/build/npm" | tail -n 1)
src=$(sh "$root/tests/tools/npm-llama-src.sh" "$root/build/llama-src" | tail -n 1)

harness="$build/oracle/llama-quantize"
mkdir -p "$build/oracle"
${CC:-cc} -std=c11 -O1 -I"$src/include" -I"$src/ggml/include" "$root/tests/oracle/llama-quantize.c" \
    -o "$harness" "$lib/libllama.v0.4.0.so" "$lib/libggml-base.so" -Wl,-rpath,"$lib"

dim=1024 ff=2816 layers=8 vocab=32000 rank=16
targets=attn_q,attn_k,attn_v,attn_output,ffn_gate,ffn_up,ffn_down
dims=(--ggml "$lib" --type f32 --dim "$dim" --ff "$ff" --layers "$layers" --vocab "$vocab")
[ -f "$work/base.gguf" ] || "$fix" "${dims[@]}" -o "$work/base.gguf"
[ -f "$work/lora.gguf" ] || "$fix" "${dims[@]}" --mode lora --targets "$targets" --rank $rank --alpha 32 \
    --adapter "$work/lora.gguf" -o "$work/lora-task-f32.gguf"
rm -f "$work/lora-task-f32.gguf"
bytes=$(stat -c %s "$work/base.gguf")
weights=$(PYTHONPATH="$root/tests/tools" python3 - "$work/base.gguf" <<'PY'
import sys
import gguf_header
h = gguf_header.read(sys.argv[1], limit=1 << 22)
print(sum(h.elements(ne) for _, ne, _, _ in h.tensors))
PY
)
cat "$work/base.gguf" "$work/lora.gguf" > /dev/null # page cache warm

# measure NAME COMMAND...: best wall time of $runs runs; CPU time and peak RSS of that run.
declare -A wall cpu rss
measure() {
    local name=$1 best="" line
    shift
    for _ in $(seq "$runs"); do
        rm -f "$work/out.gguf"
        /usr/bin/time -f '%e %U %S %M' -o "$work/time.txt" "$@" > /dev/null 2> "$work/err.txt" ||
            { cat "$work/err.txt" >&2; exit 1; }
        line=$(cat "$work/time.txt")
        if [ -z "$best" ] || awk -v a="${line%% *}" -v b="${best%% *}" 'BEGIN {exit !(a < b)}'; then
            best=$line
        fi
    done
    read -r w u s m <<< "$best"
    wall[$name]=$w cpu[$name]=$(awk -v u="$u" -v s="$s" 'BEGIN {printf "%.2f", u + s}') rss[$name]=$m
    printf '  %-32s %7.2f s wall (best of %d), %6.2f s CPU, peak RSS %6d KB\n' "$name" "$w" "$runs" "${cpu[$name]}" "$m"
}

echo "fold/quantize: F32 llama model, dim $dim, ff $ff, $layers layers, vocab $vocab: $weights weights, $bytes bytes;"
echo "  LoRA rank $rank on $targets of every layer; Q4_K_M; page cache warm, fsync included"
measure quantize "$tp" quantize -q "$work/base.gguf" "$work/out.gguf" Q4_K_M
cp "$work/out.gguf" "$work/base-q.gguf"
measure quantize_1thread "$tp" quantize -q -t 1 "$work/base.gguf" "$work/out.gguf" Q4_K_M
measure llama_model_quantize "$harness" "$work/base.gguf" "$work/out.gguf" 15
cmp -s "$work/out.gguf" "$work/base-q.gguf" || { echo "fold.sh: taskpatch quantize differs from llama_model_quantize" >&2; exit 1; }
measure fold "$tp" fold -q "$work/base.gguf" "$work/lora.gguf" "$work/out.gguf" Q4_K_M
measure fold_q4_0 "$tp" fold -q "$work/base.gguf" "$work/lora.gguf" "$work/out.gguf" Q4_0
rm -f "$work/out.gguf"

target=494032768 # Qwen2.5-0.5B's weights: a 0.5B-class model
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", a / b}'; }
scale() { awk -v t="$1" -v w="$weights" -v W="$target" 'BEGIN {printf "%.2f", t * W / w}'; }
echo "  quantize vs llama_model_quantize: $(ratio "${wall[llama_model_quantize]}" "${wall[quantize]}")x its speed (wall), \
$(ratio "${cpu[llama_model_quantize]}" "${cpu[quantize]}")x (CPU)"
echo "  extrapolated to $target weights (t x W / $weights): fold $(scale "${wall[fold]}") s, quantize \
$(scale "${wall[quantize]}") s; peak RSS stays ~${rss[fold]} KB"

conditions=$(python3 "$root/tests/bench/conditions.py" --path "$work" --page-cache warm \
    --flush "included (fsync of the output)")
python3 - "$build/bench/fold.json" "$conditions" <<PY
import json, sys
c = json.loads(sys.argv[2])
c.update({"runs": $runs, "timing": "wall time of the whole command, best of runs; CPU = user + sys of that run",
          "threads": "the online CPUs (taskpatch default; llama_model_quantize nthread 0)"})
wall = {k: float(v) for k, v in [$(for k in "${!wall[@]}"; do printf '("%s", "%s"), ' "$k" "${wall[$k]}"; done)]}
cpu = {k: float(v) for k, v in [$(for k in "${!cpu[@]}"; do printf '("%s", "%s"), ' "$k" "${cpu[$k]}"; done)]}
rss = {k: int(v) for k, v in [$(for k in "${!rss[@]}"; do printf '("%s", "%s"), ' "$k" "${rss[$k]}"; done)]}
w, W = $weights, $target
j = {
    "benchmark": "fold",
    "conditions": c,
    "model": {"arch": "llama", "type": "f32", "dim": $dim, "ff": $ff, "layers": $layers, "vocab": $vocab,
              "weights": w, "bytes": $bytes},
    "adapter": {"rank": $rank, "targets": "$targets", "output_type": "Q4_K_M"},
    "seconds": wall,
    "cpu_seconds": cpu,
    "peak_rss_kb": rss,
    "ratios": {"quantize_vs_llama_model_quantize": round(wall["llama_model_quantize"] / wall["quantize"], 3),
               "quantize_vs_llama_model_quantize_cpu": round(cpu["llama_model_quantize"] / cpu["quantize"], 3),
               "fold_vs_quantize": round(wall["fold"] / wall["quantize"], 3)},
    "extrapolation": {
        "target": "0.5B-class (Qwen2.5-0.5B: %d weights)" % W,
        "formula": "t(W) = t_measured * W / W_measured (one quantizer pass per weight, rank MACs per adapted weight); peak RSS constant",
        "fold_q4_k_m_s": round(wall["fold"] * W / w, 2),
        "quantize_q4_k_m_s": round(wall["quantize"] * W / w, 2),
        "fold_q4_k_m_cpu_s": round(cpu["fold"] * W / w, 2),
        "peak_rss_kb": rss["fold"],
    },
}
json.dump(j, open(sys.argv[1], "w"), indent=2)
open(sys.argv[1], "a").write("\n")
PY
echo "wrote $build/bench/fold.json"
if [ "${RECORD:-0}" = 1 ]; then
    cp "$build/bench/fold.json" "$root/tests/bench/results/fold.json"
    echo "recorded tests/bench/results/fold.json"
fi
