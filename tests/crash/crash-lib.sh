# shellcheck shell=bash
# Sourced by the crash tests (crash-points.sh, error-points.sh, random-kill.sh): the daemon
# under strace or not, the fixture states they start from, each operation and its calls, and
# the checks a state must pass after a crash or a failed call (DESIGN.md invariant 4).
# shellcheck disable=SC2034  # SOCK, MODEL, CONF, STATE are read by daemon-lib.sh

CRASH_LIB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CHECK="$CRASH_LIB/check-state.py"
# The interpreter itself: a version manager's shim (pyenv) costs ~0.1 s a call, and each point
# makes a dozen.
PY=$(python3 -c 'import sys; print(sys.executable)')
SYSCALLS=write,pwrite64,pwritev,fsync,fdatasync,rename,renameat,renameat2,unlink,unlinkat,symlink,symlinkat,ftruncate,fallocate,copy_file_range
# CRASH_MODEL=dir: the same operations on a model of several files (each fixture split into a
# three-way split GGUF, its bundles made from the directories): slots are directories, model_path
# links to one, a fresh copy or a build is a directory swapped in by RENAME_EXCHANGE.
DIRMODE=0
[ "${CRASH_MODEL:-file}" = dir ] && DIRMODE=1
# CRASH_OPS (e.g. "switch rollback") narrows a run to some operations, to replay a failure.
# relocate: a switch to a relocating bundle (built into a fresh file); leave: a switch away from
# a slot that holds one (built from that slot's base bytes); rebase: a switch to a new base (a
# base bundle: json2 is the new base, rebase.tpb the delta to it); rebase-commit: its commit,
# which changes the base, and the background re-provisioning of the other slot after it.
read -ra OPS <<< "${CRASH_OPS:-provision install switch relocate leave rollback mark-good rebase rebase-commit}"
SPID=      # strace (or the daemon itself when started without strace)
MAIN=      # the daemon's main thread id (= its pid)
declare -A START COUNT  # per "op.syscall": the main thread's calls before the operation, during it

