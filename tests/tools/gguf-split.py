#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Split a GGUF file into shards as llama.cpp's llama-gguf-split does in its default (--split)
mode, byte for byte (standard library only). Written from the GGUF format and the tool's
observable behaviour, for fixtures of split models (common/artifact/gguf-split.h).

    gguf-split.py IN.gguf OUTDIR [--split-max-tensors K | --split-max-size N(M|G) | --shards N]
                  [--no-tensor-first-split] [--prefix NAME]

writes OUTDIR/NAME-00001-of-0000N.gguf ... (NAME: IN's file name without ".gguf") and prints
their paths. What llama-gguf-split writes, and so what this writes:

  - Tensors stay in the input's order. A new shard starts at tensor i (i > 0) when i is a
    multiple of --split-max-tensors (default 128); or, with --split-max-size (M = 10^6 bytes,
    G = 10^9), when the shard's tensor bytes, each padded to 32, would pass the size with
    tensor i. --no-tensor-first-split puts no tensor in the first shard (metadata only).
    A shard left with no tensor is an error (a single tensor over --split-max-size).
    --shards N (ours) picks the smallest --split-max-tensors that makes exactly N shards.
  - Every shard is a GGUF v3 file. The first holds every key/value of the input, in order,
    then split.no (uint16, 0-based), split.tensors.count (int32, the input's tensor count)
    and split.count (uint16): that order, because the tool sets split.count a second time
    once it knows the count, and setting a key moves it to the end. The other shards hold
    only those three keys, in that order. A split key of the input is replaced the same way.
  - Values are written as ggml's gguf_set_kv() copies them: a bool as 0 or 1, a string (also
    in an array) cut at its first NUL byte. Arrays of arrays are refused (llama.cpp reads none).
  - Tensor infos: name, n_dims = ggml_n_dims() (trailing dimensions of at most 1 dropped, at
    least 1), ne, type, offset; the header is zero-padded to 32, each tensor's bytes too (the
    last one's as well), and offsets count from the shard's own data section.
  - The alignment is 32 in every shard, whatever the input's general.alignment: an input with
    another alignment is refused (llama-gguf-split would copy the key into the first shard but
    lay it out at 32, which llama.cpp then fails to load).

Checked byte for byte against the real llama-gguf-split (llama.cpp as node-llama-cpp 3.21.1
bundles it: tests/tools/gguf-split-check.sh builds it and compares) on gguf-fixture models and
odd inputs (a string holding a NUL, a stale split key, a ne ending in 1, bool arrays, a shard
split again), in every mode above but --shards (which only chooses K).
"""

import argparse
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_header  # noqa: E402

MAGIC, VERSION, ALIGN = b"GGUF", 3, 32
UINT16, INT32, BOOL, STRING, ARRAY = 2, 5, 7, 8, 9
SPLIT_NO, SPLIT_COUNT, SPLIT_TENSORS = "split.no", "split.count", "split.tensors.count"
COUNT_MAX = 65535                     # split.count is a uint16
COPY_CHUNK = 16 << 20


class SplitError(Exception):
    pass


def pad(n, a=ALIGN):
    return -n % a


def gguf_string(b):
    return struct.pack("<Q", len(b)) + b


def cut_nul(b):
    """A string as gguf_set_val_str() keeps it: std::string(c_str()), so up to the first NUL."""
    i = b.find(b"\0")
    return b if i < 0 else b[:i]


class Reader:
    def __init__(self, f):
        self.f, self.pos = f, 0

    def take(self, n):
        b = self.f.read(n)
        if len(b) != n:
            raise SplitError("truncated GGUF at offset %d" % self.pos)
        self.pos += n
        return b

    def unpack(self, fmt):
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt)))

    def string(self):
        n, = self.unpack("Q")
        return self.take(n)


def read_value(r, t):
    """The value of type @t at the reader, re-encoded as gguf_set_kv() would write it."""
    if t == STRING:
        return struct.pack("<I", STRING) + gguf_string(cut_nul(r.string()))
    if t == ARRAY:
        at, n = r.unpack("IQ")
        head = struct.pack("<IIQ", ARRAY, at, n)
        if at == STRING:
            return head + b"".join(gguf_string(cut_nul(r.string())) for _ in range(n))
        if at == BOOL:
            return head + bytes(1 if x else 0 for x in r.take(n))
        if at not in gguf_header.SCALAR_SIZE:
            raise SplitError("an array of value type %d (arrays of arrays are not GGUF llama.cpp reads)" % at)
        return head + r.take(gguf_header.SCALAR_SIZE[at] * n)
    if t == BOOL:
        return struct.pack("<IB", BOOL, 1 if r.take(1)[0] else 0)
    if t not in gguf_header.SCALAR_SIZE:
        raise SplitError("unknown value type %d" % t)
    return struct.pack("<I", t) + r.take(gguf_header.SCALAR_SIZE[t])


def read_gguf(f):
    """([(key, encoded type + value)], [(name, ne, type, nbytes, absolute data offset)])."""
    r = Reader(f)
    if r.take(4) != MAGIC:
        raise SplitError("not a GGUF file")
    version, nt, nkv = r.unpack("IQQ")
    if version not in (2, 3):
        raise SplitError("GGUF version %d (only 2 and 3)" % version)
    kvs, alignment = [], ALIGN
    for _ in range(nkv):
        key = r.string()
        t, = r.unpack("I")
        value = read_value(r, t)
        if key == b"general.alignment":
            if t != 4:
                raise SplitError("general.alignment is not a uint32")
            alignment, = struct.unpack_from("<I", value, 4)
        kvs.append((key, value))
    if alignment != ALIGN:
        raise SplitError("general.alignment %d: llama-gguf-split lays out every shard at %d, so its first shard "
                         "would contradict the key it copies" % (alignment, ALIGN))
    infos = []
    for _ in range(nt):
        name = r.string()
        nd, = r.unpack("I")
        ne = r.unpack("%dQ" % nd)
        t, off = r.unpack("IQ")
        infos.append((name, ne, t, off))
    data_offset = r.pos + pad(r.pos, alignment)
    return kvs, [(n, ne, t, gguf_header.nbytes(ne, t), data_offset + off) for n, ne, t, off in infos]


def n_dims(ne):
    """ggml_n_dims(): the index after the last dimension over 1 (at least 1)."""
    for i in range(len(ne) - 1, 0, -1):
        if ne[i] > 1:
            return i + 1
    return 1


def plan(tensors, max_tensors, max_size, no_tensor_first):
    """The shards as lists of tensor indexes, as llama-gguf-split's split_strategy() makes them."""
    shards = [[]]
    if no_tensor_first:
        shards.append([])
    size = 0
    for i, t in enumerate(tensors):
        n = t[3] + pad(t[3])
        if max_size is not None:
            split = size + n > max_size
        else:
            split = 0 < i < len(tensors) and i % max_tensors == 0
        if split:
            if not shards[-1]:
                raise SplitError("shard %d would hold no tensor: the size or tensor limit is too small" % len(shards))
            shards.append([])
            size = n
        else:
            size += n
        shards[-1].append(i)
    if len(shards) > COUNT_MAX:
        raise SplitError("%d shards: split.count is a uint16 (at most %d)" % (len(shards), COUNT_MAX))
    return shards


def shard_header(kvs, tensors, indexes, no, count, total):
    keys = [kv for kv in kvs if kv[0] not in (SPLIT_NO.encode(), SPLIT_COUNT.encode(), SPLIT_TENSORS.encode())]
    keys = keys if no == 0 else []
    keys += [(SPLIT_NO.encode(), struct.pack("<IH", UINT16, no)),
             (SPLIT_TENSORS.encode(), struct.pack("<Ii", INT32, total)),
             (SPLIT_COUNT.encode(), struct.pack("<IH", UINT16, count))]
    out = bytearray(MAGIC + struct.pack("<IQQ", VERSION, len(indexes), len(keys)))
    for key, value in keys:
        out += gguf_string(key) + value
    off = 0
    for i in indexes:
        name, ne, t, nbytes, _ = tensors[i]
        nd = n_dims(ne)
        out += gguf_string(name) + struct.pack("<I%dQ" % nd, nd, *ne[:nd]) + struct.pack("<IQ", t, off)
        off += nbytes + pad(nbytes)
    out += bytes(pad(len(out)))
    return bytes(out)


def copy(src, dst, offset, n):
    src.seek(offset)
    while n:
        b = src.read(min(n, COPY_CHUNK))
        if not b:
            raise SplitError("the input ends inside a tensor's data (offset %d)" % offset)
        dst.write(b)
        n -= len(b)


def parse_size(s):
    units = {"M": 1000 ** 2, "G": 1000 ** 3}
    if not s or s[-1] not in units or not s[:-1].isdigit() or int(s[:-1]) <= 0:
        raise argparse.ArgumentTypeError("a size is a positive number followed by M or G, not '%s'" % s)
    return int(s[:-1]) * units[s[-1]]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("input")
    ap.add_argument("outdir")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--split-max-tensors", type=int, metavar="K", help="tensors per shard (default 128)")
    mode.add_argument("--split-max-size", type=parse_size, metavar="N(M|G)", help="tensor bytes per shard")
    mode.add_argument("--shards", type=int, metavar="N", help="exactly N shards (the smallest K that makes them)")
    ap.add_argument("--no-tensor-first-split", action="store_true", help="the first shard holds metadata only")
    ap.add_argument("--prefix", help="shard names' prefix (default: the input's name without .gguf)")
    a = ap.parse_args()

    prefix = a.prefix or os.path.basename(a.input).removesuffix(".gguf")
    if not prefix or "/" in prefix:
        ap.error("--prefix must be a nonempty file name")
    try:
        with open(a.input, "rb") as src:
            kvs, tensors = read_gguf(src)
            if len(tensors) > 2 ** 31 - 1:
                raise SplitError("more tensors than split.tensors.count (an int32) can say")
            if a.shards is not None:
                first = 1 if a.no_tensor_first_split else 0
                want = a.shards - first
                if want < 1 or not tensors:
                    raise SplitError("--shards %d: cannot make that many shards of %d tensors" % (a.shards, len(tensors)))
                k = -(-len(tensors) // want)
                if -(-len(tensors) // k) != want:
                    raise SplitError("--shards %d: no tensor count per shard splits %d tensors into %d shards"
                                     % (a.shards, len(tensors), want))
                shards = plan(tensors, k, None, a.no_tensor_first_split)
            else:
                k = a.split_max_tensors if a.split_max_tensors is not None else 128
                if a.split_max_size is None and k < 1:
                    raise SplitError("--split-max-tensors must be at least 1")
                shards = plan(tensors, k, a.split_max_size, a.no_tensor_first_split)
            os.makedirs(a.outdir, exist_ok=True)
            for no, indexes in enumerate(shards):
                path = os.path.join(a.outdir, "%s-%05d-of-%05d.gguf" % (prefix, no + 1, len(shards)))
                tmp = path + ".tmp"
                with open(tmp, "wb") as dst:
                    dst.write(shard_header(kvs, tensors, indexes, no, len(shards), len(tensors)))
                    for i in indexes:
                        nbytes, offset = tensors[i][3], tensors[i][4]
                        copy(src, dst, offset, nbytes)
                        dst.write(bytes(pad(nbytes)))
                os.replace(tmp, path)
                print(path)
    except (SplitError, ValueError, OSError) as e:
        print("gguf-split: %s: %s" % (a.input, e), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
