#!/bin/bash
# Channel format 2 against a real nginx: one channel for a device of two models (llm, det),
# a section each. det follows its own section; llm's section is rolled out to 50% and this
# device's cohort (71 for seed 7 and device id "device-1": channel_cohort()) leaves it out,
# so llm downloads nothing and says why; raised to 80%, the same seed takes it in. The idle
# poll stays one conditional GET (a 304 under 1 KB) for both models. A section naming a base
# the device does not run makes that model wait; once the channel lists a base bundle for it,
# the model takes it (a 50% rollout leaving this device out first, then 100%), then the
# desired task of the new base. taskpatch publish refuses what a device would, and writes
# format 1 when it says all.
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
make_bundle json.gguf www/json-llm.tpb json 1 --model llm
make_bundle shout.gguf www/shout-det.tpb shout 1 --model det

# polled MODEL N: until MODEL's status counts N more polls (channel.polls, one a second).
polled() {
    local from
    tpctl -m "$1" --json status > "$TMP/st.json" && from=$(jget channel.polls < "$TMP/st.json") || return 1
    wait_model "$1" "s['channel'].get('polls', 0) >= ${from:-0} + $2" $(($2 * 10))
}

echo "# taskpatch publish: format 2 for models, refusals"
publish --serial 1 --model llm --desired json --rollout 101
check "--rollout 101: a usage error (exit 2)" test $? -eq 2
check "... saying the range" grep -q "expected a percent from 0 to 100" "$TMP/publish.out"
publish --serial 1 --model llm --rollout-seed 3
check "--rollout-seed without --rollout: exit 2" test $? -eq 2
publish --serial 1 --model llm --desired json --desired shout
check "a model's --desired twice: exit 2" test $? -eq 2
check "... saying so" grep -q "model llm: --desired given twice" "$TMP/publish.out"
publish --serial 1 --model det --desired json
check "det's desired json has no bundle made for det: refused" test $? -eq 1
check "... saying so" grep -q "det: the desired task 'json' has no bundle" "$TMP/publish.out"
publish --serial 1 --model det --base "$TMP/json.gguf" --desired shout
check "--base another model, desired shout made from base.gguf: refused" test $? -eq 1
check "... saying so" grep -q "has no bundle for the model's base" "$TMP/publish.out"
check "... and no channel written" test ! -e "$www/stable.channel"

publish --serial 1 --model det --desired shout --model llm --desired json --rollout 50 --rollout-seed 7
check "published serial 1: det desired shout, llm desired json at 50% (seed 7)" test -s "$www/stable.channel"
tp inspect "$www/stable.channel" > "$TMP/inspect.out"
check "inspect: format 2" grep -q "^channel   stable serial 1, format 2" "$TMP/inspect.out"
check "... llm's rollout" grep -q "^  rollout   50% (seed 7)" "$TMP/inspect.out"
tp inspect --json "$www/stable.channel" > "$TMP/inspect.json"
check "inspect --json: models.llm.rollout" test "$(jget models.llm.rollout.percent < "$TMP/inspect.json")" = 50
check "verify: the bundles of both sections are present" tp verify "$www/stable.channel" --ca "$TMP/pki/ca.pem"

echo "# a device of two models follows one channel"
MODEL="$TMP/llm.gguf"
write_models_config "device_id: device-1
$LONG_TRIAL
channel:
  url: https://127.0.0.1:$HTTPS_PORT/stable.channel
  interval: 1
  low_speed_time: 2
tls:
  ca: $TMP/pki/ca.pem" llm det
need_daemon
tpctl -m llm provision "$TMP/base.gguf" > /dev/null
tpctl -m det provision "$TMP/base.gguf" > /dev/null
check "det switches to shout: on trial" wait_model det 's["state"] == "trial" and s["active"]["task"] == "shout"' 30
check "... det's model_path is shout" cmp -s "$TMP/det.gguf" "$TMP/shout.gguf"
tpctl -m det mark-good > /dev/null
check "... success after det's commit" wait_model det 's["channel"]["update"]["result"] == "success"'
check "llm: cohort 71, not in the 50% rollout" \
    wait_model llm 's["channel"]["rollout"] == {"percent": 50, "seed": 7, "cohort": 71, "included": False}'
check "... status says why" grep -q "rollout at 50%: this device's cohort is 71, not in yet" "$TMP/st.json"
check "... the device id is the configured one" test "$(jget channel.device_id_source < "$TMP/st.json")" = device_id
polled llm 2
check "... llm polled twice: still the base, nothing installed" \
    wait_model llm 's["state"] == "idle" and s["active"]["task"] is None and s["tasks"] == []' 1
check "... nothing downloaded for llm" test -z "$(ls -A "$STATE/models/llm/downloads" 2> /dev/null)"
tpctl -m llm status > "$TMP/status.txt"
check "tpctl status shows the decision" grep -q "rollout at 50%: this device's cohort is 71" "$TMP/status.txt"

