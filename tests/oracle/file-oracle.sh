#!/bin/sh
# Whole-file oracle: `taskpatch quantize IN OUT TYPE` against llama.cpp's own
# llama_model_quantize() (default parameters) on the same input, byte for byte, for every
# type taskpatch supports, on F32, F16 and BF16 models and on one whose row length forces
# fallback types. llama.cpp is the pinned release: its source from the npm package
# node-llama-cpp@3.21.1 (tests/tools/npm-llama-src.sh, unpacked under build/llama-src), its
# prebuilt libllama.v0.4.0.so from @node-llama-cpp/linux-x64@3.21.1 (tests/tools/npm-ggml.sh,
# build/npm). The harness tests/oracle/llama-quantize.c is compiled here, at test time,
# against that source's include/llama.h; nothing of llama.cpp is part of the build proper.
# The llama_ftype numbers come from that llama.h, not from taskpatch.
#
# Usage: tests/oracle/file-oracle.sh BUILD_DIR   (needs BUILD_DIR/bin/taskpatch and
#        BUILD_DIR/tools/gguf-fixture); ends with "file-oracle: N passed, M failed".
set -u
build=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
passed=0 failed=0

ok() { passed=$((passed + 1)); echo "ok   $*"; }
bad() { failed=$((failed + 1)); echo "FAIL $*"; }
finish() {
        echo "file-oracle: $passed passed, $failed failed"
        [ "$failed" -eq 0 ]
        exit
}

tp=$build/bin/taskpatch
fixture=$build/tools/gguf-fixture
if [ ! -x "$tp" ] || [ ! -x "$fixture" ]; then
        bad "no $tp or $fixture (make BUILD=$build all tests-build)"
        finish
fi
if ! lib=$(sh "$root/tests/tools/npm-ggml.sh" "$root/build/npm" 2>&1); then
        bad "cannot install the pinned llama.cpp libraries: $lib"
        finish
fi
if ! src=$(sh "$root/tests/tools/npm-llama-src.sh" "$root/build/llama-src" 2>&1); then
        bad "cannot unpack the pinned llama.cpp source: $src"
        finish
fi

harness=$build/oracle/llama-quantize
mkdir -p "$build/oracle"
if ! ${CC:-cc} -std=c11 -O1 -Wall -Wextra -Werror -I"$src/include" -I"$src/ggml/include" \
        "$root/tests/oracle/llama-quantize.c" -o "$harness" "$lib/libllama.v0.4.0.so" "$lib/libggml-base.so" \
        -Wl,-rpath,"$lib" -lm 2> "$build/oracle/llama-quantize.log"; then
        bad "the harness does not compile against $src/include/llama.h: $(head -c 600 "$build/oracle/llama-quantize.log")"
        finish
fi
ok "harness built against the pinned llama.h and libllama.v0.4.0.so"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/file-oracle.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

# llama_ftype of a llama-quantize type name, from the pinned llama.h.
ftype_of() {
        case $1 in
        F32) want=LLAMA_FTYPE_ALL_F32 ;;
        *) want=LLAMA_FTYPE_MOSTLY_$1 ;;
        esac
        sed -n "s/^ *$want *= *\([0-9][0-9]*\),.*/\1/p" "$src/include/llama.h"
}

types="Q4_K_M Q4_0 Q8_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K_S Q3_K_M Q3_K_L Q4_K_S Q5_K_S Q5_K_M Q6_K F16 BF16 F32"

# run_fixture NAME FIXTURE_ARGS...: make the model, then every type by both tools, compared.
# 8 layers: the Q4_K_M/Q5_K_M "more bits" pattern has every case (first and last eighth,
# every third one between).
run_fixture() {
        name=$1
        shift
        if ! "$fixture" --ggml "$lib" "$@" --layers 8 --vocab 512 --seed 11 -o "$tmp/$name.gguf" \
                > "$tmp/fixture.log" 2>&1; then
                bad "$name: gguf-fixture failed: $(head -c 300 "$tmp/fixture.log")"
                return
        fi
        compare_types "$name" $types
}

