#!/bin/bash
# tpctl without taskpatchd: arguments and exit codes, and its side of the socket protocol
# (packaging/docs/protocol.md) against a fake daemon that answers canned lines and records
# every request (and the content of any descriptor passed with it).
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

# ---- the fake daemon -------------------------------------------------------

cat > "$TMP/fake.py" <<'PY'
# fake taskpatchd: python3 fake.py SOCKET SCRIPT LOG
# SCRIPT (re-read on every request): {"<cmd>": [line, ...]}; a line is an object (sent as one
# compact JSON line), a string (sent as is, plus "\n"), "__close__" (hang up now), or
# "__big__" (a 2 MiB line). Unlisted commands get {"ok":true}. LOG gets one JSON line per
# request: {"req": ..., "nfds": N, "fd_content": "...", "fd_mode": "r"|"rw"|"w"}.
import array, json, os, socket, sys, fcntl

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

answer '{"list": [{"ok":true,"tasks":[{"task":"json","version":3},{"task":"summarize","version":12}]}]}'
expect_exit 0 "list" list
check "list prints a table" bash -c "grep -q '^TASK' '$TMP/out' && grep -Eq '^summarize +12' '$TMP/out'"

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

# The progress bar: drawn only on a terminal (stderr on a pty here), and not with --no-progress.
cat > "$TMP/on-tty.py" <<'PY'
import os, pty, subprocess, sys
m, s = pty.openpty()
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=s)
os.close(s)
out = b""
while True:
    try:
        chunk = os.read(m, 4096)
    except OSError:
        break
    if not chunk:
        break
    out += chunk
sys.stdout.write(out.decode(errors="replace"))
sys.exit(p.wait())
PY
answer "{\"switch\": [$ev_staging, {\"ok\":true,\"state\":\"committed\",\"task\":\"json\",\"version\":3,\"slot\":\"b\"}]}"
python3 "$TMP/on-tty.py" $WRAP "$BIN/tpctl" switch json > "$TMP/tty"
check "switch on a terminal: exit 0" test $? -eq 0
check "a terminal gets a progress bar (phase, percent, MiB, \\r, newline)" \
    python3 -c "t = open('$TMP/tty', newline='').read(); assert t.startswith('\r') and 'write' in t and ' 50%' in t and '11.9/23.8 MiB' in t and t.endswith('\n'), repr(t)"
python3 "$TMP/on-tty.py" $WRAP "$BIN/tpctl" --no-progress switch json > "$TMP/tty"
check "switch --no-progress on a terminal: exit 0" test $? -eq 0
check "--no-progress: no bar on a terminal" test ! -s "$TMP/tty"

# Error codes and exit codes.
for pair in usage:2 permission:2 refused:2 not-found:2 too-large:2 busy:3 io:3 no-space:3 internal:3 rolled-back:4 brand-new:3; do
    code=${pair%:*} want=${pair#*:}
    answer "{\"mark-good\": [{\"ok\":false,\"error\":{\"code\":\"$code\",\"message\":\"the $code message\"}}]}"
    expect_exit "$want" "error code $code" mark-good
    err_has "tpctl: the $code message"
done
answer '{"switch": [{"ok":false,"error":{"code":"rolled-back","message":"json v3 failed its health check"}}]}'
expect_exit 4 "switch answered rolled-back" --json switch json
check "--json prints the error response too" grep -q '"rolled-back"' "$TMP/out"

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
check "watch --json: each event line as sent" python3 -c "
import json; lines = open('$TMP/out').read().splitlines()
assert [json.loads(l)['event'] for l in lines] == ['staging', 'slot-changed', 'slot-changed'], lines"

answer '{"subscribe": [{"ok":false,"error":{"code":"permission","message":"not allowed"}}]}'
expect_exit 2 "watch refused" watch
err_has "tpctl: not allowed"

finish
