#!/bin/bash
# Random kills during a switch (DESIGN.md invariant 4): crash-points.sh kills at each write,
# rename and fsync; this kills at moments no list names, between and inside them.
#
# Usage: tests/crash/random-kill.sh BUILD_DIR [--quick]
#
# Measures T, the median time of a few switches from the sibling template (slot b holds json,
# switching to shout undoes it first), then for each round: a fresh sibling state, the daemon
# (no strace), `tpctl switch shout`, after a random delay in [0, 1.1 T] kill -9 the daemon,
# restart it and check as crash-points.sh does: model bytes are the old or the new model, the
# status agrees with them, no '.' temporary is left, state.json parses, a second restart
# changes nothing, the next switch works.
# The delays come from a seed, printed first: RANDOM_KILL_SEED=S RANDOM_KILL_SWITCH_MS=T
# replays a run (T: the measured switch time it printed). --quick: 25 rounds, else 200.
# One line per round: round, delay, how far the switch got (from the daemon's log: not
# started, staging, staged, activated, answered), outcome, model after the restart.
# A summary; exit 1 if any round ended bad. Artifacts: BUILD_DIR/random-kill/.
set -u
. "$(dirname "$0")/crash-lib.sh"
crash_init random-kill "$@"
ROUNDS=200
[ "$QUICK" -eq 1 ] && ROUNDS=25
SEED=${RANDOM_KILL_SEED:-$((${EPOCHREALTIME/./} % 1000000))}

make_templates || exit 1

# The switch time: median of 5, each from a fresh sibling state on a daemon just started.
if [ -n "${RANDOM_KILL_SWITCH_MS:-}" ]; then
    T_US=$((RANDOM_KILL_SWITCH_MS * 1000))
else
    times=()
    for _ in 1 2 3 4 5; do
        restore sibling
        dstart || exit 1
        t0=${EPOCHREALTIME/./}
        tpc switch shout > "$TMP/op.out" 2>&1 || { echo "switch failed when timing: $(cat "$TMP/op.out")"; exit 1; }
        times+=("$((${EPOCHREALTIME/./} - t0))")
        dstop
    done
    T_US=$(printf '%s\n' "${times[@]}" | sort -n | sed -n 3p)
    echo "random-kill: switch times (µs): ${times[*]}"
fi
echo "random-kill: seed $SEED, switch time T = $((T_US / 1000)) ms (replay: RANDOM_KILL_SEED=$SEED RANDOM_KILL_SWITCH_MS=$((T_US / 1000)))"

# All delays first, from the seed alone, so a replay gets the same ones.
RANDOM=$SEED
delays=()
for ((i = 0; i < ROUNDS; i++)); do
    delays+=("$(((RANDOM * 32768 + RANDOM) * (T_US * 11 / 10) / (1 << 30)))")
done

# progress LOG: how far the switch got before the kill, from the daemon's log.
progress() {
    if grep -q "^<5>activated:" "$1"; then echo activated
    elif grep -q "^<5>staged:" "$1"; then echo staged
    elif grep -q "switch started" "$1"; then echo staging
    else echo "not started"
    fi
}

# kill_round N DELAY_US: one round; appends its result line; returns 1 when bad.
kill_round() {
    local n=$1 d=$2 tp rc=0 got why=() model=
    restore sibling
    if ! dstart; then
        why+=("daemon did not start")
    else
        tpc switch shout > "$TMP/op.out" 2>&1 &
        tp=$!
        sleep "$(printf '%d.%06d' $((d / 1000000)) $((d % 1000000)))"
        kill -KILL "$SPID"
        wait "$tp" || rc=$?
        dwait 5 || why+=("taskpatchd outlived kill -9")
    fi
    got=$(progress "$TMP/daemon.log")
    [ "$rc" -eq 0 ] && got=answered
    PROGRESS[$got]=$((${PROGRESS[$got]:-0} + 1))
    recover
    record_point "$(printf '%5d %6d.%d ms  %-11s %-3s %s' "$n" $((d / 1000)) $((d % 1000 / 100)) "$got" \
        "$([ ${#why[@]} -eq 0 ] && echo ok || echo BAD)" "$model")" "round-$n"
}

declare -A PROGRESS
start=$SECONDS
bad=0
echo "random-kill: one line per round: round delay how-far outcome model-after-restart [| problems]"
for ((i = 0; i < ROUNDS; i++)); do
    kill_round "$((i + 1))" "${delays[$i]}" || bad=$((bad + 1))
done

echo
echo "random-kill summary ($([ "$QUICK" -eq 1 ] && echo quick || echo full), $((SECONDS - start)) s, seed $SEED, T = $((T_US / 1000)) ms):"
for p in "not started" staging staged activated answered; do
    printf '  killed %-12s %3d rounds\n' "$p:" "${PROGRESS[$p]:-0}"
done
echo "  total      $ROUNDS rounds, $bad bad (results: $RESULTS)"
# The suite's result line (tests/tally.sh): a round that ended bad is a failure.
echo "random-kill: $((ROUNDS - bad)) passed, $bad failed"
[ "$bad" -eq 0 ]
