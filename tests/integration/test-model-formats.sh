#!/bin/bash
# The formats fleets ship as several files, each made by a generator written to the format's
# public description: ONNX with external data (one data file with checksums, and a file per
# tensor), sharded BF16 safetensors with its index (a tensor moved between shards), and a
# three-way split GGUF (byte for byte what llama-gguf-split writes). For each: create (signed)
# -> verify -> apply rebuilds the task directory file for file; the safetensors output is read
# back tensor by tensor by an independent reader (struct + json). Bad input — a location that
# escapes the directory or names a missing file, tensors that overlap, a wrong checksum, an
# index naming an absent shard or a tensor the shard lacks, a split with a missing or an extra
# shard — is refused naming the file and the field, and no bundle is written.
. "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)

sh "$root/tests/tools/make-pki.sh" "$TMP/pki" > /dev/null || fail "make-pki.sh"
K=(--key "$TMP/pki/signer.key" --cert "$TMP/pki/signer.crt")
CA=(--ca "$TMP/pki/ca.pem")
onnx=(python3 "$root/tests/tools/make-onnx.py")
shards=(python3 "$root/tests/tools/safetensors-shards.py")

# roundtrip NAME BASE TASK: a signed bundle, verified, applied; the output is the task.
roundtrip() {
    local name=$1 base=$2 task=$3
    if ! tp create "$base" "$task" --task "$name" --version 1 "${K[@]}" -o "$TMP/$name.tpb" > "$TMP/$name.out" 2>&1; then
        fail "$name: create: $(cat "$TMP/$name.out")"
        return
    fi
    check "$name: verify" tp verify "$TMP/$name.tpb" "${CA[@]}" > /dev/null
    check "$name: apply" tp apply "$base" "$TMP/$name.tpb" "${CA[@]}" -o "$TMP/$name-out" > /dev/null
    check "$name: the output is the task, file for file" diff -r "$TMP/$name-out" "$task"
}

# refused NAME DIR WANT: create DIR TASK fails, says WANT, writes no bundle.
refused() {
    local name=$1 dir=$2 want=$3 task=$4
    if tp create "$dir" "$task" --task bad --version 1 --unsigned -o "$TMP/bad.tpb" > /dev/null 2> "$TMP/err"; then
        fail "$name: accepted"
    elif ! grep -q -- "$want" "$TMP/err"; then
        fail "$name: message lacks '$want': $(cat "$TMP/err")"
    elif [ -e "$TMP/bad.tpb" ]; then
        fail "$name: a bundle was written"
    else
        ok "$name: refused ($(head -c 200 "$TMP/err"))"
    fi
}

# same-length byte replacement in a file (protobuf lengths stay valid)
patch_bytes() { python3 - "$@" << 'PY'
import sys
path, old, new = sys.argv[1], sys.argv[2].encode(), sys.argv[3].encode()
assert len(old) == len(new)
b = open(path, "rb").read()
assert old in b, (path, old)
open(path, "wb").write(b.replace(old, new, 1))
PY
}

# ---- ONNX, external data ------------------------------------------------------------------------
mkdir -p "$TMP/o1b" "$TMP/o1t" "$TMP/o2b" "$TMP/o2t"
"${onnx[@]}" --kind matmul --dim 256 --layers 8 -o "$TMP/o1b/model.onnx" --task-out "$TMP/o1t/model.onnx" \
    --change 3 --mode lowrank --external one --checksum > /dev/null
"${onnx[@]}" --kind conv --layers 12 --channels 16 -o "$TMP/o2b/model.onnx" --task-out "$TMP/o2t/model.onnx" \
    --change 4 --mode random --external per-tensor --size-threshold 1024 > /dev/null
roundtrip onnx-one "$TMP/o1b" "$TMP/o1t"
roundtrip onnx-per-tensor "$TMP/o2b" "$TMP/o2t"
tp diff --json "$TMP/o1b" "$TMP/o1t" > "$TMP/d.json"
check "onnx-one: the changed sites are the 3 weights, in the data file" python3 - "$TMP/d.json" "$TMP/onnx-one.tpb" << 'PY'
import json, sys
d = json.load(open(sys.argv[1]))
named = [r["site"] for r in d["regions"] if r["site"]]
assert len(named) == 3, named
PY

