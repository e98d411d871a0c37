#!/usr/bin/env python3
"""A large GGUF v3 file of F16 tensors with pseudo-random bytes, fast: for benchmarks that need
gigabytes of model (gguf-fixture quantizes real-looking weights, which takes minutes at that size).

The same --seed gives the same bytes for every tensor not named in --change, whatever the other
options, so a base and a task differ only where asked: in the changed tensors' first 3 MiB and
in the metadata (--name moves every tensor when its length changes).

    gguf-synth.py -o base.gguf --tensors 16 --tensor-mib 256
    gguf-synth.py -o task.gguf --tensors 16 --tensor-mib 256 --name "a longer name" --change 3,11
"""

import argparse
import os
import random
import struct

ALIGN = 32
F16 = 1


def gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--tensors", type=int, default=16)
    ap.add_argument("--tensor-mib", type=int, default=256, help="MiB of each tensor (a multiple of 1/2 MiB)")
    ap.add_argument("--name", default="synthetic", help="general.name")
    ap.add_argument("--change", default="", help="comma-separated tensor indexes whose first 3 MiB differ")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    changed = {int(x) for x in a.change.split(",") if x}
    nbytes = a.tensor_mib << 20
    cols = 1024
    rows = nbytes // (2 * cols)

    head = b"GGUF" + struct.pack("<IQQ", 3, a.tensors, 2)
    head += gguf_string("general.architecture") + struct.pack("<I", 8) + gguf_string("synthetic")
    head += gguf_string("general.name") + struct.pack("<I", 8) + gguf_string(a.name)
    for i in range(a.tensors):
        head += gguf_string("blk.%d.weight" % i) + struct.pack("<I", 2) + struct.pack("<QQ", cols, rows)
        head += struct.pack("<IQ", F16, i * nbytes)
    head += b"\0" * (-len(head) % ALIGN)

    tmp = a.output + ".tmp"
    with open(tmp, "wb") as f:
        f.write(head)
        for i in range(a.tensors):
            rng = random.Random(a.seed * 1000003 + i)
            for off in range(0, nbytes, 32 << 20):
                f.write(rng.randbytes(min(32 << 20, nbytes - off)))
            if i in changed:
                f.seek(-nbytes, os.SEEK_CUR)
                f.write(random.Random(a.seed * 7919 + i).randbytes(3 << 20))
                f.seek(0, os.SEEK_END)
    os.replace(tmp, a.output)


if __name__ == "__main__":
    main()
