#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Write small, valid ONNX models for TaskPatch's tests, encoding the protobuf wire format by hand
(standard library only; the same --seed gives the same bytes).

--kind conv (default): an INT8 conv stack that ONNX Runtime loads and runs:

    input float [1,C,H,W] -> QuantizeLinear -> N x QLinearConv (3x3, pads 1) -> DequantizeLinear -> output

Layer l has int8 weights "layer.l.weight" [C,C,3,3] (symmetric, per output channel), float
"layer.l.w_scale" [C], int8 "layer.l.w_zero_point" [C] (zeros), int32 "layer.l.bias" [C], and the
scalars "layer.l.y_scale" (float) and "layer.l.y_zero_point" (int8); the input's scalars are
"input.scale" and "input.zero_point". Every initializer keeps its data in raw_data.

--task-out FILE --change-layers K: the task variant. K layers spread evenly through the stack get
new weights and w_scale: by default a fine-tune look-alike (85% of the int8 values kept, 15% moved by
one step, scales nudged), with --random entirely new values. Everything else is byte-identical
with the base, and so is the layout: the two files differ only inside those 2*K initializers.

--classes N (with --task-out): the class-set change. The task's last layer, the classifier, has N
output channels instead of C: its weight [N,C,3,3], w_scale, w_zero_point and bias [N] are resized
and so is the graph's output [1,N,H,W]. Its first min(N,C) output channels keep their bytes (as the
task's layer had them, changed or not), channels added are drawn from their own generator. Every
other initializer is byte-identical with the base (the same --seed gives the same base).

--external DIR: also write DIR/<name of -o> (and DIR/<name of --task-out>) whose initializers keep
their data in a side file "<name>.data" (data_location EXTERNAL), as onnx's external-data format.

--kind subgraph: a tiny model with a Constant node and an If node whose then/else graphs hold
initializers (inputs "cond" bool [], "x" float [2]; output "y" float [2]).

Examples:
    make-onnx.py -o base.onnx
    make-onnx.py -o base.onnx --task-out task.onnx --change-layers 10
    make-onnx.py -o base.onnx --task-out task.onnx --change-layers 0 --classes 40
    make-onnx.py --kind subgraph -o sub.onnx
