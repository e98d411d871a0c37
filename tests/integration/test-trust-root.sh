#!/bin/bash
# Key rotation through a signed trust root (issue 19, item 3). `taskpatch root` writes the CAs
# and thresholds of each role (root, bundle, channel); a device takes version N+1 only when a
# threshold of the root role it holds (version N's, else trust.root_ca) and of N+1's own root
# role signed it, its version is higher and it has not expired; once taken, its roles replace
# the configuration's, persist across a restart, and never go back.
#
# By `tpctl trust update`: a second bundle CA added (its bundles install), then the first one
# retired and the root role rotated to a new key (v2, signed by the old and the new root
# keys); refused on the way: a root signed only by the old key or only by the new, a replay of
# v1, a v3 signed by the retired root key, an expired root. Over the channel: a device fetches
# the root the channel names *before* it checks the channel's signature, so a channel signed by
# a new channel key (the old one leaked) is followed once the root that trusts it is taken; a
# root signed by another key stops the channel there. An idle poll stays one 304.
# shellcheck disable=SC2034  # DPID, SOCK, MODEL, CONF are read by daemon-lib.sh
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/daemon-lib.sh"
. "$(dirname "$0")/nginx-lib.sh"
trap 'stop_daemon; stop_nginx; rm -rf "$TMP"' EXIT

need_fixtures
pki="$TMP/pki"
old_root=(--key "$pki/channel-signer.key" --cert "$pki/channel-signer.crt")
new_root=(--key "$pki/rotated-signer.key" --cert "$pki/rotated-signer.crt")
cat "$pki/ca.pem" "$pki/bundle2-ca.pem" > "$TMP/both-bundle-cas.pem"
tp create "$TMP/base.gguf" "$TMP/json2.gguf" -o "$TMP/json-2-new-ca.tpb" --task json --version 2 \
    --key "$pki/bundle2-signer.key" --cert "$pki/bundle2-signer.crt" --level 3 > /dev/null
tp create "$TMP/base.gguf" "$TMP/shout.gguf" -o "$TMP/shout-old-ca.tpb" --task shout --version 1 \
    --key "$pki/signer.key" --cert "$pki/signer.crt" --level 3 > /dev/null
cat > "$CONF" <<EOC
state_dir: $STATE
socket: $SOCK
model_path: $MODEL
trust:
  ca: $pki/ca.pem
  channel_ca: $pki/channel-ca.pem
  root_ca: $pki/channel-ca.pem
$LONG_TRIAL
EOC
need_daemon
tpctl provision "$TMP/base.gguf" > /dev/null
tpctl install "$TMP/json.tpb" --switch > /dev/null && tpctl mark-good > /dev/null
check "json v1 (the first bundle CA) committed" wait_status 's["active"]["version"] == 1 and s["state"] == "idle"' 10
tpctl install "$TMP/json-2-new-ca.tpb" > "$TMP/out" 2>&1
rc=$?
check "a bundle of the second bundle CA, not trusted yet: refused (exit $rc)" test "$rc" -eq 2

echo "# trust root v1: the second bundle CA beside the first"
tp root -o "$TMP/v1.root" "${old_root[@]}" --root-ca "$pki/channel-ca.pem" \
    --bundle-ca "$TMP/both-bundle-cas.pem" --channel-ca "$pki/channel-ca.pem" > "$TMP/out"
check "taskpatch root wrote v1 with two bundle CAs" grep -q "bundle   threshold 1, 2 CAs" "$TMP/out"
tpctl trust update "$TMP/v1.root" > "$TMP/out" 2>&1
check "tpctl trust update: taken" grep -q "trust root version 1 accepted" "$TMP/out"
check "... status shows it" wait_status 's["trust"]["root"]["version"] == 1 and not s["trust"]["root"]["expired"]' 10
tpctl status > "$TMP/out"
check "... tpctl status too" grep -q '^Root: *trust root version 1' "$TMP/out"
tpctl install "$TMP/json-2-new-ca.tpb" --switch > "$TMP/out" 2>&1
rc=$?
check "the second CA's bundle installs now (exit $rc)" test "$rc" -eq 0
check "... json v2 on trial" wait_status 's["state"] == "trial" and s["active"]["version"] == 2' 20
tpctl mark-good > /dev/null
check "... committed" same "$TMP/json2.gguf"

echo "# trust root v2: the first bundle CA retired, the root role moved to a new key"
tp root -o "$TMP/v2.root" --from "$TMP/v1.root" "${old_root[@]}" --root-ca "$pki/rotated-ca.pem" \
    --bundle-ca "$pki/bundle2-ca.pem" > /dev/null 2> "$TMP/err"
check "taskpatch root warns that the new root key has not signed yet" grep -q "not signed by its own root role" "$TMP/err"
tpctl trust update "$TMP/v2.root" > "$TMP/out" 2>&1
rc=$?
check "v2 signed by the old root key alone: refused (exit $rc)" test "$rc" -eq 2
check "... the new root role has not signed it" grep -q "is not signed by its own root role" "$TMP/out"
tp root -o "$TMP/v2-new-only.root" --from "$TMP/v1.root" "${new_root[@]}" --root-ca "$pki/rotated-ca.pem" \
    --bundle-ca "$pki/bundle2-ca.pem" > /dev/null 2>&1
