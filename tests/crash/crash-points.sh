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
# --quick: at most QUICK_POINTS (default 8) points per operation, spread evenly. Artifacts:
# BUILD_DIR/crash-points/.
# CRASH_OPS="switch rollback" runs only those operations (to replay a failure).
set -u
. "$(dirname "$0")/crash-lib.sh"
crash_init crash-points "$@"

make_templates || exit 1
count_ops || exit 1

# crash_point OP SYSCALL K: one crash point; appends its result line; returns 1 when bad.
# The injection counts the calls from the daemon's start, so the set-up must make as many as it
# made when counted (a log line or a timer may add one on a loaded machine): on another count the
# point runs again, as in error-points.sh (three tries).
crash_point() { with_tries crash_attempt "$@"; }

# crash_attempt OP SYSCALL K TRY: crash_point's one try; 2: the start-up's count differed, and
# TRY < 3 (nothing recorded).
crash_attempt() {
    local op=$1 sc=$2 k=$3 n log=$TMP/inject.strace from pre fired why=() miscount='' model=
    n=$((START[$op.$sc] + k))
    restore "$(template_of "$op")"
    rm -f "$log"
    if ! dstart -o "$log" -e trace="$sc" -e inject="$sc:signal=KILL:when=$n"; then
        why+=("daemon did not start under injection")
    elif ! setup_of "$op"; then
        miscount="set-up failed (the kill fired before the operation?)"
    else
        sleep 0.2
        from=$(wc -l < "$log")
        run_op "$op" > "$TMP/op.out" 2>&1
        # What went wrong with the injection itself: the start-up's count explains it when that differed.
        local missed=()
        if ! dwait 20; then
            missed+=("the injection did not kill the daemon")
            dstop
        fi
        if kill -0 "$MAIN" 2> /dev/null; then
            missed+=("taskpatchd $MAIN outlived its strace")
            kill -KILL "$MAIN" 2> /dev/null
            sleep 0.2
        fi
        pre=$(count_in "$log" 0 "$from" "$sc")
        fired=$(count_in "$log" "$from" "$(wc -l < "$log")" "$sc")
        grep -q "killed by SIGKILL" "$log" || missed+=("no SIGKILL in the strace log")
        [ "$fired" -eq "$k" ] || missed+=("killed at the operation's ${sc} #$fired, meant #$k")
        if [ "$pre" -ne "${START[$op.$sc]}" ]; then
            miscount="start-up made $pre ${sc} calls, counted ${START[$op.$sc]}"
        else
            why+=("${missed[@]}")
        fi
    fi
    recover
    # Wherever the kill landed, the invariants held (recover found nothing): only the count was off.
    if [ -n "$miscount" ] && [ "$4" -lt 3 ] && [ ${#why[@]} -eq 0 ]; then
        echo "  ($op $sc #$k: $miscount: again)"
        return 2
    fi
    [ -z "$miscount" ] || why+=("$miscount")
    record_point "$(printf '%-10s %-16s %3d  %-3s %s' "$op" "$sc" "$k" "$([ ${#why[@]} -eq 0 ] && echo ok || echo BAD)" \
        "$model")" "$op-$sc-$k"
}

declare -A NPTS BADN
start=$SECONDS
total=0
bad=0
echo "crash-points: one line per point: operation syscall k outcome model-after-restart [| problems]"
for op in "${OPS[@]}"; do
    NPTS[$op]=0
    BADN[$op]=0
    mapfile -t points <<< "$(points_of "$op")"
    for p in "${points[@]}"; do
        [ -n "$p" ] || continue
        read -r sc k <<< "$p"
        crash_point "$op" "$sc" "$k" || BADN[$op]=$((BADN[$op] + 1))
        NPTS[$op]=$((NPTS[$op] + 1))
    done
    total=$((total + NPTS[$op]))
    bad=$((bad + BADN[$op]))
done

echo
echo "crash-points summary ($([ "$QUICK" -eq 1 ] && echo quick || echo full), $((SECONDS - start)) s):"
for op in "${OPS[@]}"; do
    printf '  %-10s %3d points, %d bad\n' "$op" "${NPTS[$op]}" "${BADN[$op]}"
done
echo "  total      $total points, $bad bad (results: $RESULTS)"
# The suite's result line (tests/tally.sh): a point that ended bad is a failure.
echo "crash-points: $((total - bad)) passed, $bad failed"
[ "$bad" -eq 0 ]
