#!/bin/bash
# safetensors (one file) end to end: a BF16 model with F32, I8 and F4 tensors and __metadata__,
# written here by Python to the format's specification (no torch), and tasks that change a few
# tensors in place, or grow the header (a relocating bundle). diff names the changed tensors with
# their dtypes; create (signed) -> verify -> apply rebuilds the task byte for byte, and an
# independent reader (struct + json) finds the task's values in every tensor of the output.
# A file that claims safetensors but breaks its rules is refused, naming the file and the rule.
. "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)

sh "$root/tests/tools/make-pki.sh" "$TMP/pki" > /dev/null || fail "make-pki.sh"
quiet() { "$@" > /dev/null 2>&1; }
K=(--key "$TMP/pki/signer.key" --cert "$TMP/pki/signer.crt")
CA=(--ca "$TMP/pki/ca.pem")

# gen.py OUT VARIANT: base (seed 1), task (layers 1 and 3: small changes to q_proj and up_proj,
# a norm), grown (the task plus a longer __metadata__: every offset moves), hole, overlap, size.
cat > "$TMP/gen.py" << 'EOF'
import json, random, struct, sys

out, variant = sys.argv[1], sys.argv[2]
DT = {"BF16": 2, "F32": 4, "I8": 1}

def tensors():
    rnd = random.Random(1)
    t = {}
    for layer in range(4):
        p = f"model.layers.{layer}."
        t[p + "self_attn.q_proj.weight"] = ("BF16", [64, 64], bytes(rnd.getrandbits(8) for _ in range(64 * 64 * 2)))
        t[p + "mlp.up_proj.weight"] = ("BF16", [128, 64], bytes(rnd.getrandbits(8) for _ in range(128 * 64 * 2)))
        t[p + "input_layernorm.weight"] = ("F32", [64], struct.pack("<64f", *[1.0] * 64))
    t["model.embed_tokens.weight"] = ("BF16", [100, 64], bytes(rnd.getrandbits(8) for _ in range(100 * 64 * 2)))
    t["model.quant.codes"] = ("I8", [256], bytes(rnd.getrandbits(8) for _ in range(256)))
    # F4: two elements a byte, shape [32, 4] = 64 bytes.
    t["model.mx.blocks"] = ("F4", [32, 4], bytes(rnd.getrandbits(8) for _ in range(64)))
    t["model.empty"] = ("F16", [0, 64], b"")
    return t

def task(t):
    rnd = random.Random(2)
    for layer in (1, 3):
        for name in (f"model.layers.{layer}.self_attn.q_proj.weight", f"model.layers.{layer}.mlp.up_proj.weight"):
            dtype, shape, b = t[name]
            b = bytearray(b)
            for i in range(0, len(b), 2):       # the low byte of some BF16 values: a small change
                if rnd.random() < 0.3:
                    b[i] ^= rnd.getrandbits(3) + 1
            t[name] = (dtype, shape, bytes(b))
    dtype, shape, _ = t["model.layers.1.input_layernorm.weight"]
    t["model.layers.1.input_layernorm.weight"] = (dtype, shape, struct.pack("<64f", *[1.25] * 64))
    return t

def write(t, meta, lie=None):
    header, data = {"__metadata__": meta}, b""
    for name, (dtype, shape, b) in t.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    if lie:
        lie(header)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(out, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)

meta = {"format": "pt"}
if variant == "base":
    write(tensors(), meta)
elif variant == "task":
    write(task(tensors()), meta)
elif variant == "grown":
    write(task(tensors()), {"format": "pt", "note": "fine-tuned on the json task, " * 8})
elif variant == "hole":
    def lie(h):     # two elements fewer, starting two bytes later: those bytes belong to no tensor
        h["model.quant.codes"]["shape"] = [254]
        h["model.quant.codes"]["data_offsets"][0] += 2
    write(tensors(), meta, lie)
elif variant == "overlap":
    def lie(h):
        b = h["model.layers.0.mlp.up_proj.weight"]["data_offsets"]
        h["model.layers.0.mlp.up_proj.weight"]["data_offsets"] = [b[0] - 2, b[1] - 2]
    write(tensors(), meta, lie)
elif variant == "size":
    write(tensors(), meta)
    with open(out, "ab") as f:
        f.write(b"\0" * 3)
EOF

# read.py FILE TASK: every tensor of FILE, read by its header alone, equals TASK's bytes.
cat > "$TMP/read.py" << 'EOF'
import json, struct, sys

def load(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in header.items()}

a, b = load(sys.argv[1]), load(sys.argv[2])
assert a.keys() == b.keys(), (sorted(a), sorted(b))
for k in a:
    assert a[k] == b[k], k
print(len(a))
EOF

for v in base task grown hole overlap size; do
    python3 "$TMP/gen.py" "$TMP/$v.safetensors" $v || fail "gen.py $v"
done
B="$TMP/base.safetensors" T="$TMP/task.safetensors"

