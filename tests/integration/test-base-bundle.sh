#!/bin/bash
# Base bundles, the producer's side: taskpatch create --base-bundle codes a new base (here a
# re-release with a few tensors changed) against the old one, or with --full as the whole
# model needing no base; inspect names the role; apply rebuilds the new base byte for byte
# (a full one from nothing); publish lists them in a format-2 channel, marked. The device does
# not replace its base from a bundle yet: tpctl install refuses one plainly and changes
# nothing, and a channel's base bundle is not downloaded.
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

echo "# the device refuses to replace its base from a bundle, for now"
need_daemon
tpctl provision "$TMP/base.gguf" > /dev/null
tpctl install "$TMP/delta.tpb" > "$TMP/out" 2>&1
rc=$?
check "tpctl install of a base bundle: refused (exit $rc)" test "$rc" -ne 0
check "... saying what it is and what to do" grep -q "a base bundle (line base v2): this taskpatchd cannot replace its base from a bundle yet; provision the new base" "$TMP/out"
check "... nothing installed, the base still runs" \
    sh -c "test \"\$('$BIN/tpctl' --socket '$SOCK' --json list | python3 -c 'import json,sys; print(len(json.load(sys.stdin)[\"tasks\"]))')\" = 0 && cmp -s '$MODEL' '$TMP/base.gguf'"
daemon_finish
