#!/bin/sh
# Install real llama.cpp prebuilt shared libraries (the pinned npm package
# @node-llama-cpp/<platform>@3.21.1) into a cache directory and print the directory that
# holds libggml-base.so. Fixture generators dlopen() it for ggml's own quantizer
# (ggml_quantize_chunk); libllama.v0.4.0.so in the same directory exports
# llama_model_quantize and llama_adapter_lora_init.
#
# Usage: tests/tools/npm-ggml.sh CACHE_DIR        (e.g. build/npm)
#
# Idempotent: when CACHE_DIR already holds the pinned package (stamp file + library), it
# prints the path and touches nothing, without network. Otherwise it installs with
# `npm install --save-exact --ignore-scripts --omit=optional` into a temporary directory,
# checks the registry's sha512 integrity against the pinned value, and renames it into
# place, so an interrupted install never looks complete. Concurrent callers serialise on
# CACHE_DIR.lock. Only the binary package is installed, never node-llama-cpp itself: its
# optional CUDA/Vulkan packages are about 1 GB.
#
# libggml-base.so needs only libc, libm, libstdc++ and libgcc_s (DT_NEEDED) and has
# RUNPATH $ORIGIN: dlopen() it by its full path, no LD_LIBRARY_PATH. libllama and libggml
# find their siblings through the same $ORIGIN runpath; ggml's CPU backends
# (libggml-cpu-<microarch>.so) are plugins that libggml loads at run time, not DT_NEEDED.
#
# Platforms: x86_64 → @node-llama-cpp/linux-x64 (bins/linux-x64); aarch64 →
# @node-llama-cpp/linux-arm64 (bins/linux-arm64). NPM_GGML_PLATFORM=linux-arm64 installs
# the arm64 package on an x86 host (its package.json allows cpu x64 too), e.g. for runs
# under qemu-aarch64; give each platform its own CACHE_DIR.
# shellcheck disable=SC2154  # $platform_integrity, LLAMA_NPM_*: set by npm-cache.sh
set -eu
. "$(dirname "$0")/npm-cache.sh"

die() {
        echo "npm-ggml: $*" >&2
        exit 1
}

[ $# -eq 1 ] || die "usage: $0 CACHE_DIR"
cache=$1

npm_llama_platform "${NPM_GGML_PLATFORM:-}" NPM_GGML_PLATFORM
integrity=$platform_integrity

spec="@node-llama-cpp/$platform@$LLAMA_NPM_VERSION"
libdir_rel="node_modules/@node-llama-cpp/$platform/bins/$platform"
stamp_rel=".npm-ggml-stamp"
stamp_want="$spec $integrity"

installed() {
        [ -f "$1/$libdir_rel/libggml-base.so" ] && [ -f "$1/$stamp_rel" ] &&
                [ "$(cat "$1/$stamp_rel")" = "$stamp_want" ]
}

print_cache() { (cd "$cache/$libdir_rel" && pwd); }

# Fast path: no lock, no network.
if installed "$cache"; then
        print_cache
        exit 0
fi

command -v npm > /dev/null 2>&1 ||
        die "npm is not installed (need Node.js >= 20 and npm: 'make deps' or apt-get install nodejs npm)"

npm_cache_begin "an npm-ggml cache"
# shellcheck disable=SC2154  # $tmp is set by npm_cache_begin (npm-cache.sh)
log=$tmp.log

# An empty package.json keeps npm from walking up to a parent project.
echo '{"name":"taskpatch-npm-ggml","private":true}' > "$tmp/package.json"
if ! npm install --prefix "$tmp" --save-exact --ignore-scripts --omit=optional \
        --no-audit --no-fund --no-update-notifier --fetch-retries=2 \
        --fetch-retry-mintimeout=1000 --fetch-retry-maxtimeout=5000 --fetch-timeout=60000 \
        "$spec" > "$log" 2>&1; then
        reason=$(grep -E 'npm (ERR!|error)' "$log" | head -n 5)
        [ -n "$reason" ] || reason=$(tail -n 5 "$log")
        registry=$(npm config get registry 2>/dev/null || echo '?')
        die "npm install $spec failed (registry $registry unreachable or package missing):
$reason"
fi

lock="$tmp/node_modules/.package-lock.json"
got=$(sed -n 's/^ *"integrity": "\(.*\)",\{0,1\}$/\1/p' "$lock" 2>/dev/null | head -n 1)
[ "$got" = "$integrity" ] ||
        die "$spec: registry integrity '$got' differs from the pinned '$integrity'"
[ -f "$tmp/$libdir_rel/libggml-base.so" ] ||
        die "$spec installed but $libdir_rel/libggml-base.so is missing"
printf '%s\n' "$stamp_want" > "$tmp/$stamp_rel"

rm -rf "$cache"
mv "$tmp" "$cache" || die "cannot move the install into $cache"
(cd "$cache/$libdir_rel" && pwd)
