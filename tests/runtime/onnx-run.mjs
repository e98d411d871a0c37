// SPDX-License-Identifier: MIT
// onnx-run MODEL.onnx...: run each model in ONNX Runtime (onnxruntime-node, CPU, one thread)
// on one fixed input and print one JSON line per model: {"model": PATH, "output": NAME,
// "dims": [...], "type": T, "bytes": BASE64 of the output tensor's raw bytes}. Equal lines
// mean bit-identical outputs. The input is float32, shaped as the model declares it
// (tests/tools/make-onnx.py's conv stack: [1, C, H, W]), deterministic values in [-2, 2).

import { importRuntime } from "./runtimes.mjs";

const paths = process.argv.slice(2);
if (!paths.length) {
    console.error("usage: onnx-run.mjs MODEL.onnx...");
    process.exit(2);
}
const ort = await importRuntime("onnxruntime-node");
for (const path of paths) {
    const session = await ort.InferenceSession.create(path, {
        executionProviders: ["cpu"], intraOpNumThreads: 1, interOpNumThreads: 1,
    });
    const feeds = {};
    for (const name of session.inputNames) {
        const dims = inputDims(session, name);
        const x = new Float32Array(dims.reduce((a, b) => a * b, 1));
        for (let i = 0; i < x.length; i++)
            x[i] = ((i * 2654435761) % 4096) / 1024 - 2;
        feeds[name] = new ort.Tensor("float32", x, dims);
    }
    const results = await session.run(feeds);
    for (const name of session.outputNames) {
        const t = results[name];
        const raw = Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength);
        console.log(JSON.stringify({ model: path, output: name, dims: t.dims, type: t.type, bytes: raw.toString("base64") }));
    }
    await session.release();
}

// The declared shape of an input (onnxruntime-node 1.22 lists it in inputMetadata).
function inputDims(session, name) {
    const meta = (session.inputMetadata || []).find((m) => m.name === name);
    if (!meta || !meta.shape || meta.shape.some((d) => typeof d !== "number"))
        throw new Error(`${name}: no fixed input shape in the model`);
    return meta.shape;
}