"""

import argparse
import os
import random
import struct
import sys

# TensorProto.DataType
FLOAT, UINT8, INT8, INT32, INT64, BOOL = 1, 2, 3, 6, 7, 9
# AttributeProto.AttributeType
A_INT, A_TENSOR, A_GRAPH, A_INTS = 2, 4, 5, 7


# ---- protobuf wire format ------------------------------------------------------------------------

def varint(v):
    if v < 0:
        v += 1 << 64            # int64 fields: two's complement, 10 bytes
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def key(field, wire):
    return varint(field << 3 | wire)


def f_int(field, v):
    return key(field, 0) + varint(v)


def f_bytes(field, data):
    return key(field, 2) + varint(len(data)) + data


def f_str(field, s):
    return f_bytes(field, s.encode())


f_msg = f_bytes


# ---- ONNX messages -------------------------------------------------------------------------------

def tensor(name, data_type, dims, raw):
    """TensorProto with raw_data, fields in field-number order as protobuf serializers write them."""
    out = b"".join(f_int(1, d) for d in dims) + f_int(2, data_type) + f_str(8, name)
    return out + f_bytes(9, raw)


def external_tensor(name, data_type, dims, location, offset, length):
    out = b"".join(f_int(1, d) for d in dims) + f_int(2, data_type) + f_str(8, name)
    for k, v in (("location", location), ("offset", str(offset)), ("length", str(length))):
        out += f_msg(13, f_str(1, k) + f_str(2, v))
    return out + f_int(14, 1)


def value_info(name, elem_type, shape):
    dims = b"".join(f_msg(1, f_int(1, d)) for d in shape)           # Dimension.dim_value
    tensor_type = f_int(1, elem_type) + f_msg(2, dims)              # TypeProto.Tensor
    return f_str(1, name) + f_msg(2, f_msg(1, tensor_type))         # ValueInfoProto


def attr_ints(name, values):
    return f_str(1, name) + b"".join(f_int(8, v) for v in values) + f_int(20, A_INTS)


def attr_int(name, value):
    return f_str(1, name) + f_int(3, value) + f_int(20, A_INT)


def attr_tensor(name, t):
    return f_str(1, name) + f_msg(5, t) + f_int(20, A_TENSOR)


def attr_graph(name, g):
    return f_str(1, name) + f_msg(6, g) + f_int(20, A_GRAPH)


def node(op_type, inputs, outputs, name, attrs=()):
    out = b"".join(f_str(1, i) for i in inputs) + b"".join(f_str(2, o) for o in outputs)
    out += f_str(3, name) + f_str(4, op_type)
    return out + b"".join(f_msg(5, a) for a in attrs)


def graph(name, nodes, inits, inputs, outputs):
    out = b"".join(f_msg(1, n) for n in nodes) + f_str(2, name)
    out += b"".join(f_msg(5, t) for t in inits)
    out += b"".join(f_msg(11, v) for v in inputs) + b"".join(f_msg(12, v) for v in outputs)
    return out


def model(g, opset=13):
    out = f_int(1, 8) + f_str(2, "taskpatch-make-onnx") + f_str(3, "1") + f_msg(7, g)
    return out + f_msg(8, f_str(1, "") + f_int(2, opset))


# ---- the INT8 conv stack -------------------------------------------------------------------------

def floats(values):
    return struct.pack("<%df" % len(values), *values)


def int8s(values):
    return struct.pack("<%db" % len(values), *values)


def int32s(values):
    return struct.pack("<%di" % len(values), *values)


def base_params(rng, layers, c):
    """Per layer: int8 weights, per-channel scales, int32 bias, output scale."""
    params = []
    for _ in range(layers):
        w = random_int8(rng, c * c * 9)
        w_scale = [rng.uniform(0.8, 1.2) * weight_scale(c) for _ in range(c)]
        bias = [rng.randint(-2000, 2000) for _ in range(c)]
        params.append({"w": w, "w_scale": w_scale, "bias": bias, "y_scale": 0.03})
    return params


def random_int8(rng, n):
    """n int8 values in -127..127 (symmetric quantization never uses -128), as bytes."""
    return rng.randbytes(n).replace(b"\x80", b"\x81")


def weight_scale(c):
    """Weights of rms 1/sqrt(fan-in) (int8 uniform in +-127 has rms ~73): activations neither die nor saturate."""
    return 1 / (73 * (9 * c) ** 0.5)


def change_layer(rng, p, random_replace):
    """A task's version of one layer: new weights and scales, same shapes."""
    if random_replace:
        w = random_int8(rng, len(p["w"]))
        w_scale = [rng.uniform(0.8, 1.2) * weight_scale(len(p["w_scale"])) for _ in p["w_scale"]]
    else:
        # Folded and requantized with the same settings: most values stay, 15% move one step.
        w = bytearray(p["w"])
        for i in rng.sample(range(len(w)), max(1, len(w) * 15 // 100)):
            v = w[i] - 256 if w[i] > 127 else w[i]
            v = v + rng.choice((-1, 1)) if -127 < v < 127 else v - (v > 0) + (v < 0)
            w[i] = v & 0xFF
        w = bytes(w)
        w_scale = [s * (1 + rng.uniform(-0.02, 0.02)) for s in p["w_scale"]]
    return dict(p, w=w, w_scale=w_scale)


def resize_classes(rng, p, n):
    """The classifier layer @p with @n output channels: the first min(n, C) kept, the rest new."""
    c = len(p["w_scale"])
    fan = len(p["w"]) // c              # C_in * 3 * 3 weights per output channel
    keep = min(n, c)
    add = n - keep
    w = p["w"][:keep * fan] + random_int8(rng, add * fan)
    w_scale = p["w_scale"][:keep] + [rng.uniform(0.8, 1.2) * weight_scale(fan // 9) for _ in range(add)]
    bias = p["bias"][:keep] + [rng.randint(-2000, 2000) for _ in range(add)]
    return dict(p, w=w, w_scale=w_scale, bias=bias)


def changed_layers(layers, k):
    """K layer indices spread evenly through 0..layers-1."""
    k = max(0, min(k, layers))
    return sorted({(2 * i + 1) * layers // (2 * k) for i in range(k)}) if k else []


def conv_initializers(params, c):
    """(name, data_type, dims, raw bytes) of every initializer, in graph order."""
    inits = [("input.scale", FLOAT, [], floats([1 / 64])), ("input.zero_point", INT8, [], int8s([0]))]
    for l, p in enumerate(params):
        pre = "layer.%d." % l
        m = len(p["w_scale"])           # output channels: C, or the classes of a resized classifier
        inits += [
            (pre + "weight", INT8, [m, c, 3, 3], p["w"]),
            (pre + "w_scale", FLOAT, [m], floats(p["w_scale"])),
            (pre + "w_zero_point", INT8, [m], int8s([0] * m)),
            (pre + "bias", INT32, [m], int32s(p["bias"])),
            (pre + "y_scale", FLOAT, [], floats([p["y_scale"]])),
            (pre + "y_zero_point", INT8, [], int8s([0])),
        ]
    return inits


def conv_model(params, c, h, w, tensors):
    nodes = [node("QuantizeLinear", ["input", "input.scale", "input.zero_point"], ["q"], "quantize")]
    x, x_scale, x_zp = "q", "input.scale", "input.zero_point"
    attrs = [attr_int("group", 1), attr_ints("dilations", [1, 1]), attr_ints("kernel_shape", [3, 3]),
             attr_ints("pads", [1, 1, 1, 1]), attr_ints("strides", [1, 1])]
    for l in range(len(params)):
        pre = "layer.%d." % l
        ins = [x, x_scale, x_zp, pre + "weight", pre + "w_scale", pre + "w_zero_point",
               pre + "y_scale", pre + "y_zero_point", pre + "bias"]
        nodes.append(node("QLinearConv", ins, [pre + "out"], pre + "conv", attrs))
        x, x_scale, x_zp = pre + "out", pre + "y_scale", pre + "y_zero_point"
    nodes.append(node("DequantizeLinear", [x, x_scale, x_zp], ["output"], "dequantize"))
    m = len(params[-1]["w_scale"])
    g = graph("int8_conv_stack", nodes, tensors,
              [value_info("input", FLOAT, [1, c, h, w])], [value_info("output", FLOAT, [1, m, h, w])])
    return model(g)


def inline_tensors(inits):
    return [tensor(*t) for t in inits]


def external_tensors(inits, location):
    """TensorProtos pointing into a side file, and that file's bytes (large tensors page-aligned)."""
    data, out = bytearray(), []
    for name, data_type, dims, raw in inits:
        align = 4096 if len(raw) >= 1024 else 64
        data += b"\0" * (-len(data) % align)
        out.append(external_tensor(name, data_type, dims, location, len(data), len(raw)))
        data += raw
    return out, bytes(data)


# ---- the subgraph model --------------------------------------------------------------------------

def subgraph_model():
    """Constant c; If(cond) then c + then.bias else c - else.bias; y = (x + that) * scale."""
    c = tensor("c.value", FLOAT, [2], floats([0.5, -0.5]))
    branches = []
    for side, op in (("then", "Add"), ("else", "Sub")):
        bias = tensor(side + ".bias", FLOAT, [2], floats([1.0, 2.0] if side == "then" else [3.0, 4.0]))
        branches.append(graph(side + "_branch", [node(op, ["c", side + ".bias"], [side + ".out"], side + ".op")],
                              [bias], [], [value_info(side + ".out", FLOAT, [2])]))
    nodes = [
        node("Constant", [], ["c"], "const", [attr_tensor("value", c)]),
        node("If", ["cond"], ["branch"], "if", [attr_graph("then_branch", branches[0]),
                                                  attr_graph("else_branch", branches[1])]),
        node("Add", ["x", "branch"], ["sum"], "add"),
        node("Mul", ["sum", "scale"], ["y"], "mul"),
    ]
    g = graph("subgraph_model", nodes, [tensor("scale", FLOAT, [1], floats([2.0]))],
              [value_info("cond", BOOL, []), value_info("x", FLOAT, [2])], [value_info("y", FLOAT, [2])])
    return model(g)


# ---- main ----------------------------------------------------------------------------------------

def write(path, data):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def main():
    parts = __doc__.split("\n\n")
    ap = argparse.ArgumentParser(description=parts[0], epilog="\n\n".join(parts[1:]),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kind", choices=("conv", "subgraph"), default="conv", help="default conv")
    ap.add_argument("--layers", type=int, default=64, help="QLinearConv layers (default 64)")
    ap.add_argument("--channels", type=int, default=32, help="C (default 32)")
    ap.add_argument("--height", type=int, default=8, help="H (default 8)")
    ap.add_argument("--width", type=int, default=8, help="W (default 8)")
    ap.add_argument("--seed", type=int, default=1, help="default 1")
    ap.add_argument("-o", "--output", required=True, help="the base model")
    ap.add_argument("--task-out", help="also write the task variant here")
    ap.add_argument("--change-layers", type=int, default=10, help="layers the task changes (default 10)")
    ap.add_argument("--random", action="store_true", help="the task replaces values at random")
    ap.add_argument("--classes", type=int, metavar="N", help="the task's last layer has N output channels")
    ap.add_argument("--external", metavar="DIR", help="also write external-data variants into DIR")
    a = ap.parse_args()
    for v, what in ((a.layers, "--layers"), (a.channels, "--channels"), (a.height, "--height"), (a.width, "--width")):
        if v < 1:
            ap.error(what + " must be at least 1")
    if a.classes is not None and (a.classes < 1 or not a.task_out or a.kind != "conv"):
        ap.error("--classes wants N >= 1, --kind conv and --task-out")

    if a.kind == "subgraph":
        if a.task_out or a.external:
            ap.error("--kind subgraph writes one model: no --task-out or --external")
        write(a.output, subgraph_model())
        return 0

    c = a.channels
    base = base_params(random.Random(a.seed), a.layers, c)
    outputs = [(a.output, base)]
    if a.task_out:
        rng = random.Random("task-%d-%d" % (a.seed, a.random))
        task = list(base)
        for l in changed_layers(a.layers, a.change_layers):
            task[l] = change_layer(rng, base[l], a.random)
        if a.classes is not None:
            task[-1] = resize_classes(random.Random("classes-%d-%d" % (a.seed, a.classes)), task[-1], a.classes)
        outputs.append((a.task_out, task))

    for path, params in outputs:
        inits = conv_initializers(params, c)
        write(path, conv_model(params, c, a.height, a.width, inline_tensors(inits)))
        if a.external:
            os.makedirs(a.external, exist_ok=True)
            name = os.path.basename(path)
            tensors, data = external_tensors(inits, name + ".data")
            write(os.path.join(a.external, name + ".data"), data)
            write(os.path.join(a.external, name), conv_model(params, c, a.height, a.width, tensors))
    return 0


if __name__ == "__main__":
    sys.exit(main())
