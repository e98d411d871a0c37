#!/bin/bash
# tpctl without taskpatchd: arguments and exit codes, and its side of the socket protocol
# (packaging/docs/protocol.md) against a fake daemon that answers canned lines and records
# every request (and the content of any descriptor passed with it); then the same output
# through the real taskpatchd: the list table, the progress line per phase, the countdown of
# a health check on a terminal and nothing extra without one.
#
# A FILE that tpctl cannot open (install, provision) is tpctl's own usage error: exit 1,
# checked before the daemon is contacted.
. "$(dirname "$0")/lib.sh"

tpctl() { $WRAP "$BIN/tpctl" "$@"; }

# ---- without any daemon ----------------------------------------------------

check "--help shows usage and every command" bash -c "$WRAP '$BIN/tpctl' --help | grep -q 'Usage: tpctl' &&
    for c in status list provision install switch mark-good rollback watch; do
        $WRAP '$BIN/tpctl' --help | grep -q \"^  \$c \" || exit 1; done"
check "--version prints the version" bash -c "$WRAP '$BIN/tpctl' --version | grep -Eq '^tpctl [0-9]+\.[0-9]+'"
check "switch --help shows the switch options" bash -c "$WRAP '$BIN/tpctl' switch --help | grep -q -- '--base'"
check "watch --help names the --exec variables" bash -c "$WRAP '$BIN/tpctl' watch --help | grep -q TASKPATCH_EVENT_JSON"
# A socket client loads no crypto: every call, status included, would pay for it at start-up.
needed=$(needed_libs "$BIN/tpctl")
check "tpctl links no crypto or token library (needs: $needed)" \
    bash -c "! echo '$needed' | grep -Eq 'libcrypto|libssl|libmbed|libp11|libcurl|libsystemd'"

# expect_exit CODE DESC ARGS...: tpctl ARGS exits CODE (stderr in $TMP/err, stdout in $TMP/out).
expect_exit() {
    want=$1 desc=$2
    shift 2
    tpctl "$@" > "$TMP/out" 2> "$TMP/err"
    rc=$?
    if [ "$rc" -eq "$want" ]; then ok "$desc (exit $want)"; else fail "$desc: exit $rc, want $want: $(cat "$TMP/err")"; fi
}
# err_has TEXT: the last stderr holds TEXT.
err_has() { check "stderr says: $1" grep -qF -- "$1" "$TMP/err"; }
out_has() { check "stdout says: $1" grep -qF -- "$1" "$TMP/out"; }

nosock="$TMP/none/taskpatchd.sock"
expect_exit 1 "no command"
expect_exit 1 "unknown command" --socket "$nosock" frobnicate
err_has "unknown command 'frobnicate'"
expect_exit 1 "unknown option" --socket "$nosock" status --frob
expect_exit 1 "switch without a task" --socket "$nosock" switch
err_has "missing the task"
expect_exit 1 "switch with a task and --base" --socket "$nosock" switch json --base
expect_exit 1 "switch --base --version" --socket "$nosock" switch --base --version 2
expect_exit 1 "switch --version not a number" --socket "$nosock" switch json --version three
expect_exit 1 "install without a bundle" --socket "$nosock" install
expect_exit 1 "install with two bundles" --socket "$nosock" install a.tpb b.tpb
expect_exit 1 "provision --sha256 not hex" --socket "$nosock" provision /dev/null --sha256 xyz
expect_exit 1 "--socket without a path" --socket
expect_exit 1 "status with an argument" --socket "$nosock" status now

expect_exit 3 "unreachable socket" --socket "$nosock" status
err_has "$nosock"
TASKPATCH_SOCKET="$nosock" expect_exit 3 "unreachable \$TASKPATCH_SOCKET" list
err_has "cannot connect to $nosock"

expect_exit 1 "install of a file that does not exist" --socket "$nosock" install "$TMP/nope.tpb"
err_has "cannot open '$TMP/nope.tpb'"
expect_exit 1 "install of a directory" --socket "$nosock" install "$TMP"

# --json: every failure is one {"ok": false, "error": {"code", "message"}} object on stdout.
# json_error CODE [MESSAGE-PART]: the last stdout is exactly that object.
json_error() {
    python3 -c "
import json, sys
lines = open('$TMP/out').read().splitlines()
assert len(lines) == 1, lines
j = json.loads(lines[0])
assert j['ok'] is False and set(j) == {'ok', 'error'}, j
assert j['error']['code'] == sys.argv[1] and sys.argv[2] in j['error']['message'], j" "$1" "${2:-}"
}
expect_exit 3 "--json status, no daemon" --json --socket "$nosock" status
check "... one JSON error object, code unreachable, naming the socket" json_error unreachable "$nosock"
err_has "cannot connect to $nosock"
TASKPATCH_SOCKET="$nosock" expect_exit 3 "--json after the command, no daemon" list --json
check "... code unreachable" json_error unreachable
expect_exit 1 "--json switch without a task" --json switch
check "... code usage" json_error usage "missing the task"
err_has "missing the task"
expect_exit 1 "an unknown option before --json" switch --frob --json
check "... code usage" json_error usage "unknown option '--frob'"
expect_exit 1 "--json, no command" --json
check "... code usage" json_error usage "missing command"
expect_exit 1 "--json switch --version three" --json switch json --version three
check "... code usage" json_error usage "--version"
expect_exit 1 "--json install of a file that does not exist" --json --socket "$nosock" install "$TMP/nope.tpb"
check "... code usage" json_error usage "cannot open"
expect_exit 3 "watch --exec --json: a command named --json, not the option" --socket "$nosock" watch --exec --json
check "... so no JSON on stdout" test ! -s "$TMP/out"
expect_exit 3 "without --json, no daemon" --socket "$nosock" status
check "... nothing on stdout" test ! -s "$TMP/out"

