#!/bin/sh
# Quantizer throughput: our quantize_rows() (the best implementation this CPU runs, and the
# generic one) against ggml's ggml_quantize_chunk from the pinned llama.cpp build, then the
# K-quants with an importance row (quantize_rows_weighted, "-imatrix"), same rows,
# same run, interleaved repetitions (best of REPS); MB/s of float input; ratio = ours / ggml.
# Every repetition also checks the bytes are ggml's (same_bytes).
# Prints a table; writes BUILD/bench/quant.json (and tests/bench/results/quant.json with RECORD=1).
# Usage: tests/bench/quant.sh BUILD_DIR [REPS]
set -eu
build=$1
reps=${2:-7}
here=$(dirname "$0")

lib=$(sh "$here/../tools/npm-ggml.sh" build/npm)
mkdir -p "$build/bench"
cases="$build/bench/quant-cases.jsonl"
"$build/bench/bench-quant" "$lib" "$reps" > "$cases"
conditions=$(python3 "$here/conditions.py" --note "single thread; MB/s = 4-byte floats in per second, best of $reps")

python3 - "$cases" "$build/bench/quant.json" "$conditions" <<'PY'
import json, sys
cases = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
out = {
    "benchmark": "quant",
    "conditions": json.loads(sys.argv[3]),
    "what": "quantize_rows (kernels/quant*) vs ggml_quantize_chunk (libggml-base.so, node-llama-cpp 3.21.1), "
            "weights-like rows (about N(0, 0.02), Irwin-Hall, rare 40x outliers) of 4096 floats; ratio = our MB/s / ggml's; "
            "'-imatrix': quantize_rows_weighted vs ggml_quantize_chunk given one skewed importance row",
    "cases": cases,
}
json.dump(out, open(sys.argv[2], "w"), indent=2)
impls = sorted({k for c in cases for k in c["impls"]}, key=lambda k: k == "generic")
print("%-13s %10s" % ("type", "ggml MB/s") + "".join(" %10s" % (k + " MB/s") for k in impls)
      + "  best/ggml  generic/ggml  same bytes")
for c in cases:
    print("%-13s %10.1f" % (c["type"], c["ggml_mbps"]) + "".join(" %10.1f" % c["impls"][k] for k in impls)
          + "  %8.2fx  %11.2fx  %s" % (c["ratio_best"], c["ratio_generic"], "yes" if c["same_bytes"] else "NO"))
bad = [c["type"] for c in cases if not c["same_bytes"]]
if bad:
    print("quant.sh: output differs from ggml for " + ", ".join(bad), file=sys.stderr)
    sys.exit(1)
PY
if [ "${RECORD:-0}" = 1 ]; then
    cp "$build/bench/quant.json" "$here/results/quant.json"
    echo "recorded tests/bench/results/quant.json"
fi
