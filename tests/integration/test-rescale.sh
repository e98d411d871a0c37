#!/bin/bash
# Rescale spans (issue 20, item 4): an ONNX INT8 weight the graph dequantizes is sent as per-channel
# ratios and a residual against the device's prediction from its base. The models are what a real
# pipeline makes: a float model fine-tuned (a per-channel drift as a folded BatchNorm makes, plus
# dense noise) and quantized again with ONNX Runtime's symmetric int8 rules, scales recomputed
# (tests/tools/make-onnx.py --mode finetune), in QDQ form (DequantizeLinear) and as QLinearConv,
# with per-tensor and per-channel scales. Each bundle applies byte for byte, on the producer and on a
# device; per-tensor scales make it smaller than without the prediction and than bsdiff; a manifest
# whose rescale fields lie is refused before anything is written.
# shellcheck disable=SC2034  # DPID, SOCK, MODEL, CONF are read by daemon-lib.sh
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/daemon-lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)

sh "$root/tests/tools/make-pki.sh" "$TMP/pki" > /dev/null || fail "make-pki.sh"
gen() {  # gen NAME ARGS...: base and task of a fine-tune of 6 of 8 layers of 64 channels
    # (weights of 36 KiB: smaller ones gain less from their own spans than their manifest lines cost)
    local name=$1
    shift
    python3 "$root/tests/tools/make-onnx.py" --channels 64 --layers 8 --seed 5 --change 6 --mode finetune \
        -o "$TMP/$name-base.onnx" --task-out "$TMP/$name-task.onnx" "$@" > /dev/null
}
gen tensor-qdq --quant per-tensor --graph qdq && gen tensor-qlinear --quant per-tensor --graph qlinear &&
    gen channel-qdq --quant per-channel --graph qdq && gen channel-qlinear --quant per-channel --graph qlinear ||
    { fail "make-onnx.py --mode finetune"; finish; exit 1; }
jq_() { python3 -c "import json,sys; d = json.load(open(sys.argv[1])); print($2)" "$1"; }

echo "# the producer"
for m in tensor-qdq tensor-qlinear channel-qdq channel-qlinear; do
    tp create "$TMP/$m-base.onnx" "$TMP/$m-task.onnx" -o "$TMP/$m.tpb" --task t --unsigned --json > "$TMP/$m.json"
    tp apply "$TMP/$m-base.onnx" "$TMP/$m.tpb" -o "$TMP/$m.out" --allow-unsigned --no-sync > /dev/null 2>&1
    check "$m: $(jq_ "$TMP/$m.json" 'd["encodings"]["rescale"]') rescale spans, format $(jq_ "$TMP/$m.json" 'd["format"]'), $(stat -c %s "$TMP/$m.tpb") B; applied byte for byte" \
        cmp -s "$TMP/$m.out" "$TMP/$m-task.onnx"
done
# New int8 values at random: the range-coded i8ac layout cannot fit them, so the producer falls
# back to i8 for that span (or raw, which costs about the same); the bundle still applies and costs
# no more than the new values.
python3 "$root/tests/tools/make-onnx.py" --channels 64 --layers 8 --seed 5 --change 3 --mode random \
    -o "$TMP/random-base.onnx" --task-out "$TMP/random-task.onnx" > /dev/null || fail "make-onnx.py --mode random"
tp create "$TMP/random-base.onnx" "$TMP/random-task.onnx" -o "$TMP/random.tpb" --task t --unsigned > /dev/null 2>&1
tp apply "$TMP/random-base.onnx" "$TMP/random.tpb" -o "$TMP/random.out" --allow-unsigned --no-sync > /dev/null 2>&1
tp inspect "$TMP/random.tpb" --json > "$TMP/random.inspect"
layouts=$(jq_ "$TMP/random.inspect" '" ".join(sorted(set(s.get("layout") or s["encoding"] for s in d["span_list"])))')
size=$(stat -c %s "$TMP/random.tpb") coded=no
case " $layouts " in *" i8ac "* | *" i8acp "*) coded=yes ;; esac
check "random int8 weights: spans coded as: $layouts (no i8ac, no i8acp); $size B for 3 x 36,864 new bytes; applied byte for byte" \
    sh -c "cmp -s '$TMP/random.out' '$TMP/random-task.onnx' && test $coded = no && test $size -le $((3 * 36864 * 105 / 100 + 4096))"

