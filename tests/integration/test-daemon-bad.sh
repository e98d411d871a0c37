#!/bin/bash
# taskpatchd under bad input: bad task names, garbage and oversized socket lines, a reader
# asking for a change, a bundle bigger than the free space, ENOSPC in the middle of staging, a
# broken config. Each is refused with a clear error; the active model stays untouched and the
# daemon stays up. Hostile bundles are test-attacks.sh's.
# shellcheck disable=SC2034  # DPID, SOCK, MODEL, CONF are read by daemon-lib.sh
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/daemon-lib.sh"

need_fixtures

# A config with wrong types or unknown keys: the daemon refuses to start and names the line.
printf 'state_dir: %s\ntrial:\n  timeout: soon\n' "$STATE" > "$TMP/bad.yaml"
$WRAP "$BIN/taskpatchd" --config "$TMP/bad.yaml" > "$TMP/out" 2>&1
check "config with a wrong type: exit 1" test $? -eq 1
check "... names the line and the key" grep -q "line 3: 'timeout'" "$TMP/out"
printf 'state_dir: %s\nkeep_version: 2\n' "$STATE" > "$TMP/bad.yaml"
$WRAP "$BIN/taskpatchd" --config "$TMP/bad.yaml" > "$TMP/out" 2>&1
check "config with an unknown key: exit 1, named" grep -q "keep_version" "$TMP/out"
$WRAP "$BIN/taskpatchd" --config "$TMP/none.yaml" > "$TMP/out" 2>&1
check "missing config: exit 1, names the file" grep -q "none.yaml" "$TMP/out"

# Found from outside: a FIFO as the config hung the daemon; model_path inside what the daemon
# owns passed --check-config, and provisioning then destroyed slot a or the state file.
mkfifo "$TMP/fifo.yaml"
timeout 20 $WRAP "$BIN/taskpatchd" --config "$TMP/fifo.yaml" > "$TMP/out" 2>&1
check "a FIFO as the config: exit 1 at once (no hang)" test $? -eq 1
check "... says it is not a regular file" grep -q "not a regular file (a FIFO)" "$TMP/out"
for inside in slots/a.gguf state.json tasks/json/1.tpb; do
    printf 'state_dir: %s\nmodel_path: %s/%s\n' "$STATE" "$STATE" "$inside" > "$TMP/owned.yaml"
    $WRAP "$BIN/taskpatchd" --config "$TMP/owned.yaml" --check-config > "$TMP/out" 2>&1
    check "--check-config: model_path $inside refused (exit 1)" test $? -eq 1
    check "... says the daemon owns it" grep -q "which the daemon owns" "$TMP/out"
done
printf 'state_dir: %s\nmodel_path: %s/model.gguf\ntrust:\n  ca: %s/no-ca.pem\n' "$STATE" "$STATE" "$TMP" \
    > "$TMP/noca.yaml"
$WRAP "$BIN/taskpatchd" --config "$TMP/noca.yaml" --check-config > "$TMP/out" 2>&1
check "--check-config with a missing trust anchor: OK, with a warning" \
    sh -c "grep -q 'OK' '$TMP/out' && grep -q 'trust.ca does not exist' '$TMP/out'"
mkfifo "$TMP/ca-fifo.pem"
printf 'state_dir: %s\nmodel_path: %s/model.gguf\ntrust:\n  ca: %s/ca-fifo.pem\n' "$STATE" "$STATE" "$TMP" \
    > "$TMP/fifoca.yaml"
timeout 20 $WRAP "$BIN/taskpatchd" --config "$TMP/fifoca.yaml" --check-config > "$TMP/out" 2>&1
check "a FIFO as trust.ca: refused (exit 1), named" sh -c "test $? -eq 1 && grep -q 'trust.ca.*FIFO' '$TMP/out'"

# Start-up removes only the daemon's own temporaries (found from outside: any ".*.??????" went).
mkdir -p "$STATE/slots"
touch "$STATE/.profile.backup" "$STATE/.model.gguf.abc123" "$STATE/slots/.a.seal.taskpatch.Ab12Cd" \
    "$STATE/.state.json.taskpatch.x1y2z3"
need_daemon
check "start-up keeps files it does not own (.profile.backup, another tool's .model.gguf.abc123)" \
    test -e "$STATE/.profile.backup" -a -e "$STATE/.model.gguf.abc123"
check "... and removes its own temporaries" \
    test ! -e "$STATE/slots/.a.seal.taskpatch.Ab12Cd" -a ! -e "$STATE/.state.json.taskpatch.x1y2z3"
rm -f "$STATE/.profile.backup" "$STATE/.model.gguf.abc123"
tpctl provision "$TMP/base.gguf" > /dev/null
tpctl install "$TMP/json.tpb" > /dev/null
tpctl switch json > /dev/null && tpctl mark-good > /dev/null
check "set-up: json active" same "$TMP/json.gguf"

