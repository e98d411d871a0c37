#!/bin/bash
# Crash-point enumeration with real SIGKILLs (DESIGN.md invariant 4).
#
# Usage: tests/crash/crash-points.sh BUILD_DIR [--quick]
#
# For each operation (provision, install, switch, rollback, mark-good):
#  1. count: run the operation once on a fresh state dir with taskpatchd under strace -f and
#     count, per syscall name, the calls the daemon's main thread makes during the operation
#     (lines after the set-up's log position, before the operation has settled);
#  2. for every (syscall, k): start taskpatchd under
#     `strace -f -e trace=SYSCALL -e inject=SYSCALL:signal=KILL:when=N` with N = the main
#     thread's count of SYSCALL before the operation + k (strace counts per traced task, i.e.
#     per thread: the hashing thread has its own counter), run the operation (tpctl loses the
#     connection), check from the injection log that the kill fired at the k-th call of the
#     operation, restart the daemon normally and check (a) model bytes are the old or the new
#     model, (b) status agrees with the bytes, (c) no '.' temporary is left, (d) state.json
#     parses, (e) a second restart changes nothing, (f) the next switch works.
# One result line per crash point; a summary; exit 1 if any point ended bad.
# --quick: at most 8 points per operation, spread evenly. Artifacts: BUILD_DIR/crash-points/.
# shellcheck disable=SC2034  # SOCK, MODEL, CONF, STATE are read by daemon-lib.sh
set -u
[ $# -ge 1 ] || { echo "usage: $0 BUILD_DIR [--quick]" >&2; exit 1; }
build=$(cd "$1" && pwd) || exit 1
quick=0
[ "${2:-}" = --quick ] && quick=1
BIN="$build/bin"
here=$(cd "$(dirname "$0")" && pwd)
command -v strace > /dev/null || { echo "strace is needed" >&2; exit 1; }
. "$here/../integration/lib.sh"
. "$here/../integration/daemon-lib.sh"

OUT="$build/crash-points"
rm -rf "$OUT"
mkdir -p "$OUT"
RESULTS="$OUT/results.txt"
: > "$RESULTS"
CHECK="$here/check-state.py"
SYSCALLS=write,pwrite64,pwritev,fsync,fdatasync,rename,renameat,renameat2,unlink,unlinkat,symlink,symlinkat,ftruncate,fallocate,copy_file_range
TPL="$TMP/templates"
SPID=      # strace (or the daemon itself when started without strace)
MAIN=      # the daemon's main thread id (= its pid)

cleanup() {
    if [ -n "$SPID" ]; then
        pkill -KILL -P "$SPID" 2> /dev/null
        kill -KILL "$SPID" 2> /dev/null
        sleep 0.2
    fi
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

tpc() { timeout 60 "$BIN/tpctl" --socket "$SOCK" --no-progress "$@"; }

# dstart [STRACE-ARGS...]: start taskpatchd (under strace when args are given), wait for the
# socket with exactly one successful status request (so start-up syscall counts are stable).
dstart() {
    rm -f "$SOCK"
    if [ $# -gt 0 ]; then
        strace -f -qq "$@" "$BIN/taskpatchd" --config "$CONF" >> "$TMP/daemon.log" 2>&1 &
    else
        "$BIN/taskpatchd" --config "$CONF" >> "$TMP/daemon.log" 2>&1 &
    fi
    SPID=$!
    disown "$SPID"      # no "Killed" job notices: strace dies of the SIGKILL it injects
    for _ in $(seq 400); do
        if [ -S "$SOCK" ] && "$BIN/tpctl" --socket "$SOCK" status > /dev/null 2>&1; then
            if [ $# -gt 0 ]; then MAIN=$(pgrep -P "$SPID" | head -n 1); else MAIN=$SPID; fi
            return 0
        fi
        kill -0 "$SPID" 2> /dev/null || break
        sleep 0.025
    done
    echo "taskpatchd did not come up:" >&2
    tail -n 5 "$TMP/daemon.log" >&2
    return 1
}

# dwait SECONDS: wait for the daemon (or its strace) to exit; 1 if it is still alive after.
dwait() {
    local i
    for ((i = 0; i < $1 * 20; i++)); do
        kill -0 "$SPID" 2> /dev/null || { SPID=; return 0; }
        sleep 0.05
    done
    return 1
}

dstop() {
    [ -n "$SPID" ] || return 0
    pkill -TERM -P "$SPID" 2> /dev/null
    kill -TERM "$SPID" 2> /dev/null
    dwait 10 || { pkill -KILL -P "$SPID" 2> /dev/null; kill -KILL "$SPID" 2> /dev/null; dwait 5; }
    SPID=
}

# settle: wait until no operation (e.g. a start-up scrub) runs; the status is left in $1.
settle() {
    for _ in $(seq 200); do
        tpc --json status > "$1" 2> /dev/null &&
            python3 -c 'import json,sys; sys.exit(json.load(open(sys.argv[1]))["operation"] is not None)' "$1" &&
            return 0
        sleep 0.05
    done
    return 1
}

# restore NAME: a fresh state dir from the template NAME (copied, seals re-pointed at the copies).
restore() {
    rm -rf "$STATE" "$TMP/daemon.log"
    cp -a "$TPL/$1" "$STATE"
    python3 "$CHECK" reseal "$STATE"
}

# count_in LOG FROM TO SYSCALL: lines of the main thread entering SYSCALL in LOG lines FROM+1..TO.
count_in() {
    [ "$3" -gt "$2" ] || { echo 0; return; }
    sed -n "$(($2 + 1)),$3p" "$1" | grep -c "^$MAIN  *$4("
}

# Per operation: its template, its set-up within the same daemon run, the operation.
template_of() { case $1 in provision) echo empty ;; install) echo provisioned ;; *) echo sibling ;; esac; }
setup_of() { case $1 in rollback | mark-good) tpc switch shout > /dev/null ;; *) return 0 ;; esac; }
run_op() {
    case $1 in
    provision) tpc provision "$TMP/base.gguf" ;;
    install) tpc install "$TMP/json.tpb" ;;
    switch) tpc switch shout ;;
    rollback) tpc rollback ;;
    mark-good) tpc mark-good ;;
    esac
}

