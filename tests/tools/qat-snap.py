#!/usr/bin/env python3
"""A quantization-aware float model: FLOAT.gguf (F32) with the tensors QUANT.gguf holds as Q4_0
replaced by their Q4_0 values, dequantized as ggml does (each value (q - 8) * d, exact in
float32). A QAT checkpoint's weights lie on the quantizer's grid this way, so quantizing the
result to Q4_0 gives back QUANT's bytes for those tensors (almost every block: a re-search of
the scale can still move a few).

    qat-snap.py FLOAT.gguf QUANT.gguf OUT.gguf

QUANT must be FLOAT quantized (the same tensors, in any mix). Test input only: trusted files.
"""

import struct
import sys

import gguf_header

F32, Q4_0 = 0, 2


def dequantize_q4_0(raw):
    """The float32 values of Q4_0 blocks @raw, as ggml's dequantize_row_q4_0 makes them."""
    out = []
    for b in range(0, len(raw), 18):
        d, = struct.unpack_from("<e", raw, b)
        qs = raw[b + 2:b + 18]
        out.extend((q & 0x0F) - 8 for q in qs)
        out.extend((q >> 4) - 8 for q in qs)
        out[-32:] = [v * d for v in out[-32:]]
    return struct.pack("<%df" % len(out), *out)


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: qat-snap.py FLOAT.gguf QUANT.gguf OUT.gguf")
    fh, qh = gguf_header.read_header(sys.argv[1]), gguf_header.read_header(sys.argv[2])
    with open(sys.argv[1], "rb") as f:
        model = bytearray(f.read())
    with open(sys.argv[2], "rb") as f:
        quant = f.read()
    where = {name: (ne, t, off) for name, ne, t, off in fh.tensors}
    snapped = 0
    for name, ne, t, off in qh.tensors:
        if t != Q4_0:
            continue
        fne, ft, foff = where[name]
        if ft != F32 or tuple(fne) != tuple(ne):
            sys.exit("%s: '%s' is not the F32 tensor of the same shape" % (sys.argv[1], name))
        start = qh.data_offset + off
        values = dequantize_q4_0(quant[start:start + gguf_header.nbytes(ne, Q4_0)])
        at = fh.data_offset + foff
        model[at:at + len(values)] = values
        snapped += 1
    with open(sys.argv[3], "wb") as f:
        f.write(model)
    print("%d Q4_0 tensors snapped" % snapped)


if __name__ == "__main__":
    main()
