#!/bin/bash
# Run by tests/check-arm.sh under qemu (WRAP): taskpatch hash against sha256sum at
# boundary lengths, with every kernel the emulated CPU can run. Not part of the host run.
. "$(dirname "$0")/lib.sh"

lengths=$(seq 0 70; for b in 4096 262144 1048576; do echo $((b - 1)) $b $((b + 1)); done)
head -c 1048577 /dev/urandom > "$TMP/src"
for n in $lengths; do head -c "$n" "$TMP/src" > "$TMP/$n"; done
files=$(for n in $lengths; do echo "$TMP/$n"; done)
# shellcheck disable=SC2086
sha256sum $files > "$TMP/want"

kernels=$(runnable_kernels)
check "the generic kernel is runnable" grep -qx generic <<< "$kernels"
for k in $kernels; do
    # shellcheck disable=SC2086
    TASKPATCH_KERNEL=$k tp hash $files > "$TMP/got"
    check "kernel $k: $(echo $lengths | wc -w) lengths match sha256sum" cmp -s "$TMP/want" "$TMP/got"
done
finish
