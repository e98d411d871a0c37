# shellcheck shell=bash
# Sourced by tests/integration/test-*.sh. Provides assertions, a scratch dir and the summary line.
# The runner sets BIN (the binaries under test) and may set WRAP (e.g. an emulator command).
: "${BIN:?BIN must name the directory of the binaries under test}"
WRAP=${WRAP:-}
PASS=0
FAIL=0
TMP=$(mktemp -d "${TMPDIR:-/tmp}/taskpatch-test.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

ok() { PASS=$((PASS + 1)); echo "  ok   $*"; }
fail() { FAIL=$((FAIL + 1)); echo "  FAIL $*"; }

# check DESCRIPTION COMMAND...: passes when COMMAND exits 0.
check() {
    desc=$1
    shift
    if "$@"; then ok "$desc"; else fail "$desc"; fi
}

# check_is DESCRIPTION WANT GOT: passes when GOT is WANT; a failure says what it got.
check_is() {
    if [ "$3" = "$2" ]; then ok "$1"; else fail "$1: wanted '$2', got '$3'"; fi
}

# needed_libs FILE: the shared libraries FILE's dynamic section names (DT_NEEDED), space-separated.
needed_libs() {
    readelf -d "$1" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p' | tr '\n' ' ' | sed 's/ $//'
}

# run the binary NAME with ARGS, under WRAP when set.
tp() { $WRAP "$BIN/taskpatch" "$@"; }

# wait_until SECONDS COMMAND...: poll COMMAND until it exits 0 (then 0), or SECONDS pass (then 1).
# What a test waits for, it polls for with a deadline: it never sleeps and hopes.
wait_until() {
    local end=$((SECONDS + $1))
    shift
    until "$@"; do
        [ "$SECONDS" -lt "$end" ] || return 1
        sleep 0.05
    done
}

finish() {
    echo "$PASS passed, $FAIL failed"
    [ "$FAIL" -eq 0 ]
}

# Every kernel name this CPU can run, from 'taskpatch caps' ("(built: a b[unsupported] c)").
runnable_kernels() {
    tp caps | sed -n 's/.*(built: \(.*\))$/\1/p' | tr ' ' '\n' | grep -v '\[unsupported\]' | sort -u
}