# Per-channel QDQ: a bias's scale is the input's scale times the weight's, channel by channel. The
# span that holds both is coded i8acp, which predicts the one from the other as it decodes.
tp inspect "$TMP/channel-qdq.tpb" --json > "$TMP/channel-qdq.inspect"
check "channel-qdq: the weights and their scales are coded i8acp (inspect --json)" \
    sh -c "test $(jq_ "$TMP/channel-qdq.inspect" 'sum(1 for s in d["span_list"] if s.get("layout") == "i8acp")') -ge 1"

for m in tensor-qdq tensor-qlinear; do
    tp inspect "$TMP/$m.tpb" --json > "$TMP/$m.inspect"
    # A weight whose change is small enough keeps its delta; most changed weights are rescaled.
    n=$(jq_ "$TMP/$m.inspect" 'sum(1 for s in d["span_list"] if s["encoding"] == "rescale" and s["site"].endswith(".weight") and s["rescale"]["type"] == "int8" and s["rescale"]["channels"] in (64, 1))')
    w=$(jq_ "$TMP/$m.inspect" 'sum(1 for s in d["span_list"] if (s["site"] or "").endswith(".weight") and s["encoding"] in ("rescale", "delta"))')
    check "$m: the 6 changed weights are their own spans ($w), $n of them rescale spans of int8 channels (inspect --json)" \
        sh -c "test $w = 6 && test $n -ge 4"
    bsdiff "$TMP/$m-base.onnx" "$TMP/$m-task.onnx" "$TMP/$m.bsdiff"
    # The same producer with the prediction ruled out: a base whose graph names no scale for them.
    sed 's/DequantizeLinear/DequantizeLinaer/g; s/QLinearConv/QLinearConw/g' "$TMP/$m-base.onnx" > "$TMP/$m-nog-base.onnx"
    sed 's/DequantizeLinear/DequantizeLinaer/g; s/QLinearConv/QLinearConw/g' "$TMP/$m-task.onnx" > "$TMP/$m-nog-task.onnx"
    tp create "$TMP/$m-nog-base.onnx" "$TMP/$m-nog-task.onnx" -o "$TMP/$m-nog.tpb" --task t --unsigned --json \
        > "$TMP/$m-nog.json"
    r=$(stat -c %s "$TMP/$m.tpb") g=$(stat -c %s "$TMP/$m-nog.tpb") b=$(stat -c %s "$TMP/$m.bsdiff")
    check "$m: per-tensor scales: $r B, smaller than without the graph's pairing ($g B, 0 rescale spans: $(jq_ "$TMP/$m-nog.json" 'd["encodings"]["rescale"]')) and than bsdiff ($b B)" \
        sh -c "test $r -lt $g && test $r -lt $b"
done
tp verify "$TMP/tensor-qdq.tpb" --allow-unsigned > "$TMP/out" 2>&1
check "verify: the rescale frames decode to their lengths without the base" grep -q OK "$TMP/out"
tp create "$TMP/tensor-qdq-base.onnx" "$TMP/tensor-qdq-task.onnx" --task t --unsigned --dry-run > "$TMP/dry" 2>&1
check "create --dry-run: each rescale span with its candidates' costs" \
    sh -c "grep -c ' rescale .*weight \\[64 channels\\]  (raw ~\\?[0-9]*, delta ~\\?[0-9]*, rescale [0-9]*)' '$TMP/dry' | grep -qx $n"
# Candidates far behind at a fast level are not compressed again at the level asked for (19): their
# costs are the fast level's, marked; at --level 3 every candidate is compressed once, none marked.
tp create "$TMP/tensor-qdq-base.onnx" "$TMP/tensor-qdq-task.onnx" --task t --unsigned --dry-run --json > "$TMP/dry.json"
check "create --json: the candidates a fast trial ruled out are listed (raw, for every rescale span)" python3 -c '
import json, sys
spans = [s for s in json.load(open(sys.argv[1]))["span_list"] if s["encoding"] == "rescale"]
ok = spans and all("raw" in s["candidates"]["screened"] and "rescale" not in s["candidates"]["screened"] and
                   s["candidates"]["raw"] > s["candidates"]["rescale"] == s["payload_bytes"] for s in spans)
