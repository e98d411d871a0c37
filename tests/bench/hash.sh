#!/bin/sh
# SHA-256 benchmark: the whole `taskpatch hash` command against `openssl dgst -sha256` on a
# 400 MB file in page cache (process start included, best of 5 each) and with the page cache
# cold (posix_fadvise DONTNEED before every run), the portable kernel against `sha256sum`, and
# in-memory kernel throughput (multi-buffer against single-stream).
# Prints ratios; writes build/bench/hash.json (and tests/bench/results/hash.json with RECORD=1).
# Usage: tests/bench/hash.sh BUILD_DIR
set -eu
build=$1
tp="$build/bin/taskpatch"
size_mb=${HASH_BENCH_MB:-400}
file="$build/bench/hash-${size_mb}M.bin"
runs=5

mkdir -p "$build/bench"
[ -f "$file" ] || head -c "$((size_mb * 1000 * 1000))" /dev/urandom > "$file"
cat "$file" > /dev/null   # page cache warm

# best_of CMD...: the best wall time of $runs runs, in seconds.
best_of() {
    best=""
    for _ in $(seq "$runs"); do
        t0=$(date +%s%N)
        "$@" > /dev/null
        t1=$(date +%s%N)
        t=$((t1 - t0))
        if [ -z "$best" ] || [ "$t" -lt "$best" ]; then best=$t; fi
    done
    echo "$best" | awk '{printf "%.4f", $1 / 1e9}'
}

# cold CMD...: best_of with the file dropped from the page cache before each run (after an
# fsync, posix_fadvise(POSIX_FADV_DONTNEED): the reads then come from the storage).
drop_cache() {
    python3 -c 'import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
os.fsync(fd)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$file"
}
best_of_cold() {
    best=""
    for _ in $(seq "$runs"); do
        drop_cache
        t0=$(date +%s%N)
        "$@" > /dev/null
        t1=$(date +%s%N)
        t=$((t1 - t0))
        if [ -z "$best" ] || [ "$t" -lt "$best" ]; then best=$t; fi
    done
    echo "$best" | awk '{printf "%.4f", $1 / 1e9}'
}

# The two must agree before their speeds mean anything.
a=$("$tp" hash "$file" | cut -c1-64)
b=$(openssl dgst -sha256 -r "$file" | cut -c1-64)
[ "$a" = "$b" ] || { echo "hash.sh: taskpatch and openssl disagree on $file" >&2; exit 1; }

kernel=$("$tp" caps --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["kernels"]["sha256"])')
t_tp=$(best_of "$tp" hash "$file")
t_ssl=$(best_of openssl dgst -sha256 "$file")
t_gen=$(TASKPATCH_KERNEL=generic best_of "$tp" hash "$file")
t_sum=$(best_of sha256sum "$file")
t_tp_cold=$(best_of_cold "$tp" hash "$file")
t_ssl_cold=$(best_of_cold openssl dgst -sha256 "$file")
cat "$file" > /dev/null   # warm again for whoever runs next

mbs() { awk -v s="$size_mb" -v t="$1" 'BEGIN {printf "%.0f", s / t}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", a / b}'; }

echo "file: $size_mb MB in page cache; best of $runs; wall time with process start"
printf '%-40s %7s s %6s MB/s\n' "taskpatch hash ($kernel)" "$t_tp" "$(mbs "$t_tp")"
printf '%-40s %7s s %6s MB/s\n' "openssl dgst -sha256" "$t_ssl" "$(mbs "$t_ssl")"
printf '%-40s %7s s %6s MB/s\n' "taskpatch hash (generic)" "$t_gen" "$(mbs "$t_gen")"
printf '%-40s %7s s %6s MB/s\n' "sha256sum" "$t_sum" "$(mbs "$t_sum")"
r_ssl=$(ratio "$t_ssl" "$t_tp")
r_sum=$(ratio "$t_sum" "$t_gen")
echo "ratio: taskpatch hash speed / openssl = ${r_ssl}x   (required >= 0.95, goal >= 1.0)"
echo "ratio: generic kernel speed / sha256sum = ${r_sum}x"
printf '%-40s %7s s %6s MB/s\n' "taskpatch hash, page cache cold" "$t_tp_cold" "$(mbs "$t_tp_cold")"
printf '%-40s %7s s %6s MB/s\n' "openssl dgst -sha256, page cache cold" "$t_ssl_cold" "$(mbs "$t_ssl_cold")"
r_cold=$(ratio "$t_ssl_cold" "$t_tp_cold")
echo "ratio: cold cache, taskpatch hash speed / openssl = ${r_cold}x"

echo
echo "in-memory kernels (64 MiB, best of 5; multi-buffer over 64 KiB chunks), MB/s:"
"$build/bench/bench-sha256" | tee "$build/bench/kernels.txt" | sed 's/^/  /'
gen=$(awk '$1 == "sha256" && $2 == "generic" {print $3}' "$build/bench/kernels.txt")
lanes=$(awk '$1 == "sha256-multi" && ($2 == "avx2" || $2 == "neon") {print $2, $3}' "$build/bench/kernels.txt")
r_multi=null
if [ -n "$lanes" ]; then
    r_multi=$(ratio "${lanes#* }" "$gen")
    echo "ratio: ${lanes% *} multi-buffer / generic single-stream = ${r_multi}x   (goal >= 2.5)"
fi

python3 - "$build/bench/hash.json" <<PY
import json, sys
sys.path.insert(0, "$(dirname "$0")")
from conditions import conditions
kernels = {}
for line in open("$build/bench/kernels.txt"):
    fam, name, v = line.split()
    kernels.setdefault(fam, {})[name] = float(v)
cond = conditions(path="$build/bench", page_cache="warm", flush="none (read-only)")
cond.update({"file_mb": $size_mb, "runs": $runs, "timing": "wall time of the whole command, best of runs"})
cold = conditions(path="$build/bench", page_cache="cold", flush="none (read-only)")
cold.update({"file_mb": $size_mb, "runs": $runs, "timing": "wall time, best of runs, posix_fadvise(DONTNEED) after fsync before each"})
out = {
    "benchmark": "hash",
    "conditions": cond,
    "seconds": {"taskpatch_hash": $t_tp, "openssl_dgst": $t_ssl, "taskpatch_hash_generic": $t_gen, "sha256sum": $t_sum},
    "kernel": "$kernel",
    "ratios": {"taskpatch_vs_openssl": $r_ssl, "generic_vs_sha256sum": $r_sum, "multi_vs_generic": $r_multi},
    "kernels_mb_s": kernels,
    "cold": {"conditions": cold, "taskpatch_hash_s": $t_tp_cold, "openssl_dgst_s": $t_ssl_cold,
             "taskpatch_vs_openssl": $r_cold},
}
json.dump(out, open(sys.argv[1], "w"), indent=2)
PY
if [ "${RECORD:-0}" = 1 ]; then
    mkdir -p tests/bench/results
    cp "$build/bench/hash.json" tests/bench/results/hash.json
    echo "recorded tests/bench/results/hash.json"
fi
