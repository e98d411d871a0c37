#!/bin/bash
# Slot safety: a slot another process maps is never written (the switch stages into a fresh
# copy and the mapping keeps its old bytes); a slot whose seal no longer matches the file is
# rebuilt from the good slot, never trusted; incremental verification rehashes only the
# chunks a switch touched and still rebuilds byte for byte.
# shellcheck disable=SC2034  # DPID, SOCK, MODEL, CONF are read by daemon-lib.sh
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/daemon-lib.sh"

need_fixtures
need_daemon
tpctl provision "$TMP/base.gguf" > /dev/null
tpctl install "$TMP/json.tpb" > /dev/null
tpctl install "$TMP/shout.tpb" > /dev/null
tpctl switch json > /dev/null && tpctl mark-good > /dev/null
check "set-up: json active in slot b" test "$(readlink "$MODEL")" = "$STATE/slots/b.gguf"
size=$(stat -c %s "$TMP/base.gguf")

# A service still maps slot a (the base) while the next switch stages into slot a.
python3 - "$STATE/slots/a.gguf" > "$TMP/mapper.out" 2> "$TMP/mapper.err" <<'EOF' &
import hashlib, mmap, os, sys, time
f = open(sys.argv[1], 'rb')
m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
print('before', hashlib.sha256(m).hexdigest(), flush=True)
while not os.path.exists(sys.argv[1] + '.test-done'):
    time.sleep(0.05)
print('after', hashlib.sha256(m).hexdigest(), flush=True)
EOF
mapper=$!
check "a service maps slot a (the base)" wait_until 20 grep -q before "$TMP/mapper.out"
check "switch shout while slot a is mapped" tpctl switch shout
check "... model_path == shout.gguf" same "$TMP/shout.gguf"
touch "$STATE/slots/a.gguf.test-done"
wait "$mapper"
base_sha=$(sha256sum < "$TMP/base.gguf" | cut -d' ' -f1)
check "the mapping saw the base before" grep -q "before $base_sha" "$TMP/mapper.out"
check "... and still sees the base after: the mapped file was never written" grep -q "after $base_sha" "$TMP/mapper.out"
check "the daemon staged into a fresh copy" grep -q "staging into a fresh copy" "$TMP/daemon.log"
written=$(tpctl --json status | jget counters.last_switch_slot_bytes)
check "a fresh copy writes the whole model ($written >= $size bytes)" test "$written" -ge "$size"
tpctl mark-good > /dev/null
rm -f "$STATE/slots/a.gguf.test-done"

# An unmapped slot is staged in place again (slot b holds json: back to the base = undo json).
check "switch --base (slot b, unmapped)" tpctl switch --base
check "... model_path == base.gguf" same "$TMP/base.gguf"
written=$(tpctl --json status | jget counters.last_switch_slot_bytes)
check "... in place: $written bytes < the model's $size" test "$written" -lt "$size"
tpctl mark-good > /dev/null

# A seal that no longer matches its file: the slot is rebuilt, never trusted.
stop_daemon
printf 'X' | dd of="$STATE/slots/a.gguf" bs=1 seek=1000 conv=notrunc status=none
start_daemon
check "a changed inactive slot shows as not clean" test "$(tpctl --json status | jget slots.a.state)" != clean
check "switch shout after the slot was changed behind the daemon's back" tpctl switch shout
check "... model_path == shout.gguf (rebuilt from the good slot)" same "$TMP/shout.gguf"
tpctl mark-good > /dev/null

# The active slot touched (same bytes, new mtime): verified in full at start and sealed again.
stop_daemon
active=$(readlink "$MODEL")
touch "$active"
start_daemon
check "active slot touched: the start-up scrub ends" wait_status 's["operation"] is None' 20
aslot=$(jget active.slot < "$TMP/st.json")
check "active slot touched: scrubbed and clean again" test "$(jget "slots.$aslot.state" < "$TMP/st.json")" = clean
check "... no error reported" test "$(jget last_error < "$TMP/st.json")" = null

# The active slot damaged (found from outside: model_path stayed on it though the other slot was
# clean): the scrub reports it and the daemon moves to the intact slot by itself.
stop_daemon
printf 'X' | dd of="$active" bs=1 seek=5000 conv=notrunc status=none
start_daemon
check "active slot damaged: the daemon moves to the clean slot" \
    wait_status "s['active']['slot'] != '$aslot' and s['operation'] is None" 20
check "... an intact model (the base)" same "$TMP/base.gguf"
check "... status says why" grep -q "does not hash to its seal" "$TMP/st.json"
check "... last_event: repaired" test "$(jget last_event.kind < "$TMP/st.json")" = repaired
check "... the journal line gives the reason" grep -q "activated.*active slot damaged" "$TMP/daemon.log"

# Incremental verification: only touched chunks are read; still byte-identical.
stop_daemon
write_config "$LONG_TRIAL
verify: incremental"
start_daemon
check "incremental: switch json" tpctl switch json
check "incremental: model_path == json.gguf" same "$TMP/json.gguf"
tpctl mark-good > /dev/null
check "incremental: switch shout" tpctl switch shout
check "incremental: model_path == shout.gguf" same "$TMP/shout.gguf"
tpctl mark-good > /dev/null
check "incremental: switch --base" tpctl switch --base
check "incremental: model_path == base.gguf" same "$TMP/base.gguf"
tpctl mark-good > /dev/null
check "incremental: switch json again" tpctl switch json
check "incremental: model_path == json.gguf" same "$TMP/json.gguf"
tpctl mark-good > /dev/null
check "incremental passes ran (the log says so)" grep -q "incremental verification" "$TMP/daemon.log"
grep "staged .* v" "$TMP/daemon.log" | tail -n 4 | sed 's/^/    /'

# The inactive slot's undo record damaged (its SHA-256 is checked only once the pass fails):
# the base cannot come back from it, so the switch stages into a fresh copy of the active slot.
check "incremental: switch shout (the inactive slot keeps json and its undo record)" tpctl switch shout
tpctl mark-good > /dev/null
case $(readlink "$MODEL") in */a.gguf) inactive=b ;; *) inactive=a ;; esac
printf 'X' | dd of="$STATE/slots/$inactive.undo" bs=1 seek=100 conv=notrunc status=none
check "slot $inactive's undo record damaged: switch --base still works" tpctl switch --base
check "... model_path == base.gguf" same "$TMP/base.gguf"
check "... the daemon named the damaged record" grep -q "$inactive.undo: damaged" "$TMP/daemon.log"
check "... and staged into a fresh copy" grep -q "damaged.*staging again into a fresh copy" "$TMP/daemon.log"
tpctl mark-good > /dev/null
check "... then back to json, in place" tpctl switch json
check "... model_path == json.gguf" same "$TMP/json.gguf"
tpctl mark-good > /dev/null

stop_daemon
daemon_finish
