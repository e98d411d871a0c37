# shellcheck shell=bash
# Sourced by the daemon's integration tests after lib.sh: fixtures, a test PKI, and the real
# taskpatchd on a temporary state directory driven by the real tpctl.
root=$(cd "$(dirname "$0")/../.." && pwd)
SOCK="$TMP/taskpatchd.sock"
STATE="$TMP/state"
MODEL="$STATE/model.gguf"
CONF="$TMP/taskpatchd.yaml"
DPID=
trap 'stop_daemon; rm -rf "$TMP"' EXIT

tpctl() { $WRAP "$BIN/tpctl" --socket "$SOCK" --no-progress "$@"; }

# A trial that does not end under a test's feet, however loaded the machine: a test runs several
# steps between a switch and its mark-good. A test of the trial's timeout sets a short one itself
# and waits for its effect (wait_status).
LONG_TRIAL="trial:
  timeout: 300"

# shellcheck disable=SC2120  # callers outside this file pass EXTRA-YAML
# write_config [EXTRA-YAML]: the test daemon's configuration; EXTRA-YAML replaces the trial
# section (by default $LONG_TRIAL).
write_config() {
    cat > "$CONF" <<EOC
state_dir: $STATE
socket: $SOCK
model_path: $MODEL
trust:
  ca: $TMP/pki/ca.pem
${1:-$LONG_TRIAL}
EOC
}

# write_models_config EXTRA-YAML MODEL...: the test daemon's configuration with a models: map,
# each MODEL's model_path $TMP/MODEL.gguf; EXTRA-YAML (settings of the whole device) before it.
write_models_config() {
    local extra=$1 name
    shift
    {
        printf 'state_dir: %s\nsocket: %s\ntrust:\n  ca: %s\n%s\n' "$STATE" "$SOCK" "$TMP/pki/ca.pem" "$extra"
        printf 'models:\n'
        for name in "$@"; do printf '  %s:\n    model_path: %s/%s.gguf\n' "$name" "$TMP" "$name"; done
    } > "$CONF"
}

# wait_model MODEL PYTHON-EXPR [SECONDS]: until the expression over MODEL's status `s` holds
# (20 s by default; the status is left in $TMP/st.json); otherwise print what it waited for.
wait_model() {
    local i
    for ((i = 0; i < ${3:-20} * 10; i++)); do
        tpctl -m "$1" --json status > "$TMP/st.json" 2> /dev/null &&
            python3 -c "import json,sys; s = json.load(open(sys.argv[1])); sys.exit(0 if ($2) else 1)" \
                "$TMP/st.json" 2> /dev/null && return 0
        sleep 0.1
    done
    echo "    waited for (model $1): $2"
    python3 -c "import json,sys; print('    channel:', json.dumps(json.load(open(sys.argv[1])).get('channel')))" \
        "$TMP/st.json" 2> /dev/null
    return 1
}

# start_daemon: start taskpatchd in the background (log in $TMP/daemon.log) and wait for its socket.
start_daemon() {
    [ -f "$CONF" ] || write_config
    $WRAP "$BIN/taskpatchd" --config "$CONF" >> "$TMP/daemon.log" 2>&1 &
    DPID=$!
    wait_for_socket
}

# start_daemon_traced STRACE-ARGS...: start_daemon under strace -f, for fault injection
# (-e inject=...). LeakSanitizer cannot run under ptrace: the ASan build skips only the leak check.
start_daemon_traced() {
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
        $WRAP strace -o /dev/null -f "$@" "$BIN/taskpatchd" --config "$CONF" >> "$TMP/daemon.log" 2>&1 &
    DPID=$!
    wait_for_socket
}

# wait_for_socket: until the daemon answers on its socket, it exits, or 20 s pass (a loaded
# machine, an ASan build).
wait_for_socket() {
    for _ in $(seq 400); do
        [ -S "$SOCK" ] && tpctl status > /dev/null 2>&1 && return 0
        kill -0 "$DPID" 2> /dev/null || break
        sleep 0.05
    done
    echo "taskpatchd did not come up:"; tail -n 5 "$TMP/daemon.log"
    return 1
}

# need_fixtures, need_daemon: make_gguf_fixtures, start_daemon, or fail and end the test.
need_fixtures() {
    make_gguf_fixtures > "$TMP/fixtures.log" 2>&1 && return 0
    fail "fixtures: $(tail -n 3 "$TMP/fixtures.log")"
    finish
    exit 1
}
need_daemon() {
    start_daemon && return 0
    fail "daemon start"
    finish
    exit 1
}

stop_daemon() {
    [ -n "$DPID" ] || return 0
    pkill -TERM -P "$DPID" 2> /dev/null   # a daemon started under strace: stop the tracee too
    kill -TERM "$DPID" 2> /dev/null
    wait "$DPID" 2> /dev/null
    DPID=
}

crash_daemon() {
    pkill -KILL -P "$DPID" 2> /dev/null
    kill -KILL "$DPID" 2> /dev/null
    wait "$DPID" 2> /dev/null
    DPID=
}

