#!/usr/bin/env python3
"""An importance matrix for a GGUF model, in llama.cpp's GGUF form or its legacy .dat form.

    make-imatrix.py MODEL.gguf OUT [--legacy] [--seed N] [--dataset NAME] [--chunks N] [--skip NAME]

One entry per tensor of two or more dimensions whose name ends in "weight" (but token_embd,
which llama-imatrix never sees: a lookup, not a product): ne[0] values per
expert (ne[2] experts; 1 for a 2-D tensor), each a mean squared activation that skews the way
real ones do (log-uniform over e^-6..e^3, a few columns that never fired). The GGUF form, as
llama-imatrix writes it: general.type "imatrix", imatrix.datasets, imatrix.chunk_count,
imatrix.chunk_size, and per entry <name>.in_sum2 (F32, ne0 x experts: sums of squares) and
<name>.counts (F32, one per expert; an expert that never ran counts 0). The legacy form:
int32 entries, then per entry int32 name length, the name, int32 ncall, int32 nval, nval
floats (the mean times ncall), then int32 chunks, int32 dataset length, the dataset name.
--skip NAME leaves a tensor out (llama.cpp then quantizes it without one). Test input only.
"""

import math
import random
import struct
import sys

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import gguf_header  # noqa: E402


def gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def write_gguf(path, entries, dataset, chunks, chunk_size):
    kvs = [
        gguf_string("general.type") + struct.pack("<I", 8) + gguf_string("imatrix"),
        gguf_string("imatrix.datasets") + struct.pack("<IIQ", 9, 8, 1) + gguf_string(dataset),
        gguf_string("imatrix.chunk_count") + struct.pack("<II", 4, chunks),
        gguf_string("imatrix.chunk_size") + struct.pack("<II", 4, chunk_size),
    ]
    tensors, blobs, rel = [], [], 0
    for name, ne0, sums, counts in entries:
        for suffix, ne, data in ((".in_sum2", (ne0, len(counts)), sums), (".counts", (1, len(counts)), counts)):
            blob = struct.pack("<%df" % len(data), *data)
            tensors.append(gguf_string(name + suffix) + struct.pack("<I", 2) + struct.pack("<2Q", *ne) +
                           struct.pack("<IQ", 0, rel))
            blobs.append(blob)
            rel = (rel + len(blob) + 31) // 32 * 32
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)))
    for part in kvs + tensors:
        out += part
    out += bytes(-len(out) % 32)
    for blob in blobs:
        out += blob + bytes(-len(blob) % 32)
    open(path, "wb").write(out)


def write_legacy(path, entries, dataset, chunks):
    out = bytearray(struct.pack("<i", len(entries)))
    for name, ne0, sums, counts in entries:
        ncall = int(counts[0])
        b = name.encode()
        # The legacy form stores (sum / count) * ncall: here count == ncall.
        out += struct.pack("<i", len(b)) + b + struct.pack("<ii", ncall, len(sums))
        out += struct.pack("<%df" % len(sums), *sums)
    d = dataset.encode()
    out += struct.pack("<ii", chunks, len(d)) + d
    open(path, "wb").write(out)


def main():
    args = sys.argv[1:]
    if len(args) < 2:
        sys.exit(__doc__)
    model, out = args[0], args[1]
    opts = {"--seed": "1", "--dataset": "wiki.train.raw", "--chunks": "10"}
    legacy, skip = False, {"token_embd.weight"}  # a get_rows, not a matmul: llama-imatrix never sees it
    i = 2
    while i < len(args):
        if args[i] == "--legacy":
            legacy = True
            i += 1
        elif args[i] == "--skip":
            skip.add(args[i + 1])
            i += 2
        else:
            opts[args[i]] = args[i + 1]
            i += 2
    rng = random.Random(int(opts["--seed"]))
    chunks, chunk_size = int(opts["--chunks"]), 512
    entries = []
    for name, ne, _, _ in gguf_header.read(model).tensors:
        dims = [n for n in ne] + [1] * (4 - len(ne))
        if sum(1 for n in ne if n > 1) < 2 or not name.endswith("weight") or name in skip:
            continue
        experts = dims[2]
        sums, counts = [], []
        for e in range(experts):
            count = 0 if (experts > 1 and e == experts - 1 and not legacy) else chunks * chunk_size
            for _ in range(dims[0]):
                mean = 0.0 if rng.random() < 0.02 else math.exp(rng.uniform(-6, 3))
                sums.append(mean * count if count else rng.uniform(0, 1))
            counts.append(float(count))
        entries.append((name, dims[0], sums, counts))
    if legacy:
        write_legacy(out, entries, opts["--dataset"], chunks)
    else:
        write_gguf(out, entries, opts["--dataset"], chunks, chunk_size)


if __name__ == "__main__":
    main()
