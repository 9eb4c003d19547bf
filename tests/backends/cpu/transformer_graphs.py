"""Random graphs of transformer ops for the cpu backend's property tests: dynamic quantization
and dynamic products in every granularity, and the float ops around them. Many independent
cases per graph, so that one compile covers dozens of shapes."""

from __future__ import annotations

import numpy as np

from lowbit.ir import dtypes
from lowbit.ir.graph import Graph, Value
from lowbit.ir.types import QuantParams, TensorType
from lowbit.ops import get, infer_node
from lowbit.ops.registry import QUANT_DOMAIN, REQUIRED

F32, I8, U8, I64 = dtypes.FLOAT32, dtypes.INT8, dtypes.UINT8, dtypes.INT64


def node_outputs(g: Graph, op_type: str, inputs: list, attrs: dict | None = None,
                 domain: str = "", outputs: int = 1) -> list[Value]:
    """A node with its default attributes and every output typed by inference."""
    full = {k: a.default for k, a in get(op_type, domain).all_attrs().items()
            if a.default is not None and a.default is not REQUIRED}
    full.update(attrs or {})
    node = g.make_node(op_type, inputs, full, domain=domain, num_outputs=outputs)
    for v, t in zip(node.outputs, infer_node(node), strict=True):
        v.type = t
    return list(node.outputs)


def const(g: Graph, array: np.ndarray, dtype=None, quant: QuantParams | None = None) -> Value:
    array = np.asarray(array)
    v = g.add_constant(array, g.unique_name("c"))
    if dtype is not None or quant is not None:
        v.type = TensorType(dtype or v.type.dtype, v.type.shape, quant)
    return v


def activations(rng, shape) -> np.ndarray:
    """Float activations as transformers make them: mostly small, a few outlier channels, some
    all-zero rows, now and then exact zeros."""
    x = rng.standard_normal(shape).astype(np.float32) * np.float32(rng.uniform(0.1, 3))
    if len(shape) and shape[-1] > 2 and rng.random() < 0.5:
        ch = rng.integers(0, shape[-1], 2)
        x[..., ch] *= np.float32(rng.uniform(5, 40))
    if x.ndim >= 2 and rng.random() < 0.3:
        x.reshape(-1, shape[-1])[0] = 0
    if rng.random() < 0.2:
        x[rng.random(shape) < 0.1] = 0
    return x


def float_input(g: Graph, rng, feeds: dict, tag: str, shape) -> Value:
    x = g.add_input(f"x_{tag}", TensorType(F32, tuple(shape)))
    feeds[x.name] = activations(rng, tuple(shape))
    return x