# ---- the fake daemon -------------------------------------------------------

cat > "$TMP/fake.py" <<'PY'
# fake taskpatchd: python3 fake.py SOCKET SCRIPT LOG
# SCRIPT (re-read on every request): {"<cmd>": [line, ...]}; a line is an object (sent as one
# compact JSON line), a string (sent as is, plus "\n"), "__close__" (hang up now),
# "__big__" (a 2 MiB line) or "__sleep S__" (wait S seconds). Unlisted commands get
# {"ok":true}. LOG gets one JSON line per
# request: {"req": ..., "nfds": N, "fd_content": "...", "fd_mode": "r"|"rw"|"w"}.
import array, json, os, socket, sys, fcntl, time

path, script_path, log_path = sys.argv[1:4]
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(path)
srv.listen(8)

def record(req, fds):
    entry = {"req": req, "nfds": len(fds)}
    if fds:
        fd = fds[0]
        os.lseek(fd, 0, os.SEEK_SET)
        data = b""
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            data += chunk
        entry["fd_content"] = data.decode("latin-1")
        entry["fd_mode"] = {os.O_RDONLY: "r", os.O_RDWR: "rw", os.O_WRONLY: "w"}[fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE]
    for fd in fds:
        os.close(fd)
    with open(log_path, "a") as f:
        f.write(json.dumps(entry) + "\n")

def serve(conn):
    buf, fds = b"", []
    while True:
        data, anc, _, _ = conn.recvmsg(65536, socket.CMSG_SPACE(16 * 4))
        for level, kind, payload in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                a = array.array("i")
                a.frombytes(payload[: len(payload) - len(payload) % a.itemsize])
                fds.extend(a)
        if not data:
            return
        buf += data
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            req = json.loads(line)
            record(req, fds)
            fds = []
            with open(script_path) as f:
                script = json.load(f)
            for out in script.get(req.get("cmd"), [{"ok": True}]):
                if out == "__close__":
                    return
                if isinstance(out, str) and out.startswith("__sleep "):
                    time.sleep(float(out[8:-2]))
                    continue
                if out == "__big__":
                    out = '{"ok":true,"x":"' + "a" * (2 << 20) + '"}'
                if not isinstance(out, str):
                    out = json.dumps(out, separators=(",", ":"))
                conn.sendall(out.encode() + b"\n")

while True:
    conn, _ = srv.accept()
    try:
        serve(conn)
    except (BrokenPipeError, ConnectionResetError):
        pass
    conn.close()
PY

sock="$TMP/taskpatchd.sock"
script="$TMP/script.json"
log="$TMP/requests.log"
echo '{}' > "$script"
: > "$log"
python3 "$TMP/fake.py" "$sock" "$script" "$log" &
fake=$!
trap 'kill "$fake" 2> /dev/null; rm -rf "$TMP"' EXIT
for _ in $(seq 50); do [ -S "$sock" ] && break; sleep 0.1; done
check "the fake daemon listens" test -S "$sock"
export TASKPATCH_SOCKET="$sock"

# answer FILE_CONTENT: the script for the next commands.
answer() { printf '%s\n' "$1" > "$script"; : > "$log"; }
# last_request PYTHON_EXPR: evaluate with r = the last recorded entry.
last_request() { python3 -c "import json,sys; r = [json.loads(l) for l in open('$log')][-1]; sys.exit(0 if ($1) else 1)"; }

status='{"ok":true,"state":"trial","model_path":"/var/lib/taskpatch/model.gguf",
 "active":{"slot":"b","task":"json","version":3,"sha256":"'$(printf 'ab%.0s' $(seq 32))'"},
 "slots":{"a":{"state":"clean","active":false,"task":null,"version":0,"sha256":"00"},
          "b":{"state":"clean","active":true,"task":"json","version":3,"sha256":"ab"}},
 "base":{"sha256":"00","size":352321536,"kind":"gguf"},
 "tasks":[{"task":"json","version":3},{"task":"sql","version":1}],
 "trial":{"task":"json","version":3,"slot":"b","started":"2026-11-29T15:00:00Z","deadline":"2026-11-29T15:02:00Z","timeout":120},
 "operation":null,
 "counters":{"switches":4,"slot_bytes_written":25165824,"undo_bytes_written":12582912,"state_bytes_written":4096,"last_switch_slot_bytes":24641536},
 "last_error":null,"version":"0.1.0"}'
