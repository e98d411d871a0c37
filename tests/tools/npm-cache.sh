# shellcheck shell=sh
# Sourced by the scripts that keep a pinned npm download in a cache directory (npm-ggml.sh,
# npm-runtimes.sh, npm-llama-src.sh): the part they share between "not there yet" and "fetch it".
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
