#!/bin/bash
# taskpatchd and systemd's protocols, with the real binaries and no systemd running: socket
# activation (LISTEN_FDS, through systemd-socket-activate), sd_notify (READY, STATUS,
# WATCHDOG, STOPPING) to a datagram listener, "<N>" priority prefixes on stderr, lifecycle
# events as native journal entries, and the command line (--check-config, --help, --version).
# shellcheck disable=SC2034  # DPID, SOCK, MODEL, CONF are read by daemon-lib.sh
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/daemon-lib.sh"

# Datagram listeners (stand-ins for systemd's notify socket and journald) are stopped with the
# daemon, on failure too.
LISTENERS=
stop_listeners() {
    local p
    for p in $LISTENERS; do
        kill -TERM "$p" 2> /dev/null
        wait "$p" 2> /dev/null
    done
    LISTENERS=
}
trap 'stop_daemon; stop_listeners; rm -rf "$TMP"' EXIT

# listen MODE SOCKET OUT: bind a Unix datagram socket at SOCKET and record what arrives in OUT.
# notify: one line per assignment; journal: one JSON object per entry (journald's native
# protocol: KEY=VALUE lines, or KEY, a 64-bit little-endian length and the bytes of a value
# that holds a newline; a datagram too large for the socket comes as a memfd).
cat > "$TMP/listen.py" <<'EOF'
import array, json, os, socket, sys

mode, path, out = sys.argv[1:4]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(path)

def fields(d):
    f, i = {}, 0
    while i < len(d):
        nl = d.find(b"\n", i)
        if nl < 0:
            break
        line = d[i:nl]
        if b"=" in line:
            k, v = line.split(b"=", 1)
            i = nl + 1
        else:
            k, n = line, int.from_bytes(d[nl + 1:nl + 9], "little")
            v = d[nl + 9:nl + 9 + n]
            i = nl + 9 + n + 1
        f[k.decode()] = v.decode(errors="replace")
    return f

with open(out, "a") as o:
    while True:
        data, anc, _, _ = s.recvmsg(1 << 20, socket.CMSG_SPACE(4 * 4))
        for level, kind, payload in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                for fd in array.array("i", payload[:len(payload) - len(payload) % 4]):
                    data = os.pread(fd, 1 << 24, 0)
                    os.close(fd)
        if mode == "notify":
            o.writelines(l + "\n" for l in data.decode(errors="replace").split("\n") if l)
        else:
            o.write(json.dumps(fields(data)) + "\n")
        o.flush()
EOF
listen() {
    python3 "$TMP/listen.py" "$@" 2>> "$TMP/listen.err" &
    LISTENERS="$LISTENERS $!"
    wait_until 20 test -S "$2" && return 0
    echo "the $1 listener did not come up: $(cat "$TMP/listen.err")"
    return 1
}

# mark SOCKET TEXT: send TEXT to a listener after the daemon's last datagram: once the listener has
# written it, it has written everything the daemon sent before.
mark() {
    python3 -c 'import socket, sys
socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(sys.argv[2].encode(), sys.argv[1])' "$1" "$2"
}

# launch LOG COMMAND...: like start_daemon, for a daemon started by COMMAND (stdout and stderr to LOG).
launch() {
    local log=$1
    shift
    "$@" >> "$log" 2>&1 &
    DPID=$!
    wait_for_socket > /dev/null && return 0
    echo "taskpatchd did not come up:"; tail -n 5 "$log"
    return 1
}

# wait_for COMMAND...: poll COMMAND for up to 20 s (notifications and journal datagrams arrive
# asynchronously: a tpctl that returned does not mean the listener has written the line).
wait_for() { wait_until 20 "$@"; }

# A fresh state directory, and a trial that cannot time out while the test runs (LONG_TRIAL).
fresh_state() {
    rm -rf "$STATE"
    write_config
}

sha() { sha256sum < "$1" | cut -d' ' -f1; }

