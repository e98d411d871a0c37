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
check "installs the taskpatch(1) man page" test -f "$TMP/stage/usr/share/man/man1/taskpatch.1"
check "the installed taskpatch runs" "$TMP/stage/usr/bin/taskpatch" --version

make -s -C "$root" uninstall BUILD="$build" PREFIX=/usr DESTDIR="$TMP/stage" > "$TMP/log" 2>&1
check "make uninstall exits 0" test $? -eq 0
left=$(find "$TMP/stage" -type f | sed "s|$TMP/stage||")
check "uninstall removes every installed file${left:+ (left: $left)}" test -z "$left"
finish
