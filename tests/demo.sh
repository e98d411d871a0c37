#!/bin/sh
# make demo: what TaskPatch can do on this machine today. Grows with each piece that lands
# (the full story: provision, bundle, daemon install and switch).
# Usage: tests/demo.sh BUILD_DIR
set -eu
build=$1
tp="$build/bin/taskpatch"
work=$(mktemp -d "${TMPDIR:-/tmp}/taskpatch-demo.XXXXXX")
trap 'rm -rf "$work"' EXIT

if [ -t 1 ]; then
    bold() { printf '\n\033[1m%s\033[0m\n' "$*"; }
else
    bold() { printf '\n%s\n' "$*"; }
fi
run() { printf '$ %s\n' "$*"; "$@"; }

bold "1. What this CPU offers, and the kernels TaskPatch picked for it"
run "$tp" caps

bold "2. A 64 MB stand-in model file, hashed; sha256sum agrees"
head -c 64000000 /dev/urandom > "$work/model.bin"
run "$tp" hash "$work/model.bin"
run sha256sum "$work/model.bin"
[ "$("$tp" hash "$work/model.bin")" = "$(sha256sum "$work/model.bin")" ] && echo "=> identical output"

bold "3. The same file through every single-stream SHA-256 kernel this CPU can run"
for k in $("$tp" caps | sed -n 's/^  sha256 .*(built: \(.*\))$/\1/p' | tr ' ' '\n' | grep -v unsupported); do
    t0=$(date +%s%N)
    h=$(TASKPATCH_KERNEL=$k "$tp" hash "$work/model.bin" | cut -c1-16)
    t1=$(date +%s%N)
    printf '  %-10s %s...  %5d ms\n' "$k" "$h" $(((t1 - t0) / 1000000))
done

bold "4. Machine-readable: taskpatch caps --json"
run "$tp" caps --json

printf '\nNext: bundles (taskpatch create/apply), the device daemon (taskpatchd, tpctl switch).\n'