# ---- diff ----------------------------------------------------------------------------------------
tp diff "$B" "$T" > "$TMP/diff.out" 2>&1
check "diff exits 0" test $? -eq 0
check "diff: kind safetensors, 5 changed sites" grep -q "safetensors, 16 sites; 5 changed" "$TMP/diff.out"
check "diff: names a changed tensor with its dtype" grep -Eq "model.layers.1.self_attn.q_proj.weight +BF16" "$TMP/diff.out"
tp diff --json "$B" "$T" > "$TMP/diff.json"
check "diff --json: kind, exactly the changed tensors, their dtypes" python3 -c "
import json; j = json.load(open('$TMP/diff.json'))
assert j['kind'] == 'safetensors' and not j['layout_changed'], j
sites = sorted((r['site'], r['type']) for r in j['regions'] if r['site'])
want = sorted([('model.layers.%d.%s' % (l, n), 'BF16') for l in (1, 3)
               for n in ('self_attn.q_proj.weight', 'mlp.up_proj.weight')] + [('model.layers.1.input_layernorm.weight', 'F32')])
assert sites == want, sites
assert not [r for r in j['regions'] if not r['site']], 'header bytes differ'"

# ---- create (signed), verify, inspect, apply -----------------------------------------------------
tp create "$B" "$T" -o "$TMP/t.tpb" --task st "${K[@]}" > "$TMP/create.out" 2>&1
check "create (signed) exits 0" test $? -eq 0
check "verify with the CA" quiet tp verify "$TMP/t.tpb" "${CA[@]}"
tp inspect --json "$TMP/t.tpb" > "$TMP/inspect.json"
check "inspect --json: kind safetensors, format 1, 5 sites, delta spans" python3 -c "
import json; j = json.load(open('$TMP/inspect.json'))
assert j['kind'] == 'safetensors' and j['format'] == 1 and len(j['sites']) == 5, j
assert j['encodings']['delta'] >= 1, j['encodings']"
tp create "$B" "$T" -o "$TMP/plain.tpb" --task st "${K[@]}" --plain-manifest > /dev/null
check "the manifest (--plain-manifest: its YAML as it is) says kind: safetensors and codes BF16 spans as bf16" \
    bash -c "grep -aq '^kind: safetensors' '$TMP/plain.tpb' && grep -aq 'layout: bf16' '$TMP/plain.tpb'"
tp apply "$B" "$TMP/t.tpb" -o "$TMP/out.safetensors" "${CA[@]}" > "$TMP/apply.out" 2>&1
check "apply exits 0" test $? -eq 0
check "apply: the task byte for byte" cmp -s "$TMP/out.safetensors" "$T"
check "an independent reader finds the task's tensors in the output" quiet python3 "$TMP/read.py" "$TMP/out.safetensors" "$T"
check "the rebuilt file diffs equal to the task" bash -c \
    "'$BIN/taskpatch' diff '$TMP/out.safetensors' '$T' | grep -q '0 changed; 0 of'"

# ---- a grown header: every offset moves, a relocating bundle -------------------------------------
G="$TMP/grown.safetensors"
tp diff "$B" "$G" > "$TMP/diff.out" 2>&1
check "grown header: diff says the layout moved, 5 changed, 11 moved" \
    grep -q "the layout moved (a relocating bundle): 0 same, 11 moved, 0 renamed, 5 changed" "$TMP/diff.out"
tp create "$B" "$G" -o "$TMP/g.tpb" --task st "${K[@]}" > "$TMP/create.out" 2>&1 &&
    tp apply "$B" "$TMP/g.tpb" -o "$TMP/out-g.safetensors" "${CA[@]}" > /dev/null 2>&1
check "grown header: create, apply: byte-identical" cmp -s "$TMP/out-g.safetensors" "$G"
check "grown header: a format-2 bundle" bash -c \
    "'$BIN/taskpatch' inspect --json '$TMP/g.tpb' | python3 -c 'import json,sys; assert json.load(sys.stdin)[\"format\"] == 2'"
check "grown header: the output reads as the task" quiet python3 "$TMP/read.py" "$TMP/out-g.safetensors" "$G"

# ---- files that claim safetensors and break its rules ---------------------------------------------
bad() { # NAME NEEDLE [NEEDLE2]: the message starts "NAME.safetensors: safetensors: NEEDLE" and holds NEEDLE2
    tp diff "$B" "$TMP/$1.safetensors" > "$TMP/out" 2>&1
    rc=$?
    check "$1: diff exits 1" test $rc -eq 1
    check "$1: the message names the file and the rule" grep -qF "$1.safetensors: safetensors: $2" "$TMP/out"
    [ $# -lt 3 ] || check "$1: the message says '$3'" grep -qF "$3" "$TMP/out"
    tp create "$B" "$TMP/$1.safetensors" -o "$TMP/$1.tpb" --task st --unsigned > "$TMP/out" 2>&1
    check "$1: create refuses, writes no bundle" bash -c "test $? -ne 0 && test ! -e '$TMP/$1.tpb'"
}
bad hole "a hole in the data buffer: bytes [" "belong to no tensor (the next is 'model.quant.codes')"
bad overlap "tensor 'model.layers.0.mlp.up_proj.weight'" "overlaps tensor 'model.layers.0.self_attn.q_proj.weight'"
bad size "the tensors end at data buffer byte" "3 bytes belong to no tensor"

finish