# crash_init NAME BUILD_DIR [--quick]: read the arguments (QUICK=1 for --quick), source the
# integration helpers, make BUILD_DIR/NAME/ for the artifacts ($OUT, results in $RESULTS).
crash_init() {
    local name=$1
    shift
    [ $# -ge 1 ] || { echo "usage: $0 BUILD_DIR [--quick]" >&2; exit 1; }
    BUILD_DIR=$(cd "$1" && pwd) || exit 1
    QUICK=0
    [ "${2:-}" = --quick ] && QUICK=1
    BIN="$BUILD_DIR/bin"
    command -v strace > /dev/null || { echo "strace is needed" >&2; exit 1; }
    . "$CRASH_LIB/../integration/lib.sh"
    . "$CRASH_LIB/../integration/daemon-lib.sh"
    if [ "$DIRMODE" = 1 ]; then
        name+=-dir
        MODEL="$STATE/llm"
        same() { diff -r "$MODEL/" "$1/" > /dev/null 2>&1; }
    fi
    TPL="$TMP/templates"
    OUT="$BUILD_DIR/$name"
    rm -rf "$OUT"
    mkdir -p "$OUT"
    RESULTS="$OUT/results.txt"
    : > "$RESULTS"
    trap crash_cleanup EXIT
    trap 'exit 130' INT TERM
}

crash_cleanup() {
    if [ -n "$SPID" ]; then
        pkill -KILL -P "$SPID" 2> /dev/null
        kill -KILL "$SPID" 2> /dev/null
        sleep 0.2
    fi
    rm -rf "$TMP"
}

tpc() { timeout 60 "$BIN/tpctl" --socket "$SOCK" --no-progress "$@"; }

# dstart [STRACE-ARGS...]: start taskpatchd (under strace when args are given), wait for the
# socket with exactly one successful status request (so start-up syscall counts are stable).
# Its stdin is /dev/null: not the pipe of a loop it would outlive.
dstart() {
    rm -f "$SOCK"
    if [ $# -gt 0 ]; then
        strace -f -qq "$@" "$BIN/taskpatchd" --config "$CONF" < /dev/null >> "$TMP/daemon.log" 2>&1 &
    else
        "$BIN/taskpatchd" --config "$CONF" < /dev/null >> "$TMP/daemon.log" 2>&1 &
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

# settle FILE [due]: wait until no operation (e.g. a start-up scrub) runs; with "due", also until
# none is due (a base change's re-provisioning, which a start begins once the daemon is idle).
# The status is left in FILE.
settle() {
    for _ in $(seq 200); do
        tpc --json status > "$1" 2> /dev/null && grep -Eq '"operation": ?null' "$1" &&
            { [ "${2:-}" != due ] || ! grep -Eq '"reprovision": ?true' "$1"; } && return 0
        sleep 0.05
    done
    return 1
}

# restore NAME: a fresh state dir from the template NAME (copied, seals re-pointed at the copies).
restore() {
    rm -rf "$STATE" "$TMP/daemon.log"
    cp -a "$TPL/$1" "$STATE"
    "$PY" "$CHECK" reseal "$STATE"
}

# count_in LOG FROM TO SYSCALL: lines of the main thread entering SYSCALL in LOG lines FROM+1..TO.
count_in() {
    [ "$3" -gt "$2" ] || { echo 0; return; }
    sed -n "$(($2 + 1)),$3p" "$1" | grep -c "^$MAIN  *$4("
}

# fixture NAME: the fixture model NAME (base, json, shout, grow): its file, or its directory.
fixture() { if [ "$DIRMODE" = 1 ]; then echo "$TMP/$1.d"; else echo "$TMP/$1.gguf"; fi; }
# slot_path ID: slot ID's file or directory.
slot_path() { if [ "$DIRMODE" = 1 ]; then echo "$STATE/slots/$1.dir"; else echo "$STATE/slots/$1.gguf"; fi; }

# make_dir_fixtures: each fixture as a three-way split GGUF directory, and the bundles again,
# made from the directories under the same names.
make_dir_fixtures() {
    local n
    for n in base json shout grow; do
        python3 "$CRASH_LIB/../tools/gguf-split.py" --shards 3 --prefix llm "$TMP/$n.gguf" "$TMP/$n.d" > /dev/null || return 1
    done
    for n in json shout grow; do
        "$BIN/taskpatch" create "$TMP/base.d" "$TMP/$n.d" -o "$TMP/$n.tpb" --task "$n" --version 1 \
            --key "$TMP/pki/signer.key" --cert "$TMP/pki/signer.crt" --level 3 > /dev/null || return 1
    done
}

# Per operation: its template, its set-up within the same daemon run, the operation, and the
# fixture model_path holds before it and after it.
template_of() { case $1 in provision) echo empty ;; install) echo provisioned ;; *) echo sibling ;; esac; }
setup_of() {
    case $1 in
    rollback | mark-good) tpc switch shout > /dev/null ;;
    rebase) tpc install "$TMP/rebase.tpb" > /dev/null ;;
    rebase-commit) { tpc install "$TMP/rebase.tpb" && tpc switch base; } > /dev/null ;;
    leave) { tpc switch grow && tpc mark-good && tpc switch --base && tpc mark-good; } > /dev/null ;;
    *) return 0 ;;
    esac
}
run_op() {
    case $1 in
    provision) tpc provision "$(fixture base)" ;;
    install) tpc install "$TMP/json.tpb" ;;
    switch) tpc switch shout ;;
    relocate) tpc switch grow ;;
    leave) tpc switch json ;;
    rollback) tpc rollback ;;
    mark-good | rebase-commit) tpc mark-good ;;
    rebase) tpc switch base ;;
    esac
}
models_of() {
    case $1 in
    provision) echo absent base ;;
    install) echo base base ;;
    switch) echo base shout ;;
    relocate) echo base grow ;;
    leave) echo base json ;;
    rollback) echo shout base ;;
    mark-good) echo shout shout ;;
    rebase) echo base json2 ;;
    rebase-commit) echo json2 json2 ;;
    esac
}

# make_rebase_fixtures: json2 as a new base: rebase.tpb (a base bundle, base -> json2, line "base"
# v2), and the tasks json and shout again (v2) made for it: nb-json.tpb, nb-shout.tpb (after
# make_dir_fixtures on a directory model: json2 split the same way).
make_rebase_fixtures() {
    local keys=(--key "$TMP/pki/signer.key" --cert "$TMP/pki/signer.crt" --level 3)
    if [ "$DIRMODE" = 1 ]; then
        python3 "$CRASH_LIB/../tools/gguf-split.py" --shards 3 --prefix llm "$TMP/json2.gguf" "$TMP/json2.d" > /dev/null ||
            return 1
    fi
    "$BIN/taskpatch" create "$(fixture base)" "$(fixture json2)" --base-bundle -o "$TMP/rebase.tpb" --version 2 \
        "${keys[@]}" > /dev/null &&
    "$BIN/taskpatch" create "$(fixture json2)" "$(fixture json)" -o "$TMP/nb-json.tpb" --task json --version 2 \
        "${keys[@]}" > /dev/null &&
    "$BIN/taskpatch" create "$(fixture json2)" "$(fixture shout)" -o "$TMP/nb-shout.tpb" --task shout --version 2 \
        "${keys[@]}" > /dev/null
}