cp -r "$TMP/o1b" "$TMP/esc"
patch_bytes "$TMP/esc/model.onnx" "model.onnx.data" "../odel.onnx.da"
refused "onnx: a location with '..'" "$TMP/esc" "location '../odel.onnx.da' holds '..'" "$TMP/o1t"
rm -rf "$TMP/esc" && cp -r "$TMP/o1b" "$TMP/esc"
patch_bytes "$TMP/esc/model.onnx" "model.onnx.data" "/tmp/x.onnx.dat"
refused "onnx: an absolute location" "$TMP/esc" "is an absolute path" "$TMP/o1t"
rm -rf "$TMP/esc" && cp -r "$TMP/o1b" "$TMP/esc" && rm "$TMP/esc/model.onnx.data"
refused "onnx: a missing data file" "$TMP/esc" "external data file 'model.onnx.data' is not in the model's directory" "$TMP/o1t"
rm -rf "$TMP/esc" && cp -r "$TMP/o1b" "$TMP/esc"
printf 'X' | dd of="$TMP/esc/model.onnx.data" bs=1 seek=100 conv=notrunc 2> /dev/null
refused "onnx: data that does not match its checksum" "$TMP/esc" "\"checksum\" is not the SHA-1 of 'model.onnx.data'" "$TMP/o1t"
# Tensors that overlap: the second weight's offset moved one byte back into the first.
mkdir -p "$TMP/ov"
"${onnx[@]}" --kind matmul --dim 256 --layers 2 -o "$TMP/ov/model.onnx" --external one > /dev/null
off=$(python3 - "$TMP/ov/model.onnx" << 'PY'
import re, sys
b = open(sys.argv[1], "rb").read()
# external_data entries: key "offset" then its decimal value; the second nonzero one
vals = re.findall(rb"\x0a\x06offset\x12(.)([0-9]+)", b)
print([v.decode() for _, v in vals if v != b"0"][0])
PY
)
patch_bytes "$TMP/ov/model.onnx" "offset"$'\x12'"$(printf '\\x%02x' ${#off} | xargs -0 printf)$off" \
    "offset"$'\x12'"$(printf '\\x%02x' ${#off} | xargs -0 printf)$(printf '%0*d' ${#off} $((off - 1)))"
refused "onnx: two tensors that overlap in the data file" "$TMP/ov" "model.onnx.data: sites" "$TMP/o1t"

# ---- safetensors, two shards and an index ---------------------------------------------------------
"${shards[@]}" "$TMP/sb" --size-mb 24 --shards 2 > /dev/null
"${shards[@]}" "$TMP/st" --size-mb 24 --shards 2 --change 4 --mode lowrank --task-seed 3 \
    --move model.norm.weight > /dev/null
roundtrip safetensors "$TMP/sb" "$TMP/st"
check "safetensors: every tensor read back from the output equals the task's" python3 - "$TMP/safetensors-out" "$TMP/st" << 'PY'
import json, os, struct, sys
def tensors(d):
    idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))
    out = {}
    for shard in sorted(set(idx["weight_map"].values())):
        b = open(os.path.join(d, shard), "rb").read()
        n = struct.unpack("<Q", b[:8])[0]
        h = json.loads(b[8:8 + n])
        for name, t in h.items():
            if name == "__metadata__":
                continue
            lo, hi = t["data_offsets"]
            assert idx["weight_map"][name] == shard, name
            out[name] = (t["dtype"], tuple(t["shape"]), b[8 + n + lo:8 + n + hi])
    return out
got, want = tensors(sys.argv[1]), tensors(sys.argv[2])
assert got.keys() == want.keys() and len(got) > 5
for k in want:
    assert got[k] == want[k], k
