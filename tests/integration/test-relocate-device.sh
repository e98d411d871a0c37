#!/bin/bash
# The device stages relocating bundles (format 2: tensors moved, the file grown): each is built
# into a fresh file from base bytes and switched to by the same one rename. Switching from a
# relocated task to an in-layout one, to another relocated one and back to the base all give
# the exact model, whichever slot holds what; a busy slot and a restart change nothing.
# shellcheck disable=SC2034  # DPID, SOCK, MODEL, CONF are read by daemon-lib.sh
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/daemon-lib.sh"

need_fixtures
relayout=(python3 "$root/tests/tools/gguf-relayout.py")
"${relayout[@]}" "$TMP/shout.gguf" -o "$TMP/r-name.gguf" \
    --set-string "general.name=a model renamed by its release, sixty characters longer than before" &&
    "${relayout[@]}" "$TMP/json.gguf" -o "$TMP/r-rows.gguf" --grow-rows output.weight=16 &&
    "${relayout[@]}" "$TMP/json2.gguf" -o "$TMP/r-sorted.gguf" --sort-by-name ||
    { fail "relaid-out fixtures"; finish; exit 1; }
for t in r-name r-rows r-sorted; do
    make_bundle "$t.gguf" "$t.tpb" "$t" 1 || { fail "bundle $t"; finish; exit 1; }
done
format=$("$BIN/taskpatch" inspect --json "$TMP/r-rows.tpb" | jget format)
check "the relaid-out tasks make relocating bundles (format $format)" test "$format" = 2
check "r-rows is a bigger file than the base" test "$(stat -c %s "$TMP/r-rows.gguf")" -gt "$(stat -c %s "$TMP/base.gguf")"

need_daemon
tpctl provision "$TMP/base.gguf" > /dev/null
for t in json shout r-name r-rows r-sorted; do
    check "install $t.tpb" tpctl install "$TMP/$t.tpb"
done

# switch_to NAME EXPECTED-FILE SLOT WHAT: switch, check the bytes, the slot and the log, mark good.
switch_to() {
    local name=$1 want=$2 slot=$3 what=$4 args
    if [ "$name" = base ]; then args=(--base); else args=("$name"); fi
    : > "$TMP/daemon.log"
    check "switch $name ($what)" tpctl switch "${args[@]}"
    check "... model_path == $(basename "$want") byte for byte" same "$want"
    check "... it is slot $slot" test "$(readlink "$MODEL")" = "$STATE/slots/$slot.gguf"
    check "... and mark-good" tpctl mark-good
}

switch_to r-name "$TMP/r-name.gguf" b "relocated, from the base in slot b"
check "... built into a fresh file from base bytes" grep -q "built from base bytes" "$TMP/daemon.log"
check "... the seal says relocated" grep -q '"relocated": true' "$STATE/slots/b.seal"
check "... its record is a TPUNDO2" test "$(head -c 7 "$STATE/slots/b.undo")" = TPUNDO2
active=$(tpctl --json status | jget active.task)
check "status: the active task is r-name ($active)" test "$active" = r-name
check "status: slot b is relocated, slot a is not" test "$(tpctl --json status | jget slots.b.relocated)$(tpctl --json status | jget slots.a.relocated)" = TrueFalse
check "status: slot b's size is the task's" test "$(tpctl --json status | jget slots.b.size)" = "$(stat -c %s "$TMP/r-name.gguf")"

switch_to r-rows "$TMP/r-rows.gguf" a "relocated, grown file, from the base in slot a"
check "... the slot is the task's size" test "$(stat -c %s "$STATE/slots/a.gguf")" = "$(stat -c %s "$TMP/r-rows.gguf")"
written=$(tpctl --json status | jget counters.last_switch_slot_bytes)
check "... the build wrote the whole task model ($written bytes)" test "$written" = "$(stat -c %s "$TMP/r-rows.gguf")"

switch_to base "$TMP/base.gguf" b "back to the base, from the relocated task in slot b"
check "... built from the relocated slot's base bytes" grep -q "building the base from the base bytes of slot b" "$TMP/daemon.log"
check "... the base has no undo record" test ! -e "$STATE/slots/b.undo"
check "... the seal is not relocated" sh -c "! grep -q relocated '$STATE/slots/b.seal'"

switch_to json "$TMP/json.gguf" a "in-layout, from the relocated task in slot a"
check "... built from slot a's base bytes" grep -q "building json from the base bytes of slot a" "$TMP/daemon.log"
check "... its record is a TPUNDO1" test "$(head -c 7 "$STATE/slots/a.undo")" = TPUNDO1

switch_to r-sorted "$TMP/r-sorted.gguf" b "relocated, from the base in slot b"

# Slot a holds json (in layout) but another process has it open: the switch cannot stage in
# place, and the active slot it would copy holds a relocated task, so it builds from that.
exec 3< "$STATE/slots/a.gguf"
switch_to shout "$TMP/shout.gguf" a "in-layout while slot a is busy, from the relocated active slot"
check "... built from slot b's base bytes" grep -q "building shout from the base bytes of slot b" "$TMP/daemon.log"
exec 3<&-

switch_to r-name "$TMP/r-name.gguf" b "relocated, from the relocated task in slot b"
check "... slot b's own record was the base view" grep -q "building r-name from the base bytes of slot b" "$TMP/daemon.log"

switch_to shout "$TMP/shout.gguf" a "in-layout, back to the slot that holds it"
check "... nothing staged (the slot held it)" sh -c "! grep -q 'staged' '$TMP/daemon.log'"

# A restart trusts the relocated slot's seal and record: nothing rebuilt, the next switches work.
stop_daemon
: > "$TMP/daemon.log"
need_daemon
state=$(tpctl --json status | jget slots.b.state)
check "after a restart the relocated slot b is clean ($state)" test "$state" = clean
check "... nothing was rebuilt" sh -c "! grep -q 'rebuilt' '$TMP/daemon.log'"
switch_to r-name "$TMP/r-name.gguf" b "the relocated slot again, after the restart"
switch_to r-rows "$TMP/r-rows.gguf" a "relocated, from the in-layout task in slot a"
switch_to base "$TMP/base.gguf" b "the base, from the relocated task in slot b"

# A damaged record: the slot is not trusted as a base view, and the switch still works.
switch_to r-sorted "$TMP/r-sorted.gguf" a "relocated, from the relocated task in slot a"
printf 'X' | dd of="$STATE/slots/a.undo" bs=1 seek=40 conv=notrunc status=none
switch_to json "$TMP/json.gguf" b "in-layout, in place in slot b (the base)"
stop_daemon
: > "$TMP/daemon.log"
need_daemon
check "switch --base with slot a's record damaged: built from slot b instead" tpctl switch --base
check "... model_path == base.gguf" same "$TMP/base.gguf"
tpctl mark-good > /dev/null
check "the daemon named the damaged record" grep -q "a.undo: damaged" "$TMP/daemon.log"
finish
