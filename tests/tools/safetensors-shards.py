#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A sharded BF16 safetensors model (a llama-shaped set of tensors) and its index, as Hugging
Face writes them, for fixtures and benchmarks of sharded models (common/artifact/stindex.h);
with options for a *task* variant of a base: some tensors changed, some moved to another shard.
Standard library only; the same arguments give the same bytes.

    safetensors-shards.py OUTDIR [--size-mb 200] [--shards 2] [--seed 1]
    safetensors-shards.py OUTDIR --change 4 --mode lowrank --task-seed 7      (a task of that base)
    safetensors-shards.py OUTDIR --change 2 --mode random --move model.norm.weight

writes OUTDIR/model-0000i-of-0000N.safetensors and OUTDIR/model.safetensors.index.json, and
prints one line per changed or moved tensor ("changed NAME", "moved NAME: A -> B").

The model: model.embed_tokens.weight [vocab, dim], per layer input_layernorm and
post_attention_layernorm [dim], self_attn.{q,k,v,o}_proj [dim, dim], mlp.{gate,up}_proj
[ff, dim] and mlp.down_proj [dim, ff], then model.norm.weight [dim] and lm_head.weight
[vocab, dim]; all BF16. --layers, or as many as bring the total nearest --size-mb (10^6 bytes).
Values: norms 1 + 0.05·N(0, 1); every other tensor pseudo-random BF16 values of a random sign
and a magnitude whose exponent follows |N(0, 0.02)| (two exponents at a time: one table byte),
with random low bits (RMS about 0.03): plausible weights to diff and compress, not a model to
run. Fast: a base of 200 MB takes ~2 s. A tensor's bytes depend only on
--seed, its name and its shape, so a base and a task made with the same --seed, dimensions and
--shards differ exactly in the tensors --change picks and in the headers --move changes.

