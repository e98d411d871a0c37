#!/bin/sh
# Run every integration test (tests/integration/test-*.sh) against the binaries of a build.
# Usage: tests/integration/run.sh BUILD_DIR [LABEL]; ends with "LABEL: N passed, N failed".
set -u
build=$1
label=${2:-integration}
here=$(dirname "$0")
BIN=$(cd "$build/bin" && pwd) || exit 1
export BIN

passed=0 failed=0
for t in "$here"/test-*.sh; do
    case $t in *-arm-*) continue ;; esac  # run by tests/check-arm.sh under qemu
    name=$(basename "$t" .sh)
    t0=$(date +%s)
    out=$(bash "$t" 2>&1)
    rc=$?
    printf '%s\n' "$out" | sed "s|^|  [$label/$name] |"
    echo "  [$label/$name] ($(($(date +%s) - t0)) s)"
    last=$(printf '%s\n' "$out" | tail -n 1)
    p=$(echo "$last" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\1/p')
    f=$(echo "$last" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\2/p')
    if [ -z "$p" ]; then
        echo "  [$label/$name] FAIL: ended without a summary (exit $rc)"
        p=0 f=1
    elif [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        f=1
    fi
    passed=$((passed + p))
    failed=$((failed + f))
done
echo "$label: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
