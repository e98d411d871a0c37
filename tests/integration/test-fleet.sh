#!/bin/bash
# Fleet delivery against a real nginx on loopback: the daemon polls a published channel over
# HTTPS, downloads and installs the bundles for its base, switches to the desired task through
# the trial and reports success only after the commit; a newer serial moves it on; an unchanged
# channel costs a 304; a technician's switch pins its task until the serial changes; a replayed,
# expired or foreign channel, a damaged bundle and a redirect to http:// change nothing and show
# in status; with two mirrors, the second serves when the first fails.
# shellcheck disable=SC2034  # DPID, SOCK, MODEL, CONF are read by daemon-lib.sh
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/daemon-lib.sh"
. "$(dirname "$0")/nginx-lib.sh"
trap 'stop_daemon; stop_nginx; rm -rf "$TMP"' EXIT

need_fixtures
start_nginx || { fail "nginx"; finish; exit 1; }
www="$TMP/www"
keys=(--key "$TMP/pki/signer.key" --cert "$TMP/pki/signer.crt")
publish() { tp publish "$www" --channel stable "${keys[@]}" "$@" > "$TMP/publish.out" 2>&1; }
# polled N: until the daemon has polled the channel N more times (last_poll, to the second, changes
# at each poll, one a second). With N = 2 a whole poll ran after the call: what it did not do
# (switch, install) it will not do for waiting longer.
polled() {
    local i last
    tpctl --json status > "$TMP/st.json" && last=$(jget channel.last_poll < "$TMP/st.json") || return 1
    for ((i = 0; i < $1; i++)); do
        wait_status "s['channel'].get('last_poll') not in (None, '$last')" 20 || return 1
        last=$(jget channel.last_poll < "$TMP/st.json")
    done
}
# idle_on TASK: the last status ($TMP/st.json) is idle, with no operation, TASK active.
idle_on() {
    python3 -c 'import json, sys; s = json.load(open(sys.argv[1]))
sys.exit(not (s["state"] == "idle" and s["operation"] is None and s["active"]["task"] == sys.argv[2]))' \
        "$TMP/st.json" "$1"
}

cp "$TMP/json.tpb" "$www/json-1.tpb"
cp "$TMP/shout.tpb" "$www/shout-1.tpb"
publish --serial 1 --desired json
check "published serial 1 (desired json)" test -s "$www/stable.channel"
fleet_config "https://127.0.0.1:$HTTPS_PORT/stable.channel"
need_daemon
tpctl provision "$TMP/base.gguf" > /dev/null

check "the daemon fetches, installs and switches to json: on trial" \
    wait_status 's["state"] == "trial" and s["active"]["task"] == "json"' 30
check "... the update is pending until the commit" \
    wait_status 's["channel"]["update"]["result"] == "pending"' 20
check "... model_path == json.gguf" same "$TMP/json.gguf"
tpctl mark-good > /dev/null
check "after mark-good: success reported" wait_status 's["channel"]["update"]["result"] == "success"' 20
tpctl status > "$TMP/status.txt"
check "tpctl status shows the channel" grep -q "^Channel: *stable serial 1 from https://.* desired json" "$TMP/status.txt"
check "... and the update's result" grep -q "update json v1: success" "$TMP/status.txt"
check "... then shout is installed too" wait_status '[t["task"] for t in s["tasks"]] == ["json", "shout"]' 20
check "... no download left behind" test -z "$(ls -A "$STATE/downloads" 2> /dev/null)"
check "an unchanged channel costs a 304" wait_status 's["channel"].get("last_poll_http_status") == 304' 20
bytes=$(jget channel.last_poll_bytes < "$TMP/st.json")
check "... of < 1 KB of HTTP ($bytes bytes)" test "$bytes" -lt 1024
grep -c "GET /stable.channel 304" "$NGINX_LOG" > "$TMP/n304"
check "... nginx saw 304s" test "$(cat "$TMP/n304")" -ge 1

echo "# a newer serial moves the fleet on"
cp "$www/stable.channel" "$TMP/serial1.channel"
publish --serial 2 --desired shout
check "serial 2 (desired shout): switched to shout" \
    wait_status 's["state"] == "trial" and s["active"]["task"] == "shout"' 20
