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
#     every 5 ms), VmHWM beside it, the same with three models configured (the 4 GiB one and
#     two small ones, issue 18), and while switching to a relocated 4 GiB task;
#     provisioning time of the 4 GiB model (no reflink on ext4);
#  5. part 1 on directory models (issue 17): the ~350 MB model split into three GGUF shards, and a
#     ~350 MB float32 ONNX model with its data in one external file; slot bytes written vs the
#     spans undone + written, switch time vs the full-copy alternative (cp -r, fsync, sha256 of
#     every file);
#  6. daemon memory with three models configured (issue 18: models:): RssAnon idle with all
#     three provisioned (the ~350 MB file, its split, the ONNX directory) and at its peak while
#     switching the ~350 MB one;
#  7. base replacement on the ~350 MB model (issue 18): a base bundle of a re-release (three
#     tensors retrained) switched to, then the background re-provisioning of the other slot after
#     its commit: time vs the full-copy alternative, and the slowest status answer meanwhile;
#  8. encrypted bundles (issue 19): part 1's sibling switches with the three tasks' bundles
#     encrypted to the device (create --encrypt-to, trust.decrypt_key) against the same plain
#     ones, alternating in one daemon, with full and with incremental verification;
#  9. lora spans (issue 20): a ~330 MB Q8_0 model and three sibling tasks made with their
#     adapters (rank 16, 5 tensors each): the switch to a task whose bundle carries lora spans
#     (the device predicts them) against the same task's delta-coded bundle, alternating in one
#     daemon, full verification; the slowest status answer during a predicted switch.
# Usage: tests/bench/switch.sh BUILD_DIR   (RECORD=1 also writes tests/bench/results/switch.json;
#        PARTS="1 8" runs only the parts listed, default all of them, and SKIP_4G=1 leaves out part
#        4's 4 GiB models, which need ~30 GB of disk: the recorded cases of the parts not run are
#        carried over into switch.json, marked so and with their own conditions)
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

parts=" ${PARTS:-1 2 3 4 5 6 7 8 9} "
want() { case $parts in *" $1 "*) return 0 ;; esac; return 1; }
[ "${SKIP_4G:-0}" = 1 ] && parts=${parts/ 4 / }

