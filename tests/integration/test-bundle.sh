#!/bin/bash
# The producer end to end on real files: create (signed and unsigned), inspect, verify,
# apply byte for byte, diff; and every bad input: flipped bytes anywhere in a bundle,
# mixed manifests and payloads, foreign and expired signers, wrong bases, unsigned bundles.
. "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)

sh "$root/tests/tools/make-pki.sh" "$TMP/pki" > /dev/null || fail "make-pki.sh"
K=(--key "$TMP/pki/signer.key" --cert "$TMP/pki/signer.crt")
CA=(--ca "$TMP/pki/ca.pem")

# A raw (unknown format) base and a target with three changed runs, far apart.
python3 - "$TMP" <<'PY'
import random, sys
d = sys.argv[1]
rnd = random.Random(5)
base = bytearray(rnd.randbytes(3_000_000))
target = bytearray(base)
for off, n in ((1000, 10), (1_500_000, 4000), (2_999_990, 10)):
    target[off:off + n] = rnd.randbytes(n)
open(f"{d}/base.bin", "wb").write(base)
open(f"{d}/target.bin", "wb").write(target)
other = bytearray(base); other[7] ^= 1
open(f"{d}/other-base.bin", "wb").write(other)
PY

# ---- round trip, signed -----------------------------------------------------------------
tp create "$TMP/base.bin" "$TMP/target.bin" -o "$TMP/t.tpb" --task json --version 2 "${K[@]}" > "$TMP/out" 2>&1
rc=$?
check "create (raw files, signed) exits 0" test $rc -eq 0
if [ $rc -ne 0 ] || [ ! -s "$TMP/t.tpb" ]; then
    cat "$TMP/out"
    fail "no bundle: the remaining checks cannot run"
    finish
    exit 1
fi
size=$(stat -c %s "$TMP/t.tpb")
check "bundle is small: $size bytes for 4020 changed bytes (<= 1.05x + 64 KiB)" test "$size" -le $((4020 * 105 / 100 + 65536))

# SOURCE_DATE_EPOCH: the same inputs make the same bundle, byte for byte (deterministic ECDSA).
for n in 1 2; do
    SOURCE_DATE_EPOCH=1764806400 tp create "$TMP/base.bin" "$TMP/target.bin" -o "$TMP/r$n.tpb" --task json --version 2 \
        "${K[@]}" > /dev/null 2>&1
done
check "SOURCE_DATE_EPOCH: two creates of the same inputs are identical" cmp -s "$TMP/r1.tpb" "$TMP/r2.tpb"
tp inspect --json "$TMP/r1.tpb" > "$TMP/r1.json"
check "... and the bundle's created time is that epoch" grep -q '"created": "2025-12-04T00:00:00Z"' "$TMP/r1.json"
SOURCE_DATE_EPOCH=yesterday tp create "$TMP/base.bin" "$TMP/target.bin" -o "$TMP/r3.tpb" --task json "${K[@]}" \
    > /dev/null 2> "$TMP/err"
check "SOURCE_DATE_EPOCH that is not a number: usage error (exit 2) naming it, no bundle" \
    bash -c "test $? -eq 2 && grep -q SOURCE_DATE_EPOCH '$TMP/err' && test ! -e '$TMP/r3.tpb'"
tp inspect --json "$TMP/t.tpb" > "$TMP/inspect.json"
check "inspect --json has the documented keys" python3 - "$TMP/inspect.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
for k in ("task", "version", "kind", "base", "target", "sites", "spans", "encodings", "changed_bytes",
          "payload_bytes", "bundle_bytes", "signer"):
    assert k in j, k
assert j["task"] == "json" and j["version"] == 2 and j["kind"] == "raw"
assert j["spans"] == 3, j["spans"]
assert set(j["base"]) >= {"sha256", "size"} and set(j["target"]) >= {"sha256", "size"}
assert "ci-signer" in j["signer"], j["signer"]
PY
tp verify "$TMP/t.tpb" "${CA[@]}" > "$TMP/out" 2>&1
check "verify with the right CA exits 0" test $? -eq 0
tp apply "$TMP/base.bin" "$TMP/t.tpb" -o "$TMP/out.bin" "${CA[@]}" > "$TMP/out" 2>&1
check "apply exits 0" test $? -eq 0
check "apply rebuilds the target byte for byte" cmp -s "$TMP/out.bin" "$TMP/target.bin"
tp apply "$TMP/base.bin" "$TMP/t.tpb" -o "$TMP/out2.bin" > "$TMP/out" 2>&1
check "apply without --ca works and says the signature was not checked" grep -q "signature is not" "$TMP/out"