answer "{\"status\": [$status]}"
expect_exit 0 "status --json" --json status
check "status --json: the response, as one compact line" python3 -c "
import json; lines = open('$TMP/out').read().splitlines(); assert len(lines) == 1, lines
j = json.loads(lines[0]); assert j['active']['task'] == 'json' and j['counters']['switches'] == 4
assert ' ' not in lines[0].replace('\"', '').split('model_path')[0]"
check "status sends {\"cmd\":\"status\"}" last_request "r['req'] == {'cmd': 'status'}"
TASKPATCH_TEST_NOW=$(date -d 2026-11-29T15:00:33Z +%s) expect_exit 0 "status" status
out_has "trial"
out_has "/var/lib/taskpatch/model.gguf"
out_has "json v3 in slot b"
out_has "87 s left"
out_has "Slot a:"
out_has "base model"
out_has "4 switches"
out_has "24.0 MiB"

# Status from a daemon with last_event, during an install on trial (state trial-installing).
status2=$(python3 -c "
import json, sys
s = json.loads(sys.argv[1])
s.update(state='trial-installing', last_event={'kind': 'rolled-back', 'time': '2026-11-29T14:58:00Z', 'reason': 'health check failed: exit status 3'},
         last_error=None, operation={'cmd': 'install', 'transaction': '77aa', 'phase': 'copy', 'done': 1048576, 'total': 4194304})
print(json.dumps(s))" "$status")
answer "{\"status\": [$status2]}"
TASKPATCH_TEST_NOW=$(date -d 2026-11-29T15:00:33Z +%s) expect_exit 0 "status during trial-installing" status
out_has "trial-installing"
check "trial-installing: the trial block as on trial" grep -q "^Trial: .*json v3 in slot b: 87 s left to confirm" "$TMP/out"
check "trial-installing: the install's phase and bytes of that phase" grep -q "^Operation: .*install: copy 25% (1.0 MiB of 4.0 MiB)" "$TMP/out"
check "last_event: 'Last event: <kind> <time> (<reason>)'" \
    grep -qx "Last event: rolled-back 2026-11-29T14:58:00Z (health check failed: exit status 3)" "$TMP/out"
check "last_event: no 'Last error' line besides" bash -c "! grep -q '^Last error' '$TMP/out'"
status3=$(python3 -c "
import json, sys
s = json.loads(sys.argv[1])
s.update(state='idle', trial=None, last_event={'kind': 'error', 'time': '2026-11-29T15:01:00Z', 'reason': 'disk full', 'code': 'no-space'},
         last_error={'code': 'no-space', 'message': 'disk full'})
print(json.dumps(s))" "$status")
answer "{\"status\": [$status3]}"
expect_exit 0 "status after an error event" status
check "an error's last_event names its code" grep -qx "Last event: error 2026-11-29T15:01:00Z (no-space: disk full)" "$TMP/out"
check "... and the trial is none" grep -qx "Trial:      none" "$TMP/out"
status4=$(python3 -c "
import json, sys
s = json.loads(sys.argv[1])
s.update(last_event=None, last_error={'code': 'io', 'message': 'slot b: short write'})
print(json.dumps(s))" "$status")
answer "{\"status\": [$status4]}"
expect_exit 0 "status with last_event null" status
check "last_event null: the 'Last error' line from last_error" grep -qx "Last error: slot b: short write (io)" "$TMP/out"

answer '{"list": [{"ok":true,"tasks":[{"task":"json","version":3},{"task":"summarize","version":12}]}]}'
expect_exit 0 "list" list
check "list prints a table" bash -c "grep -q '^  TASK' '$TMP/out' && grep -Eq '^  summarize +12\$' '$TMP/out'"

# The full entries: active marker, slot, size, signer (its CN; a long one cut), SHA-256.
long_signer="CN=a-signer-name-far-longer-than-any-column-should-be, O=Example"
answer '{"list": [{"ok":true,"tasks":[
  {"task":"json","version":2,"sha256":"'"$(printf '1%.0s' $(seq 64))"'","bundle_size":4439530,"span_bytes":11796480,"created":"2026-11-29T15:00:00Z","signer":"CN=ci-signer, O=TaskPatch","active":false,"slot":"a"},
  {"task":"json","version":3,"sha256":"'"$(printf '2%.0s' $(seq 64))"'","bundle_size":4500000,"span_bytes":11796480,"created":"2026-11-30T15:00:00Z","signer":"CN=ci-signer","active":true,"slot":"b"},
  {"task":"summarize","version":12,"sha256":"'"$(printf '3%.0s' $(seq 64))"'","bundle_size":900,"span_bytes":1,"created":"2026-11-30T15:00:00Z","signer":"'"$long_signer"'","active":false,"slot":null},
  {"task":"x","version":1,"sha256":"'"$(printf '4%.0s' $(seq 64))"'","bundle_size":1,"span_bytes":1,"created":"2026-11-30T15:00:00Z","signer":"","active":false,"slot":null}]}]}'
expect_exit 0 "list, full entries" list
check "list: the header names every column" grep -Eqx '  TASK +VERSION +SLOT +SIZE +SIGNER +SHA256' "$TMP/out"
check "list: the active one marked '*', with slot, size, signer CN, sha256" \
    grep -Eqx "\* json +3 +b +4\.3 MiB +ci-signer +$(printf '2%.0s' $(seq 64))" "$TMP/out"
check "list: an inactive one in the other slot, unmarked; the CN out of a DN" \
    grep -Eqx "  json +2 +a +4\.2 MiB +ci-signer +$(printf '1%.0s' $(seq 64))" "$TMP/out"