tpctl mark-good > /dev/null
check "... success after the commit" \
    wait_status 's["channel"]["update"] == {"task": "shout", "version": 1, "result": "success", "reason": None}' 20
check "... model_path == shout.gguf" same "$TMP/shout.gguf"
check "... the accepted serial is persisted" \
    python3 -c 'import json,sys; sys.exit(json.load(open(sys.argv[1]))["channel"]["serial"] != 2)' "$STATE/state.json"

echo "# a technician's switch pins its task until the serial changes"
tpctl switch json > /dev/null && tpctl mark-good > /dev/null
check "json switched by hand: pinned" wait_status 's["channel"]["pinned"] is True and s["active"]["task"] == "json"' 20
check "... the channel polled twice since" polled 2
check "... and (desired shout) did not switch it back: idle, json" idle_on json
check "... model_path == json.gguf" same "$TMP/json.gguf"
publish --serial 3 --desired shout
check "serial 3: the pin is gone, shout again" \
    wait_status 's["channel"]["pinned"] is False and s["state"] == "trial" and s["active"]["task"] == "shout"' 20
tpctl mark-good > /dev/null

echo "# hostile channels change nothing and show in status"
cp "$TMP/serial1.channel" "$www/stable.channel"
touch -d 2020-01-01 "$www/stable.channel"      # its own ETag (nginx's is mtime-size), never a 304
check "a replayed older channel (serial 1): refused" \
    wait_status '"older than the accepted 3" in (s["channel"]["last_error"] or "")' 25
check "... the model untouched" same "$TMP/shout.gguf"
now=$(date +%s)
TASKPATCH_TEST_NOW=$((now - 3 * 86400)) publish --serial 4 --desired json --expires 1
check "an expired channel: refused" wait_status '"the channel expired on" in (s["channel"]["last_error"] or "")' 25
tp publish "$www" --channel stable --serial 5 --desired json --key "$TMP/pki/other-signer.key" \
    --cert "$TMP/pki/other-signer.crt" > /dev/null 2>&1
check "a channel signed by another CA: refused" \
    wait_status '"certificate" in (s["channel"]["last_error"] or "") and s["channel"]["serial"] == 3' 25
check "... the model untouched, the serial still 3" same "$TMP/shout.gguf"
cp "$TMP/json-v2.tpb" "$www/json-2.tpb"
publish --serial 6 --desired json
size=$(stat -c %s "$www/json-2.tpb")
printf '\x5a' | dd of="$www/json-2.tpb" bs=1 seek=$((size / 2)) conv=notrunc status=none
check "a bundle damaged on the server: refused, named" \
    wait_status '"json-2.tpb" in (s["channel"]["last_error"] or "") and "do not hash" in s["channel"]["last_error"]' 25
check "... the failure reported for json v2" \
    wait_status 's["channel"]["update"]["version"] == 2 and s["channel"]["update"]["result"] == "failure"' 20
check "... the channel polled twice since" polled 2
check "... nothing switched (not even to the json v1 installed): idle, shout" idle_on shout
check "... model_path == shout.gguf" same "$TMP/shout.gguf"
stop_daemon

echo "# mirrors and redirects"
rm -f "$www/json-2.tpb"
publish --serial 7 --desired json
fleet_config "https://127.0.0.1:$HTTPS_PORT/missing.channel" "https://127.0.0.1:$HTTPS_PORT/stable.channel"
need_daemon
check "first mirror 404, second serves: switched to json" \
    wait_status 's["state"] == "trial" and s["active"]["task"] == "json"' 20
tpctl mark-good > /dev/null
check "... nginx saw the 404 and then the channel" grep -q "GET /missing.channel 404" "$NGINX_LOG"
stop_daemon
fleet_config "https://127.0.0.1:$HTTPS_PORT/to-http.channel"
need_daemon
check "a redirect to http:// is refused" wait_status '"only https://" in (s["channel"]["last_error"] or "")' 20
stop_daemon
fleet_config "http://127.0.0.1:$HTTP_PORT/stable.channel"
$WRAP "$BIN/taskpatchd" --config "$CONF" > "$TMP/out" 2>&1
check "a plain http:// channel URL: the configuration is refused" grep -q "needs allow_http: true" "$TMP/out"

daemon_finish
