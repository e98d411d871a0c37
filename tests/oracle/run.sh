#!/bin/sh
# Oracles: our output against the reference implementation's own, byte for byte.
#   1. quant-oracle: kernels/quant* against ggml_quantize_chunk of the pinned llama.cpp build
#      (tests/tools/npm-ggml.sh installs it), every type, every implementation this CPU runs.
#   2. tests/oracle/file-oracle.sh BUILD_DIR, when present (whole files against llama.cpp's tools).
# Usage: tests/oracle/run.sh BUILD_DIR; ends with one "N passed, M failed" line over both.
set -u
build=$1
here=$(dirname "$0")
passed=0 failed=0
. "$here/../tally.sh"

if lib=$(sh "$here/../tools/npm-ggml.sh" build/npm 2>&1); then
    out=$("$build/oracle/quant-oracle" "$lib" 2>&1)
else
    out="quant-oracle: cannot install ggml ('make deps'): $lib"
fi
printf '%s\n' "$out" | sed 's/^/  /'
tally "$out"

if [ -f "$here/file-oracle.sh" ]; then
    out=$(sh "$here/file-oracle.sh" "$build" 2>&1)
    printf '%s\n' "$out" | sed 's/^/  /'
    tally "$out"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
