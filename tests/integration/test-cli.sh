#!/bin/bash
# The three binaries: help, version, usage errors; taskpatch caps and TASKPATCH_KERNEL.
. "$(dirname "$0")/lib.sh"

for b in taskpatch tpctl taskpatchd; do
    check "$b --help exits 0 and shows usage" bash -c "$WRAP '$BIN/$b' --help | grep -q Usage"
    check "$b --version prints its version" bash -c "$WRAP '$BIN/$b' --version | grep -Eq '^$b [0-9]+\.[0-9]+'"
done

tp frobnicate > /dev/null 2> "$TMP/err"
check "unknown command: exit 2" test $? -eq 2
check "unknown command: named on stderr" grep -q "unknown command 'frobnicate'" "$TMP/err"

tp caps --json > "$TMP/caps.json"
check "caps --json: every feature of the architecture is a boolean" python3 - "$TMP/caps.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
names = {"x86_64": "sse4.1 ssse3 avx avx2 avx512f sha_ni",
         "aarch64": "neon aes pmull sha1 sha2 sha3 sha512 crc32 atomics fp16 dotprod i8mm bf16 sve sve2 sme sme2"}
assert j["arch"] in names, j["arch"]
want = names[j["arch"]].split()
assert sorted(j["features"]) == sorted(want), j["features"]
assert all(isinstance(v, bool) for v in j["features"].values())
assert isinstance(j["kernels"]["sha256"], str) and isinstance(j["kernels"]["sha256-multi"], str)
PY

arch=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["arch"])' < "$TMP/caps.json")
if [ "$arch" = x86_64 ] && [ -z "$WRAP" ]; then
    # The host's own view of its CPU, from the kernel.
    grep -qw sha_ni /proc/cpuinfo && has=true || has=false
    check "caps agrees with /proc/cpuinfo about sha_ni" \
        python3 -c "import json,sys; assert json.load(open('$TMP/caps.json'))['features']['sha_ni'] == $([ $has = true ] && echo True || echo False)"
    grep -qw avx2 /proc/cpuinfo && has=True || has=False
    check "caps agrees with /proc/cpuinfo about avx2" \
        python3 -c "import json,sys; assert json.load(open('$TMP/caps.json'))['features']['avx2'] == $has"
fi

TASKPATCH_KERNEL=generic tp caps --json > "$TMP/generic.json"
check "TASKPATCH_KERNEL=generic forces every family" python3 -c "
import json; k = json.load(open('$TMP/generic.json'))['kernels']; assert set(k.values()) == {'generic'}, k"

TASKPATCH_KERNEL=nonsense tp hash /dev/null > /dev/null 2> "$TMP/err"
check "unknown TASKPATCH_KERNEL: exit 2" test $? -eq 2
check "unknown TASKPATCH_KERNEL: explained" grep -q "TASKPATCH_KERNEL=nonsense names no kernel" "$TMP/err"

other=$([ "$arch" = x86_64 ] && echo neon || echo avx2)
TASKPATCH_KERNEL=$other tp hash /dev/null > /dev/null 2> "$TMP/err"
check "a kernel of another architecture is refused" test $? -eq 2

# An output path that names a fifo, device or directory is never replaced by the rename that
# commits a written file (as root, "-o /dev/null" would otherwise become a regular file).
printf 'some bytes to stand in for a model\n' > "$TMP/in.bin"
mkfifo "$TMP/fifo"
tp create "$TMP/in.bin" "$TMP/in.bin" -o "$TMP/fifo" --task x --unsigned > /dev/null 2> "$TMP/err"
check "create -o FIFO: refused (exit 1)" test $? -eq 1
check "... saying why, and the fifo is still a fifo" \
    bash -c "grep -q 'not a regular file: not replacing it' '$TMP/err' && test -p '$TMP/fifo'"
tp create "$TMP/in.bin" "$TMP/in.bin" -o "$TMP/x.tpb" --task x --unsigned > /dev/null 2>&1
tp apply "$TMP/in.bin" "$TMP/x.tpb" -o "$TMP" --allow-unsigned > /dev/null 2> "$TMP/err"
check "apply -o DIRECTORY: refused (exit 1)" test $? -eq 1
check "... saying it is a directory" grep -q 'is a directory: not replacing it' "$TMP/err"

finish
