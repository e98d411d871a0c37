#!/bin/bash
# The benchmark's layout-changing pairs are what they claim: tests/tools/gguf-relayout.py keeps
# every tensor's bytes by name (sorted, a key set or added, rows grown: only the grown tensor
# differs, and its old rows do not), lays the data out at the alignment, and taskpatch parses
# what it writes; make-onnx.py --classes resizes only the classifier's four initializers.
. "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
export PYTHONPATH="$root/tests/tools"    # gguf_header.py
fix="$(dirname "$BIN")/tools/gguf-fixture"
relayout=(python3 "$root/tests/tools/gguf-relayout.py")

ggml=$(sh "$root/tests/tools/npm-ggml.sh" "$root/build/npm" 2> "$TMP/npm.err" | tail -n 1)
if [ ! -e "$ggml/libggml-base.so" ]; then
    fail "ggml from npm is not available: $(cat "$TMP/npm.err")"
    finish
    exit 1
fi

# same_tensors A B [GROWN ROWS]: every tensor of A is in B with the same bytes, except GROWN,
# which has ROWS more rows and A's bytes as its prefix; B's data offsets are aligned.
same_tensors() {
    python3 - "$@" <<'PY'
import sys, hashlib, gguf_header as g
a, b = sys.argv[1], sys.argv[2]
grown, rows = (sys.argv[3], int(sys.argv[4])) if len(sys.argv) > 3 else (None, 0)
ha, hb = g.read_header(a), g.read_header(b)
ta, tb = {t[0]: t for t in ha.tensors}, {t[0]: t for t in hb.tensors}
assert set(ta) == set(tb), "tensor names differ"
assert all(t[3] % hb.alignment == 0 for t in hb.tensors), "an unaligned tensor"
fa, fb = open(a, "rb"), open(b, "rb")
for name, (_, ne, t, off) in ta.items():
    n = g.nbytes(ne, t)
    fa.seek(ha.data_offset + off); fb.seek(hb.data_offset + tb[name][3])
    old, new = fa.read(n), fb.read(g.nbytes(tb[name][1], t))
    want_ne = (ne[0], ne[1] + rows) if name == grown else ne
    assert tb[name][1] == want_ne and tb[name][2] == t, "%s: shape or type %s" % (name, tb[name][1:3])
    assert new[:n] == old, "%s: bytes differ" % name
    assert len(new) == n or name == grown, name
PY
}

kv() {  # kv FILE KEY: the scalar value of KEY
    python3 -c 'import sys, gguf_header as g; print(dict((k[0], k[3]) for k in g.read_header(sys.argv[1]).kvs)[sys.argv[2]])' "$@"
}

dims=(--dim 256 --ff 768 --layers 1 --vocab 512)
for t in f16 q8_0 q4_K; do
    b="$TMP/base-$t.gguf"
    extra=()
    [ "$t" = q8_0 ] && extra=(--alignment 64)
    "$fix" --ggml "$ggml" --type "$t" "${dims[@]}" "${extra[@]}" --mode lora -o "$b" > /dev/null || fail "$t: gguf-fixture"
    "${relayout[@]}" "$b" -o "$TMP/id.gguf" && check "$t: no operation: byte-identical" cmp -s "$b" "$TMP/id.gguf"

    "${relayout[@]}" "$b" -o "$TMP/sorted.gguf" --sort-by-name
    check "$t: sorted: every tensor's bytes kept" same_tensors "$b" "$TMP/sorted.gguf"
    check "$t: sorted: in name order" python3 -c '
