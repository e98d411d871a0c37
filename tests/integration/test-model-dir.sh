#!/bin/bash
# Models of several files (a directory): a GGUF with side files (config.json, a tokenizer in a
# subdirectory). A task that keeps every file's size is patched in place (format 1), one that
# adds, resizes or removes files relocates (format 2); either way create (signed) -> verify ->
# apply rebuilds the task directory file for file (diff -r), the manifest lists the files and
# every span names its file, and apply replaces an existing output directory atomically.
# Wrong bases (a changed, missing or extra file), symlinks, special files and two model
# families in one directory are refused with the file's name, and nothing is written.
. "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)

sh "$root/tests/tools/make-pki.sh" "$TMP/pki" > /dev/null || fail "make-pki.sh"
K=(--key "$TMP/pki/signer.key" --cert "$TMP/pki/signer.crt")
CA=(--ca "$TMP/pki/ca.pem")
if ! lib=$("$root/tests/tools/npm-ggml.sh" "$root/build/npm" 2> "$TMP/npm.err"); then
    fail "npm cache of llama.cpp (build/npm): $(cat "$TMP/npm.err")"
    finish
    exit 1
fi
export TASKPATCH_GGML_LIB=$lib
fixture=${FIXTURE:-$(dirname "$BIN")/tools/gguf-fixture}

B=$TMP/base T=$TMP/task
mkdir -p "$B/tokenizer" "$T/tokenizer"
"$fixture" --type q8_0 -o "$B/model.gguf" > /dev/null
"$fixture" --type q8_0 --mode lora -o "$T/model.gguf" > /dev/null
printf '{"arch": "llama", "v": 1}\n' > "$B/config.json"
printf '{"arch": "llama", "v": 2}\n' > "$T/config.json"
head -c 20000 /dev/urandom > "$B/tokenizer/vocab.bin"
cp "$B/tokenizer/vocab.bin" "$T/tokenizer/"

# ---- in place -------------------------------------------------------------------------------
check "create BASE/ TASK/: a bundle of a directory" \
    tp create "$B" "$T" --task dir --version 1 "${K[@]}" -o "$TMP/dir.tpb" > "$TMP/out"
check "verify: signed, every hash" tp verify "$TMP/dir.tpb" "${CA[@]}" > /dev/null
tp inspect --json "$TMP/dir.tpb" > "$TMP/inspect.json"
check "in place (format 1); files and spans name their file" python3 - "$TMP/inspect.json" << 'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["format"] == 1, j["format"]
paths = [f["path"] for f in j["target"]["files"]]
assert paths == ["config.json", "model.gguf", "tokenizer/vocab.bin"], paths
assert [f["path"] for f in j["base"]["files"]] == paths
files = {s["file"] for s in j["span_list"]}
assert files == {"config.json", "model.gguf"}, files
assert all(s["file_offset"] + s["length"] <= next(f["size"] for f in j["target"]["files"] if f["path"] == s["file"])
           for s in j["span_list"])
PY
check "apply BASE/ bundle -o OUT/" tp apply "$B" "$TMP/dir.tpb" "${CA[@]}" -o "$TMP/out1" > /dev/null
check "... OUT/ is the task, file for file" diff -r "$TMP/out1" "$T"

# ---- layout moved: a file added, one resized, one removed ------------------------------------
T2=$TMP/task2
cp -r "$T" "$T2"
printf '{"arch": "llama", "v": 3, "comment": "longer now"}\n' > "$T2/config.json"
printf 'new\n' > "$T2/added.txt"
rm "$T2/tokenizer/vocab.bin"
head -c 3000 /dev/urandom > "$T2/tokenizer/merges.bin"
check "create: files added, resized, removed" \
    tp create "$B" "$T2" --task dir2 --version 1 "${K[@]}" -o "$TMP/dir2.tpb" > /dev/null
