#!/bin/bash
# The spool folder: a bundle dropped in (as from a USB stick or scp) is verified and installed,
# then moved to installed/; a bad one goes to rejected/ with a .reason file; dot-names and other
# files are left alone; bundles dropped while the daemon is down or busy are taken later.
# shellcheck disable=SC2034  # DPID, SOCK, MODEL, CONF are read by daemon-lib.sh
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/daemon-lib.sh"

need_fixtures
spool="$TMP/spool"
write_config "$LONG_TRIAL
spool: $spool"
need_daemon
check "the spool folder is created 0700" test "$(stat -c %a "$spool")" = 700
tpctl provision "$TMP/base.gguf" > /dev/null

# wait_file PATH [SECONDS]
wait_file() { wait_until "${2:-20}" test -e "$1"; }
installed() { tpctl --json list | python3 -c 'import json,sys
print(" ".join("%s/%d" % (t["task"], t["version"]) for t in json.load(sys.stdin)["tasks"]))'; }

cp "$TMP/json.tpb" "$spool/json.tpb"
check "a dropped bundle is installed and moved to installed/" wait_file "$spool/installed/json.tpb"
check "... json v1 is installed" test "$(installed)" = "json/1"
check "... nothing left in the folder" test ! -e "$spool/json.tpb"
check "... the active model untouched (install only)" same "$TMP/base.gguf"

size=$(stat -c %s "$TMP/shout.tpb")
cp "$TMP/shout.tpb" "$TMP/flipped.tpb"
printf '\xff' | dd of="$TMP/flipped.tpb" bs=1 seek=$((size - 10)) conv=notrunc status=none
cp "$TMP/flipped.tpb" "$spool/shout.tpb"
check "a damaged bundle is moved to rejected/" wait_file "$spool/rejected/shout.tpb.reason"
check "... its .reason says why" grep -q "payload does not match" "$spool/rejected/shout.tpb.reason"
check "... not installed" test "$(installed)" = "json/1"
"$BIN/taskpatch" create "$TMP/json.gguf" "$TMP/shout.gguf" -o "$TMP/other-base.tpb" --task shout --version 3 \
    --key "$TMP/pki/signer.key" --cert "$TMP/pki/signer.crt" --level 1 > /dev/null
cp "$TMP/other-base.tpb" "$spool/other.tpb"
check "a bundle for another base: rejected, said so" wait_file "$spool/rejected/other.tpb.reason"
check "... 'another base'" grep -q "another base" "$spool/rejected/other.tpb.reason"

# Copied under a dot-name, then renamed into place: taken at the rename, not before.
cp "$TMP/shout.tpb" "$spool/.shout.tpb.partial"
echo "not a bundle" > "$spool/README.txt"
# Evidence that the spool looked at the folder since: a junk bundle dropped after them is refused
# (the spool takes the smallest name first, and "." sorts before "m").
echo "junk" > "$TMP/marker.tpb" && mv "$TMP/marker.tpb" "$spool/marker.tpb"
check "the spool scanned the folder since (a junk marker.tpb dropped after them is rejected)" \
    wait_file "$spool/rejected/marker.tpb.reason"
check "a dot-name is left alone" test -e "$spool/.shout.tpb.partial"
mv "$spool/.shout.tpb.partial" "$spool/shout.tpb"
check "... renamed into place: installed" wait_file "$spool/installed/shout.tpb"
check "... other files are left alone" test -e "$spool/README.txt"
check "... json v1 and shout v1 installed" test "$(installed)" = "json/1 shout/1"

# Busy (a trial runs): the bundle waits until the trial ends.
check "switch json: on trial" test "$(tpctl --json switch json | jget state)" = trial
cp "$TMP/json-v2.tpb" "$spool/json-2.tpb"
# Nothing shows while the spool waits. But the daemon's loop runs one source at a time, the longest
# pending first: once three requests made after the drop are answered, the drop's inotify event and
# the look at the folder it schedules have run.
for _ in 1 2 3; do tpctl status > /dev/null; done
check "during a trial the spool waits" test -e "$spool/json-2.tpb"
tpctl mark-good > /dev/null
check "... and installs once the trial is committed" wait_file "$spool/installed/json-2.tpb"
check "... the log says so: the spool's install comes after the commit" awk '
    /committed: json v1/ { c = NR }
    /spool: installing json-2.tpb/ { i = NR }
    END { exit !(c && i > c) }' "$TMP/daemon.log"

# Dropped while the daemon is down: taken at start.
stop_daemon
make_bundle shout.gguf shout-v2.tpb shout 2
cp "$TMP/shout-v2.tpb" "$spool/shout-2.tpb"
need_daemon
check "a bundle dropped while the daemon was down is taken at start" wait_file "$spool/installed/shout-2.tpb"
check "... json v1, v2 and shout v1, v2 installed" test "$(installed)" = "json/1 json/2 shout/1 shout/2"

make_bundle json.gguf json-v3.tpb json 3
# Still being copied in (open for writing, half its bytes): not taken until it is closed.
half=$(($(stat -c %s "$TMP/json-v3.tpb") / 2))
exec 3> "$spool/a-slow.tpb"
head -c "$half" "$TMP/json-v3.tpb" >&3
echo "junk" > "$TMP/marker2.tpb" && mv "$TMP/marker2.tpb" "$spool/marker2.tpb"
check "a bundle still being written is not taken (a junk marker2.tpb dropped after it is rejected first)" \
    wait_file "$spool/rejected/marker2.tpb.reason"
check "... the half-written one is still there, neither rejected nor installed" \
    sh -c "test -e '$spool/a-slow.tpb' && test ! -e '$spool/rejected/a-slow.tpb.reason'"
tail -c +$((half + 1)) "$TMP/json-v3.tpb" >&3
exec 3>&-
check "... once closed: installed" wait_file "$spool/installed/a-slow.tpb"
check "... json v3 installed" test "$(installed)" = "json/1 json/2 json/3 shout/1 shout/2"

# A device of two models: each bundle goes to the model its manifest names.
stop_daemon
make_bundle json.gguf json-llm.tpb json 1 --model llm
make_bundle shout.gguf shout-det.tpb shout 1 --model det
make_bundle shout.gguf shout-wake.tpb shout 1 --model wake
rm -rf "$STATE" "$spool"
MODEL="$TMP/llm.gguf"
write_models_config "$LONG_TRIAL
spool: $spool" llm det
need_daemon
tpctl -m llm provision "$TMP/base.gguf" > /dev/null
tpctl -m det provision "$TMP/base.gguf" > /dev/null
minstalled() { tpctl -m "$1" --json list | python3 -c 'import json,sys
print(" ".join("%s/%d" % (t["task"], t["version"]) for t in json.load(sys.stdin)["tasks"]))'; }
cp "$TMP/json-llm.tpb" "$spool/a-json-llm.tpb"
cp "$TMP/shout-det.tpb" "$spool/b-shout-det.tpb"
cp "$TMP/shout-wake.tpb" "$spool/c-shout-wake.tpb"
check "two models: llm's bundle installed for llm" wait_file "$spool/installed/a-json-llm.tpb"
check "... det's for det" wait_file "$spool/installed/b-shout-det.tpb"
check "... each model has its own" test "$(minstalled llm),$(minstalled det)" = "json/1,shout/1"
check "... a bundle for a model the device does not have: rejected" wait_file "$spool/rejected/c-shout-wake.tpb.reason"
check "... saying which models it has" grep -q "made for model 'wake'; this device's models are llm, det" \
    "$spool/rejected/c-shout-wake.tpb.reason"
daemon_finish
