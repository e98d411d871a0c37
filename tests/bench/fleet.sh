#!/bin/bash
# Fleet benchmarks (issue "Fleet"), one run on loopback against a real nginx (Debian's, one
# worker, TLS with a test-CA certificate), the real taskpatchd polling through libcurl:
#  1. an idle poll of an unchanged channel on the reused connection: HTTP bytes as libcurl
#     counts them (request + headers + body, from `tpctl --json status`) and as nginx counts
#     them ($request_length, $bytes_sent), and the bytes on the wire: TCP payload (the TLS
#     records) counted by a byte-counting relay between the daemon and nginx, split into polls
#     by their pauses; nginx's $connection and $connection_requests prove one request, one 304,
#     one connection per poll. Peer: an unconditional GET of the same channel (nginx with
#     `etag off`: the daemon has no ETag to send, every poll is a 200), ratio printed. The TLS
#     handshake of a fresh connection: the first connection's wire bytes minus its HTTP bytes;
#     and a poll on a new connection each time (nginx `keepalive_timeout 0`), which is what a
#     300 s interval gets: libcurl drops a connection idle for 118 s, nginx after 75 s.
#     1b: the same idle poll by a device of three models following one format-2 channel (a section
#     per model): still one request per poll, its HTTP bytes against the one-model poll's.
#     1c: a channel that carries a revocation list (publish --revocations): the device fetches the
#     list once, before it takes the channel; its idle poll stays one 304, bytes against 1's.
#     1d: a channel that carries a trust root and a revocation list (publish --root --revocations):
#     each fetched once, the root before the channel is verified; the idle poll, bytes against 1's.
#  2. origin capacity: idle polls per second one nginx worker answers (python3 http.client over
#     ssl, several concurrent clients, If-None-Match), over kept connections and with a new
#     (resumed) TLS connection per poll; nginx's CPU time per poll from /proc/<worker>/stat;
#     devices at the default 300 s interval = polls/s x 300. This machine's numbers, not a Pi's.
#  3. bytes per device per update: the channel and bundle the daemon fetched for one update,
#     on the wire, against the full task model; the same arithmetic for a ~350 MB q4_0 model
#     (the files bench-switch caches under BUILD/bench/switch/, else generated once under
#     BUILD/bench/fleet/, ~40 s).
# Usage: tests/bench/fleet.sh BUILD_DIR   (RECORD=1 also writes tests/bench/results/fleet.json;
#        FLEET_POLLS=8 idle polls per case, FLEET_LOAD_SECS=10 per load case)
# shellcheck disable=SC2034  # DPID, WRAP, SOCK, STATE, CONF are read by daemon-lib.sh
set -eu
build=$(cd "$1" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
BIN="$build/bin" WRAP=
TMP=$(mktemp -d "${TMPDIR:-/tmp}/taskpatch-fleet.XXXXXX")
. "$(dirname "$0")/../integration/daemon-lib.sh"
. "$(dirname "$0")/../integration/nginx-lib.sh"
relay_pid=
trap '[ -n "$relay_pid" ] && kill "$relay_pid" 2> /dev/null; stop_daemon; stop_nginx; rm -rf "$TMP"' EXIT
polls=${FLEET_POLLS:-8} load_secs=${FLEET_LOAD_SECS:-10}
www="$TMP/www" marks="$TMP/marks" py="$TMP/fleet.py"
sign=(--key "$TMP/pki/signer.key" --cert "$TMP/pki/signer.crt")

cat > "$py" <<'PY'
import asyncio, http.client, itertools, json, multiprocessing, os, ssl, statistics, sys, threading, time

def relay(upstream, port_file, log_path):
    """Forward 127.0.0.1:<any> to 127.0.0.1:upstream; log "conn time up|down bytes" per chunk."""
    log, ids = open(log_path, "a", buffering=1), itertools.count(1)

    async def pump(cid, way, r, w):
        try:
            while b := await r.read(1 << 16):
                log.write(f"{cid} {time.time():.6f} {way} {len(b)}\n")
                w.write(b)
                await w.drain()
        except OSError:
            pass
        finally:
            w.close()

    async def handle(cr, cw):
        cid = next(ids)
        try:
            ur, uw = await asyncio.open_connection("127.0.0.1", upstream)
        except OSError:
            cw.close()
            return
        await asyncio.gather(pump(cid, "up", cr, uw), pump(cid, "down", ur, cw))

    async def main():
        srv = await asyncio.start_server(handle, "127.0.0.1", 0)
        with open(port_file + ".tmp", "w") as f:
            f.write(str(srv.sockets[0].getsockname()[1]))
        os.rename(port_file + ".tmp", port_file)
        await srv.serve_forever()
    asyncio.run(main())

class Conn(http.client.HTTPSConnection):
    """Keeps the TLS session of its last connection and resumes it on the next."""
    session, connects, resumed = None, 0, 0
    def connect(self):
        http.client.HTTPConnection.connect(self)
        self.sock = self._context.wrap_socket(self.sock, server_hostname=self.host, session=self.session)
        self.connects += 1
        self.resumed += self.sock.session_reused
    def close(self):
        self.session = getattr(self.sock, "session", None) or self.session
        super().close()

def load_process(args):
    port, path, ca, etag, secs, threads = args
    out = []
    def client():
        c = Conn("127.0.0.1", port, context=ssl.create_default_context(cafile=ca))
        n = bad = 0
        end = time.monotonic() + secs
        while time.monotonic() < end:
            c.request("GET", path, headers={"If-None-Match": etag, "User-Agent": "taskpatchd/load"})
            r = c.getresponse()
            r.read()
            n += 1
            bad += r.status != 304
        out.append((n, bad, c.connects, c.resumed))
    ts = [threading.Thread(target=client) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return [sum(x) for x in zip(*out)]

def load(port, path, ca, secs, procs, threads):
    """Idle polls (If-None-Match, 304) from procs x threads clients for secs seconds."""
    port, secs, procs, threads = int(port), float(secs), int(procs), int(threads)
    c = http.client.HTTPSConnection("127.0.0.1", port, context=ssl.create_default_context(cafile=ca))
    c.request("GET", path)
    etag = c.getresponse().getheader("ETag")
    t0 = time.monotonic()
    with multiprocessing.Pool(procs) as p:
        res = p.map(load_process, [(port, path, ca, etag, secs, threads)] * procs)
    n, bad, conns, resumed = (sum(x) for x in zip(*res))
    print(n, bad, conns, resumed, f"{time.monotonic() - t0:.3f}")

def report(tmp, record_to):
    m = dict(l.rstrip("\n").split("=", 1) for l in open(f"{tmp}/marks"))
    num = lambda k: float(m[k])
    # nginx: "$msec $connection $connection_requests $ssl_protocol $ssl_session_reused $request_method $uri $status
    #         $request_length $bytes_sent"
    reqs = []
    for l in open(f"{tmp}/nginx/access.log"):
        f = l.split()
        reqs.append(dict(t=float(f[0]), conn=int(f[1]), n=int(f[2]), proto=f[3], reused=f[4] == "r", uri=f[6],
                         status=int(f[7]), http=int(f[8]) + int(f[9]), up=int(f[8]), down=int(f[9])))
    chunks = {}
    for l in open(f"{tmp}/relay.log"):
        cid, t, way, n = l.split()
        chunks.setdefault(int(cid), []).append((float(t), way, int(n)))
    # The relay's connections, each split into exchanges by pauses over 0.3 s.
    conns = []
    for cid in sorted(chunks):
        groups = []
        for t, way, n in chunks[cid]:
            if not groups or t - groups[-1]["last"] > 0.3:
                groups.append(dict(t=t, last=t, up=0, down=0))
            g = groups[-1]
            g["last"] = t
            g[way] += n
        for g in groups:
            g["wire"] = g["up"] + g["down"]
        conns.append(dict(t=groups[0]["t"], groups=groups, wire=sum(g["wire"] for g in groups)))
    within = lambda x, a, b: num(a) <= x["t"] <= num(b)
    fail = []
    def need(ok, what):
        if not ok:
            fail.append(what)

    # 1. idle polls on the reused connection
    run = [c for c in conns if within(c, "reused_t0", "reused_t1")]
    idle_g = [g for c in run for g in c["groups"] if within(g, "idle_t0", "idle_t1")]
    idle_r = [r for r in reqs if within(r, "idle_t0", "idle_t1")]
    need(len(run) == 1, f"the reused run used {len(run)} connections, not one")
    need(len(idle_r) == len(idle_g) >= 2, f"{len(idle_r)} requests in {len(idle_g)} exchanges")
    need(all(r["status"] == 304 and r["uri"] == "/stable.channel" for r in idle_r), "an idle poll was not a 304")
    need(len({r["conn"] for r in idle_r}) == 1 and
         [r["n"] for r in idle_r] == list(range(idle_r[0]["n"], idle_r[0]["n"] + len(idle_r))),
         "the idle polls are not consecutive requests of one nginx connection")
    idle_curl = int(m["idle_curl_bytes"])
    need(m["idle_curl_status"] == "304" and idle_curl < 1024, f"idle poll: {m['idle_curl_status']}, {idle_curl} B")
    med = lambda xs: round(statistics.median(xs))
    idle_wire, idle_up = med(g["wire"] for g in idle_g), med(g["up"] for g in idle_g)
    # the peer: an unconditional GET of the same channel, every poll a 200
    nv_r = [r for r in reqs if r["uri"] == "/naive/stable.channel" and within(r, "naive_t0", "naive_t1")]
    nv_c = [c for c in conns if within(c, "naive_t0", "naive_t1")]
    need(len(nv_c) == 1 and all(r["status"] == 200 for r in nv_r), "naive polls: not 200s on one connection")
    nv_curl = int(m["naive_curl_bytes"])
    nv_wire = med(g["wire"] for g in nv_c[0]["groups"][1:])
    # the fresh connection and the new-connection-per-poll case
    cd_r = [r for r in reqs if r["uri"] == "/cold/stable.channel" and within(r, "cold_t0", "cold_t1")]
    cd_c = [c for c in conns if within(c, "cold_t0", "cold_t1")]
    need(len(cd_c) == len(cd_r) >= 3, f"cold: {len(cd_c)} connections for {len(cd_r)} requests")
    hs_full = cd_c[0]["wire"] - cd_r[0]["http"]
    hs_full_up = cd_c[0]["groups"][0]["up"] - cd_r[0]["up"]
    hs_res = med(c["wire"] - r["http"] for c, r in zip(cd_c[1:], cd_r[1:]))
    cold_wire = med(c["wire"] for c in cd_c[1:])
    resumed = sum(r["reused"] for r in cd_r[1:])
    hs_nv = nv_c[0]["groups"][0]["wire"] - nv_r[0]["http"]
    proto = idle_r[0]["proto"]
    print(f"1. an idle poll of an unchanged channel ({m['versions']}, {proto}, loopback, the daemon polling every 1 s)")
    print(f"   HTTP, as libcurl counts it (request + headers + body): {m['idle_curl_status']}, {idle_curl} B (required < 1 KB);"
          f" nginx: {idle_r[0]['up']} B in + {idle_r[0]['down']} B out")
    print(f"   on the wire on the reused connection (TCP payload = TLS records, counted by a relay; TCP/IP headers not"
          f" counted): {idle_wire} B per poll ({idle_up} up), {len(idle_g)} polls")
    print(f"   each poll one request answered 304 on one connection: nginx $connection {idle_r[0]['conn']},"
          f" $connection_requests {idle_r[0]['n']}..{idle_r[-1]['n']}; the relay saw {len(run)} connection for the whole run")
    print(f"   peer, an unconditional GET of the same channel (nginx etag off): 200, {nv_curl} B of HTTP ="
          f" {nv_curl / idle_curl:.2f}x; {nv_wire} B on the wire = {nv_wire / idle_wire:.2f}x")
    print(f"   TLS handshake of a fresh connection (full, {proto}, one P-256 server certificate): {hs_full} B"
          f" ({hs_full_up} up) = the first connection's {cd_c[0]['wire']} B on the wire - its 200's {cd_r[0]['http']} B"
          f" of HTTP (the peer's first connection: {hs_nv} B)")
    print(f"   a poll on a new connection each time (what a 300 s interval gets: libcurl drops connections idle > 118 s,"
          f" nginx > 75 s): {cold_wire} B on the wire = {cold_wire / idle_wire:.2f}x the reused poll;"
          f" TLS session resumed {resumed} of {len(cd_r) - 1} ($ssl_session_reused), handshake {hs_res} B")
    # 1b. three models on one format-2 channel: still one request per poll
    m3_run = [c for c in conns if within(c, "m3_t0", "m3_t1")]
    m3_g = [g for c in m3_run for g in c["groups"] if within(g, "m3_idle_t0", "m3_idle_t1")]
    m3_r = [r for r in reqs if within(r, "m3_idle_t0", "m3_idle_t1")]
    need(len(m3_r) == len(m3_g) >= 2, f"three models: {len(m3_r)} requests in {len(m3_g)} exchanges")
    need(all(r["status"] == 304 and r["uri"] == "/m3/m3.channel" for r in m3_r),
         "three models: an idle poll was not one 304 of the one channel")
    m3_curl = int(m["m3_curl_bytes"])
    need(m["m3_curl_status"] == "304" and m3_curl < 1024, f"three models: idle poll {m['m3_curl_status']}, {m3_curl} B")
    m3_wire = med(g["wire"] for g in m3_g)
    print(f"   three models on one format-2 channel (a section each): {len(m3_r)} requests in {len(m3_g)} polls,"
          f" each one 304: {m3_curl} B of HTTP = {m3_curl / idle_curl:.2f}x the one-model poll, {m3_wire} B on the wire")
    # 1c. a channel carrying a revocation list
    rv_r = [r for r in reqs if within(r, "rv_idle_t0", "rv_idle_t1")]
    need(len(rv_r) >= 2 and all(r["status"] == 304 and r["uri"] == "/rv/rv.channel" for r in rv_r),
         "revocation list: an idle poll was not one 304 of the channel")
    rv_curl = int(m["rv_curl_bytes"])
    need(m["rv_curl_status"] == "304" and rv_curl < 1024, f"revocation list: idle poll {m['rv_curl_status']}, {rv_curl} B")
    need(m["rv_list_gets"] == "1", f"revocation list fetched {m['rv_list_gets']} times, not once")
    print(f"   a channel carrying a revocation list ({m['rv_list_bytes']} B, fetched once, before the channel is taken):"
          f" idle poll one 304 of {rv_curl} B of HTTP = {rv_curl - idle_curl:+d} B against the plain channel's")
    # 1d. a channel carrying a trust root and a revocation list
    rt_r = [r for r in reqs if within(r, "rt_idle_t0", "rt_idle_t1")]
    need(len(rt_r) >= 2 and all(r["status"] == 304 and r["uri"] == "/rt/rt.channel" for r in rt_r),
         "trust root: an idle poll was not one 304 of the channel")
    rt_curl = int(m["rt_curl_bytes"])
    need(m["rt_curl_status"] == "304" and rt_curl < 1024, f"trust root: idle poll {m['rt_curl_status']}, {rt_curl} B")
    need(m["rt_root_gets"] == "1" and m["rt_list_gets"] == "1",
         f"trust root fetched {m['rt_root_gets']} times, its list {m['rt_list_gets']} times, not once each")
    print(f"   a channel carrying a trust root ({m['rt_root_bytes']} B) and a revocation list, each fetched once:"
          f" idle poll one 304 of {rt_curl} B of HTTP = {rt_curl - idle_curl:+d} B against the plain channel's")

    cases = [dict(case="idle-poll", http_status=int(m["idle_curl_status"]), curl_http_bytes=idle_curl,
                  nginx_request_bytes=idle_r[0]["up"], nginx_response_bytes=idle_r[0]["down"], wire_bytes=idle_wire,
                  wire_bytes_up=idle_up, polls=len(idle_g), connections=len(run), tls=proto),
             dict(case="idle-poll-three-models", models=3, channel_format=2, http_status=int(m["m3_curl_status"]),
                  curl_http_bytes=m3_curl, wire_bytes=m3_wire, polls=len(m3_g), requests=len(m3_r),
                  ratio_http_to_one_model=round(m3_curl / idle_curl, 3)),
             dict(case="idle-poll-revocation-list", http_status=int(m["rv_curl_status"]), curl_http_bytes=rv_curl,
                  polls=len(rv_r), list_bytes=int(m["rv_list_bytes"]), list_fetches=int(m["rv_list_gets"]),
                  added_http_bytes=rv_curl - idle_curl),
             dict(case="idle-poll-trust-root", http_status=int(m["rt_curl_status"]), curl_http_bytes=rt_curl,
                  polls=len(rt_r), root_bytes=int(m["rt_root_bytes"]), root_fetches=int(m["rt_root_gets"]),
                  list_fetches=int(m["rt_list_gets"]), added_http_bytes=rt_curl - idle_curl),
             dict(case="unconditional-get-peer", http_status=200, curl_http_bytes=nv_curl, wire_bytes=nv_wire,
                  ratio_http_to_idle=round(nv_curl / idle_curl, 3), ratio_wire_to_idle=round(nv_wire / idle_wire, 3)),
             dict(case="tls-handshake", full_bytes=hs_full, full_bytes_up=hs_full_up, resumed_bytes=hs_res,
                  new_connection_poll_wire_bytes=cold_wire, resumed_polls=resumed, new_connection_polls=len(cd_r) - 1,
                  ratio_new_connection_poll_to_idle=round(cold_wire / idle_wire, 3))]

    # 2. origin capacity
    print(f"\n2. origin capacity: one nginx worker, idle polls (If-None-Match, 304) from {m['load_clients']} clients,"
          f" {m['load_secs']} s each (this machine's numbers, not a Pi's: {m['cpu']}, {os.cpu_count()} cores shared with the"
          f" load generator)")
    cap = {}
    for case, name, what in (("reused", "kept-connections", "kept connections"),
                             ("cold", "new-connection-per-poll", "a new TLS connection per poll, session resumed")):
        n, bad, nconn, nres, secs = (float(x) for x in m[f"load_{case}"].split())
        cpu = num(f"load_{case}_cpu_ticks") / num("clk_tck")
        need(bad == 0, f"load {case}: {bad:.0f} answers were not 304")
        per_poll = cpu / n
        cap[case] = dict(polls=int(n), seconds=secs, polls_per_s=round(n / secs), connections=int(nconn),
                         resumed=int(nres), nginx_cpu_s=round(cpu, 2), nginx_cpu_us_per_poll=round(per_poll * 1e6, 1),
                         polls_per_s_per_worker_core=round(1 / per_poll), devices_at_300s=round(n / secs * 300),
                         devices_at_300s_per_worker_core=round(300 / per_poll))
        c = cap[case]
        print(f"   {what}: {c['polls_per_s']} polls/s measured ({c['connections']} connections, {c['resumed']} resumed),"
              f" nginx CPU {c['nginx_cpu_us_per_poll']} us/poll -> one worker core answers {c['polls_per_s_per_worker_core']}"
              f" polls/s; devices at 300 s: {c['devices_at_300s']} measured, {c['devices_at_300s_per_worker_core']} per"
              f" worker core")
        cases.append(dict(case=f"origin-capacity-{name}", **c))

    # 3. bytes per device per update
    up_g = [g for c in run for g in c["groups"] if within(g, "upd_t0", "upd_t1")]
    up_r = [r for r in reqs if within(r, "upd_t0", "upd_t1") and r["status"] == 200]
    need(sorted(r["uri"] for r in up_r) == ["/json-1.tpb", "/stable.channel"], f"update: {[r['uri'] for r in up_r]}")
    upd = max(up_g, key=lambda g: g["wire"])
    upd_http = sum(r["http"] for r in up_r)
    chan_http = next(r["http"] for r in up_r if r["uri"] == "/stable.channel")
    fx_model, fx_tpb = int(m["fixture_model"]), int(m["fixture_tpb"])
    big_model, big_tpb = int(m["big_model"]), int(m["big_tpb"])
    big_update = big_tpb + upd["wire"] - fx_tpb
    print("\n3. bytes per device per update (the channel's 200 and the desired task's bundle, on the reused connection)")
    print(f"   fixture (q4_0, dim 256, 2 layers; json: attn_q + ffn_down): {upd['wire']} B on the wire ({upd_http} B of HTTP,"
          f" bundle {fx_tpb} B, channel {chan_http} B) vs the full task model {fx_model} B = {upd['wire'] / fx_model:.3f}x")
    print(f"   ~350 MB q4_0 model (dim 2048, 12 layers; 5 tensors changed): bundle {big_tpb} B + the same channel and TLS"
          f" overhead = {big_update} B vs {big_model} B = {big_update / big_model:.4f}x")
    cases.append(dict(case="update-fixture", wire_bytes=upd["wire"], http_bytes=upd_http, bundle_bytes=fx_tpb,
                      channel_http_bytes=chan_http, model_bytes=fx_model, ratio_to_model=round(upd["wire"] / fx_model, 4)))
    cases.append(dict(case="update-350MB", estimated_wire_bytes=big_update, bundle_bytes=big_tpb, model_bytes=big_model,
                      ratio_to_model=round(big_update / big_model, 5)))
    # The arithmetic: at 300 s every poll opens a new (resumed) connection.
    day, cold = 86400 // 300, cap["cold"]
    mbit = cold["devices_at_300s_per_worker_core"] * cold_wire * 8 / 300 / 1e6
    print(f"\nfleet arithmetic at the default interval, 300 s (a new connection per poll):"
          f"\n   one nginx worker core: {cold['devices_at_300s_per_worker_core']} devices ({cold['devices_at_300s']}"
          f" measured with the load generator beside it), {mbit:.1f} Mbit/s of polls at the origin"
          f"\n   per device per day: {day} polls = {day * cold_wire / 1024:.0f} KiB ({day * idle_wire / 1024:.0f} KiB if the"
          f" connection were kept)"
          f"\n   one update of 1000 devices, 350 MB model: {big_update * 1000 / 1e9:.2f} GB vs {big_model * 1000 / 1e9:.1f} GB"
          f" shipping the model")
    cases.append(dict(case="fleet-arithmetic-300s", devices_per_worker_core=cold["devices_at_300s_per_worker_core"],
                      origin_mbit_per_s=round(mbit, 1), bytes_per_device_per_day=day * cold_wire,
                      bytes_per_device_per_day_kept_connection=day * idle_wire,
                      update_1000_devices_350MB_bytes=big_update * 1000, full_model_1000_devices_bytes=big_model * 1000))
    if fail:
        print("fleet.sh: " + "; ".join(fail), file=sys.stderr)
        sys.exit(1)
    sys.path.insert(0, os.environ["BENCH_DIR"])
    from conditions import conditions
    cond = conditions()  # network only: no storage claim, so no filesystem
    cond.update(network="loopback", software=m["versions"], tls=proto, nginx_workers=1, daemon_interval_s=1,
                load_clients=int(m["load_clients"]), load_seconds=float(m["load_secs"]))
    json.dump(dict(benchmark="fleet", conditions=cond, cases=cases), open(record_to, "w"), indent=2)
    print(f"\n   wrote {record_to}")

if __name__ == "__main__":
    {"relay": relay, "load": load, "report": report}[sys.argv[1]](*sys.argv[2:])
PY

now() { date +%s.%N; }
mark() { echo "$1=$2" >> "$marks"; }
publish() { "$BIN/taskpatch" publish "$www" --channel stable "${sign[@]}" "$@" > /dev/null; }
size() { stat -c %s "$1"; }
# wait_lines PATTERN N: until nginx has logged N requests matching PATTERN (30 s at most).
wait_lines() {
    local i
    for ((i = 0; i < 300; i++)); do
        [ "$(grep -c -- "$1" "$NGINX_LOG")" -ge "$2" ] && return 0
        sleep 0.1
    done
    echo "fleet.sh: nginx logged fewer than $2 requests like '$1'" >&2
    return 1
}
# until_status PYTHON-EXPR: until the expression over the daemon's status `s` holds (30 s at most).
until_status() {
    local i
    for ((i = 0; i < 300; i++)); do
        tpctl --json status 2> /dev/null | python3 -c "import json,sys; s = json.load(sys.stdin); sys.exit(not ($1))" \
            2> /dev/null && return 0
        sleep 0.1
    done
    echo "fleet.sh: the daemon never reached: $1" >&2
    return 1
}
# daemon_on PATH: a fresh daemon polling https://127.0.0.1:<relay>PATH every second (+-20%).
daemon_on() {
    rm -rf "$STATE"
    write_config "trial:
  timeout: 600
channel:
  url: [https://127.0.0.1:$relay_port$1]
  interval: 1
tls:
  ca: $TMP/pki/ca.pem"
    start_daemon
}
# curl_bytes NAME: the daemon's last poll (libcurl's count, HTTP status) into the marks.
curl_bytes() {
    tpctl --json status > "$TMP/st.json"
    mark "$1_curl_bytes" "$(jget channel.last_poll_bytes < "$TMP/st.json")"
    mark "$1_curl_status" "$(jget channel.last_poll_http_status < "$TMP/st.json")"
}
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

echo "setting up: fixtures, nginx, the relay"
make_gguf_fixtures > "$TMP/fixtures.log" 2>&1 || { cat "$TMP/fixtures.log"; exit 1; }
# TLS 1.3 as Debian's stock nginx.conf enables it (nginx 1.22's built-in default stops at 1.2);
# /naive/ sends no ETag (every poll a 200), /cold/ closes the connection after each answer.
start_nginx "ssl_protocols TLSv1.2 TLSv1.3;
        location /naive/ { alias $www/; etag off; }
        location /cold/ { alias $www/; keepalive_timeout 0; }" || exit 1
# A log format that names the connection, the request's number on it and the TLS session.
fmt='log_format fleet "$msec $connection $connection_requests $ssl_protocol $ssl_session_reused $request_method $uri $status $request_length $bytes_sent";'
sed -i -e "/log_format plain/a\\    $fmt" -e 's/ plain;$/ fleet;/' "$TMP/nginx/nginx.conf"
old_worker=$(cat "/proc/$NGINX_PID/task/$NGINX_PID/children")
nginx -p "$TMP/nginx" -c "$TMP/nginx/nginx.conf" -s reload 2> "$TMP/nginx/reload.err" || { cat "$TMP/nginx/reload.err"; exit 1; }
for _ in $(seq 100); do
    worker=$(cat "/proc/$NGINX_PID/task/$NGINX_PID/children")
    [ "$worker" != "$old_worker" ] && [ "$(echo "$worker" | wc -w)" = 1 ] && break
    sleep 0.05
done
worker=${worker% }
: > "$NGINX_LOG"
python3 "$py" relay "$HTTPS_PORT" "$TMP/relay.port" "$TMP/relay.log" &
relay_pid=$!
for _ in $(seq 100); do [ -s "$TMP/relay.port" ] && break; sleep 0.05; done
relay_port=$(cat "$TMP/relay.port")
mark versions "nginx $(nginx -v 2>&1 | sed 's,.*/,,'), $(curl --version | head -n 1 | awk '{print $4}'), $(openssl version | awk '{print $1 "/" $2}')"
mark cpu "$(awk -F': ' '/^model name|^Model/ {print $2; exit}' /proc/cpuinfo)"

cp "$TMP/shout.tpb" "$www/shout-1.tpb"
publish --serial 1 --desired shout

echo "1. the peer (an unconditional GET per poll), then a new connection per poll, then the idle polls"
mark naive_t0 "$(now)"
daemon_on /naive/stable.channel || exit 1
wait_lines " GET /naive/stable.channel 200 " $((polls + 1))
curl_bytes naive
stop_daemon || true
mark naive_t1 "$(now)"

mark cold_t0 "$(now)"
daemon_on /cold/stable.channel || exit 1
wait_lines " GET /cold/stable.channel " $((polls + 1))
stop_daemon || true
mark cold_t1 "$(now)"

# The device: provisioned, it fetches shout, switches, commits; then polls an unchanged channel.
mark reused_t0 "$(now)"
daemon_on /stable.channel || exit 1
tpctl provision "$TMP/base.gguf" > /dev/null
until_status 's["state"] == "trial" and s["active"]["task"] == "shout"'
tpctl mark-good > /dev/null
wait_lines " GET /stable.channel 304 " 1
mark idle_t0 "$(now)"
wait_lines " GET /stable.channel 304 " $((polls + 1))
sleep 0.2
curl_bytes idle
mark idle_t1 "$(now)"
# The update: serial 2 wants json; the device fetches the channel and json's bundle.
mark upd_t0 "$(now)"
cp "$TMP/json.tpb" "$www/json-1.tpb"
publish --serial 2 --desired json
until_status 's["state"] == "trial" and s["active"]["task"] == "json"'
same "$TMP/json.gguf" || { echo "fleet.sh: the model is not json.gguf after the update" >&2; exit 1; }
sleep 0.3
mark upd_t1 "$(now)"
stop_daemon || true
mark reused_t1 "$(now)"
mark fixture_model "$(size "$TMP/json.gguf")"
mark fixture_tpb "$(size "$TMP/json.tpb")"

echo "1b. three models on one format-2 channel: the idle poll"
# Three models (llm, det, wake), each with its section and its json bundle; the device runs
# json on all three, then polls the unchanged channel: one request per poll, whatever the count.
mkdir -p "$www/m3"
for name in llm det wake; do
    "$BIN/taskpatch" create "$TMP/base.gguf" "$TMP/json.gguf" -o "$www/m3/json-$name.tpb" --task json --model "$name" \
        "${sign[@]}" --level 3 > /dev/null
done
"$BIN/taskpatch" publish "$www/m3" --channel m3 "${sign[@]}" --serial 1 --model det --desired json \
    --model llm --desired json --model wake --desired json > /dev/null
rm -rf "$STATE"
write_models_config "trial:
  timeout: 600
channel:
  url: https://127.0.0.1:$relay_port/m3/m3.channel
  interval: 1
tls:
  ca: $TMP/pki/ca.pem" llm det wake
mark m3_t0 "$(now)"
start_daemon
for name in llm det wake; do
    tpctl -m "$name" provision "$TMP/base.gguf" > /dev/null
done
for name in llm det wake; do
    wait_model "$name" 's["trial"] and s["trial"]["task"] == "json"' 30
    tpctl -m "$name" mark-good > /dev/null
done
for name in llm det wake; do
    cmp -s "$TMP/$name.gguf" "$TMP/json.gguf" || { echo "fleet.sh: model $name is not json.gguf" >&2; exit 1; }
done
n0=$(grep -c " GET /m3/m3.channel 304 " "$NGINX_LOG" || true)
wait_lines " GET /m3/m3.channel 304 " $((n0 + 1))
mark m3_idle_t0 "$(now)"
wait_lines " GET /m3/m3.channel 304 " $((n0 + polls + 1))
sleep 0.2
tpctl -m wake --json status > "$TMP/st.json"
mark m3_curl_bytes "$(jget channel.last_poll_bytes < "$TMP/st.json")"
mark m3_curl_status "$(jget channel.last_poll_http_status < "$TMP/st.json")"
mark m3_idle_t1 "$(now)"
stop_daemon || true
mark m3_t1 "$(now)"

echo "1c. a channel carrying a revocation list: the list once, then the idle poll"
mkdir -p "$www/rv"
cp "$www/json-1.tpb" "$www/rv/" 2> /dev/null || cp "$TMP/json.tpb" "$www/rv/json-1.tpb"
"$BIN/taskpatch" revoke -o "$TMP/rv.revocations" "${sign[@]}" --revoke "$TMP/pki/noeku-signer.crt" > /dev/null
"$BIN/taskpatch" publish "$www/rv" --channel rv "${sign[@]}" --serial 1 --desired json \
    --revocations "$TMP/rv.revocations" > /dev/null
mark rv_list_bytes "$(size "$www/rv/rv.revocations")"
mark rv_t0 "$(now)"
daemon_on /rv/rv.channel
tpctl provision "$TMP/base.gguf" > /dev/null
until_status 's["trust"]["revocations"] and s["trust"]["revocations"]["version"] == 1 and s["state"] == "trial"'
tpctl mark-good > /dev/null
n0=$(grep -c " GET /rv/rv.channel 304 " "$NGINX_LOG" || true)
wait_lines " GET /rv/rv.channel 304 " $((n0 + 1))
mark rv_idle_t0 "$(now)"
wait_lines " GET /rv/rv.channel 304 " $((n0 + polls + 1))
sleep 0.2
curl_bytes rv
mark rv_idle_t1 "$(now)"
mark rv_list_gets "$(grep -c " GET /rv/rv.revocations 200 " "$NGINX_LOG" || true)"
stop_daemon || true
mark rv_t1 "$(now)"

echo "1d. a channel carrying a trust root and a revocation list: each once, then the idle poll"
mkdir -p "$www/rt"
cp "$www/rv/json-1.tpb" "$www/rt/"
"$BIN/taskpatch" root -o "$TMP/rt.root" "${sign[@]}" --root-ca "$TMP/pki/ca.pem" --bundle-ca "$TMP/pki/ca.pem" \
    --channel-ca "$TMP/pki/ca.pem" > /dev/null
"$BIN/taskpatch" publish "$www/rt" --channel rt "${sign[@]}" --serial 1 --desired json \
    --revocations "$TMP/rv.revocations" --root "$TMP/rt.root" > /dev/null
mark rt_root_bytes "$(size "$www/rt/rt.root")"
mark rt_t0 "$(now)"
daemon_on /rt/rt.channel
tpctl provision "$TMP/base.gguf" > /dev/null
until_status 's["trust"]["root"] and s["trust"]["root"]["version"] == 1 and s["trust"]["revocations"] and
              s["state"] == "trial"'
tpctl mark-good > /dev/null
n0=$(grep -c " GET /rt/rt.channel 304 " "$NGINX_LOG" || true)
wait_lines " GET /rt/rt.channel 304 " $((n0 + 1))
mark rt_idle_t0 "$(now)"
wait_lines " GET /rt/rt.channel 304 " $((n0 + polls + 1))
sleep 0.2
curl_bytes rt
mark rt_idle_t1 "$(now)"
mark rt_root_gets "$(grep -c " GET /rt/rt.root 200 " "$NGINX_LOG" || true)"
mark rt_list_gets "$(grep -c " GET /rt/rv.revocations 200 " "$NGINX_LOG" || true)"
stop_daemon || true
mark rt_t1 "$(now)"

echo "2. origin capacity, ${load_secs} s per case"
clients=(2 4)
mark load_clients $((clients[0] * clients[1]))
mark load_secs "$load_secs"
mark clk_tck "$(getconf CLK_TCK)"
for case in reused cold; do
    path=/stable.channel
    [ "$case" = cold ] && path=/cold/stable.channel
    c0=$(cpu_ticks "$worker")
    mark "load_$case" "$(python3 "$py" load "$HTTPS_PORT" "$path" "$TMP/pki/ca.pem" "$load_secs" "${clients[@]}")"
    mark "load_${case}_cpu_ticks" $(($(cpu_ticks "$worker") - c0))
done

echo "3. the ~350 MB model"
big="$build/bench/switch"
if [ ! -f "$big/base.gguf" ] || [ ! -f "$big/json.gguf" ]; then
    # The same model and json task as tests/bench/switch.sh, cached here.
    big="$build/bench/fleet"
    mkdir -p "$big"
    ggml=$(sh "$root/tests/tools/npm-ggml.sh" "$root/build/npm" | tail -n 1)
    dims=(--type q4_0 --dim 2048 --ff 5632 --layers 12 --vocab 300)
    tq="blk.0.attn_q.weight,blk.0.attn_v.weight,blk.1.attn_q.weight,blk.1.attn_v.weight,blk.2.attn_q.weight"
    [ -f "$big/base.gguf" ] || "$build/tools/gguf-fixture" --ggml "$ggml" "${dims[@]}" -o "$big/base.gguf" > /dev/null
    [ -f "$big/json.gguf" ] || "$build/tools/gguf-fixture" --ggml "$ggml" "${dims[@]}" --mode lora --targets "$tq" \
        -o "$big/json.gguf" > /dev/null
fi
"$BIN/taskpatch" create "$big/base.gguf" "$big/json.gguf" -o "$TMP/big-json.tpb" --task json "${sign[@]}" --level 3 > /dev/null
mark big_model "$(size "$big/json.gguf")"
mark big_tpb "$(size "$TMP/big-json.tpb")"
echo

mkdir -p "$build/bench"
BENCH_DIR="$root/tests/bench" python3 "$py" report "$TMP" "$build/bench/fleet.json"
if [ "${RECORD:-0}" = 1 ]; then
    mkdir -p "$root/tests/bench/results"
    cp "$build/bench/fleet.json" "$root/tests/bench/results/fleet.json"
    echo "recorded tests/bench/results/fleet.json"
fi