# ---- the command line ----------------------------------------------------------------------
write_config
$WRAP "$BIN/taskpatchd" --config "$CONF" --check-config > "$TMP/out" 2>&1
check "--check-config, good config: exit 0" test $? -eq 0
check "... prints OK with the paths" grep -q "^$CONF: OK (state_dir $STATE, socket $SOCK, model_path $MODEL" "$TMP/out"
check "... creates nothing (no state_dir, no socket)" test ! -e "$STATE" -a ! -e "$SOCK"
printf 'state_dir: %s\nsocket: %s\ntrial:\n  timeout: soon\n' "$STATE" "$SOCK" > "$TMP/bad.yaml"
$WRAP "$BIN/taskpatchd" --check-config --config "$TMP/bad.yaml" > "$TMP/out" 2> "$TMP/err"
check "--check-config, bad config: exit 1" test $? -eq 1
check "... names the file, the line and the key" grep -q "bad.yaml: line 4: 'timeout'" "$TMP/err"
check "... and prints no OK" test ! -s "$TMP/out"
$WRAP "$BIN/taskpatchd" --help > "$TMP/out" 2>&1
check "--help: exit 0" test $? -eq 0
check "... shows the usage and the options" grep -q "^Usage: taskpatchd" "$TMP/out"
check "... names --config, --check-config and the man page" \
    sh -c 'grep -q -- "--config FILE" "$1" && grep -q -- "--check-config" "$1" && grep -q "taskpatchd(8)" "$1"' sh "$TMP/out"
$WRAP "$BIN/taskpatchd" --version > "$TMP/out" 2>&1
check "--version: exit 0" test $? -eq 0
check "... prints 'taskpatchd X.Y.Z'" grep -Eqx "taskpatchd [0-9]+\.[0-9]+\.[0-9]+" "$TMP/out"
# Usage errors come from getopt and main() before logging starts: plain lines, no "<N>" prefix.
$WRAP "$BIN/taskpatchd" --no-such-option > "$TMP/out" 2>&1
check "an unknown option: exit 2" test $? -eq 2
check "... names the option and points at --help" \
    sh -c 'grep -q -- "--no-such-option" "$1" && grep -q -- "--help" "$1"' sh "$TMP/out"
$WRAP "$BIN/taskpatchd" --config "$CONF" stray > "$TMP/out" 2>&1
check "an extra argument: exit 2" test $? -eq 2
check "... named" grep -q "unexpected argument 'stray'" "$TMP/out"

need_fixtures

# ---- socket activation ---------------------------------------------------------------------
# systemd-socket-activate binds $SOCK (mode 0644), passes it as fd 3 with LISTEN_FDS=1 and
# LISTEN_PID, and execs the daemon (same pid) on the first connection.
fresh_state
systemd-socket-activate -l "$SOCK" $WRAP "$BIN/taskpatchd" --config "$CONF" >> "$TMP/activated.log" 2>&1 &
DPID=$!
wait_for test -S "$SOCK"
check "socket activation: the socket exists before the daemon runs" test -S "$SOCK"
check "... and no daemon has started yet" test "$(grep -c '^<' "$TMP/activated.log")" -eq 0
tpctl --json status > "$TMP/st.json" 2>&1
check "tpctl status through the passed socket: exit 0" test $? -eq 0
check "... the daemon answers (unprovisioned)" test "$(jget state < "$TMP/st.json")" = unprovisioned
check "the daemon logs 'listening on the socket systemd passed'" \
    grep -q "^<6>listening on the socket systemd passed$" "$TMP/activated.log"
check "... and does not bind the path itself" test "$(grep -c "^<6>listening on /" "$TMP/activated.log")" -eq 0
# A plain daemon on the same config meanwhile: it finds the state directory locked (flock on
# <state_dir>/taskpatchd.lock, the first thing it does) and exits 1 before touching anything.
timeout 20 $WRAP "$BIN/taskpatchd" --config "$CONF" > "$TMP/second.log" 2>&1
check "a second, plain daemon on the same config: exit 1" test $? -eq 1
check "... says the state directory is in use by another taskpatchd" \
    grep -q "is in use by another taskpatchd" "$TMP/second.log"
check "... the socket is still there" test -S "$SOCK"
check "... and the activated daemon still answers" tpctl status > /dev/null
stop_daemon
# The socket belongs to whoever passed it: the daemon does not unlink it on exit.
check "stopped: the passed socket file is left in place" test -S "$SOCK"
launch "$TMP/plain.log" $WRAP "$BIN/taskpatchd" --config "$CONF"
check "a plain daemon then replaces the stale socket file and binds it" \
    grep -q "^<6>listening on $SOCK$" "$TMP/plain.log"
stop_daemon
check "... and removes it when it stops" test ! -e "$SOCK"

# ---- sd_notify -----------------------------------------------------------------------------
# WATCHDOG_PID names the daemon itself (a shell exports its own pid, then execs the daemon).
fresh_state
listen notify "$TMP/notify.sock" "$TMP/notify.log" || fail "notify listener"
launch "$TMP/notify.err" env NOTIFY_SOCKET="$TMP/notify.sock" WATCHDOG_USEC=200000 \
    sh -c 'export WATCHDOG_PID=$$; exec "$@"' sh $WRAP "$BIN/taskpatchd" --config "$CONF" ||
    fail "daemon start with NOTIFY_SOCKET"
