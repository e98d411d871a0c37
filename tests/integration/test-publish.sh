#!/bin/bash
# taskpatch publish: a folder of bundles becomes a signed channel index; inspect and verify
# read it; the serial must increase; a tampered channel or a changed bundle is caught.
# shellcheck disable=SC2034  # DPID, SOCK, MODEL, CONF are read by daemon-lib.sh
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/daemon-lib.sh"

need_fixtures
pub="$TMP/pub"
mkdir -p "$pub"
cp "$TMP/json.tpb" "$pub/json-1.tpb"
cp "$TMP/json-v2.tpb" "$pub/json-2.tpb"
cp "$TMP/shout.tpb" "$pub/shout-1.tpb"
keys=(--key "$TMP/pki/signer.key" --cert "$TMP/pki/signer.crt")

tp publish "$pub" --channel stable --serial 1 --desired json "${keys[@]}" --json > "$TMP/pub.json" 2> "$TMP/err"
check "publish: exit 0" test $? -eq 0
check "... wrote pub/stable.channel" test -s "$pub/stable.channel"
check "... --json names three bundles, sorted by task then version" \
    test "$(python3 -c 'import json,sys; print(" ".join("%s/%d/%s" % (b["task"], b["version"], b["path"])
        for b in json.load(open(sys.argv[1]))["bundles"]))' "$TMP/pub.json")" = \
    "json/1/json-1.tpb json/2/json-2.tpb shout/1/shout-1.tpb"
check "... the listed SHA-256 is the file's" \
    test "$(jget bundles.2.sha256 < "$TMP/pub.json")" = "$(sha256sum < "$pub/shout-1.tpb" | cut -c1-64)"
check "... serial 1, desired json, no expiry" \
    test "$(jget serial < "$TMP/pub.json") $(jget desired < "$TMP/pub.json") $(jget expires < "$TMP/pub.json")" = "1 json null"

tp inspect "$pub/stable.channel" > "$TMP/out"
check "inspect: the serial" grep -q "channel   stable serial 1" "$TMP/out"
check "... the desired task" grep -q "desired   json" "$TMP/out"
check "... the signer" grep -q "signer    CN=ci-signer" "$TMP/out"
tp verify "$pub/stable.channel" --ca "$TMP/pki/ca.pem" > "$TMP/out" 2>&1
check "verify: OK with every bundle present and matching" grep -q "OK: channel stable serial 1 .* 3 bundles" "$TMP/out"
tp verify "$pub/stable.channel" --ca "$TMP/pki/other-ca.pem" > "$TMP/out" 2>&1
check "verify against another CA: exit 1" test $? -eq 1

tp publish "$pub" --channel stable --serial 1 "${keys[@]}" > "$TMP/out" 2>&1
check "publish with the same serial: refused (exit 2)" test $? -eq 2
check "... says the serial must increase" grep -q "has serial 1 already" "$TMP/out"
tp publish "$pub" --channel stable --serial 2 --desired nosuch "${keys[@]}" > "$TMP/out" 2>&1
check "publish with a desired task without a bundle: exit 1, named" grep -q "'nosuch' has no bundle" "$TMP/out"
tp publish "$pub" --channel stable --serial 2 --desired shout --expires 7 "${keys[@]}" --json > "$TMP/pub.json"
check "publish serial 2, desired shout, expires in 7 days" \
    test "$(jget serial < "$TMP/pub.json") $(jget desired < "$TMP/pub.json")" = "2 shout"
check "... the expiry is set" test "$(jget expires < "$TMP/pub.json")" != null
now=$(date +%s)
TASKPATCH_TEST_NOW=$((now + 8 * 86400)) tp verify "$pub/stable.channel" --ca "$TMP/pki/ca.pem" > "$TMP/out" 2>&1
check "eight days on, verify says it expired" grep -q "the channel expired on" "$TMP/out"

# A bundle replaced after publishing, a flipped byte in the index.
cp "$pub/stable.channel" "$TMP/saved.channel"
cp "$TMP/json.tpb" "$pub/json-2.tpb"
tp verify "$pub/stable.channel" --ca "$TMP/pki/ca.pem" > "$TMP/out" 2>&1
check "a bundle replaced after publishing: verify fails, naming it" grep -q "json-2.tpb: does not match" "$TMP/out"
cp "$TMP/json-v2.tpb" "$pub/json-2.tpb"
python3 -c "
import sys
d = bytearray(open(sys.argv[1], 'rb').read())
i = d.index(b'serial: 2')
d[i + 8] = ord('9')
open(sys.argv[1], 'wb').write(d)" "$pub/stable.channel"
tp verify "$pub/stable.channel" --ca "$TMP/pki/ca.pem" > "$TMP/out" 2>&1
check "serial edited in the index: the signature fails" grep -q "signature does not match" "$TMP/out"
head -c 100 "$TMP/saved.channel" > "$pub/stable.channel"
tp inspect "$pub/stable.channel" > "$TMP/out" 2>&1
check "a truncated channel: a clear error" grep -q "truncated or padded" "$TMP/out"

mkdir -p "$TMP/badname"
cp "$TMP/json.tpb" "$TMP/badname/json 1.tpb"
tp publish "$TMP/badname" --channel stable --serial 1 "${keys[@]}" > "$TMP/out" 2>&1
check "a bundle whose name a URL cannot carry: refused, named" grep -q "json 1.tpb: the name is not" "$TMP/out"
finish