echo "# the idle poll: one conditional GET for both models"
check "an unchanged channel costs a 304" wait_model det 's["channel"].get("last_poll_http_status") == 304'
bytes=$(jget channel.last_poll_bytes < "$TMP/st.json")
check "... of < 1 KB of HTTP ($bytes bytes)" test "$bytes" -lt 1024
# The log's GETs counted between two readings of the poll counter on each side, so a loaded
# machine's delay between a reading and the count cannot skew the window: the GETs lie between
# the polls inside it and the polls around it, give or take one in flight.
poll_count() { tpctl -m det --json status | jget channel.polls; }
p_out=$(poll_count) before=$(grep -c "GET /stable.channel" "$NGINX_LOG") p_in=$(poll_count)
polled det 3
q_in=$(poll_count) after=$(grep -c "GET /stable.channel" "$NGINX_LOG") q_out=$(poll_count)
gets=$((after - before)) inner=$((q_in - p_in)) outer=$((q_out - p_out))
check "... $inner to $outer polls, $gets channel GETs for two models (one per poll, give or take one in flight)" \
    test "$gets" -ge $((inner - 1)) -a "$gets" -le $((outer + 1))

echo "# the rollout raised to 80%: the same cohort widens, llm joins"
publish --serial 2 --model det --desired shout --model llm --desired json --rollout 80 --rollout-seed 7
check "llm switches to json: on trial" wait_model llm 's["state"] == "trial" and s["active"]["task"] == "json"' 30
check "... llm's model_path is json" cmp -s "$TMP/llm.gguf" "$TMP/json.gguf"
check "... included now" wait_model llm 's["channel"]["rollout"]["included"] is True'
tpctl -m llm mark-good > /dev/null
check "... success after llm's commit" wait_model llm 's["channel"]["update"]["result"] == "success"'
check "det was left alone: shout, committed" wait_model det 's["state"] == "idle" and s["active"]["task"] == "shout"'
check "both models recorded serial 2" python3 -c 'import json, sys
sys.exit(not all(json.load(open(p))["channel"]["serial"] == 2 for p in sys.argv[1:]))' \
    "$STATE/models/llm/state.json" "$STATE/models/det/state.json"

echo "# a section naming a base the device does not run: that model waits"
publish --serial 3 --model det --base "$TMP/json.gguf" --model llm --desired json
check "det: waits for a base bundle" wait_model det '"waits for a base bundle" in s["channel"]["decision"]'
check "... and stays on shout" wait_model det 's["state"] == "idle" and s["active"]["task"] == "shout"' 1
check "llm (no rollout now): following the channel" wait_model llm '"no rollout" in s["channel"]["decision"]'
check "... the daemon log names each model's section" grep -q "channel: model llm: desired json, 1 bundles; no rollout" "$TMP/daemon.log"

echo "# a base change over the channel: det's base replaced at 50% (this device out), then 100%"
tp create "$TMP/base.gguf" "$TMP/json.gguf" --base-bundle --model det -o "$www/base-det.tpb" --version 2 "${keys[@]}" \
    --level 3 > /dev/null
tp create "$TMP/json.gguf" "$TMP/shout.gguf" --model det --task shout -o "$www/shout2-det.tpb" --version 2 \
    "${keys[@]}" --level 3 > /dev/null
publish --serial 4 --model det --base "$TMP/json.gguf" --desired shout --rollout 50 --rollout-seed 7 --model llm \
    --desired json
check "published: det's base is json.gguf, its base bundle and a task of it listed" test $? -eq 0
check "det: cohort 71, out of the 50% base change" wait_model det '"not in yet" in s["channel"]["decision"]'
polled det 2
check "... nothing downloaded, shout on the old base still runs" \
    sh -c "test -z \"\$(ls -A '$STATE/models/det/downloads' 2> /dev/null)\" && cmp -s '$TMP/det.gguf' '$TMP/shout.gguf'"
publish --serial 5 --model det --base "$TMP/json.gguf" --desired shout --rollout 100 --rollout-seed 7 --model llm \
    --desired json
check "at 100%: det takes the base bundle and switches to the new base (on trial)" \
    wait_model det 's["state"] == "trial" and s["trial"]["task"] == "base" and s["trial"].get("new_base") is not None' 30
check "... det's model_path is the new base" cmp -s "$TMP/det.gguf" "$TMP/json.gguf"
check "... llm untouched" cmp -s "$TMP/llm.gguf" "$TMP/json.gguf"
tpctl -m det mark-good > /dev/null
check "... committed, then the desired task of the new base: shout v2 on trial" \
    wait_model det 's["state"] == "trial" and s["active"]["task"] == "shout" and s["active"]["version"] == 2' 30
check "... byte for byte" cmp -s "$TMP/det.gguf" "$TMP/shout.gguf"
tpctl -m det mark-good > /dev/null
check "... det's base is json.gguf, both slots of it, the channel says success" \
    wait_model det 's["reprovision"] is False and s["base"]["sha256"] == "'"$(sha256sum "$TMP/json.gguf" | cut -d' ' -f1)"'" and s["channel"]["update"]["result"] == "success" and all(v["state"] == "clean" for v in s["slots"].values())' 30
check "... det follows the channel on its new base" wait_model det '"following the channel" in s["channel"]["decision"]' 5
rm -f "$www/base-det.tpb" "$www/shout2-det.tpb"

echo "# format 1 when the command line says all"
rm -f "$www/json-llm.tpb" "$www/shout-det.tpb" "$www/stable.channel"
cp "$TMP/json.tpb" "$www/json-1.tpb"
publish --serial 4 --desired json
tp inspect "$www/stable.channel" > "$TMP/inspect.out"
check "no --model, no rollout, bundles of the model default: format 1" grep -q "format 1," "$TMP/inspect.out"
daemon_finish
