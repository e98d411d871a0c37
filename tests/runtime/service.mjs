// SPDX-License-Identifier: MIT
// An example inference service that follows taskpatchd: it subscribes to the daemon's events
// (the JSON-lines socket protocol, packaging/docs/protocol.md), serves the active model with
// real llama.cpp (node-llama-cpp), and reloads it on every `slot-changed`. Its /health is what
// the daemon's trial probes (trial.health_url), so a task is committed only once the service
// has loaded it and found it sane, and rolled back when the service finds it broken.
//
//   node tests/runtime/service.mjs --socket PATH [--port N] [--host H] [--threads N] [--port-file F]
//                                  [--model NAME]   (the daemon's model it serves: default "default")
//
//   GET  /health    200 {"status":"ready",...}  the active model is loaded and decodes finite logits
//                   503 {"status":"loading"}    no model yet, or the new one is loading (not yet)
//                   503 {"status":"stale"}      model_path names another file than the one served
//                                               (a slot change whose event has not come yet)
//                   500 {"status":"broken",...} the active model does not load or its logits are
//                                               NaN/inf: the daemon rolls a trial back on this
//   POST /complete  {"prompt": "...", "tokens": N (1..256, default 16)} -> 200 {"task", "version",
//                   "sha256", "slot", "completion", "tokens": [...]} greedy decoding, or 503
//
// While a new model loads, /complete keeps answering with the previous one (and says which);
// the previous model is released once the new one is in. --port 0 picks a free port; the
// port is written to --port-file (and printed on stderr) once the service listens.

