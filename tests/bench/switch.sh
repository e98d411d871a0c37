#!/bin/bash
# Device benchmarks (issue "Device"), printed as ratios against named peers in one run:
#  1. a sibling switch on a ~350 MB q4_0 model with ~12 MB tasks (page cache warm, fsync
#     included, this filesystem): bytes written into the slot vs the spans undone + written;
#     time with full verification vs one `openssl dgst -sha256` of the model and vs the
#     full-copy alternative (cp the task model, fsync it, sha256 it); the same with
#     incremental verification;
#  2. the slowest `status` answer while a switch runs (one client asking every 5 ms);
#  3. switches to relocated tasks (format 2, every tensor moved) on the ~350 MB model: time vs
#     the full-copy alternative, and the slot bytes written;
#  4. daemon memory: RssAnon idle and at its peak while switching a 4 GiB model (sampled
#     every 5 ms), VmHWM beside it, and while switching to a relocated 4 GiB task;
#     provisioning time of the 4 GiB model (no reflink on ext4).
# Usage: tests/bench/switch.sh BUILD_DIR   (RECORD=1 also writes tests/bench/results/switch.json;
#        SKIP_4G=1 leaves out part 4's 4 GiB models, which need ~30 GB of disk)
set -eu
build=$(cd "$1" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
tp="$build/bin/taskpatch" tpctl="$build/bin/tpctl" daemon="$build/bin/taskpatchd"
fix="$build/tools/gguf-fixture"
work="$build/bench/switch"
mkdir -p "$work"
ggml=$(sh "$root/tests/tools/npm-ggml.sh" "$root/build/npm" | tail -n 1)
sh "$root/tests/tools/make-pki.sh" "$work/pki" > /dev/null
sign=(--key "$work/pki/signer.key" --cert "$work/pki/signer.crt")
results="$work/results.jsonl"
: > "$results"
dpid=
trap '[ -n "$dpid" ] && kill "$dpid" 2> /dev/null; true' EXIT

size() { stat -c %s "$1"; }
emit() { echo "$1" >> "$results"; }
ns() { date +%s%N; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", a / b}'; }
secs() { awk -v t="$1" 'BEGIN {printf "%.4f", t / 1e9}'; }
best() { printf '%s\n' "$@" | sort -n | head -n 1; }

# start_daemon NAME [EXTRA-YAML]: a daemon on $work/NAME
start_daemon() {
    local d="$work/$1"
    rm -rf "$d"
    mkdir -p "$d"
    printf 'state_dir: %s/state\nsocket: %s/sock\nmodel_path: %s/state/model.gguf\ntrust:\n  ca: %s/pki/ca.pem\ntrial:\n  timeout: 600\n%s\n' \
        "$d" "$d" "$d" "$work" "${2:-}" > "$d/conf.yaml"
    TASKPATCHD_LOG_LEVEL=notice "$daemon" --config "$d/conf.yaml" 2> "$d/log" &
    dpid=$!
    sock="$d/sock"
    for _ in $(seq 200); do [ -S "$sock" ] && break; sleep 0.05; done
    model="$d/state/model.gguf"
}
stop_daemon() { kill "$dpid"; wait "$dpid" 2> /dev/null || true; dpid=; }
ctl() { "$tpctl" --socket "$sock" --no-progress "$@"; }
st() { ctl --json status | python3 -c "import json,sys; v=json.load(sys.stdin)
for k in sys.argv[1].split('.'): v = v[k]
print(v)" "$1"; }

# sample_rss PID: every 5 ms, the peak RssAnon and VmHWM (KB) so far, one "peak hwm" line each, until PID ends.
sample_rss() {
    python3 - "$1" <<'PY'
import sys, time
peak = 0
path = f"/proc/{sys.argv[1]}/status"
t_end = time.time() + 600
while time.time() < t_end:
    try:
        v = dict(l.split(':', 1) for l in open(path))
        anon = int(v['RssAnon'].split()[0])
    except (OSError, KeyError):
        break                   # the daemon is gone (a zombie has no RssAnon)
    peak = max(peak, anon)
    hwm = int(v['VmHWM'].split()[0])
    print(peak, hwm, flush=True)
    time.sleep(0.005)
PY
}

# rotate PREFIX TASK...: switch to each PREFIX+TASK in turn (mark-good, bytes checked against
# $work/PREFIX+TASK.gguf); the fastest switch in t_best, the most slot bytes one wrote in written.
rotate() {
    local prefix=$1 task t0 t1 times=() bytes=()
    shift
    for task in "$@"; do
        t0=$(ns); ctl switch "$prefix$task" > /dev/null; t1=$(ns)
        times+=($((t1 - t0)))
        bytes+=("$(st counters.last_switch_slot_bytes)")
        ctl mark-good > /dev/null
        cmp -s "$model" "$work/$prefix$task.gguf" || { echo "switch.sh: $prefix$task is not byte-identical" >&2; exit 1; }
    done
    t_best=$(best "${times[@]}")
    written=$(printf '%s\n' "${bytes[@]}" | sort -n | tail -n 1)
}

echo "1. sibling switches on a ~350 MB q4_0 model (page cache warm, fsync included, $(stat -f -c %T "$work"))"
dims=(--type q4_0 --dim 2048 --ff 5632 --layers 12 --vocab 300)
tq="blk.0.attn_q.weight,blk.0.attn_v.weight,blk.1.attn_q.weight,blk.1.attn_v.weight,blk.2.attn_q.weight"
tv="blk.5.attn_q.weight,blk.5.attn_v.weight,blk.6.attn_q.weight,blk.6.attn_v.weight,blk.7.attn_q.weight"
tb="blk.9.attn_q.weight,blk.9.attn_v.weight,blk.10.attn_q.weight,blk.10.attn_v.weight,blk.11.attn_q.weight"
[ -f "$work/base.gguf" ] || "$fix" --ggml "$ggml" "${dims[@]}" -o "$work/base.gguf" > /dev/null
[ -f "$work/json.gguf" ] || "$fix" --ggml "$ggml" "${dims[@]}" --mode lora --targets "$tq" -o "$work/json.gguf" > /dev/null
[ -f "$work/shout.gguf" ] || "$fix" --ggml "$ggml" "${dims[@]}" --mode lora --targets "$tv" --task-seed 9 -o "$work/shout.gguf" > /dev/null
[ -f "$work/bullet.gguf" ] || "$fix" --ggml "$ggml" "${dims[@]}" --mode lora --targets "$tb" --task-seed 13 -o "$work/bullet.gguf" > /dev/null
for t in json shout bullet; do
    "$tp" create "$work/base.gguf" "$work/$t.gguf" -o "$work/$t.tpb" --task "$t" "${sign[@]}" --level 3 > /dev/null
done
msize=$(size "$work/base.gguf")
spans() { "$tp" inspect --json "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["changed_bytes"])'; }
sj=$(spans "$work/json.tpb")
printf '   model %d B; three sibling tasks (json, shout, bullet), each changing 5 tensors: spans %d B, bundle %d B\n' \
    "$msize" "$sj" "$(size "$work/json.tpb")"

# The peers, in this run: one openssl pass; the full-copy alternative.
sync
cat "$work/base.gguf" "$work"/*.gguf > /dev/null
dg=() fc=()
for _ in 1 2 3 4 5; do
    t0=$(ns); openssl dgst -sha256 "$work/base.gguf" > /dev/null; t1=$(ns); dg+=($((t1 - t0)))
    t0=$(ns); cp "$work/json.gguf" "$work/copy.gguf" && sync "$work/copy.gguf" && openssl dgst -sha256 "$work/copy.gguf" > /dev/null
    t1=$(ns); fc+=($((t1 - t0))); rm -f "$work/copy.gguf"
done
t_dgst=$(best "${dg[@]}") t_copy=$(best "${fc[@]}")
printf '   openssl dgst -sha256 of the model: %s s; cp + fsync + openssl dgst of the task model: %s s\n' \
    "$(secs "$t_dgst")" "$(secs "$t_copy")"

for mode in full incremental; do
    start_daemon "$mode" "verify: $mode"
    t0=$(ns); ctl provision "$work/base.gguf" > /dev/null; t1=$(ns)
    t_prov=$((t1 - t0))
    for t in json shout bullet; do ctl install "$work/$t.tpb" > /dev/null; done
    # Both slots get a task first; then three tasks rotate through two slots, so every measured
    # switch undoes one task in the inactive slot and writes another.
    ctl switch json > /dev/null; ctl mark-good > /dev/null
    ctl switch shout > /dev/null; ctl mark-good > /dev/null
    rotate "" bullet json shout bullet json shout
    t_sw=$t_best
    undo_total=$(st counters.undo_bytes_written) state_total=$(st counters.state_bytes_written)
    n_sw=$(st counters.switches)
    budget=$((2 * sj))
    printf '   %-11s switch %s s: %s x openssl dgst, %s x full copy; slot bytes %d = %s x (undone %d + written %d); undo %d B/switch, state files %d B/switch\n' \
        "$mode:" "$(secs "$t_sw")" "$(ratio "$t_sw" "$t_dgst")" "$(ratio "$t_sw" "$t_copy")" "$written" \
        "$(ratio "$written" "$budget")" "$sj" "$sj" $((undo_total / n_sw)) $((state_total / n_sw))
    emit "{\"case\": \"switch-350MB-$mode\", \"model_bytes\": $msize, \"switch_s\": $(secs "$t_sw"), \"openssl_dgst_s\": $(secs "$t_dgst"), \"full_copy_s\": $(secs "$t_copy"), \"ratio_to_dgst\": $(ratio "$t_sw" "$t_dgst"), \"ratio_to_full_copy\": $(ratio "$t_sw" "$t_copy"), \"slot_bytes\": $written, \"spans_undone_plus_written\": $budget, \"undo_bytes_per_switch\": $((undo_total / n_sw)), \"state_bytes_per_switch\": $((state_total / n_sw)), \"provision_s\": $(secs "$t_prov")}"

    if [ "$mode" = full ]; then
        echo
        echo "2. the slowest status answer during a switch (one client, a request every 5 ms)"
        python3 - "$sock" "$tpctl" > "$work/latency.txt" <<'PY'
import json, socket, subprocess, sys, time
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); f = s.makefile('rb')
sw = subprocess.Popen([sys.argv[2], '--socket', sys.argv[1], '--no-progress', 'switch', 'bullet'], stdout=subprocess.DEVNULL)
worst, n = 0.0, 0
while sw.poll() is None:
    t0 = time.perf_counter(); s.sendall(b'{"cmd":"status"}\n'); r = json.loads(f.readline())
    worst = max(worst, time.perf_counter() - t0); n += 1
    time.sleep(0.005)
print(f"{worst * 1000:.2f} {n}")
PY
        read -r worst n < "$work/latency.txt"
        ctl mark-good > /dev/null
        printf '   %d status requests during the switch, slowest answer %s ms (required < 100 ms)\n' "$n" "$worst"
        emit "{\"case\": \"status-latency-during-switch\", \"requests\": $n, \"worst_ms\": $worst}"
        echo
    fi
    stop_daemon
done
printf '   provisioning the 350 MB model (copy into two slots, hash both): %s s\n' "$(secs "$t_prov")"

echo
echo "3. switches to relocated tasks on the ~350 MB model (the three tasks with general.name grown by 60"
echo "   characters: every tensor moves; each is built into a fresh file from base bytes; fsync included)"
longname="a release renamed this model: sixty characters longer than before"
for t in json shout bullet; do
    [ -f "$work/moved-$t.gguf" ] || python3 "$root/tests/tools/gguf-relayout.py" "$work/$t.gguf" -o "$work/moved-$t.gguf" \
        --set-string "general.name=$longname"
    "$tp" create "$work/base.gguf" "$work/moved-$t.gguf" -o "$work/moved-$t.tpb" --task "moved-$t" "${sign[@]}" --level 3 > /dev/null
done
sync    # the relaid-out files just written are not flushed under the timed switches
fc=()
for _ in 1 2 3 4 5; do
    t0=$(ns); cp "$work/moved-json.gguf" "$work/copy.gguf" && sync "$work/copy.gguf" && openssl dgst -sha256 "$work/copy.gguf" > /dev/null
    t1=$(ns); fc+=($((t1 - t0))); rm -f "$work/copy.gguf"
done
t_copy_moved=$(best "${fc[@]}")
start_daemon relocated "verify: full"
ctl provision "$work/base.gguf" > /dev/null
for t in json shout bullet; do ctl install "$work/moved-$t.tpb" > /dev/null; done
# From the base: built into slot b from its base bytes. Then the three rotate: each switch builds
# into the inactive slot from the base bytes of the relocated task it replaces there.
t0=$(ns); ctl switch moved-json > /dev/null; t1=$(ns)
t_first=$((t1 - t0))
ctl mark-good > /dev/null
rotate moved- shout bullet json shout bullet json
t_rel=$t_best
# Back to the base: the inactive slot holds a relocated task, so the base is built from it too.
t0=$(ns); ctl switch --base > /dev/null; t1=$(ns)
t_back=$((t1 - t0))
ctl mark-good > /dev/null
cmp -s "$model" "$work/base.gguf" || { echo "switch.sh: back to the base is not byte-identical" >&2; exit 1; }
stop_daemon
msize_moved=$(size "$work/moved-json.gguf")
printf '   cp + fsync + openssl dgst of a relocated task model (%d B): %s s\n' "$msize_moved" "$(secs "$t_copy_moved")"
printf '   relocated -> relocated switch %s s: %s x full copy; from the base %s s (%s x); back to the base %s s (%s x); slot bytes %d = %s x the task model\n' \
    "$(secs "$t_rel")" "$(ratio "$t_rel" "$t_copy_moved")" "$(secs "$t_first")" "$(ratio "$t_first" "$t_copy_moved")" \
    "$(secs "$t_back")" "$(ratio "$t_back" "$t_copy_moved")" "$written" "$(ratio "$written" "$msize_moved")"
emit "{\"case\": \"switch-350MB-relocated\", \"model_bytes\": $msize_moved, \"switch_s\": $(secs "$t_rel"), \"from_base_s\": $(secs "$t_first"), \"to_base_s\": $(secs "$t_back"), \"full_copy_s\": $(secs "$t_copy_moved"), \"ratio_to_full_copy\": $(ratio "$t_rel" "$t_copy_moved"), \"slot_bytes\": $written}"

if [ "${SKIP_4G:-0}" != 1 ]; then
    echo
    echo "4. daemon memory: idle, and at its peak while switching a 4 GiB model"
    python3 - "$work" <<'PY'
import os, sys
d = sys.argv[1]
size = 4 << 30
with open(f"{d}/big-base.bin", "wb") as f:
    f.truncate(size)
    for off in range(0, size, 32 << 20):
        f.seek(off); f.write(os.urandom(1 << 20))
import shutil
for name, seed in (("big-a.bin", 1), ("big-b.bin", 2)):
    shutil.copyfile(f"{d}/big-base.bin", f"{d}/{name}")
    with open(f"{d}/{name}", "r+b") as f:
        for k, off in enumerate((seed << 20, 1 << 30, (3 << 30) + (seed << 22), size - (8 << 20))):
            f.seek(off); f.write(os.urandom(3 << 20))
PY
    "$tp" create "$work/big-base.bin" "$work/big-a.bin" -o "$work/big-a.tpb" --task biga "${sign[@]}" --level 3 > /dev/null
    "$tp" create "$work/big-base.bin" "$work/big-b.bin" -o "$work/big-b.tpb" --task bigb "${sign[@]}" --level 3 > /dev/null
    start_daemon big
    sleep 0.5
    idle=$(awk '/^RssAnon/ {print $2}' "/proc/$dpid/status")
    t0=$(ns); ctl provision "$work/big-base.bin" > /dev/null; t1=$(ns)
    t_prov4=$((t1 - t0))
    ctl install "$work/big-a.tpb" > /dev/null
    ctl install "$work/big-b.tpb" > /dev/null
    ctl switch biga > /dev/null; ctl mark-good > /dev/null
    sample_rss "$dpid" > "$work/rss.txt" &
    sampler=$!
    t0=$(ns); ctl switch bigb > /dev/null; t1=$(ns)
    ctl mark-good > /dev/null
    cmp -s "$model" "$work/big-b.bin" || { echo "switch.sh: 4 GiB switch is not byte-identical" >&2; exit 1; }
    idle_after=$(awk '/^RssAnon/ {print $2}' "/proc/$dpid/status")
    stop_daemon
    wait "$sampler" 2> /dev/null || true
    read -r peak hwm < <(tail -n 1 "$work/rss.txt")
    printf '   RssAnon idle %d KB (required <= 4 MB), after the work %d KB; peak while switching %d KB (required <= 16 MB); VmHWM %d KB\n' \
        "$idle" "$idle_after" "$peak" "$hwm"
    printf '   provisioning 4 GiB (copy into two slots and hash both, ext4 has no reflink): %s s; the switch: %s s\n' \
        "$(secs "$t_prov4")" "$(secs $((t1 - t0)))"
    emit "{\"case\": \"memory-4GiB\", \"rss_anon_idle_kb\": $idle, \"rss_anon_idle_after_kb\": $idle_after, \"rss_anon_peak_kb\": $peak, \"vmhwm_kb\": $hwm, \"provision_4GiB_s\": $(secs "$t_prov4"), \"switch_4GiB_s\": $(secs $((t1 - t0)))}"
    rm -rf "$work"/big-* "$work/big"

    # A relocated 4 GiB task: 16 F16 tensors of 256 MiB, general.name grown (every tensor moves), two changed.
    synth=(python3 "$root/tests/tools/gguf-synth.py" --tensors 16 --tensor-mib 256)
    "${synth[@]}" -o "$work/big-base.gguf"
    "${synth[@]}" -o "$work/big-moved.gguf" --name "a release renamed this model: sixty characters longer" --change 3,11
    "$tp" create "$work/big-base.gguf" "$work/big-moved.gguf" -o "$work/big-moved.tpb" --task bigmoved "${sign[@]}" \
        --level 3 > /dev/null
    start_daemon big
    ctl provision "$work/big-base.gguf" > /dev/null
    ctl install "$work/big-moved.tpb" > /dev/null
    sync    # 8 GiB of models just written: not flushed under the timed switch
    t0=$(ns); cp "$work/big-moved.gguf" "$work/big-copy.gguf" && sync "$work/big-copy.gguf" &&
        openssl dgst -sha256 "$work/big-copy.gguf" > /dev/null; t1=$(ns)
    t_copy_big=$((t1 - t0))
    rm -f "$work/big-copy.gguf"
    sample_rss "$dpid" > "$work/rss.txt" &
    sampler=$!
    t0=$(ns); ctl switch bigmoved > /dev/null; t1=$(ns)
    ctl mark-good > /dev/null
    cmp -s "$model" "$work/big-moved.gguf" || { echo "switch.sh: the relocated 4 GiB switch is not byte-identical" >&2; exit 1; }
    stop_daemon
    wait "$sampler" 2> /dev/null || true
    read -r peak_rel hwm_rel < <(tail -n 1 "$work/rss.txt")
    printf '   relocated 4 GiB task (every tensor moved, 2 of 16 changed): RssAnon peak while switching %d KB (required <= 16 MB); VmHWM %d KB; the switch: %s s (cp + fsync + openssl dgst of it: %s s, %s x)\n' \
        "$peak_rel" "$hwm_rel" "$(secs $((t1 - t0)))" "$(secs "$t_copy_big")" "$(ratio $((t1 - t0)) "$t_copy_big")"
    emit "{\"case\": \"memory-4GiB-relocated\", \"rss_anon_peak_kb\": $peak_rel, \"vmhwm_kb\": $hwm_rel, \"switch_4GiB_s\": $(secs $((t1 - t0))), \"full_copy_4GiB_s\": $(secs "$t_copy_big")}"
    rm -rf "$work"/big-* "$work/big"
fi

BENCH_DIR="$root/tests/bench" python3 - "$results" "$work/switch.json" <<'PY'
import json, os, sys
sys.path.insert(0, os.environ["BENCH_DIR"])
from conditions import conditions
cases = [json.loads(l) for l in open(sys.argv[1])]
cond = conditions(path=os.path.dirname(sys.argv[2]), page_cache="warm", flush="included (daemon and the cp peer)")
json.dump({"benchmark": "switch", "conditions": cond, "cases": cases}, open(sys.argv[2], "w"), indent=2)
PY
if [ "${RECORD:-0}" = 1 ]; then
    mkdir -p "$root/tests/bench/results"
    cp "$work/switch.json" "$root/tests/bench/results/switch.json"
    echo "recorded tests/bench/results/switch.json"
fi
