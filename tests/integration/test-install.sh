#!/bin/bash
# make install / uninstall are symmetric and honour PREFIX and DESTDIR.
. "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(dirname "$BIN")

make -s -C "$root" install BUILD="$build" PREFIX=/usr DESTDIR="$TMP/stage" > "$TMP/log" 2>&1
check "make install exits 0" test $? -eq 0
for f in usr/bin/taskpatch usr/bin/tpctl usr/bin/taskpatchd; do
    check "installs /$f, executable" test -x "$TMP/stage/$f"
done
# Every page in packaging/man goes to the section its name ends in: taskpatch.1, tpctl.1,
# taskpatchd.8, taskpatchd.yaml.5.
pages=
for src in "$root"/packaging/man/*.[1-8]; do
    page=$(basename "$src")
    dst="usr/share/man/man${page##*.}/$page"
    pages="$pages $dst"
    check "installs the ${page%.*}(${page##*.}) man page as /$dst" cmp -s "$src" "$TMP/stage/$dst"
    check "... mode 0644" test "$(stat -c %a "$TMP/stage/$dst" 2> /dev/null)" = 644
done
for page in taskpatch.1 tpctl.1 taskpatchd.8 taskpatchd.yaml.5; do
    check "packaging/man has $page" test -f "$root/packaging/man/$page"
done
check "the installed taskpatch runs" "$TMP/stage/usr/bin/taskpatch" --version

make -s -C "$root" uninstall BUILD="$build" PREFIX=/usr DESTDIR="$TMP/stage" > "$TMP/log" 2>&1
check "make uninstall exits 0" test $? -eq 0
left=$(find "$TMP/stage" -type f | sed "s|$TMP/stage||")
check "uninstall removes every installed file${left:+ (left: $left)}" test -z "$left"
for dst in $pages; do
    check "uninstall removes /$dst" test ! -e "$TMP/stage/$dst"
done
finish
