#!/bin/bash
# Relocating bundles (format 2): a task whose layout moved (metadata grown, so every tensor
# offset shifts; an ONNX classifier resized; a raw file that grows) is matched by site name:
# create -> verify -> apply rebuilds it byte for byte, mostly from copies of base bytes; equal layouts still make
# format 1, and a committed format-1 bundle made before format 2 existed still applies.
# Hostile format-2 manifests (holes, overlaps, copies outside the base, spans past the
# target, a section that is not a zstd frame) are refused with the span and offset (or what
# was expected) named, and no output file is left.
. "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
fix="$(dirname "$BIN")/tools/gguf-fixture"

ggml=$(sh "$root/tests/tools/npm-ggml.sh" "$root/build/npm" 2> "$TMP/npm.err" | tail -n 1)
if [ ! -e "$ggml/libggml-base.so" ]; then
    fail "ggml from npm is not available: $(cat "$TMP/npm.err")"
    finish
    exit 1
fi

json_field() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {}, {"d": d}))' "$@"; }

# ---- a renamed model: general.name grew, the data section shifted ---------------------
dims=(--dim 256 --ff 512 --layers 2 --vocab 300)
for t in q4_0 q8_0 f16 q4_K; do
    b="$TMP/b-$t.gguf" k="$TMP/k-$t.gguf" s="$TMP/same-$t.gguf"
    "$fix" --ggml "$ggml" --type "$t" "${dims[@]}" -o "$b" > /dev/null
    "$fix" --ggml "$ggml" --type "$t" "${dims[@]}" --mode lora --targets attn_q,attn_v \
        --name "taskpatch-fixture, renamed by its fine-tune to something sixty characters longer" -o "$k" > /dev/null
    "$fix" --ggml "$ggml" --type "$t" "${dims[@]}" --mode lora --targets attn_q,attn_v -o "$s" > /dev/null
    if tp create "$b" "$k" -o "$TMP/$t.tpb" --task "rl-${t,,}" --unsigned --level 3 --json > "$TMP/create.json" &&
       tp verify "$TMP/$t.tpb" --allow-unsigned > /dev/null && tp apply "$b" "$TMP/$t.tpb" -o "$TMP/o-$t.gguf" \
           --allow-unsigned > /dev/null && cmp -s "$TMP/o-$t.gguf" "$k"; then
        ok "$t: a renamed task (every offset moved) is rebuilt byte for byte"
    else
        fail "$t: renamed task: create, verify or apply failed"
        continue
    fi
    fmt=$(json_field "$TMP/create.json" 'd["format"]')
    fates=$(json_field "$TMP/create.json" '(d["sites"]["changed"], d["sites"]["moved"], d["sites"]["added"])')
    [ "$fmt" = 2 ] && [ "$fates" = "(4, 17, 0)" ] && ok "$t: format 2, 4 sites changed and 17 moved" ||
        fail "$t: format $fmt, fates (changed, moved, added) $fates"
    # The bundle is about the change, not the move: no larger than the in-layout bundle + 4 KiB.
    tp create "$b" "$s" -o "$TMP/same-$t.tpb" --task "rl-${t,,}" --unsigned --level 3 --json > "$TMP/same.json"
    moved=$(stat -c %s "$TMP/$t.tpb") same=$(stat -c %s "$TMP/same-$t.tpb")
    [ "$(json_field "$TMP/same.json" 'd["format"]')" = 1 ] && [ "$moved" -le $((same + 4096)) ] &&
        ok "$t: an equal layout still makes format 1; the moved one costs $moved B against $same B" ||
        fail "$t: relocating bundle $moved B, in-layout bundle $same B"
    # inspect and diff agree on changed_bytes (the bytes the spans code).
    tp inspect --json "$TMP/$t.tpb" > "$TMP/inspect.json"
    tp diff --json "$b" "$k" > "$TMP/diff.json"
    ci=$(json_field "$TMP/inspect.json" 'd["changed_bytes"]') cd=$(json_field "$TMP/diff.json" 'd["changed_bytes"]')
    cc=$(json_field "$TMP/create.json" 'd["changed_bytes"]')
    [ "$ci" = "$cd" ] && [ "$cd" = "$cc" ] && ok "$t: changed_bytes $ci in inspect, diff and create" ||
        fail "$t: changed_bytes: inspect $ci, diff $cd, create $cc"
done

