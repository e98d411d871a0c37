#!/bin/bash
# The update attacks of TUF and Uptane against the device, one machine, no network: each
# bundle is refused with a clear error (tpctl exit 2), the active model stays untouched, and
# what the device remembers (the accepted version of each task) is not moved by a refused one.
#   arbitrary installation  untrusted signer, unsigned, flipped payload/manifest byte, a valid
#                           signature over another manifest
#   rollback                an older valid version, also after its newer bundle is gone and the
#                           daemon restarted (the accepted version is persisted)
#   fast-forward            an absurd version whose payload fails leaves the counter alone
#   freeze                  an expired bundle or signer certificate (the clock moved through
#                           TASKPATCH_TEST_NOW); a clock before the build date does not lock out
#   endless data            bytes past the declared payload
#   mix-and-match           one release's manifest with another release's payload
#   wrong target            a bundle for another base, an ONNX bundle on a GGUF device, a bundle
#                           made for another model (taskpatch create --model)
#   partial installation    killed in the middle of a span: never active, redone next time
# Network-side attacks (slow retrieval, drop-request, eavesdropping, bad mirror) come with the
# fleet's fetcher.
# shellcheck disable=SC2034  # DPID, SOCK, MODEL, CONF are read by daemon-lib.sh
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/daemon-lib.sh"

need_fixtures
need_daemon
tpctl provision "$TMP/base.gguf" > /dev/null
tpctl install "$TMP/json.tpb" > /dev/null
tpctl switch json > /dev/null && tpctl mark-good > /dev/null
check "set-up: json v1 active" same "$TMP/json.gguf"

# refused BUNDLE DESCRIPTION PATTERN [tpctl options]: install is refused (exit 2) with a
# message matching PATTERN, the model untouched (the same bytes as before), nothing new in the store.
refused() {
    local bundle=$1 what=$2 pattern=$3 rc before
    shift 3
    before="$(sha256sum < "$MODEL") $(find "$STATE/tasks" -type f | sort)"
    tpctl install "$bundle" "$@" > "$TMP/out" 2>&1
    rc=$?
    check "$what: refused (exit 2, got $rc)" test $rc -eq 2
    check "$what: the message says why" grep -qi "$pattern" "$TMP/out"
    grep -qi "$pattern" "$TMP/out" || sed 's/^/      /' "$TMP/out"
    check "$what: the model untouched, nothing stored" \
        test "$(sha256sum < "$MODEL") $(find "$STATE/tasks" -type f | sort)" = "$before"
}

# accepted TASK: the version of TASK the state file remembers ("-" when none).
accepted() {
    python3 -c 'import json, sys; print(json.load(open(sys.argv[1])).get("accepted", {}).get(sys.argv[2], "-"))' \
        "$STATE/state.json" "$1"
}

# splice OUT HEAD-FROM PAYLOAD-FROM [same-size]: header, manifest and signature of one bundle, the
# payload of another (the header's payload size fixed up so the sections add up; with same-size,
# the payload cut or zero-padded to the size the manifest declares).
splice() {
    python3 - "$@" <<'PYEOF'
import struct, sys
out, a, b = sys.argv[1], open(sys.argv[2], 'rb').read(), open(sys.argv[3], 'rb').read()
def sections(d):
    m, s, p = struct.unpack_from('<QQQ', d, 16)
    return d[:64 + m + s], d[64 + m + s:]
head, _ = sections(a)
_, payload = sections(b)
if len(sys.argv) > 4:
    n = len(sections(a)[1])
    payload = payload[:n] + bytes(max(0, n - len(payload)))
head = head[:32] + struct.pack('<Q', len(payload)) + head[40:]
open(out, 'wb').write(head + payload)
PYEOF
}

