#!/bin/bash
# Separate trust for bundles and channels (issue 19, item 2): with trust.bundle_ca and
# trust.channel_ca set to two different roots, a channel signed by a bundle signer is refused
# (it does not chain to the channel CA) and nothing is taken from it; the same channel signed
# by the channel signer is followed, and its bundles, signed by the bundle signer, install; a
# bundle signed by the channel signer is refused at install. taskpatchd --check names a role's
# CA file that does not exist, and trust.ca no longer matters once every role (bundle, channel,
# root) has its own.
# Last, the clock (issue 19, item 6): once a channel was accepted, a clock set back to 1970
# checks dates at that channel's time, so a long-expired signer is refused.
# shellcheck disable=SC2034  # DPID, SOCK, MODEL, CONF are read by daemon-lib.sh
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/daemon-lib.sh"
. "$(dirname "$0")/nginx-lib.sh"
trap 'stop_daemon; stop_nginx; rm -rf "$TMP"' EXIT

need_fixtures
start_nginx || { fail "nginx"; finish; exit 1; }
www="$TMP/www"
mkdir -p "$www"
cp "$TMP/json.tpb" "$www/json-1.tpb"
bundle_keys=(--key "$TMP/pki/signer.key" --cert "$TMP/pki/signer.crt")
channel_keys=(--key "$TMP/pki/channel-signer.key" --cert "$TMP/pki/channel-signer.crt")
roles="trust:
  ca: /nonexistent/ca.pem
  bundle_ca: $TMP/pki/ca.pem
  channel_ca: $TMP/pki/channel-ca.pem
  root_ca: $TMP/pki/channel-ca.pem
$LONG_TRIAL
channel:
  url: https://127.0.0.1:$HTTPS_PORT/stable.channel
  interval: 1
tls:
  ca: $TMP/pki/ca.pem"
write_roles_config() {
    printf 'state_dir: %s\nsocket: %s\nmodel_path: %s\n%s\n' "$STATE" "$SOCK" "$MODEL" "$1" > "$CONF"
}

echo "# taskpatchd --check"
write_roles_config "${roles/channel-ca.pem/missing-ca.pem}"
"$BIN/taskpatchd" --config "$CONF" --check > "$TMP/out" 2>&1
check "a role's CA that does not exist: named as a warning" grep -q "warning: trust.channel_ca does not exist" "$TMP/out"
write_roles_config "$roles"
"$BIN/taskpatchd" --config "$CONF" --check > "$TMP/out" 2>&1
check "every role with CAs of its own: trust.ca is not used (no warning)" sh -c "grep -q OK '$TMP/out' && ! grep -q warning '$TMP/out'"

echo "# a channel signed by a bundle signer"
tp publish "$www" --channel stable --serial 1 --desired json "${bundle_keys[@]}" > /dev/null
need_daemon
tpctl provision "$TMP/base.gguf" > /dev/null
check "refused: it does not chain to trust.channel_ca" \
    wait_status '(s["channel"]["last_error"] or "") != "" and s["channel"]["serial"] is None' 20
check "... saying so" grep -q "does not verify against $TMP/pki/channel-ca.pem" "$TMP/st.json"
check "... nothing downloaded or installed" test "$(tpctl --json status | jget tasks)" = "[]"

echo "# the same channel signed by the channel signer"
tp publish "$www" --channel stable --serial 2 --desired json "${channel_keys[@]}" > /dev/null
check "followed: json (signed by the bundle signer) installed and on trial" \
    wait_status 's["state"] == "trial" and s["active"]["task"] == "json"' 30
check "... byte for byte" same "$TMP/json.gguf"
tpctl mark-good > /dev/null

echo "# a bundle signed by the channel signer"
$WRAP "$BIN/taskpatch" create "$TMP/base.gguf" "$TMP/shout.gguf" -o "$TMP/shout-by-channel.tpb" --task shout \
    --version 1 "${channel_keys[@]}" --level 3 > /dev/null
tpctl install "$TMP/shout-by-channel.tpb" > "$TMP/out" 2>&1
rc=$?
check "refused at install (exit $rc)" test "$rc" -ne 0
check "... saying it does not chain to trust.bundle_ca" grep -q "does not verify against $TMP/pki/ca.pem" "$TMP/out"
check "... nothing installed" sh -c "! '$BIN/tpctl' --socket '$SOCK' --json list | grep -q '\"shout\"'"

echo "# time never goes back behind a channel seen (trust.clock: build-floor)"
TASKPATCH_TEST_NOW=959817600 "$BIN/taskpatch" create "$TMP/base.gguf" "$TMP/shout.gguf" -o "$TMP/old-signer.tpb" \
    --task shout --version 2 --key "$TMP/pki/expired-signer.key" --cert "$TMP/pki/expired-signer.crt" --level 1 \
    > /dev/null
check "the accepted channel's time is kept (state.json and floor.json)" \
    sh -c "grep -q '\"time_floor\"' '$STATE/state.json' && grep -q '\"time_floor\"' '$STATE/floor.json'"
stop_daemon
export TASKPATCH_TEST_NOW=86400        # a reboot without a real-time clock: 1970
start_daemon
tpctl install "$TMP/old-signer.tpb" > "$TMP/out" 2>&1
rc=$?
check "a clock in 1970 after a channel was seen: a signer that expired in 2001 is refused (exit $rc)" test "$rc" -ne 0
check "... its dates checked at the channel's time" grep -q "expired" "$TMP/out"
stop_daemon
unset TASKPATCH_TEST_NOW
start_daemon
daemon_finish
