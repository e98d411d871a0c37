#!/bin/bash
# The socket's caps, seen from outside, against the real taskpatchd and tpctl: a request line of
# exactly 64 KiB is answered and one byte more is too-large; a client that goes on sending after
# too-large is cut off after 64 MiB; the 129th client (SERVER_MAX_CLIENTS) is refused with a busy error and the
# log names the limit; tpctl refuses to send a request over 64 KiB. (A 1 MB line and a client
# that never reads: test-daemon-bad.sh. A subscriber that never reads: tests/unit/check_server.c.
# Every parser's caps: the unit tests of its module.)
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

daemon_finish
