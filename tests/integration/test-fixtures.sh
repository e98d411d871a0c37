#!/bin/bash
# GGUF fixtures made with ggml's own quantizer (tests/tools/gguf-fixture, dlopen of the
# libggml-base.so that tests/tools/npm-ggml.sh installs into build/npm): valid GGUF v3,
# deterministic, a LoRA task changes only its target tensors, and the quantized bytes equal
# what llama.cpp's own llama_model_quantize makes of the same float model.
. "$(dirname "$0")/lib.sh"

root=$(cd "$(dirname "$0")/../.." && pwd)
tool=$(dirname "$BIN")/tools/gguf-fixture
types="q4_0 q8_0 q4_K q6_K"
# ~2-4 MB models; every dimension a multiple of 256 for the K-quants.
dims=(--dim 256 --ff 768 --layers 4 --vocab 512 --heads 4)
targets=attn_q,attn_v

if [ ! -x "$tool" ]; then
    fail "fixture generator not built: $tool (make tests-build builds tests/tools/*.c)"
    finish
    exit 1
fi
if ! lib=$("$root/tests/tools/npm-ggml.sh" "$root/build/npm" 2> "$TMP/npm.err"); then
    fail "npm cache of llama.cpp (build/npm): $(cat "$TMP/npm.err")"
    finish
    exit 1
fi
ok "npm cache: $lib"
check "npm cache holds libggml-base.so and libllama" test -f "$lib/libggml-base.so" -a -f "$lib/libllama.v0.4.0.so"
# A second call must not touch the network: point npm at a closed port.
check "npm cache is reused without the registry" \
    test "$(npm_config_registry=http://127.0.0.1:9/ "$root/tests/tools/npm-ggml.sh" "$root/build/npm" 2>&1)" = "$lib"
export TASKPATCH_GGML_LIB=$lib

# GGUF reader (standard library only): checks the layout as llama.cpp's gguf.cpp reads and
# writes it, prints JSON with the metadata and each tensor's type, shape, offset and sha256.
cat > "$TMP/gguf.py" <<'PY'
import hashlib, json, struct, sys

TYPES = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
         10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210), 30: (1, 2)}
SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

def read(path):
    f = open(path, "rb").read()
    pos = 0
    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, f, pos)[0]
        pos += struct.calcsize("<" + fmt)
        return v
    def string():
        nonlocal pos
        n = take("Q")
        assert pos + n <= len(f), "string past the end"
        v = f[pos:pos + n].decode()
        pos += n
        return v
    def value(t):
        if t == 8:
            return string()
        if t == 9:
            it, n = take("I"), take("Q")
            return [value(it) for _ in range(n)]
        return take(SCALAR[t])
    assert f[:4] == b"GGUF", "bad magic"
    pos = 4
    version, n_tensors, n_kv = take("I"), take("Q"), take("Q")
    assert version == 3, f"version {version}"
    kv = {}
    for _ in range(n_kv):
        k = string()
        assert k not in kv, f"duplicate key {k}"
        kv[k] = value(take("I"))
    align = kv.get("general.alignment", 32)
    assert align > 0 and align & (align - 1) == 0, f"alignment {align}"
    tensors, end = [], 0
    for _ in range(n_tensors):
        name, nd = string(), take("I")
        ne = [take("Q") for _ in range(nd)]
        ty, off = take("I"), take("Q")
        bs, ts = TYPES[ty]
        n = 1
        for e in ne:
            n *= e
        assert ne[0] % bs == 0, f"{name}: row of {ne[0]} not whole blocks"
        assert off % align == 0 and off >= end, f"{name}: offset {off} unaligned or overlapping"
        size = n // bs * ts
        end = off + size
        tensors.append({"name": name, "ne": ne, "type": ty, "offset": off, "size": size})
    data = (pos + align - 1) // align * align
    assert f[pos:data] == bytes(data - pos), "header padding not zero"
    padded = (end + align - 1) // align * align
    assert len(f) == data + padded, f"file is {len(f)} bytes, layout says {data + padded}"
    for t in tensors:
        t["sha256"] = hashlib.sha256(f[data + t["offset"]:data + t["offset"] + t["size"]]).hexdigest()
    kv.pop("tokenizer.ggml.tokens", None), kv.pop("tokenizer.ggml.scores", None), kv.pop("tokenizer.ggml.token_type", None)
    return {"kv": kv, "header_sha256": hashlib.sha256(f[:data]).hexdigest(), "data": data, "tensors": tensors}

def tensors_by_name(m):
    return {t["name"]: t for t in m["tensors"]}

