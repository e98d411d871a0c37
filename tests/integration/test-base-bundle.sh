#!/bin/bash
# Base bundles, the producer's side: taskpatch create --base-bundle codes a new base (here a
# re-release with a few tensors changed) against the old one, or with --full as the whole
# model needing no base; inspect names the role; apply rebuilds the new base byte for byte
# (a full one from nothing); publish lists them in a format-2 channel, marked. The device
# installs one and switches to it like a task (staged, on trial, rolled back or committed);
# the commit makes it the base, and the other slot is re-provisioned from it in the background.
# shellcheck disable=SC2034  # DPID, SOCK, MODEL, CONF are read by daemon-lib.sh
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/daemon-lib.sh"

need_fixtures
keys=(--key "$TMP/pki/signer.key" --cert "$TMP/pki/signer.crt")
new="$TMP/json.gguf"    # the new base: the old one with a few tensors changed

echo "# creating base bundles"
tp create "$TMP/base.gguf" "$new" --base-bundle -o "$TMP/delta.tpb" --version 2 "${keys[@]}" --level 3 \
    > "$TMP/out" 2>&1
check "a delta base bundle (old base -> new base)" test $? -eq 0
check "... the summary says so" grep -q "base bundle, line base version 2 (signed)" "$TMP/out"
tp create --base-bundle --full "$new" -o "$TMP/full.tpb" --version 2 "${keys[@]}" --level 3 > "$TMP/out" 2>&1
check "a full base bundle (the new base alone)" test $? -eq 0
check "... no 'not local' warning for a full one" sh -c "! grep -q 'not local' '$TMP/out'"
tp create --full "$new" -o "$TMP/x.tpb" "${keys[@]}" > "$TMP/out" 2>&1
check "--full without --base-bundle: a usage error (exit 2)" test $? -eq 2
tp create --base-bundle --full "$TMP/base.gguf" "$new" -o "$TMP/x.tpb" "${keys[@]}" > "$TMP/out" 2>&1
check "--full with two models: a usage error (exit 2)" test $? -eq 2
check "... nothing written" test ! -e "$TMP/x.tpb"
full_size=$(stat -c %s "$TMP/full.tpb") model_size=$(stat -c %s "$new")
echo "    full base bundle: $full_size bytes for a $model_size-byte model"
check "... the full bundle is no larger than the model plus 0.5% ($full_size vs $model_size)" \
    test "$full_size" -le $((model_size + model_size / 200))

echo "# inspect, verify, apply"
tp inspect "$TMP/delta.tpb" > "$TMP/out"
check "inspect: a delta base bundle" grep -q "^role      base bundle (a delta from the base below)" "$TMP/out"
tp inspect --json "$TMP/full.tpb" > "$TMP/out.json"
check "inspect --json: role base, base size 0" \
    test "$(jget role < "$TMP/out.json"),$(jget base.size < "$TMP/out.json")" = "base,0"
check "verify: both signed and sound" sh -c "'$BIN/taskpatch' verify '$TMP/delta.tpb' --ca '$TMP/pki/ca.pem' > /dev/null && '$BIN/taskpatch' verify '$TMP/full.tpb' --ca '$TMP/pki/ca.pem' > /dev/null"
tp apply "$TMP/base.gguf" "$TMP/delta.tpb" -o "$TMP/new-from-delta.gguf" --ca "$TMP/pki/ca.pem" > /dev/null
check "apply the delta to the old base: the new base, byte for byte" cmp -s "$TMP/new-from-delta.gguf" "$new"
tp apply "$TMP/full.tpb" -o "$TMP/new-from-full.gguf" --ca "$TMP/pki/ca.pem" > /dev/null
check "apply the full one with no base: the new base, byte for byte" cmp -s "$TMP/new-from-full.gguf" "$new"
tp apply "$TMP/delta.tpb" -o "$TMP/x.gguf" --ca "$TMP/pki/ca.pem" > "$TMP/out" 2>&1
check "a delta without its base: refused, saying so" grep -q "not a full base bundle: give the BASE" "$TMP/out"
check "... no output" test ! -e "$TMP/x.gguf"

echo "# publish: a format-2 channel marks them"
mkdir -p "$TMP/www"
cp "$TMP/delta.tpb" "$TMP/www/base-2.tpb"
cp "$TMP/json.tpb" "$TMP/www/json-1.tpb"
tp publish "$TMP/www" --channel stable --serial 1 "${keys[@]}" --desired json > "$TMP/out" 2>&1
check "publish with a base bundle in the folder" test $? -eq 0
tp inspect "$TMP/www/stable.channel" > "$TMP/out"
check "... format 2 (format 1 cannot carry a base bundle)" grep -q "format 2," "$TMP/out"
check "... the base bundle is marked" grep -q "base .* (base bundle)" "$TMP/out"