# The locality report lists changed sites before moved ones and names the move.
tp diff "$TMP/b-q4_0.gguf" "$TMP/k-q4_0.gguf" > "$TMP/diff.txt"
if sed -n 2p "$TMP/diff.txt" | grep -q '^  changed  blk.0.attn_q.weight' && grep -q '^  moved    token_embd.weight' "$TMP/diff.txt"; then
    ok "diff: changed sites first, then moved ones"
else
    fail "diff: $(head -n 3 "$TMP/diff.txt")"
fi

# --dry-run: the plan and the size, no key, nothing written.
before=$(ls -A "$TMP" | wc -l)
if tp create "$TMP/b-q4_0.gguf" "$TMP/k-q4_0.gguf" --task dry --level 3 --dry-run --json > "$TMP/dry.json"; then
    tp create "$TMP/b-q4_0.gguf" "$TMP/k-q4_0.gguf" -o "$TMP/dry.tpb" --task dry --unsigned --level 3 > /dev/null
    want=$(stat -c %s "$TMP/dry.tpb")
    got=$(json_field "$TMP/dry.json" 'd["bundle_bytes"]')
    kinds=$(json_field "$TMP/dry.json" 'sorted(set(s["encoding"] for s in d["span_list"]))')
    rm -f "$TMP/dry.tpb"
    [ "$got" = "$want" ] && [ "$(ls -A "$TMP" | wc -l)" = $((before + 1)) ] && [ "$kinds" = "['copy', 'delta', 'ref']" ] &&
        ok "--dry-run: the plan ($kinds) and the size ($got B, as the bundle) without a key or a file" ||
        fail "--dry-run: size $got (bundle $want), encodings $kinds"
else
    fail "--dry-run failed"
fi

# --expect-sites is about changed tensors, not moved ones.
printf 'blk.0.attn_q.weight\nblk.0.attn_v.weight\nblk.1.attn_q.weight\nblk.1.attn_v.weight\n' > "$TMP/expect"
tp create "$TMP/b-q4_0.gguf" "$TMP/k-q4_0.gguf" -o "$TMP/e.tpb" --task e --unsigned --level 3 \
    --expect-sites "$TMP/expect" > /dev/null 2>&1 && ok "--expect-sites: the 4 changed tensors, the 17 moved ones not" ||
    fail "--expect-sites refused the changed set of a moved layout"

# ---- an ONNX INT8 model whose classifier grew: short copies fold into the coded spans -------
python3 "$root/tests/tools/make-onnx.py" --layers 16 --seed 4 -o "$TMP/ob.onnx" --task-out "$TMP/ot.onnx" \
    --change-layers 4 --classes 40 > /dev/null
if tp create "$TMP/ob.onnx" "$TMP/ot.onnx" -o "$TMP/onnx.tpb" --task onnx --unsigned --level 3 > /dev/null &&
   tp apply "$TMP/ob.onnx" "$TMP/onnx.tpb" -o "$TMP/onnx.out" --allow-unsigned > /dev/null &&
   cmp -s "$TMP/onnx.out" "$TMP/ot.onnx"; then
    tp inspect "$TMP/onnx.tpb" --json > "$TMP/onnx.json"
    plan=$(json_field "$TMP/onnx.json" '[s["encoding"] for s in d["span_list"]]')
    # The header up to the first changed weight, one i8 delta over the four changed layers and
    # the copies between them, and the resized classifier with the copies before it.
    [ "$plan" = "['ref', 'delta', 'ref']" ] && ok "onnx: classifier resized, 4 layers changed: 3 spans ($plan)" ||
        fail "onnx: spans $plan"
else
    fail "onnx: the classifier-resize pair is not rebuilt"
fi

# ---- a raw file that grows ------------------------------------------------------------
python3 - "$TMP" <<'PY'
import random, sys
random.seed(3)
a = bytes(random.getrandbits(8) for _ in range(300000))
b = a[:120000] + b"inserted bytes" + a[120000:] + bytes(random.getrandbits(8) for _ in range(5000))
open(sys.argv[1] + "/a.bin", "wb").write(a)
open(sys.argv[1] + "/b.bin", "wb").write(b)
PY
if tp create "$TMP/a.bin" "$TMP/b.bin" -o "$TMP/raw.tpb" --task raw --unsigned --level 3 > /dev/null &&
   tp apply "$TMP/a.bin" "$TMP/raw.tpb" -o "$TMP/raw.out" --allow-unsigned > /dev/null && cmp -s "$TMP/raw.out" "$TMP/b.bin"; then
    size=$(stat -c %s "$TMP/raw.tpb")
    [ "$size" -lt 20000 ] && ok "a grown raw file: rebuilt, bundle $size B for 5014 new bytes" ||
        fail "a grown raw file: bundle $size B"
