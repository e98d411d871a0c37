#!/bin/bash
# A bundle that does not make the target its manifest names (issue 19, item 7): signed by a
# trusted key, its payload intact, but its target SHA-256 (and chunk-hash root) wrong, as a
# producer that erred would sign it. Installing it does not raise the accepted version (a
# version is accepted when it first runs); the switch stages it, finds the slot does not hash
# to the target, stages again into a fresh copy of the active slot (the slot might have been
# damaged), and when that fails too blames the bundle: removed from the store and marked failed,
# so it is never the newest again, and the accepted version stays where it was. The good json v2
# then installs, runs and is accepted.
# shellcheck disable=SC2034  # DPID, SOCK, MODEL, CONF are read by daemon-lib.sh
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/daemon-lib.sh"

need_fixtures
tp create "$TMP/base.gguf" "$TMP/json2.gguf" -o "$TMP/u.tpb" --task json --version 2 --unsigned --level 3 \
    --plain-manifest > /dev/null
python3 - "$TMP/u.tpb" "$TMP/lying.tpb" <<'PY'
import sys
d = bytearray(open(sys.argv[1], "rb").read())
for key in (b"target:\n  sha256: ", b"chunk_root: "):
    i = d.index(key) + len(key)
    d[i] = ord("0") if d[i] != ord("0") else ord("1")   # one hex digit of the target's digests
open(sys.argv[2], "wb").write(d)
PY
tp sign "$TMP/lying.tpb" --key "$TMP/pki/signer.key" --cert "$TMP/pki/signer.crt" > /dev/null
check "the lying bundle is signed and its payload matches (taskpatch verify cannot tell)" \
    tp verify "$TMP/lying.tpb" --ca "$TMP/pki/ca.pem"
accepted() { python3 -c "import json, sys; print(json.load(open(sys.argv[1])).get('accepted', {}).get('json', 0))" \
    "$STATE/state.json"; }

need_daemon
tpctl provision "$TMP/base.gguf" > /dev/null
tpctl install "$TMP/json.tpb" --switch > /dev/null && tpctl mark-good > /dev/null
check "json v1 committed and accepted" sh -c "test \"\$(python3 -c \"import json; print(json.load(open('$STATE/state.json'))['accepted']['json'])\")\" = 1"
tpctl install "$TMP/lying.tpb" > "$TMP/out" 2>&1
rc=$?
check "the lying json v2 installs (exit $rc): nothing checks a target before it is staged" test "$rc" -eq 0
check "... into the store" test -f "$STATE/tasks/json/2.tpb"
check "... and the accepted version is not raised by an install (still $(accepted))" test "$(accepted)" = 1
tpctl switch json > "$TMP/out" 2>&1
rc=$?
check "a switch to it fails (exit $rc)" test "$rc" -ne 0
check "... blaming the bundle after a fresh copy" \
    grep -q "json v2 does not make the target its manifest names, even in a fresh copy (the bundle's fault): removed and marked failed; the accepted version stays v1" "$TMP/out"
check "... the daemon staged it again into a fresh copy first" grep -q "staging again into a fresh copy" "$TMP/daemon.log"
check "json v1 still runs, byte for byte" same "$TMP/json.gguf"
check "... idle, the accepted version still 1" sh -c "test \"\$(python3 -c \"import json; print(json.load(open('$STATE/state.json'))['accepted']['json'])\")\" = 1"
tpctl --json list > "$TMP/list.json"
check "the lying bundle is gone from the store" python3 -c "
import json, sys; l = json.load(open(sys.argv[1]))
assert [t['version'] for t in l['tasks'] if t['task'] == 'json'] == [1], l" "$TMP/list.json"
check "... and from disk" test ! -e "$STATE/tasks/json/2.tpb"
tpctl switch json > "$TMP/out" 2>&1
check "a switch to json now: v1, what runs (nothing to do)" wait_status 's["state"] == "idle" and s["active"]["version"] == 1' 10
tpctl install "$TMP/json-v2.tpb" --switch > "$TMP/out" 2>&1
rc=$?
check "the good json v2 installs and goes on trial (exit $rc)" \
    wait_status 's["state"] == "trial" and s["active"]["version"] == 2' 20
check "... byte for byte" same "$TMP/json2.gguf"
check "... and is accepted when it runs (v$(accepted))" test "$(accepted)" = 2
tpctl mark-good > /dev/null
daemon_finish