echo "# the device replaces its base from a delta: staged, on trial, committed, the other slot re-provisioned"
need_daemon
sha() { sha256sum "$1" | cut -d' ' -f1; }
st() { tpctl --json status | jget "$1"; }
tpctl provision "$TMP/base.gguf" > /dev/null
tpctl install "$TMP/json.tpb" --switch > /dev/null && tpctl mark-good > /dev/null
check "a task of the old base runs (the base bundle is built from the base bytes behind it)" same "$TMP/json.gguf"
tpctl install "$TMP/shout.tpb" > /dev/null
tpctl install "$TMP/delta.tpb" --switch > "$TMP/out" 2>&1
check "tpctl install --switch of the delta base bundle" test $? -eq 0
check "... model_path holds the new base, byte for byte" same "$new"
check "... on trial, naming the line and the new base" \
    test "$(st trial.task),$(st trial.version),$(st trial.new_base.sha256)" = "base,2,$(sha "$new")"
check "... the base is still the old one until the commit" test "$(st base.sha256)" = "$(sha "$TMP/base.gguf")"
tpctl list > "$TMP/out"
check "... tpctl list marks the base bundle" grep -q "base (base)" "$TMP/out"
tpctl mark-good > /dev/null
check "mark-good: the new base is the base" test "$(st base.sha256),$(st active.task)" = "$(sha "$new"),null"
wait_status "s['reprovision'] is False and s['operation'] is None and all(v['state'] == 'clean' for v in s['slots'].values())" 30
check "... the other slot is re-provisioned in the background: both slots clean" test $? -eq 0
check "... both hold the new base" test "$(st slots.a.sha256),$(st slots.b.sha256)" = "$(sha "$new"),$(sha "$new")"
check "... the slot bytes too" sh -c "cmp -s '$STATE/slots/a.gguf' '$new' && cmp -s '$STATE/slots/b.gguf' '$new'"
check "... the old base's tasks are not offered" test "$(tpctl --json list | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["tasks"]))')" = 0
check "... and removed once both slots hold the new base, with the base bundle" sh -c "test ! -e '$STATE/tasks/json/1.tpb' && test ! -e '$STATE/tasks/shout/1.tpb' && test ! -e '$STATE/tasks/base/2.tpb'"
check "... the log says what happened" grep -q "the base is now base v2" "$TMP/daemon.log"
tpctl switch json > "$TMP/out" 2>&1
check "a task of the old base: not found" grep -q "no version of task 'json' is installed" "$TMP/out"
tpctl install "$TMP/json.tpb" > "$TMP/out" 2>&1
check "... and refused when installed again" grep -q "made for another base" "$TMP/out"
tp create "$new" "$TMP/shout.gguf" -o "$TMP/new-task.tpb" --task shout --version 2 "${keys[@]}" --level 3 > /dev/null
tpctl install "$TMP/new-task.tpb" --switch > /dev/null
check "a task of the new base installs and switches" same "$TMP/shout.gguf"
tpctl mark-good > /dev/null
stop_daemon
start_daemon
check "a restart: the new base, its task active, both slots clean" \
    test "$(st base.sha256),$(st active.task),$(st slots.a.state),$(st slots.b.state),$(st reprovision)" = "$(sha "$new"),shout,clean,clean,False"
tpctl install "$TMP/delta.tpb" > "$TMP/out" 2>&1
check "the delta again: refused, it is a delta from another base" grep -q "a base delta from another base" "$TMP/out"
tpctl install "$TMP/full.tpb" > "$TMP/out" 2>&1
check "the full one: refused, it makes the base the device runs" grep -q "makes the base this device runs already" "$TMP/out"
stop_daemon

echo "# a full base bundle, rolled back; a restart during its trial"
rm -rf "$STATE"
start_daemon
tpctl provision "$TMP/base.gguf" > /dev/null
tpctl install "$TMP/full.tpb" --switch > /dev/null
check "the full base bundle is staged from nothing: model_path holds the new base" same "$new"
tpctl rollback > /dev/null
check "rollback: the old base again" same "$TMP/base.gguf"
check "... the base unchanged, nothing to re-provision" \
    test "$(st base.sha256),$(st reprovision),$(st trial)" = "$(sha "$TMP/base.gguf"),False,null"
tpctl --json status > "$TMP/st.json"
check "... the slot that held the new base is shown as another base's" grep -q '"state":"other-base"' "$TMP/st.json"
tpctl install "$TMP/json.tpb" --switch > /dev/null
check "a task of the old base switches into that slot" same "$TMP/json.gguf"
tpctl mark-good > /dev/null
tpctl switch base > /dev/null
check "tpctl switch LINE stages the new base again" same "$new"
crash_daemon
start_daemon
check "killed during the base's trial: rolled back to the old base's task at restart" same "$TMP/json.gguf"
check "... the base unchanged" test "$(st base.sha256),$(st reprovision)" = "$(sha "$TMP/base.gguf"),False"
tpctl switch base > /dev/null && tpctl mark-good > /dev/null
wait_status "s['reprovision'] is False and s['operation'] is None and all(v['state'] == 'clean' for v in s['slots'].values())" 30
check "the full base committed, the other slot re-provisioned" test $? -eq 0
check "... both slots hold the new base" sh -c "cmp -s '$STATE/slots/a.gguf' '$new' && cmp -s '$STATE/slots/b.gguf' '$new'"