# make_templates: the fixtures and the state dirs each operation starts from (empty,
# provisioned, sibling), and a check that the state checker sees a planted fault.
make_templates() {
    echo "$(basename "$0" .sh): fixtures and templates in $TMP"
    { make_gguf_fixtures && make_relocated_fixture && { [ "$DIRMODE" = 0 ] || make_dir_fixtures; } &&
        make_rebase_fixtures; } \
        > "$TMP/fixtures.log" 2>&1 ||
        { echo "fixtures failed: $(tail -n 3 "$TMP/fixtures.log")"; return 1; }
    write_config "trial:
  timeout: 120"
    mkdir -p "$TPL/empty"
    rm -rf "$STATE"
    dstart || return 1
    tpc provision "$(fixture base)" > /dev/null || { echo "template: provision failed"; return 1; }
    dstop
    cp -a "$STATE" "$TPL/provisioned"
    dstart || return 1
    { tpc install "$TMP/json.tpb" && tpc install "$TMP/shout.tpb" && tpc install "$TMP/grow.tpb" &&
        tpc switch json && tpc mark-good && tpc switch --base && tpc mark-good; } > /dev/null ||
        { echo "template: sibling set-up failed"; return 1; }
    dstop
    cp -a "$STATE" "$TPL/sibling"
    # The sibling template: slot a = base (active, committed), slot b = json: switching to shout
    # must undo json in slot b first.
    restore sibling
    dstart || return 1
    settle "$TMP/st.json"
    if [ "$(readlink "$MODEL")" != "$(slot_path a)" ] || ! same "$(fixture base)" ||
        grep -q "rebuilt\|verifying it in full" "$TMP/daemon.log"; then
        echo "template: the restored sibling state is not as expected:"
        cat "$TMP/daemon.log" "$TMP/st.json"
        return 1
    fi
    dstop
    # The checker must see a bad state: a planted temporary, model_path moved behind the status.
    touch "$STATE/slots/.a.seal.taskpatch.Xy12Zq"
    ln -sfn "$(slot_path b)" "$MODEL"
    if "$PY" "$CHECK" check "$TMP/st.json" "$MODEL" "$STATE" "$TMP" > "$TMP/check.out" ||
        [ "$(grep -c "temporary left\|active.sha256\|active.task" "$TMP/check.out")" -ne 3 ]; then
        echo "the state checker missed a planted fault:"
        cat "$TMP/check.out"
        return 1
    fi
}

# count_ops: run each operation once under strace -f and count, per syscall, the calls the
# daemon's main thread makes during it (lines after the set-up's log position, before the
# operation has settled) into COUNT, and those before it into START.
count_ops() {
    local op log from to others line sc n
    echo "$(basename "$0" .sh): counting the calls of each operation (strace -f)"
    for op in "${OPS[@]}"; do
        restore "$(template_of "$op")"
        log="$OUT/count-$op.strace"
        dstart -o "$log" -e trace="$SYSCALLS" || return 1
        setup_of "$op" || { echo "$op: set-up failed"; return 1; }
        sleep 0.3
        from=$(wc -l < "$log")
        run_op "$op" > "$TMP/op.out" 2>&1 || { echo "$op failed when counting: $(cat "$TMP/op.out")"; return 1; }
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
}