size() { stat -c %s "$1"; }
emit() { echo "$1" >> "$results"; }
# ns VAR: the time in ns into VAR. No process is started: a fork (date, or even a subshell) costs
# 4-8 ms on a small VM, which a timed switch of ~70 ms would otherwise include.
ns() { local t=$EPOCHREALTIME; printf -v "$1" '%s000' "${t/./}"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", a / b}'; }
secs() { awk -v t="$1" 'BEGIN {printf "%.4f", t / 1e9}'; }
best() { printf '%s\n' "$@" | sort -n | head -n 1; }

# start_daemon NAME [EXTRA-YAML [MODEL]]: a daemon on $work/NAME whose model_path is state/MODEL
# (default model.gguf; a name without an extension is a directory model); $trust_extra, when set,
# is added to its trust: section (whole lines)
start_daemon() {
    local d="$work/$1"
    rm -rf "$d"
    mkdir -p "$d"
    printf 'state_dir: %s/state\nsocket: %s/sock\nmodel_path: %s/state/%s\ntrust:\n  ca: %s/pki/ca.pem\n%strial:\n  timeout: 600\n%s\n' \
        "$d" "$d" "$d" "${3:-model.gguf}" "$work" "${trust_extra:-}" "${2:-}" > "$d/conf.yaml"
    run_daemon "$1"
    model="$d/state/${3:-model.gguf}"
}
# run_daemon NAME: a daemon on $work/NAME/conf.yaml (its socket $work/NAME/sock), up.
run_daemon() {
    TASKPATCHD_LOG_LEVEL=notice "$daemon" --config "$work/$1/conf.yaml" 2> "$work/$1/log" &
    dpid=$!
    sock="$work/$1/sock"
    for _ in $(seq 200); do [ -S "$sock" ] && break; sleep 0.05; done
}
stop_daemon() { kill "$dpid"; wait "$dpid" 2> /dev/null || true; dpid=; }
# measure_switch TASK WANT [TPCTL-OPTIONS...]: switch to TASK and mark it good, RssAnon sampled
# every 5 ms (sample_rss below); model_path checked against WANT; then the daemon stopped. Sets
# t_switch (ns), idle_after (RssAnon after the switch, KB), peak and hwm (KB).
measure_switch() {
    local task=$1 want=$2 t0 t1 sampler
    shift 2
    sample_rss "$dpid" > "$work/rss.txt" &
    sampler=$!
    ns t0; ctl "$@" switch "$task" > /dev/null; ns t1
    ctl "$@" mark-good > /dev/null
    cmp -s "$model" "$want" || { echo "switch.sh: the switch to $task is not byte-identical" >&2; exit 1; }
    idle_after=$(awk '/^RssAnon/ {print $2}' "/proc/$dpid/status")
    stop_daemon
    wait "$sampler" 2> /dev/null || true
    read -r peak hwm < <(tail -n 1 "$work/rss.txt")
    t_switch=$((t1 - t0))
}
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

# same_model WANT: model_path holds WANT byte for byte (a directory: its files, and no others).
same_model() {
    if [ -d "$1" ]; then diff -r "$model/" "$1/" > /dev/null; else cmp -s "$model" "$1"; fi
}

# rotate PREFIX TASK...: switch to each PREFIX+TASK in turn (mark-good, bytes checked against
# $work/PREFIX+TASK$ext, ext .gguf unless set); the fastest switch in t_best, the most slot bytes
# one wrote in written, every switch's slot bytes in each_bytes (a comma-separated list).
ext=.gguf
rotate() {
    local prefix=$1 task t0 t1 times=() bytes=()
    shift
    for task in "$@"; do
        ns t0; ctl switch "$prefix$task" > /dev/null; ns t1
        times+=($((t1 - t0)))
        bytes+=("$(st counters.last_switch_slot_bytes)")
        ctl mark-good > /dev/null
        same_model "$work/$prefix$task$ext" || { echo "switch.sh: $prefix$task is not byte-identical" >&2; exit 1; }
    done
    t_best=$(best "${times[@]}")
    written=$(printf '%s\n' "${bytes[@]}" | sort -n | tail -n 1)
    each_bytes=$(IFS=,; echo "${bytes[*]}")
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
# status_latency TASK: switch to TASK while one client asks for the status every
# 5 ms; sets worst (the slowest answer, ms) and n (the requests answered).
status_latency() {
    python3 - "$sock" "$tpctl" "$1" > "$work/latency.txt" <<'PY'
import json, socket, subprocess, sys, time
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); f = s.makefile('rb')
sw = subprocess.Popen([sys.argv[2], '--socket', sys.argv[1], '--no-progress', 'switch', sys.argv[3]], stdout=subprocess.DEVNULL)
worst, n = 0.0, 0
while sw.poll() is None:
    t0 = time.perf_counter(); s.sendall(b'{"cmd":"status"}\n'); json.loads(f.readline())
    worst = max(worst, time.perf_counter() - t0); n += 1
    time.sleep(0.005)
print(f"{worst * 1000:.2f} {n}")
PY
    read -r worst n < "$work/latency.txt"
}

spans() { "$tp" inspect --json "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["changed_bytes"])'; }
sj=$(spans "$work/json.tpb")
printf '   model %d B; three sibling tasks (json, shout, bullet), each changing 5 tensors: spans %d B, bundle %d B\n' \
    "$msize" "$sj" "$(size "$work/json.tpb")"

# The peers, in this run: one openssl pass; the full-copy alternative.
sync
cat "$work/base.gguf" "$work"/*.gguf > /dev/null
dg=() fc=()
for _ in 1 2 3 4 5; do
    ns t0; openssl dgst -sha256 "$work/base.gguf" > /dev/null; ns t1; dg+=($((t1 - t0)))
    ns t0; cp "$work/json.gguf" "$work/copy.gguf" && sync "$work/copy.gguf" && openssl dgst -sha256 "$work/copy.gguf" > /dev/null
    ns t1; fc+=($((t1 - t0))); rm -f "$work/copy.gguf"
done
t_dgst=$(best "${dg[@]}") t_copy=$(best "${fc[@]}")
printf '   openssl dgst -sha256 of the model: %s s; cp + fsync + openssl dgst of the task model: %s s\n' \
    "$(secs "$t_dgst")" "$(secs "$t_copy")"

for mode in full incremental; do
    want 1 || break
    start_daemon "$mode" "verify: $mode"
    ns t0; ctl provision "$work/base.gguf" > /dev/null; ns t1
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

    if [ "$mode" = full ] && want 2; then
        echo
        echo "2. the slowest status answer during a switch (one client, a request every 5 ms)"
        status_latency bullet
        ctl mark-good > /dev/null
        printf '   %d status requests during the switch, slowest answer %s ms (required < 100 ms)\n' "$n" "$worst"
        emit "{\"case\": \"status-latency-during-switch\", \"requests\": $n, \"worst_ms\": $worst}"
        echo
    fi
    stop_daemon
done
want 1 && printf '   provisioning the 350 MB model (copy into two slots, hash both): %s s\n' "$(secs "$t_prov")"

if want 3; then
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
    ns t0; cp "$work/moved-json.gguf" "$work/copy.gguf" && sync "$work/copy.gguf" && openssl dgst -sha256 "$work/copy.gguf" > /dev/null
    ns t1; fc+=($((t1 - t0))); rm -f "$work/copy.gguf"
done
t_copy_moved=$(best "${fc[@]}")
start_daemon relocated "verify: full"
ctl provision "$work/base.gguf" > /dev/null
for t in json shout bullet; do ctl install "$work/moved-$t.tpb" > /dev/null; done
# From the base: built into slot b from its base bytes. Then the three rotate: each switch builds
# into the inactive slot from the base bytes of the relocated task it replaces there.
ns t0; ctl switch moved-json > /dev/null; ns t1
t_first=$((t1 - t0))
ctl mark-good > /dev/null
rotate moved- shout bullet json shout bullet json
t_rel=$t_best
# Back to the base: the inactive slot holds a relocated task, so the base is built from it too.
ns t0; ctl switch --base > /dev/null; ns t1
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
fi  # part 3

if want 4; then
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
for name, seed in (("big-a.bin", 1), ("big-b.bin", 2), ("big-c.bin", 3)):
    shutil.copyfile(f"{d}/big-base.bin", f"{d}/{name}")
    with open(f"{d}/{name}", "r+b") as f:
        for k, off in enumerate((seed << 20, 1 << 30, (3 << 30) + (seed << 22), size - (8 << 20))):
            f.seek(off); f.write(os.urandom(3 << 20))
PY
    "$tp" create "$work/big-base.bin" "$work/big-a.bin" -o "$work/big-a.tpb" --task biga "${sign[@]}" --level 3 > /dev/null
    "$tp" create "$work/big-base.bin" "$work/big-b.bin" -o "$work/big-b.tpb" --task bigb "${sign[@]}" --level 3 > /dev/null
    "$tp" create "$work/big-base.bin" "$work/big-c.bin" -o "$work/big-c.tpb" --task bigc "${sign[@]}" --level 3 > /dev/null
    start_daemon big
    sleep 0.5
    idle=$(awk '/^RssAnon/ {print $2}' "/proc/$dpid/status")
    ns t0; ctl provision "$work/big-base.bin" > /dev/null; ns t1
    t_prov4=$((t1 - t0))
    ctl install "$work/big-a.tpb" > /dev/null
    ctl install "$work/big-b.tpb" > /dev/null
    ctl switch biga > /dev/null; ctl mark-good > /dev/null
    measure_switch bigb "$work/big-b.bin"
    printf '   RssAnon idle %d KB (required <= 4 MB), after the work %d KB; peak while switching %d KB (required <= 16 MB); VmHWM %d KB\n' \
        "$idle" "$idle_after" "$peak" "$hwm"
    printf '   provisioning 4 GiB (copy into two slots and hash both, ext4 has no reflink): %s s; the switch: %s s\n' \
        "$(secs "$t_prov4")" "$(secs "$t_switch")"
    emit "{\"case\": \"memory-4GiB\", \"rss_anon_idle_kb\": $idle, \"rss_anon_idle_after_kb\": $idle_after, \"rss_anon_peak_kb\": $peak, \"vmhwm_kb\": $hwm, \"provision_4GiB_s\": $(secs "$t_prov4"), \"switch_4GiB_s\": $(secs "$t_switch")}"

    # The same 4 GiB model as the first of three (models:, its state kept as "default"), the two
    # others small: RssAnon idle with all three provisioned, and while switching the big one to a
    # third task (staged into the inactive slot, which holds biga: undone, then written).
    head -c $((8 << 20)) /dev/urandom > "$work/small.bin"
    printf 'state_dir: %s/big/state\nsocket: %s/big/sock\ntrust:\n  ca: %s/pki/ca.pem\ntrial:\n  timeout: 600\nmodels:\n  default:\n    model_path: %s/big/state/model.gguf\n  wake:\n    model_path: %s/big/wake.bin\n  vad:\n    model_path: %s/big/vad.bin\n' \
        "$work" "$work" "$work" "$work" "$work" "$work" > "$work/big/conf.yaml"
    run_daemon big
    ctl -m wake provision "$work/small.bin" > /dev/null
    ctl -m vad provision "$work/small.bin" > /dev/null
    ctl install "$work/big-c.tpb" > /dev/null
    idle3=$(awk '/^RssAnon/ {print $2}' "/proc/$dpid/status")
    measure_switch bigc "$work/big-c.bin" -m default
    printf '   three models configured, the 4 GiB one switched: RssAnon idle %d KB (required <= 4 MB), peak while switching %d KB (required <= 16 MB); VmHWM %d KB\n' \
        "$idle3" "$peak" "$hwm"
    emit "{\"case\": \"memory-4GiB-three-models\", \"models\": 3, \"rss_anon_idle_kb\": $idle3, \"rss_anon_peak_kb\": $peak, \"vmhwm_kb\": $hwm, \"switch_4GiB_s\": $(secs "$t_switch")}"
    rm -rf "$work"/big-* "$work/big" "$work/small.bin"

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
    ns t0; cp "$work/big-moved.gguf" "$work/big-copy.gguf" && sync "$work/big-copy.gguf" &&
        openssl dgst -sha256 "$work/big-copy.gguf" > /dev/null; ns t1
    t_copy_big=$((t1 - t0))
    rm -f "$work/big-copy.gguf"
    measure_switch bigmoved "$work/big-moved.gguf"
    peak_rel=$peak hwm_rel=$hwm
    printf '   relocated 4 GiB task (every tensor moved, 2 of 16 changed): RssAnon peak while switching %d KB (required <= 16 MB); VmHWM %d KB; the switch: %s s (cp + fsync + openssl dgst of it: %s s, %s x)\n' \
        "$peak_rel" "$hwm_rel" "$(secs "$t_switch")" "$(secs "$t_copy_big")" "$(ratio "$t_switch" "$t_copy_big")"
    emit "{\"case\": \"memory-4GiB-relocated\", \"rss_anon_peak_kb\": $peak_rel, \"vmhwm_kb\": $hwm_rel, \"switch_4GiB_s\": $(secs "$t_switch"), \"full_copy_4GiB_s\": $(secs "$t_copy_big")}"
    rm -rf "$work"/big-* "$work/big"
fi  # part 4

if want 5 || want 6; then
want 5 && echo
want 5 && echo "5. sibling switches on directory models (model_path names a directory: each slot is one, model_path"
want 5 && echo "   a symlink to the active one; page cache warm, fsync included, $(stat -f -c %T "$work"))"
# dir_bytes DIR: the bytes of DIR's files.
dir_bytes() { stat -c %s "$1"/* | awk '{s += $1} END {print s}'; }
# dir_peers DIR: the peers of a directory model, best of 5 each: openssl dgst -sha256 of every file
# (t_dgst), and the full-copy alternative (t_copy): cp -r, fsync every file and the directory,
# openssl dgst -sha256 of every file.
dir_peers() {
    local dg=() fc=() t0 t1
    sync
    cat "$1"/* > /dev/null
    for _ in 1 2 3 4 5; do
        ns t0; openssl dgst -sha256 "$1"/* > /dev/null; ns t1; dg+=($((t1 - t0)))
        rm -rf "$work/copy.d"
        ns t0; cp -r "$1" "$work/copy.d" && sync "$work/copy.d"/* "$work/copy.d" && openssl dgst -sha256 "$work/copy.d"/* > /dev/null
        ns t1; fc+=($((t1 - t0)))
    done
    rm -rf "$work/copy.d"
    t_dgst=$(best "${dg[@]}") t_copy=$(best "${fc[@]}")
}
# span_union A.tpb B.tpb: the bytes the spans of both bundles cover, overlaps counted once (when
# sibling tasks change the same tensor, undoing one and writing the other touch the same bytes).
span_union() {
    python3 - "$tp" "$@" <<'PY'
import json, subprocess, sys
spans = {}
for b in sys.argv[2:]:
    m = json.loads(subprocess.run([sys.argv[1], "inspect", "--json", b], check=True, capture_output=True).stdout)
    for s in m["span_list"]:
        off = s.get("file_offset", s["offset"])           # a one-file bundle's spans name no file
        spans.setdefault(s.get("file"), []).append((off, off + s["length"]))
total = 0
for iv in spans.values():
    end = 0
    for lo, hi in sorted(iv):
        lo = max(lo, end)
        if hi > lo:
            total += hi - lo
            end = hi
print(total)
PY
}

# dir_bench KIND WHAT: $work/KIND-base.d and its three sibling tasks $work/KIND-{json,shout,bullet}.d,
# bundled, then switched as part 1 switches one file, with full and with incremental verification.
dir_bench() {
    local kind=$1 what=$2 mode t t0 t1 t_prov sj ss sb msize nfiles nspan union
    for t in json shout bullet; do
        "$tp" create "$work/$kind-base.d" "$work/$kind-$t.d" -o "$work/$kind-$t.tpb" --task "$kind-$t" --version 1 \
            "${sign[@]}" --level 3 > /dev/null
    done
    msize=$(dir_bytes "$work/$kind-base.d") nfiles=$(find "$work/$kind-base.d" -type f | wc -l)
    sj=$(spans "$work/$kind-json.tpb") ss=$(spans "$work/$kind-shout.tpb") sb=$(spans "$work/$kind-bullet.tpb")
    nspan=$("$tp" inspect --json "$work/$kind-json.tpb" | python3 -c 'import json,sys
print(len({s["file"] for s in json.load(sys.stdin)["span_list"]}))')
    # The rotation below pairs (undone, written) as (json, bullet), (shout, json), (bullet, shout).
    union=$(for p in json:bullet shout:json bullet:shout; do
        span_union "$work/$kind-${p%%:*}.tpb" "$work/$kind-${p#*:}.tpb"; done | sort -n | tail -n 1)
    dir_peers "$work/$kind-json.d"
    printf '   %s: %d files, %d B; spans json %d B (in %d of the files), shout %d B, bullet %d B; undone + written, overlaps once: %d B; bundle %d B\n' \
        "$what" "$nfiles" "$msize" "$sj" "$nspan" "$ss" "$sb" "$union" "$(size "$work/$kind-json.tpb")"
    printf '   openssl dgst -sha256 of every file: %s s; cp -r + fsync + openssl dgst of the task directory: %s s\n' \
        "$(secs "$t_dgst")" "$(secs "$t_copy")"
    ext=.d
    for mode in full incremental; do
        start_daemon "$kind-$mode" "verify: $mode" llm
        ns t0; ctl provision "$work/$kind-base.d" > /dev/null; ns t1
        t_prov=$((t1 - t0))
        [ "$(readlink "$model")" = "$work/$kind-$mode/state/slots/a.dir" ] ||
            { echo "switch.sh: $kind: model_path is not a symlink to slots/a.dir" >&2; exit 1; }
        for t in json shout bullet; do ctl install "$work/$kind-$t.tpb" > /dev/null; done
        ctl switch "$kind-json" > /dev/null; ctl mark-good > /dev/null
        ctl switch "$kind-shout" > /dev/null; ctl mark-good > /dev/null
        rotate "$kind-" bullet json shout bullet json shout
        ! grep -q "fresh copy" "$work/$kind-$mode/log" ||
            { echo "switch.sh: $kind: a switch staged into a fresh copy, not in place" >&2; exit 1; }
        undo_total=$(st counters.undo_bytes_written) state_total=$(st counters.state_bytes_written)
        n_sw=$(st counters.switches)
        stop_daemon
        rm -rf "$work/$kind-$mode"
        budget=$((2 * sj))
        printf '   %-11s switch %s s: %s x openssl dgst, %s x full copy; slot bytes %d = %s x (undone %d + written %d) (required <= 1.1), %s x their union; undo %d B/switch, state files %d B/switch\n' \
            "$mode:" "$(secs "$t_best")" "$(ratio "$t_best" "$t_dgst")" "$(ratio "$t_best" "$t_copy")" "$written" \
            "$(ratio "$written" "$budget")" "$sj" "$sj" "$(ratio "$written" "$union")" $((undo_total / n_sw)) $((state_total / n_sw))
        [ $((written * 10)) -le $((budget * 11)) ] ||
            echo "switch.sh: $kind $mode: slot bytes $written exceed 1.1 x the spans undone + written ($budget)" >&2
        emit "{\"case\": \"switch-dir-$kind-$mode\", \"model\": \"$what\", \"files\": $nfiles, \"model_bytes\": $msize, \"switch_s\": $(secs "$t_best"), \"openssl_dgst_s\": $(secs "$t_dgst"), \"full_copy_s\": $(secs "$t_copy"), \"ratio_to_dgst\": $(ratio "$t_best" "$t_dgst"), \"ratio_to_full_copy\": $(ratio "$t_best" "$t_copy"), \"slot_bytes\": $written, \"slot_bytes_each_switch\": [$each_bytes], \"spans_undone_plus_written\": $budget, \"ratio_slot_bytes\": $(ratio "$written" "$budget"), \"spans_union\": $union, \"undo_bytes_per_switch\": $((undo_total / n_sw)), \"state_bytes_per_switch\": $((state_total / n_sw)), \"provision_s\": $(secs "$t_prov")}"
    done
    ext=.gguf
}

# The ~350 MB q4_0 model of part 1 and its three tasks, each split into three shards as
# llama-gguf-split splits them (the same layout in all four: every span stays in its shard).
for m in base json shout bullet; do
    [ -d "$work/gguf-$m.d" ] || {
        rm -rf "$work/gguf-$m.tmp"
        python3 "$root/tests/tools/gguf-split.py" --shards 3 --prefix llm "$work/$m.gguf" "$work/gguf-$m.tmp" > /dev/null
        mv "$work/gguf-$m.tmp" "$work/gguf-$m.d"
    }
done
want 5 && dir_bench gguf "split GGUF (3 shards of the ~350 MB q4_0 model, the tasks of part 1)"

# An ONNX model of about the same size, float32, its initializers' data in one external file;
# the three tasks fold a rank-4 delta into the same weight (layers.10.weight) with different seeds.
onnx=(python3 "$root/tests/tools/make-onnx.py" --kind matmul --dim 2048 --size-mb 350 --change 1 --mode lowrank
      --external one)
for ts in json:1 shout:9 bullet:13; do
    t=${ts%%:*}
    [ -d "$work/onnx-$t.d" ] || {
        rm -rf "$work/onnx-gen"
        "${onnx[@]}" --task-seed "${ts#*:}" -o "$work/onnx-gen/base/model.onnx" --task-out "$work/onnx-gen/$t/model.onnx"
        [ -d "$work/onnx-base.d" ] || mv "$work/onnx-gen/base" "$work/onnx-base.d"
        mv "$work/onnx-gen/$t" "$work/onnx-$t.d"
        rm -rf "$work/onnx-gen"
    }
done
want 5 && dir_bench onnx "ONNX with external data (float32 MLP, dim 2048, one .data file)"
fi  # parts 5 and 6's fixtures

if want 6; then
echo
echo "6. daemon memory with three models configured (models:): idle, and at its peak while switching one"
# The ~350 MB q4_0 file of part 1 (model "default"), its split into three shards ("llm") and the
# ONNX directory of part 5 ("detector"), each provisioned; then a switch of the first.
d="$work/three"
rm -rf "$d"
mkdir -p "$d"
printf 'state_dir: %s/state\nsocket: %s/sock\ntrust:\n  ca: %s/pki/ca.pem\ntrial:\n  timeout: 600\nmodels:\n  default:\n    model_path: %s/state/model.gguf\n  llm:\n    model_path: %s/llm\n  detector:\n    model_path: %s/detector\n' \
    "$d" "$d" "$work" "$d" "$d" "$d" > "$d/conf.yaml"
run_daemon three
idle_empty=$(awk '/^RssAnon/ {print $2}' "/proc/$dpid/status")
ctl -m default provision "$work/base.gguf" > /dev/null
ctl -m llm provision "$work/gguf-base.d" > /dev/null
ctl -m detector provision "$work/onnx-base.d" > /dev/null
ctl install "$work/json.tpb" > /dev/null          # the bundle names its model: "default"
idle3=$(awk '/^RssAnon/ {print $2}' "/proc/$dpid/status")
model="$d/state/model.gguf"
measure_switch json "$work/json.gguf" -m default
printf '   RssAnon with three models configured: %d KB before provisioning, %d KB idle with all three provisioned (required <= 4 MB), %d KB after a switch; peak while switching the ~350 MB model %d KB (required <= 16 MB); VmHWM %d KB\n' \
    "$idle_empty" "$idle3" "$idle_after" "$peak" "$hwm"
emit "{\"case\": \"memory-three-models\", \"models\": 3, \"rss_anon_empty_kb\": $idle_empty, \"rss_anon_idle_kb\": $idle3, \"rss_anon_idle_after_kb\": $idle_after, \"rss_anon_peak_kb\": $peak, \"vmhwm_kb\": $hwm}"
rm -rf "$d"
fi  # part 6

if want 7; then
echo
echo "7. base replacement on the ~350 MB model (issue 18): a re-release with three ffn_gate tensors retrained"
rr="$work/rerelease.gguf"
[ -f "$rr" ] || "$fix" --ggml "$ggml" "${dims[@]}" --mode lora --task-seed 21 \
    --targets blk.0.ffn_gate.weight,blk.5.ffn_gate.weight,blk.11.ffn_gate.weight -o "$rr" > /dev/null
"$tp" create "$work/base.gguf" "$rr" --base-bundle -o "$work/rerelease.tpb" --version 2 "${sign[@]}" --level 3 > /dev/null
start_daemon rebase
ctl provision "$work/base.gguf" > /dev/null
ctl install "$work/rerelease.tpb" > /dev/null
ns t0; ctl switch base > /dev/null; ns t1
t_rebase=$((t1 - t0))
same_model "$rr" || { echo "switch.sh: the switch to the new base is not byte-identical" >&2; exit 1; }
# From mark-good until status says both slots hold the new base, asking every 5 ms: how long the
# background re-provisioning takes, and the slowest answer meanwhile.
python3 - "$sock" > "$work/reprovision.txt" <<'PY'
import json, socket, sys, time
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); f = s.makefile('rb')
def ask(cmd):
    t0 = time.perf_counter(); s.sendall((json.dumps({"cmd": cmd}) + "\n").encode()); r = json.loads(f.readline())
    return r, time.perf_counter() - t0
t0 = time.perf_counter()
ask("mark-good")
worst, n = 0.0, 0
while True:
    st, dt = ask("status")
    worst, n = max(worst, dt), n + 1
    if not st["reprovision"] and st["operation"] is None:
        break
    time.sleep(0.005)
print(f"{time.perf_counter() - t0:.4f} {worst * 1000:.2f} {n}")
PY
read -r t_reprov worst n < "$work/reprovision.txt"
cmp -s "$work/rebase/state/slots/a.gguf" "$rr" && cmp -s "$work/rebase/state/slots/b.gguf" "$rr" ||
    { echo "switch.sh: the slots do not both hold the new base" >&2; exit 1; }
stop_daemon
rm -rf "$work/rebase"
printf '   base bundle %d B; the switch to the new base %s s (%s x full copy); re-provisioning the other slot\n' \
    "$(size "$work/rerelease.tpb")" "$(secs "$t_rebase")" "$(ratio "$t_rebase" "$t_copy")"
printf '   in the background: %s s after mark-good (%s x cp + fsync + openssl dgst of the model), %d status answers meanwhile, the slowest %s ms\n' \
    "$t_reprov" "$(awk -v a="$t_reprov" -v b="$t_copy" 'BEGIN {printf "%.3f", a * 1e9 / b}')" "$n" "$worst"
emit "{\"case\": \"base-replacement-350MB\", \"model_bytes\": $(size "$rr"), \"bundle\": $(size "$work/rerelease.tpb"), \"switch_s\": $(secs "$t_rebase"), \"reprovision_s\": $t_reprov, \"full_copy_s\": $(secs "$t_copy"), \"reprovision_ratio_to_full_copy\": $(awk -v a="$t_reprov" -v b="$t_copy" 'BEGIN {printf "%.3f", a * 1e9 / b}'), \"status_requests\": $n, \"status_worst_ms\": $worst}"

fi  # part 7

if want 8; then
echo
echo "8. encrypted bundles: part 1's sibling switches, encrypted to the device vs plain, alternating in one daemon"
for t in json shout bullet; do
    "$tp" create "$work/base.gguf" "$work/$t.gguf" -o "$work/enc-$t.tpb" --task "enc-$t" "${sign[@]}" --level 3 \
        --encrypt-to "$work/pki/device.crt" > /dev/null
    ln -sf "$t.gguf" "$work/enc-$t.gguf"
done
for mode in full incremental; do
    trust_extra="  decrypt_key: $work/pki/device.key
" start_daemon "encrypted-$mode" "verify: $mode"
    ctl provision "$work/base.gguf" > /dev/null
    for t in json shout bullet; do ctl install "$work/$t.tpb" > /dev/null; ctl install "$work/enc-$t.tpb" > /dev/null; done
    ctl switch json > /dev/null; ctl mark-good > /dev/null
    ctl switch shout > /dev/null; ctl mark-good > /dev/null
    plain=() sealed=()
    for _ in 1 2 3; do
        rotate "" bullet json shout; plain+=("$t_best")
        rotate enc- bullet json shout; sealed+=("$t_best")
    done
    stop_daemon
    rm -rf "$work/encrypted-$mode"
    t_plain=$(best "${plain[@]}") t_sealed=$(best "${sealed[@]}")
    printf '   %-11s encrypted switch %s s vs plain %s s = %s x (goal <= 1.1); bundle %d B vs %d B\n' "$mode:" \
        "$(secs "$t_sealed")" "$(secs "$t_plain")" "$(ratio "$t_sealed" "$t_plain")" "$(size "$work/enc-json.tpb")" \
        "$(size "$work/json.tpb")"
    emit "{\"case\": \"switch-350MB-encrypted-$mode\", \"model_bytes\": $msize, \"encrypted_switch_s\": $(secs "$t_sealed"), \"plain_switch_s\": $(secs "$t_plain"), \"ratio_to_plain\": $(ratio "$t_sealed" "$t_plain"), \"encrypted_bundle\": $(size "$work/enc-json.tpb"), \"plain_bundle\": $(size "$work/json.tpb"), \"payload\": $("$tp" inspect --json "$work/enc-json.tpb" | python3 -c 'import json,sys; print(json.load(sys.stdin)["payload_bytes"])')}"
done

fi  # part 8

if want 9; then
echo
echo "9. lora spans: sibling switches on a Q8_0 model, lora bundles (predicted on the device) vs delta-coded ones"
qdims=(--type q8_0 --dim 2048 --ff 5632 --layers 6 --vocab 300)
[ -f "$work/q8-base.gguf" ] || "$fix" --ggml "$ggml" "${qdims[@]}" -o "$work/q8-base.gguf" > /dev/null
for ts in json:7:blk.0.attn_q.weight,blk.0.attn_v.weight,blk.1.attn_q.weight,blk.1.attn_v.weight,blk.2.attn_q.weight \
    shout:9:blk.3.attn_q.weight,blk.3.attn_v.weight,blk.4.attn_q.weight,blk.4.attn_v.weight,blk.5.attn_q.weight \
    bullet:13:blk.0.ffn_down.weight,blk.2.ffn_down.weight,blk.4.ffn_down.weight,blk.1.attn_v.weight,blk.5.attn_v.weight; do
    IFS=: read -r t seed targets <<< "$ts"
    [ -f "$work/q8-$t.gguf" ] || "$fix" --ggml "$ggml" "${qdims[@]}" --mode lora --rank 16 --task-seed "$seed" \
        --targets "$targets" --adapter "$work/q8-$t-lora.gguf" --adapter-type f16 -o "$work/q8-$t.gguf" > /dev/null
    "$tp" create "$work/q8-base.gguf" "$work/q8-$t.gguf" -o "$work/q8-delta-$t.tpb" --task "delta-$t" "${sign[@]}" \
        --level 3 > /dev/null
    "$tp" create "$work/q8-base.gguf" "$work/q8-$t.gguf" -o "$work/q8-lora-$t.tpb" --task "lora-$t" "${sign[@]}" \
        --level 3 --lora "$work/q8-$t-lora.gguf" > /dev/null
    ln -sf "q8-$t.gguf" "$work/delta-$t.gguf"
    ln -sf "q8-$t.gguf" "$work/lora-$t.gguf"
done
start_daemon lora "verify: full"
ctl provision "$work/q8-base.gguf" > /dev/null
for t in json shout bullet; do ctl install "$work/q8-delta-$t.tpb" > /dev/null; ctl install "$work/q8-lora-$t.tpb" > /dev/null; done
ctl switch delta-json > /dev/null; ctl mark-good > /dev/null
ctl switch delta-shout > /dev/null; ctl mark-good > /dev/null
plain=() predicted=()
for _ in 1 2 3; do
    rotate delta- bullet json shout; plain+=("$t_best")
    rotate lora- bullet json shout; predicted+=("$t_best")
done
# The slowest status answer while the daemon predicts: a lora switch, a request every 5 ms.
status_latency lora-bullet
ctl mark-good > /dev/null
stop_daemon
rm -rf "$work/lora"
t_plain=$(best "${plain[@]}") t_pred=$(best "${predicted[@]}")
lb=$(size "$work/q8-lora-json.tpb") db=$(size "$work/q8-delta-json.tpb")
spans=$("$tp" inspect --json "$work/q8-lora-json.tpb" | python3 -c 'import json,sys; j=json.load(sys.stdin); print(sum(s["length"] for s in j["span_list"] if s["encoding"] == "lora"), sum(1 for s in j["span_list"] if s["encoding"] == "lora"))')
read -r lora_bytes lora_spans <<< "$spans"
printf '   model %d B; bundles of json: lora %d B vs delta %d B (%s x), %d lora spans of %d B\n' "$(size "$work/q8-base.gguf")" \
    "$lb" "$db" "$(ratio "$lb" "$db")" "$lora_spans" "$lora_bytes"
printf '   switch to a predicted task %s s vs the delta-coded one %s s = %s x; %s ms per predicted MB; slowest of %d status answers during a predicted switch %s ms (required < 100)\n' \
    "$(secs "$t_pred")" "$(secs "$t_plain")" "$(ratio "$t_pred" "$t_plain")" \
    "$(awk -v a="$t_pred" -v b="$t_plain" -v l="$lora_bytes" 'BEGIN {printf "%.1f", (a - b) / 1e6 / (l / 1e6)}')" "$n" "$worst"
emit "{\"case\": \"switch-q8-lora\", \"model_bytes\": $(size "$work/q8-base.gguf"), \"lora_bundle\": $lb, \"delta_bundle\": $db, \"lora_spans\": $lora_spans, \"lora_span_bytes\": $lora_bytes, \"predicted_switch_s\": $(secs "$t_pred"), \"delta_switch_s\": $(secs "$t_plain"), \"ratio_to_delta\": $(ratio "$t_pred" "$t_plain"), \"status_requests\": $n, \"status_worst_ms\": $worst}"
fi  # part 9

# PARTS or SKIP_4G=1: the recorded cases of the parts not run are carried over, each with the
# conditions it was measured under, so that a record of some parts keeps the others' numbers.
kept=
[ -n "${PARTS:-}${SKIP_4G:-}" ] && [ -f "$root/tests/bench/results/switch.json" ] && kept="$root/tests/bench/results/switch.json"
BENCH_DIR="$root/tests/bench" python3 - "$results" "$work/switch.json" "$kept" <<'PY'
import json, os, sys
sys.path.insert(0, os.environ["BENCH_DIR"])
from conditions import conditions
cases = [json.loads(l) for l in open(sys.argv[1])]
cond = conditions(path=os.path.dirname(sys.argv[2]), page_cache="warm", flush="included (daemon and the cp peer)")
if sys.argv[3]:
    old = json.load(open(sys.argv[3]))
    measured = {c["case"] for c in cases}
    for c in old["cases"]:
        if c["case"] not in measured:
            c.setdefault("conditions", old["conditions"])
            c.setdefault("carried_over", "PARTS=%s SKIP_4G=%s: not measured in this run"
                         % (os.environ.get("PARTS", "all"), os.environ.get("SKIP_4G", "0")))
            cases.append(c)
json.dump({"benchmark": "switch", "conditions": cond, "cases": cases}, open(sys.argv[2], "w"), indent=2)
PY
if [ "${RECORD:-0}" = 1 ]; then
    mkdir -p "$root/tests/bench/results"
    cp "$work/switch.json" "$root/tests/bench/results/switch.json"
    echo "recorded tests/bench/results/switch.json"
fi