# swap_signature OUT MANIFEST-FROM SIGNATURE-FROM: one bundle with another's (valid) signature.
swap_signature() {
    python3 - "$@" <<'PYEOF'
import struct, sys
out, a, b = sys.argv[1], open(sys.argv[2], 'rb').read(), open(sys.argv[3], 'rb').read()
ma, sa, pa = struct.unpack_from('<QQQ', a, 16)
mb, sb, _ = struct.unpack_from('<QQQ', b, 16)
sig = b[64 + mb:64 + mb + sb]
head = a[:24] + struct.pack('<Q', len(sig)) + a[32:64]
open(out, 'wb').write(head + a[64:64 + ma] + sig + a[64 + ma + sa:])
PYEOF
}

echo "# arbitrary installation"
"$BIN/taskpatch" create "$TMP/base.gguf" "$TMP/shout.gguf" -o "$TMP/other-ca.tpb" --task shout --version 1 \
    --key "$TMP/pki/other-signer.key" --cert "$TMP/pki/other-signer.crt" --level 1 > /dev/null
refused "$TMP/other-ca.tpb" "signer from another CA" "verif\|certificate\|chain"
"$BIN/taskpatch" create "$TMP/base.gguf" "$TMP/shout.gguf" -o "$TMP/unsigned.tpb" --task shout --unsigned \
    --level 1 > /dev/null
refused "$TMP/unsigned.tpb" "unsigned bundle" "unsigned\|signature"
size=$(stat -c %s "$TMP/shout.tpb")
cp "$TMP/shout.tpb" "$TMP/flipped.tpb"
printf '\xff' | dd of="$TMP/flipped.tpb" bs=1 seek=$((size - 10)) conv=notrunc status=none
refused "$TMP/flipped.tpb" "payload byte flipped" "payload"
# A manifest in plain YAML (create --plain-manifest), so that the edit is one readable change.
make_bundle shout.gguf shout-plain.tpb shout 1 --plain-manifest
python3 -c "
import sys
d = open(sys.argv[1], 'rb').read()
assert b'version: 1' in d
open(sys.argv[2], 'wb').write(d.replace(b'version: 1', b'version: 9', 1))" "$TMP/shout-plain.tpb" "$TMP/edited.tpb"
refused "$TMP/edited.tpb" "manifest edited (version 1 -> 9)" "signature"
swap_signature "$TMP/swapped.tpb" "$TMP/shout.tpb" "$TMP/json.tpb"
refused "$TMP/swapped.tpb" "a valid signature (json's) over another manifest (shout's)" "signature does not match"
head -c 100 "$TMP/shout.tpb" > "$TMP/short.tpb"
refused "$TMP/short.tpb" "truncated bundle" "truncated"

echo "# rollback"
tpctl install "$TMP/json-v2.tpb" > /dev/null
check "json v2 installed: not accepted yet (a version is accepted when it first runs)" test "$(accepted json)" = 1
tpctl switch json > /dev/null && tpctl mark-good > /dev/null
check "json v2 runs: accepted version 2" test "$(accepted json)" = 2
refused "$TMP/json.tpb" "json v1 after v2" "older than the installed v2"
# The newer bundle gone (deleted, lost), the daemon restarted: the persisted counter still says 2.
stop_daemon
rm -f "$STATE/tasks/json/2.tpb"
start_daemon
check "after a restart without v2's bundle: still accepted 2" test "$(accepted json)" = 2
refused "$TMP/json.tpb" "json v1 after a restart, v2's bundle gone" "already accepted"
tpctl install "$TMP/json.tpb" --allow-downgrade > "$TMP/out" 2>&1
check "a technician's --allow-downgrade installs v1 anyway" test $? -eq 0
check "... and does not lower the counter" test "$(accepted json)" = 2
# Found from outside: a deleted state.json meant "unprovisioned" and forgot the floor; a damaged
# one stopped the daemon. The floor is kept twice (floor.json); the state is rebuilt.
active_before=$(tpctl --json status | jget active.sha256)
stop_daemon
rm -f "$STATE/state.json"
start_daemon
check "state.json deleted: the daemon comes up provisioned, the same model active" \
    test "$(tpctl --json status | jget state) $(tpctl --json status | jget active.sha256)" = "idle $active_before"
