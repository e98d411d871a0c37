#!/bin/sh
# Check out llama.cpp's source as the pinned npm package node-llama-cpp@3.21.1 carries it
# (llama/gitRelease.bundle, a git bundle) into CACHE_DIR and print CACHE_DIR. The source
# matches the prebuilt libraries of @node-llama-cpp/linux-x64@3.21.1 (tests/tools/npm-ggml.sh):
# tests/oracle/file-oracle.sh compiles a harness against its include/llama.h and
# ggml/include/*.h and links it to that package's libllama.v0.4.0.so.
#
# Usage: tests/tools/npm-llama-src.sh CACHE_DIR        (e.g. build/llama-src)
#
# Idempotent: when CACHE_DIR holds the stamped checkout it prints the path and touches
# nothing, without network. Otherwise `npm pack node-llama-cpp@3.21.1` fetches the tarball
# into a temporary directory (no install, no scripts run), its sha512 is checked against the
# pinned integrity (npm view node-llama-cpp@3.21.1 dist.integrity), only the bundle is
# extracted, and `git clone` of the bundle goes to a temporary directory renamed into place
# at the end, so an interrupted run never looks complete. Concurrent callers serialise on
# CACHE_DIR.lock. Needs npm, git, tar, openssl (or sha512sum + xxd) and base64.
set -eu
. "$(dirname "$0")/npm-cache.sh"

VERSION=$LLAMA_NPM_VERSION
INTEGRITY=$LLAMA_NPM_INTEGRITY
BUNDLE=package/llama/gitRelease.bundle

die() {
        echo "npm-llama-src: $*" >&2
        exit 1
}

[ $# -eq 1 ] || die "usage: $0 CACHE_DIR"
cache=$1
stamp_rel=.npm-llama-src-stamp
stamp_want="node-llama-cpp@$VERSION $INTEGRITY"

installed() {
        [ -f "$1/include/llama.h" ] && [ -f "$1/$stamp_rel" ] && [ "$(cat "$1/$stamp_rel")" = "$stamp_want" ]
}

print_cache() { (cd "$cache" && pwd); }

if installed "$cache"; then
        print_cache
        exit 0
fi

for tool in npm git tar base64; do
        command -v $tool > /dev/null 2>&1 || die "$tool is not installed ('make deps' installs it)"
done

npm_cache_begin "an npm-llama-src checkout"

# shellcheck disable=SC2154  # $tmp is set by npm_cache_begin (npm-cache.sh)
if ! (cd "$tmp" && npm pack --silent --no-update-notifier --fetch-retries=2 --fetch-timeout=120000 \
        "node-llama-cpp@$VERSION" > pack.out 2> pack.log); then
        die "npm pack node-llama-cpp@$VERSION failed (registry $(npm config get registry 2> /dev/null || echo '?')):
$(tail -n 5 "$tmp/pack.log")"
fi
tgz=$tmp/node-llama-cpp-$VERSION.tgz
[ -f "$tgz" ] || die "npm pack wrote no $(basename "$tgz")"

if command -v openssl > /dev/null 2>&1; then
        digest=$(openssl dgst -sha512 -binary "$tgz" | base64 | tr -d '\n')
else
        digest=$(sha512sum "$tgz" | cut -d' ' -f1 | xxd -r -p | base64 | tr -d '\n')
fi
[ "sha512-$digest" = "$INTEGRITY" ] ||
        die "node-llama-cpp-$VERSION.tgz: sha512-$digest differs from the pinned $INTEGRITY"

tar -xzf "$tgz" -C "$tmp" "$BUNDLE" || die "the tarball holds no $BUNDLE"
git clone --quiet "$tmp/$BUNDLE" "$tmp/src" 2> "$tmp/clone.log" ||
        die "git clone of the bundle failed: $(tail -n 3 "$tmp/clone.log")"
[ -f "$tmp/src/include/llama.h" ] || die "the bundle's checkout has no include/llama.h"
printf '%s\n' "$stamp_want" > "$tmp/src/$stamp_rel"

rm -rf "$cache"
mv "$tmp/src" "$cache" || die "cannot move the checkout into $cache"
(cd "$cache" && pwd)