import { once } from "node:events";
import { realpathSync, statSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { connect } from "node:net";
import { parseArgs } from "node:util";
import { cpuLlama, greedy, openContext } from "./runtimes.mjs";

const MAX_LINE = 1 << 20;           // the protocol's cap on a daemon line
const MAX_BODY = 64 << 10;          // a /complete request
const PROBE = { prompt: "health probe", tokens: 4 };

const { values: opt } = parseArgs({
    options: {
        socket: { type: "string", default: process.env.TASKPATCH_SOCKET || "/run/taskpatch/taskpatchd.sock" },
        host: { type: "string", default: "127.0.0.1" },
        port: { type: "string", default: "8080" },
        "port-file": { type: "string" },
        threads: { type: "string", default: "0" },
        model: { type: "string", default: "default" },
    },
});
const threads = Number(opt.threads);

function log(msg) {
    process.stderr.write(`service: ${msg}\n`);
}

// ---- the model being served ------------------------------------------------------------------

const llama = await cpuLlama();
let current = null;                 // {model, context, sequence, meta}: what /complete serves
let state = { status: "loading" };  // what /health says about the *active* model
let wanted = null;                  // the newest slot-changed (or status) not loaded yet
let loading = false;
let queue = Promise.resolve();      // decodes and releases run one at a time

function serialise(fn) {
    const p = queue.then(fn);
    queue = p.catch(() => {});
    return p;
}

// Ask for @meta's model ({model_path, task, version, sha256, slot}); loads run one at a time,
// and only the newest request matters.
function want(meta) {
    wanted = meta;
    state = { status: "loading", task: meta.task, version: meta.version, sha256: meta.sha256 };
    if (!loading)
        loadLoop();
}

async function loadLoop() {
    loading = true;
    while (wanted) {
        const meta = wanted;
        wanted = null;
        const t0 = performance.now();
        let next = null, broken = null;
        try {
            // The symlink already points at the new file when slot-changed is sent.
            const file = realpathSync(meta.model_path);
            const { dev, ino } = statSync(file);
            meta.file = { dev, ino };
            const model = await llama.loadModel({ modelPath: file, gpuLayers: 0 });
            const { context, sequence } = await openContext(model, { threads });
            next = { model, context, sequence, meta };
            const probe = await greedy(model, sequence, PROBE.prompt, PROBE.tokens);
            if (probe.confidences.some((c) => !Number.isFinite(c)))
                broken = "the model's logits are not finite (NaN or inf)";
        } catch (e) {
            broken = `cannot load ${meta.model_path}: ${e.message}`;
        }
        if (wanted) {               // superseded while loading: drop it, load the newer one
            if (next)
                await release(next);
            continue;
        }
        const name = `${meta.task ?? "base"} v${meta.version} (${String(meta.sha256).slice(0, 12)})`;
        const old = current;
        if (broken) {
            log(`broken: ${name}: ${broken}`);
            current = null;
            state = { status: "broken", error: broken, task: meta.task, version: meta.version, sha256: meta.sha256 };
            if (next)
                await release(next);
        } else {
            current = next;
            state = { status: "ready", task: meta.task, version: meta.version, sha256: meta.sha256, slot: meta.slot };
            log(`serving ${name} from ${meta.model_path}, loaded in ${Math.round(performance.now() - t0)} ms`);
        }
        if (old)
            await release(old);     // unmaps the old slot: the daemon may stage into it again
    }
    loading = false;
}

function release(m) {
    return serialise(async () => {
        await m.context.dispose();
        await m.model.dispose();
    }).catch((e) => log(`releasing a model: ${e.message}`));
}

// ---- the daemon: events, and the active model at (re)connection ----------------------------

// Read JSON lines from @sock, calling @onLine(object); a line over the cap ends the connection.
function readLines(sock, onLine) {
    let buf = "";
    sock.setEncoding("utf8");
    sock.on("data", (chunk) => {
        buf += chunk;
        let nl;
        while ((nl = buf.indexOf("\n")) >= 0) {
            const line = buf.slice(0, nl);
            buf = buf.slice(nl + 1);
            try {
                onLine(JSON.parse(line));
            } catch (e) {
                log(`bad line from the daemon: ${e.message}`);
            }
        }
        if (buf.length > MAX_LINE) {
            log("a line from the daemon exceeds 1 MiB: reconnecting");
            sock.destroy();
        }
    });
}

// The model a snapshot (the first event of every subscription) says is active, or null.
function activeOf(snapshot) {
    if (!snapshot.model_path || !snapshot.active)
        return null;
    const a = snapshot.active;
    return { model_path: snapshot.model_path, task: a.task, version: a.version, sha256: a.sha256, slot: a.slot };
}

// Subscribe; the snapshot that opens the subscription names the active model (events from then
// on are not missed, and what happened while disconnected is in it). On any error or hang-up,
// try again in half a second. The model keeps being served meanwhile.
function follow() {
    const sock = connect(opt.socket);
    let subscribed = false;
    sock.on("error", () => {});
    sock.on("close", () => {
        if (subscribed)
            log("lost the daemon's socket: reconnecting");
        setTimeout(follow, 500);
    });
    readLines(sock, async (msg) => {
        if (!subscribed) {
            if (!msg.ok) {
                log(`subscribe refused: ${JSON.stringify(msg.error)}`);
                sock.destroy();
                return;
            }
            subscribed = true;
            return;
        }
        // A subscription hears every model's events: this service serves one of them.
        if (msg.model && msg.model !== opt.model)
            return;
        if (msg.event === "snapshot") {
            const meta = activeOf(msg);
            const same = current && meta && current.meta.sha256 === meta.sha256 && current.meta.slot === meta.slot;
            if (meta && !same && !wanted)
                want(meta);
        } else if (msg.event === "slot-changed") {
            log(`slot-changed (${msg.reason}): ${msg.task ?? "base"} v${msg.version} in slot ${msg.slot}`);
            want({ model_path: msg.model_path, task: msg.task, version: msg.version, sha256: msg.sha256, slot: msg.slot });
        } else if (msg.event === "committed" || msg.event === "rolled-back") {
            log(`${msg.event}: ${msg.task ?? "base"} v${msg.version}${msg.reason ? ` (${msg.reason})` : msg.how ? ` (${msg.how})` : ""}`);
        }
    });
    sock.write(JSON.stringify({ cmd: "subscribe" }) + "\n");
}

// ---- HTTP --------------------------------------------------------------------------------------

function reply(res, code, obj) {
    const body = JSON.stringify(obj) + "\n";
    res.writeHead(code, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
    res.end(body);
}

async function readBody(req) {
    let body = "";
    for await (const chunk of req) {
        body += chunk;
        if (body.length > MAX_BODY)
            throw new Error("request body over 64 KiB");
    }
    return body;
}

async function complete(req, res) {
    let prompt, n;
    try {
        const body = JSON.parse(await readBody(req));
        prompt = body.prompt;
        n = body.tokens ?? 16;
        if (typeof prompt !== "string" || !Number.isInteger(n) || n < 1 || n > 256)
            throw new Error('want {"prompt": STRING, "tokens": 1..256}');
    } catch (e) {
        return reply(res, 400, { error: e.message });
    }
    const m = current;
    if (!m)
        return reply(res, 503, { error: `no model to serve (${state.status}${state.error ? `: ${state.error}` : ""})` });
    const r = await serialise(() => greedy(m.model, m.sequence, prompt, n));
    reply(res, 200, { task: m.meta.task, version: m.meta.version, sha256: m.meta.sha256, slot: m.meta.slot,
        completion: r.text, tokens: r.tokens });
}

// Ready only while model_path still names the file being served: a service that missed an
// event never confirms a trial.
function health() {
    if (state.status !== "ready" || !current)
        return state;
    try {
        const { dev, ino } = statSync(current.meta.model_path);
        if (dev === current.meta.file.dev && ino === current.meta.file.ino)
            return state;
    } catch {
        // no model_path: stale as well
    }
    return { status: "stale", error: `${current.meta.model_path} no longer names the model being served` };
}

const server = createServer((req, res) => {
    const path = new URL(req.url, "http://x").pathname;
    if (req.method === "GET" && path === "/health") {
        const h = health();
        return reply(res, { ready: 200, loading: 503, stale: 503, broken: 500 }[h.status], h);
    }
    if (req.method === "POST" && path === "/complete")
        return complete(req, res).catch((e) => reply(res, 500, { error: e.message }));
    reply(res, 404, { error: "GET /health or POST /complete" });
});
server.listen(Number(opt.port), opt.host);
await once(server, "listening");
const port = server.address().port;
if (opt["port-file"])
    writeFileSync(opt["port-file"], `${port}\n`);
log(`listening on http://${opt.host}:${port}, following ${opt.socket}`);
follow();

for (const sig of ["SIGTERM", "SIGINT"])
    process.on(sig, () => {
        server.close();
        process.exit(0);
    });
