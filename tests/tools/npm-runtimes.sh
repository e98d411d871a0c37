#!/bin/sh
# Install the real inference runtimes the runtime checks, the example inference service and
# the LoRA benchmark use, from pinned npm packages, into a cache directory, and print that
# directory (its node_modules/ holds the packages):
#
#   node-llama-cpp@3.21.1                 llama.cpp's JavaScript binding
#   @node-llama-cpp/<platform>@3.21.1     its prebuilt llama.cpp for this machine (CPU only)
#   onnxruntime-node@1.22.0               ONNX Runtime; libonnxruntime.so.1 for x64 and arm64
#
# Usage: tests/tools/npm-runtimes.sh CACHE_DIR        (e.g. build/npm-runtimes)
#
# Idempotent: when CACHE_DIR already holds the pinned packages (stamp file + binaries), it
# prints the path and touches nothing, without network. Otherwise it runs one
# `npm install --save-exact --omit=optional --ignore-scripts` into a temporary directory,
# checks the registry's sha512 integrity of the three pinned packages, and renames it into
# place, so an interrupted install never looks complete. Concurrent callers serialise on
# CACHE_DIR.lock.
#
# --omit=optional keeps out node-llama-cpp's optional binary packages (CUDA, Vulkan, other
# platforms: about 1 GB); the one for this platform is named explicitly, so it is a direct
# dependency and installed. --ignore-scripts: onnxruntime-node's install script downloads
# CUDA libraries, and node-llama-cpp's would look for (or build) a binary; neither is
# needed, the CPU libraries are in the packages. Users load llama.cpp with
# getLlama({gpu: false, build: "never", skipDownload: true}), so nothing is built or
# downloaded at run time either. About 330 MB (onnxruntime-node carries every OS's library).
#
# Platforms: x86_64 → linux-x64, aarch64 → linux-arm64; NPM_RUNTIMES_PLATFORM overrides.
# shellcheck disable=SC2154  # $platform, $platform_integrity, LLAMA_NPM_*: set by npm-cache.sh
set -eu
. "$(dirname "$0")/npm-cache.sh"

ORT_VERSION=1.22.0
# sha512 integrity of the onnxruntime-node tarball (npm view onnxruntime-node@1.22.0 dist.integrity).
INTEGRITY_onnxruntime_node='sha512-QaAqr7PFekrmEsmu1rpw7OxJYyG+iACjNHoNtQIVt9Oh7st8WDPIIUe6KhF9l35HVJTJd9CV1rePoPmKhSV26g=='

die() {
        echo "npm-runtimes: $*" >&2
        exit 1
}

[ $# -eq 1 ] || die "usage: $0 CACHE_DIR"
cache=$1

npm_llama_platform "${NPM_RUNTIMES_PLATFORM:-}" NPM_RUNTIMES_PLATFORM
case $platform in
linux-x64) ort_dir=linux/x64 ;;
linux-arm64) ort_dir=linux/arm64 ;;
esac

specs="node-llama-cpp@$LLAMA_NPM_VERSION @node-llama-cpp/$platform@$LLAMA_NPM_VERSION onnxruntime-node@$ORT_VERSION"
# Files that must be there: llama.cpp's library and binding, ONNX Runtime's library.
need="node_modules/@node-llama-cpp/$platform/bins/$platform/libllama.v0.4.0.so
node_modules/@node-llama-cpp/$platform/bins/$platform/llama-addon.node
node_modules/node-llama-cpp/dist/index.js
node_modules/onnxruntime-node/bin/napi-v6/$ort_dir/libonnxruntime.so.1"
stamp_rel=".npm-runtimes-stamp"
stamp_want="$specs $LLAMA_NPM_INTEGRITY $platform_integrity $INTEGRITY_onnxruntime_node"

installed() {
        [ -f "$1/$stamp_rel" ] && [ "$(cat "$1/$stamp_rel")" = "$stamp_want" ] || return 1
        for f in $need; do
                [ -f "$1/$f" ] || return 1
        done
}

print_cache() { (cd "$cache" && pwd); }

# Fast path: no lock, no network.
if installed "$cache"; then
        print_cache
        exit 0
fi

command -v npm > /dev/null 2>&1 ||
        die "npm is not installed (need Node.js >= 20 and npm: 'make deps' or apt-get install nodejs npm)"
node_major=$(node -p 'process.versions.node.split(".")[0]' 2> /dev/null || echo 0)
[ "$node_major" -ge 20 ] || die "node-llama-cpp $LLAMA_NPM_VERSION needs Node.js >= 20, this is $(node --version 2> /dev/null || echo 'no node')"

npm_cache_begin "an npm-runtimes cache"
# shellcheck disable=SC2154  # $tmp is set by npm_cache_begin (npm-cache.sh)
log=$tmp.log

# A package.json of our own keeps npm from walking up to a parent project.
echo '{"name":"taskpatch-npm-runtimes","private":true}' > "$tmp/package.json"
# shellcheck disable=SC2086  # $specs: three package specs
if ! npm install --prefix "$tmp" --save-exact --omit=optional --ignore-scripts \
        --no-audit --no-fund --no-update-notifier --fetch-retries=2 \
        --fetch-retry-mintimeout=1000 --fetch-retry-maxtimeout=5000 --fetch-timeout=60000 \
        $specs > "$log" 2>&1; then
        reason=$(grep -E 'npm (ERR!|error)' "$log" | head -n 5)
        [ -n "$reason" ] || reason=$(tail -n 5 "$log")
        registry=$(npm config get registry 2> /dev/null || echo '?')
        die "npm install $specs failed (registry $registry unreachable or a package missing):
$reason"
fi

# The integrity npm recorded for each pinned package must be the pinned one.
lock="$tmp/node_modules/.package-lock.json"
for pair in "node-llama-cpp $LLAMA_NPM_INTEGRITY" "@node-llama-cpp/$platform $platform_integrity" \
        "onnxruntime-node $INTEGRITY_onnxruntime_node"; do
        name=${pair% *} want=${pair#* }
        got=$(node -e 'const p = require(process.argv[1]).packages["node_modules/" + process.argv[2]];
                console.log(p ? p.integrity : "(not installed)")' "$lock" "$name" 2> /dev/null) ||
                die "cannot read $lock"
        [ "$got" = "$want" ] || die "$name: registry integrity '$got' differs from the pinned '$want'"
done
for f in $need; do
        [ -f "$tmp/$f" ] || die "$specs installed but $f is missing"
done
# No GPU package slipped in (they are optional dependencies of node-llama-cpp).
for d in "$tmp/node_modules/@node-llama-cpp"/*; do
        [ "$(basename "$d")" = "$platform" ] ||
                die "unexpected binary package installed: $(basename "$d") (--omit=optional did not hold)"
done
printf '%s\n' "$stamp_want" > "$tmp/$stamp_rel"

rm -rf "$cache"
mv "$tmp" "$cache" || die "cannot move the install into $cache"
(cd "$cache" && pwd)
