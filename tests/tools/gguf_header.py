"""A GGUF header, read for test and benchmark scripts (the product's reader is common/artifact/gguf.c).

    import sys; sys.path.insert(0, "tests/tools"); import gguf_header
    h = gguf_header.read("model.gguf")
    h.kvs          [(key, value type, raw bytes of the whole key/value, scalar value or None)]
    h.tensors      [(name, ne tuple, ggml type, offset relative to the data section)]
    h.alignment    general.alignment, or 32
    h.data_offset  where the data section starts (the header padded to the alignment)
    h.elements(ne) number of elements of a tensor of shape ne
    gguf_header.nbytes(ne, ggml_type)    bytes of a tensor's data (GGML_TYPES: common/artifact/ggml.c)
    gguf_header.read_header(path)        the same as read(), reading only as much as the header needs
    gguf_header.tensor_digests(path)     {name: (ne, ggml type, SHA-256 of its data bytes)}

Only what the scripts need: no bounds checks beyond Python's own, trusted fixture input.
"""

import hashlib
import struct

STRING, ARRAY = 8, 9
# Bytes of each scalar value type (GGUF spec: uint8 .. float64, bool).
SCALAR_SIZE = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
SCALAR_FORMAT = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

# ggml type id: (name, elements per block, bytes per block), as common/artifact/ggml.c lists them.
GGML_TYPES = {
    0: ("f32", 1, 4), 1: ("f16", 1, 2), 2: ("q4_0", 32, 18), 3: ("q4_1", 32, 20),
    6: ("q5_0", 32, 22), 7: ("q5_1", 32, 24), 8: ("q8_0", 32, 34), 9: ("q8_1", 32, 36),
    10: ("q2_K", 256, 84), 11: ("q3_K", 256, 110), 12: ("q4_K", 256, 144), 13: ("q5_K", 256, 176),
    14: ("q6_K", 256, 210), 15: ("q8_K", 256, 292), 16: ("iq2_xxs", 256, 66), 17: ("iq2_xs", 256, 74),
    18: ("iq3_xxs", 256, 98), 19: ("iq1_s", 256, 50), 20: ("iq4_nl", 32, 18), 21: ("iq3_s", 256, 110),
    22: ("iq2_s", 256, 82), 23: ("iq4_xs", 256, 136), 24: ("i8", 1, 1), 25: ("i16", 1, 2),
    26: ("i32", 1, 4), 27: ("i64", 1, 8), 28: ("f64", 1, 8), 29: ("iq1_m", 256, 56),
    30: ("bf16", 1, 2), 34: ("tq1_0", 256, 54), 35: ("tq2_0", 256, 66), 39: ("mxfp4", 32, 17),
    40: ("nvfp4", 64, 36), 41: ("q1_0", 128, 18), 42: ("q2_0", 64, 18),
}


def nbytes(ne, ggml_type):
    """Bytes of the data of a tensor of shape @ne and type @ggml_type (rows are whole blocks)."""
    _, block, size = GGML_TYPES[ggml_type]
    n = Header.elements(ne)
    if ne and ne[0] % block:
        raise ValueError("%d elements per row is no multiple of the %s block (%d)" % (ne[0], GGML_TYPES[ggml_type][0], block))
    return n // block * size


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


def _skip_array(b, o):
    """The offset after the array (element type, count, elements) at @o; arrays may nest."""
    at, n = struct.unpack_from("<IQ", b, o)
    o += 12
    if at == STRING:
        for _ in range(n):
            _, o = _string(b, o)
    elif at == ARRAY:
        for _ in range(n):
            o = _skip_array(b, o)
    else:
        o += SCALAR_SIZE[at] * n
    return o


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
            o = _skip_array(b, o)
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


def read_header(path):
    """The header of the file @path, reading no more of the file than the header needs."""
    limit = 1 << 20
    while True:
        with open(path, "rb") as f:
            b = f.read(limit)
        try:
            h = parse(b)
            if h.data_offset <= len(b) or len(b) < limit:
                return h
        except (struct.error, UnicodeDecodeError, IndexError):
            if len(b) < limit:
                raise
        limit *= 4


def tensor_digests(path):
    """{name: (ne, ggml type, SHA-256 hex of the tensor's data bytes)} of the GGUF file @path."""
    h, out = read_header(path), {}
    with open(path, "rb") as f:
        for name, ne, t, off in h.tensors:
            f.seek(h.data_offset + off)
            n = nbytes(ne, t)
            data = f.read(n)
            if len(data) != n:
                raise ValueError("%s: tensor %s ends past the end of the file" % (path, name))
            out[name] = (ne, t, hashlib.sha256(data).hexdigest())
    return out
