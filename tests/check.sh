#!/bin/sh
# make check: run each part of the suite (make check-PART), keep going past failures,
# and end with one combined line "N passed, N failed"; exit non-zero on any failure.
# Usage: tests/check.sh PART...   (parts: lint unit integration asan arm ...)
set -u
MAKE=${MAKE:-make}
passed=0 failed=0
. "$(dirname "$0")/tally.sh"
summary=""
start=$(date +%s)

for part in "$@"; do
    echo "=== check-$part"
    part_start=$(date +%s)
    log=$(mktemp)
    { $MAKE --no-print-directory "check-$part" 2>&1; echo $? > "$log.rc"; } | tee "$log"
    before_p=$passed before_f=$failed
    tally "$(cat "$log")"
    # A part that failed while reporting no failures (e.g. a crash after its summary) still failed.
    if [ "$(cat "$log.rc")" -ne 0 ] && [ "$failed" -eq "$before_f" ]; then
        echo "check-$part exited $(cat "$log.rc"): counted as 1 failure"
        failed=$((failed + 1))
    fi
    rm -f "$log" "$log.rc"
    p=$((passed - before_p)) f=$((failed - before_f))
    summary="$summary$(printf '  %-12s %4d passed, %d failed  (%d s)' "$part" "$p" "$f" \
        $(($(date +%s) - part_start)))
"
done

echo
echo "=== summary ($(($(date +%s) - start)) s)"
printf '%s' "$summary"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