check "... the floor survives (floor.json): still accepted 2" test "$(accepted json)" = 2
refused "$TMP/json.tpb" "json v1 after state.json was deleted" "already accepted"
check "... the rebuild is reported" grep -q "state.json is missing: rebuilt from" "$TMP/daemon.log"
stop_daemon
printf '{"format": 1, "provisioned": tr' > "$STATE/state.json"
start_daemon
check "state.json damaged: the daemon starts, the same model active" \
    test "$(tpctl --json status | jget active.sha256)" = "$active_before"
check "... the damaged file is kept aside" test -s "$STATE/state.json.damaged"
check "... the installed bundles are listed again" test "$(tpctl --json list | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["tasks"]))')" -ge 1
refused "$TMP/json.tpb" "json v1 after state.json was damaged" "already accepted"

echo "# fast-forward"
make_bundle json2.gguf json-huge.tpb json 4000000000
size=$(stat -c %s "$TMP/json-huge.tpb")
printf '\x55' | dd of="$TMP/json-huge.tpb" bs=1 seek=$((size - 3)) conv=notrunc status=none
refused "$TMP/json-huge.tpb" "json v4000000000 with a damaged payload" "payload"
check "... the counter stays at 2" test "$(accepted json)" = 2
tpctl install "$TMP/json-v2.tpb" > "$TMP/out" 2>&1
check "... and the genuine v2 still installs" test $? -eq 0
# Signed, sound, but 2^63-1: accepted, no later version of json could ever install.
make_bundle json2.gguf json-max.tpb json 9223372036854775807
refused "$TMP/json-max.tpb" "json v9223372036854775807 (a version that would block every later one)" \
    "jumps 9223372036854775805 versions past v2, more than trust.max_version_jump (4294967296)"
check "... the counter stays at 2" test "$(accepted json)" = 2

echo "# freeze"
now=$(date +%s)
TASKPATCH_TEST_NOW=$now make_bundle shout.gguf shout-exp.tpb shout 2 --expires 1
stop_daemon
export TASKPATCH_TEST_NOW=$((now + 2 * 86400))
start_daemon
refused "$TMP/shout-exp.tpb" "a bundle past its expiry (clock moved 2 days on)" "expired on"
# Signed in 2000, while the certificate was valid (create refuses an expired one).
TASKPATCH_TEST_NOW=959817600 "$BIN/taskpatch" create "$TMP/base.gguf" "$TMP/shout.gguf" -o "$TMP/old-signer.tpb" \
    --task shout --version 2 --key "$TMP/pki/expired-signer.key" --cert "$TMP/pki/expired-signer.crt" --level 1 > /dev/null
refused "$TMP/old-signer.tpb" "a signer certificate that expired in 2001" "expired"
stop_daemon
# A device without a real-time clock boots in 1970: it must still take a valid update.
export TASKPATCH_TEST_NOW=86400
start_daemon
tpctl install "$TMP/shout.tpb" > "$TMP/out" 2>&1
check "clock in 1970 (before the build): a valid bundle installs" test $? -eq 0
check "... and the log says the dates were not checked" grep -q "before this build.*not checked" "$TMP/daemon.log"
stop_daemon

echo "# a clock that fails closed (trust.clock: strict)"
sed -i "/^  ca: /a\\  clock: strict" "$CONF"
(unset TASKPATCH_TEST_NOW; make_bundle shout.gguf shout-v3.tpb shout 3)
export TASKPATCH_TEST_SYNCHRONIZED=1
start_daemon
refused "$TMP/shout-v3.tpb" "strict, the clock in 1970 (before the build)" "trust.clock strict verifies nothing until it is set"
stop_daemon
unset TASKPATCH_TEST_NOW
export TASKPATCH_TEST_SYNCHRONIZED=0
start_daemon
refused "$TMP/shout-v3.tpb" "strict, the clock not synchronized" "not synchronized to network time"
stop_daemon
export TASKPATCH_TEST_SYNCHRONIZED=1
start_daemon
tpctl install "$TMP/shout-v3.tpb" > "$TMP/out" 2>&1
check "strict, a synchronized clock past the build: the bundle installs" test $? -eq 0
stop_daemon
unset TASKPATCH_TEST_SYNCHRONIZED
sed -i "/^  clock: strict$/d" "$CONF"
start_daemon

