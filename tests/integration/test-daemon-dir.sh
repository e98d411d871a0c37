#!/bin/bash
# Models of several files on the device: a slot is a directory and model_path a symlink to the
# active one. A three-way split GGUF is provisioned from a directory descriptor, tasks whose
# spans fall in different shards are staged in place (every file leased), into a fresh copy of
# the whole directory when one shard is busy, and back to the base; a relocating safetensors
# task (a tensor moved between shards) is built into a fresh directory; an ONNX model with
# external data goes the same way. Each result is the task directory file for file. A slot
# directory changed behind the daemon's back (a byte, a file added, a symlink) loses its seal
# and is rebuilt; a restart trusts intact seals; a directory holding a symlink is refused.
# shellcheck disable=SC2034  # DPID, SOCK, MODEL, CONF are read by daemon-lib.sh
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/daemon-lib.sh"

need_fixtures
split=(python3 "$root/tests/tools/gguf-split.py")
for m in base json shout; do
    "${split[@]}" --shards 3 --prefix llm "$TMP/$m.gguf" "$TMP/$m-dir" > /dev/null || { fail "split $m"; finish; exit 1; }
done
dir_bundle() {      # dir_bundle BASE-DIR TASK-DIR OUT TASK VERSION
    $WRAP "$BIN/taskpatch" create "$TMP/$1" "$TMP/$2" -o "$TMP/$3" --task "$4" --version "$5" \
        --key "$TMP/pki/signer.key" --cert "$TMP/pki/signer.crt" --level 3 > /dev/null
}
check "bundle json (split GGUF)" dir_bundle base-dir json-dir json-dir.tpb json 1
check "bundle shout (split GGUF)" dir_bundle base-dir shout-dir shout-dir.tpb shout 1
files=$("$BIN/taskpatch" inspect --json "$TMP/json-dir.tpb" | python3 -c "
import json, sys
m = json.load(sys.stdin)
print(len({s['file'] for s in m['span_list']}))")
check "json's spans lie in more than one shard ($files files)" test "$files" -gt 1

MODEL="$STATE/llm"
write_config
need_daemon

# same_dir DIR: model_path holds DIR's files, byte for byte, and nothing else.
same_dir() { diff -r "$MODEL/" "$1/" > /dev/null; }

check "provision a directory (split GGUF)" tpctl provision "$TMP/base-dir"
check "model_path -> slots/a.dir" test "$(readlink "$MODEL")" = "$STATE/slots/a.dir"
check "model_path/ is the base, file for file" same_dir "$TMP/base-dir"
check "slot b too" diff -r "$STATE/slots/b.dir" "$TMP/base-dir"
check "base-files.json lists the 3 shards" test "$(jget files < "$STATE/base-files.json" | grep -o "'path'" | wc -l)" = 3
check "the seal counts 3 files" grep -q '"count": 3' "$STATE/slots/a.seal"
tpctl --json status > "$TMP/st.json"
check "status: the base is a directory of 3 files" test "$(jget base.files < "$TMP/st.json" | grep -o "'path'" | wc -l)" = 3

check "install json" tpctl install "$TMP/json-dir.tpb"
check "install shout" tpctl install "$TMP/shout-dir.tpb"

# switch_to NAME DIR SLOT WHAT: switch, check the files, the slot; mark good.
switch_to() {
    local name=$1 want=$2 slot=$3 what=$4 args
    if [ "$name" = base ]; then args=(--base); else args=("$name"); fi
    : > "$TMP/daemon.log"
    check "switch $name ($what)" tpctl switch "${args[@]}"
    check "... model_path/ is $(basename "$want"), file for file" same_dir "$want"
    check "... it is slot $slot" test "$(readlink "$MODEL")" = "$STATE/slots/$slot.dir"
    check "... and mark-good" tpctl mark-good
}

switch_to json "$TMP/json-dir" b "in place"
check "... staged in place" grep -q "staged json v1: .* into the slot, " "$TMP/daemon.log"
check "... no fresh copy" sh -c "! grep -q 'fresh copy' '$TMP/daemon.log'"
written=$(tpctl --json status | jget counters.last_switch_slot_bytes)
spans=$("$BIN/taskpatch" inspect --json "$TMP/json-dir.tpb" | python3 -c "
import json, sys
print(sum(s['length'] for s in json.load(sys.stdin)['span_list']))")
check "... slot bytes written ($written) <= 1.1 x the spans ($spans)" test "$((written * 10))" -le "$((spans * 11))"

switch_to shout "$TMP/shout-dir" a "in place, undoing nothing (slot a held the base)"

# One shard of slot b is open elsewhere: the whole directory is staged into a fresh copy, and
# the reader keeps the file it opened.
shard2=$(basename "$(ls "$STATE/slots/b.dir/"*-00002-of-00003.gguf)")
exec 3< "$STATE/slots/b.dir/$shard2"
switch_to base "$TMP/base-dir" b "while slot b's $shard2 is busy"
check "... a fresh copy of the directory" grep -q "staging into a fresh copy" "$TMP/daemon.log"
check "... the log names the busy file" grep -q "$shard2: another process has it open" "$TMP/daemon.log"
check "... the reader still reads json's $shard2" cmp -s /dev/fd/3 "$TMP/json-dir/$shard2"
exec 3<&-
check "... no temporary left in slots/" sh -c "! ls -a '$STATE/slots' | grep -q taskpatch"

check "rollback" tpctl rollback
check "... model_path/ is shout again" same_dir "$TMP/shout-dir"
check "... mark-good" tpctl mark-good

# A restart trusts intact seals: no rebuild, no scrub.
stop_daemon
: > "$TMP/daemon.log"
need_daemon
check "restart: no seal broken" sh -c "! grep -q 'not the one sealed' '$TMP/daemon.log'"
switch_to json "$TMP/json-dir" b "after a restart"

# Behind the daemon's back: a file added to the inactive slot, then a byte changed, then a symlink.
inactive=$(tpctl --json status | python3 -c "import json,sys; print('a' if json.load(sys.stdin)['active']['slot'] == 'b' else 'b')")
echo stray > "$STATE/slots/$inactive.dir/stray.txt"
stop_daemon; : > "$TMP/daemon.log"; need_daemon
check "a file added to slot $inactive: its seal is broken" grep -q "slot $inactive: the directory's files are not the one sealed" "$TMP/daemon.log"
switch_to shout "$TMP/shout-dir" "$inactive" "into the slot that had a stray file"
check "... the stray file is gone" test ! -e "$STATE/slots/$inactive.dir/stray.txt"

inactive=$(tpctl --json status | python3 -c "import json,sys; print('a' if json.load(sys.stdin)['active']['slot'] == 'b' else 'b')")
f1=$(ls "$STATE/slots/$inactive.dir/" | head -n 1)
printf 'X' | dd of="$STATE/slots/$inactive.dir/$f1" bs=1 seek=100 conv=notrunc status=none
stop_daemon; : > "$TMP/daemon.log"; need_daemon
check "a byte changed in slot $inactive's $f1: its seal is broken" grep -q "slot $inactive: the directory's files are not the one sealed" "$TMP/daemon.log"
switch_to base "$TMP/base-dir" "$inactive" "into the slot with a changed byte"

inactive=$(tpctl --json status | python3 -c "import json,sys; print('a' if json.load(sys.stdin)['active']['slot'] == 'b' else 'b')")
ln -s /etc/passwd "$STATE/slots/$inactive.dir/evil"
stop_daemon; : > "$TMP/daemon.log"; need_daemon
check "a symlink in slot $inactive: its seal is broken" grep -q "slot $inactive: the directory's files are not the one sealed" "$TMP/daemon.log"
switch_to json "$TMP/json-dir" "$inactive" "into the slot holding a symlink"
check "... the symlink is gone" test ! -L "$STATE/slots/$inactive.dir/evil"

# The active slot's files touched (same bytes, new mtime): the scrub at start finds the bytes
# right and seals the slot again.
active=$(tpctl --json status | jget active.slot)
touch "$STATE/slots/$active.dir/$f1"
stop_daemon; : > "$TMP/daemon.log"; need_daemon
check "touched active slot: scrubbed and sealed again" wait_until 30 grep -q "bytes match the seal but the files were touched" "$TMP/daemon.log"

# Refused: a model directory holding a symlink, given to provision.
mkdir -p "$TMP/evil-dir"
cp "$TMP/base-dir/"* "$TMP/evil-dir/"
ln -s /etc/passwd "$TMP/evil-dir/passwd"
if tpctl provision "$TMP/evil-dir" > /dev/null 2> "$TMP/err"; then
    fail "provision of a directory with a symlink: accepted"
else
    check "provision of a directory with a symlink: refused, naming it ($(head -c 160 "$TMP/err"))" grep -q "passwd: a symbolic link" "$TMP/err"
fi
check "... the device is unchanged" same_dir "$TMP/json-dir"

# ---- sharded safetensors, a tensor moved between shards: a relocating bundle, built ----------
shards=(python3 "$root/tests/tools/safetensors-shards.py")
"${shards[@]}" "$TMP/st-base" --size-mb 2 --shards 2 > /dev/null &&
    "${shards[@]}" "$TMP/st-task" --size-mb 2 --shards 2 --change 3 --mode lowrank --move model.layers.0.mlp.up_proj.weight > /dev/null ||
    { fail "safetensors fixtures"; finish; exit 1; }
check "bundle st (relocating)" dir_bundle st-base st-task st.tpb st 1
check "... a relocating bundle" test "$("$BIN/taskpatch" inspect --json "$TMP/st.tpb" | jget format)" = 2
check "provision the safetensors directory" tpctl provision "$TMP/st-base"
check "... model_path/ is the base" same_dir "$TMP/st-base"
check "... the one-file slots of the GGUF are gone" sh -c "! ls '$STATE/slots' | grep -q '^a$'"
check "install st" tpctl install "$TMP/st.tpb"
switch_to st "$TMP/st-task" b "relocating: a tensor moved to the other shard"
check "... built from base bytes" grep -q "built from base bytes" "$TMP/daemon.log"
switch_to base "$TMP/st-base" a "back to the base"
switch_to st "$TMP/st-task" b "the relocated task again"
switch_to base "$TMP/st-base" a "and the base again"

# ---- ONNX with external data, in a subdirectory ----------------------------------------------------------------
onnx=(python3 "$root/tests/tools/make-onnx.py")
mkdir -p "$TMP/ob" "$TMP/ot"
"${onnx[@]}" --kind matmul --dim 128 --layers 6 -o "$TMP/ob/model.onnx" --task-out "$TMP/ot/model.onnx" \
    --change 2 --mode lowrank --external one --location weights/model.data --checksum > /dev/null ||
    { fail "onnx fixtures"; finish; exit 1; }
check "bundle onnx" dir_bundle ob ot onnx.tpb onnx 1
check "provision the ONNX directory" tpctl provision "$TMP/ob"
check "install onnx" tpctl install "$TMP/onnx.tpb"
switch_to onnx "$TMP/ot" b "ONNX external data in a subdirectory, in place"
check "... staged in place" grep -q "staged onnx v1: .* into the slot, " "$TMP/daemon.log"
check "... model_path/model.onnx is the task's" cmp -s "$MODEL/model.onnx" "$TMP/ot/model.onnx"
check "... and model_path/weights/model.data" cmp -s "$MODEL/weights/model.data" "$TMP/ot/weights/model.data"
switch_to base "$TMP/ob" a "ONNX back to the base"

# A one-file model again: the directory slots go, model_path is a file's link.
check "provision a one-file model over a directory model" tpctl provision "$TMP/base.gguf"
check "... model_path is the file" cmp -s "$MODEL" "$TMP/base.gguf"
check "... no directory slots left" sh -c "! ls '$STATE/slots' | grep -q '\.dir$'"
check "... no base-files.json trusted for it" tpctl status
finish