check "list: no slot '-', a long signer cut to 24 characters with '...'" \
    grep -Eqx "  summarize +12 +- +900 B +a-signer-name-far-lon\.\.\. +$(printf '3%.0s' $(seq 64))" "$TMP/out"
check "list: no signer '-'" grep -Eqx "  x +1 +- +1 B +- +$(printf '4%.0s' $(seq 64))" "$TMP/out"
check "list: one marked active" test "$(grep -c '^\*' "$TMP/out")" -eq 1
check "list: the columns line up (SHA256 at the same offset)" python3 -c "
lines = open('$TMP/out').read().splitlines()
assert len({l.index('SHA256') if i == 0 else len(l) - 64 for i, l in enumerate(lines)}) == 1, lines"

ev_staging='{"event":"staging","time":"2026-11-29T15:00:00Z","transaction":"5c1e","task":"json","version":3,"slot":"b","phase":"write","done":12451840,"total":24903680}'
ev_trial='{"event":"trial-started","time":"2026-11-29T15:00:01Z","transaction":"5c1e","task":"json","version":3,"slot":"b","timeout":120,"deadline":"2026-11-29T15:02:01Z"}'
answer "{\"switch\": [$ev_staging, $ev_trial,
  {\"ok\":true,\"transaction\":\"5c1e\",\"state\":\"trial\",\"task\":\"json\",\"version\":3,\"slot\":\"b\",\"sha256\":\"ab\"}]}"
expect_exit 0 "switch json" switch json
check "switch json sends {\"cmd\":\"switch\",\"task\":\"json\",\"wait\":true}" \
    last_request "r['req'] == {'cmd': 'switch', 'task': 'json', 'wait': True} and r['nfds'] == 0"
check "switch: the outcome line" grep -qx "json v3 active in slot b, on trial: confirm with 'tpctl mark-good' within 120 s" "$TMP/out"
check "switch: no progress on stderr without a terminal" test ! -s "$TMP/err"
expect_exit 0 "switch json --version 2" switch json --version 2
check "switch --version sends the version" last_request "r['req'] == {'cmd': 'switch', 'task': 'json', 'version': 2, 'wait': True}"
expect_exit 0 "switch --json" --json switch json
check "switch --json prints only the final response" python3 -c "
import json; lines = open('$TMP/out').read().splitlines(); assert len(lines) == 1 and json.loads(lines[0])['state'] == 'trial'"

answer '{"switch": [{"ok":true,"state":"committed","task":null,"version":0,"slot":"a"}]}'
expect_exit 0 "switch --base" switch --base
check "switch --base sends \"task\": null" last_request "r['req'] == {'cmd': 'switch', 'task': None, 'wait': True}"
check "switch --base: the outcome line" grep -qx "base model active in slot a, committed" "$TMP/out"

answer '{"rollback": [{"ok":true,"state":"committed","task":"json","version":2,"slot":"a"}],
         "mark-good": [{"ok":true,"task":"json","version":3,"slot":"b"}]}'
expect_exit 0 "rollback" rollback
check "rollback sends wait" last_request "r['req'] == {'cmd': 'rollback', 'wait': True}"
out_has "json v2 active in slot a, committed"
expect_exit 0 "mark-good" mark-good
check "mark-good sends {\"cmd\":\"mark-good\"}" last_request "r['req'] == {'cmd': 'mark-good'}"
out_has "json v3 committed"

# The progress line: drawn only on a terminal (stderr on a pty here), and not with --no-progress.
# tty-run.py CAPTURE CMD...: CMD with its stderr on a pty, whose bytes are appended to CAPTURE as
# they come (a test can poll it while CMD runs); CMD's stdout is ours; exits with CMD's status.
cat > "$TMP/tty-run.py" <<'PY'
import os, pty, subprocess, sys
m, s = pty.openpty()
p = subprocess.Popen(sys.argv[2:], stderr=s)
os.close(s)
with open(sys.argv[1], "wb") as out:
    while True:
        try:
            chunk = os.read(m, 4096)
        except OSError:
            break
        if not chunk:
            break
        out.write(chunk)
        out.flush()
sys.exit(p.wait())
PY
# screen.py CAPTURE: the lines a terminal shows after CAPTURE ('\r' returns, '\n' starts a line).
cat > "$TMP/screen.py" <<'PY'
import sys
rows, row, col = [], [], 0
for ch in open(sys.argv[1], newline="", errors="replace").read():
    if ch == "\r":
        col = 0
    elif ch == "\n":
        rows.append(row)
        row, col = [], 0
    else:
        row[col:col + 1] = [ch]
        col += 1
rows.append(row)
for r in rows:
    print("".join(r).rstrip())
PY
# on_tty CAPTURE TPCTL-ARGS...: tpctl on a terminal; stdout in $TMP/out, exit status in $rc.
on_tty() {
    capture=$1
    shift
    : > "$capture"
    python3 "$TMP/tty-run.py" "$capture" $WRAP "$BIN/tpctl" "$@" > "$TMP/out"
    rc=$?
}
answer "{\"switch\": [$ev_staging, {\"ok\":true,\"state\":\"committed\",\"task\":\"json\",\"version\":3,\"slot\":\"b\"}]}"
on_tty "$TMP/tty" switch json
check "switch on a terminal: exit 0" test "$rc" -eq 0
check "a terminal gets a progress bar (phase, percent, MiB, \\r, newline)" \
    python3 -c "t = open('$TMP/tty', newline='').read(); assert t.startswith('\r') and 'write' in t and ' 50%' in t and '11.9/23.8 MiB' in t and t.endswith('\n'), repr(t)"