# jget FIELD...: read a value from the JSON on stdin (python: a.b.c paths).
jget() { python3 -c "
import json, sys
v = json.load(sys.stdin)
for k in sys.argv[1].split('.'):
    v = v[int(k)] if isinstance(v, list) else v[k]
print('null' if v is None else v)" "$1"; }

# make_gguf_fixtures: base.gguf and two sibling tasks (json: attn_q,ffn_down; shout: attn_v,ffn_up)
# quantized by ggml (q4_0), their signed bundles json.tpb and shout.tpb, and the test PKI.
make_gguf_fixtures() {
    local ggml fix dims
    fix="$(dirname "$BIN")/tools/gguf-fixture"
    dims=(--type q4_0 --dim 256 --ff 512 --layers 2 --vocab 300)
    sh "$root/tests/tools/make-pki.sh" "$TMP/pki" > /dev/null || return 1
    ggml=$(sh "$root/tests/tools/npm-ggml.sh" "$root/build/npm" 2> "$TMP/npm.err" | tail -n 1)
    [ -e "$ggml/libggml-base.so" ] || { echo "ggml from npm is not available: $(cat "$TMP/npm.err")"; return 1; }
    "$fix" --ggml "$ggml" "${dims[@]}" -o "$TMP/base.gguf" > /dev/null &&
    "$fix" --ggml "$ggml" "${dims[@]}" --mode lora --targets attn_q,ffn_down -o "$TMP/json.gguf" > /dev/null &&
    "$fix" --ggml "$ggml" "${dims[@]}" --mode lora --targets attn_v,ffn_up --task-seed 9 -o "$TMP/shout.gguf" > /dev/null &&
    "$fix" --ggml "$ggml" "${dims[@]}" --mode lora --targets attn_q --task-seed 11 -o "$TMP/json2.gguf" > /dev/null ||
        return 1
    make_bundle json.gguf json.tpb json 1 &&
    make_bundle shout.gguf shout.tpb shout 1 &&
    make_bundle json2.gguf json-v2.tpb json 2
}

# make_relocated_fixture: grow.gguf (json with 16 more rows in output.weight: every later byte
# moves, the file grows) and its relocating bundle grow.tpb (format 2), after make_gguf_fixtures.
make_relocated_fixture() {
    python3 "$root/tests/tools/gguf-relayout.py" "$TMP/json.gguf" -o "$TMP/grow.gguf" --grow-rows output.weight=16 &&
        make_bundle grow.gguf grow.tpb grow 1
}

# make_bundle TARGET OUT TASK VERSION [create options...]: a bundle against base.gguf signed by the test signer.
make_bundle() {
    local target=$1 out=$2 task=$3 version=$4
    shift 4
    $WRAP "$BIN/taskpatch" create "$TMP/base.gguf" "$TMP/$target" -o "$TMP/$out" --task "$task" --version "$version" \
        --key "$TMP/pki/signer.key" --cert "$TMP/pki/signer.crt" --level 3 "$@" > /dev/null
}

# wait_status PYTHON-EXPR [SECONDS]: until the expression over the daemon's status `s` holds
# (20 s by default); otherwise print what it waited for and the status's channel part.
status_holds() {
    tpctl --json status > "$TMP/st.json" 2> /dev/null &&
        python3 -c "import json,sys; s = json.load(open(sys.argv[1])); sys.exit(0 if ($1) else 1)" \
            "$TMP/st.json" 2> /dev/null
}
wait_status() {
    wait_until "${2:-20}" status_holds "$1" && return 0
    echo "    waited for: $1"
    python3 -c "import json,sys; print('    status:', json.dumps(json.load(open(sys.argv[1]))['channel']))" \
        "$TMP/st.json" 2> /dev/null
    return 1
}

# fleet_config URL...: the daemon's configuration with a channel of these mirrors, polled every
# second, transfers cut after 2 s under 1 KiB/s, the test CA for TLS, $LONG_TRIAL.
fleet_config() {
    local urls
    urls=$(printf '%s, ' "$@")
    write_config "$LONG_TRIAL
channel:
  url: [${urls%, }]
  interval: 1
  low_speed_time: 2
tls:
  ca: $TMP/pki/ca.pem"
}

# same FILE: the model path holds exactly FILE's bytes.
same() { cmp -s "$MODEL" "$1"; }

# daemon_finish: stop the daemon, check that no sanitizer spoke (the ASan build runs these
# tests too: a leak or a UBSan report in the daemon fails the test), print the summary.
daemon_finish() {
    stop_daemon
    if [ -e "$TMP/daemon.log" ] && grep -q "Sanitizer\|runtime error:" "$TMP/daemon.log"; then
        fail "the daemon log holds a sanitizer report: $(grep -m 3 "Sanitizer\|runtime error:" "$TMP/daemon.log")"
    else
        ok "no sanitizer report in the daemon log"
    fi
    finish
}
