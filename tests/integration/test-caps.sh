#!/bin/bash
# The socket's caps, seen from outside, against the real taskpatchd and tpctl: a request line of
# exactly 64 KiB is answered and one byte more is too-large; a client that goes on sending after
# too-large is cut off after 64 MiB; the 129th client (SERVER_MAX_CLIENTS) is refused with a busy error and the
# log names the limit; tpctl refuses to send a request over 64 KiB. Then, as root only (readers
# are other uids), with a task on trial: a reader uid gets 16 connections
# (SERVER_MAX_CLIENTS_PER_UID) and a busy error for the 17th; readers together get 112 and the
# next reader uid a busy error naming the reserve; meanwhile root's tpctl status, tpctl watch and
# mark-good work. With TASKPATCHD_IDLE_TIMEOUT_MS shortened, idle readers are closed with a
# timeout line, no sooner than the timeout; a subscribed reader is kept. (A 1 MB line and a
# client that never reads: test-daemon-bad.sh. A subscriber that never reads, and the caps and
# the timeout case by case: tests/unit/check_server.c. Every parser's caps: the unit tests of
# its module.)
# shellcheck disable=SC2034  # DPID, SOCK, MODEL, CONF are read by daemon-lib.sh
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/daemon-lib.sh"

# No model and no CA needed: every cap here is met before a request reaches the manager.
cat > "$CONF" <<EOC
state_dir: $STATE
socket: $SOCK
model_path: $MODEL
EOC
start_daemon || { fail "daemon start"; finish; exit 1; }

python3 - "$SOCK" > "$TMP/caps.out" 2>&1 <<'EOF'
import json, socket, sys, time
path = sys.argv[1]
def conn():
    s = socket.socket(socket.AF_UNIX); s.connect(path); s.settimeout(10); return s, s.makefile('rb')

# JSONLINE_MAX_REQUEST: 65536 bytes with the newline is a request; 65537 is not.
s, f = conn()
req = b'{"cmd":"status"}'
s.sendall(req + b' ' * (65536 - len(req) - 1) + b'\n')
r = json.loads(f.readline()); assert r['ok'] is True and 'state' in r, r
s.sendall(req + b' ' * (65537 - len(req) - 1) + b'\n')
r = json.loads(f.readline())
assert r['ok'] is False and r['error']['code'] == 'too-large', r
assert 'longer than 65536 bytes' in r['error']['message'], r
assert f.readline() == b'', 'the connection stays open after too-large'
print('line cap ok')

# After too-large the daemon reads on (so its answer is not reset away), but not forever.
s, f = conn()
s.sendall(b'x' * 65537)
r = json.loads(f.readline()); assert r['error']['code'] == 'too-large', r
sent, cut, chunk = 0, False, b'y' * (1 << 20)
t_end = time.time() + 30
while time.time() < t_end and sent < (100 << 20):
    try:
        sent += s.send(chunk)
    except (BrokenPipeError, ConnectionResetError):
        cut = True
        break
    except socket.timeout:
        break
assert cut, f'still connected after {sent} bytes sent past too-large'
assert sent >= (64 << 20), f'cut off after only {sent} bytes'
print('drain cap ok')

# SERVER_MAX_CLIENTS: 128 connections are served; the 129th gets one busy error line and is closed; room
# again after one leaves.
clients = []
for i in range(128):
    c, cf = conn()
    c.sendall(b'{"cmd":"status"}\n')
    r = json.loads(cf.readline()); assert r['ok'], (i, r)
    clients.append((c, cf))
extra, ef = conn()
try:
    extra.sendall(b'{"cmd":"status"}\n')
except (BrokenPipeError, ConnectionResetError):
    pass
try:
    line = ef.readline()
except ConnectionResetError:
    line = b''
busy = json.loads(line) if line else {}
assert busy.get('ok') is False and busy['error']['code'] == 'busy' and '128' in busy['error']['message'], \
    f'the 129th client did not get a busy error: {line!r}'
try:
    rest = ef.readline()
except ConnectionResetError:    # closed with our request unread: a reset, after the busy line
    rest = b''
assert rest == b'', 'the 129th client was not closed after the busy error'
c, cf = clients[0]
c.sendall(b'{"cmd":"list"}\n')
assert json.loads(cf.readline())['ok'], 'a connected client is no longer served'
cf.close(); c.close()                   # both: the file object holds the descriptor too
for _ in range(100):                    # the daemon notices the hang-up on its own loop
    n, nf = conn()
    try:
        n.sendall(b'{"cmd":"status"}\n')
        line = nf.readline()
    except (BrokenPipeError, ConnectionResetError):
        line = b''
    if line:
        break
    time.sleep(0.05)