# edit_gguf IN OUT [drop=NAME] [rename=OLD=NEW] [u32=KEY=VALUE]...: the model with tensors
# dropped or renamed and uint32 keys added, laid out again (alignment 32). Makes the cases
# gguf-fixture has no option for: tied embeddings, experts, unusual tensor names.
edit_gguf() {
        PYTHONPATH="$root/tests/tools" python3 - "$@" <<'PY'
import struct, sys
import gguf_header
src, dst, edits = sys.argv[1], sys.argv[2], sys.argv[3:]
b = open(src, "rb").read()
h = gguf_header.read(src)
kvs = [raw for _, _, raw, _ in h.kvs]
infos = [list(t) for t in h.tensors]
data = h.data_offset
ends = sorted(i[3] for i in infos)[1:] + [len(b) - data]
def size(i):
    return min(e for e in ends if e > i[3]) - i[3]
sizes = {i[0]: size(i) for i in infos}
for e in edits:
    kind, arg = e.split("=", 1)
    if kind == "drop":
        infos = [i for i in infos if i[0] != arg]
    elif kind == "rename":
        old, new = arg.split("=")
        for i in infos:
            if i[0] == old: i[0] = new; sizes[new] = sizes[old]
    elif kind == "u32":
        k, v = arg.split("=")
        kvs.append(struct.pack("<Q", len(k)) + k.encode() + struct.pack("<II", 4, int(v)))
out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(infos), len(kvs)))
for k in kvs: out += k
rel, blobs = 0, []
for name, ne, t, off in infos:
    blob = b[data + off:data + off + sizes[name]]
    out += struct.pack("<Q", len(name)) + name.encode() + struct.pack("<I", len(ne))
    out += struct.pack("<%dQ" % len(ne), *ne) + struct.pack("<IQ", t, rel)
    blobs.append(blob); rel = (rel + len(blob) + 31) // 32 * 32
out += bytes(-len(out) % 32)
for blob in blobs: out += blob + bytes(-len(blob) % 32)
open(dst, "wb").write(out)
PY
}

# compare_types NAME TYPES...: the model $tmp/NAME.gguf through both tools, for each type
# (with the importance matrix $IMATRIX when set: --imatrix to both).
IMATRIX=
compare_types() {
        name=$1
        shift
        for t in "$@"; do
                ft=$(ftype_of "$t")
                if [ -z "$ft" ]; then
                        bad "$name $t: no llama_ftype for $t in llama.h"
                        continue
                fi
                rm -f "$tmp/ll.gguf" "$tmp/tp.gguf"
                if ! "$harness" ${IMATRIX:+--imatrix "$IMATRIX"} "$tmp/$name.gguf" "$tmp/ll.gguf" "$ft" \
                        > "$tmp/ll.log" 2>&1; then
                        bad "$name $t: llama_model_quantize failed: $(head -c 300 "$tmp/ll.log")"
                        continue
                fi
                if ! "$tp" quantize -q ${IMATRIX:+--imatrix "$IMATRIX"} "$tmp/$name.gguf" "$tmp/tp.gguf" "$t" \
                        > "$tmp/tp.log" 2>&1; then
                        bad "$name $t: taskpatch quantize failed: $(head -c 300 "$tmp/tp.log")"
                        continue
                fi
                size=$(stat -c %s "$tmp/ll.gguf")
                if cmp -s "$tmp/ll.gguf" "$tmp/tp.gguf"; then
                        ok "$name $t${IMATRIX:+ with ${IMATRIX##*/}}: byte-identical to llama_model_quantize ($size bytes)"
                else
                        bad "$name $t${IMATRIX:+ with ${IMATRIX##*/}}: differs from llama_model_quantize: $(cmp "$tmp/ll.gguf" "$tmp/tp.gguf" 2>&1 | head -n 1)"
                fi
        done
}

run_fixture f32 --type f32
run_fixture f16 --type f16
run_fixture bf16 --type bf16
# Rows of 160 and 416: no K-quant block fits, so Q2_K, Q3_K -> Q4_0, Q4_K -> Q5_0, Q5_K -> Q5_1,
# Q6_K -> Q8_0.
run_fixture f32-dim160 --type f32 --dim 160 --ff 416 --heads 5
# Grouped-query attention, 4 heads per KV head: Q2_K's attn_v becomes Q4_K instead of Q3_K.
run_fixture gqa --type f32 --heads 8 --heads-kv 2

mixes="Q4_K_M Q4_0 Q8_0 Q4_K_S Q5_K_M Q6_K Q2_K Q3_K_S Q3_K_M Q3_K_L"
# Tied embeddings (no output.weight): token_embd.weight takes output's type.
edit_gguf "$tmp/f32.gguf" "$tmp/tied.gguf" drop=output.weight && compare_types tied $mixes
# 8 experts: attn_v and attn_k Q8_0, attn_output Q5_K, ffn_down's layer from its name.
edit_gguf "$tmp/f32.gguf" "$tmp/experts.gguf" u32=llama.expert_count=8 u32=llama.expert_used_count=2 &&
        compare_types experts $mixes
