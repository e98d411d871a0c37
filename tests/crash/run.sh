#!/bin/sh
# The crash tests (make check-crash, make check-crash-full): kills at each write, rename and
# fsync (crash-points.sh), EIO and ENOSPC at each of them (error-points.sh), kills at random
# moments of a switch (random-kill.sh); the first two again on a directory model (CRASH_MODEL=dir).
# --quick (make check-crash) samples each operation's points; check-crash-full runs them all.
# Usage: tests/crash/run.sh BUILD_DIR [--quick]; ends with "crash: N passed, N failed".
set -u
here=$(dirname "$0")
passed=0 failed=0
. "$here/../tally.sh"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# A bound on each script, so that a hang fails the suite instead of stalling it (and CI).
limit=3600
[ "${2:-}" = --quick ] && limit=900
start=$(date +%s)
# The same kills and errors on a model of several files (directory slots): CRASH_MODEL=dir.
# --quick samples points per operation (QUICK_POINTS): 8 kills; 4 errors of each errno; on the
# directory model, whose operations differ from a file's in fewer places, half of each.
for t in crash-points:8 error-points:4 random-kill:0 dir:crash-points:4 dir:error-points:2; do
    t0=$(date +%s)
    model="file"
    case $t in dir:*) model=dir t=${t#dir:} ;; esac
    points=${t#*:} t=${t%%:*}
    CRASH_MODEL=$model QUICK_POINTS=$points timeout -k 10 "$limit" bash "$here/$t.sh" "$@" 2>&1 | tee "$log"
    echo "($t, $model model: $(($(date +%s) - t0)) s)"
    tally "$(cat "$log")"
done
echo "crash tests: $(($(date +%s) - start)) s"
echo "crash: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
