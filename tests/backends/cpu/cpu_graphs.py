"""Random quantized graphs for the cpu backend's property tests: many small independent cases
(one input and one output each) in one graph, so one compile covers dozens of shapes."""

from __future__ import annotations

import numpy as np

from lowbit.ir import dtypes
from lowbit.ir.attrs import FUSED_CLIP, REQUANT
from lowbit.ir.graph import Graph, Value
from lowbit.ir.types import QuantParams, TensorType
from lowbit.ops import get, infer_node
from lowbit.ops.registry import REQUIRED

I8, U8, I16 = dtypes.INT8, dtypes.UINT8, dtypes.INT16


def add_node(g: Graph, op_type: str, inputs: list, attrs: dict | None = None,
             out: TensorType | None = None, domain: str = "") -> Value:
    """A node with its default attributes, its output typed `out` (quantized) with the shape
    type inference gives."""
    full = {k: a.default for k, a in get(op_type, domain).all_attrs().items()
            if a.default is not None and a.default is not REQUIRED}
    full.update(attrs or {})
    node = g.make_node(op_type, inputs, full, domain=domain)
    if out is not None:
        node.output.type = TensorType(out.dtype, None, out.quant)
    t = infer_node(node)[0]
    node.output.type = TensorType(t.dtype, t.shape, out.quant if out is not None else t.quant)
    return node.output


def const(g: Graph, array: np.ndarray, dtype, quant: QuantParams | None = None) -> Value:
    v = g.add_constant(np.asarray(array, dtype.np_dtype), g.unique_name("c"))
    v.type = TensorType(dtype, v.type.shape, quant)
    return v


def qtype(rng, dtype, shape=None, scale=None) -> TensorType:
    """A per-tensor quantized type with a random zero point."""
    s = float(scale if scale is not None else 2.0 ** rng.uniform(-9, -2))
    if dtype == I16:
        z = int(rng.integers(-50, 50)) if rng.random() < 0.3 else 0
    else:
        z = int(rng.integers(dtype.qmin, dtype.qmax + 1))
    return TensorType(dtype, shape, QuantParams(s, z))


def codes(rng, dtype, shape) -> np.ndarray:
    return rng.integers(dtype.qmin, dtype.qmax + 1, shape).astype(dtype.np_dtype)


def random_attrs(rng) -> dict:
    attrs = {REQUANT: "q31" if rng.random() < 0.5 else "prescale"}
    r = rng.random()
    if r < 0.3:
        attrs[FUSED_CLIP] = [0.0, float("inf")]
    elif r < 0.45:
        attrs[FUSED_CLIP] = [0.0, float(rng.uniform(0.5, 8))]
    return attrs


def conv_bias(g: Graph, rng, tx: TensorType, wq: QuantParams, m: int, bound: int) -> Value:
    """An int32 per-channel bias of `m` codes in [-bound, bound) at scale s_x * s_w."""
    bscale = (np.float64(np.float32(tx.quant.scale)) *
              wq.scale.astype(np.float64)).astype(np.float32)
    return const(g, rng.integers(-bound, bound, m), dtypes.INT32, QuantParams(bscale, 0, axis=0))


def conv_attrs(rng, groups: int, kernel, strides, dilations, pads) -> dict:
    """A Conv's geometry attributes and random_attrs' fused ones."""
    return {"group": groups, "kernel_shape": list(kernel), "strides": list(strides),
            "dilations": list(dilations), "pads": pads, **random_attrs(rng)}


