#!/bin/sh
# Build llama.cpp's own llama-export-lora, the tool that merges a LoRA adapter into a model:
# tools/export-lora/export-lora.cpp of the pinned source (node-llama-cpp@3.21.1,
# tests/tools/npm-llama-src.sh), compiled here against the pinned prebuilt libraries
# (tests/tools/npm-ggml.sh: libllama, libllama-common, libggml). The CPU backend, which ggml
# otherwise loads as a plugin, is linked in directly: its baseline build (libggml-cpu-x64.so;
# elsewhere the first libggml-cpu-*.so found). Nothing of it is part of the product: tests and
# benchmarks run it to make task models the way llama.cpp users make them.
#
# Usage: tests/tools/build-export-lora.sh OUT    builds OUT unless it is newer than the source;
#        prints OUT. Needs a C++ compiler (build-essential).
set -eu
out=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
lib=$(sh "$root/tests/tools/npm-ggml.sh" "$root/build/npm")
src=$(sh "$root/tests/tools/npm-llama-src.sh" "$root/build/llama-src")
tool=$src/tools/export-lora/export-lora.cpp
if [ -x "$out" ] && [ -z "$(find "$tool" -newer "$out")" ]; then
    echo "$out"
    exit 0
fi
cpu=$lib/libggml-cpu-x64.so
[ -e "$cpu" ] || cpu=$(ls "$lib"/libggml-cpu-*.so | head -n 1)
mkdir -p "$(dirname "$out")"
${CXX:-c++} -std=c++17 -O1 -I"$src/ggml/include" -I"$src/common" -I"$src/include" -I"$src/vendor" "$tool" \
    -o "$out.tmp" "$lib/libllama-common.so" "$lib/libllama.v0.4.0.so" "$lib/libggml.v0.4.0.so" \
    "$lib/libggml-base.so" "$cpu" -Wl,-rpath,"$lib"
mv "$out.tmp" "$out"
echo "$out"