sys.exit(0 if ok else 1)' "$TMP/dry.json"
check "create --json: a span that codes several sites says how many, the first and the last, and how many of its bytes are theirs" python3 -c '
import json, sys
spans = json.load(open(sys.argv[1]))["span_list"]
many = [s for s in spans if s["site"] is None and s["sites"]["count"] > 1]
ok = many and all(0 < s["sites"]["site_bytes"] <= s["length"] and s["sites"]["first"] != s["sites"]["last"] for s in many)
sys.exit(0 if ok else 1)' "$TMP/dry.json"
tp create "$TMP/tensor-qdq-base.onnx" "$TMP/tensor-qdq-task.onnx" --task t --unsigned --dry-run --level 3 > "$TMP/dry3" 2>&1
check "... at --level 3 none is (no ~ in the costs)" sh -c "grep -q ' rescale ' '$TMP/dry3' && ! grep -q '~' '$TMP/dry3'"

# A manifest whose rescale fields lie (the bundle unsigned, its zstd-compressed manifest rewritten).
lie() {  # lie IN OUT SED-EXPR: IN with its manifest edited by SED-EXPR
    python3 - "$1" "$2" "$3" <<'PY'
import re, struct, subprocess, sys
d = open(sys.argv[1], "rb").read()
fmt, flags, msize, ssize, psize = struct.unpack_from("<IIQQQ", d, 8)
text = subprocess.run(["zstd", "-d", "-c", "-q"], input=d[64:64 + msize], capture_output=True, check=True).stdout
pat, rep = sys.argv[3].split("/")[:2]
new = re.sub(pat.encode(), rep.encode(), text, count=1)
assert new != text, "no match"
# Compressed from a file, so that the frame declares its decoded size (a reader wants it).
plain = sys.argv[2] + ".yaml"
open(plain, "wb").write(new)
z = subprocess.run(["zstd", "-c", "-q", "-19", plain], capture_output=True, check=True).stdout
head = bytearray(d[:64])
struct.pack_into("<Q", head, 16, len(z))
open(sys.argv[2], "wb").write(bytes(head) + z + d[64 + msize:])
PY
}
for edit in "channels: 64,/channels: 32," "type: int8/type: uint8" "first: 0}/first: 576}" "channels: 64,/channels: 0," \
    "layout: i8ac, rescale/layout: bytes, rescale" "inner: 576/inner: 575"; do
    rm -f "$TMP/lie.onnx"
    if ! lie "$TMP/tensor-qdq.tpb" "$TMP/lie.tpb" "$edit" 2> "$TMP/lie.err"; then
        fail "lie '$edit': could not edit the manifest: $(tail -n 1 "$TMP/lie.err")"
        continue
    fi
    tp apply "$TMP/tensor-qdq-base.onnx" "$TMP/lie.tpb" -o "$TMP/lie.onnx" --allow-unsigned --no-sync > "$TMP/out" 2>&1
    rc=$?
    check "rescale '${edit%%/*}' made '${edit#*/}': refused (exit $rc), nothing written: $(tail -c 100 "$TMP/out")" \
        sh -c "test $rc -ne 0 && test -s '$TMP/out' && test ! -e '$TMP/lie.onnx'"
done

echo "# a device"
MODEL="$STATE/model.onnx"
write_config
# device_round MODEL TASK WHAT: a fresh device provisioned with MODEL's base, MODEL's task installed and
# switched to, then back to the base, byte for byte each way (WHAT: what the bundle's spans are).
device_round() {
    local m=$1 task=$2 what=$3
    stop_daemon
    rm -rf "$STATE"
    need_daemon
    tpctl provision "$TMP/$m-base.onnx" > /dev/null
    tp create "$TMP/$m-base.onnx" "$TMP/$m-task.onnx" -o "$TMP/dev-$m.tpb" --task "$task" \
        --key "$TMP/pki/signer.key" --cert "$TMP/pki/signer.crt" > /dev/null
    tpctl install "$TMP/dev-$m.tpb" --switch > /dev/null 2>&1
    check "$m: install --switch of a bundle of $what: on trial" \
        wait_status "s['state'] == 'trial' and s['active']['task'] == '$task'"
    check "... byte for byte" same "$TMP/$m-task.onnx"
    tpctl mark-good > /dev/null
    tpctl switch --base > /dev/null 2>&1
    check "back to the base (the spans undone)" wait_status 's["state"] == "trial" and not s["active"].get("task")'
    check "... byte for byte" same "$TMP/$m-base.onnx"
}
device_round tensor-qdq ft "rescale spans"
# Per-channel: its i8acp span predicted as the stager decodes it.
device_round channel-qdq ch "an i8acp span"
daemon_finish