PY
check "safetensors: the moved tensor is copied, not coded (relocating bundle)" \
    sh -c "'$BIN/taskpatch' inspect --json '$TMP/safetensors.tpb' | python3 -c 'import json,sys; j=json.load(sys.stdin); assert j[\"format\"] == 2 and j[\"encodings\"][\"copy\"] > 0, j[\"encodings\"]'"
cp -r "$TMP/sb" "$TMP/sx" && rm "$TMP/sx/model-00002-of-00002.safetensors"
refused "safetensors: the index names an absent shard" "$TMP/sx" \
    "weight_map names shard 'model-00002-of-00002.safetensors', which is not in the directory" "$TMP/st"
rm -rf "$TMP/sx" && cp -r "$TMP/sb" "$TMP/sx"
python3 - "$TMP/sx/model.safetensors.index.json" << 'PY'
import json, sys
p = sys.argv[1]
j = json.load(open(p))
j["weight_map"]["model.not.there"] = "model-00001-of-00002.safetensors"
json.dump(j, open(p, "w"))
PY
refused "safetensors: the index names a tensor no shard holds" "$TMP/sx" "weight_map puts tensor 'model.not.there'" "$TMP/st"
rm -rf "$TMP/sx" && cp -r "$TMP/sb" "$TMP/sx" && cp "$TMP/sb/model-00001-of-00002.safetensors" "$TMP/sx/extra.safetensors"
refused "safetensors: a shard the index does not name" "$TMP/sx" "extra.safetensors: a safetensors file that" "$TMP/st"
rm -rf "$TMP/sx" && cp -r "$TMP/sb" "$TMP/sx" && rm "$TMP/sx/model.safetensors.index.json"
refused "safetensors: two shards without an index" "$TMP/sx" "no \*.safetensors.index.json" "$TMP/st"

# ---- split GGUF, three shards -----------------------------------------------------------------------
if lib=$("$root/tests/tools/npm-ggml.sh" "$root/build/npm" 2> "$TMP/npm.err"); then
    export TASKPATCH_GGML_LIB=$lib
    fixture=${FIXTURE:-$(dirname "$BIN")/tools/gguf-fixture}
    "$fixture" --type q8_0 -o "$TMP/g.gguf" > /dev/null
    "$fixture" --type q8_0 --mode lora -o "$TMP/gt.gguf" > /dev/null
    python3 "$root/tests/tools/gguf-split.py" "$TMP/g.gguf" "$TMP/gb" --shards 3 > /dev/null
    python3 "$root/tests/tools/gguf-split.py" "$TMP/gt.gguf" "$TMP/gtask" --shards 3 > /dev/null
    # Shards named after their input (g-*, gt-*): the files differ, so the bundle relocates.
    roundtrip split-gguf-renamed "$TMP/gb" "$TMP/gtask"
    python3 "$root/tests/tools/gguf-split.py" "$TMP/gt.gguf" "$TMP/gtask2" --shards 3 --prefix g > /dev/null
    roundtrip split-gguf "$TMP/gb" "$TMP/gtask2"
    check "split GGUF, same names: patched in place (format 1), spans in shards" sh -c \
        "'$BIN/taskpatch' inspect --json '$TMP/split-gguf.tpb' | python3 -c 'import json,sys; j=json.load(sys.stdin); assert j[\"format\"] == 1 and {s[\"file\"] for s in j[\"span_list\"]} >= {\"g-00001-of-00003.gguf\", \"g-00002-of-00003.gguf\"}, j[\"span_list\"]'"
    cp -r "$TMP/gb" "$TMP/gx" && rm "$TMP/gx/"*-00002-of-00003.gguf
    refused "split GGUF: a missing shard" "$TMP/gx" "g-00002-of-00003.gguf: shard 2 of 3 of the split GGUF is missing" "$TMP/gtask"
    rm -rf "$TMP/gx" && cp -r "$TMP/gb" "$TMP/gx" && cp "$TMP/g.gguf" "$TMP/gx/whole.gguf"
    refused "split GGUF: an extra GGUF file" "$TMP/gx" "whole.gguf: no split.\* keys" "$TMP/gtask"
else
    fail "npm cache of llama.cpp (build/npm): $(cat "$TMP/npm.err")"
fi
finish
