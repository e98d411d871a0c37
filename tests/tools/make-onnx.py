#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Write valid ONNX models for TaskPatch's tests and benchmarks, encoding the protobuf wire format by
hand from the public onnx.proto (standard library only; the same arguments give the same bytes).

--kind conv (default): an INT8 conv stack that ONNX Runtime loads and runs:

    input float [1,C,H,W] -> QuantizeLinear -> N x QLinearConv (3x3, pads 1) -> DequantizeLinear -> output

Layer l has int8 weights "layer.l.weight" [C,C,3,3] (symmetric, per output channel), float
"layer.l.w_scale" [C], int8 "layer.l.w_zero_point" [C] (zeros), int32 "layer.l.bias" [C], and the
scalars "layer.l.y_scale" (float) and "layer.l.y_zero_point" (int8); the input's scalars are
"input.scale" and "input.zero_point". Every initializer keeps its data in raw_data. The int8 weights
are random (uniform in -127..127) unless --mode finetune, which quantizes float weights.

--quant per-channel|per-tensor (conv): per-channel (default) as above; per-tensor makes each layer's
"layer.l.w_scale" a float scalar and "layer.l.w_zero_point" an int8 scalar 0 (dims [], one scale for
the whole weight, as QLinearConv and DequantizeLinear allow). With --mode finetune that scale is
max|W| / 127 over the layer; otherwise the int8 values are the per-channel model's and the scale is
the mean of the layer's per-channel scales (so --change-layers, whose task nudges the scales, changes
it; the other modes keep it).

--graph qlinear|qdq (conv): qlinear (default) is the QOperator stack above. qdq is the QDQ form ONNX
Runtime's quantize_static writes (opset 13), the same activations' scales and zero points:

    input float -> QuantizeLinear -> DequantizeLinear -> N x (Conv (3x3, pads 1) -> QuantizeLinear
        -> DequantizeLinear) -> output float

Conv l's weight is DequantizeLinear("layer.l.weight", "layer.l.w_scale", "layer.l.w_zero_point") and
its bias DequantizeLinear("layer.l.bias" int32, "layer.l.b_scale", "layer.l.b_zero_point" int32 0),
both with attribute axis=0 when per-channel and no axis per-tensor; "layer.l.b_scale" (float, the
shape of w_scale) = float32(x_scale * w_scale) as ORT computes it, x_scale the layer input's scale
("input.scale", else the previous layer's y_scale). The initializers are the qlinear stack's plus
b_scale and b_zero_point after each bias; the quantize/dequantize pairs reuse "input.scale",
"layer.l.y_scale" and their zero points. ONNX Runtime (onnxruntime-node 1.22, CPU) gives the qdq
model and the qlinear model of the same arguments bit-identical outputs.

--kind matmul: a float32 MLP, big and quick to make (--dim 2048 --size-mb 300: 18 layers, 302 MB in
a few seconds):

    input float [1,D] -> N x (MatMul "layers.l.weight" [D,D] -> Add "onnx::Add_l" [D] -> Relu) -> output

(no Relu after the last layer; the biases are named as torch.onnx names anonymous constants). Values
are random float32 bit patterns, random sign and mantissa under a fixed exponent (He-like scale), so
no numpy is needed. --size-mb M picks the number of layers whose weights make about M MB (10^6).

--kind subgraph: a tiny model with a Constant node and an If node whose then/else graphs hold
initializers (inputs "cond" bool [], "x" float [2]; output "y" float [2]).

Task variants (written with the base, from the same --seed; --task-out names the file):

--change K --mode random|lowrank|requant [--rank R] [--task-seed T]: K weight initializers spread
evenly through the stack ("layer.l.weight", "layers.l.weight") get new values of the same shape;
nothing else changes, so exactly K initializers differ. random: drawn like the base's; lowrank:
W + A.B of rank R (default 4), a folded LoRA (INT8 weights: requantized with the layer's unchanged
w_scale, about 40% of the values move); requant (conv): 15% of the int8 values move one step. T
(default 1) picks another task of the same base.

--change K --mode finetune [--drift D] [--noise E] [--task-seed T] (conv): what a real pipeline
makes: float weights, fine-tuned, quantized again with ONNX Runtime's rules. Every layer l has a
float32 "shadow" drawn from --seed and l only: weights W [C,C,3,3], output channel c Gaussian of its
own std s_c = e^(0.5 z_c - 0.25) / sqrt(9C), z_c ~ N(0,1) (a log-normal spread whose mean square is
1/(9C), so the activations keep their scale), one weight in 4096 an outlier of +-(4..8) s_c; and a
bias b [C] ~ N(0, 0.1). The base is the shadow quantized as ORT's quantizer quantizes symmetric int8
weights (quant_utils compute_scale_zp, quantize_nparray): over the scale's group (an output channel,
or the layer with --quant per-tensor) scale = float32(2 max|w| / 254) computed in float64 (1.0 if
under float32's tiny), zero point 0, q = clamp(round_half_to_even(float32(w / scale)), -127, 127); the
int32 bias is recomputed as ORT's quantize_bias_static does: round_half_to_even(float32(b /
float32(x_scale * w_scale))), x_scale the layer input's scale. The K layers spread evenly are
quantized again from a fine-tune W', b' of their shadow: per output channel the drift of a folded
BatchNorm whose gamma/variance moved, W'[c] = W[c] (1 + g_c) + e and b'[c] = b[c] (1 + g_c), g_c ~
N(0, D) (default 0.03), e dense noise ~ N(0, (E s_c)^2) (default 0.01); their weight, w_scale and
bias (and b_scale with --graph qdq) change, zero points stay 0, y_scale stays (the activations are
not calibrated again). Everything else is byte-identical with the base. Layer l's fine-tune depends
on --seed, T and l only, not on K. Per-channel, a quarter to a third of a changed layer's int8 values
move (defaults), nearly all by one step; per-tensor, a value moves by about g_c |q|. Gaussian draws come from a table
of 65536 normal quantiles indexed by random bytes, fast enough for 30 MB (--channels 256 --layers
48: about 15 s).