tp inspect --json "$TMP/dir2.tpb" > "$TMP/inspect2.json"
check "relocating (format 2), the model's tensors copied or coded against the base" python3 - "$TMP/inspect2.json" << 'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["format"] == 2, j["format"]
enc = j["encodings"]
assert enc["copy"] > 0 and enc["delta"] > 0, enc
# The unchanged tensors are not in the payload: well under the changed tensors' bytes.
assert j["payload_bytes"] < 400000, j["payload_bytes"]
PY
mkdir -p "$TMP/out2" && echo stale > "$TMP/out2/stale.txt"
check "apply over an existing directory" tp apply "$B" "$TMP/dir2.tpb" "${CA[@]}" -o "$TMP/out2" > /dev/null
check "... replaced it: the task, no stale file" diff -r "$TMP/out2" "$T2"
check "... no temporary left beside it" test -z "$(find "$TMP" -maxdepth 1 -name '.*taskpatch*')"

# ---- wrong bases: refused, nothing written -----------------------------------------------------
refused() { # DESC BASE WANT
    local desc=$1 base=$2 want=$3
    rm -rf "$TMP/bad-out"
    if tp apply "$base" "$TMP/dir.tpb" "${CA[@]}" -o "$TMP/bad-out" > /dev/null 2> "$TMP/err"; then
        fail "$desc: applied"
    elif ! grep -q -- "$want" "$TMP/err"; then
        fail "$desc: message lacks '$want': $(cat "$TMP/err")"
    elif [ -e "$TMP/bad-out" ]; then
        fail "$desc: an output was written"
    else
        ok "$desc: refused ($(head -c 160 "$TMP/err"))"
    fi
}
cp -r "$B" "$TMP/b-changed" && printf '{"arch": "llama", "v": 0}\n' > "$TMP/b-changed/config.json"
refused "a base file changed" "$TMP/b-changed" "wrong base"
cp -r "$B" "$TMP/b-missing" && rm "$TMP/b-missing/config.json"
refused "a base file missing" "$TMP/b-missing" "config.json"
cp -r "$B" "$TMP/b-extra" && echo x > "$TMP/b-extra/zz.txt"
refused "an extra file in the base" "$TMP/b-extra" "zz.txt"
refused "a single file for a directory bundle" "$B/model.gguf" "directory"
cp -r "$B" "$TMP/b-link" && ln -s /etc/passwd "$TMP/b-link/passwd"
refused "a symlink in the base" "$TMP/b-link" "passwd: a symbolic link"

# ---- directories that are not one model ---------------------------------------------------------
cp -r "$B" "$TMP/two" && python3 "$root/tests/tools/make-onnx.py" --layers 2 --channels 4 -o "$TMP/two/det.onnx" > /dev/null
if tp diff "$TMP/two" "$TMP/two" > /dev/null 2> "$TMP/err"; then
    fail "a GGUF and an ONNX model in one directory: accepted"
else
    check "a GGUF and an ONNX model in one directory: refused, naming both" \
        grep -q "det.onnx.*model.gguf\|model.gguf.*det.onnx" "$TMP/err"
fi
mkdir -p "$TMP/fifo" && mkfifo "$TMP/fifo/p"
if tp create "$TMP/fifo" "$T" --task x --version 1 --unsigned -o "$TMP/fifo.tpb" > /dev/null 2> "$TMP/err"; then
    fail "a FIFO in a model directory: accepted"
else
    check "a FIFO in a model directory: refused, no bundle" \
        sh -c "grep -q 'p: not a regular file' '$TMP/err' && ! test -e '$TMP/fifo.tpb'"
fi

# ---- single files stay single ---------------------------------------------------------------------
check "create FILE FILE: no files list, spans without file" sh -c \
    "'$BIN/taskpatch' create '$B/model.gguf' '$T/model.gguf' --task one --version 1 --unsigned -o '$TMP/one.tpb' > /dev/null &&
     '$BIN/taskpatch' inspect --json '$TMP/one.tpb' | python3 -c 'import json,sys; j=json.load(sys.stdin); assert \"files\" not in j[\"target\"] and all(\"file\" not in s for s in j[\"span_list\"])'"
finish