# ---- --json: verify and apply ----------------------------------------------------------
tsha=$(sha256sum "$TMP/target.bin" | cut -d' ' -f1)
bsha=$(sha256sum "$TMP/base.bin" | cut -d' ' -f1)
tp verify --json "$TMP/t.tpb" "${CA[@]}" > "$TMP/verify.json" 2> "$TMP/err"
check "verify --json exits 0, nothing on stderr" bash -c "test $? -eq 0 && test ! -s '$TMP/err'"
check "verify --json: task, version, format, signer, dates, base/target, spans, payload, ok" \
    python3 - "$TMP/verify.json" "$tsha" "$bsha" "$TMP/t.tpb" <<'PY'
import json, os, struct, sys
j = json.load(open(sys.argv[1]))
tsha, bsha, path = sys.argv[2:]
assert j["ok"] is True and j["bundle"] == path, j
assert j["task"] == "json" and j["version"] == 2 and j["format"] == 1, j
assert "CN=ci-signer" in j["signer"] and j["signature_checked"] is True, j
assert j["expires"] is None, j
assert j["base"] == {"sha256": bsha, "size": 3_000_000}, j["base"]
assert j["target"] == {"sha256": tsha, "size": 3_000_000}, j["target"]
assert j["spans"] == 3 and 0 <= j["raw_spans_checked"] <= 3, j
# The payload size is the header's (offset 32).
assert j["payload_bytes"] == struct.unpack_from("<Q", open(path, "rb").read(), 32)[0] > 0, j
PY
tp apply --json "$TMP/base.bin" "$TMP/t.tpb" -o "$TMP/out-json.bin" "${CA[@]}" --no-sync > "$TMP/apply.json" 2> "$TMP/err"
check "apply --json exits 0 and rebuilds the target" \
    bash -c "test $? -eq 0 && cmp -s '$TMP/out-json.bin' '$TMP/target.bin'"
check "apply --json: output, target sha256, bytes from spans + copied = the target, seconds, ok" \
    python3 - "$TMP/apply.json" "$tsha" "$TMP/out-json.bin" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["ok"] is True and j["output"] == sys.argv[3] and j["target_sha256"] == sys.argv[2], j
assert j["task"] == "json" and j["version"] == 2 and j["spans"] == 3 and j["signature_checked"] is True, j
assert j["span_bytes"] >= 4020 and j["span_bytes"] + j["copied_bytes"] == 3_000_000, j
assert isinstance(j["seconds"], float) and 0 <= j["seconds"] < 600, j
PY
# Failures with --json: exit 1, one {"ok": false, "error"} object on stdout, the message on stderr too.
json_refused() { # json_refused DESCRIPTION EXPECTED_WORDS COMMAND...
    local desc=$1 words=$2
    shift 2
    rm -f "$TMP/refused.bin"
    "$@" > "$TMP/jout" 2> "$TMP/jerr"
    local rc=$?
    if [ $rc -eq 1 ] && [ ! -e "$TMP/refused.bin" ] && grep -q -- "$words" "$TMP/jerr" &&
       python3 -c "
import json, sys
j = json.load(open(sys.argv[1]))
assert set(j) == {'ok', 'error'} and j['ok'] is False and sys.argv[2] in j['error'], j
assert j['error'] in open(sys.argv[3]).read(), 'stderr and JSON differ'" "$TMP/jout" "$words" "$TMP/jerr"; then
        ok "$desc"
    else
        fail "$desc (exit $rc): $(head -c 300 "$TMP/jout") / $(head -c 300 "$TMP/jerr")"
    fi
}
json_refused "verify --json, signer from another CA: {ok: false, error}" "does not verify" \
    tp verify --json "$TMP/t.tpb" --ca "$TMP/pki/other-ca.pem"