echo "# a task of the new base switched to before the other slot is re-provisioned"
stop_daemon
rm -rf "$STATE"
start_daemon
tpctl provision "$TMP/base.gguf" > /dev/null
tpctl install "$TMP/delta.tpb" --switch > /dev/null
from=$(wc -l < "$TMP/daemon.log")
# mark-good and the install of a task of the new base in one write: the daemon handles both in
# the same turn of its loop, before the re-provisioning the commit asks for can start.
python3 - "$SOCK" "$TMP/new-task.tpb" > "$TMP/out" <<'PY'
import json, os, socket, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); f = s.makefile("rb")
fds = [os.open("/dev/null", os.O_RDONLY), os.open(sys.argv[2], os.O_RDONLY)]   # the first goes with mark-good
socket.send_fds(s, [b'{"cmd":"mark-good"}\n{"cmd":"install","switch":true}\n'], fds)
for _ in range(2):
    print(f.readline().decode().strip())
PY
check "mark-good and the install both answered ok" test "$(grep -c '"ok":true' "$TMP/out")" = 2
check "the task of the new base goes on trial" wait_status 's["state"] == "trial" and s["active"]["task"] == "shout"' 30
check "... byte for byte" same "$TMP/shout.gguf"
check "... the other slot was never re-provisioned: the task was staged into it from the active slot" \
    sh -c "! tail -n +$((from + 1)) '$TMP/daemon.log' | grep -q 'holds the base again'"
tpctl --json status > "$TMP/st.json"
check "... the committed slot holds the new base, clean: the rollback target" python3 -c 'import json, sys
s = json.load(open(sys.argv[1])); other = "a" if s["trial"]["slot"] == "b" else "b"
sys.exit(not (s["slots"][other]["state"] == "clean" and s["slots"][other]["sha256"] == s["base"]["sha256"] == sys.argv[2]))' \
    "$TMP/st.json" "$(sha "$new")"
tpctl rollback > /dev/null
check "rollback: the new base again" same "$new"
wait_status "s['reprovision'] is False and s['operation'] is None and all(v['state'] == 'clean' for v in s['slots'].values())" 30
check "... then the other slot is re-provisioned: both slots hold the new base" \
    sh -c "cmp -s '$STATE/slots/a.gguf' '$new' && cmp -s '$STATE/slots/b.gguf' '$new'"

echo "# a model directory (a three-way split GGUF): its base replaced from a bundle"
stop_daemon
rm -rf "$STATE"
for n in base json; do
    python3 "$(dirname "$0")/../tools/gguf-split.py" --shards 3 --prefix llm "$TMP/$n.gguf" "$TMP/$n.d" > /dev/null
done
tp create "$TMP/base.d" "$TMP/json.d" --base-bundle -o "$TMP/dir-delta.tpb" --version 2 "${keys[@]}" --level 3 \
    > /dev/null
check "a base delta between two model directories" test -s "$TMP/dir-delta.tpb"
MODEL="$STATE/llm"
write_config
start_daemon
tpctl provision "$TMP/base.d" > /dev/null
tpctl install "$TMP/delta.tpb" > "$TMP/out" 2>&1
check "a one-file base bundle for a model directory: refused, saying why" grep -q "a base bundle keeps the model's shape" "$TMP/out"
tpctl install "$TMP/dir-delta.tpb" --switch > /dev/null
check "the directory's new base on trial, file for file" diff -r "$MODEL/" "$TMP/json.d/"
tpctl mark-good > /dev/null
wait_status "s['reprovision'] is False and s['operation'] is None and all(v['state'] == 'clean' for v in s['slots'].values())" 30
check "committed; the other slot directory re-provisioned: both hold the new base" \
    sh -c "diff -r '$STATE/slots/a.dir' '$TMP/json.d' && diff -r '$STATE/slots/b.dir' '$TMP/json.d'"
check "... base-files.json lists the new base's files" test "$(st base.sha256)" = "$("$BIN/taskpatch" hash "$TMP/json.d" | cut -c1-64)"
check "... the list put in place" test ! -e "$STATE/base-files.next.json"
stop_daemon
start_daemon
check "a restart: the new base, both slots clean" \
    test "$(st base.sha256),$(st slots.a.state),$(st slots.b.state)" = "$("$BIN/taskpatch" hash "$TMP/json.d" | cut -c1-64),clean,clean"
daemon_finish
