#!/bin/bash
# taskpatch hash agrees with sha256sum byte for byte: boundary lengths, every kernel,
# stdin, escaped names, errors, JSON, and a file over 4 GiB.
. "$(dirname "$0")/lib.sh"

# Lengths around the SHA-256 block, the 256 KiB read buffer and 1 MiB.
lengths=$(seq 0 130; for b in 4096 65536 262144 524288 1048576; do echo $((b - 1)) $b $((b + 1)); done)
head -c 1048577 /dev/urandom > "$TMP/src"
mkdir "$TMP/len"
for n in $lengths; do head -c "$n" "$TMP/src" > "$TMP/len/$n"; done
files=$(for n in $lengths; do echo "$TMP/len/$n"; done)
# shellcheck disable=SC2086
sha256sum $files > "$TMP/want"

kernels=$(runnable_kernels)
check "at least the generic kernel is runnable" grep -qx generic <<< "$kernels"
for k in $kernels; do
    # shellcheck disable=SC2086
    TASKPATCH_KERNEL=$k tp hash $files > "$TMP/got.$k"
    check "kernel $k: $(echo $lengths | wc -w) boundary lengths match sha256sum" cmp -s "$TMP/want" "$TMP/got.$k"
done

# Standard input, implicit and as "-".
tp hash < "$TMP/len/4097" > "$TMP/stdin.got"
check "stdin (no FILE) matches sha256sum" test "$(cat "$TMP/stdin.got")" = "$(sha256sum < "$TMP/len/4097")"
check "stdin (-) from a pipe matches sha256sum" cmp -s <(cat "$TMP/src" | tp hash -) <(cat "$TMP/src" | sha256sum -)

# Names sha256sum escapes: backslash, newline, carriage return; and spaces, which it does not.
mkdir "$TMP/names" && cd "$TMP/names" || exit 1
printf 1 > 'back\slash'; printf 2 > "$(printf 'new\nline')"; printf 3 > "$(printf 'car\rret')"; printf 4 > 'with space'
check "escaped file names match sha256sum" cmp -s <(tp hash -- *) <(sha256sum -- *)
cd - > /dev/null || exit 1

# Unreadable inputs: reported, the others still hashed, exit 1.
mkdir -p "$TMP/evil"
ln -s /etc/passwd "$TMP/evil/link"
tp hash "$TMP/nonexistent" "$TMP/len/3" "$TMP/evil" > "$TMP/out" 2> "$TMP/err"
rc=$?
check "errors give exit 1" test "$rc" -eq 1
check "missing file named on stderr" grep -q "nonexistent: No such file or directory" "$TMP/err"
check "a directory holding a symlink: refused, the link named" grep -q "evil: link: a symbolic link" "$TMP/err"
check "the good file is still hashed" cmp -s "$TMP/out" <(sha256sum "$TMP/len/3")

# A model directory: its set digest (SHA-256 of "taskpatch-set-v1\0", then per file in byte order
# of its path: the path, NUL, its size as 8 bytes little-endian, its SHA-256), computed here
# independently.
mkdir -p "$TMP/mdir/sub"
printf 'abc' > "$TMP/mdir/a.bin"
printf 'defgh' > "$TMP/mdir/sub/b.bin"
: > "$TMP/mdir/empty"
want=$(python3 - "$TMP/mdir" << 'PY'
import hashlib, os, sys
d = sys.argv[1]
files = sorted((os.path.relpath(os.path.join(t, f), d) for t, _, fs in os.walk(d) for f in fs), key=os.fsencode)
h = hashlib.sha256(b"taskpatch-set-v1\0")
for r in files:
    b = open(os.path.join(d, r), "rb").read()
    h.update(r.encode() + b"\0" + len(b).to_bytes(8, "little") + hashlib.sha256(b).digest())
print(h.hexdigest())
PY
)
check "a model directory hashes to its set digest" test "$(tp hash "$TMP/mdir")" = "$want  $TMP/mdir"
check "... --json counts its files" test "$(tp hash --json "$TMP/mdir" | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["files"])')" = 3
tp hash --bogus > /dev/null 2>&1
check "unknown option gives exit 2" test $? -eq 2

# JSON for machines.
tp hash --json "$TMP/len/64" "$TMP/nonexistent" > "$TMP/json" 2> /dev/null
check "--json lists sha256, size and errors" python3 - "$TMP/json" "$(sha256sum < "$TMP/len/64" | cut -c1-64)" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j[0]["sha256"] == sys.argv[2] and j[0]["size"] == 64, j
assert "error" in j[1] and "sha256" not in j[1], j
PY

# Over 4 GiB: offsets must be 64-bit. Sparse, with data past the 4 GiB mark.
big="$TMP/big"
if truncate -s 4G "$big" 2> /dev/null && printf 'tail past 4 GiB' >> "$big"; then
    want=$(openssl dgst -sha256 -r "$big" | cut -c1-64)
    got=$(tp hash "$big" | cut -c1-64)
    check "a 4 GiB + 15 B file hashes as openssl does" test "$want" = "$got"
    rm -f "$big"
else
    fail "cannot create a 4 GiB sparse file in $TMP"
fi

finish
