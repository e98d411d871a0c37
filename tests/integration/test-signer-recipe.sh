#!/bin/bash
# The signer recipe of taskpatch(1) ("SIGNER CERTIFICATES") and the README, cut out of the man
# page's source and run verbatim: its key and certificate must sign a bundle that verifies
# against its CA, so the documented recipe cannot rot. The README's copy must be the same
# commands, and the rendered page must show them as they run (no hyphen turned typographic).
. "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
man="$root/packaging/man/taskpatch.1"

# The lines between the markers, roff escapes decoded; anything else in them is an error.
python3 - "$man" "$root/README.md" "$TMP/recipe.sh" > "$TMP/extract.out" 2>&1 <<'PY'
import re, sys
man, readme, out = sys.argv[1:]
src = open(man).read().split("\n")
begin = [i for i, l in enumerate(src) if l.startswith('.\\" signer-recipe: begin')]
end = [i for i, l in enumerate(src) if l.startswith('.\\" signer-recipe: end')]
assert len(begin) == 1 and len(end) == 1 and begin[0] < end[0], "markers not found once each, in order"
lines = []
for l in src[begin[0] + 1:end[0]]:
    if l in (".nf", ".fi"):
        continue
    assert not l.startswith((".", "'")), f"a roff request inside the recipe: {l!r}"
    # Every '-' must be \- (a bare one may render as a typographic hyphen).
    assert not re.search(r"(?<!\\)-", l.replace("\\e", "")), f"a bare '-' (write \\-): {l!r}"
    d = re.sub(r"\\(e|-|\(aq|\(dq)", lambda m: {"e": "\\", "-": "-", "(aq": "'", "(dq": '"'}[m.group(1)], l)
    rest = re.sub(r"\\(e|-|\(aq|\(dq)", "", l)
    assert "\\" not in rest, f"an escape the test does not decode: {l!r}"
    lines.append(d)
assert len(lines) >= 5 and any(l.startswith("openssl ") for l in lines), "no recipe between the markers"
recipe = "\n".join(lines) + "\n"
open(out, "w").write(recipe)
m = re.search(r"<!-- signer-recipe: begin -->\n```sh\n(.*?)```\n<!-- signer-recipe: end -->", open(readme).read(), re.S)
assert m, "README: no signer-recipe block"
assert m.group(1) == recipe, "README's recipe differs from the man page's"
print("extracted", len(lines), "lines")
PY
rc=$?
check "the recipe is cut out of taskpatch.1 (markers, escapes) and the README has the same" test $rc -eq 0
if [ $rc -ne 0 ]; then
    cat "$TMP/extract.out"
    finish
    exit 1
fi

if command -v groff > /dev/null; then
    # What a reader copies from the rendered page: every line of the recipe, as it runs.
    groff -man -Tutf8 -rLL=300n -P-cbou "$man" 2> /dev/null | sed 's/^ *//' > "$TMP/rendered.txt"
    check "the rendered man page shows every line of the recipe exactly as it runs" python3 - "$TMP/recipe.sh" "$TMP/rendered.txt" <<'PY'
import sys
recipe = [l.strip() for l in open(sys.argv[1]).read().splitlines()]
rendered = open(sys.argv[2], encoding="utf-8").read().splitlines()
start = rendered.index(recipe[0])
assert rendered[start:start + len(recipe)] == recipe, rendered[start:start + len(recipe)]
PY
fi

mkdir "$TMP/pki"
(cd "$TMP/pki" && sh -eu "$TMP/recipe.sh") > "$TMP/recipe.out" 2>&1
rc=$?
check "the recipe runs verbatim (sh -eu) in an empty directory" test $rc -eq 0
[ $rc -eq 0 ] || cat "$TMP/recipe.out"
check "... and makes ca.pem, signer.key and signer.crt" \
    test -s "$TMP/pki/ca.pem" -a -s "$TMP/pki/signer.key" -a -s "$TMP/pki/signer.crt"

head -c 200000 /dev/urandom > "$TMP/base.bin"
cp "$TMP/base.bin" "$TMP/target.bin"
printf 'changed' | dd of="$TMP/target.bin" bs=1 seek=100000 conv=notrunc status=none
tp create "$TMP/base.bin" "$TMP/target.bin" -o "$TMP/r.tpb" --task recipe \
    --key "$TMP/pki/signer.key" --cert "$TMP/pki/signer.crt" > "$TMP/out" 2>&1
rc=$?
check "taskpatch create signs with the recipe's key and certificate" test $rc -eq 0
[ $rc -eq 0 ] || cat "$TMP/out"
tp verify "$TMP/r.tpb" --ca "$TMP/pki/ca.pem" > "$TMP/out" 2>&1
rc=$?
check "taskpatch verify --ca ca.pem accepts the bundle, signed by CN=example-signer" \
    bash -c "test $rc -eq 0 && grep -q 'OK: CN=example-signer' '$TMP/out'"
[ $rc -eq 0 ] || cat "$TMP/out"
tp apply "$TMP/base.bin" "$TMP/r.tpb" -o "$TMP/out.bin" --ca "$TMP/pki/ca.pem" --no-sync > /dev/null 2>&1
check "taskpatch apply --ca ca.pem rebuilds the target" cmp -s "$TMP/out.bin" "$TMP/target.bin"

# Why the recipe is needed: a certificate made the usual way (no keyUsage) is refused.
(cd "$TMP/pki" && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout usual.key \
    -out usual.crt -subj "/CN=usual" -days 30) > /dev/null 2>&1
tp create "$TMP/base.bin" "$TMP/target.bin" -o "$TMP/u.tpb" --task recipe \
    --key "$TMP/pki/usual.key" --cert "$TMP/pki/usual.crt" > "$TMP/out" 2>&1
rc=$?
check "a certificate made without the recipe (no keyUsage) is refused, no bundle" \
    bash -c "test $rc -eq 1 && test ! -e '$TMP/u.tpb' && grep -q 'no key usage extension' '$TMP/out'"

finish