import sys, gguf_header as g
n = [t[0] for t in g.read_header(sys.argv[1]).tensors]
sys.exit(n != sorted(n))' "$TMP/sorted.gguf"

    long="taskpatch-fixture-$(printf '%060d' 0)"
    "${relayout[@]}" "$b" -o "$TMP/name.gguf" --set-string "general.name=$long"
    check "$t: general.name grown: bytes kept" same_tensors "$b" "$TMP/name.gguf"
    check "$t: general.name grown: the new name" [ "$(kv "$TMP/name.gguf" general.name)" = "$long" ]

    "${relayout[@]}" "$b" -o "$TMP/imatrix.gguf" --add-key quantize.imatrix.file=imatrix.dat \
        --add-u32 quantize.imatrix.entries_count=7 --add-f32 test.f32=0.5
    check "$t: keys added: bytes kept" same_tensors "$b" "$TMP/imatrix.gguf"
    check "$t: keys added: values" [ "$(kv "$TMP/imatrix.gguf" quantize.imatrix.entries_count) $(kv "$TMP/imatrix.gguf" test.f32)" = "7 0.5" ]

    "${relayout[@]}" "$b" -o "$TMP/rows.gguf" --grow-rows output.weight=16 --sort-by-name
    "${relayout[@]}" "$b" -o "$TMP/rows2.gguf" --grow-rows output.weight=16 --sort-by-name
    check "$t: rows grown: the other tensors and the old rows kept" same_tensors "$b" "$TMP/rows.gguf" output.weight 16
    check "$t: rows grown: deterministic" cmp -s "$TMP/rows.gguf" "$TMP/rows2.gguf"

    for f in sorted name imatrix rows; do
        check "$t: taskpatch diff parses base and $f" sh -c '"$1" diff --json "$2" "$3" | python3 -c "import json, sys; json.load(sys.stdin)"' \
            _ "$BIN/taskpatch" "$b" "$TMP/$f.gguf"
    done
done

b="$TMP/base-f16.gguf"
check "refused: --grow-rows on a 1-D tensor" sh -c '! "$@" 2> /dev/null' _ "${relayout[@]}" "$b" -o "$TMP/x.gguf" --grow-rows output_norm.weight=1
check "refused: --grow-rows on no such tensor" sh -c '! "$@" 2> /dev/null' _ "${relayout[@]}" "$b" -o "$TMP/x.gguf" --grow-rows nope=1
check "refused: --set-string on a u32 key" sh -c '! "$@" 2> /dev/null' _ "${relayout[@]}" "$b" -o "$TMP/x.gguf" --set-string llama.block_count=x
check "refused: the output is the input" sh -c '! "$@" 2> /dev/null' _ "${relayout[@]}" "$b" -o "$b"

# ONNX: the class-set change touches the classifier's initializers only.
onnx=(python3 "$root/tests/tools/make-onnx.py" --layers 6 --seed 3)
"${onnx[@]}" -o "$TMP/a.onnx" --task-out "$TMP/a-task.onnx" --change-layers 2
"${onnx[@]}" -o "$TMP/c.onnx" --task-out "$TMP/c-task.onnx" --change-layers 2 --classes 40
check "onnx --classes: the base is unchanged" cmp -s "$TMP/a.onnx" "$TMP/c.onnx"
check "onnx --classes: only layer.5's weight, w_scale, w_zero_point, bias differ; weight [40,32,3,3]" python3 - "$TMP/a-task.onnx" "$TMP/c-task.onnx" <<'PY'
import sys

def varint(b, o):
    v = s = 0
    while True:
        x = b[o]; o += 1; v |= (x & 0x7F) << s; s += 7
        if x < 0x80:
            return v, o

def fields(b):
    o = 0
    while o < len(b):
        k, o = varint(b, o)
        if k & 7 == 0:
            v, o = varint(b, o)
        else:
            n, o = varint(b, o); v = b[o:o + n]; o += n
        yield k >> 3, v

def inits(path):
    graph = next(v for f, v in fields(open(path, "rb").read()) if f == 7)
    out = {}
    for f, t in fields(graph):
        if f == 5:
            d = list(fields(t))
            out[next(v for f, v in d if f == 8).decode()] = ([v for f, v in d if f == 1], next(v for f, v in d if f == 9))
    return out

a, c = inits(sys.argv[1]), inits(sys.argv[2])
assert set(a) == set(c)
diff = sorted(n for n in a if a[n] != c[n])
assert diff == ["layer.5.bias", "layer.5.w_scale", "layer.5.w_zero_point", "layer.5.weight"], diff
assert c["layer.5.weight"][0] == [40, 32, 3, 3] and c["layer.5.bias"][0] == [40]
assert c["layer.5.weight"][1][:len(a["layer.5.weight"][1])] == a["layer.5.weight"][1]
PY
check "onnx --classes: taskpatch diff parses the pair" sh -c '"$1" diff --json "$2" "$3" > /dev/null' _ "$BIN/taskpatch" "$TMP/a.onnx" "$TMP/c-task.onnx"
check "onnx --classes without --task-out: usage error" sh -c '! "$@" 2> /dev/null' _ "${onnx[@]}" -o "$TMP/x.onnx" --classes 4

finish
