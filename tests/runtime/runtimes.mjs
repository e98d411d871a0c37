// SPDX-License-Identifier: MIT
// The real runtimes for TaskPatch's runtime checks, example service and LoRA benchmark:
// node-llama-cpp (llama.cpp) and onnxruntime-node, as tests/tools/npm-runtimes.sh installs
// them (pinned) into a cache directory: $TASKPATCH_NPM_RUNTIMES, else build/npm-runtimes of
// this checkout. Nothing here builds or downloads anything at run time.

import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

export function runtimesDir() {
    return process.env.TASKPATCH_NPM_RUNTIMES || join(repo, "build", "npm-runtimes");
}

// import() a package of the cache by name (ES modules have no NODE_PATH).
export async function importRuntime(name) {
    const require = createRequire(join(runtimesDir(), "package.json"));
    let path;
    try {
        path = require.resolve(name);
    } catch {
        throw new Error(`${name} is not installed in ${runtimesDir()}: run tests/tools/npm-runtimes.sh ${runtimesDir()}`);
    }
    const mod = await import(pathToFileURL(path).href);
    return mod.default && !mod.getLlama && !mod.InferenceSession ? mod.default : mod;
}

// llama.cpp on the CPU from the prebuilt binary package: never a build, never a download.
// maxThreads 0: a context's `threads` is the exact thread count (the benchmark needs that).
export async function cpuLlama() {
    const { getLlama } = await importRuntime("node-llama-cpp");
    return getLlama({
        gpu: false, build: "never", skipDownload: true, usePrebuiltBinaries: true,
        progressLogs: false, logLevel: "error", maxThreads: 0,
    });
}

// A model's context with one sequence; threads 0 = the library's choice.
export async function openContext(model, { threads = 0, contextSize = 256, lora } = {}) {
    const opts = { contextSize, batchSize: Math.min(contextSize, 256) };
    if (threads > 0)
        opts.threads = { ideal: threads, min: threads };
    if (lora)
        opts.lora = { adapters: [{ filePath: lora }] };
    const context = await model.createContext(opts);
    return { context, sequence: context.getSequence() };
}

// Greedy decoding of up to n tokens after <s> + prompt, from an empty history. Returns the
// tokens, each one's probability (NaN when the logits are not finite) and the text.
// Stops early at an end-of-generation token.
export async function greedy(model, sequence, prompt, n) {
    await sequence.clearHistory();
    const input = model.tokenize(prompt);
    if (model.tokens.bos != null)
        input.unshift(model.tokens.bos);
    const tokens = [], confidences = [];
    if (n > 0) {
        for await (const out of sequence.evaluateWithMetadata(input, { confidence: true }, { temperature: 0 })) {
            tokens.push(out.token);
            confidences.push(Number.isFinite(out.confidence) ? out.confidence : NaN);
            if (tokens.length >= n || model.isEogToken(out.token))
                break;
        }
    }
    return { tokens, confidences, text: model.detokenize(tokens) };
}