tpctl switch ../etc > "$TMP/out" 2>&1
check "task name with '..': refused (exit 2)" test $? -eq 2
check "... says it is not a valid name" grep -q "not a valid task name" "$TMP/out"
tpctl switch nosuch > "$TMP/out" 2>&1
check "a task that is not installed: exit 2, named" grep -q "nosuch" "$TMP/out"

# Raw protocol abuse: garbage, non-objects, unknown commands and fields, 1 MB lines, silence.
python3 - "$SOCK" > "$TMP/proto.out" 2>&1 <<'EOF'
import json, socket, sys
def conn():
    s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); return s, s.makefile('rb')
s, f = conn()
def ask(line):
    s.sendall(line); return json.loads(f.readline())
r = ask(b'hello\n'); assert r['ok'] is False and r['error']['code'] == 'usage', r
r = ask(b'[1,2]\n'); assert r['error']['code'] == 'usage', r
r = ask(b'{"cmd":"frobnicate"}\n'); assert r['error']['code'] == 'usage' and 'frobnicate' in r['error']['message'], r
r = ask(b'{"cmd":"status","x":1}\n'); assert r['error']['code'] == 'usage' and "'x'" in r['error']['message'], r
r = ask(b'{"cmd":"switch","task":5}\n'); assert r['error']['code'] == 'usage', r
r = ask(b'{"cmd":"switch","task":"a/b"}\n'); assert r['ok'] is False, r
r = ask(b'{"cmd":"install"}\n'); assert r['error']['code'] == 'usage' and 'descriptor' in r['error']['message'], r
r = ask(b'{"cmd":"status"}\n'); assert r['ok'] is True and r['state'] == 'idle', r
print('garbage ok')
# An empty connection, and one that says nothing, do not disturb anyone.
socket.socket(socket.AF_UNIX).connect(sys.argv[1])
quiet, _ = conn()
# A 1 MB line: too-large, then the connection is closed.
t, tf = conn()
try:
    t.sendall(b'{"cmd":"status","pad":"' + b'x' * (1 << 20))
except BrokenPipeError:
    pass
r = json.loads(tf.readline()); assert r['error']['code'] == 'too-large', r
assert tf.readline() == b'', 'the connection stays open after too-large'
print('too-large ok')
# Many requests in one write, answered in order.
r = [ask(b'{"cmd":"status"}\n{"cmd":"list"}\n'), json.loads(f.readline())]
assert 'state' in r[0] and 'tasks' in r[1], r
print('pipelined ok')
# A client that asks and never reads: cut off once 1 MiB is queued; others are answered meanwhile.
import time
hog = socket.socket(socket.AF_UNIX); hog.connect(sys.argv[1]); hog.setblocking(False)
req = b'{"cmd":"status"}\n' * 1000
sent, cut = 0, False
t_end = time.time() + 20
while time.time() < t_end and not cut:
    try:
        sent += hog.send(req)
    except BlockingIOError:
        time.sleep(0.01)
    except (BrokenPipeError, ConnectionResetError):
        cut = True
    # Answered while the hog is still connected: a starved loop would take until the hog is
    # cut (up to 20 s). The bound leaves room for an ASan build on a loaded 2-core machine (1.1 s seen).
    t0 = time.time(); r = ask(b'{"cmd":"status"}\n'); lat = time.time() - t0
    assert r['ok'] and lat < 5.0, (r, lat)
assert cut, f'a client that never reads was not disconnected ({sent} bytes of requests sent)'
print('slow client ok')
EOF
check "garbage, non-objects, unknown commands/fields, wrong types: usage errors" grep -q "garbage ok" "$TMP/proto.out"
check "a 1 MB line: too-large, connection closed" grep -q "too-large ok" "$TMP/proto.out"
check "pipelined requests answered in order" grep -q "pipelined ok" "$TMP/proto.out"
check "a client that never reads is disconnected; others are answered meanwhile" grep -q "slow client ok" "$TMP/proto.out"
[ -s "$TMP/proto.out" ] && grep -v " ok$" "$TMP/proto.out" | head -n 5
check "the daemon is alive after the abuse" tpctl status > /dev/null
check "... and the model untouched" same "$TMP/json.gguf"

# A reader (socket group, not admin) may read but not change state.
if [ "$(id -u)" -eq 0 ] && command -v setpriv > /dev/null; then
    chmod 0711 "$TMP"
    chmod 0666 "$SOCK"
    asnobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$BIN/tpctl" --socket "$SOCK" "$@"; }
    asnobody status > /dev/null 2>&1
    check "non-admin peer: status allowed" test $? -eq 0
    asnobody switch --base > "$TMP/out" 2>&1
    check "non-admin peer: switch refused (exit 2)" test $? -eq 2
    check "... with a permission error" grep -qi "only root and members" "$TMP/out"
    chmod 0660 "$SOCK"
    chgrp 0 "$SOCK"
    setpriv --reuid=65534 --regid=65534 --clear-groups "$BIN/tpctl" --socket "$SOCK" status > "$TMP/out" 2>&1
    check "outside the socket's group: cannot connect (exit 3)" test $? -eq 3
    check "the model is untouched by refused peers" same "$TMP/json.gguf"