on_tty "$TMP/tty" --no-progress switch json
check "switch --no-progress on a terminal: exit 0" test "$rc" -eq 0
check "--no-progress: no bar on a terminal" test ! -s "$TMP/tty"

# Per phase: each phase of bytes gets its own bar of its own done/total, kept on its line;
# a phase without bytes (prepare, commit) is named, with no bar, and the next line overwrites it.
ev_phase() {
    printf '{"event":"staging","time":"2026-11-29T15:00:00Z","transaction":"5c1e","task":null,"version":0,"slot":"a","phase":"%s","done":%s,"total":%s}' "$@"
}
printf "GGUF" > "$TMP/base.gguf"
size=10485760   # 10 MiB
answer "{\"provision\": [$(ev_phase prepare 0 0), $(ev_phase copy 0 $size), $(ev_phase copy 5242880 $size),
  $(ev_phase copy $size $size), $(ev_phase verify 0 $size), $(ev_phase verify 2621440 $size), $(ev_phase verify $size $size),
  $(ev_phase commit 0 0), {\"ok\":true,\"slot\":\"a\",\"sha256\":\"ab\"}]}"
on_tty "$TMP/tty" provision "$TMP/base.gguf"
check "provision on a terminal: exit 0" test "$rc" -eq 0
python3 "$TMP/screen.py" "$TMP/tty" > "$TMP/screen"
bar() { printf '%-8s [%s%s] %3d%%  %s' "$1" "$(printf "%${2}s" '' | tr ' ' '#')" "$(printf "%$((30 - $2))s" '' | tr ' ' '-')" "$3" "$4"; }
check "per phase: a copy bar and a verify bar of that phase's bytes (10.0/10.0 MiB), each on its line" \
    test "$(cat "$TMP/screen")" = "$(bar copy 30 100 10.0/10.0\ MiB)
$(bar verify 30 100 10.0/10.0\ MiB)"
check "per phase: the copy bar went through 50% of its phase" grep -qF "$(bar copy 15 50 5.0/10.0\ MiB)" "$TMP/tty"
check "per phase: the verify bar starts again at 0% and counts its own bytes" \
    bash -c "grep -qF '$(bar verify 0 0 0.0/10.0\ MiB)' '$TMP/tty' && grep -qF '$(bar verify 7 25 2.5/10.0\ MiB)' '$TMP/tty'"
check "per phase: prepare and commit are named, with no bar" \
    python3 -c "t = open('$TMP/tty', newline='').read(); assert '\rprepare' in t and '\rcommit' in t and 'prepare  [' not in t and 'commit   [' not in t, repr(t)"
answer "{\"provision\": [$(ev_phase copy 1024 37888), {\"ok\":true,\"slot\":\"a\"}]}"
on_tty "$TMP/tty" provision "$TMP/base.gguf"
check "per phase: a small phase in KiB" grep -qF "1.0/37.0 KiB" "$TMP/tty"

# The wait for the health check: after trial-started, a countdown from the event's timeout,
# once a second, with the last health event's detail; cleared when the trial settles.
ev_trial4='{"event":"trial-started","time":"2026-11-29T15:00:01Z","transaction":"5c1e","task":"json","version":3,"slot":"b","timeout":4,"deadline":"2026-11-29T15:00:05Z"}'
ev_health='{"event":"health","time":"2026-11-29T15:00:02Z","transaction":"5c1e","result":"starting","detail":"connection refused"}'
ev_committed='{"event":"committed","time":"2026-11-29T15:00:03Z","transaction":"5c1e","task":"json","version":3,"slot":"b","sha256":"ab","how":"health check passed"}'
answer "{\"switch\": [$ev_staging, $ev_trial4, \"__sleep 1.3__\", $ev_health, \"__sleep 1.2__\", $ev_committed,
  {\"ok\":true,\"transaction\":\"5c1e\",\"state\":\"committed\",\"task\":\"json\",\"version\":3,\"slot\":\"b\",\"sha256\":\"ab\"}]}"
on_tty "$TMP/tty" switch json
check "health wait on a terminal: exit 0, committed" bash -c "[ $rc -eq 0 ] && grep -qx 'json v3 active in slot b, committed' '$TMP/out'"
check "health wait: counts down once a second from the timeout, then the health detail" python3 -c "
import re
t = open('$TMP/tty', newline='').read()
left = [int(n) for n in re.findall(r'waiting for the health check, (\d+) s left', t)]
assert left and left[0] == 4, (left, t)
assert left == sorted(left, reverse=True) and len(set(left)) >= 2, (left, t)
assert re.search(r'waiting for the health check, [0-4] s left \(starting: connection refused\)', t), repr(t)"
python3 "$TMP/screen.py" "$TMP/tty" > "$TMP/screen"
check "health wait: the countdown is cleared at the end, the bar stays" \
    test "$(cat "$TMP/screen")" = "$(bar write 15 50 11.9/23.8\ MiB)"
ev_rolled='{"event":"rolled-back","time":"2026-11-29T15:00:03Z","transaction":"5c1e","task":"json","version":3,"slot":"a","reason":"health check failed: exit status 3"}'
answer "{\"switch\": [$ev_trial4, \"__sleep 1.1__\", $ev_rolled,
  {\"ok\":false,\"error\":{\"code\":\"rolled-back\",\"message\":\"json v3 failed its trial: health check failed: exit status 3\"}}]}"
on_tty "$TMP/tty" switch json
check "health wait, rolled back: exit 4" test "$rc" -eq 4
python3 "$TMP/screen.py" "$TMP/tty" > "$TMP/screen"
check "health wait, rolled back: only the daemon's message stays" \
    test "$(cat "$TMP/screen")" = "tpctl: json v3 failed its trial: health check failed: exit status 3"
answer "{\"switch\": [$ev_trial4, \"__sleep 1.1__\", $ev_health, $ev_committed,
  {\"ok\":true,\"state\":\"committed\",\"task\":\"json\",\"version\":3,\"slot\":\"b\"}]}"
on_tty "$TMP/tty" --no-progress switch json
check "health wait, --no-progress on a terminal: nothing drawn" bash -c "[ $rc -eq 0 ] && [ ! -s '$TMP/tty' ]"
tpctl switch json > "$TMP/out" 2> "$TMP/err"
check "health wait without a terminal: exit 0, the outcome line, nothing on stderr" \
    bash -c "[ $? -eq 0 ] && [ ! -s '$TMP/err' ] && grep -qx 'json v3 active in slot b, committed' '$TMP/out'"

# Error codes and exit codes.
for pair in usage:2 permission:2 refused:2 not-found:2 too-large:2 busy:3 io:3 no-space:3 internal:3 rolled-back:4 brand-new:3; do
    code=${pair%:*} want=${pair#*:}
    answer "{\"mark-good\": [{\"ok\":false,\"error\":{\"code\":\"$code\",\"message\":\"the $code message\"}}]}"
    expect_exit "$want" "error code $code" mark-good
    err_has "tpctl: the $code message"
done
answer '{"switch": [{"ok":false,"error":{"code":"rolled-back","message":"json v3 failed its health check"}}]}'
expect_exit 4 "switch answered rolled-back" --json switch json
check "--json prints the daemon's error response as it is, alone" python3 -c "
import json; lines = open('$TMP/out').read().splitlines(); assert len(lines) == 1, lines
assert json.loads(lines[0]) == {'ok': False, 'error': {'code': 'rolled-back', 'message': 'json v3 failed its health check'}}"
err_has "tpctl: json v3 failed its health check"
answer '{"switch": [{"ok":false,"error":{"code":"busy","message":"a switch runs","extra":7}}]}'
expect_exit 3 "switch answered busy, --json" switch json --json
check "... the daemon's object, unknown fields kept" json_error busy "a switch runs"
check "... field for field" grep -qx '{"ok":false,"error":{"code":"busy","message":"a switch runs","extra":7}}' "$TMP/out"

# The connection lost, or the daemon speaking nonsense.
answer "{\"switch\": [$ev_staging, \"__close__\"]}"
expect_exit 3 "daemon hangs up mid-wait" switch json
err_has "closed the connection before answering"
answer '{"status": ["__big__"]}'
expect_exit 3 "a line over 1 MiB" status
err_has "longer than 1 MiB"
answer '{"status": ["this is not json"]}'
expect_exit 3 "a line that is not JSON" status
err_has "malformed line"
answer '{"status": [{"neither":1}]}'
expect_exit 3 "a line that is neither response nor event" status
expect_exit 3 "... with --json" --json status
check "... code io" json_error io "neither a response"
answer '{"status": ["this is not json"]}'
expect_exit 3 "a line that is not JSON, --json" --json status
check "... code io" json_error io "malformed line"
answer "{\"switch\": [$ev_staging, \"__close__\"]}"
expect_exit 3 "daemon hangs up mid-wait, --json" --json switch json
check "... one error object, code io" json_error io "closed the connection before answering"

# Passing the file: the daemon gets a read-only descriptor of it, never the path.
printf 'TPB\0 bundle bytes \xff\n' > "$TMP/json.tpb"
answer '{"install": [{"ok":true,"task":"json","version":3}]}'
expect_exit 0 "install" install "$TMP/json.tpb"
check "install sends one read-only descriptor with the bundle's bytes" python3 -c "
import json; r = [json.loads(l) for l in open('$log')][-1]
assert r['req'] == {'cmd': 'install', 'wait': True}, r['req']
assert r['nfds'] == 1 and r['fd_mode'] == 'r', r
assert r['fd_content'].encode('latin-1') == open('$TMP/json.tpb', 'rb').read()"
out_has "json v3 installed"
expect_exit 0 "install --switch --allow-downgrade" install --switch --allow-downgrade "$TMP/json.tpb"
check "install --switch --allow-downgrade: the flags" \
    last_request "r['req'] == {'cmd': 'install', 'wait': True, 'switch': True, 'allow_downgrade': True} and r['nfds'] == 1"
hex=$(printf 'AB%.0s' $(seq 32))
expect_exit 0 "provision --sha256" provision "$TMP/json.tpb" --sha256 "$hex"
check "provision: descriptor and lowercase sha256" python3 -c "
import json; r = [json.loads(l) for l in open('$log')][-1]
assert r['req'] == {'cmd': 'provision', 'wait': True, 'sha256': 'ab' * 32}, r['req']
assert r['nfds'] == 1 and r['fd_content'].startswith('TPB')"

# watch: events printed, --exec run on slot-changed with the environment, failures reported.
ev_slot='{"event":"slot-changed","time":"2026-11-29T15:00:02Z","transaction":"5c1e","slot":"b","task":"json","version":3,"sha256":"abab","model_path":"/var/lib/taskpatch/model.gguf","reason":"switch"}'
ev_base='{"event":"slot-changed","time":"2026-11-29T15:05:00Z","slot":"a","task":null,"version":0,"sha256":"0000","model_path":"/var/lib/taskpatch/model.gguf","reason":"rollback"}'
answer "{\"subscribe\": [{\"ok\":true}, $ev_staging, $ev_slot, $ev_base, \"__close__\"]}"
cat > "$TMP/hook.sh" <<'SH'
n=$(($(cat "$HOOK_DIR/count" 2> /dev/null || echo 0) + 1))
echo "$n" > "$HOOK_DIR/count"
env | grep '^TASKPATCH_' | grep -v '^TASKPATCH_SOCKET=' | sort > "$HOOK_DIR/env.$n"
[ "$TASKPATCH_SLOT" = b ] || exit 7
SH
HOOK_DIR=$TMP expect_exit 3 "watch ends with exit 3 when the daemon hangs up" watch --exec "sh '$TMP/hook.sh'"
check "watch sends {\"cmd\":\"subscribe\"}" last_request "r['req'] == {'cmd': 'subscribe'}"
check "watch: one line per event" test "$(wc -l < "$TMP/out")" -eq 3
out_has "slot-changed: json v3 active in slot b (switch)"
check "--exec ran once per slot-changed" test "$(cat "$TMP/count")" -eq 2
check "--exec environment (task, version, slot, sha256, model path, reason, event)" python3 -c "
env = dict(l.rstrip('\n').split('=', 1) for l in open('$TMP/env.1'))
assert env['TASKPATCH_EVENT'] == 'slot-changed' and env['TASKPATCH_SLOT'] == 'b', env
assert env['TASKPATCH_TASK'] == 'json' and env['TASKPATCH_VERSION'] == '3', env
assert env['TASKPATCH_SHA256'] == 'abab' and env['TASKPATCH_REASON'] == 'switch', env
assert env['TASKPATCH_MODEL_PATH'] == '/var/lib/taskpatch/model.gguf', env
import json; assert json.loads(env['TASKPATCH_EVENT_JSON']) == json.loads('''$ev_slot''')"
check "--exec environment for the base: TASKPATCH_TASK empty" grep -qx 'TASKPATCH_TASK=' "$TMP/env.2"
err_has "exited with status 7"
err_has "taskpatchd closed the connection"

HOOK_DIR=$TMP expect_exit 3 "watch --json" --json watch
check "watch --json: each event line as sent, then the failure as one error object" python3 -c "
import json; lines = [json.loads(l) for l in open('$TMP/out').read().splitlines()]
assert [l.get('event') for l in lines] == ['staging', 'slot-changed', 'slot-changed', None], lines
assert lines[-1] == {'ok': False, 'error': {'code': 'io', 'message': 'taskpatchd closed the connection'}}, lines[-1]"

answer '{"subscribe": [{"ok":false,"error":{"code":"permission","message":"not allowed"}}]}'
expect_exit 2 "watch refused" watch
err_has "tpctl: not allowed"

# ---- the real taskpatchd ---------------------------------------------------
# What the fake cannot show: the table, the bars and the countdown from what the daemon
# really sends (per-phase done/total, or an older daemon's running total: drawn either way).

kill "$fake" 2> /dev/null
wait "$fake" 2> /dev/null
rm -f "$sock"
unset TASKPATCH_SOCKET
# shellcheck disable=SC2034  # DPID, SOCK, MODEL, CONF are read by daemon-lib.sh
. "$(dirname "$0")/daemon-lib.sh"
need_fixtures
# A health check that is "not yet" (exit 75) until the test creates $TMP/healthy.
write_config "trial:
  timeout: 30
  health_command: \"test -e '$TMP/healthy' || exit 75\"
  health_interval: 1"
need_daemon

# wait_for DESC SECONDS COMMAND...: poll COMMAND every 0.1 s until it passes or the time is up.
wait_for() {
    local desc=$1 secs=$2 i
    shift 2
    for ((i = 0; i < secs * 10; i++)); do
        "$@" 2> /dev/null && { ok "$desc"; return 0; }
        sleep 0.1
    done
    fail "$desc: not within $secs s"
    return 1
}
# bars_ok SCREEN: every line is one phase's bar ("copy", "write", "verify"), a new line per
# phase, percent and done/total in one unit; the last bar at 100%.
bars_ok() {
    python3 -c "
import re, sys
rows = [r for r in open(sys.argv[1]).read().splitlines() if r]
assert rows, 'no bar'
pat = re.compile(r'(copy|write|verify) +\[[#-]{30}\] +(\d+)%  [0-9.]+/[0-9.]+ (B|KiB|MiB|GiB)')
m = [pat.fullmatch(r) for r in rows]
assert all(m), rows
assert all(a.group(1) != b.group(1) for a, b in zip(m, m[1:])), rows
assert all(int(x.group(2)) <= 100 for x in m) and m[-1].group(2) == '100', rows" "$1"
}

on_tty "$TMP/tty" --socket "$SOCK" provision "$TMP/base.gguf"
check "real: provision on a terminal: exit 0" test "$rc" -eq 0
out_has "base model provisioned in slot a"
python3 "$TMP/screen.py" "$TMP/tty" > "$TMP/screen"
check "real: provision draws a bar per phase, labelled with the phase" bars_ok "$TMP/screen"
check "real: provision's phases are copy and verify" bash -c "grep -q '^copy ' '$TMP/screen' && grep -q '^verify ' '$TMP/screen'"
for b in json shout; do
    tpctl install "$TMP/$b.tpb" > "$TMP/out"
    check "real: install $b" test $? -eq 0
done

# A switch waiting for the health check, on a terminal: the countdown from the trial's timeout.
rm -f "$TMP/healthy"
: > "$TMP/tty"
python3 "$TMP/tty-run.py" "$TMP/tty" $WRAP "$BIN/tpctl" --socket "$SOCK" switch json > "$TMP/out" &
sw=$!
# countdown_seconds N: the capture shows N different "N s left" values so far.
countdown_seconds() {
    python3 -c "
import re, sys
t = open('$TMP/tty', newline='', errors='replace').read()
sys.exit(0 if len(set(re.findall(r'waiting for the health check, (\d+) s left', t))) >= $1 else 1)"
}
wait_for "real: switch on a terminal counts the health check's wait down (two seconds shown)" 15 countdown_seconds 2
touch "$TMP/healthy"
wait "$sw"
rc=$?
check "real: switch json, health check passed: exit 0" test "$rc" -eq 0
check "real: ... committed" grep -qx "json v1 active in slot b, committed" "$TMP/out"
check "real: the countdown starts at the trial's timeout (30 s) and only goes down" python3 -c "
import re
t = open('$TMP/tty', newline='').read()
left = [int(n) for n in re.findall(r'waiting for the health check, (\d+) s left', t)]
assert left and 28 <= left[0] <= 30 and left == sorted(left, reverse=True), left"
python3 "$TMP/screen.py" "$TMP/tty" > "$TMP/screen"
check "real: the countdown is cleared once committed; the bars stay" bars_ok "$TMP/screen"

# The same wait without a terminal: nothing on stderr, the outcome line on stdout.
rm -f "$TMP/healthy"
$WRAP "$BIN/tpctl" --socket "$SOCK" switch shout > "$TMP/out" 2> "$TMP/err" &
sw=$!
check "real: switch shout reaches its trial" wait_status "s['state'] == 'trial' and s['trial']['task'] == 'shout'"
check "real: ... and tpctl still waits for the health check" kill -0 "$sw"
touch "$TMP/healthy"
wait "$sw"
rc=$?
check "real: switch shout without a terminal: exit 0" test "$rc" -eq 0
check "real: ... nothing on stderr" test ! -s "$TMP/err"
check "real: ... the outcome line only" test "$(cat "$TMP/out")" = "shout v1 active in slot a, committed"

# The table holds what --json list holds: marker, slot, size, signer's CN, sha256.
tpctl --json list > "$TMP/list.json"
tpctl list > "$TMP/out"
check "real: list shows the active marker, slot, size and signer of every bundle" python3 -c "
import json, re
tasks = json.load(open('$TMP/list.json'))['tasks']
rows = open('$TMP/out').read().splitlines()
assert re.fullmatch(r'  TASK +VERSION +SLOT +SIZE +SIGNER +SHA256', rows[0]), rows
assert len(rows) == 1 + len(tasks) == 3, rows
def size(v):
    return '%d B' % v if v < 1024 else '%.1f KiB' % (v / 1024) if v < 1 << 20 else '%.1f MiB' % (v / (1 << 20))
for t, r in zip(tasks, rows[1:]):
    want = ['*' if t['active'] else '', t['task'], str(t['version']), t['slot'] or '-', *size(t['bundle_size']).split(),
            t['signer'].removeprefix('CN='), t['sha256']]
    assert r.split() == [w for w in want if w], (r, want)
assert [t['task'] for t in tasks if t['active']] == ['shout'] and rows[2].startswith('* shout '), rows"

check "real: the completion of 'tpctl switch' offers the tasks of the table (past the '*')" bash -c "
. '$(dirname "$0")/../../packaging/completion/tpctl'
words=('$BIN/tpctl' --socket '$SOCK' switch '')
test \"\$(_tpctl_tasks | tr '\n' ' ')\" = 'json shout '"

stop_daemon
expect_exit 3 "real: --json status once the daemon is gone" --socket "$SOCK" --json status
check "real: ... one JSON error object, code unreachable" json_error unreachable "cannot connect to $SOCK"
daemon_finish