# ---- fixtures and templates ----
echo "crash-points: fixtures and templates in $TMP"
make_gguf_fixtures > "$TMP/fixtures.log" 2>&1 || { echo "fixtures failed: $(tail -n 3 "$TMP/fixtures.log")"; exit 1; }
write_config "trial:
  timeout: 120"
mkdir -p "$TPL/empty"
rm -rf "$STATE"
dstart || exit 1
tpc provision "$TMP/base.gguf" > /dev/null || { echo "template: provision failed"; exit 1; }
dstop
cp -a "$STATE" "$TPL/provisioned"
dstart || exit 1
{ tpc install "$TMP/json.tpb" && tpc install "$TMP/shout.tpb" &&
    tpc switch json && tpc mark-good && tpc switch --base && tpc mark-good; } > /dev/null ||
    { echo "template: sibling set-up failed"; exit 1; }
dstop
cp -a "$STATE" "$TPL/sibling"
# The sibling template: slot a = base (active, committed), slot b = json: switching to shout
# must undo json in slot b first.
restore sibling
dstart || exit 1
settle "$TMP/st.json"
if [ "$(readlink "$MODEL")" != "$STATE/slots/a.gguf" ] || ! same "$TMP/base.gguf" ||
    grep -q "rebuilt\|verifying it in full" "$TMP/daemon.log"; then
    echo "template: the restored sibling state is not as expected:"
    cat "$TMP/daemon.log" "$TMP/st.json"
    exit 1
fi
dstop
# The checker must see a bad state: a planted temporary, model_path moved behind the status.
touch "$STATE/slots/.a.seal.XXXXXX"
ln -sfn "$STATE/slots/b.gguf" "$MODEL"
if python3 "$CHECK" check "$TMP/st.json" "$MODEL" "$STATE" "$TMP" > "$TMP/check.out" ||
    [ "$(grep -c "temporary left\|active.sha256\|active.task" "$TMP/check.out")" -ne 3 ]; then
    echo "the state checker missed a planted fault:"
    cat "$TMP/check.out"
    exit 1