The layout, as the reference writers make it:
  - shards: the tensors in the order above, cut into --shards consecutive runs of about equal
    bytes (shard i ends at the tensor boundary nearest (i + 1) / N of the total); a --move NAME
    puts that tensor in the next shard (the last one's into the first), or NAME=K in shard K
    (1-based). File names as transformers' save_pretrained writes them.
  - each shard as the safetensors library's serialize() writes it: u64 N (little-endian), the
    JSON header (compact; "__metadata__": {"format": "pt"} first, then the tensors in data
    order, each {"dtype", "shape", "data_offsets"}), padded with spaces to a multiple of 8,
    then the data; the tensors sorted by name (one dtype, so by name alone).
  - the index as save_pretrained writes it: json.dumps(indent=2, sort_keys=True) + "\\n" of
    {"metadata": {"total_size": the tensors' bytes}, "weight_map": {tensor: shard file}}.

A task (--change K): K tensors among the projection matrices (chosen by --task-seed), each
  random   fresh pseudo-random bytes (every byte new: the worst case), or
  lowrank  bf16(base + B·A), B [out, rank] and A [rank, in] Gaussian with the product's RMS
           --delta-rel times 0.02, rounded to nearest even: a folded LoRA, where nearly
           every element changes by a little. Pure Python: ~2 s per million elements.
"""

import argparse
import hashlib
import json
import math
import operator
import os
import random
import struct
import sys
from array import array
from itertools import repeat

BF16 = "BF16"
SIGMA = 0.02
LINEAR = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
          "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


class ShardsError(Exception):
    pass


# ---- the model's tensors -------------------------------------------------------------------------

def layout(dim, ff, vocab, layers):
    """[(name, shape)] in model order."""
    t = [("model.embed_tokens.weight", (vocab, dim))]
    for i in range(layers):
        p = "model.layers.%d." % i
        t.append((p + "input_layernorm.weight", (dim,)))
        for proj in LINEAR[:4]:
            t.append((p + proj + ".weight", (dim, dim)))
        t.append((p + "post_attention_layernorm.weight", (dim,)))
        t += [(p + "mlp.gate_proj.weight", (ff, dim)), (p + "mlp.up_proj.weight", (ff, dim)),
              (p + "mlp.down_proj.weight", (dim, ff))]
    t += [("model.norm.weight", (dim,)), ("lm_head.weight", (vocab, dim))]
    return t


def elements(shape):
    return math.prod(shape)


def rng_for(*parts):
    """A generator seeded by the parts (ints and strings), whatever else the run does."""
    digest = hashlib.sha256("\0".join(str(p) for p in parts).encode()).digest()
    return random.Random(int.from_bytes(digest[:16], "little"))


def high_byte_table():
    """256 bytes mapping a uniform byte to a BF16 high byte (sign, 7 high exponent bits) so that,
    with a uniform low byte, |x| follows a half-normal of scale SIGMA exponent pair by pair."""
    def cdf(x):
        return math.erf(x / (SIGMA * math.sqrt(2)))
    probs = {}
    for e7 in range(1, 127):        # exponents 2·e7 and 2·e7 + 1: |x| in [2^(2e7-127), 2^(2e7-125))
        lo, hi = 2.0 ** (2 * e7 - 127), 2.0 ** (2 * e7 - 125)
        p = cdf(hi) - cdf(lo)
        if p > 1e-6:
            probs[e7] = p
    total = sum(probs.values())
    # 128 slots per sign, by largest remainder.
    want = {e: 128 * p / total for e, p in probs.items()}
    slots = {e: int(w) for e, w in want.items()}
    for e in sorted(want, key=lambda e: want[e] - slots[e], reverse=True)[:128 - sum(slots.values())]:
        slots[e] += 1
    half = bytes(e for e in sorted(slots) for _ in range(slots[e]))
    return half + bytes(0x80 | e for e in half)


HIGH = high_byte_table()


def random_bf16(rng, n):
    """@n pseudo-random BF16 values of about N(0, SIGMA), little-endian."""
    out = bytearray(2 * n)
    out[0::2] = rng.randbytes(n)
    out[1::2] = rng.randbytes(n).translate(HIGH)
    return bytes(out)


def f32_to_bf16(values):
    """Doubles to BF16 bytes: to float32 first, then rounded to nearest even (NaN kept quiet)."""
    bits = array("I")
    bits.frombytes(array("f", values).tobytes())
    out = array("H", [((u + 0x7FFF + ((u >> 16) & 1)) >> 16) if (u & 0x7FFFFFFF) <= 0x7F800000
                      else ((u >> 16) | 0x40) for u in bits])
    if sys.byteorder != "little":
        out.byteswap()
    return out.tobytes()


def bf16_to_floats(data):
    """BF16 bytes to a list of floats (each exact)."""
    n = len(data) // 2
    f = bytearray(4 * n)
    f[2::4] = data[0::2]
    f[3::4] = data[1::2]
    a = array("f")
    a.frombytes(bytes(f))
    if sys.byteorder != "little":
        a.byteswap()
    return a.tolist()


def base_bytes(seed, name, shape):
    rng = rng_for("base", seed, name, *shape)
    if len(shape) == 1:
        return f32_to_bf16([1.0 + 0.05 * rng.gauss(0.0, 1.0) for _ in range(shape[0])])
    return random_bf16(rng, elements(shape))


def lowrank_bytes(base, shape, rank, delta_rel, rng):
    """bf16(base + B·A) for a [rows, cols] tensor, row by row."""
    rows, cols = shape
    a = [[rng.gauss(0.0, 1.0 / math.sqrt(cols)) for _ in range(cols)] for _ in range(rank)]
    sigma_b = delta_rel * SIGMA / math.sqrt(rank / cols)
    w = bf16_to_floats(base)
    out = bytearray()
    mul, add = operator.mul, operator.add
    for i in range(rows):
        row = w[i * cols:(i + 1) * cols]
        for k in range(rank):
            row = list(map(add, row, map(mul, a[k], repeat(rng.gauss(0.0, sigma_b), cols))))
        out += f32_to_bf16(row)
    return bytes(out)


# ---- shards --------------------------------------------------------------------------------------

def cut(sizes, n):
    """Shard numbers (0-based) of consecutive tensors: n runs of about equal bytes, none empty."""
    if n < 1 or n > len(sizes):
        raise ShardsError("--shards %d: between 1 and the %d tensors" % (n, len(sizes)))
    total, at, shard, out = sum(sizes), 0, 0, []
    for i, s in enumerate(sizes):
        # The next shard starts here when this tensor's middle is past the current shard's share,
        # or when the tensors left are just enough for the shards left.
        if out and out[-1] == shard and shard < n - 1 and \
                ((2 * at + s) * n > 2 * (shard + 1) * total or len(sizes) - i == n - 1 - shard):
            shard += 1
        out.append(shard)
        at += s
    return out


def shard_name(i, n):
    return "model-%05d-of-%05d.safetensors" % (i + 1, n)


def shard_header(entries):
    """The JSON header of one shard for [(name, shape, nbytes)], padded to 8, with its length."""
    parts = ['"__metadata__":{"format":"pt"}']
    off = 0
    for name, shape, nbytes in sorted(entries):
        parts.append('%s:{"dtype":"%s","shape":[%s],"data_offsets":[%d,%d]}'
                     % (json.dumps(name), BF16, ",".join(str(d) for d in shape), off, off + nbytes))
        off += nbytes
    h = ("{" + ",".join(parts) + "}").encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h


def write_atomic(path, chunks):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        for c in chunks:
            f.write(c)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--size-mb", type=float, default=200, help="total tensor bytes, 10^6 (200)")
    ap.add_argument("--layers", type=int, help="layers (default: from --size-mb)")
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--ff", type=int, default=2816)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1, help="the base's weights")
    ap.add_argument("--change", type=int, default=0, metavar="K", help="projection tensors to change (0: the base)")
    ap.add_argument("--mode", choices=("random", "lowrank"), default="lowrank")
    ap.add_argument("--task-seed", type=int, default=7, help="which tensors change, and how")
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--delta-rel", type=float, default=0.1, help="RMS of B·A over the weights' 0.02 (0.1)")
    ap.add_argument("--move", action="append", default=[], metavar="NAME[=K]",
                    help="put tensor NAME in the next shard, or in shard K (1-based); repeatable")
    a = ap.parse_args()

    try:
        for v, what in ((a.dim, "--dim"), (a.ff, "--ff"), (a.vocab, "--vocab"), (a.rank, "--rank")):
            if v < 1:
                raise ShardsError("%s must be at least 1" % what)
        if a.layers is None:
            fixed = 2 * (2 * a.vocab * a.dim + a.dim)
            per_layer = 2 * (4 * a.dim * a.dim + 3 * a.ff * a.dim + 2 * a.dim)
            a.layers = max(1, round((a.size_mb * 1e6 - fixed) / per_layer))
        if a.layers < 1:
            raise ShardsError("--layers must be at least 1")
        tensors = layout(a.dim, a.ff, a.vocab, a.layers)
        sizes = [2 * elements(shape) for _, shape in tensors]
        place = cut(sizes, a.shards)
        names = [n for n, _ in tensors]

        for m in a.move:
            name, _, k = m.partition("=")
            if name not in names:
                raise ShardsError("--move %s: no such tensor" % name)
            i = names.index(name)
            to = int(k) - 1 if k else (place[i] + 1) % a.shards
            if not 0 <= to < a.shards or to == place[i]:
                raise ShardsError("--move %s: shard %s is not another of 1..%d" % (m, to + 1, a.shards))
            print("moved %s: %s -> %s" % (name, shard_name(place[i], a.shards), shard_name(to, a.shards)))
            place[i] = to
        if len(set(place)) != a.shards:
            raise ShardsError("--move leaves a shard empty")

        linear = [n for n, shape in tensors if len(shape) == 2 and any("." + p + "." in n for p in LINEAR)]
        if not 0 <= a.change <= len(linear):
            raise ShardsError("--change %d: the model has %d projection tensors" % (a.change, len(linear)))
        changed = set(rng_for("pick", a.task_seed).sample(linear, a.change))
        for n in names:
            if n in changed:
                print("changed %s" % n)

        os.makedirs(a.outdir, exist_ok=True)
        for s in range(a.shards):
            members = [i for i in range(len(tensors)) if place[i] == s]
            entries = [(tensors[i][0], tensors[i][1], sizes[i]) for i in members]

            def data(members=members):
                for i in sorted(members, key=lambda i: tensors[i][0]):
                    name, shape = tensors[i]
                    b = base_bytes(a.seed, name, shape)
                    if name in changed:
                        rng = rng_for("task", a.task_seed, a.mode, name)
                        b = random_bf16(rng, elements(shape)) if a.mode == "random" else \
                            lowrank_bytes(b, shape, a.rank, a.delta_rel, rng)
                    yield b
            write_atomic(os.path.join(a.outdir, shard_name(s, a.shards)), [shard_header(entries), *data()])
        index = {"metadata": {"total_size": sum(sizes)},
                 "weight_map": {n: shard_name(place[i], a.shards) for i, n in enumerate(names)}}
        write_atomic(os.path.join(a.outdir, "model.safetensors.index.json"),
                     [(json.dumps(index, indent=2, sort_keys=True) + "\n").encode()])
    except (ShardsError, ValueError, OSError) as e:
        print("safetensors-shards: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