assert line and json.loads(line)['ok'], 'no room after a client left'
print('client cap ok')
EOF
check "a 64 KiB request line is answered; one byte more: too-large naming 65536, connection closed" \
    grep -q "line cap ok" "$TMP/caps.out"
check "after too-large, a client that goes on sending is cut off after 64 MiB" grep -q "drain cap ok" "$TMP/caps.out"
check "128 clients are served, the 129th gets a busy error and is closed, room again when one leaves" \
    grep -q "client cap ok" "$TMP/caps.out"
grep -v " ok$" "$TMP/caps.out" | head -n 5
check "... the daemon's log names the limit" grep -q "128 clients connected: refusing another" "$TMP/daemon.log"
tpctl status > /dev/null
check "the daemon is alive after all that" test $? -eq 0

# tpctl's own cap: it will not send a line the daemon would refuse.
name=$(head -c 70000 /dev/zero | tr '\0' a)
tpctl switch "$name" > "$TMP/out" 2>&1
rc=$?
check "tpctl: a request over 64 KiB is refused before sending (exit $rc)" test "$rc" -ne 0
check "... and says why" grep -q "cannot encode the request: longer than 64 KiB" "$TMP/out"

if [ "$(id -u)" -ne 0 ]; then
    echo "  note: the reader caps and the idle timeout need root (to connect as other uids): not run here"
    daemon_finish
    exit
fi

# Readers never lock admins out (DESIGN.md invariant 9), tried during a trial: a mark-good that
# cannot get through means a rollback.
stop_daemon
need_fixtures
write_config "trial:
  timeout: 300"
IDLE_MS=2000
export TASKPATCHD_IDLE_TIMEOUT_MS=$IDLE_MS
need_daemon
unset TASKPATCHD_IDLE_TIMEOUT_MS
tpctl provision "$TMP/base.gguf" > /dev/null && tpctl install "$TMP/json.tpb" > /dev/null &&
    tpctl switch json > /dev/null
check "a task on trial" test "$(tpctl --json status | jget state)" = trial
chmod 0711 "$TMP"
chmod 0666 "$SOCK"
H="$TMP/holders"
mkdir -m 1777 "$H"

# hold.py UID MODE N OUT: as UID (groups dropped), connect N times; OUT: how many were let in, the
# errors of the others. subscribe: each sends subscribe; then, until $H/release exists, OUT.events
# lists the events received and how many connections the daemon closed. idle: each sends one
# status, then nothing; OUT.closes: each one's last line and when it was closed.
cat > "$H/hold.py" <<'EOF'
import json, os, select, socket, sys, time
uid, mode, n, out = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
release = os.path.join(os.path.dirname(out), 'release')
if uid:
    os.setgroups([]); os.setresgid(uid, uid, uid); os.setresuid(uid, uid, uid)

def write(name, obj):
    open(name + '.tmp', 'w').write(json.dumps(obj)); os.rename(name + '.tmp', name)

def readline(s):                # unbuffered: what follows the line stays in the socket
    line = b''
    while not line.endswith(b'\n'):
        try:
            c = s.recv(1)
        except ConnectionResetError:
            c = b''
        if not c:
            break
        line += c
    return line

held, refused = [], []
for _ in range(n):
    s = socket.socket(socket.AF_UNIX); s.settimeout(20); s.connect(os.environ['SOCK'])
    t = time.monotonic()
    try:
        s.sendall(b'{"cmd":"subscribe"}\n' if mode == 'subscribe' else b'{"cmd":"status"}\n')
    except (BrokenPipeError, ConnectionResetError):
        pass
    line = readline(s)
    r = json.loads(line) if line else None
    if r and r.get('ok') is True:
        held.append((s, t))
    else:
        refused.append(r['error'] if r else None)
        s.close()
write(out, {'uid': os.getuid(), 'held': len(held), 'refused': refused})

if mode == 'idle':
    closes = []
    for s, t in held:
        last = b''
        while line := readline(s):
            last = line
        closes.append({'after_ms': int((time.monotonic() - t) * 1000), 'last': json.loads(last) if last else None})
    write(out + '.closes', closes)
else:
    bufs, events, closed, t_end = {s: b'' for s, t in held}, [], 0, time.monotonic() + 120
    write(out + '.events', {'held': len(held), 'events': events, 'closed': closed})
    while True:
        done = os.path.exists(release) or time.monotonic() > t_end
        for s in select.select(list(bufs), [], [], 0 if done else 0.05)[0]:
            try:
                d = s.recv(65536)
            except ConnectionResetError:
                d = b''
            if not d:
                del bufs[s]; closed += 1
            else:
                *lines, bufs[s] = (bufs[s] + d).split(b'\n')
                events += [json.loads(x).get('event') for x in lines]
            write(out + '.events', {'held': len(held), 'events': events, 'closed': closed})
        if done:
            break