check "sd_notify: READY=1 arrives" wait_for grep -qx "READY=1" "$TMP/notify.log"
watchdogs_reach() { test "$(grep -cx "WATCHDOG=1" "$TMP/notify.log")" -ge "$1"; }
n0=$(grep -cx "WATCHDOG=1" "$TMP/notify.log")
check "WATCHDOG=1 arrives repeatedly with WATCHDOG_USEC=200000: 3 more after the first $n0" \
    wait_for watchdogs_reach $((n0 + 3))
last_status() { grep "^STATUS=" "$TMP/notify.log" | tail -n 1; }
status_is() { test "$(last_status)" = "STATUS=$1"; }
tpctl provision "$TMP/base.gguf" > /dev/null
check "provision: STATUS=idle, the base active in slot a" wait_for status_is "idle: base v0 active in slot a"
tpctl install "$TMP/json.tpb" > /dev/null
before=$(grep -c "^STATUS=" "$TMP/notify.log")
tpctl switch json > /dev/null
check "switch: STATUS says json is on trial" wait_for status_is "json v1 on trial in slot b"
grep "^STATUS=" "$TMP/notify.log" | tail -n +$((before + 1)) > "$TMP/switch-status"
check "... after a STATUS=staging on the way" grep -qx "STATUS=staging" "$TMP/switch-status"
tpctl mark-good > /dev/null
check "mark-good: STATUS=idle, json active in slot b" wait_for status_is "idle: json v1 active in slot b"
check "the daemon stayed READY once: one READY=1" test "$(grep -cx "READY=1" "$TMP/notify.log")" -eq 1
kill -TERM "$DPID"
wait "$DPID"
rc=$?
DPID=
check "SIGTERM: exit 0 (got $rc)" test "$rc" -eq 0
check "SIGTERM: STOPPING=1 arrives" wait_for grep -qx "STOPPING=1" "$TMP/notify.log"
stopping_last() {
    mark "$TMP/notify.sock" TEST_MARK=1 && wait_for grep -qx TEST_MARK=1 "$TMP/notify.log" &&
        test "$(grep -vx TEST_MARK=1 "$TMP/notify.log" | tail -n 1)" = STOPPING=1
}
check "... as the last message (the test's own mark sent after it arrives next)" stopping_last
stop_listeners

# ---- stderr: "<N>" priority prefixes -------------------------------------------------------
# Every line a running daemon wrote: the notify run above (start, provision, install, switch,
# mark-good, SIGTERM) and the daemon refused for the busy socket.
cat "$TMP/notify.err" "$TMP/second.log" "$TMP/plain.log" > "$TMP/stderr.all"
check "stderr: the daemon wrote lines ($(wc -l < "$TMP/stderr.all"))" test "$(wc -l < "$TMP/stderr.all")" -ge 10
bad=$(grep -nv '^<[0-7]>' "$TMP/stderr.all" | head -n 3)
check "stderr: every line starts with <N>, N in 0..7${bad:+ (not: $bad)}" test -z "$bad"
check "stderr: lifecycle events are <5> (notice)" grep -q "^<5>staged: json v1 in slot b" "$TMP/notify.err"

# ---- journal entries -----------------------------------------------------------------------
# No journald here, and sd_journal_send() quietly returns 0 when its socket is missing (it
# still tries one sendmsg() to /run/systemd/journal/socket, which fails with ENOENT). strace
# could show that attempt, but only as C-escaped, truncatable text of iovecs. Instead the
# daemon runs in a private mount namespace (unshare -m; root) where a directory of ours is
# bind-mounted over /run/systemd, holding a datagram socket journal/socket that a listener
# records: the test sees the very datagrams journald would parse, and the machine's /run is
# never touched.
fresh_state
if [ -d /run/systemd ]; then
    jsrc="$TMP/jroot/systemd" jdst=/run/systemd
else
    jsrc="$TMP/jroot" jdst=/run
fi
mkdir -p "$TMP/jroot/systemd/journal"
if ! unshare -m true 2> "$TMP/out"; then
    fail "journal: unshare -m needs root (CAP_SYS_ADMIN): $(cat "$TMP/out")"
