#!/bin/bash
# Failed writes, renames and fsyncs (DESIGN.md invariant 4, the error half): each call that
# crash-points.sh kills at fails instead, once, with EIO and then with ENOSPC.
#
# Usage: tests/crash/error-points.sh BUILD_DIR [--quick]
#
# The calls of each operation are counted as in crash-points.sh. For every (syscall, k) and
# errno: start taskpatchd under `strace -f -yy -e trace=SYSCALL
# -e inject=SYSCALL:error=ERRNO:when=N` (N as in crash-points.sh: one failure, at the
# operation's k-th call), run the operation, and on the daemon still running check:
#  - it is alive, and the log says the injection hit the k-th call (and on which file);
#  - the operation succeeded, or tpctl exited non-zero with a message that names the errno
#    and what failed (a path or a slot) -- unless the failed call was the answer on the client
#    socket (sendto, counted here too), when tpctl can only say it lost the answer;
#  - model_path holds the new model if it succeeded, else the old or the new one, and the
#    status agrees with the bytes; no '.' temporary is left; state.json parses;
# then stop it normally and restart: the state is as it was (a trial is rolled back), a
# second restart changes nothing, the next switch works.
# One result line per point; a summary; exit 1 if any point ended bad.
# --quick: at most QUICK_POINTS (default 8) points per operation and errno, spread evenly (EIO and ENOSPC at
# different points). Artifacts: BUILD_DIR/error-points/.
# CRASH_OPS="switch rollback" runs only those operations (to replay a failure).
set -u
. "$(dirname "$0")/crash-lib.sh"
crash_init error-points "$@"
ERRNOS=(EIO ENOSPC)
# The answers too (send(2) on the client's socket): an operation whose reply is lost must still
# leave a consistent state. A kill there is no different from a kill after it: crash-points.sh
# does not count them.
SYSCALLS+=,sendto
declare -A STRERROR=([EIO]="Input/output error" [ENOSPC]="No space left on device") QUARTER=([EIO]=1 [ENOSPC]=3)

make_templates || exit 1
count_ops || exit 1

# error_point OP SYSCALL K ERRNO: one point; appends its result line; returns 1 when bad.
# OP_FAILED=1 when tpctl said the operation failed.
# The injection counts the calls from the daemon's start, so the set-up must make as many as it
# made when counted, and the operation reach its k-th call; a switch streams one or two progress
# events (sendto) as its first slice ends the staging or not: on another count the point runs
# again (three tries).
error_point() { with_tries error_attempt "$@"; }

