#!/bin/bash
# Ordering proof for power loss (DESIGN.md invariants 1, 3, 4).
#
# Usage: tests/crash/order-trace.sh BUILD_DIR
#
# A SIGKILL keeps the page cache, so crash-points.sh cannot show what a power cut loses, and
# device-mapper's log-writes target is not available here. Instead each operation runs with
# taskpatchd under `strace -f -y` and tests/crash/order-check.py holds the trace to the
# durability rules R1-R5 (described there): files fsynced before they are renamed into place,
# directory entries fsynced before a change is announced, the active model never written,
# commits in order, writes only into temporaries or leased slots.
#
# First the checker's self-test (tests/crash/order-cases/: each rule broken once, and correct
# traces it must accept); then one trace per scenario below, each with a subscriber connected
# so that the daemon's events are in the trace; then most scenarios again on a model of several
# files (a three-way split GGUF: slots are directories, model_path links to one, a fresh copy
# or a build is a directory swapped in by RENAME_EXCHANGE), traces NAME-dir.strace.
# Traces: BUILD_DIR/order-trace/NAME.strace.
# Ends with "order: N passed, N failed" (self-test cases + scenarios); exit 1 on any failure.
# shellcheck disable=SC2034  # SOCK, MODEL, CONF, STATE are read by daemon-lib.sh
set -u
[ $# -ge 1 ] || { echo "usage: $0 BUILD_DIR" >&2; exit 1; }
build=$(cd "$1" && pwd -P) || exit 1
BIN="$build/bin"
here=$(cd "$(dirname "$0")" && pwd)
command -v strace > /dev/null || { echo "strace is needed" >&2; exit 1; }
. "$here/../integration/lib.sh"
. "$here/../integration/daemon-lib.sh"
. "$here/../tally.sh"
TMP=$(cd "$TMP" && pwd -P)      # strace -y prints real paths: the config must use them too
SOCK="$TMP/taskpatchd.sock" STATE="$TMP/state" MODEL="$STATE/model.gguf" CONF="$TMP/taskpatchd.yaml"

CHECK="$here/order-check.py"
OUT="$build/order-trace"
TPL="$TMP/templates"
# Everything the rules look at: files, directories, the client socket (replies and events).
SYSCALLS=open,openat,creat,close,dup,dup2,dup3,fcntl,write,pwrite64,writev,pwritev,pwritev2
SYSCALLS+=,fsync,fdatasync,sync,syncfs,rename,renameat,renameat2,unlink,unlinkat,rmdir,mkdir
SYSCALLS+=,mkdirat,symlink,symlinkat,link,linkat,readlink,truncate,ftruncate,fallocate
SYSCALLS+=,copy_file_range,sendfile,splice,ioctl,mmap,sendto,sendmsg,recvmsg,recvfrom
TRIAL="trial:
  timeout: 120"
SPID='' WPID=''   # strace, the subscriber
STRACE_EXTRA=()
passed=0 failed=0
start=$SECONDS

cleanup() {
    local p
    [ -n "$WPID" ] && kill "$WPID" 2> /dev/null
    if [ -n "$SPID" ]; then
        p=$(pgrep -P "$SPID")
        [ -n "$p" ] && kill -KILL "$p" 2> /dev/null
        kill -KILL "$SPID" 2> /dev/null
    fi
    stop_daemon
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

tpc() { timeout 60 "$BIN/tpctl" --socket "$SOCK" --no-progress "$@"; }

# restore TEMPLATE: a fresh state dir from a template; "none": no state dir at all; "keep": as is.
# 'cp -a' gives the slot files new inodes: check-state.py reseal points each clean seal at the
# copy, or every scenario would start by rebuilding a slot its seal no longer matches.
restore() {
    [ "$1" = keep ] && return 0
    rm -rf "$STATE"
    [ "$1" = none ] && return 0
    cp -a "$TPL/$1$SUFFIX" "$STATE" && python3 "$here/check-state.py" reseal "$STATE"
}

# The model of the scenarios: one file (DIRMODE=0) or a directory of three shards (DIRMODE=1).
DIRMODE=0 SUFFIX=''
# fixture NAME: the fixture model NAME's file or directory; slot_file ID: a file of slot ID.
fixture() { if [ "$DIRMODE" = 1 ]; then echo "$TMP/$1.d"; else echo "$TMP/$1.gguf"; fi; }
slot_file() { if [ "$DIRMODE" = 1 ]; then echo "$STATE/slots/$1.dir/llm-00002-of-00003.gguf"; else echo "$STATE/slots/$1.gguf"; fi; }

# tstart NAME: taskpatchd under strace into $OUT/NAME.strace, up, with a subscriber whose
# subscribe request the trace already shows (so no event of the scenario goes unsent).
tstart() {
    local log="$OUT/$1.strace"
    rm -f "$SOCK"
    strace -f -qq -y -s 512 -e trace="$SYSCALLS" "${STRACE_EXTRA[@]}" -o "$log" \
        "$BIN/taskpatchd" --config "$CONF" >> "$TMP/daemon.log" 2>&1 &
    SPID=$!
    for _ in $(seq 200); do
        [ -S "$SOCK" ] && tpc status > /dev/null 2>&1 && break
        kill -0 "$SPID" 2> /dev/null || return 1
        sleep 0.025
    done
    "$BIN/tpctl" --socket "$SOCK" watch > "$OUT/$1.events" 2>&1 &
    WPID=$!
    for _ in $(seq 200); do
        grep -q 'cmd\\":\\"subscribe' "$log" && return 0
        sleep 0.025
    done
    return 1
}

# tstop: the subscriber, then the daemon (SIGTERM to strace's child: the daemon we started).
tstop() {
    local d
    [ -n "$WPID" ] && kill "$WPID" 2> /dev/null && wait "$WPID" 2> /dev/null
    WPID=
    [ -n "$SPID" ] || return 0
    d=$(pgrep -P "$SPID")
    [ -n "$d" ] && kill -TERM "$d" 2> /dev/null
    wait "$SPID" 2> /dev/null
    SPID=
}

# settle: until no operation runs (a start-up scrub) and no trial is open, or 8 s.
settle() {
    for _ in $(seq 160); do
        tpc --json status 2> /dev/null | python3 -c 'import json,sys
s = json.load(sys.stdin); sys.exit(s["operation"] is not None or s["state"] != "idle")' && return 0
        sleep 0.05
    done
    return 1
}

# ---- the scenarios: sc_NAME runs the operations, pre_NAME (if any) prepares the state ----
sc_provision() { tpc provision "$(fixture base)"; }
sc_reprovision() { tpc provision "$(fixture base)"; }
sc_install() { tpc install "$TMP/json.tpb"; }
# keep_versions: 1, so committing json v2 removes json v1.
sc_install_gc() {
    tpc install --switch "$TMP/json-v2.tpb" && tpc mark-good &&
        { [ ! -e "$STATE/tasks/json/1.tpb" ] || { echo "json v1 was not collected"; return 1; }; }
}
# In place: shout into b (undo json), json into a (from the base), the base into b (undo shout).
sc_switch_in_place() {
    tpc switch shout && tpc mark-good && tpc switch json && tpc mark-good && tpc switch --base && tpc mark-good
}
sc_switch_incremental() { tpc switch shout && tpc mark-good && tpc switch json && tpc mark-good; }
# Slot b already holds json: verified and activated, nothing written.
sc_switch_back() { tpc switch json && tpc mark-good; }
# A reader holds slot b (one of its files) open: the write lease is refused, the switch stages
# into a fresh copy (of the whole directory). The reader is this shell: the file is open before
# the switch asks for the lease, with no process to start and no wait.
sc_switch_leased() {
    local slot fd r
    slot=$(readlink -f "$(slot_file b)")
    exec {fd}< "$slot"
    tpc switch shout && tpc mark-good && grep -q "staging into a fresh copy" "$TMP/daemon.log"
    r=$?
    exec {fd}<&-
    return $r
}
# Relocated: grow built into b from b's base bytes (json undone on the way), json in place into
# a, then the base built into b from the relocated slot's own record.
sc_switch_relocated() {
    tpc switch grow && tpc mark-good && tpc switch json && tpc mark-good && tpc switch --base && tpc mark-good
}
sc_rollback_trial() { tpc switch shout && tpc rollback; }
sc_rollback_committed() { tpc rollback; }
sc_trial_timeout() {
    tpc switch shout && settle && grep -q "rolled-back" "$OUT/trial-timeout.events"
}
# Killed at the switch's first fdatasync (STRACE_EXTRA): slot b dirty, an undo temporary left.
sc_killed_switch() {
    tpc switch shout && { echo "the switch survived its injected SIGKILL"; return 1; }
    wait "$SPID" 2> /dev/null
    SPID=
}
# The restart after it: litter removed, then the switch rebuilds the dirty slot (a fresh copy).
sc_restart_after_kill() { settle && tpc switch shout && tpc mark-good; }
# A daemon killed during a trial: the restart rolls back to the committed slot.
pre_restart_in_trial() {
    start_daemon > /dev/null && tpctl switch shout > /dev/null
    crash_daemon
}
sc_restart_in_trial() { settle; }
# A base change: a delta base bundle staged into b (built from a's base bytes), on trial, committed
# (the base changes in state.json), slot a re-provisioned from b in the background; then a task of
# the new base. A full base bundle rolled back.
sc_base_change() {
    tpc install --switch "$TMP/rebase.tpb" && tpc mark-good &&
        wait_until 30 grep -q "re-provisioned from the active slot" "$TMP/daemon.log" && settle &&
        tpc install --switch "$TMP/nb-shout.tpb" && tpc mark-good
}
sc_base_change_rollback() { tpc install --switch "$TMP/rebase-full.tpb" && tpc rollback; }
# The active slot touched (same bytes) and the inactive one damaged: the start-up scrub
# re-seals the first and marks the second dirty.
pre_scrub() {
    touch "$(slot_file a)"
    printf 'X' | dd of="$(slot_file b)" bs=1 seek=5000 conv=notrunc status=none
}
sc_scrub() {
    for _ in $(seq 100); do grep -q "scrub done" "$TMP/daemon.log" && break; sleep 0.05; done
    settle && grep -q "scrub done" "$TMP/daemon.log"
}

# scenario NAME TEMPLATE [EXTRA-YAML]: one traced daemon run (NAME-dir on a directory model);
# its trace joins TRACES, its model_path MODELS.
TRACES=() MODELS=()
scenario() {
    local name=$1$SUFFIX fn=${1//-/_}
    restore "$2" || { echo "$name: cannot restore $2"; failed=$((failed + 1)); return; }
    write_config "${3:-$TRIAL}"
    : > "$TMP/daemon.log"
    if declare -F "pre_$fn" > /dev/null; then "pre_$fn" > "$OUT/$name.pre" 2>&1; fi
    if ! tstart "$name"; then
        echo "$name: taskpatchd did not come up under strace: $(tail -n 2 "$TMP/daemon.log" | tr '\n' ' ')"
        failed=$((failed + 1))
    elif ! "sc_$fn" > "$OUT/$name.out" 2>&1; then
        echo "$name: the scenario failed: $(tail -n 3 "$OUT/$name.out" "$TMP/daemon.log" | tr '\n' ' ')"
        failed=$((failed + 1))
    fi
    tstop
    cp "$TMP/daemon.log" "$OUT/$name.log"
    TRACES+=("$OUT/$name.strace")
    MODELS+=("$MODEL")
}

# ---- the checker's self-test ----
rm -rf "$OUT"
mkdir -p "$OUT"
python3 "$CHECK" --self-test "$here/order-cases" > "$OUT/self-test.txt"
tally "$(cat "$OUT/self-test.txt")"
grep -v ": ok " "$OUT/self-test.txt"
if [ "$failed" -gt 0 ]; then
    echo "order-trace: the checker's self-test failed: no trace is checked"
    echo "order: $passed passed, $failed failed"
    exit 1
fi

# ---- fixtures and templates ----
# make_templates: the templates provisioned and sibling (slot a = the base, active and
# committed; slot b = json; json v1, shout and grow installed) of the current model kind.
make_templates() {
    write_config "$TRIAL"
    rm -rf "$STATE"
    if ! start_daemon > /dev/null || ! tpctl provision "$(fixture base)" > /dev/null; then
        echo "template: provision failed"
        exit 1
    fi
    stop_daemon
    mkdir -p "$TPL"
    cp -a "$STATE" "$TPL/provisioned$SUFFIX"
    start_daemon > /dev/null || exit 1
    { tpctl install "$TMP/json.tpb" && tpctl install "$TMP/shout.tpb" && tpctl install "$TMP/grow.tpb" &&
        tpctl switch json && tpctl mark-good &&
        tpctl switch --base && tpctl mark-good; } > /dev/null || { echo "template: sibling set-up failed"; exit 1; }
    stop_daemon
    cp -a "$STATE" "$TPL/sibling$SUFFIX"
}
# The base change's bundles: json2.gguf is the new base (a delta and a full base bundle), shout again for it.
make_rebase_bundles() {
    local keys=(--key "$TMP/pki/signer.key" --cert "$TMP/pki/signer.crt" --level 3)
    "$BIN/taskpatch" create "$(fixture base)" "$(fixture json2)" --base-bundle -o "$TMP/rebase.tpb" --version 2 \
        "${keys[@]}" && "$BIN/taskpatch" create --base-bundle --full "$(fixture json2)" -o "$TMP/rebase-full.tpb" \
        --version 3 "${keys[@]}" && "$BIN/taskpatch" create "$(fixture json2)" "$(fixture shout)" \
        -o "$TMP/nb-shout.tpb" --task shout --version 2 "${keys[@]}"
}
{ make_gguf_fixtures && make_relocated_fixture && make_rebase_bundles; } > "$TMP/fixtures.log" 2>&1 ||
    { echo "fixtures failed: $(tail -n 3 "$TMP/fixtures.log")"; exit 1; }
make_templates

# ---- the scenarios ----
scenario provision none
scenario reprovision provisioned
scenario install provisioned
scenario install-gc sibling "$TRIAL
keep_versions: 1"
scenario switch-in-place sibling
scenario switch-incremental sibling "$TRIAL
verify: incremental"
scenario switch-back sibling
scenario switch-leased sibling
scenario switch-relocated sibling
scenario rollback-trial sibling
scenario rollback-committed sibling
scenario trial-timeout sibling "trial:
  timeout: 1"
STRACE_EXTRA=(-e inject=fdatasync:signal=KILL:when=1)
scenario killed-switch sibling
STRACE_EXTRA=()
scenario restart-after-kill keep
scenario restart-in-trial sibling
scenario scrub sibling
scenario base-change sibling
scenario base-change-rollback sibling

# ---- the same on directory slots ----
# Each fixture split in three shards (llm-0000N-of-00003.gguf), the bundles made again from the
# directories under the same names; model_path without an extension: a link to a directory.
DIRMODE=1 SUFFIX=-dir MODEL="$STATE/llm"
for n in base json shout grow json2; do
    python3 "$here/../tools/gguf-split.py" --shards 3 --prefix llm "$TMP/$n.gguf" "$TMP/$n.d" &&
        { [ "$n" = base ] || [ "$n" = json2 ] || "$BIN/taskpatch" create "$TMP/base.d" "$TMP/$n.d" -o "$TMP/$n.tpb" \
            --task "$n" --version 1 --key "$TMP/pki/signer.key" --cert "$TMP/pki/signer.crt" --level 3; }
done > "$TMP/fixtures.log" 2>&1 || { echo "directory fixtures failed: $(tail -n 3 "$TMP/fixtures.log")"; exit 1; }
make_rebase_bundles > "$TMP/fixtures.log" 2>&1 || { echo "directory fixtures failed: $(tail -n 3 "$TMP/fixtures.log")"; exit 1; }
make_templates
scenario provision none
scenario reprovision provisioned
scenario install provisioned
scenario switch-in-place sibling
scenario switch-back sibling
scenario switch-leased sibling
scenario switch-relocated sibling
scenario rollback-trial sibling
STRACE_EXTRA=(-e inject=fdatasync:signal=KILL:when=1)
scenario killed-switch sibling
STRACE_EXTRA=()
scenario restart-after-kill keep
scenario scrub sibling
scenario base-change sibling
scenario base-change-rollback sibling

# ---- the check ----
echo "order-trace: the durability rules on ${#TRACES[@]} traces (state dir $STATE)"
for i in "${!TRACES[@]}"; do
    t=${TRACES[i]}
    if python3 "$CHECK" --state-dir "$STATE" --model-path "${MODELS[i]}" "$t" > "$t.check"; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
    fi
    cat "$t.check"
done
echo "order-trace: $((SECONDS - start)) s; traces in $OUT"
echo "order: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
