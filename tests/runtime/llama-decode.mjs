// SPDX-License-Identifier: MIT
// llama-decode [--tokens N] [--threads N] MODEL.gguf...: load each model in real llama.cpp
// (node-llama-cpp), decode greedily from fixed prompts and print one JSON line per model:
// {"model": PATH, "tokens": [[...] per prompt], "confidences": [[...]], "text": [...]}.
// Probabilities print in full precision (JavaScript's shortest round trip; NaN as null), so
// two lines are equal exactly when the runs were bit-identical.

import { parseArgs } from "node:util";
import { cpuLlama, greedy, openContext } from "./runtimes.mjs";

const PROMPTS = ["The quick brown fox", "taskpatch switches tasks", "0123456789"];

const { values, positionals } = parseArgs({
    options: { tokens: { type: "string", default: "16" }, threads: { type: "string", default: "1" } },
    allowPositionals: true,
});
const n = Number(values.tokens), threads = Number(values.threads);
if (!positionals.length || !Number.isInteger(n) || n < 1 || !Number.isInteger(threads) || threads < 0) {
    console.error("usage: llama-decode.mjs [--tokens N] [--threads N] MODEL.gguf...");
    process.exit(2);
}

const llama = await cpuLlama();
for (const path of positionals) {
    const model = await llama.loadModel({ modelPath: path, gpuLayers: 0 });
    const { context, sequence } = await openContext(model, { threads });
    const line = { model: path, tokens: [], confidences: [], text: [] };
    for (const prompt of PROMPTS) {
        const r = await greedy(model, sequence, prompt, n);
        line.tokens.push(r.tokens);
        line.confidences.push(r.confidences);
        line.text.push(r.text);
    }
    console.log(JSON.stringify(line));
    await context.dispose();
    await model.dispose();
}
await llama.dispose();