json_refused "apply --json, wrong base: {ok: false, error}, no output" "wrong base" \
    tp apply --json "$TMP/other-base.bin" "$TMP/t.tpb" -o "$TMP/refused.bin" "${CA[@]}"
json_refused "apply --json, missing base: {ok: false, error}" "No such file" \
    tp apply --json "$TMP/missing.bin" "$TMP/t.tpb" -o "$TMP/refused.bin" "${CA[@]}"
tp verify --json "$TMP/t.tpb" > /dev/null 2>&1
check "verify --json without --ca or --allow-unsigned: usage error (exit 2)" test $? -eq 2

# ---- refusals: nothing written ---------------------------------------------------------
refused() { # refused DESCRIPTION EXPECTED_WORDS COMMAND...
    local desc=$1 words=$2
    shift 2
    rm -f "$TMP/refused.bin"
    "$@" > "$TMP/rout" 2>&1
    local rc=$?
    # Exit 1 (refused), not 2 (usage) or a crash; the message names the problem; no output, no temporary.
    if [ $rc -eq 1 ] && [ ! -e "$TMP/refused.bin" ] && grep -q -- "$words" "$TMP/rout" &&
       ! compgen -G "$TMP/.refused.bin.*" > /dev/null; then
        ok "$desc"
    else
        fail "$desc (exit $rc): $(head -c 300 "$TMP/rout")"
    fi
}
refused "wrong base refused, no output" "wrong base" \
    tp apply "$TMP/other-base.bin" "$TMP/t.tpb" -o "$TMP/refused.bin" "${CA[@]}"
refused "signer from another CA refused" "does not verify\|not correctly signed\|chain" \
    tp verify "$TMP/t.tpb" --ca "$TMP/pki/other-ca.pem"
refused "apply checks the chain too" "chain\|signed" \
    tp apply "$TMP/base.bin" "$TMP/t.tpb" -o "$TMP/refused.bin" --ca "$TMP/pki/other-ca.pem"
refused "a CA certificate cannot sign a bundle" "is a CA certificate (basicConstraints CA:TRUE)" \
    tp create "$TMP/base.bin" "$TMP/target.bin" -o "$TMP/refused.bin" --task json \
    --key "$TMP/pki/ca-signer.key" --cert "$TMP/pki/ca-signer.crt"
refused "nor one with anyExtendedKeyUsage" "anyExtendedKeyUsage is not accepted" \
    tp create "$TMP/base.bin" "$TMP/target.bin" -o "$TMP/refused.bin" --task json \
    --key "$TMP/pki/anyeku-signer.key" --cert "$TMP/pki/anyeku-signer.crt"

tp create "$TMP/base.bin" "$TMP/target.bin" -o "$TMP/u.tpb" --task json --unsigned > /dev/null 2>&1
refused "unsigned bundle refused by apply" "unsigned" tp apply "$TMP/base.bin" "$TMP/u.tpb" -o "$TMP/refused.bin"
refused "unsigned bundle refused by verify" "unsigned" tp verify "$TMP/u.tpb" "${CA[@]}"
tp apply "$TMP/base.bin" "$TMP/u.tpb" -o "$TMP/u.bin" --allow-unsigned > /dev/null 2>&1
check "--allow-unsigned applies an unsigned bundle" cmp -s "$TMP/u.bin" "$TMP/target.bin"
tp verify --json "$TMP/u.tpb" --allow-unsigned > "$TMP/u.json" 2> /dev/null
check "verify --json --allow-unsigned: signer null, signature_checked false, ok" python3 -c "
import json, sys; j = json.load(open(sys.argv[1]))
assert j['signer'] is None and j['signature_checked'] is False and j['ok'] is True, j" "$TMP/u.json"
json_refused "verify --json, unsigned bundle: {ok: false, error}" "unsigned" tp verify --json "$TMP/u.tpb" "${CA[@]}"

# create refuses a signer certificate out of its validity (what every device would refuse).
rm -f "$TMP/e.tpb"
tp create "$TMP/base.bin" "$TMP/target.bin" -o "$TMP/e.tpb" --task json \
    --key "$TMP/pki/expired-signer.key" --cert "$TMP/pki/expired-signer.crt" > "$TMP/out" 2>&1
rc=$?
check "create refuses an expired signer certificate (exit 1), no bundle written" \
    bash -c "test $rc -eq 1 && test ! -e '$TMP/e.tpb'"