EOF
export SOCK
holders=()
# hold UID MODE N: hold.py in the background, its files $H/UID.json*.
hold() {
    python3 "$H/hold.py" "$1" "$2" "$3" "$H/$1.json" 2> "$H/$1.err" &
    holders+=($!)
}
# wait_files FILE...: until all exist, for 60 s at most.
wait_files() {
    local f i missing
    for ((i = 0; i < 600; i++)); do
        missing=
        for f in "$@"; do [ -e "$f" ] || missing=$f; done
        [ -z "$missing" ] && return 0
        sleep 0.1
    done
    echo "    no $missing; $(cat "${missing%%.json*}.err" 2> /dev/null)"
    return 1
}
# pycheck FILE CODE: run the python CODE with `r` = the JSON in FILE.
pycheck() { python3 -c "import json, sys; r = json.load(open(sys.argv[1])); $2" "$1"; }

# Seven reader uids try 17 subscriptions each: 16 each are let in, 112 in all, the readers' whole share.
files=()
for u in 10001 10002 10003 10004 10005 10006 10007; do
    hold "$u" subscribe 17
    files+=("$H/$u.json")
done
wait_files "${files[@]}"
check "7 reader uids hold 16 connections each; the 17th of each: busy naming the per-uid cap" python3 -c "
import json, sys
for p in sys.argv[1:]:
    r = json.load(open(p))
    assert r['held'] == 16 and len(r['refused']) == 1, r
    msg = f\"uid {r['uid']} holds 16 connections, the most a read-only client may: close one and try again\"
    assert r['refused'][0] == {'code': 'busy', 'message': msg}, r" "${files[@]}"
hold 10008 subscribe 1
wait_files "$H/10008.json"
check "an 8th reader uid: busy, all but the 16 kept for admins" pycheck "$H/10008.json" "
assert r['held'] == 0 and r['refused'][0]['code'] == 'busy', r
assert 'read-only clients hold 112 connections, all but the 16 the daemon keeps for admins' in r['refused'][0]['message'], r"

# Meanwhile root: status, a subscription, and mark-good, whose event both root and the readers get.
tpctl status > /dev/null
check "readers at their share: tpctl status as root" test $? -eq 0
hold 0 subscribe 1
wait_files "$H/0.json"
check "... root subscribes" pycheck "$H/0.json" "assert r['held'] == 1, r"
tpctl mark-good > "$TMP/out" 2>&1
rc=$?
check "... tpctl mark-good as root (exit $rc)" test "$rc" -eq 0
check "... the task is committed" test "$(tpctl --json status | jget state)" = idle
got_committed() { pycheck "$1" "sys.exit('committed' not in r['events'])" 2> /dev/null; }
for ((i = 0; i < 100; i++)); do got_committed "$H/0.json.events" && got_committed "$H/10007.json.events" && break; sleep 0.1; done
check "... root's subscription got the committed event" got_committed "$H/0.json.events"
check "... and so did a reader's" got_committed "$H/10007.json.events"
check "... the log names the per-uid cap" grep -q "holds 16 read-only connections, the per-uid cap: refusing another" \
    "$TMP/daemon.log"
check "... and the reserve" grep -q "read-only clients hold 112 connections, all but the 16 kept for admins" "$TMP/daemon.log"
touch "$H/release"
wait "${holders[@]}"
holders=()
rm "$H/release"

# Idle: a reader's connections that asked once are closed after the timeout, with a timeout line;
# a subscribed reader's is kept. (Busy until the daemon has seen the released holders go: then again.)
hold 10010 subscribe 1
wait_files "$H/10010.json.events"
for ((i = 0; i < 50; i++)); do
    python3 "$H/hold.py" 10009 idle 15 "$H/10009.json" 2> "$H/10009.err"
    pycheck "$H/10009.json" "sys.exit(r['held'] != 15)" && break
    sleep 0.1
done
check "idle readers are closed, no sooner than after $IDLE_MS ms, with a timeout line" \
    python3 -c "
import json, sys
r, closes, ms = json.load(open(sys.argv[1])), json.load(open(sys.argv[1] + '.closes')), int(sys.argv[2])
assert r['held'] == 15 and len(closes) == 15, (r, closes)
for c in closes:
    assert c['last'] == {'ok': False, 'error': {'code': 'timeout', 'message': f'idle for {ms // 1000} s: closed'}}, c
    assert c['after_ms'] >= ms, c" "$H/10009.json" "$IDLE_MS"
check "... a subscribed reader is kept" pycheck "$H/10010.json.events" "assert r['held'] == 1 and r['closed'] == 0, r"
check "... the log says why" grep -q "uid 10009 idle for 2 s: closed" "$TMP/daemon.log"
touch "$H/release"
wait "${holders[@]}"
check "... and it was still there at the end" pycheck "$H/10010.json.events" "assert r['closed'] == 0, r"

daemon_finish
