// SPDX-License-Identifier: MIT
// lora-bench --base BASE.gguf --folded TASK.gguf --adapter LORA.gguf [--threads 1,2] [--reps 5]
//            [--tokens 64] [--max-seconds 4]: decode speed in real llama.cpp (node-llama-cpp) of a task model
// with its LoRA folded into the weights against the base with the same LoRA applied at run
// time (llama_adapter_lora on the context). Runs alternate folded / LoRA so drift hits both;
// each run decodes --tokens greedily after a short prompt (fewer when it takes over
// --max-seconds: a machine busy with other work), and tokens/s counts the tokens after
// the first (the prompt's evaluation is not decode), per second of wall time and per second of
// the process's CPU time (user + system: less sensitive to other work on the machine, which
// only delays a lone decoding thread; with several threads it counts their spinning too).
// Prints one JSON object on stdout: {"threads": {"1": {"folded": [{"wall": tok/s, "cpu":
// tok/s} per rep], "lora": [...]}, ...}, "adapter_check": {...}}.
// tests/bench/lora.sh drives it.

import { parseArgs } from "node:util";
import { cpuLlama, openContext } from "../runtime/runtimes.mjs";

const { values: opt } = parseArgs({
    options: {
        base: { type: "string" }, folded: { type: "string" }, adapter: { type: "string" },
        threads: { type: "string", default: "1" }, reps: { type: "string", default: "5" },
        tokens: { type: "string", default: "64" }, "max-seconds": { type: "string", default: "4" },
    },
});
const threadList = opt.threads.split(",").map(Number), reps = Number(opt.reps), n = Number(opt.tokens);
const maxMs = Number(opt["max-seconds"]) * 1000;   // a run on a starved machine stops early
if (!opt.base || !opt.folded || !opt.adapter || threadList.some((t) => !(t >= 1)) || !(reps >= 1) || !(n >= 2)) {
    console.error("usage: lora-bench.mjs --base B.gguf --folded T.gguf --adapter L.gguf [--threads 1,2] [--reps N] [--tokens N]");
    process.exit(2);
}
const PROMPT = "Once upon a time";

// One timed greedy decode: tokens/s over the tokens after the first, by wall and CPU time.
async function timed(model, sequence) {
    await sequence.clearHistory();
    const input = [model.tokens.bos, ...model.tokenize(PROMPT)];
    let first = 0, cpu0 = null, count = 0;
    for await (const out of sequence.evaluate(input, { temperature: 0 })) {
        void out;
        if (++count === 1) {
            first = performance.now();
            cpu0 = process.cpuUsage();
        }
        if (count >= n || (count > 2 && performance.now() - first > maxMs))
            break;
    }
    const wall = (performance.now() - first) / 1000, cpu = process.cpuUsage(cpu0);
    return { wall: (count - 1) / wall, cpu: (count - 1) / ((cpu.user + cpu.system) / 1e6) };
}

async function nextTokenProbabilities(model, sequence) {
    await sequence.clearHistory();
    const input = [model.tokens.bos, ...model.tokenize(PROMPT)];
    for await (const out of sequence.evaluateWithMetadata(input, { probabilities: true }, { temperature: 0 }))
        return out.probabilities;
}

function l1(p, q) {
    let sum = 0;
    for (const k of new Set([...p.keys(), ...q.keys()]))
        sum += Math.abs((p.get(k) ?? 0) - (q.get(k) ?? 0));
    return sum;
}

const llama = await cpuLlama();
const folded = await llama.loadModel({ modelPath: opt.folded, gpuLayers: 0 });
const base = await llama.loadModel({ modelPath: opt.base, gpuLayers: 0 });
const result = { threads: {}, tokens: n, reps, prompt: PROMPT };
for (const t of threadList) {
    const f = await openContext(folded, { threads: t });
    const l = await openContext(base, { threads: t, lora: opt.adapter });
    await timed(folded, f.sequence);        // warm-up: page cache, thread pool, allocations
    await timed(base, l.sequence);
    const runs = { folded: [], lora: [] };
    for (let r = 0; r < reps; r++) {
        runs.folded.push(await timed(folded, f.sequence));
        runs.lora.push(await timed(base, l.sequence));
    }
    result.threads[t] = runs;
    if (t === threadList[0]) {
        // The adapter is really applied: the next-token distribution after the prompt of
        // base+LoRA is closer to the folded model's than the base's is (L1 distance).
        const b = await openContext(base, { threads: t });
        const dist = [];
        for (const [m, s] of [[folded, f], [base, l], [base, b]])
            dist.push(await nextTokenProbabilities(m, s.sequence));
        result.adapter_check = { l1_lora_vs_folded: l1(dist[1], dist[0]), l1_base_vs_folded: l1(dist[2], dist[0]) };
        await b.context.dispose();
    }
    await f.context.dispose();
    await l.context.dispose();
}
console.log(JSON.stringify(result));
await folded.dispose();
await base.dispose();
await llama.dispose();
