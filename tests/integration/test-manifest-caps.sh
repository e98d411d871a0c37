#!/bin/bash
# A validly signed bundle with a large manifest (found from outside: a 36 MB manifest left the
# daemon holding 257 MB): the device's caps (limits.manifest_bytes, limits.manifest_spans)
# refuse it before it costs memory, and what an accepted one took is given back after the
# install and after the switch.
# shellcheck disable=SC2034,SC2154  # DPID, SOCK, MODEL, CONF are read by daemon-lib.sh; root is set there
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/daemon-lib.sh"

sh "$root/tests/tools/make-pki.sh" "$TMP/pki" > /dev/null || { fail "test PKI"; finish; exit 1; }
# A 64 MiB raw model and a task that changes one byte in every 4 KiB: 16384 spans, a ~4 MB manifest.
python3 - "$TMP" <<'PY'
import random, sys
rnd = random.Random(7)
b = bytearray(rnd.randbytes(64 << 20))
open(sys.argv[1] + "/base.bin", "wb").write(b)
for i in range(0, len(b), 4096):
    b[i] ^= 0xFF
open(sys.argv[1] + "/task.bin", "wb").write(b)
PY
# The manifest in plain YAML (--plain-manifest), and as create writes it by default, compressed.
tp create "$TMP/base.bin" "$TMP/task.bin" -o "$TMP/big.tpb" --task big --version 1 --plain-manifest \
    --key "$TMP/pki/signer.key" --cert "$TMP/pki/signer.crt" > /dev/null
tp create "$TMP/base.bin" "$TMP/task.bin" -o "$TMP/big-z.tpb" --task big --version 1 \
    --key "$TMP/pki/signer.key" --cert "$TMP/pki/signer.crt" > /dev/null
section() { python3 -c 'import struct,sys; print(struct.unpack("<Q", open(sys.argv[1],"rb").read(24)[16:24])[0])' "$1"; }
manifest=$(section "$TMP/big.tpb") zsection=$(section "$TMP/big-z.tpb")
check "the bundle's manifest is large ($manifest bytes)" test "$manifest" -gt 3000000
check "... compressed, its section is under a third of that ($zsection bytes: $((zsection * 1000 / 16384)) per 1,000 spans)" \
    test $((zsection * 3)) -lt "$manifest"

MODEL="$STATE/model.bin"
write_config "trial:
  timeout: 30
limits:
  manifest_bytes: $((manifest - 1))"
need_daemon
tpctl provision "$TMP/base.bin" > /dev/null
tpctl install "$TMP/big.tpb" > "$TMP/out" 2>&1
check "a manifest one byte over limits.manifest_bytes: refused (exit 2)" test $? -eq 2
check "... naming the size and the key" grep -q "more than the $((manifest - 1)) this device accepts (limits.manifest_bytes)" "$TMP/out"
tpctl install "$TMP/big-z.tpb" > "$TMP/out" 2>&1
check "compressed, a small section whose YAML is one byte over the cap: refused too (exit $?)" \
    grep -q "declares $manifest bytes of YAML, more than the cap of $((manifest - 1))" "$TMP/out"
stop_daemon
write_config "trial:
  timeout: 30
limits:
  manifest_spans: 16383"
start_daemon
tpctl install "$TMP/big.tpb" > "$TMP/out" 2>&1
check "16384 spans over limits.manifest_spans 16383: refused (exit 2)" test $? -eq 2
check "... naming the count and the key" grep -q "lists 16384 spans, more than the 16383 .*(limits.manifest_spans)" "$TMP/out"
stop_daemon
write_config "trial:
  timeout: 30"

rss() { awk '/^RssAnon/ {print $2}' "/proc/$DPID/status"; }
# wait_rss LIMIT_KB: until the daemon's anonymous memory is at most LIMIT_KB (10 s); the reply
# comes before the operation's memory is freed.
wait_rss() {
    for _ in $(seq 100); do
        [ "$(rss)" -le "$1" ] && return 0
        sleep 0.1
    done
    echo "    RssAnon $(rss) kB, expected at most $1 kB"
    return 1
}
# AddressSanitizer's quarantine keeps freed memory on purpose: memory is measured in the plain build.
measure=true
[ "${SANITIZE:-}" = 1 ] && measure=false && echo "  note: memory is not measured under ASan (its quarantine holds what is freed)"
start_daemon
before=$(rss)
check "within the default caps: the bundle installs" tpctl install "$TMP/big.tpb"
$measure && check "... and the daemon gives the manifest's memory back (RssAnon $before kB before)" \
    wait_rss $((before + 4096))
check "the switch stages all 16384 spans" tpctl switch big
check "... model_path == task.bin" cmp -s "$MODEL" "$TMP/task.bin"
$measure && check "... and the memory is given back after the switch" wait_rss $((before + 4096))
tpctl mark-good > /dev/null

daemon_finish