def conv_case(g: Graph, rng, feeds: dict, tag: str) -> Value:
    """A random quantized Conv: shapes, strides, dilations, asymmetric pads, groups (depthwise
    among them), int8/uint8/int16 activations, int8 per-channel or uint8 weights with zero
    points, bias, every output type and both encodings, fused clamps."""
    groups = int(rng.choice([1, 1, 2, 3])) if rng.random() < 0.7 else 0
    cg = int(rng.integers(1, 9)) if groups else 1
    if groups == 0:  # depthwise (channel multiplier 1 or 2)
        groups = int(rng.integers(1, 70))
        mg = int(rng.choice([1, 1, 1, 2]))
    else:
        mg = int(rng.integers(1, 40))
    c, m = cg * groups, mg * groups
    kh, kw = (int(v) for v in rng.integers(1, 6, 2))
    sh, sw = (int(v) for v in rng.integers(1, 4, 2))
    dh, dw = (int(v) for v in rng.choice([1, 1, 1, 2], 2))
    pads = [int(v) for v in rng.integers(0, 3, 4)]
    h = int(rng.integers(max(1, (kh - 1) * dh + 1 - pads[0] - pads[2]), 14))
    w_ = int(rng.integers(max(1, (kw - 1) * dw + 1 - pads[1] - pads[3]), 14))
    n = int(rng.integers(1, 3))
    xdt = rng.choice([I8, I8, U8, I16])
    tx = qtype(rng, xdt, (n, c, h, w_))
    x = g.add_input(f"x_{tag}", tx)
    feeds[x.name] = codes(rng, xdt, (n, c, h, w_))
    unsigned_w = rng.random() < 0.25
    if unsigned_w:
        wdt = U8
        zw = rng.integers(0, 256, m)
        wq = QuantParams(2.0 ** rng.uniform(-9, -4, m), zw, axis=0)
    else:
        wdt = I8
        wq = QuantParams(2.0 ** rng.uniform(-9, -4, m), 0, axis=0)
    wv = const(g, codes(rng, wdt, (m, cg, kh, kw)), wdt, wq)
    inputs = [x, wv]
    if rng.random() < 0.8:
        inputs.append(conv_bias(g, rng, tx, wq, m, 3000))
    attrs = conv_attrs(rng, groups, (kh, kw), (sh, sw), (dh, dw), pads)
    r = rng.random()
    if r < 0.1:
        out = TensorType(dtypes.FLOAT32, None)
        attrs.pop(REQUANT)
    else:
        span = float(tx.quant.scale) * float(np.median(wq.scale)) * 128 * np.sqrt(cg * kh * kw)
        out = qtype(rng, rng.choice([I8, U8, I16]) if r < 0.9 else I16, None,
                    scale=span * 2.0 ** rng.uniform(-9, 0))
    return add_node(g, "Conv", inputs, attrs, out)


def graph_of_cases(seed: int, count: int, case) -> tuple[Graph, dict]:
    """A graph of `count` independent cases drawn by `case(g, rng, feeds, tag)`."""
    rng = np.random.default_rng(seed)
    g = Graph(f"cases{seed}")
    feeds: dict[str, np.ndarray] = {}
    g.outputs = [case(g, rng, feeds, f"{seed}_{i}") for i in range(count)]
    return g, feeds


def _image(g, rng, feeds, tag, dtype=None, shape=None):
    dtype = dtype or rng.choice([I8, I8, U8, I16])
    shape = shape or (int(rng.integers(1, 3)), int(rng.integers(1, 40)),
                      int(rng.integers(1, 12)), int(rng.integers(1, 12)))
    t = qtype(rng, dtype, shape)
    x = g.add_input(f"x_{tag}", t)
    feeds[x.name] = codes(rng, dtype, shape)
    return x, t


def binary_case(g, rng, feeds, tag, shape=None):
    """Add, Sub or Mul of two quantized operands with broadcasting (a constant or a second
    input of fewer or size-1 dimensions), 8- and 16-bit; the first operand's shape `shape` or
    random."""
    op = str(rng.choice(["Add", "Sub", "Mul"]))
    x, tx = _image(g, rng, feeds, tag, shape=shape)
    shape = tx.shape
    r = rng.random()
    if r < 0.3:
        bshape = shape
    elif r < 0.6:
        bshape = (1, shape[1], 1, 1)
    elif r < 0.8:
        bshape = shape[2:] if rng.random() < 0.5 else (shape[3],)
    else:
        bshape = tuple(d if rng.random() < 0.5 else 1 for d in shape)
    bdt = rng.choice([I8, U8, I16])
    tb = qtype(rng, bdt, bshape)
    if rng.random() < 0.4:
        b = const(g, codes(rng, bdt, bshape), bdt, tb.quant)
    else:
        b = g.add_input(f"y_{tag}", tb)
        feeds[b.name] = codes(rng, bdt, bshape)
    operands = [x, b] if rng.random() < 0.7 else [b, x]
    s = float(tx.quant.scale) * (float(tb.quant.scale) * 64 if op == "Mul" else 2)
    out = qtype(rng, rng.choice([I8, U8, I16]), None, scale=s * 2.0 ** rng.uniform(-3, 3))
    return add_node(g, op, operands, random_attrs(rng), out)


