#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Rewrite a GGUF v3 file with a changed layout, as llama.cpp's own tools do when they write a
model anew (standard library only; the same arguments give the same bytes).

The output is what ggml's gguf writer makes: header, key/values, tensor infos, zero padding to
general.alignment (32 when absent), then each tensor's data padded with zeros to the alignment,
in tensor-info order. Every tensor's data bytes are kept exactly, except those --grow-rows adds.

Operations, combinable; key/value edits are applied in the order given:

  --sort-by-name        tensors (infos and data) sorted by name, as llama-export-lora writes them
  --set-string KEY=V    a string key set in place (e.g. general.name made longer: the data section
                        moves), or appended when the file lacks it
  --add-key KEY=V, --add-u32 KEY=N, --add-f32 KEY=X
                        a key appended, as llama-quantize --imatrix adds quantize.imatrix.file,
                        quantize.imatrix.entries_count and quantize.imatrix.chunks_count; a key
                        the file has already is removed first (ggml's gguf_set_val_* does that)
  --grow-rows T=N       N rows appended to the 2-D tensor T (ne[1] += N; a class-set change or a
                        vocabulary grown), the existing rows' bytes kept. New rows of f32, f16,
                        bf16 and f64 are normal floats with the RMS of the tensor's values; of a
                        quantized type, copies of existing rows (chosen by --seed) with every
                        block's scales nudged by up to 10%, so the bytes are what a quantizer
                        could write. No metadata is changed (llama.vocab_size stays).

Examples:
    gguf-relayout.py base.gguf -o sorted.gguf --sort-by-name
    gguf-relayout.py task.gguf -o out.gguf --set-string general.name="$(printf 'x%.0s' $(seq 60))"
    gguf-relayout.py task.gguf -o out.gguf --add-key quantize.imatrix.file=imatrix.dat \\
        --add-u32 quantize.imatrix.entries_count=28 --add-u32 quantize.imatrix.chunks_count=100
    gguf-relayout.py task.gguf -o out.gguf --grow-rows output.weight=16
"""

import argparse
import math
import os
import random
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_header  # noqa: E402

MAGIC, VERSION = b"GGUF", 3
UINT32, FLOAT32 = 4, 6
COPY_CHUNK = 16 << 20

# Per quantized type: (byte offset in the block, format) of each scale: "e" an fp16, "f" an fp32,
# "E" an E8M0 exponent byte (ggml-common.h's block_* structs). Two scales listed together (d and
# m or dmin, or q8_1's d and s = d * sum) are nudged by the same factor.
SCALES = {
    "q4_0": [(0, "e")], "q4_1": [(0, "e"), (2, "e")], "q5_0": [(0, "e")], "q5_1": [(0, "e"), (2, "e")],
    "q8_0": [(0, "e")], "q8_1": [(0, "e"), (2, "e")],
    "q2_K": [(80, "e"), (82, "e")], "q3_K": [(108, "e")], "q4_K": [(0, "e"), (2, "e")],
    "q5_K": [(0, "e"), (2, "e")], "q6_K": [(208, "e")], "q8_K": [(0, "f")],
    "iq2_xxs": [(0, "e")], "iq2_xs": [(0, "e")], "iq3_xxs": [(0, "e")], "iq1_s": [(0, "e")],
    "iq4_nl": [(0, "e")], "iq3_s": [(0, "e")], "iq2_s": [(0, "e")], "iq4_xs": [(0, "e")],
    "tq1_0": [(52, "e")], "tq2_0": [(64, "e")], "mxfp4": [(0, "E")],
}
FLOATS = {"f32": "f", "f16": "e", "f64": "d", "bf16": "bf16"}
INTEGERS = ("i8", "i16", "i32", "i64")


class RelayoutError(Exception):
    pass


# ---- key/values ----------------------------------------------------------------------------------

def gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def kv_bytes(key, value_type, value):
    head = gguf_string(key) + struct.pack("<I", value_type)
    if value_type == gguf_header.STRING:
        return head + gguf_string(value)
    return head + struct.pack("<" + gguf_header.SCALAR_FORMAT[value_type], value)


def edit_kvs(kvs, edits):
    """@kvs [(key, value type, raw bytes)] after the edits [(op, key, value type, value)]."""
    kvs = list(kvs)
    for op, key, value_type, value in edits:
        at = next((i for i, kv in enumerate(kvs) if kv[0] == key), None)
        raw = kv_bytes(key, value_type, value)
        if op == "set" and at is not None:
            if kvs[at][1] != value_type:
                raise RelayoutError("--set-string %s: the key holds value type %d, not a string" % (key, kvs[at][1]))
            kvs[at] = (key, value_type, raw)
            continue
        if at is not None:
            del kvs[at]
        kvs.append((key, value_type, raw))
    return kvs


# ---- new rows ------------------------------------------------------------------------------------

def nudge_scales(block_bytes, scales, rng):
    """One block's bytes with its scales multiplied by one factor in [0.9, 1.1] (finite, sign kept)."""
    b = bytearray(block_bytes)
    factor = rng.uniform(0.9, 1.1)
    for off, fmt in scales:
        if fmt == "E":
            b[off] = min(254, max(1, b[off] + rng.choice((-1, 0, 1))))
            continue
        v, = struct.unpack_from("<" + fmt, b, off)
        try:
            struct.pack_into("<" + fmt, b, off, v * factor)
        except OverflowError:       # an fp16 at the top of its range: leave it
            pass
    return bytes(b)


def random_floats(fmt, count, rms, rng):
    values = [rng.gauss(0.0, rms) for _ in range(count)]
    if fmt == "bf16":   # the top half of the fp32, rounded to nearest even
        out = bytearray()
        for v in values:
            u, = struct.unpack("<I", struct.pack("<f", v))
            out += struct.pack("<H", (u + 0x7FFF + ((u >> 16) & 1)) >> 16 & 0xFFFF)
        return bytes(out)
    return struct.pack("<%d%s" % (count, fmt), *values)


def float_rms(fmt, data):
    if fmt == "bf16":
        n = len(data) // 2
        values = struct.unpack("<%df" % n, b"".join(b"\0\0" + data[2 * i:2 * i + 2] for i in range(n)))
    else:
        values = struct.unpack("<%d%s" % (len(data) // struct.calcsize(fmt), fmt), data)
    values = [v for v in values if math.isfinite(v)]
    return math.sqrt(sum(v * v for v in values) / len(values)) if values else 1.0


def new_rows(f, tensor_start, ne, ggml_type, n, rng):
    """The bytes of @n rows to append to the 2-D tensor at @tensor_start of the open file @f."""
    name, block, block_size = gguf_header.GGML_TYPES[ggml_type]
    row_size = gguf_header.nbytes((ne[0],), ggml_type)
    rows = ne[1]

    def row(i):
        f.seek(tensor_start + i * row_size)
        return f.read(row_size)

    if name in FLOATS:
        fmt = FLOATS[name]
        sample = b"".join(row(rng.randrange(rows)) for _ in range(min(rows, 16)))
        rms = float_rms(fmt, sample)
        return b"".join(random_floats(fmt, ne[0], rms, rng) for _ in range(n))
    if name in INTEGERS:
        return b"".join(row(rng.randrange(rows)) for _ in range(n))
    if name not in SCALES:
        raise RelayoutError("--grow-rows: no known scale layout for ggml type %s" % name)
    out = bytearray()
    for _ in range(n):
        src = row(rng.randrange(rows))
        for o in range(0, row_size, block_size):
            out += nudge_scales(src[o:o + block_size], SCALES[name], rng)
    return bytes(out)


# ---- the file ------------------------------------------------------------------------------------

def relayout(src, dst, edits, sort_by_name, grow, seed):
    with open(src, "rb") as f:
        magic, version = struct.unpack("<4sI", f.read(8))
    if magic != MAGIC:
        raise RelayoutError("%s: no GGUF magic" % src)
    if version != VERSION:
        raise RelayoutError("%s: GGUF version %d, this tool writes version %d only" % (src, version, VERSION))
    h = gguf_header.read_header(src)
    kvs = edit_kvs([(k, t, raw) for k, t, raw, _ in h.kvs], edits)

    names = {t[0] for t in h.tensors}
    for name in grow:
        if name not in names:
            raise RelayoutError("--grow-rows %s: %s has no such tensor" % (name, src))
    tensors = []    # (name, new ne, type, offset in src, bytes kept, rows added)
    for name, ne, t, off in h.tensors:
        if t not in gguf_header.GGML_TYPES:
            raise RelayoutError("%s: tensor %s has unknown ggml type %d" % (src, name, t))
        add = grow.get(name, 0)
        if add and len(ne) != 2:
            raise RelayoutError("--grow-rows %s: the tensor has %d dimensions, not 2" % (name, len(ne)))
        new_ne = (ne[0], ne[1] + add) if add else ne
        tensors.append((name, new_ne, t, h.data_offset + off, gguf_header.nbytes(ne, t), add))
    if sort_by_name:
        tensors.sort(key=lambda x: x[0].encode())

    # The alignment is the output's own (an edit may have set general.alignment): parse the
    # new key/values to learn it, then lay the data out.
    kv_part = b"".join(raw for _, _, raw in kvs)
    alignment = gguf_header.parse(struct.pack("<4sIQQ", MAGIC, VERSION, 0, len(kvs)) + kv_part).alignment
    if alignment <= 0 or alignment & (alignment - 1):
        raise RelayoutError("general.alignment %d is no power of two" % alignment)
    infos, offset, layout = bytearray(), 0, []
    for name, ne, t, src_off, kept, add in tensors:
        size = gguf_header.nbytes(ne, t)
        infos += gguf_string(name) + struct.pack("<I%dQ" % len(ne), len(ne), *ne) + struct.pack("<IQ", t, offset)
        layout.append((size, src_off, kept, add, ne, t))
        offset += size + (-size % alignment)
    header = struct.pack("<4sIQQ", MAGIC, VERSION, len(tensors), len(kvs)) + kv_part + infos
    header += b"\0" * (-len(header) % alignment)

    rng = random.Random("gguf-relayout-%d" % seed)
    tmp = dst + ".tmp"
    with open(src, "rb") as f, open(tmp, "wb") as out:
        out.write(header)
        for size, src_off, kept, add, ne, t in layout:
            f.seek(src_off)
            left = kept
            while left:
                chunk = f.read(min(left, COPY_CHUNK))
                if not chunk:
                    raise RelayoutError("%s: tensor data ends past the end of the file" % src)
                out.write(chunk)
                left -= len(chunk)
            if add:
                out.write(new_rows(f, src_off, (ne[0], ne[1] - add), t, add, rng))
            out.write(b"\0" * (-size % alignment))
    os.replace(tmp, dst)


# ---- arguments -----------------------------------------------------------------------------------

def key_value(text, what):
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError("%s wants KEY=VALUE, got %r" % (what, text))
    return key, value


class Edit(argparse.Action):
    """Key/value edits kept in command-line order, whichever option made them."""

    def __call__(self, parser, namespace, text, option):
        key, value = key_value(text, option)
        value_type = gguf_header.STRING
        try:
            if option == "--add-u32":
                value_type, value = UINT32, int(value, 0)
                if not 0 <= value < 1 << 32:
                    raise ValueError
            elif option == "--add-f32":
                value_type, value = FLOAT32, float(value)
                struct.pack("<f", value)
        except (ValueError, OverflowError):
            parser.error("%s %s: %r is no %s" % (option, key, value, option[6:]))
        getattr(namespace, "edits").append(("set" if option == "--set-string" else "add", key, value_type, value))


def main():
    parts = __doc__.split("\n\n")
    ap = argparse.ArgumentParser(description=parts[0], epilog="\n\n".join(parts[1:]),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input", help="a GGUF v3 file")
    ap.add_argument("-o", "--output", required=True, help="the relaid-out file (written beside, then renamed)")
    ap.add_argument("--sort-by-name", action="store_true", help="tensors sorted by name")
    ap.set_defaults(edits=[])
    for opt, meta in (("--set-string", "KEY=VALUE"), ("--add-key", "KEY=VALUE"), ("--add-u32", "KEY=N"),
                      ("--add-f32", "KEY=X")):
        ap.add_argument(opt, action=Edit, metavar=meta, default=argparse.SUPPRESS)
    ap.add_argument("--grow-rows", action="append", default=[], metavar="TENSOR=N", help="append N rows")
    ap.add_argument("--seed", type=int, default=1, help="of the new rows (default 1)")
    a = ap.parse_args()

    grow = {}
    for text in a.grow_rows:
        name, n = key_value(text, "--grow-rows")
        if not n.isdigit() or int(n) < 1:
            ap.error("--grow-rows %s: %r is no row count >= 1" % (name, n))
        grow[name] = grow.get(name, 0) + int(n)
    if os.path.abspath(a.input) == os.path.abspath(a.output):
        ap.error("the output must be another file than the input")
    try:
        relayout(a.input, a.output, a.edits, a.sort_by_name, grow, a.seed)
    except (RelayoutError, OSError, ValueError, struct.error) as e:
        print("gguf-relayout: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