else
    fail "a grown raw file is not rebuilt"
fi

# ---- a format-1 bundle made before format 2 existed -----------------------------------
tiny=(--type q8_0 --dim 64 --ff 128 --layers 1 --vocab 259)
"$fix" --ggml "$ggml" "${tiny[@]}" -o "$TMP/tb.gguf" > /dev/null
"$fix" --ggml "$ggml" "${tiny[@]}" --mode lora -o "$TMP/tt.gguf" > /dev/null
f1="$(dirname "$0")/fixtures/format1-q8_0.tpb"
if tp apply "$TMP/tb.gguf" "$f1" -o "$TMP/f1.out" --allow-unsigned > /dev/null && cmp -s "$TMP/f1.out" "$TMP/tt.gguf" &&
   tp verify "$f1" --allow-unsigned > /dev/null; then
    ok "the committed format-1 bundle still verifies and applies"
else
    fail "the committed format-1 bundle no longer applies"
fi

# ---- hostile format-2 manifests ------------------------------------------------------------
# Rewrites the manifest of an unsigned bundle (format 2's section is a zstd frame of the YAML:
# decoded, edited, coded again with its size; "plain" leaves it decoded): argv: in out what
mutate() {
    python3 - "$@" <<'PY'
import os, re, struct, subprocess, sys, tempfile
src, dst, what = sys.argv[1:4]
d = open(src, "rb").read()
ms, ss = struct.unpack("<QQ", d[16:32])
assert d[64:68] == b"\x28\xb5\x2f\xfd", "a format-2 manifest section is a zstd frame"
text = subprocess.run(["zstd", "-q", "-d", "-c"], input=d[64:64 + ms], stdout=subprocess.PIPE, check=True).stdout.decode()
lines = text.split("\n")
spans = [i for i, l in enumerate(lines) if l.startswith("- {offset:")]
def field(i, k, v):
    lines[i] = re.sub(r"\b%s: \d+" % k, "%s: %d" % (k, v), lines[i])
def get(i, k):
    return int(re.search(r"\b%s: (\d+)" % k, lines[i]).group(1))
copies = [i for i in spans if "encoding: copy" in lines[i]]
base_size = int(re.search(r"base:\n  sha256: \w+\n  size: (\d+)", text).group(1))
if what == "hole":
    field(spans[1], "offset", get(spans[1], "offset") + 1)
elif what == "overlap":
    field(spans[1], "offset", get(spans[1], "offset") - 1)
elif what == "outside":
    field(copies[0], "base_offset", base_size - 10)
elif what == "short":
    del lines[spans[-1]]
elif what == "past":
    # the target is declared shorter than its last span reaches
    text2 = "\n".join(lines)
    m = re.search(r"(target:\n  sha256: \w+\n  size: )(\d+)", text2)
    text2 = text2[:m.start(2)] + str(int(m.group(2)) - 4096) + text2[m.end(2):]
    lines = text2.split("\n")
text = "\n".join(lines).encode()
if what != "plain":
    with tempfile.NamedTemporaryFile() as f:
        f.write(text)
        f.flush()
        text = subprocess.run(["zstd", "-q", "-19", "-c", f.name], stdout=subprocess.PIPE, check=True).stdout
out = d[:16] + struct.pack("<Q", len(text)) + d[24:64] + text + d[64 + ms:]
open(dst, "wb").write(out)
PY
}
declare -A expect=(
    [hole]="leaves a hole in the target"
    [overlap]="overlaps or precedes the previous span"
    [outside]="lie outside the base"
    [short]="the spans end at offset .*is in no span"
    [past]="runs past the target size"
    [plain]="does not start with the zstd magic"
)
for m in hole overlap outside short past plain; do
    mutate "$TMP/q4_0.tpb" "$TMP/bad-$m.tpb" "$m"
    rm -f "$TMP/bad.out"
    if tp apply "$TMP/b-q4_0.gguf" "$TMP/bad-$m.tpb" -o "$TMP/bad.out" --allow-unsigned > /dev/null 2> "$TMP/bad.err"; then
        fail "$m: a hostile manifest was applied"
    elif grep -q "${expect[$m]}" "$TMP/bad.err" && grep -Eq 'span #|offset|magic' "$TMP/bad.err" && [ ! -e "$TMP/bad.out" ] &&
         ! ls "$TMP"/.bad.out* > /dev/null 2>&1; then
        ok "$m: refused before a byte is written ($(head -c 150 "$TMP/bad.err"))"
    else
        fail "$m: $(cat "$TMP/bad.err")"
    fi
done

finish