# error_attempt OP SYSCALL K ERRNO TRY: error_point's one try; 2: the start-up's count differed, and
# TRY < 3 (nothing recorded).
error_attempt() {
    local op=$1 sc=$2 k=$3 e=$4 log=$TMP/inject.strace from rc=0 msg fired=missed on="?" old new why=() model=
    local live="" said="" n=$((START[$op.$sc] + $3))
    OP_FAILED=0
    read -r old new <<< "$(models_of "$op")"
    restore "$(template_of "$op")"
    rm -f "$log" "$TMP"/st*.json
    if ! dstart -o "$log" -yy -e trace="$sc" -e inject="$sc:error=$e:when=$n"; then
        why+=("daemon did not start under injection")
    elif ! setup_of "$op"; then
        why+=("set-up failed (the error hit before the operation?)")
        dstop
    else
        sleep 0.2
        from=$(wc -l < "$log")
        run_op "$op" > "$TMP/op.out" 2>&1 || rc=$?
        [ "$rc" -eq 0 ] || OP_FAILED=1
        msg=$(tr '\n' ' ' < "$TMP/op.out" | sed 's/ *$//')
        settle "$TMP/st0.json" || why+=("the operation did not settle after the error")
        kill -0 "$MAIN" 2> /dev/null || why+=("taskpatchd died: $(tail -n 1 "$TMP/daemon.log")")
        { read -r fired; read -r on; } <<< "$("$PY" "$CHECK" injected "$log" "$MAIN" "$sc" "$from" "$k" "$TMP")"
        # The calls before the operation, and (when the error missed) during it, against the count.
        local made_before made_during=""
        made_before=$(count_in "$log" 0 "$from" "$sc")
        [ "$fired" = fired ] || made_during=$(count_in "$log" "$from" "$(wc -l < "$log")" "$sc")
        if [ "$made_before" -ne "${START[$op.$sc]}" ] || [ "${made_during:-$k}" -lt "$k" ]; then
            if [ "$5" -lt 3 ]; then
                echo "  ($op $sc #$k $e: $made_before $sc calls before the operation${made_during:+, $made_during in it};" \
                    "counted ${START[$op.$sc]}, ${COUNT[$op.$sc]}: again)"
                dstop
                return 2
            fi
            [ "$made_before" -eq "${START[$op.$sc]}" ] ||
                why+=("start-up made $made_before $sc calls, counted ${START[$op.$sc]}")
        fi
        [ "$fired" = fired ] || why+=("no $e at the operation's $sc #$k ($on)")
        # What the user was told.
        if [ "$rc" -eq 0 ]; then
            said="succeeded"
        elif [ -z "$msg" ]; then
            why+=("tpctl exited $rc without a message")
        elif [ "$on" = "a client socket" ]; then
            said="reply lost: $msg"
        else
            said="failed: $msg"
            case $msg in *"${STRERROR[$e]}"*) ;; *) why+=("the message does not say '${STRERROR[$e]}'") ;; esac
            case $msg in */* | *slot*) ;; *) why+=("the message names no file or slot") ;; esac
        fi
        # The state on the daemon still running.
        check_state "$TMP/st0.json"
        live=$model
        if [ "$rc" -eq 0 ] && [ "$model" != "model=$new" ]; then
            why+=("$op succeeded but model_path holds ${model#model=}, not $new")
        elif [ "$rc" -eq 0 ] && [ "$op" = install ] && ! grep -q '"task": *"json"' "$TMP/st0.json"; then
            why+=("install succeeded but the status lists no json")
        elif [ "$model" != "model=$old" ] && [ "$model" != "model=$new" ]; then
            why+=("model_path holds ${model#model=}: neither the old ($old) nor the new ($new) model")
        fi
        dstop
    fi
    recover
    [ -e "$TMP/st0.json" ] && [ -e "$TMP/st1.json" ] && add_why "$PY" "$CHECK" restarted "$TMP/st0.json" "$TMP/st1.json"
    # The model: on the daemon that saw the error, and after the restart when that differs.
    [ "${model#model=}" = "${live#model=}" ] || live+="->${model#model=}"
    record_point "$(printf '%-10s %-16s %3d %-6s %-3s %-17s on %s: %s' "$op" "$sc" "$k" "$e" \
        "$([ ${#why[@]} -eq 0 ] && echo ok || echo BAD)" "$live" "$on" "${said//$TMP\//}")" "$op-$sc-$k-$e"
}

declare -A NPTS BADN FAILED
start=$SECONDS
total=0
bad=0
echo "error-points: one line per point: operation syscall k errno outcome model (->after the restart)," \
    "the file of the failed call: what tpctl said [| problems]"
for op in "${OPS[@]}"; do
    for e in "${ERRNOS[@]}"; do
        NPTS[$op.$e]=0 BADN[$op.$e]=0 FAILED[$op.$e]=0
        mapfile -t points <<< "$(points_of "$op" "${QUARTER[$e]}")"
        for p in "${points[@]}"; do
            [ -n "$p" ] || continue
            read -r sc k <<< "$p"
            error_point "$op" "$sc" "$k" "$e" || BADN[$op.$e]=$((BADN[$op.$e] + 1))
            FAILED[$op.$e]=$((FAILED[$op.$e] + OP_FAILED))
            NPTS[$op.$e]=$((NPTS[$op.$e] + 1))
        done
        total=$((total + NPTS[$op.$e]))
        bad=$((bad + BADN[$op.$e]))
    done
done

echo
echo "error-points summary ($([ "$QUICK" -eq 1 ] && echo quick || echo full), $((SECONDS - start)) s):"
for op in "${OPS[@]}"; do
    for e in "${ERRNOS[@]}"; do
        printf '  %-10s %-6s %3d points (%d failed, %d succeeded), %d bad\n' "$op" "$e" "${NPTS[$op.$e]}" \
            "${FAILED[$op.$e]}" "$((NPTS[$op.$e] - FAILED[$op.$e]))" "${BADN[$op.$e]}"
    done
done
echo "  total      $total points, $bad bad (results: $RESULTS)"
# The suite's result line (tests/tally.sh): a point that ended bad is a failure.
echo "error-points: $((total - bad)) passed, $bad failed"
[ "$bad" -eq 0 ]
