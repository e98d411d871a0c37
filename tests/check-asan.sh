#!/bin/sh
# The unit and integration suites against the AddressSanitizer + UBSan build.
# Usage: tests/check-asan.sh BUILD_DIR; ends with "asan: N passed, N failed".
set -u
here=$(dirname "$0")
passed=0 failed=0
. "$here/tally.sh"
# Any sanitizer report aborts the process, which fails the test that ran it.
# Sub-makes (the install test) must build with the same flags.
export SANITIZE=1
export ASAN_OPTIONS=abort_on_error=1:detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

out=$("$here/unit/run.sh" "$1" asan-unit 2>&1); printf '%s\n' "$out"; tally "$out"
out=$("$here/integration/run.sh" "$1" asan-integration 2>&1); printf '%s\n' "$out"; tally "$out"
echo "asan: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