fi

# ---- step 1: count each operation's calls ----
OPS=(provision install switch rollback mark-good)
declare -A START COUNT
echo "crash-points: counting the calls of each operation (strace -f)"
for op in "${OPS[@]}"; do
    restore "$(template_of "$op")"
    log="$OUT/count-$op.strace"
    dstart -o "$log" -e trace="$SYSCALLS" || exit 1
    setup_of "$op" || { echo "$op: set-up failed"; exit 1; }
    sleep 0.3
    from=$(wc -l < "$log")
    run_op "$op" > "$TMP/op.out" 2>&1 || { echo "$op failed when counting: $(cat "$TMP/op.out")"; exit 1; }
    sleep 0.5
    to=$(wc -l < "$log")
    dstop
    # Other threads (the hashing thread of an apply) count separately: say what they did.
    others=$(sed -n "$((from + 1)),${to}p" "$log" | grep -v "^$MAIN " | grep -v "resumed>" |
        sed -n 's/^\([0-9]*\)  *\([a-z0-9_]*\)(.*/\2/p' | sort | uniq -c | tr -s ' \n' ' ')
    line="$op:"
    for sc in ${SYSCALLS//,/ }; do
        n=$(count_in "$log" "$from" "$to" "$sc")
        [ "$n" -gt 0 ] || continue
        START[$op.$sc]=$(count_in "$log" 0 "$from" "$sc")
        COUNT[$op.$sc]=$n
        line+=" $sc=$n"
    done
    echo "  $line${others:+ (other threads: $others)}"
done

# ---- step 2: the crash points ----
# next_switch OP: the switch after recovery; prints the fixture its bytes must be.
next_switch() {
    local st=$1 want
    if [ "$(jget state < "$st")" = unprovisioned ]; then
        tpc provision "$TMP/base.gguf" > /dev/null || { echo "re-provision failed"; return 1; }
    fi
    tpc --json list > "$TMP/list.json" 2> /dev/null || { echo "list failed"; return 1; }
    case $(python3 -c 'import json,sys; print((json.load(open(sys.argv[1]))["active"] or {}).get("task"))' "$st") in
    shout) want=json ;;
    *) want=shout ;;
    esac
    if ! grep -q "\"task\": *\"$want\"" "$TMP/list.json"; then
        tpc install "$TMP/$want.tpb" > /dev/null || { echo "install $want failed"; return 1; }
    fi
    tpc switch "$want" > "$TMP/next.out" 2>&1 || { echo "next switch $want failed: $(tr '\n' ' ' < "$TMP/next.out")"; return 1; }
    same "$TMP/$want.gguf" || { echo "next switch $want: model_path is not $want.gguf"; return 1; }
    return 0
}