tpctl trust update "$TMP/v2-new-only.root" > "$TMP/out" 2>&1
rc=$?
check "v2 signed by the new root key alone: refused (exit $rc)" test "$rc" -eq 2
check "... the root role held has not signed it" grep -q "is not signed as the root role this device holds" "$TMP/out"
tp sign "$TMP/v2.root" "${new_root[@]}" > /dev/null
check "taskpatch verify: v2 against v1 (with both signatures)" tp verify "$TMP/v2.root" --ca "$TMP/v1.root"
tpctl trust update "$TMP/v2.root" > "$TMP/out" 2>&1
check "v2 signed by both: taken" grep -q "trust root version 2 accepted" "$TMP/out"
check "... the first CA's bundles are no longer trusted" wait_status 's["trust"]["root"]["version"] == 2' 10
tpctl install "$TMP/shout-old-ca.tpb" > "$TMP/out" 2>&1
rc=$?
check "a bundle of the retired CA: refused (exit $rc)" test "$rc" -eq 2
check "... naming the role it was checked against" grep -q "trust root v2's bundle role" "$TMP/out"
tpctl switch json --version 1 > "$TMP/out" 2>&1
rc=$?
check "a switch to json v1 (the retired CA's): refused (exit $rc)" test "$rc" -ne 0
tpctl trust update "$TMP/v1.root" > "$TMP/out" 2>&1
rc=$?
check "v1 replayed: refused (exit $rc)" sh -c "test $rc -eq 2 && grep -q 'version 1 is not newer than the one this device holds (version 2)' '$TMP/out'"
tpctl trust update "$TMP/v2.root" > "$TMP/out" 2>&1
check "v2 again: the one held, nothing changes" grep -q "trust root version 2 is the one held already" "$TMP/out"
tp root -o "$TMP/v3-retired.root" --from "$TMP/v2.root" "${old_root[@]}" > /dev/null 2>&1
tpctl trust update "$TMP/v3-retired.root" > "$TMP/out" 2>&1
rc=$?
check "v3 signed by the retired root key: refused (exit $rc)" \
    sh -c "test $rc -eq 2 && grep -q 'not signed as the root role this device holds' '$TMP/out'"
now=$(date +%s)
TASKPATCH_TEST_NOW=$((now - 3 * 86400)) tp root -o "$TMP/v3-expired.root" --from "$TMP/v2.root" "${new_root[@]}" \
    --valid-days 1 > /dev/null 2>&1
tpctl trust update "$TMP/v3-expired.root" > "$TMP/out" 2>&1
rc=$?
check "an expired v3: refused (exit $rc)" sh -c "test $rc -eq 2 && grep -q 'trust root version 3 expired on' '$TMP/out'"

echo "# a restart keeps v2"
stop_daemon
start_daemon
check "after a restart: trust root v2" wait_status 's["trust"]["root"]["version"] == 2' 10
tpctl install "$TMP/shout-old-ca.tpb" > /dev/null 2>&1
rc=$?
check "... the retired CA still refused (exit $rc)" test "$rc" -eq 2
check "... json v2 still active" same "$TMP/json2.gguf"
stop_daemon

echo "# over the channel: the channel key leaked, channels are signed by a new one"
start_nginx || { fail "nginx"; finish; exit 1; }
rm -rf "$STATE" "$MODEL" "$TMP/daemon.log"
www="$TMP/www"
mkdir -p "$www"
cp "$TMP/json.tpb" "$www/json-1.tpb"
tp root -o "$TMP/fleet.root" "${old_root[@]}" --root-ca "$pki/channel-ca.pem" --bundle-ca "$pki/ca.pem" \
    --channel-ca "$pki/rotated-ca.pem" > /dev/null
cat >> "$CONF" <<EOC
channel:
  url: https://127.0.0.1:$HTTPS_PORT/stable.channel
  interval: 1
tls:
  ca: $pki/ca.pem
EOC
tp publish "$www" --channel stable --serial 1 --desired json "${new_root[@]}" --root "$TMP/fleet.root" > /dev/null
check "publish copied the root beside the channel and names it" \
    sh -c "cmp -s '$TMP/fleet.root' '$www/fleet.root' &&
           '$BIN/taskpatch' inspect --json '$www/stable.channel' | grep -q '\"path\": \"fleet.root\"'"
need_daemon
tpctl provision "$TMP/base.gguf" > /dev/null
check "the device takes the root first, then follows the channel signed by the new channel key" \
    wait_status 's["trust"]["root"] and s["trust"]["root"]["version"] == 1 and s["channel"]["serial"] == 1' 30
check "... json v1 on trial" wait_status 's["state"] == "trial" and s["active"]["version"] == 1' 30
tpctl mark-good > /dev/null
check "the root was fetched once" test "$(grep -c 'GET /fleet.root' "$NGINX_LOG")" -eq 1
check "an idle poll: one 304" wait_status 's["channel"]["last_poll_http_status"] == 304' 20
idle=$(tpctl --json status | jget channel.last_poll_bytes)
check "... of $idle bytes of HTTP (a channel without a root: about 309)" test "$idle" -le 320
echo "# a root the root role did not sign stops the channel there"
tp root -o "$TMP/forged.root" --from "$TMP/fleet.root" "${new_root[@]}" > /dev/null 2>&1
cp "$TMP/forged.root" "$www/forged.root"
tp publish "$www" --channel stable --serial 2 --desired json "${new_root[@]}" --root "$www/forged.root" > /dev/null
check "the forged root is refused and the channel not followed (serial stays 1)" \
    wait_status '"not signed as the root role this device holds" in (s["channel"]["last_error"] or "") and
                 s["channel"]["serial"] == 1 and s["trust"]["root"]["version"] == 1' 30
daemon_finish