def pool_case(g, rng, feeds, tag):
    """AveragePool (windows, strides, pads, ceil mode, counting pads), GlobalAveragePool,
    ReduceMean over the image, MaxPool."""
    x, tx = _image(g, rng, feeds, tag)
    out = qtype(rng, rng.choice([I8, U8, I16]), None,
                scale=float(tx.quant.scale) * 2.0 ** rng.uniform(-2, 2))
    kind = rng.choice(["avg", "avg", "gap", "mean", "max"])
    if kind in ("avg", "max"):
        h, w = tx.shape[2:]
        kh, kw = int(rng.integers(1, min(h, 4) + 1)), int(rng.integers(1, min(w, 4) + 1))
        pads = [int(rng.integers(0, k)) for k in (kh, kw, kh, kw)]
        attrs = {"kernel_shape": [kh, kw], "strides": [int(v) for v in rng.integers(1, 3, 2)],
                 "pads": pads, "ceil_mode": int(rng.random() < 0.3)}
        if kind == "max":
            return add_node(g, "MaxPool", [x], attrs)
        attrs["count_include_pad"] = int(rng.random() < 0.3 and not attrs["ceil_mode"])
        return add_node(g, "AveragePool", [x], {**attrs, **random_attrs(rng)}, out)
    if kind == "gap":
        return add_node(g, "GlobalAveragePool", [x], random_attrs(rng), out)
    axes = const(g, np.array([2, 3]), dtypes.INT64)
    return add_node(g, "ReduceMean", [x, axes], {"keepdims": int(rng.random() < 0.5),
                                                 **random_attrs(rng)}, out)


