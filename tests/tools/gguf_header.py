"""A GGUF header, read for test and benchmark scripts (the product's reader is common/artifact/gguf.c).

    import sys; sys.path.insert(0, "tests/tools"); import gguf_header
    h = gguf_header.read("model.gguf")
    h.kvs          [(key, value type, raw bytes of the whole key/value, scalar value or None)]
    h.tensors      [(name, ne tuple, ggml type, offset relative to the data section)]
    h.alignment    general.alignment, or 32
    h.data_offset  where the data section starts (the header padded to the alignment)
    h.elements(ne) number of elements of a tensor of shape ne

Only what the scripts need: no bounds checks beyond Python's own, trusted fixture input.
"""

import struct

STRING, ARRAY = 8, 9
# Bytes of each scalar value type (GGUF spec: uint8 .. float64, bool).
SCALAR_SIZE = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
SCALAR_FORMAT = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


class Header:
    def __init__(self, kvs, tensors, alignment, data_offset):
        self.kvs, self.tensors, self.alignment, self.data_offset = kvs, tensors, alignment, data_offset

    @staticmethod
    def elements(ne):
        n = 1
        for x in ne:
            n *= x
        return n


def _string(b, o):
    n, = struct.unpack_from("<Q", b, o)
    return b[o + 8:o + 8 + n].decode(), o + 8 + n


def parse(b):
    """The header of the GGUF bytes @b (the data section may be cut off)."""
    nt, nkv = struct.unpack_from("<QQ", b, 8)
    o, kvs, alignment = 24, [], 32
    for _ in range(nkv):
        start = o
        key, o = _string(b, o)
        t, = struct.unpack_from("<I", b, o)
        o += 4
        value = None
        if t == STRING:
            value, o = _string(b, o)
        elif t == ARRAY:
            at, n = struct.unpack_from("<IQ", b, o)
            o += 12
            if at == STRING:
                for _ in range(n):
                    _, o = _string(b, o)
            else:
                o += SCALAR_SIZE[at] * n
        else:
            value, = struct.unpack_from("<" + SCALAR_FORMAT[t], b, o)
            o += SCALAR_SIZE[t]
        if key == "general.alignment":
            alignment = value
        kvs.append((key, t, b[start:o], value))
    tensors = []
    for _ in range(nt):
        name, o = _string(b, o)
        nd, = struct.unpack_from("<I", b, o)
        ne = struct.unpack_from("<%dQ" % nd, b, o + 4)
        o += 4 + 8 * nd
        t, off = struct.unpack_from("<IQ", b, o)
        o += 12
        tensors.append((name, ne, t, off))
    return Header(kvs, tensors, alignment, (o + alignment - 1) // alignment * alignment)


def read(path, limit=None):
    """The header of the file @path; @limit bytes are enough for a header that fits in them."""
    with open(path, "rb") as f:
        return parse(f.read(limit) if limit else f.read())