else
    echo "  note: permission refusal needs root (to run tpctl as another uid): not run here"
fi

# ENOSPC in the middle of staging (strace fault injection on the daemon's slot writes).
if command -v strace > /dev/null; then
    stop_daemon
    start_daemon_traced -e trace=pwrite64 -e inject=pwrite64:error=ENOSPC:when=2
    tpctl install "$TMP/shout.tpb" > /dev/null
    tpctl switch shout > "$TMP/out" 2>&1
    rc=$?
    check "ENOSPC while staging: exit 3 (got $rc)" test $rc -eq 3
    check "... reported as no space" grep -qi "no space\|no-space" "$TMP/out"
    check "... the active model untouched" same "$TMP/json.gguf"
    tpctl --json status > "$TMP/st.json"
    check "... the slot left dirty, the daemon idle" \
        test "$(jget slots.a.state < "$TMP/st.json") $(jget state < "$TMP/st.json")" = "dirty idle"
    stop_daemon
    start_daemon
    check "after ENOSPC: the next switch works (the dirty slot is rebuilt)" tpctl switch shout
    check "... model_path == shout.gguf" same "$TMP/shout.gguf"
    tpctl mark-good > /dev/null
    tpctl switch json > /dev/null && tpctl mark-good > /dev/null
else
    fail "strace is not installed (make deps installs it)"
fi

# Free space: a small tmpfs as the state directory (needs root to mount).
if [ "$(id -u)" -eq 0 ] && mkdir -p "$TMP/small" && mount -t tmpfs -o size=4m tmpfs "$TMP/small" 2> /dev/null; then
    stop_daemon
    cat > "$TMP/small.yaml" <<EOC
state_dir: $TMP/small/state
socket: $TMP/small.sock
model_path: $TMP/small/state/model.gguf
trust:
  ca: $TMP/pki/ca.pem
EOC
    SOCK="$TMP/small.sock" MODEL="$TMP/small/state/model.gguf" CONF="$TMP/small.yaml"
    start_daemon
    tpctl provision "$TMP/base.gguf" > /dev/null
    check "tmpfs: provisioned" same "$TMP/base.gguf"
    avail=$(df --output=avail -B1 "$TMP/small" | tail -n 1)
    bsize=$(stat -c %s "$TMP/json.tpb")
    fill=$(( avail - bsize - 512 * 1024 ))
    [ "$fill" -gt 0 ] && head -c "$fill" /dev/zero > "$TMP/small/filler"
    tpctl install "$TMP/json.tpb" > "$TMP/out" 2>&1
    rc=$?
    check "a bundle bigger than the free space: exit 3 (got $rc)" test $rc -eq 3
    check "... says how much is needed and free" grep -q "are free" "$TMP/out"
    check "... nothing left behind" test -z "$(find "$TMP/small/state/tasks" -type f)"
    rm -f "$TMP/small/filler"
    tpctl install "$TMP/json.tpb" > /dev/null
    avail=$(df --output=avail -B1 "$TMP/small" | tail -n 1)
    head -c $(( avail - 256 * 1024 )) /dev/zero > "$TMP/small/filler"
    tpctl switch json > "$TMP/out" 2>&1
    rc=$?
    check "a switch that would not fit: refused before writing (exit 3, got $rc)" test $rc -eq 3
    check "... the model untouched" same "$TMP/base.gguf"
    check "... the inactive slot still clean" test "$(tpctl --json status | jget slots.b.state)" = clean
    # Found from outside: killed during a trial on a full disk, the daemon would not start until
    # space was freed. Now it serves status, refuses changes, and repairs once space returns.
    rm -f "$TMP/small/filler"
    tpctl switch json > /dev/null
    check "tmpfs: json on trial" test "$(tpctl --json status | jget state)" = trial
    crash_daemon
    head -c 64m /dev/zero > "$TMP/small/filler" 2> /dev/null
    start_daemon
    check "full disk at start: the daemon serves status, not writable" \
        test "$(tpctl --json status | jget writable)" = False
    tpctl switch shout > "$TMP/out" 2>&1
    rc=$?
    check "... a change is refused (exit 3, got $rc), saying why" \
        sh -c "test $rc -eq 3 && grep -q 'cannot be written' '$TMP/out'"
    rm -f "$TMP/small/filler"
    check "space back: the repair is made (the trial rolled back), writable again" \
        wait_status "s['writable'] and s['active']['task'] is None and s['state'] == 'idle'" 20
    check "... the state file says no trial" python3 -c "
import json; assert 'trial' not in json.load(open('$TMP/small/state/state.json'))"
    check "... and the next switch works" tpctl switch json
    tpctl mark-good > /dev/null
    stop_daemon
    umount "$TMP/small"
else
    echo "  note: the free-space checks need root (a size-limited tmpfs): not run here"
fi

daemon_finish
