#!/bin/bash
# The revocation list carried by the channel (issue 19, item 1): `taskpatch publish --revocations`
# names it in the index (version, path, size, SHA-256); a device whose list is older fetches it
# once, before it takes the channel, and then acts on it as on `tpctl trust update`: the revoked
# active model (json v2, the only version the device took) is replaced through a trial by the
# base, without pinning the channel, and the fleet's next release (json v3, a good key) follows.
# An idle poll stays one 304 of the same size. A mirror that lacks the list, or serves another
# file under its name, is not followed.
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
cp "$TMP/json.tpb" "$www/json-1.tpb"
tp create "$TMP/base.gguf" "$TMP/json2.gguf" -o "$www/json-2.tpb" --task json --version 2 \
    --key "$pki/noeku-signer.key" --cert "$pki/noeku-signer.crt" --level 3 > /dev/null
root_keys=(--key "$pki/channel-signer.key" --cert "$pki/channel-signer.crt")
publish() { tp publish "$www" --channel stable --desired json "${root_keys[@]}" "$@" > /dev/null; }
cat > "$CONF" <<EOC
state_dir: $STATE
socket: $SOCK
model_path: $MODEL
trust:
  ca: $pki/ca.pem
  channel_ca: $pki/channel-ca.pem
  root_ca: $pki/channel-ca.pem
$LONG_TRIAL
channel:
  url: https://127.0.0.1:$HTTPS_PORT/stable.channel
  interval: 1
tls:
  ca: $pki/ca.pem
EOC
publish --serial 1
need_daemon
tpctl provision "$TMP/base.gguf" > /dev/null
check "the channel's desired task: json v2 (its newest bundle) on trial" \
    wait_status 's["state"] == "trial" and s["active"]["version"] == 2' 30
tpctl mark-good > /dev/null
check "an idle poll: one 304" wait_status 's["channel"]["last_poll_http_status"] == 304' 20
idle_before=$(tpctl --json status | jget channel.last_poll_bytes)

echo "# the channel carries a revocation list"
tp revoke -o "$TMP/stable.revocations" "${root_keys[@]}" --revoke "$pki/noeku-signer.crt" --reason "key leaked" \
    > /dev/null
publish --serial 2 --revocations "$TMP/stable.revocations"
check "publish copied the list beside the channel and names it" \
    sh -c "cmp -s '$TMP/stable.revocations' '$www/stable.revocations' &&
           '$BIN/taskpatch' inspect '$www/stable.channel' | grep -q 'revocations version 1: stable.revocations'"
check "taskpatch verify checks the list beside the channel too" \
    "$BIN/taskpatch" verify "$www/stable.channel" --ca "$pki/channel-ca.pem"
check "the device takes the list (version 1)" wait_status 's["trust"]["revocations"] and s["trust"]["revocations"]["version"] == 1' 30
check "... json v2 is revoked and, no other version installed, the base goes on trial" \
    wait_status 's["state"] == "trial" and s["active"]["task"] is None and [r["version"] for r in s["revoked"]] == [2]' 30
check "... byte for byte" same "$TMP/base.gguf"
tpctl mark-good > /dev/null
check "... committed; the channel followed at serial 2, not pinned by the daemon's own switch" \
    wait_status 's["state"] == "idle" and s["channel"]["serial"] == 2 and not s["channel"]["pinned"]' 20
check "the list was fetched once" test "$(grep -c 'GET /stable.revocations' "$NGINX_LOG")" -eq 1
check "an idle poll: one 304 again" wait_status 's["channel"]["last_poll_http_status"] == 304' 20
idle_after=$(tpctl --json status | jget channel.last_poll_bytes)
check "... of the same size as before the list ($idle_before -> $idle_after bytes of HTTP)" \
    test "$idle_after" -le $((idle_before + 8))
tp create "$TMP/base.gguf" "$TMP/json2.gguf" -o "$www/json-3.tpb" --task json --version 3 \
    --key "$pki/signer.key" --cert "$pki/signer.crt" --level 3 > /dev/null
publish --serial 3
check "a republish without --revocations keeps the list" \
    sh -c "'$BIN/taskpatch' inspect --json '$www/stable.channel' | grep -q '\"path\": \"stable.revocations\"'"
check "... and is followed: json v3 (a good key) on trial" \
    wait_status 's["channel"]["serial"] == 3 and s["state"] == "trial" and s["active"]["version"] == 3' 30
tpctl mark-good > /dev/null
check "... (still one GET of the list)" test "$(grep -c 'GET /stable.revocations' "$NGINX_LOG")" -eq 1

echo "# a mirror without the list, or with another file under its name"
tp revoke -o "$TMP/stable.revocations" --from "$TMP/stable.revocations" "${root_keys[@]}" > /dev/null
# Published beside a copy of the mirror, so that the device never sees serial 4 with its list:
# it polls every second, and would take both between a publish here and a removal.
rm -rf "$TMP/www4" && cp -a "$www" "$TMP/www4"
tp publish "$TMP/www4" --channel stable --desired json "${root_keys[@]}" --serial 4 \
    --revocations "$TMP/stable.revocations" > /dev/null
cp "$TMP/www4/stable.revocations" "$TMP/kept.revocations"
rm "$www/stable.revocations"
cp "$TMP/www4/stable.channel" "$www/stable.channel.new" && mv "$www/stable.channel.new" "$www/stable.channel"
check "a channel whose list is missing: not taken (serial stays 3)" \
    wait_status '"stable.revocations" in (s["channel"]["last_error"] or "") and s["channel"]["serial"] == 3' 30
check "... saying it is not followed without its list" grep -q "404" "$TMP/st.json"
cp "$TMP/r-old.revocations" "$www/stable.revocations" 2> /dev/null || cp "$TMP/json.tpb" "$www/stable.revocations"
check "another file under its name: not taken either" \
    wait_status '"do not match the channel" in (s["channel"]["last_error"] or "") and s["channel"]["serial"] == 3' 30
mv "$TMP/kept.revocations" "$www/stable.revocations"
check "the list back: taken (version 2), the channel followed at serial 4" \
    wait_status 's["trust"]["revocations"]["version"] == 2 and s["channel"]["serial"] == 4' 30

echo "# a list that revokes the key of the channel it comes with"
tp revoke -o "$TMP/self.revocations" --from "$TMP/stable.revocations" "${root_keys[@]}" \
    --revoke "$pki/channel-signer.crt" > /dev/null
publish --serial 5 --revocations "$TMP/self.revocations"
check "the list is taken (version 3), the channel it came with is not followed (serial stays 4)" \
    wait_status 's["trust"]["revocations"]["version"] == 3 and "is revoked by revocation list version 3" in
                 (s["channel"]["last_error"] or "") and s["channel"]["serial"] == 4' 30
daemon_finish