elif listen journal "$TMP/jroot/systemd/journal/socket" "$TMP/journal.log" &&
    launch "$TMP/journal.err" unshare -m sh -c 'mount --bind "$1" "$2" && shift 2 && exec "$@"' sh \
        "$jsrc" "$jdst" $WRAP "$BIN/taskpatchd" --config "$CONF"; then
    tpctl provision "$TMP/base.gguf" > /dev/null
    tpctl install "$TMP/json.tpb" > /dev/null
    tpctl install "$TMP/shout.tpb" > /dev/null
    tpctl --json switch json > "$TMP/switch-json.json"
    tpctl mark-good > /dev/null
    tpctl --json switch shout > "$TMP/switch-shout.json"
    tpctl rollback > /dev/null
    stop_daemon
    mark "$TMP/jroot/systemd/journal/socket" $'TEST_MARK=end\n'
    check "journal: the listener wrote all the daemon sent (the test's mark after it arrived)" \
        wait_for grep -q '"TEST_MARK": "end"' "$TMP/journal.log"
    grep -v '"TEST_MARK"' "$TMP/journal.log" > "$TMP/journal.entries"
    check "journal: entries arrived ($(wc -l < "$TMP/journal.entries"))" test "$(wc -l < "$TMP/journal.entries")" -ge 6
    cat > "$TMP/journal-check.py" <<'EOF'
import json, re, sys

log, want, tfile, shout_tfile, mode = sys.argv[1:6]
entries = [json.loads(l) for l in open(log)]
tx = json.load(open(tfile))["transaction"]
shout_tx = json.load(open(shout_tfile))["transaction"]
ev = lambda name, **kw: [e for e in entries if e.get("TASKPATCH_EVENT") == name
                         and all(e.get(k) == v for k, v in kw.items())]
if mode == "fields":
    # Every lifecycle entry carries the fields, named as journald expects.
    for e in entries:
        for k in ("MESSAGE", "PRIORITY", "SYSLOG_IDENTIFIER", "TASKPATCH_EVENT", "TASK", "VERSION", "SLOT",
                  "SHA256", "TRANSACTION_ID"):
            assert k in e, (k, e)
        assert e["SYSLOG_IDENTIFIER"] == "taskpatchd" and e["PRIORITY"] == "5", e
        assert e["MESSAGE"].startswith("taskpatchd: " + e["TASKPATCH_EVENT"] + ": "), e
elif mode == "switch":
    # The switch to json: staged, activated, committed, in this order, one transaction.
    names = [e["TASKPATCH_EVENT"] for e in entries if e.get("TRANSACTION_ID") == tx]
    assert names == ["staged", "activated", "committed"], names
    for e in entries:
        if e.get("TRANSACTION_ID") == tx:
            assert (e["TASK"], e["VERSION"], e["SLOT"], e["SHA256"]) == ("json", "1", "b", want), e
            assert re.fullmatch("[0-9a-f]{32}", e["TRANSACTION_ID"]), e
elif mode == "provision":
    e = ev("activated", TASK="(base)")
    assert len(e) == 1 and e[0]["SLOT"] == "a" and re.fullmatch("[0-9a-f]{64}", e[0]["SHA256"]), entries
elif mode == "rollback":
    # TASK/VERSION/SHA256 of a rolled-back entry describe the slot now active (json), not the task
    # that was rolled back (shout), unlike the socket's rolled-back event.
    e = ev("rolled-back", TRANSACTION_ID=shout_tx)
    assert len(e) == 1 and e[0]["SLOT"] == "b", entries
    assert [x["TASKPATCH_EVENT"] for x in entries if x.get("TRANSACTION_ID") == shout_tx] == \
        ["staged", "activated", "rolled-back"], entries
EOF
    jcheck() { python3 "$TMP/journal-check.py" "$TMP/journal.entries" "$(sha "$TMP/json.gguf")" \
        "$TMP/switch-json.json" "$TMP/switch-shout.json" "$1"; }
    check "journal: each entry has MESSAGE, PRIORITY=5, SYSLOG_IDENTIFIER=taskpatchd, TASKPATCH_EVENT, TASK, VERSION, SLOT, SHA256, TRANSACTION_ID" \
        jcheck fields
    check "journal: provision -> activated, TASK=(base), SLOT=a" jcheck provision
    check "journal: switch json -> staged, activated, committed; TASK=json VERSION=1 SLOT=b, SHA256 of json.gguf, TRANSACTION_ID = the switch's (32 hex)" \
        jcheck switch
    check "journal: rollback during the trial of shout -> rolled-back in slot b, the trial's TRANSACTION_ID" \
        jcheck rollback
else
    fail "journal: listener or daemon start: $(tail -n 3 "$TMP/journal.err" 2> /dev/null)"
fi
stop_listeners
daemon_finish
