#!/bin/sh
# Run every Check unit-test binary of a build; end with "unit: N passed, N failed".
# Usage: tests/unit/run.sh BUILD_DIR [LABEL] [WRAPPER...]
#   WRAPPER (e.g. "qemu-aarch64 -cpu max") runs each binary under it.
set -u
build=$1
label=${2:-unit}
[ $# -ge 2 ] && shift 2 || shift $#

passed=0 failed=0
for t in "$build"/tests/check_*; do
    [ -x "$t" ] || continue
    out=$("$@" "$t" 2>&1)
    rc=$?
    printf '%s\n' "$out" | sed "s|^|  [$label] |"
    # Check's summary: "100%: Checks: 12, Failures: 0, Errors: 0"
    summary=$(printf '%s\n' "$out" | sed -n 's/.*Checks: \([0-9]*\), Failures: \([0-9]*\), Errors: \([0-9]*\).*/\1 \2 \3/p' | tail -n 1)
    if [ -z "$summary" ]; then
        echo "  [$label] FAIL $(basename "$t"): no Check summary (exit $rc)"
        failed=$((failed + 1))
        continue
    fi
    n=$(echo "$summary" | cut -d' ' -f1)
    f=$(echo "$summary" | cut -d' ' -f2)
    e=$(echo "$summary" | cut -d' ' -f3)
    bad=$((f + e))
    if [ "$rc" -ne 0 ] && [ "$bad" -eq 0 ]; then
        bad=1
    fi
    passed=$((passed + n - f - e))
    failed=$((failed + bad))
done

if [ $((passed + failed)) -eq 0 ]; then
    echo "  [$label] no unit tests found in $build/tests"
    failed=1
fi
echo "$label: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