# Names: a 2-D bias and a *_norm.weight and an ffn_gate_inp stay F32, an attn_qkv counts as an
# attn_v, 7 attn_v tensors change the "more bits" pattern.
edit_gguf "$tmp/f32.gguf" "$tmp/names.gguf" rename=blk.0.attn_q.weight=blk.0.attn_q.bias \
        rename=blk.1.ffn_up.weight=blk.1.ffn_up_norm.weight rename=blk.2.attn_v.weight=blk.2.attn_qkv.weight \
        rename=blk.3.ffn_gate.weight=blk.3.ffn_gate_inp.weight drop=blk.7.attn_v.weight &&
        compare_types names $mixes
# Importance matrices, as llama-imatrix writes them: every quantized type with the GGUF form,
# the legacy .dat form, entries missing for two tensors (quantized without), 8 experts. With an
# imatrix, Q4_0 and Q5_0 give the first eighth of ffn_down Q4_1 / Q5_1.
imatrix_types="Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q2_K_S Q3_K_S Q3_K_M Q3_K_L Q4_K_S Q4_K_M Q5_K_S Q5_K_M Q6_K F16"
make_imatrix() { python3 "$root/tests/tools/make-imatrix.py" "$@" > "$tmp/imatrix.log" 2>&1 ||
        bad "make-imatrix.py $*: $(head -c 300 "$tmp/imatrix.log")"; }
# with_imatrix FILE NAME TYPES...: compare_types with the importance matrix FILE.
with_imatrix() {
        IMATRIX=$1
        shift
        compare_types "$@"
        IMATRIX=
}
make_imatrix "$tmp/f32.gguf" "$tmp/imatrix.gguf" --seed 3 && with_imatrix "$tmp/imatrix.gguf" f32 $imatrix_types
make_imatrix "$tmp/f32.gguf" "$tmp/imatrix.dat" --legacy --seed 4 &&
        with_imatrix "$tmp/imatrix.dat" f16 Q4_K_M Q4_0 Q3_K_M Q6_K
make_imatrix "$tmp/f32.gguf" "$tmp/partial.gguf" --seed 5 --skip blk.3.ffn_up.weight --skip output.weight &&
        with_imatrix "$tmp/partial.gguf" f32 Q4_K_M Q5_0
make_imatrix "$tmp/experts.gguf" "$tmp/experts-imatrix.gguf" --seed 6 &&
        with_imatrix "$tmp/experts-imatrix.gguf" experts Q4_K_M Q2_K Q2_K_S
# Q2_K_S: attn_v Q4_K with 4 heads per KV head, the first eighth of ffn_down Q4_K.
make_imatrix "$tmp/gqa.gguf" "$tmp/gqa-imatrix.gguf" --seed 7 && with_imatrix "$tmp/gqa-imatrix.gguf" gqa Q2_K_S Q2_K

# refuse_both NAME TYPE WORDS [IMATRIX]: both tools refuse the model $tmp/NAME.gguf as TYPE;
# taskpatch's message says WORDS.
refuse_both() {
        if "$harness" ${4:+--imatrix "$4"} "$tmp/$1.gguf" "$tmp/ll.gguf" "$(ftype_of "$2")" > "$tmp/ll.log" 2>&1; then
                bad "$1 $2${4:+ with ${4##*/}}: llama_model_quantize did not refuse it"
        elif "$tp" quantize -q ${4:+--imatrix "$4"} "$tmp/$1.gguf" "$tmp/tp.gguf" "$2" > "$tmp/tp.log" 2>&1; then
                bad "$1 $2${4:+ with ${4##*/}}: llama_model_quantize refused it, taskpatch quantize did not"
        elif ! grep -q "$3" "$tmp/tp.log"; then
                bad "$1 $2${4:+ with ${4##*/}}: taskpatch's refusal does not say '$3': $(head -c 300 "$tmp/tp.log")"
        else
                ok "$1 $2${4:+ with ${4##*/}}: refused by both ($(head -c 120 "$tmp/tp.log"))"
        fi
}
# Q2_K_S's Q2_K tensors need an importance matrix: without one, and with one missing an entry.
refuse_both f32 Q2_K_S "needs an importance matrix"
make_imatrix "$tmp/f32.gguf" "$tmp/no-q.gguf" --seed 8 --skip blk.2.attn_q.weight &&
        refuse_both f32 Q2_K_S "has no entry for it" "$tmp/no-q.gguf"
finish