# crash_point OP SYSCALL K: one crash point; appends its result line; returns 1 when bad.
crash_point() {
    local op=$1 sc=$2 k=$3 n log from fired outcome="ok" why=() what model
    n=$((START[$op.$sc] + k))
    log="$TMP/inject.strace"
    restore "$(template_of "$op")"
    rm -f "$log"
    if ! dstart -o "$log" -e trace="$sc" -e inject="$sc:signal=KILL:when=$n"; then
        why+=("daemon did not start under injection")
    elif ! setup_of "$op"; then
        why+=("set-up failed (the kill fired before the operation?)")
    else
        sleep 0.2
        from=$(wc -l < "$log")
        run_op "$op" > "$TMP/op.out" 2>&1
        if ! dwait 20; then
            why+=("the injection did not kill the daemon")
            dstop
        fi
        if kill -0 "$MAIN" 2> /dev/null; then
            why+=("taskpatchd $MAIN outlived its strace")
            kill -KILL "$MAIN" 2> /dev/null
            sleep 0.2
        fi
        pre=$(count_in "$log" 0 "$from" "$sc")
        fired=$(count_in "$log" "$from" "$(wc -l < "$log")" "$sc")
        grep -q "killed by SIGKILL" "$log" || why+=("no SIGKILL in the strace log")
        [ "$pre" -eq "${START[$op.$sc]}" ] || why+=("start-up made $pre ${sc} calls, counted ${START[$op.$sc]}")
        [ "$fired" -eq "$k" ] || why+=("killed at the operation's ${sc} #$fired, meant #$k")
    fi
    SPID=
    what="$OUT/$op-$sc-$k"
    # Recovery: restart, check, restart again, compare, next switch.
    if dstart; then
        settle "$TMP/st1.json" || why+=("first restart: an operation did not settle")
        model=$(python3 "$CHECK" check "$TMP/st1.json" "$MODEL" "$STATE" "$TMP" > "$TMP/check.out"; head -n 1 "$TMP/check.out")
        while IFS= read -r l; do why+=("$l"); done < <(tail -n +2 "$TMP/check.out")
        cp -a "$STATE" "$TMP/after-restart" 2> /dev/null
        dstop
        if dstart; then
            settle "$TMP/st2.json" || why+=("second restart: an operation did not settle")
            while IFS= read -r l; do why+=("$l"); done < <(python3 "$CHECK" same "$TMP/st1.json" "$TMP/st2.json")
            [ "$(python3 "$CHECK" check "$TMP/st2.json" "$MODEL" "$STATE" "$TMP" | head -n 1)" = "$model" ] ||
                why+=("second restart changed the model bytes")
            r=$(next_switch "$TMP/st2.json") || why+=("$r")
            dstop
        else
            why+=("second restart failed")
        fi
    else
        why+=("restart after the crash failed: $(tail -n 1 "$TMP/daemon.log")")
    fi
    [ ${#why[@]} -eq 0 ] || outcome=BAD
    printf '%-10s %-16s %3d  %-3s %s%s\n' "$op" "$sc" "$k" "$outcome" "$model" \
        "$(for w in "${why[@]}"; do printf ' | %s' "$w"; done)" | tee -a "$RESULTS"
    if [ "$outcome" = BAD ]; then
        mkdir -p "$what"
        cp "$TMP/st1.json" "$TMP/st2.json" "$TMP/daemon.log" "$log" "$TMP/op.out" "$what/" 2> /dev/null
        (cd "$TMP/after-restart" 2> /dev/null && ls -laR) > "$what/listing.txt"
        sha256sum "$MODEL" > "$what/model.sha256" 2> /dev/null
        return 1
    fi
    return 0
}

declare -A NPTS BADN
start=$SECONDS
total=0
bad=0
echo "crash-points: one line per point: operation syscall k outcome model-after-restart [| problems]"
for op in "${OPS[@]}"; do
    points=()
    for sc in ${SYSCALLS//,/ }; do
        for ((k = 1; k <= ${COUNT[$op.$sc]:-0}; k++)); do points+=("$sc $k"); done
    done
    n=${#points[@]}
    picks=$(seq 0 $((n - 1)))
    if [ "$quick" -eq 1 ] && [ "$n" -gt 8 ]; then
        picks=$(for ((i = 0; i < 8; i++)); do echo $(((2 * i + 1) * n / 16)); done)
    fi
    NPTS[$op]=0
    BADN[$op]=0
    for i in $picks; do
        read -r sc k <<< "${points[$i]}"
        crash_point "$op" "$sc" "$k" || BADN[$op]=$((BADN[$op] + 1))
        NPTS[$op]=$((NPTS[$op] + 1))
    done
    total=$((total + NPTS[$op]))
    bad=$((bad + BADN[$op]))
done

echo
echo "crash-points summary ($([ "$quick" -eq 1 ] && echo quick || echo full), $((SECONDS - start)) s):"
for op in "${OPS[@]}"; do
    printf '  %-10s %3d points, %d bad\n' "$op" "${NPTS[$op]}" "${BADN[$op]}"
done
echo "  total      $total points, $bad bad (results: $RESULTS)"
# The suite's result line (tests/tally.sh): a point that ended bad is a failure.
echo "crash: $((total - bad)) passed, $bad failed"
[ "$bad" -eq 0 ]