--change-layers K [--random] (conv; the older interface): K layers spread evenly get new weights
and w_scale: by default a fine-tune look-alike (85% of the int8 values kept, 15% moved by one step,
scales nudged), with --random entirely new values. Everything else is byte-identical with the base,
and so is the layout: the two files differ only inside those 2*K initializers (3*K with --graph qdq:
b_scale follows w_scale).

--classes N (conv, with --task-out): the class-set change. The task's last layer, the classifier,
has N output channels instead of C: its weight [N,C,3,3], w_scale, w_zero_point and bias [N] are
resized and so is the graph's output [1,N,H,W]. Its first min(N,C) output channels keep their bytes
(as the task's layer had them, changed or not), channels added are drawn from their own generator.
Every other initializer is byte-identical with the base (the same --seed gives the same base). With
--graph qdq b_scale and b_zero_point are resized too; with --quant per-tensor w_scale and
w_zero_point stay scalars (--mode finetune: the layer's scale, unchanged; otherwise the mean of the
resized per-channel scales, so it changes).

External data (onnx's format: data_location EXTERNAL, external_data "location", "offset",
"length"; a model directory holds the model and its data files):

--external one: the model's initializers keep their data in one file next to it,
"<model file name>.data" (--location PATH to name another, relative to the model's directory). As
onnx.save_model(save_as_external_data=True) writes it, each tensor starts right where the previous
ended (onnx pads nothing); --align N instead starts every tensor of more than --align-above bytes
(default 1048576) at a multiple of N, as onnx-ir (torch.onnx's exporter: 65536) and ONNX Runtime's
own saver (4096) do.

--external per-tensor: one file per initializer, named as onnx's
convert_model_to_external_data(all_tensors_to_one_file=False) names it: the tensor's name when it is
a valid file name (none of <>:;,?"*|/), else a UUID (onnx: a random uuid1; here uuid5 of the name, so
runs repeat: "onnx::Add_0" gets one).

Both: every tensor gets "offset" and "length", as onnx writes them; tensors under
--size-threshold bytes stay inline (default 0, none; onnx's default is 1024, compared against
sys.getsizeof(raw_data), 33 bytes more than the data); --checksum adds "checksum", the SHA-1 of the
whole data file in hex (onnx.proto: "SHA1 digest of file specified in under 'location' key"; no tool
checks it). The base and the task need directories of their own with per-tensor files.

--external-dir DIR: keep -o (and --task-out) inline and write the external-data variants into DIR
under the same file names. The older spelling --external DIR means --external one --external-dir DIR.

Examples:
    make-onnx.py -o base.onnx
    make-onnx.py -o base.onnx --task-out task.onnx --change-layers 10
    make-onnx.py -o base.onnx --task-out task.onnx --change-layers 0 --classes 40
    make-onnx.py -o base.onnx --task-out task.onnx --change 4 --mode finetune
    make-onnx.py --channels 128 --layers 24 -o base.onnx --task-out task.onnx --change 2 --mode finetune \
        --quant per-tensor --graph qdq                          # 3.5 MB, as quantize_static writes it
    make-onnx.py -o base.onnx --task-out task.onnx --change 4 --mode finetune --drift 0.1 --noise 0.05
    make-onnx.py --kind subgraph -o sub.onnx
    make-onnx.py -o base/model.onnx --task-out task/model.onnx --change 4 --mode lowrank --external one
    make-onnx.py --kind matmul --dim 2048 --size-mb 300 -o big/model.onnx --task-out big-task/model.onnx \
        --change 3 --mode random --external per-tensor
    make-onnx.py -o inline.onnx --external one --external-dir ext   # ext/inline.onnx, ext/inline.onnx.data
"""

import argparse
import array
import hashlib
import math
import os
import random
import re
import statistics
import struct
import sys
import uuid

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
# A message that may hold tensor data is a list of byte chunks (its parts), so a 300 MB model is
# written piece by piece, never copied into one buffer.

def plen(parts):
    return sum(len(c) for c in parts)


def f_parts(field, parts):
    return [key(field, 2) + varint(plen(parts))] + parts


def tensor(name, data_type, dims, raw):
    """TensorProto with raw_data, fields in field-number order as protobuf serializers write them."""
    head = b"".join(f_int(1, d) for d in dims) + f_int(2, data_type) + f_str(8, name)
    return [head + key(9, 2) + varint(len(raw)), raw]


def external_tensor(name, data_type, dims, location, offset, length, checksum=None):
    """TensorProto of data kept in @location, its entries in the order onnx's set_external_data writes."""
    out = b"".join(f_int(1, d) for d in dims) + f_int(2, data_type) + f_str(8, name)
    entries = [("location", location), ("offset", str(offset)), ("length", str(length))]
    if checksum:
        entries.append(("checksum", checksum))
    for k, v in entries:
        out += f_msg(13, f_str(1, k) + f_str(2, v))
    return [out + f_int(14, 1)]


def value_info(name, elem_type, shape):
    dims = b"".join(f_msg(1, f_int(1, d)) for d in shape)           # Dimension.dim_value
    tensor_type = f_int(1, elem_type) + f_msg(2, dims)              # TypeProto.Tensor
    return f_str(1, name) + f_msg(2, f_msg(1, tensor_type))         # ValueInfoProto


def attr_ints(name, values):
    return f_str(1, name) + b"".join(f_int(8, v) for v in values) + f_int(20, A_INTS)


def attr_int(name, value):
    return f_str(1, name) + f_int(3, value) + f_int(20, A_INT)


def attr_tensor(name, t):
    return f_str(1, name) + f_msg(5, b"".join(t)) + f_int(20, A_TENSOR)


def attr_graph(name, g):
    return f_str(1, name) + f_msg(6, b"".join(g)) + f_int(20, A_GRAPH)


def node(op_type, inputs, outputs, name, attrs=()):
    out = b"".join(f_str(1, i) for i in inputs) + b"".join(f_str(2, o) for o in outputs)
    out += f_str(3, name) + f_str(4, op_type)
    return out + b"".join(f_msg(5, a) for a in attrs)


def graph(name, nodes, inits, inputs, outputs):
    """GraphProto parts; @inits are TensorProto parts."""
    out = [b"".join(f_msg(1, n) for n in nodes) + f_str(2, name)]
    for t in inits:
        out += f_parts(5, t)
    out.append(b"".join(f_msg(11, v) for v in inputs) + b"".join(f_msg(12, v) for v in outputs))
    return out


def model(g, opset=13):
    """ModelProto parts around the GraphProto parts @g."""
    head = f_int(1, 8) + f_str(2, "taskpatch-make-onnx") + f_str(3, "1")
    return [head] + f_parts(7, g) + [f_msg(8, f_str(1, "") + f_int(2, opset))]


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
        w = requant_int8(rng, p["w"])
        w_scale = [s * (1 + rng.uniform(-0.02, 0.02)) for s in p["w_scale"]]
    return dict(p, w=w, w_scale=w_scale)


def resize_classes(rng, p, n):
    """The classifier layer @p with @n output channels: the first min(n, C) kept, the rest new."""
    c = len(p["bias"])                  # output channels (len(w_scale) too, unless per-tensor)
    fan = len(p["w"]) // c              # C_in * 3 * 3 weights per output channel
    keep = min(n, c)
    add = n - keep
    w = p["w"][:keep * fan] + random_int8(rng, add * fan)
    if p.get("per_tensor"):
        w_scale = p["w_scale"]          # one scale for the layer: the new channels use it too
    else:
        w_scale = p["w_scale"][:keep] + [rng.uniform(0.8, 1.2) * weight_scale(fan // 9) for _ in range(add)]
    bias = p["bias"][:keep] + [rng.randint(-2000, 2000) for _ in range(add)]
    return dict(p, w=w, w_scale=w_scale, bias=bias)


def changed_layers(layers, k):
    """K layer indices spread evenly through 0..layers-1."""
    k = max(0, min(k, layers))
    return sorted({(2 * i + 1) * layers // (2 * k) for i in range(k)}) if k else []


def conv_initializers(params, c, qdq=False):
    """(name, data_type, dims, raw bytes) of every initializer, in graph order; @qdq: with each layer's
    bias scale and zero point (the QDQ form's bias DequantizeLinear)."""
    inits = [("input.scale", FLOAT, [], floats([INPUT_SCALE])), ("input.zero_point", INT8, [], int8s([0]))]
    x_scale = INPUT_SCALE
    for l, p in enumerate(params):
        pre = "layer.%d." % l
        m = len(p["bias"])              # output channels: C, or the classes of a resized classifier
        k = len(p["w_scale"])           # m, or 1 for a per-tensor scale (a scalar: dims [])
        sdims = [] if p.get("per_tensor") else [m]
        inits += [
            (pre + "weight", INT8, [m, c, 3, 3], p["w"]),
            (pre + "w_scale", FLOAT, sdims, floats(p["w_scale"])),
            (pre + "w_zero_point", INT8, sdims, int8s([0] * k)),
            (pre + "bias", INT32, [m], int32s(p["bias"])),
        ]
        if qdq:
            inits += [(pre + "b_scale", FLOAT, sdims, floats(bias_scales(x_scale, p["w_scale"]))),
                      (pre + "b_zero_point", INT32, sdims, int32s([0] * k))]
        inits += [
            (pre + "y_scale", FLOAT, [], floats([p["y_scale"]])),
            (pre + "y_zero_point", INT8, [], int8s([0])),
        ]
        x_scale = p["y_scale"]
    return inits


def bias_scales(x_scale, w_scale):
    """The int32 bias's scales, as ONNX Runtime's quantizer computes them: float32(x_scale * w_scale)."""
    xs = f32(x_scale)
    return [f32(xs * f32(s)) for s in w_scale]


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
    m = len(params[-1]["bias"])
    g = graph("int8_conv_stack", nodes, tensors,
              [value_info("input", FLOAT, [1, c, h, w])], [value_info("output", FLOAT, [1, m, h, w])])
    return model(g)


def conv_model_qdq(params, c, h, w, tensors):
    """The same stack in the QDQ form ONNX Runtime's quantize_static writes: float Conv between
    QuantizeLinear/DequantizeLinear pairs, weights and biases through DequantizeLinear."""
    nodes = [node("QuantizeLinear", ["input", "input.scale", "input.zero_point"], ["input.q"], "input.quantize"),
             node("DequantizeLinear", ["input.q", "input.scale", "input.zero_point"], ["input.dq"],
                  "input.dequantize")]
    x = "input.dq"
    attrs = [attr_int("group", 1), attr_ints("dilations", [1, 1]), attr_ints("kernel_shape", [3, 3]),
             attr_ints("pads", [1, 1, 1, 1]), attr_ints("strides", [1, 1])]
    for l, p in enumerate(params):
        pre = "layer.%d." % l
        last = l == len(params) - 1
        axis = [] if p.get("per_tensor") else [attr_int("axis", 0)]
        nodes += [
            node("DequantizeLinear", [pre + "weight", pre + "w_scale", pre + "w_zero_point"],
                 [pre + "weight.dq"], pre + "weight.dequantize", axis),
            node("DequantizeLinear", [pre + "bias", pre + "b_scale", pre + "b_zero_point"],
                 [pre + "bias.dq"], pre + "bias.dequantize", axis),
            node("Conv", [x, pre + "weight.dq", pre + "bias.dq"], [pre + "conv"], pre + "conv", attrs),
            node("QuantizeLinear", [pre + "conv", pre + "y_scale", pre + "y_zero_point"], [pre + "out"],
                 pre + "quantize"),
            node("DequantizeLinear", [pre + "out", pre + "y_scale", pre + "y_zero_point"],
                 ["output" if last else pre + "out.dq"], pre + "dequantize"),
        ]
        x = pre + "out.dq"
    m = len(params[-1]["bias"])
    g = graph("int8_conv_stack_qdq", nodes, tensors,
              [value_info("input", FLOAT, [1, c, h, w])], [value_info("output", FLOAT, [1, m, h, w])])
    return model(g)


def per_tensor_scales(params):
    """--quant per-tensor of synthetic layers: the int8 values kept, w_scale the mean of the layer's
    per-channel scales."""
    return [p if p.get("per_tensor") else dict(p, w_scale=[sum(p["w_scale"]) / len(p["w_scale"])], per_tensor=True)
            for p in params]


def requant_int8(rng, w):
    """Folded and requantized with the same settings: most values stay, 15% move one step."""
    w = bytearray(w)
    for i in rng.sample(range(len(w)), max(1, len(w) * 15 // 100)):
        v = w[i] - 256 if w[i] > 127 else w[i]
        v = v + rng.choice((-1, 1)) if -127 < v < 127 else v - (v > 0) + (v < 0)
        w[i] = v & 0xFF
    return bytes(w)


def low_rank(rng, rows, cols, rank, rms):
    """A.B with A [rows, rank], B [rank, cols] of Gaussian values, scaled to about @rms: a row at a time."""
    sigma = math.sqrt(rms / math.sqrt(rank))
    a = [[rng.gauss(0, sigma) for _ in range(rank)] for _ in range(rows)]
    b = [[rng.gauss(0, sigma) for _ in range(cols)] for _ in range(rank)]
    for ai in a:
        row = [0.0] * cols
        for r in range(rank):
            row = [x + ai[r] * y for x, y in zip(row, b[r])]
        yield row


def lowrank_int8(rng, w, rows, rank):
    """W + A.B on INT8 weights [rows, ...] in units of their (unchanged) per-row scale, requantized."""
    cols = len(w) // rows
    v = array.array("b", w)
    out = array.array("b", bytes(len(w)))
    for i, row in enumerate(low_rank(rng, rows, cols, rank, 0.7)):
        for j, d in enumerate(row):
            out[i * cols + j] = max(-127, min(127, v[i * cols + j] + round(d)))
    return out.tobytes()


def change_conv_weight(rng, p, mode, rank):
    """--change on the conv stack: the layer's int8 weights only, scales kept."""
    m = len(p["w_scale"])
    if mode == "random":
        w = random_int8(rng, len(p["w"]))
    elif mode == "lowrank":
        w = lowrank_int8(rng, p["w"], m, rank)
    else:
        w = requant_int8(rng, p["w"])
    return dict(p, w=w)


# ---- --mode finetune: float weights, fine-tuned, quantized as ONNX Runtime quantizes them -------------

INPUT_SCALE = 1 / 64                    # "input.scale": inputs in [-2, 2)
SPREAD = 0.5                            # log-normal spread of the per-channel weight stds
OUTLIER_EVERY = 4096                    # one weight in this many is an outlier of +-(4..8) stds
BIAS_STD = 0.1                          # the float biases: N(0, BIAS_STD)
_F32 = struct.Struct("<f")
_F32_TINY = 2.0 ** -126                 # numpy.finfo(float32).tiny
_NORMAL = []


def f32(x):
    """@x rounded to float32."""
    return _F32.unpack(_F32.pack(x))[0]


def normal_table():
    """The 65536 standard-normal quantiles at (i + 1/2) / 65536: a draw is table[a random 16-bit index]."""
    if not _NORMAL:
        nd = statistics.NormalDist()
        _NORMAL.extend(nd.inv_cdf((i + 0.5) / 65536) for i in range(65536))
    return _NORMAL


def normal_indices(rng, n):
    """@n random indices into normal_table(), from rng.randbytes (little-endian everywhere)."""
    idx = array.array("H", rng.randbytes(2 * n))
    if sys.byteorder == "big":
        idx.byteswap()
    return idx


def shadow_layer(seed, l, m, c):
    """Layer @l's float32 weights [m, c, 3, 3] as training leaves them, and its float biases [m]:
    output channel k Gaussian of std sigma_k = e^(SPREAD z - SPREAD^2) / sqrt(9c), z ~ N(0, 1) (mean
    square 1/(9c): activations keep their scale), one weight in OUTLIER_EVERY +-(4..8) sigma_k."""
    rng = random.Random("shadow-%d-%d" % (seed, l))
    fan = 9 * c
    sigma = [math.exp(SPREAD * rng.gauss(0, 1) - SPREAD * SPREAD) / math.sqrt(fan) for _ in range(m)]
    table, idx = normal_table(), normal_indices(rng, m * fan)
    w = array.array("f")
    for k in range(m):
        s = sigma[k]
        w.extend([table[i] * s for i in idx[k * fan:(k + 1) * fan]])
    for _ in range(m * fan // OUTLIER_EVERY):
        i = rng.randrange(m * fan)
        w[i] = rng.choice((-1, 1)) * rng.uniform(4, 8) * sigma[i // fan]
    b = array.array("f", [rng.gauss(0, BIAS_STD) for _ in range(m)])
    return {"W": w, "b": b, "sigma": sigma}


def finetune_shadow(rng, sh, drift, noise):
    """A fine-tune of the shadow @sh: per output channel k a multiplicative drift 1 + g_k, g_k ~ N(0,
    @drift) (a folded BatchNorm whose gamma/variance moved; the bias moves with it), plus dense noise
    of std @noise * sigma_k on the weights."""
    w, sigma = sh["W"], sh["sigma"]
    m = len(sigma)
    fan = len(w) // m
    g = [rng.gauss(0, drift) for _ in range(m)]
    table, idx = normal_table(), normal_indices(rng, len(w))
    w2 = array.array("f")
    for k in range(m):
        f, e, lo = 1 + g[k], noise * sigma[k], k * fan
        w2.extend([x * f + table[i] * e for x, i in zip(w[lo:lo + fan], idx[lo:lo + fan])])
    b2 = array.array("f", [b * (1 + gk) for b, gk in zip(sh["b"], g)])
    return dict(sh, W=w2, b=b2)


def quantize_symmetric(w, groups):
    """Float32 @w in @groups equal groups (output channels, or 1: per tensor) quantized as ONNX Runtime's
    quantizer quantizes symmetric int8 weights (quant_utils compute_scale_zp, quantize_nparray): scale
    = float32(2 max|w| / 254) (float64 division; 1.0 when under float32's tiny), zero point 0,
    q = clip(round_half_even(float32(w / scale)), -127, 127). (int8 bytes, [scale per group])."""
    size = len(w) // groups
    q, scales = array.array("b"), []
    for k in range(groups):
        part = w[k * size:(k + 1) * size]
        amax = max(max(part), -min(part), 0.0)
        s = f32(2 * amax / 254)
        if s < _F32_TINY:
            s = 1.0
        r = [round(v) for v in array.array("f", [x / s for x in part])]       # float32 quotients
        if max(r) > 127 or min(r) < -127:
            r = [min(127, max(-127, v)) for v in r]
        q.extend(r)
        scales.append(s)
    return q.tobytes(), scales


def quantize_bias(b, x_scale, w_scale):
    """ONNX Runtime's quantize_bias_static: round_half_even(float32(b / float32(x_scale * w_scale))), int32."""
    bs = bias_scales(x_scale, w_scale)
    if len(bs) == 1:
        bs = bs * len(b)
    return [max(-2 ** 31, min(2 ** 31 - 1, round(f32(v / s)))) for v, s in zip(b, bs)]


def quantized_layer(sh, x_scale, per_tensor):
    """The int8 layer of the shadow @sh (per-channel or @per_tensor scales), @x_scale its input's scale."""
    w, w_scale = quantize_symmetric(sh["W"], 1 if per_tensor else len(sh["sigma"]))
    return {"w": w, "w_scale": w_scale, "bias": quantize_bias(sh["b"], x_scale, w_scale), "y_scale": 0.03,
            "per_tensor": per_tensor, "shadow": sh, "x_scale": x_scale}


def finetune_base(a):
    """--mode finetune's base: every layer's shadow, quantized."""
    params, x_scale = [], INPUT_SCALE
    for l in range(a.layers):
        params.append(quantized_layer(shadow_layer(a.seed, l, a.channels, a.channels), x_scale,
                                      a.quant == "per-tensor"))
        x_scale = params[-1]["y_scale"]
    return params


def finetune_layer(a, l, p):
    """--mode finetune: layer @l of the task, its shadow fine-tuned and quantized again."""
    rng = random.Random("finetune-%d-%d-%d" % (a.seed, a.task_seed, l))
    return quantized_layer(finetune_shadow(rng, p["shadow"], a.drift, a.noise), p["x_scale"], p["per_tensor"])


# ---- the float32 MLP -----------------------------------------------------------------------------

def random_float32(rng, n, exponent):
    """n float32 of random sign and mantissa in +-[2^e, 2^(e+1)), as little-endian bytes, from random bits."""
    bits = int.from_bytes(rng.randbytes(4 * n), "little")
    keep = int.from_bytes(b"\xff\xff\x7f\x80" * n, "little")                    # sign and mantissa
    exp = int.from_bytes(((127 + exponent) << 23).to_bytes(4, "little") * n, "little")
    return ((bits & keep) | exp).to_bytes(4 * n, "little")


def weight_exponent(d):
    """2^e such that d * E[w^2] is about 2 (w uniform in mantissa: E[w^2] = 4^e * 7/3): ReLU keeps the scale."""
    return round(math.log(6 / (7 * d), 4))


def matmul_params(rng, layers, d):
    return [{"w": random_float32(rng, d * d, weight_exponent(d)), "b": random_float32(rng, d, -8)}
            for _ in range(layers)]


def change_matmul_weight(rng, p, mode, rank, d):
    if mode == "random":
        return dict(p, w=random_float32(rng, d * d, weight_exponent(d)))
    w = array.array("f", p["w"])
    rms = 0.1 * 2.0 ** weight_exponent(d)
    for i, row in enumerate(low_rank(rng, d, d, rank, rms)):
        w[i * d:(i + 1) * d] = array.array("f", [x + y for x, y in zip(w[i * d:(i + 1) * d], row)])
    return dict(p, w=w.tobytes())


def matmul_initializers(params, d):
    inits = []
    for l, p in enumerate(params):
        inits += [("layers.%d.weight" % l, FLOAT, [d, d], p["w"]), ("onnx::Add_%d" % l, FLOAT, [d], p["b"])]
    return inits


def matmul_model(params, d, tensors):
    nodes, x = [], "input"
    for l in range(len(params)):
        last = l == len(params) - 1
        nodes.append(node("MatMul", [x, "layers.%d.weight" % l], ["mm.%d" % l], "layers.%d.matmul" % l))
        nodes.append(node("Add", ["mm.%d" % l, "onnx::Add_%d" % l], ["output" if last else "add.%d" % l],
                          "layers.%d.add" % l))
        if not last:
            nodes.append(node("Relu", ["add.%d" % l], ["relu.%d" % l], "layers.%d.relu" % l))
            x = "relu.%d" % l
    g = graph("float32_mlp", nodes, tensors, [value_info("input", FLOAT, [1, d])],
              [value_info("output", FLOAT, [1, d])])
    return model(g)


# ---- external data -------------------------------------------------------------------------------

def per_tensor_file(name):
    """onnx's file name for a tensor of its own: the name if valid (onnx's _is_valid_filename), else a UUID."""
    if re.match(r'^[^<>:;,?"*|/]+$', name):
        return name
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "taskpatch-make-onnx:" + name))


def externalize(inits, model_name, a):
    """(TensorProto parts of every initializer, {data file relative to the model: its parts})."""
    files, placed = {}, []              # placed: (init, location, offset) or (init, None, None) inline
    for t in inits:
        raw = t[3]
        if len(raw) < a.size_threshold:
            placed.append((t, None, None))
            continue
        if a.external == "per-tensor":
            location = per_tensor_file(t[0])
            if location in files or location == model_name:
                raise SystemExit("make-onnx.py: tensor %r: file %r is taken" % (t[0], location))
            files[location] = [raw]
            placed.append((t, location, 0))
            continue
        location = a.location or model_name + ".data"
        parts = files.setdefault(location, [])
        offset = plen(parts)
        if a.align > 1 and len(raw) > a.align_above and offset % a.align:
            parts.append(bytes(a.align - offset % a.align))
            offset = plen(parts)
        parts.append(raw)
        placed.append((t, location, offset))

    sums = {}
    if a.checksum:
        for location, parts in files.items():
            h = hashlib.sha1()
            for c in parts:
                h.update(c)
            sums[location] = h.hexdigest()
    tensors = []
    for t, location, offset in placed:
        if location is None:
            tensors.append(tensor(*t))
        else:
            tensors.append(external_tensor(t[0], t[1], t[2], location, offset, len(t[3]), sums.get(location)))
    return tensors, files


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

def write(path, parts):
    """Write @parts (byte chunks) to @path atomically, making its directory."""
    if os.path.dirname(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        for c in parts:
            f.write(c)
    os.replace(tmp, path)


def write_model(path, build, inits, a):
    """The model at @path, inline or (--external) with its data files next to it."""
    if not a.external:
        write(path, build([tensor(*t) for t in inits]))
        return
    tensors, files = externalize(inits, os.path.basename(path), a)
    for location, parts in files.items():
        write(os.path.join(os.path.dirname(path), location), parts)
    write(path, build(tensors))


def task_params(a, base):
    """The task's parameters: --change K (any kind) or --change-layers K (conv), then --classes."""
    task = list(base)
    if a.change is not None:
        rng = random.Random("change-%d-%s-%d-%d" % (a.seed, a.mode, a.rank, a.task_seed))
        for l in changed_layers(len(base), a.change):
            if a.mode == "finetune":
                task[l] = finetune_layer(a, l, base[l])
            elif a.kind == "matmul":
                task[l] = change_matmul_weight(rng, base[l], a.mode, a.rank, a.dim)
            else:
                task[l] = change_conv_weight(rng, base[l], a.mode, a.rank)
    else:
        rng = random.Random("task-%d-%d" % (a.seed, a.random))
        for l in changed_layers(len(base), a.change_layers):
            task[l] = change_layer(rng, base[l], a.random)
    if a.classes is not None:
        task[-1] = resize_classes(random.Random("classes-%d-%d" % (a.seed, a.classes)), task[-1], a.classes)
    return task


def check_args(ap, a):
    if a.external not in (None, "one", "per-tensor"):
        if a.external_dir:
            ap.error("--external wants one or per-tensor")
        a.external, a.external_dir = "one", a.external     # the older spelling: --external DIR
    if a.size_mb is not None:
        if a.kind != "matmul" or a.size_mb <= 0 or a.layers is not None:
            ap.error("--size-mb wants --kind matmul, M > 0 and no --layers")
        a.layers = max(1, round(a.size_mb * 1e6 / (4 * a.dim * a.dim + 4 * a.dim)))
    if a.layers is None:
        a.layers = 64 if a.kind == "conv" else 4
    for v, what in ((a.layers, "--layers"), (a.channels, "--channels"), (a.height, "--height"), (a.width, "--width"),
                    (a.dim, "--dim"), (a.rank, "--rank")):
        if v < 1:
            ap.error(what + " must be at least 1")
    if a.classes is not None and (a.classes < 1 or not a.task_out or a.kind != "conv"):
        ap.error("--classes wants N >= 1, --kind conv and --task-out")
    if a.change is not None:
        if not a.task_out:
            ap.error("--change wants --task-out")
        if a.change_layers is not None or a.random:
            ap.error("--change K --mode M, or the older --change-layers K [--random]: not both")
        if not 0 <= a.change <= a.layers:
            ap.error("--change wants 0 <= K <= the %d layers" % a.layers)
        if a.mode in ("requant", "finetune") and a.kind != "conv":
            ap.error("--mode %s is for the INT8 conv stack" % a.mode)
    elif a.mode == "finetune":
        ap.error("--mode finetune wants --change K")
    elif a.kind == "matmul" and a.task_out:
        ap.error("--kind matmul: the task is --change K --mode random|lowrank")
    if a.change_layers is None:
        a.change_layers = 10
    if (a.drift is not None or a.noise is not None) and a.mode != "finetune":
        ap.error("--drift and --noise are for --mode finetune")
    a.drift = 0.03 if a.drift is None else a.drift
    a.noise = 0.01 if a.noise is None else a.noise
    if a.drift < 0 or a.noise < 0:
        ap.error("--drift and --noise must not be negative")
    if (a.quant or a.graph) and a.kind != "conv":
        ap.error("--quant and --graph are for --kind conv")
    a.quant, a.graph = a.quant or "per-channel", a.graph or "qlinear"
    if a.align and a.external != "one":
        ap.error("--align wants --external one")
    if a.location and (a.external != "one" or os.path.isabs(a.location) or ".." in a.location.split("/")):
        ap.error("--location wants --external one and a path inside the model's directory")
    if a.external == "per-tensor" and a.task_out:
        dirs = (a.external_dir, a.external_dir) if a.external_dir else (os.path.dirname(a.output),
                                                                           os.path.dirname(a.task_out))
        if os.path.abspath(dirs[0] or ".") == os.path.abspath(dirs[1] or "."):
            ap.error("--external per-tensor: the base and the task need directories of their own")
    if a.kind == "subgraph" and (a.task_out or a.external):
        ap.error("--kind subgraph writes one model: no --task-out or --external")


def main():
    parts = __doc__.split("\n\n")
    ap = argparse.ArgumentParser(description=parts[0], epilog="\n\n".join(parts[1:]),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kind", choices=("conv", "matmul", "subgraph"), default="conv", help="default conv")
    ap.add_argument("--layers", type=int, help="QLinearConv layers (default 64) or MatMul layers (default 4)")
    ap.add_argument("--channels", type=int, default=32, help="conv: C (default 32)")
    ap.add_argument("--height", type=int, default=8, help="conv: H (default 8)")
    ap.add_argument("--width", type=int, default=8, help="conv: W (default 8)")
    ap.add_argument("--dim", type=int, default=256, help="matmul: D (default 256)")
    ap.add_argument("--size-mb", type=float, metavar="M", help="matmul: as many layers as make about M MB")
    ap.add_argument("--seed", type=int, default=1, help="the base, and through it the task (default 1)")
    ap.add_argument("-o", "--output", required=True, help="the base model")
    ap.add_argument("--task-out", help="also write the task variant here")
    ap.add_argument("--change", type=int, metavar="K", help="the task changes K weight initializers")
    ap.add_argument("--mode", choices=("random", "lowrank", "requant", "finetune"), default="lowrank",
                    help="how --change changes them (default lowrank)")
    ap.add_argument("--drift", type=float, metavar="D",
                    help="--mode finetune: std of the per-channel drift g (default 0.03)")
    ap.add_argument("--noise", type=float, metavar="E",
                    help="--mode finetune: std of the dense noise, in channel stds (default 0.01)")
    ap.add_argument("--quant", choices=("per-channel", "per-tensor"),
                    help="conv: weight scales per output channel (default) or one per layer")
    ap.add_argument("--graph", choices=("qlinear", "qdq"),
                    help="conv: QLinearConv nodes (default) or ONNX Runtime's QDQ form")
    ap.add_argument("--rank", type=int, default=4, help="--mode lowrank: the rank (default 4)")
    ap.add_argument("--task-seed", type=int, default=1, help="--change: another task of the same base (default 1)")
    ap.add_argument("--change-layers", type=int, metavar="K", help="conv: layers the task changes (default 10)")
    ap.add_argument("--random", action="store_true", help="--change-layers: replace values at random")
    ap.add_argument("--classes", type=int, metavar="N", help="the task's last layer has N output channels")
    ap.add_argument("--external", metavar="one|per-tensor", help="keep initializer data in external files")
    ap.add_argument("--external-dir", metavar="DIR", help="write the external-data variants into DIR instead")
    ap.add_argument("--size-threshold", type=int, default=0, metavar="BYTES",
                    help="smaller tensors stay inline (default 0; onnx: 1024)")
    ap.add_argument("--location", metavar="PATH", help="--external one: the data file (default <model>.data)")
    ap.add_argument("--align", type=int, default=0, metavar="N", help="--external one: align big tensors to N")
    ap.add_argument("--align-above", type=int, default=1048576, metavar="BYTES",
                    help="--align: tensors of more than BYTES (default 1048576)")
    ap.add_argument("--checksum", action="store_true", help="add each data file's SHA-1 as \"checksum\"")
    a = ap.parse_args()
    check_args(ap, a)

    if a.kind == "subgraph":
        write(a.output, subgraph_model())
        return 0

    if a.kind == "matmul":
        base = matmul_params(random.Random(a.seed), a.layers, a.dim)
        inits_of = lambda params: matmul_initializers(params, a.dim)
        build_of = lambda params: lambda tensors: matmul_model(params, a.dim, tensors)
    else:
        if a.mode == "finetune":
            base = finetune_base(a)
        else:
            base = base_params(random.Random(a.seed), a.layers, a.channels)
        qdq = a.graph == "qdq"
        conv = conv_model_qdq if qdq else conv_model
        inits_of = lambda params: conv_initializers(params, a.channels, qdq)
        build_of = lambda params: lambda tensors: conv(params, a.channels, a.height, a.width, tensors)
    outputs = [(a.output, base)]
    if a.task_out:
        outputs.append((a.task_out, task_params(a, base)))
    if a.kind == "conv" and a.quant == "per-tensor":
        outputs = [(path, per_tensor_scales(params)) for path, params in outputs]

    for path, params in outputs:
        inits, build = inits_of(params), build_of(params)
        if a.external_dir:
            write(path, build([tensor(*t) for t in inits]))
            path = os.path.join(a.external_dir, os.path.basename(path))
        write_model(path, build, inits, a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