check "... naming its notBefore, notAfter and the current time" grep -q \
    "expired-signer.crt: signer certificate 'CN=expired-signer' expired on 2001-01-01 00:00:00 UTC (valid 2000-01-01 00:00:00 UTC to 2001-01-01 00:00:00 UTC; now 20[0-9-]* [0-9:]* UTC): no bundle written" \
    "$TMP/out"
tp create "$TMP/base.bin" "$TMP/target.bin" -o "$TMP/f.tpb" --task json \
    --key "$TMP/pki/future-signer.key" --cert "$TMP/pki/future-signer.crt" > "$TMP/out" 2>&1
rc=$?
check "create refuses a signer certificate not yet valid, no bundle written" \
    bash -c "test $rc -eq 1 && test ! -e '$TMP/f.tpb' && grep -q 'is not valid before 2090-01-01 00:00:00 UTC (valid 2090-01-01' '$TMP/out'"
# Signed while it was valid (the clock moved back to 2000), refused by verify today.
TASKPATCH_TEST_NOW=959817600 tp create "$TMP/base.bin" "$TMP/target.bin" -o "$TMP/e.tpb" --task json \
    --key "$TMP/pki/expired-signer.key" --cert "$TMP/pki/expired-signer.crt" > /dev/null 2>&1
check "create takes the same certificate while it is valid" test -s "$TMP/e.tpb"
refused "expired signer certificate refused" "expired" tp verify "$TMP/e.tpb" "${CA[@]}"

# --expires beyond the signer certificate's notAfter (2040-01-01): a warning, the bundle is still written.
TASKPATCH_TEST_NOW=1790000000 tp create "$TMP/base.bin" "$TMP/target.bin" -o "$TMP/long.tpb" --task json \
    --expires 36500 "${K[@]}" > /dev/null 2> "$TMP/err"
check "--expires past the certificate's notAfter: warned, bundle written" bash -c \
    "grep -q \"warning: --expires makes the bundle expire on 2126-.*after the signer certificate's notAfter 2040-01-01T00:00:00Z\" '$TMP/err' && test -s '$TMP/long.tpb'"
TASKPATCH_TEST_NOW=1790000000 tp create "$TMP/base.bin" "$TMP/target.bin" -o "$TMP/short.tpb" --task json \
    --expires 30 "${K[@]}" > /dev/null 2> "$TMP/err"
check "--expires within the certificate's validity: no warning" bash -c "! grep -q warning '$TMP/err'"

TASKPATCH_TEST_NOW=1790000000 tp create "$TMP/base.bin" "$TMP/target.bin" -o "$TMP/x.tpb" --task json --expires 1 \
    "${K[@]}" > /dev/null 2>&1
TASKPATCH_TEST_NOW=1790000000 tp verify "$TMP/x.tpb" "${CA[@]}" > /dev/null 2>&1
check "a bundle within its expiry verifies" test $? -eq 0
TASKPATCH_TEST_NOW=1790000000 tp verify --json "$TMP/x.tpb" "${CA[@]}" > "$TMP/x.json" 2> /dev/null
check "verify --json shows the expiry (ISO 8601 UTC)" python3 -c "
import json, sys; j = json.load(open(sys.argv[1]))
assert j['expires'] == '2026-09-22T14:13:20Z', j['expires']" "$TMP/x.json"
TASKPATCH_TEST_NOW=1790200000 refused "an expired bundle is refused" "expired" tp verify "$TMP/x.tpb" "${CA[@]}"

# A flipped byte anywhere: header, manifest, signature, payload.
hdr=64
msize=$(python3 -c "import struct,sys; print(struct.unpack_from('<Q', open(sys.argv[1],'rb').read(), 16)[0])" "$TMP/t.tpb")
ssize=$(python3 -c "import struct,sys; print(struct.unpack_from('<Q', open(sys.argv[1],'rb').read(), 24)[0])" "$TMP/t.tpb")
for where in 0 9 12 20 45 $((hdr + 10)) $((hdr + msize / 2)) $((hdr + msize - 2)) $((hdr + msize + 10)) \
             $((hdr + msize + ssize - 5)) $((hdr + msize + ssize + 3)) $((size - 1)); do
    python3 -c "
