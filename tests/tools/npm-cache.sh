# shellcheck shell=sh
# shellcheck disable=SC2034  # the pins and $platform_integrity are read by the scripts sourcing this
# Sourced by the scripts that keep a pinned npm download in a cache directory (npm-ggml.sh,
# npm-runtimes.sh, npm-llama-src.sh): the pinned llama.cpp release line they share, and the
# part between "not there yet" and "fetch it".

# node-llama-cpp and its prebuilt llama.cpp packages, with the sha512 integrity of each tarball
# as the registry lists it (npm view PACKAGE@VERSION dist.integrity).
LLAMA_NPM_VERSION=3.21.1
LLAMA_NPM_INTEGRITY='sha512-E3N0Ev2Va0wzydvXYFwM9Hvyo07PoWjt8T/9GMc43Cvt8YkV/NU/tYUgEMC1grTPv2o9PRjQi0G3Wb5P/awiMg=='
LLAMA_NPM_INTEGRITY_linux_x64='sha512-Totj6RTDMGo3FoK2yNUaz/oGmZD0olAqTrRluFUWmu0kW2i9TOzHSW0OWCAiGkzRCVX0WsU2CyUQo/W2NYtdPA=='
LLAMA_NPM_INTEGRITY_linux_arm64='sha512-eI3anSEGzJiwF2rpMpZVTdHzw47LztbvfvuRzlu/fPO18ROnBOd+75RPUBlV6qENPpmNtbov85+3VODwEwBurg=='

# npm_llama_platform OVERRIDE VARIABLE: set $platform to the @node-llama-cpp/<platform> package
# for this machine (x86_64: linux-x64, aarch64: linux-arm64) or to OVERRIDE when it is not
# empty (the environment VARIABLE it came from is named in errors), and $platform_integrity
# to that package's pinned integrity.
npm_llama_platform() {
        platform=$1
        if [ -z "$platform" ]; then
                case $(uname -m) in
                x86_64 | amd64) platform=linux-x64 ;;
                aarch64 | arm64) platform=linux-arm64 ;;
                *) die "no pinned llama.cpp package for machine '$(uname -m)' (have linux-x64, linux-arm64)" ;;
                esac
        fi
        case $platform in
        linux-x64) platform_integrity=$LLAMA_NPM_INTEGRITY_linux_x64 ;;
        linux-arm64) platform_integrity=$LLAMA_NPM_INTEGRITY_linux_arm64 ;;
        *) die "unknown $2 '$platform' (have linux-x64, linux-arm64)" ;;
        esac
}

#
# The caller sets $cache (the directory) and $stamp_rel (the stamp file's name inside it), and
# defines die MESSAGE, installed DIR (is DIR a complete cache?) and print_cache (what to print
# when it is). npm_cache_begin KIND (what the directory is, for messages) makes $cache absolute,
# serialises concurrent callers on $cache.lock (parallel test runs), returns through print_cache
# and exit 0 if another caller completed the cache meanwhile, refuses to replace a directory it
# did not make, and creates $tmp beside the cache (removed at exit, with $tmp.log): the caller
# fills $tmp and renames it into place, so an interrupted fetch never looks complete.
# shellcheck disable=SC2154  # $stamp_rel is the caller's
npm_cache_begin() {
        _parent=$(dirname "$cache")
        mkdir -p "$_parent" || die "cannot create $_parent"
        cache=$(cd "$_parent" && pwd)/$(basename "$cache")

        exec 9> "$cache.lock" || die "cannot open $cache.lock"
        if command -v flock > /dev/null 2>&1; then
                flock 9 || die "cannot lock $cache.lock"
        fi
        if installed "$cache"; then
                print_cache
                exit 0
        fi
        # Replace only what these scripts made: an older stamped cache or an empty directory.
        if [ -e "$cache" ] && [ ! -f "$cache/$stamp_rel" ] && [ -n "$(ls -A "$cache" 2> /dev/null)" ]; then
                die "$cache exists and is not $1 (no $stamp_rel): not replacing it"
        fi
        tmp=$(mktemp -d "$cache.tmp.XXXXXX") || die "cannot create a temporary directory next to $cache"
        chmod 755 "$tmp"
        trap 'rm -rf "$tmp" "$tmp.log"' EXIT
}