def convert_case(g, rng, feeds, tag):
    """Quantize (per tensor or per channel, NaN and infinities included), Dequantize,
    Requantize, Relu/Clip on the same or new parameters, lookup tables, Concat."""
    kind = rng.choice(["quantize", "dequantize", "requantize", "clamp", "table", "concat"])
    if kind == "quantize":
        shape = (2, int(rng.integers(1, 20)), int(rng.integers(1, 9)), int(rng.integers(1, 9)))
        x = g.add_input(f"f_{tag}", TensorType(dtypes.FLOAT32, shape))
        data = rng.normal(0, 3, shape).astype(np.float32)
        flat = data.reshape(-1)
        flat[rng.integers(0, flat.size, 3)] = [np.nan, np.inf, -np.inf]
        feeds[x.name] = data
        dt = rng.choice([I8, U8, I16])
        if rng.random() < 0.5:
            q = qtype(rng, dt).quant
        else:
            q = QuantParams(2.0 ** rng.uniform(-8, -2, shape[1]),
                            rng.integers(dt.qmin // 2, dt.qmax // 2, shape[1]), axis=1)
        return add_node(g, "Quantize", [x], {}, TensorType(dt, None, q), domain="lowbit")
    x, tx = _image(g, rng, feeds, tag)
    if kind == "dequantize":
        return add_node(g, "Dequantize", [x], {}, TensorType(dtypes.FLOAT32, None),
                        domain="lowbit")
    new = qtype(rng, rng.choice([I8, U8, I16]), None,
                scale=float(tx.quant.scale) * 2.0 ** rng.uniform(-3, 3))
    if kind == "requantize":
        return add_node(g, "Requantize", [x], {REQUANT: random_attrs(rng)[REQUANT]}, new,
                        domain="lowbit")
    if kind == "clamp":
        same = rng.random() < 0.5
        out = TensorType(tx.dtype, None, tx.quant) if same else new
        # (a quantized Clip's bounds are fused as a clamp by the quantizer; bound inputs would
        # need the input's dtype, so only the unbounded form stands alone)
        return add_node(g, "Relu" if rng.random() < 0.7 else "Clip", [x], {}, out)
    if kind == "table":
        op = str(rng.choice(["Sigmoid", "Tanh", "HardSwish", "Exp", "Abs"]))
        return add_node(g, op, [x], {}, new)
    # concat along channels (or the last axis) of inputs with their own parameters
    axis = int(rng.choice([1, 3]))
    parts = [x]
    for i in range(int(rng.integers(1, 3))):
        shape = list(tx.shape)
        shape[axis] = int(rng.integers(1, 9))
        y, _ = _image(g, rng, feeds, f"{tag}_{i}", dtype=tx.dtype if rng.random() < 0.5 else
                      None, shape=tuple(shape))
        parts.append(y)
    out = qtype(rng, tx.dtype, None, scale=float(tx.quant.scale))
    if rng.random() < 0.3:
        out = TensorType(tx.dtype, None, tx.quant)
    return add_node(g, "Concat", parts, {"axis": axis}, out)


def product_case(g, rng, feeds, tag):
    """Gemm (transB or not, bias) and MatMul with constant weights, 8- and 16-bit inputs."""
    m, k, n = int(rng.integers(1, 20)), int(rng.integers(1, 300)), int(rng.integers(1, 70))
    xdt = rng.choice([I8, U8, U8, I16])
    tx = qtype(rng, xdt, (m, k))
    x = g.add_input(f"x_{tag}", tx)
    feeds[x.name] = codes(rng, xdt, (m, k))
    wq = QuantParams(2.0 ** rng.uniform(-9, -4, n), 0, axis=0)
    span = float(tx.quant.scale) * float(np.median(wq.scale)) * 128 * np.sqrt(k)
    out = qtype(rng, rng.choice([I8, U8, I16]), None, scale=span * 2.0 ** rng.uniform(-6, 0))
    if rng.random() < 0.15:
        out = TensorType(dtypes.FLOAT32, None)
    attrs = random_attrs(rng) if out.quant is not None else {}
    if rng.random() < 0.5:
        trans = int(rng.random() < 0.7)
        wcodes = codes(rng, I8, (n, k) if trans else (k, n))
        wq = QuantParams(wq.scale, 0, axis=0 if trans else 1)
        w = const(g, wcodes, I8, wq)
        inputs = [x, w]
        if rng.random() < 0.7:
            bscale = (np.float64(np.float32(tx.quant.scale)) *
                      wq.scale.astype(np.float64)).astype(np.float32)
            inputs.append(const(g, rng.integers(-5000, 5000, n), dtypes.INT32,
                                QuantParams(bscale, 0, axis=0)))
        return add_node(g, "Gemm", inputs, {"transB": trans, **attrs}, out)
    w = const(g, codes(rng, I8, (k, n)), I8, QuantParams(wq.scale, 0, axis=1))
    return add_node(g, "MatMul", [x, w], attrs, out)


def large_binary_case(g, rng, feeds, tag):
    """binary_case on images of a batch of 1 and up to 77k elements (rows the kernels cut in
    pieces for the threads)."""
    shape = (1, int(rng.integers(8, 48)), int(rng.integers(16, 40)), int(rng.integers(16, 40)))
    return binary_case(g, rng, feeds, tag, shape=shape)


def eight_bit_add_case(g, rng, feeds, tag):
    """Add or Sub of two 8-bit images of the same shape into an 8-bit result (the table form
    of codegen/add_linear.py), odd lengths (the kernels' 32-code tails), scale ratios both
    ways, extreme zero points and codes, fused clips, both requantization encodings."""
    op = str(rng.choice(["Add", "Sub"]))
    shape = (1, int(rng.integers(1, 9)), int(rng.integers(1, 40)), int(rng.integers(1, 41)))
    x, tx = _image(g, rng, feeds, tag, dtype=rng.choice([I8, U8]), shape=shape)
    bdt = rng.choice([I8, U8])
    tb = qtype(rng, bdt, shape, scale=float(tx.quant.scale) * 2.0 ** rng.uniform(-4, 4))
    b = g.add_input(f"y_{tag}", tb)
    feeds[b.name] = codes(rng, bdt, shape)
    for v in (x, b):  # the extreme codes in every image
        flat = feeds[v.name].reshape(-1)
        flat[: min(2, flat.size)] = [v.type.dtype.qmin, v.type.dtype.qmax][: min(2, flat.size)]
    s = max(float(tx.quant.scale), float(tb.quant.scale)) * 2
    out = qtype(rng, rng.choice([I8, U8]), None, scale=s * 2.0 ** rng.uniform(-3, 3))
    return add_node(g, op, [x, b] if rng.random() < 0.5 else [b, x], random_attrs(rng), out)


def constant_operand_case(g, rng, feeds, tag):
    """Add, Sub or Mul of a large image (batch 1) and a constant scalar or per-channel
    operand, either side (PP-OCR's learnable affine blocks: the kernels turn rows of an 8-bit
    image into a 256-entry table per constant code), 8- and 16-bit constants and results."""
    op = str(rng.choice(["Add", "Sub", "Mul"]))
    shape = (1, int(rng.integers(1, 6)), int(rng.integers(24, 48)), int(rng.integers(40, 64)))
    x, tx = _image(g, rng, feeds, tag, dtype=rng.choice([I8, U8, I16]), shape=shape)
    bshape = (1,) if rng.random() < 0.5 else (1, shape[1], 1, 1)
    bdt = rng.choice([I8, U8, I16])
    tb = qtype(rng, bdt, bshape)
    b = const(g, codes(rng, bdt, bshape), bdt, tb.quant)
    operands = [x, b] if rng.random() < 0.5 else [b, x]
    s = float(tx.quant.scale) * (float(tb.quant.scale) * 64 if op == "Mul" else 2)
    out = qtype(rng, rng.choice([I8, U8, I16]), None, scale=s * 2.0 ** rng.uniform(-3, 3))
    return add_node(g, op, operands, random_attrs(rng), out)


def unary_chain_case(g, rng, feeds, tag):
    """A chain of 1 to 4 quantized functions of one tensor's codes (lookup-table ops, Add,
    Sub or Mul of a one-element constant on either side, Relu on the same or new parameters)
    from an 8- or 16-bit input, each of any 8- or 16-bit type (the code generator computes
    such a chain as one table); sometimes a value inside the chain is read again at the end
    (an Add of it to the chain's result: the chain must stop there)."""
    x, tx = _image(g, rng, feeds, tag, dtype=rng.choice([I8, U8, I16]))
    values, cur, t = [], x, tx
    for _ in range(int(rng.integers(1, 5))):
        kind = str(rng.choice(["table", "binary", "binary", "relu"]))
        new = qtype(rng, rng.choice([I8, U8, I16]), None,
                    scale=float(t.quant.scale) * 2.0 ** rng.uniform(-2, 2))
        if kind == "table":
            op = str(rng.choice(["Sigmoid", "Tanh", "HardSwish", "Abs"]))
            cur = add_node(g, op, [cur], {}, new)
        elif kind == "relu":
            out = TensorType(t.dtype, None, t.quant) if rng.random() < 0.5 else new
            cur = add_node(g, "Relu", [cur], {}, out)
        else:
            op = str(rng.choice(["Add", "Sub", "Mul"]))
            cdt = rng.choice([I8, U8, I16])
            tc = qtype(rng, cdt, (1,) if rng.random() < 0.5 else (1, 1, 1, 1))
            c = const(g, codes(rng, cdt, tc.shape), cdt, tc.quant)
            s = float(t.quant.scale) * (float(tc.quant.scale) * 64 if op == "Mul" else 2)
            out = qtype(rng, rng.choice([I8, U8, I16]), None, scale=s * 2.0 ** rng.uniform(-2, 2))
            cur = add_node(g, op, [cur, c] if rng.random() < 0.6 else [c, cur],
                           random_attrs(rng), out)
        t = cur.type
        values.append(cur)
    if len(values) > 1 and rng.random() < 0.25:
        mid = values[int(rng.integers(0, len(values) - 1))]
        out = qtype(rng, I16, None, scale=float(t.quant.scale) * 4)
        cur = add_node(g, "Add", [cur, mid], random_attrs(rng), out)
    return cur


def float_binary_case(g, rng, feeds, tag):
    """Float Add, Sub, Mul or Div, same shapes or broadcast, small and large (batch 1)."""
    op = str(rng.choice(["Add", "Sub", "Mul", "Div"]))
    shape = (1, int(rng.integers(1, 40)), int(rng.integers(1, 64)), int(rng.integers(1, 64)))
    x = g.add_input(f"x_{tag}", TensorType(dtypes.FLOAT32, shape))
    feeds[x.name] = rng.standard_normal(shape).astype(np.float32)
    bshape = shape if rng.random() < 0.5 else (1, shape[1], 1, 1)
    y = g.add_input(f"y_{tag}", TensorType(dtypes.FLOAT32, bshape))
    feeds[y.name] = (rng.standard_normal(bshape) + 3).astype(np.float32)
    return add_node(g, op, [x, y])


def transpose_case(g, rng, feeds, tag):
    """A Transpose of 2 to 5 axes, the first of size 1 to 3 (layout copies at batch 1)."""
    nd = int(rng.integers(2, 6))
    shape = (int(rng.integers(1, 4)),) + tuple(int(rng.integers(1, 12)) for _ in range(nd - 1))
    dt = rng.choice([U8, I16, dtypes.FLOAT32])
    x = g.add_input(f"x_{tag}", TensorType(dt, shape))
    feeds[x.name] = (rng.standard_normal(shape) * 50).astype(dt.np_dtype)
    return add_node(g, "Transpose", [x], {"perm": [int(i) for i in rng.permutation(nd)]})


def assert_bit_exact_on_every_isa(g: Graph, feeds: dict):
    """Compile `g` for each ISA path, run it on `feeds` and assert every output equals the
    reference interpreter's bit for bit (amx too, whose int8 products run on AMX tiles); the
    last ISA's executable is returned."""
    from cpu_kernels import PRODUCT_ISAS

    import lowbit
    from lowbit.backends import cpu

    ref = lowbit.run(g, feeds)
    exe = None
    for isa in PRODUCT_ISAS:
        exe = cpu.compile(g, isa=isa)
        got = exe(feeds)
        for name, want in ref.items():
            np.testing.assert_array_equal(got[name], want, err_msg=f"{name} on {isa}")
    return exe


def depth_to_space_case(g, rng, feeds, tag):
    """A DepthToSpace (DCR mostly, CRD) of blocks 2 to 4 over 1 to 30 channels a block (1: a
    ConvTranspose of one output channel, as PP-OCR det's last), of 8-bit or 16-bit codes or
    floats."""
    b, m = int(rng.integers(2, 5)), int(rng.choice([1, 1, 2, 3, 8, 24, int(rng.integers(1, 31))]))
    shape = (int(rng.integers(1, 3)), b * b * m, int(rng.integers(1, 9)),
             int(rng.integers(1, 9)))
    mode = "DCR" if rng.random() < 0.75 else "CRD"
    attrs = {"blocksize": b, "mode": mode}
    if rng.random() < 0.25:
        x = g.add_input(f"x_{tag}", TensorType(dtypes.FLOAT32, shape))
        feeds[x.name] = rng.standard_normal(shape).astype(np.float32)
        return add_node(g, "DepthToSpace", [x], attrs)
    x, t = _image(g, rng, feeds, tag, shape=shape)
    return add_node(g, "DepthToSpace", [x], attrs, out=t)
