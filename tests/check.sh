#!/bin/sh
# make check: run each part of the suite (make check-PART), keep going past failures,
# and end with one combined line "N passed, N failed"; exit non-zero on any failure.
# Usage: tests/check.sh PART...   (parts: lint unit integration asan arm ...)
# A PART of the form a,b+c,d runs two lanes at the same time, a then b beside c then d (the
# output is shown when all have ended, each part whole): for parts that leave a core idle
# (the daemon tests wait on sockets and timers, the crash tests on strace and restarts, qemu
# runs one core), on builds of their own (build/asan, build/arm64) or already made, so that
# no two makes write the same files. Lanes of about equal length keep both cores busy to the end.
set -u
MAKE=${MAKE:-make}
passed=0 failed=0
. "$(dirname "$0")/tally.sh"
summary=""
start=$(date +%s)
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

# run_part PART: make check-PART into $logs/PART (its exit code in .rc, its seconds in .s).
run_part() {
    _t0=$(date +%s)
    $MAKE --no-print-directory "check-$1" > "$logs/$1" 2>&1
    echo $? > "$logs/$1.rc"
    echo $(($(date +%s) - _t0)) > "$logs/$1.s"
}

# report PART [shown]: its output (unless already shown), its tally, its summary line.
report() {
    if [ -z "${2:-}" ]; then
        echo "=== check-$1"
        cat "$logs/$1"
    fi
    before_p=$passed before_f=$failed
    tally "$(cat "$logs/$1")"
    # A part that failed while reporting no failures (e.g. a crash after its summary) still failed.
    if [ "$(cat "$logs/$1.rc")" -ne 0 ] && [ "$failed" -eq "$before_f" ]; then
        echo "check-$1 exited $(cat "$logs/$1.rc"): counted as 1 failure"
        failed=$((failed + 1))
    fi
    p=$((passed - before_p)) f=$((failed - before_f))
    # The lines that name what failed, repeated before the summary: a CI log that keeps only
    # its head and tail still says which check it was.
    if [ "$f" -gt 0 ]; then
        grep -E '(^|[[:space:]])(FAIL|BAD)([[:space:]]|$)|:[FE]:' "$logs/$1" | head -n 20 > "$logs/named"
        [ -s "$logs/named" ] || echo "(no line names it: see check-$1 above)" > "$logs/named"
        sed "s/^/  [$1] /" "$logs/named" >> "$logs/failures"
    fi
    summary="$summary$(printf '  %-12s %4d passed, %d failed  (%d s)' "$1" "$p" "$f" "$(cat "$logs/$1.s")")
"
}

for group in "$@"; do
    case $group in
    *+*)
        echo "=== at the same time: $(echo "$group" | sed 's/,/ then /g; s/+/, beside /g')"
        for lane in $(echo "$group" | tr + ' '); do
            (for part in $(echo "$lane" | tr , ' '); do run_part "$part"; done) &
        done
        wait
        for part in $(echo "$group" | tr +, '  '); do report "$part"; done
        ;;
    *)
        # Alone: its output as it comes.
        echo "=== check-$group"
        _t0=$(date +%s)
        { $MAKE --no-print-directory "check-$group" 2>&1; echo $? > "$logs/$group.rc"; } | tee "$logs/$group.live"
        echo $(($(date +%s) - _t0)) > "$logs/$group.s"
        mv "$logs/$group.live" "$logs/$group"
        report "$group" shown
        ;;
    esac
done

if [ -s "$logs/failures" ]; then
    echo
    echo "=== what failed (at most 20 lines a part; the part's output above has the rest)"
    cat "$logs/failures"
fi
echo
echo "=== summary ($(($(date +%s) - start)) s)"
printf '%s' "$summary"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