echo "# endless data"
cp "$TMP/shout.tpb" "$TMP/padded.tpb"
head -c 1000000 /dev/zero >> "$TMP/padded.tpb"
refused "$TMP/padded.tpb" "1 MB past the declared payload" "padded"

echo "# mix-and-match"
splice "$TMP/mixed.tpb" "$TMP/json-v2.tpb" "$TMP/json.tpb" same-size
refused "$TMP/mixed.tpb" "json v2's manifest with v1's payload (cut to the declared size)" "payload does not match"
splice "$TMP/mixed2.tpb" "$TMP/shout.tpb" "$TMP/json.tpb"
refused "$TMP/mixed2.tpb" "shout's manifest with json's payload" "manifest declares"

echo "# wrong target"
"$BIN/taskpatch" create "$TMP/json.gguf" "$TMP/shout.gguf" -o "$TMP/other-base.tpb" --task shout --version 3 \
    --key "$TMP/pki/signer.key" --cert "$TMP/pki/signer.crt" --level 1 > /dev/null
refused "$TMP/other-base.tpb" "a bundle for another base" "another base"
# The right base, the right bytes, but made for another model of a fleet (a camera's detector).
make_bundle shout.gguf other-model.tpb shout 3 --model detector
check "taskpatch inspect names a bundle's model" sh -c "'$BIN/taskpatch' inspect '$TMP/other-model.tpb' | grep -q '^model     detector'"
refused "$TMP/other-model.tpb" "a bundle made for another model" "made for model 'detector'; this device's model is 'default'"
if python3 "$(dirname "$0")/../tools/make-onnx.py" --layers 4 --channels 8 -o "$TMP/base.onnx" --task-out "$TMP/task.onnx" \
    --change-layers 1 > "$TMP/onnx.log" 2>&1; then
    "$BIN/taskpatch" create "$TMP/base.onnx" "$TMP/task.onnx" -o "$TMP/onnx.tpb" --task shout \
        --version 3 --key "$TMP/pki/signer.key" --cert "$TMP/pki/signer.crt" --level 1 > /dev/null
    refused "$TMP/onnx.tpb" "an ONNX bundle on a GGUF device" "another base"
else
    fail "ONNX fixtures: $(tail -n 2 "$TMP/onnx.log")"
fi

echo "# partial installation"
if command -v strace > /dev/null; then
    stop_daemon
    # Killed at its second slot write: in the middle of the task's spans.
    start_daemon_traced -e trace=pwrite64 -e inject=pwrite64:signal=KILL:when=2
    tpctl switch shout > "$TMP/out" 2>&1
    check "killed mid-span: the switch fails (exit 3)" test $? -eq 3
    wait "$DPID" 2> /dev/null
    DPID=
    start_daemon
    tpctl --json status > "$TMP/st.json"
    inactive=$(jget active.slot < "$TMP/st.json" | tr ab ba)
    check "after restart: json still active" test "$(jget active.task < "$TMP/st.json")" = json
    check "... model_path is json v2's bytes" same "$TMP/json2.gguf"
    check "... the half-staged slot is dirty, never active" test "$(jget "slots.$inactive.state" < "$TMP/st.json")" = dirty
    tpctl switch shout > "$TMP/out" 2>&1
    check "... the next switch rebuilds it" test $? -eq 0
    check "... model_path == shout.gguf" same "$TMP/shout.gguf"
else
    fail "strace is not installed (make deps installs it)"
fi

tpctl status > /dev/null
check "the daemon survived every attack" test $? -eq 0
daemon_finish