def dynamic_product_case(g: Graph, rng, feeds: dict, tag: str) -> Value:
    """DynamicQuantize of a float input and a DynamicMatMul with: grouped int8/uint8 weights
    with zero points (groups of 4 to 128, and sizes the vector kernels leave to the portable
    one), weights quantized in their type per tensor or per channel, or a second dynamically
    quantized input (attention's Q.K^T and P.V); A per row, per group, per head or per tensor,
    asymmetric or symmetric, with a channel scale now and then; odd K, N and M; a bias."""
    batch = [int(v) for v in rng.integers(1, 4, int(rng.integers(0, 3)))]
    m = int(rng.integers(1, 20))
    k = int(rng.choice([int(rng.integers(1, 100)), 32, 64, 96, 160, 384]))
    n = int(rng.choice([int(rng.integers(1, 70)), 16, 32, 48, 384]))
    mode = str(rng.choice(["grouped", "grouped", "static", "runtime"]))
    group = 0
    if mode in ("grouped", "runtime") and rng.random() < 0.8:
        group = int(rng.choice([32, 32, 16, 8, 64, 128, 12, 20]))
    x = float_input(g, rng, feeds, tag, (*batch, m, k))
    rank = len(batch) + 2
    symmetric = int(rng.random() < 0.2)
    attrs = {"symmetric": symmetric, "reduce_range": int(rng.random() < 0.2)}
    cs = None
    if group:
        attrs.update(axes=[rank - 1], group_size=group)
    else:
        r = rng.random()
        attrs["axes"] = [rank - 1] if r < 0.5 else (list(range(rank)) if r < 0.75 else
                                                     [rank - 2, rank - 1])
    if attrs["axes"] == [rank - 1] and rng.random() < 0.3:
        cs = const(g, rng.uniform(0.5, 3, k).astype(np.float32))
    qa, sa, za = node_outputs(g, "DynamicQuantize", [x, cs], attrs, QUANT_DOMAIN, 3)
    if mode == "runtime":
        y = float_input(g, rng, feeds, tag + "b", (*batch, k, n))
        b_attrs = {"symmetric": int(rng.random() < 0.2), "axes": [rank - 2]}
        if group:
            b_attrs["group_size"] = group
        elif rng.random() < 0.3:
            b_attrs["axes"] = list(range(rank))
        qb, sb, zb = node_outputs(g, "DynamicQuantize", [y], b_attrs, QUANT_DOMAIN, 3)
        inputs = [qa, sa, za, qb, sb, zb]
    elif mode == "grouped" or group:
        G = -(-k // group) if group else 1
        dt = I8 if rng.random() < 0.7 else U8
        w = rng.integers(dt.qmin, dt.qmax + 1, (k, n)).astype(dt.np_dtype)
        zero = (rng.integers(-8, 8, (G, n)) if dt == I8 else rng.integers(120, 136, (G, n)))
        if rng.random() < 0.5:
            zero = np.zeros((G, n), np.int64) + (0 if dt == I8 else 128)
        scale = (2.0 ** rng.uniform(-10, -4, (G, n))).astype(np.float32)
        inputs = [qa, sa, za, const(g, w, dt), const(g, scale, F32),
                  const(g, zero.astype(dt.np_dtype), dt)]
    else:
        dt = I8 if rng.random() < 0.7 else U8
        w = rng.integers(dt.qmin, dt.qmax + 1, (k, n)).astype(dt.np_dtype)
        if rng.random() < 0.5:
            q = QuantParams((2.0 ** rng.uniform(-10, -4, n)).astype(np.float32),
                            rng.integers(-5, 5, n) + (0 if dt == I8 else 128), axis=1)
        else:
            q = QuantParams(float(2.0 ** rng.uniform(-10, -4)),
                            int(rng.integers(-5, 5)) + (0 if dt == I8 else 128))
        inputs = [qa, sa, za, const(g, w, dt, q)]
    if rng.random() < 0.3:
        while len(inputs) < 6:
            inputs.append(None)
        inputs.append(const(g, rng.standard_normal(n).astype(np.float32)))
    return node_outputs(g, "DynamicMatMul", inputs, {"group_size": group}, QUANT_DOMAIN)[0]


def float_case(g: Graph, rng, feeds: dict, tag: str) -> Value:
    """LayerNormalization, Softmax (rows with -inf and very negative masks, NaN), Gelu (both
    forms, extreme values), elementwise ops with broadcasting, Where, Gather of rows."""
    kind = str(rng.choice(["layernorm", "softmax", "gelu", "binary", "where", "gather"]))
    rows = [int(v) for v in rng.integers(1, 5, int(rng.integers(1, 3)))]
    n = int(rng.choice([int(rng.integers(1, 70)), 384, 512, 1536]))
    if kind == "layernorm":
        x = float_input(g, rng, feeds, tag, (*rows, n))
        feeds[x.name] = feeds[x.name] + np.float32(rng.uniform(-3, 3))
        gamma = const(g, rng.uniform(0.2, 2, n).astype(np.float32))
        beta = const(g, rng.standard_normal(n).astype(np.float32))
        eps = float(np.float32(rng.choice([1e-12, 1e-5])))
        return node_outputs(g, "LayerNormalization", [x, gamma, beta],
                            {"axis": -1, "epsilon": eps})[0]
    if kind == "softmax":
        x = float_input(g, rng, feeds, tag, (*rows, n))
        a = feeds[x.name] * np.float32(rng.uniform(1, 30))
        mask = rng.random(a.shape) < 0.2
        a[mask] = np.float32(-np.inf) if rng.random() < 0.5 else np.float32(-3.4e38)
        if rng.random() < 0.2:
            a.reshape(-1, n)[-1, int(rng.integers(n))] = np.nan
        feeds[x.name] = a
        if rng.random() < 0.5:  # a classifier head's bias first (fused: lb_softmax_bias)
            bias = const(g, activations(rng, (n,)) * np.float32(rng.uniform(1, 10)))
            x = node_outputs(g, "Add", [x, bias] if rng.random() < 0.5 else [bias, x])[0]
            if len(rows) > 1 and rng.random() < 0.5:  # the same rows, regrouped
                x = node_outputs(g, "Flatten", [x], {"axis": len(rows)})[0]
        return node_outputs(g, "Softmax", [x], {"axis": -1})[0]
    if kind == "gelu":
        x = float_input(g, rng, feeds, tag, (*rows, n))
        a = feeds[x.name] * np.float32(rng.uniform(1, 6))
        flat = a.reshape(-1)
        picks = rng.integers(0, flat.size, min(flat.size, 6))
        flat[picks] = np.array([np.nan, np.inf, -np.inf, -30, 30, -9.5], np.float32)[
            :len(picks)]
        feeds[x.name] = a
        mode = "tanh" if rng.random() < 0.3 else "none"
        return node_outputs(g, "Gelu", [x], {"approximate": mode})[0]
    if kind == "binary":
        op = str(rng.choice(["Add", "Sub", "Mul", "Div", "Max", "Min"]))
        x = float_input(g, rng, feeds, tag, (*rows, n))
        r = rng.random()
        shape = (n,) if r < 0.4 else ((*rows[:-1], 1, n) if r < 0.7 else (*rows, n))
        if r < 0.4:
            other = const(g, activations(rng, shape) + np.float32(0.5))
        else:
            other = float_input(g, rng, feeds, tag + "b", shape)
        return node_outputs(g, op, [x, other])[0]
    if kind == "where":
        cond = g.add_input(f"c_{tag}", TensorType(dtypes.BOOL, (rows[0], 1, n)))
        feeds[cond.name] = rng.random((rows[0], 1, n)) < 0.5
        a = const(g, np.float32(0))
        b = const(g, np.float32(np.finfo(np.float32).min))
        return node_outputs(g, "Where", [cond, a, b])[0]
    vocab = int(rng.integers(1, 300))
    table = const(g, rng.standard_normal((vocab, n)).astype(np.float32))
    ids = g.add_input(f"i_{tag}", TensorType(I64, tuple(rows)))
    feeds[ids.name] = rng.integers(-vocab, vocab, rows).astype(np.int64)
    return node_outputs(g, "Gather", [table, ids], {"axis": 0})[0]


def float_matmul_case(g: Graph, rng, feeds: dict, tag: str) -> Value:
    """A float MatMul of two activations (attention's products in a file quantized by ONNX
    Runtime): odd M, N and K, a batch of 1 to 3 matrices, B shared by the batch now and then."""
    m, k, n = (int(v) for v in rng.integers(1, 40, 3))
    if rng.random() < 0.3:
        m, n = m + 96, n + 100
    lead = [int(rng.integers(1, 4))] if rng.random() < 0.8 else []
    a = float_input(g, rng, feeds, tag, (*lead, m, k))
    b_lead = [1] if lead and rng.random() < 0.3 else lead
    b = float_input(g, rng, feeds, tag + "b", (*b_lead, k, n))
    return node_outputs(g, "MatMul", [a, b])[0]


def float_attention_case(g: Graph, rng, feeds: dict, tag: str) -> Value:
    """Multi-head attention in float32 as exporters write it (imported quantized models keep
    it so): Reshape + Transpose of Q, K and V rows, MatMul, a scalar Mul or Div (either operand
    order for Mul) or none, a mask Add of a broadcast shape (zeros, large negatives, -inf) or
    none, Softmax, MatMul with V, Transpose and Reshape back. Odd head sizes and lengths; K is
    Q's rows now and then."""
    b, s, h = int(rng.integers(1, 4)), int(rng.integers(1, 50)), int(rng.integers(1, 5))
    if rng.random() < 0.2:
        s += int(rng.integers(60, 140))
    d = int(rng.choice([1, 3, 8, 16, 17, 32, 40]))
    srcs = [float_input(g, rng, feeds, f"{tag}{c}", (b, s, h * d)) for c in "qkv"]
    if rng.random() < 0.2:
        srcs[1] = srcs[0]

    q, k, v = split_heads(g, srcs, (b, s, h, d))
    y = node_outputs(g, "MatMul", [q, k])[0]
    choice = rng.random()
    scale = const(g, np.float32(rng.choice([1 / np.sqrt(d), 0.125, 3.0])))
    if choice < 0.4:
        y = node_outputs(g, "Mul", [y, scale] if rng.random() < 0.7 else [scale, y])[0]
    elif choice < 0.7:
        y = node_outputs(g, "Div", [y, scale])[0]
    if rng.random() < 0.7:
        shape = [(b, 1, s, s), (b, 1, 1, s), (1, 1, s, s), (b, h, s, s), (s, s)][
            int(rng.integers(0, 5))]
        mask = g.add_input(f"m_{tag}", TensorType(F32, shape))
        fill = np.float32(rng.choice([-np.inf, np.finfo(np.float32).min, -1e4]))
        feeds[mask.name] = np.where(rng.random(shape) < 0.3, fill, 0).astype(np.float32)
        y = node_outputs(g, "Add", [y, mask] if rng.random() < 0.7 else [mask, y])[0]
    return merge_heads(g, y, v, (b, s, h, d))


def split_heads(g: Graph, srcs: list[Value], dims: tuple[int, int, int, int]
                ) -> tuple[Value, Value, Value]:
    """Q, K^T and V per head ([b, h, s, d], [b, h, d, s], [b, h, s, d]) of rows [b, s, h * d],
    by Reshape + Transpose as exporters write them."""
    b, s, h, d = dims

    def heads(x: Value, perm: list[int]) -> Value:
        split = node_outputs(g, "Reshape", [x, const(g, np.array([b, s, h, d], np.int64))])[0]
        return node_outputs(g, "Transpose", [split], {"perm": perm})[0]

    return heads(srcs[0], [0, 2, 1, 3]), heads(srcs[1], [0, 2, 3, 1]), \
        heads(srcs[2], [0, 2, 1, 3])


def merge_heads(g: Graph, scores: Value, v: Value, dims: tuple[int, int, int, int]) -> Value:
    """Softmax of the scores, times V, back to rows [b, s, h * d] (Transpose + Reshape)."""
    b, s, h, d = dims
    p = node_outputs(g, "Softmax", [scores], {"axis": -1})[0]
    o = node_outputs(g, "MatMul", [p, v])[0]
    o = node_outputs(g, "Transpose", [o], {"perm": [0, 2, 1, 3]})[0]
    return node_outputs(g, "Reshape", [o, const(g, np.array([b, s, h * d], np.int64))])[0]


def graph_of_cases(seed: int, count: int, case) -> tuple[Graph, dict]:
    """A graph of `count` independent cases drawn by `case(g, rng, feeds, tag)`."""
    rng = np.random.default_rng(seed)
    g = Graph(f"tcases{seed}")
    feeds: dict[str, np.ndarray] = {}
    g.outputs = [case(g, rng, feeds, f"{seed}_{i}") for i in range(count)]
    return g, feeds