import sys; b = bytearray(open(sys.argv[1], 'rb').read()); b[int(sys.argv[2])] ^= 0x40
open(sys.argv[3], 'wb').write(b)" "$TMP/t.tpb" "$where" "$TMP/flip.tpb"
    refused "flipped byte at $where: verify refuses" "taskpatch verify: " tp verify "$TMP/flip.tpb" "${CA[@]}"
    refused "flipped byte at $where: apply refuses, no output" "taskpatch apply: " \
        tp apply "$TMP/base.bin" "$TMP/flip.tpb" -o "$TMP/refused.bin" "${CA[@]}"
done

# Mix and match: the manifest (and signature) of one bundle with the payload of another.
python3 - "$TMP" <<'PY'
import sys, random
d = sys.argv[1]
t = bytearray(open(f"{d}/target.bin", "rb").read())
t[1_500_000:1_500_000 + 4000] = random.Random(9).randbytes(4000)
open(f"{d}/target2.bin", "wb").write(t)
PY
tp create "$TMP/base.bin" "$TMP/target2.bin" -o "$TMP/t2.tpb" --task json "${K[@]}" > /dev/null 2>&1
python3 - "$TMP" <<'PY'
import struct, sys
d = sys.argv[1]
a = open(f"{d}/t.tpb", "rb").read(); b = open(f"{d}/t2.tpb", "rb").read()
ma, sa, pa = struct.unpack_from("<QQQ", a, 16); mb, sb, pb = struct.unpack_from("<QQQ", b, 16)
head = a[:64 + ma + sa]
mixed = bytearray(head) + b[64 + mb + sb:]
struct.pack_into("<Q", mixed, 32, pb)
open(f"{d}/mixed.tpb", "wb").write(mixed)
PY
refused "manifest of one release with the payload of another: refused" "SHA-256" \
    tp apply "$TMP/base.bin" "$TMP/mixed.tpb" -o "$TMP/refused.bin" "${CA[@]}"

# Truncated bundles.
for cut in 10 64 $((hdr + msize / 2)) $((size - 1)); do
    head -c "$cut" "$TMP/t.tpb" > "$TMP/trunc.tpb"
    refused "bundle truncated to $cut bytes: refused" "taskpatch apply: " tp apply "$TMP/base.bin" "$TMP/trunc.tpb" -o "$TMP/refused.bin" "${CA[@]}"
done
head -c 100000 /dev/urandom > "$TMP/random.tpb"
refused "a random file is not a bundle" "not a TaskPatch bundle" tp inspect "$TMP/random.tpb"

# Usage errors.
tp create "$TMP/base.bin" "$TMP/target.bin" -o "$TMP/bad.tpb" --task "../evil" --unsigned > /dev/null 2>&1
check "a task name with .. is refused (exit 2)" test $? -eq 2
tp create "$TMP/base.bin" "$TMP/target.bin" -o "$TMP/bad.tpb" --task ok > /dev/null 2>&1
check "create without --key/--cert or --unsigned is refused (exit 2)" test $? -eq 2

# Layout change: a target of another size is a relocating bundle, coded against the base's bytes.
head -c 2500000 "$TMP/target.bin" > "$TMP/short.bin"
tp create "$TMP/base.bin" "$TMP/short.bin" -o "$TMP/s.tpb" --task json --unsigned > "$TMP/out" 2>&1
check "a size change makes a relocating bundle" grep -q "relocating bundle (format 2)" "$TMP/out"
check "a truncated target costs far less than its bytes" test "$(stat -c %s "$TMP/s.tpb")" -lt 250000
head -c 2500000 /dev/urandom > "$TMP/other.bin"
tp create "$TMP/base.bin" "$TMP/other.bin" -o "$TMP/o.tpb" --task json --unsigned > "$TMP/out" 2>&1
check "a file with nothing in common is a whole-file bundle, with a warning" grep -q "no site of the target matches" "$TMP/out"
tp apply "$TMP/base.bin" "$TMP/s.tpb" -o "$TMP/s.bin" --allow-unsigned > /dev/null 2>&1
check "a size change still rebuilds the target byte for byte" cmp -s "$TMP/s.bin" "$TMP/short.bin"

finish
