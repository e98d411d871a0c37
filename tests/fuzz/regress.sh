#!/bin/sh
# Run every libFuzzer target once over each input of its seed corpus (tests/fuzz/corpus/<name>/,
# <name> = the target without "fuzz_"). Ends with "fuzz: N passed, N failed".
# Usage: tests/fuzz/regress.sh BUILD_DIR
set -u
build=$1
here=$(dirname "$0")
passed=0 failed=0
for f in "$build"/fuzz/fuzz_*; do
    [ -x "$f" ] || continue
    name=$(basename "$f"); corpus="$here/corpus/${name#fuzz_}"
    if [ ! -d "$corpus" ] || [ -z "$(ls -A "$corpus")" ]; then
        echo "  FAIL $name: no seed corpus in $corpus"; failed=$((failed + 1)); continue
    fi
    n=$(find "$corpus" -type f | wc -l)
    if out=$("$f" "$corpus"/* 2>&1); then
        echo "  ok   $name: $n corpus inputs"; passed=$((passed + 1))
    else
        printf '%s\n' "$out" | tail -n 30
        echo "  FAIL $name"; failed=$((failed + 1))
    fi
done
echo "fuzz: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