def check_model(path, type_id, layers):
    m = read(path)
    kv = m["kv"]
    for k in ("general.architecture", "general.name", "llama.context_length", "llama.embedding_length",
              "llama.block_count", "llama.feed_forward_length", "llama.attention.head_count",
              "llama.attention.head_count_kv", "llama.rope.dimension_count",
              "llama.attention.layer_norm_rms_epsilon", "general.file_type", "tokenizer.ggml.model",
              "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"):
        assert k in kv, f"missing {k}"
    assert kv["general.architecture"] == "llama" and kv["llama.block_count"] == layers
    want = ["token_embd.weight"]
    for l in range(layers):
        want += [f"blk.{l}.{k}.weight" for k in ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                                                 "ffn_norm", "ffn_gate", "ffn_up", "ffn_down")]
    want += ["output_norm.weight", "output.weight"]
    assert [t["name"] for t in m["tensors"]] == want, "tensor names"
    for t in m["tensors"]:
        assert t["type"] == (0 if t["name"].endswith("norm.weight") else type_id), f"{t['name']}: type {t['type']}"

def compare(base, task, targets):
    a, b = read(base), read(task)
    assert a["header_sha256"] == b["header_sha256"], "headers differ"
    ta, tb = tensors_by_name(a), tensors_by_name(b)
    kinds = targets.split(",")
    hit = 0
    for name, t in ta.items():
        is_target = name.split(".")[-2] in kinds
        same = t["sha256"] == tb[name]["sha256"]
        assert same != is_target, f"{name}: {'unchanged target' if same else 'non-target changed'}"
        hit += is_target
    assert hit > 0, "no target tensor"

def check_adapter(path, model, rank, alpha, targets):
    a, m = read(path), tensors_by_name(read(model))
    kv = a["kv"]
    assert kv["general.type"] == "adapter" and kv["adapter.type"] == "lora", kv
    assert kv["general.architecture"] == "llama" and abs(kv["adapter.lora.alpha"] - alpha) < 1e-6
    names = []
    for t in a["tensors"]:
        base, suffix = t["name"].rsplit(".", 1)
        assert t["type"] == 0 and base in m, t
        ne = m[base]["ne"]
        assert t["ne"] == ([ne[0], rank] if suffix == "lora_a" else [rank, ne[1]]), t
        names.append(base)
    want = sorted(n for n in m if n.split(".")[-2] in targets.split(","))
    assert sorted(set(names)) == want and len(names) == 2 * len(want), names

def same_tensors(x, y):
    a, b = tensors_by_name(read(x)), tensors_by_name(read(y))
    bad = [n for n in b if a[n]["sha256"] != b[n]["sha256"] or a[n]["type"] != b[n]["type"]]
    assert not bad, f"{len(bad)} tensors differ, e.g. {bad[:3]}"

def quantize(libllama, src, dst, ftype):
    # llama_model_quantize_params of llama.cpp as pinned by node-llama-cpp 3.21.1 (include/llama.h)
    import ctypes
    class Params(ctypes.Structure):
        _fields_ = [("nthread", ctypes.c_int32), ("ftype", ctypes.c_int), ("output_tensor_type", ctypes.c_int),
                    ("token_embedding_type", ctypes.c_int), ("allow_requantize", ctypes.c_bool),
                    ("quantize_output_tensor", ctypes.c_bool), ("only_copy", ctypes.c_bool),
                    ("pure", ctypes.c_bool), ("keep_split", ctypes.c_bool), ("dry_run", ctypes.c_bool),
                    ("imatrix", ctypes.c_void_p), ("kv_overrides", ctypes.c_void_p),
                    ("tt_overrides", ctypes.c_void_p), ("prune_layers", ctypes.c_void_p),
                    ("max_buf_size", ctypes.c_size_t)]
    lib = ctypes.CDLL(libllama)
    lib.llama_model_quantize_default_params.restype = Params
    lib.llama_model_quantize.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(Params)]
    lib.llama_model_quantize.restype = ctypes.c_uint32
    p = lib.llama_model_quantize_default_params()
    p.ftype, p.pure, p.nthread = int(ftype), True, 2
    assert lib.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(p)) == 0, "llama_model_quantize failed"

cmd, args = sys.argv[1], sys.argv[2:]
try:
    if cmd == "model":
        check_model(args[0], int(args[1]), int(args[2]))
    elif cmd == "compare":
        compare(*args)
    elif cmd == "adapter":
        check_adapter(args[0], args[1], int(args[2]), float(args[3]), args[4])
    elif cmd == "same-tensors":
        same_tensors(*args)
    elif cmd == "quantize":
        quantize(*args)
except Exception as e:  # a short reason on stderr, not a traceback
    print(f"{cmd} {' '.join(args)}: {type(e).__name__}: {e}", file=sys.stderr)
    sys.exit(1)
