#!/bin/bash
# Threshold signatures (issue 19, item 4): with trust.threshold 2 and trust.bundle_threshold 2,
# one leaked key is not enough. A bundle, a channel and a revocation list signed by one key are
# refused, naming how many signers verified and how many are needed; `taskpatch sign` adds the
# second signer's signature (on another machine: only the file travels) and each is then taken.
# create, publish and revoke also sign with several keys at once.
# shellcheck disable=SC2034  # DPID, SOCK, MODEL, CONF are read by daemon-lib.sh
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/daemon-lib.sh"
. "$(dirname "$0")/nginx-lib.sh"
trap 'stop_daemon; stop_nginx; rm -rf "$TMP"' EXIT

need_fixtures
start_nginx || { fail "nginx"; finish; exit 1; }
pki="$TMP/pki"
www="$TMP/www"
mkdir -p "$www"
first=(--key "$pki/signer.key" --cert "$pki/signer.crt")
second=(--key "$pki/noeku-signer.key" --cert "$pki/noeku-signer.crt")
cat > "$CONF" <<EOC
state_dir: $STATE
socket: $SOCK
model_path: $MODEL
trust:
  ca: $pki/ca.pem
  threshold: 2
  bundle_threshold: 2
$LONG_TRIAL
channel:
  url: https://127.0.0.1:$HTTPS_PORT/stable.channel
  interval: 1
tls:
  ca: $pki/ca.pem
EOC
need_daemon
tpctl provision "$TMP/base.gguf" > /dev/null

echo "# a bundle"
tpctl install "$TMP/json.tpb" > "$TMP/out" 2>&1
rc=$?
check "signed by one key: refused (exit $rc)" test "$rc" -eq 2
check "... saying one signer verified, two are needed" grep -q "1 distinct signer verified (CN=ci-signer), 2 needed" "$TMP/out"
cp "$TMP/json.tpb" "$TMP/json-2sig.tpb"
tp sign "$TMP/json-2sig.tpb" "${second[@]}" > "$TMP/out"
check "taskpatch sign adds the second signature" grep -q "bundle signed, 2 signatures" "$TMP/out"
tp sign "$TMP/json-2sig.tpb" "${second[@]}" > /dev/null 2> "$TMP/out"
check "... the same key again is refused" grep -q "already signed with this key ('CN=noeku-signer')" "$TMP/out"
check "... the bundle still applies and verifies, with both signers" \
    sh -c "'$BIN/taskpatch' verify '$TMP/json-2sig.tpb' --ca '$pki/ca.pem' --threshold 2 |
           grep -q 'OK: CN=ci-signer, CN=noeku-signer'"
tpctl install "$TMP/json-2sig.tpb" --switch > /dev/null
check "signed by two: installed and on trial" wait_status 's["state"] == "trial" and s["active"]["task"] == "json"' 20
check "... byte for byte" same "$TMP/json.gguf"
tpctl mark-good > /dev/null

echo "# a channel"
tp create "$TMP/base.gguf" "$TMP/shout.gguf" -o "$www/shout-1.tpb" --task shout --version 1 "${first[@]}" \
    "${second[@]}" --level 3 > /dev/null
tp publish "$www" --channel stable --serial 1 --desired shout "${first[@]}" > /dev/null
check "signed by one key: not followed" \
    wait_status '"1 distinct signer verified" in (s["channel"]["last_error"] or "") and s["channel"]["serial"] is None' 30
tp sign "$www/stable.channel" "${second[@]}" > /dev/null
check "with the second signature: followed; shout (created with both keys at once) on trial" \
    wait_status 's["channel"]["serial"] == 1 and s["state"] == "trial" and s["active"]["task"] == "shout"' 30
tpctl mark-good > /dev/null

echo "# a revocation list"
tp revoke -o "$TMP/one.revocations" "${first[@]}" --revoke "$pki/expired-signer.crt" > /dev/null
tpctl trust update "$TMP/one.revocations" > "$TMP/out" 2>&1
rc=$?
check "signed by one key: refused (exit $rc)" test "$rc" -eq 2
check "... naming the threshold" grep -q "2 needed" "$TMP/out"
tp revoke -o "$TMP/two.revocations" --version 2 "${first[@]}" "${second[@]}" --revoke "$pki/expired-signer.crt" \
    > /dev/null
tpctl trust update "$TMP/two.revocations" > "$TMP/out" 2>&1
check "signed by two keys at once: taken" grep -q "version 2 accepted" "$TMP/out"
daemon_finish