# points_of OP [QUARTER]: the (syscall, k) points of OP, one "syscall k" a line: all of them,
# or with QUICK=1 at most $QUICK_POINTS (default 8) spread evenly, each at QUARTER/4 of its
# share of the list (2 by default: the middle), so that runs with other quarters sample other
# points.
points_of() {
    local op=$1 q=${2:-2} sc k i points=() n=${QUICK_POINTS:-8}
    for sc in ${SYSCALLS//,/ }; do
        for ((k = 1; k <= ${COUNT[$op.$sc]:-0}; k++)); do points+=("$sc $k"); done
    done
    if [ "$QUICK" -eq 0 ] || [ ${#points[@]} -le "$n" ]; then
        printf '%s\n' "${points[@]}"
        return
    fi
    for ((i = 0; i < n; i++)); do echo "${points[$(((4 * i + q) * ${#points[@]} / (4 * n)))]}"; done
}

# add_why COMMAND...: each line COMMAND prints is a problem: into the caller's why array.
# (Read whole, not through a process substitution: one run hung for good in bash's wait4()
# with a disowned daemon as its only child, and process substitutions are the suspect.)
add_why() {
    local out l
    out=$("$@")
    [ -n "$out" ] || return 0
    while IFS= read -r l; do why+=("$l"); done <<< "$out"
}

# check_state STATUS: the invariants on the running daemon's state (check-state.py check);
# the model it holds goes to $model, each problem into the caller's why array.
check_state() {
    model=$("$PY" "$CHECK" check "$1" "$MODEL" "$STATE" "$TMP" > "$TMP/check.out"; head -n 1 "$TMP/check.out")
    add_why tail -n +2 "$TMP/check.out"
}

# next_switch STATUS: the switch after recovery; prints the fixture its bytes must be.
next_switch() {
    local st=$1 want state task
    read -r state task <<< "$("$PY" -c 'import json,sys; s=json.load(open(sys.argv[1])); print(s["state"], (s["active"] or {}).get("task"))' "$st")"
    if [ "$state" = unprovisioned ]; then
        tpc provision "$(fixture base)" > /dev/null || { echo "re-provision failed"; return 1; }
    fi
    tpc --json list > "$TMP/list.json" 2> /dev/null || { echo "list failed"; return 1; }
    case $task in
    shout) want=json ;;
    *) want=shout ;;
    esac
    # On the new base of a rebase, its own bundles of the tasks.
    local pre='' base
    base=$("$PY" -c 'import json,sys; print((json.load(open(sys.argv[1])).get("base") or {}).get("sha256"))' "$st")
    [ "$base" = "$("$BIN/taskpatch" hash "$(fixture json2)" | cut -c1-64)" ] && pre=nb-
    if ! grep -q "\"task\": *\"$want\"" "$TMP/list.json"; then
        tpc install "$TMP/$pre$want.tpb" > /dev/null || { echo "install $pre$want failed"; return 1; }
    fi
    tpc switch "$want" > "$TMP/next.out" 2>&1 || { echo "next switch $want failed: $(tr '\n' ' ' < "$TMP/next.out")"; return 1; }
    same "$(fixture "$want")" || { echo "next switch $want: model_path is not $(basename "$(fixture "$want")")"; return 1; }
    return 0
}

# second_start ST1: restart, check that the restart changed nothing against ST1 (the status
# before it) and that the next switch works; stops the daemon. Problems go into why.
second_start() {
    local r
    if ! dstart; then
        why+=("second restart failed: $(tail -n 1 "$TMP/daemon.log")")
        return
    fi
    settle "$TMP/st2.json" due || why+=("second restart: an operation did not settle")
    add_why "$PY" "$CHECK" same "$1" "$TMP/st2.json"
    [ "$("$PY" "$CHECK" check "$TMP/st2.json" "$MODEL" "$STATE" "$TMP" | head -n 1)" = "$model" ] ||
        why+=("second restart changed the model bytes")
    r=$(next_switch "$TMP/st2.json") || why+=("$r")
    dstop
}

# recover: after a crash, restart and check, restart again and compare, switch once more.
# The model after the first restart goes to $model, each problem into the caller's why.
recover() {
    model=
    SPID=   # the crashed daemon (or its strace) is gone
    if ! dstart; then
        why+=("restart after the crash failed: $(tail -n 1 "$TMP/daemon.log")")
        return
    fi
    settle "$TMP/st1.json" due || why+=("first restart: an operation did not settle")
    check_state "$TMP/st1.json"
    # A base change's other slot is re-provisioned at start: settled, it is done.
    grep -Eq '"reprovision": ?true' "$TMP/st1.json" && why+=("first restart: the other slot is still of the old base")
    rm -rf "$TMP/after-restart"
    cp -a "$STATE" "$TMP/after-restart" 2> /dev/null
    dstop
    second_start "$TMP/st1.json"
}

# with_tries ATTEMPT ARGS...: run ATTEMPT ARGS TRY for TRY = 1, 2, 3 until it returns other than 2
# (2: the start-up made another number of calls than counted, so the injection would miss its
# point; the attempt returns 2 only while TRY < 3 and records nothing then); its last status.
with_tries() {
    local try r
    for try in 1 2 3; do
        "$@" "$try"
        r=$?
        [ "$r" -eq 2 ] || return "$r"
    done
}

# record_point LINE NAME: append LINE to the results, and when the caller's why holds problems (a bad
# point), the problems to it and the evidence to $OUT/NAME/; returns 1 when bad.
record_point() {
    local line=$1 name=$2 w
    for w in "${why[@]}"; do line+=" | $w"; done
    printf '%s\n' "$line" | tee -a "$RESULTS"
    [ ${#why[@]} -gt 0 ] || return 0
    mkdir -p "$OUT/$name"
    cp "$TMP"/st*.json "$TMP/daemon.log" "$TMP/inject.strace" "$TMP/op.out" "$OUT/$name/" 2> /dev/null
    (cd "$TMP/after-restart" 2> /dev/null && ls -laR) > "$OUT/$name/listing.txt"
    sha256sum "$MODEL" > "$OUT/$name/model.sha256" 2> /dev/null
    return 1
}