PY
gguf() { python3 "$TMP/gguf.py" "$@"; }
fixture() { "$tool" "${dims[@]}" "$@" 2> "$TMP/fixture.err" || { cat "$TMP/fixture.err"; return 1; }; }
sha() { sha256sum < "$1" | cut -c1-64; }

declare -A type_id=([q4_0]=2 [q8_0]=8 [q4_K]=12 [q6_K]=14)
declare -A ftype=([q4_0]=2 [q8_0]=7 [q4_K]=14 [q6_K]=18)
fixture --type f32 -o "$TMP/f32.gguf"
check "f32 model is valid GGUF" gguf model "$TMP/f32.gguf" 0 4

for t in $types; do
    d=$TMP/$t
    mkdir -p "$d"
    fixture --type "$t" --seed 1 -o "$d/base.gguf"
    fixture --type "$t" --seed 1 -o "$d/base2.gguf"
    fixture --type "$t" --seed 1 --chunk-rows 3 -o "$d/base-chunk3.gguf"
    fixture --type "$t" --seed 2 -o "$d/other.gguf"
    fixture --type "$t" --seed 1 --mode lora --targets $targets --rank 8 --alpha 16 --task-seed 7 \
        --adapter "$d/adapter.gguf" -o "$d/task.gguf"
    fixture --type "$t" --seed 1 --mode lora --targets $targets --rank 8 --alpha 16 --task-seed 7 -o "$d/task2.gguf"
    fixture --type "$t" --seed 1 --mode random --targets $targets --task-seed 7 -o "$d/random.gguf"
    fixture --type "$t" --seed 1 --mode random --targets $targets --task-seed 7 --chunk-rows 3 -o "$d/random-chunk3.gguf"

    check "$t: base is valid GGUF v3 (llama names, norms F32, the rest $t)" gguf model "$d/base.gguf" "${type_id[$t]}" 4
    check "$t: task is valid GGUF v3" gguf model "$d/task.gguf" "${type_id[$t]}" 4
    check "$t: random task is valid GGUF v3" gguf model "$d/random.gguf" "${type_id[$t]}" 4
    check "$t: same arguments give the same sha256 (base)" test "$(sha "$d/base.gguf")" = "$(sha "$d/base2.gguf")"
    check "$t: same arguments give the same sha256 (task)" test "$(sha "$d/task.gguf")" = "$(sha "$d/task2.gguf")"
    check "$t: quantizing 3 rows per call gives the same bytes" cmp -s "$d/base.gguf" "$d/base-chunk3.gguf"
    check "$t: random bytes do not depend on the chunk size" cmp -s "$d/random.gguf" "$d/random-chunk3.gguf"
    check "$t: another seed gives other weights" test "$(sha "$d/base.gguf")" != "$(sha "$d/other.gguf")"
    check "$t: lora task: same header, untouched tensors byte-identical, every $targets tensor differs" \
        gguf compare "$d/base.gguf" "$d/task.gguf" $targets
    check "$t: random task: same header, only the $targets tensors differ" \
        gguf compare "$d/base.gguf" "$d/random.gguf" $targets
    check "$t: adapter GGUF: lora_a [in,rank], lora_b [rank,out] F32 for each target, alpha 16" \
        gguf adapter "$d/adapter.gguf" "$d/base.gguf" 8 16 $targets
    # ggml's quantizer through gguf-fixture == llama.cpp quantizing the same float model.
    if gguf quantize "$lib/libllama.v0.4.0.so" "$TMP/f32.gguf" "$d/llama-quantized.gguf" "${ftype[$t]}" \
        > "$TMP/quantize.log" 2>&1; then
        check "$t: tensor bytes equal llama_model_quantize (pure $t) of the f32 model" \
            gguf same-tensors "$d/llama-quantized.gguf" "$d/base.gguf"
    else
        fail "$t: llama_model_quantize: $(tail -n 3 "$TMP/quantize.log")"
    fi
done

# Refusals are clear and leave no file behind.
"$tool" --type q4_K --dim 128 -o "$TMP/bad.gguf" 2> "$TMP/err"
check "K-quant with --dim 128 is refused with exit 2" test $? -eq 2
check "... naming the block size" grep -q "multiples of the type's block size" "$TMP/err"
check "... and writes nothing" test ! -e "$TMP/bad.gguf" -a ! -e "$TMP/bad.gguf.tmp"
TASKPATCH_GGML_LIB=$TMP/nonexistent.so "$tool" -o "$TMP/bad.gguf" 2> "$TMP/err"
check "a missing ggml library is an error naming it" grep -q "nonexistent.so" "$TMP/err"
"$tool" --mode lora --targets attn_nothing -o "$TMP/bad.gguf" 2> "$TMP/err"
check "an unknown --targets name is refused" grep -q "attn_nothing" "$TMP/err"

finish
