"""Statically quantized transformer ops over a run-time batch and sequence length: random
quantized products of activations (attention's Q K^T, whose column count is the sequence
length, and P V, whose reduction is), products with constant weights, Quantize, Requantize,
Add with a broadcast bias and lookup tables, on inputs of shape [B, ..., S, ...]. One compiled
program serves every (B, S); each is checked against the reference bit for bit on every ISA
path, at lengths around the kernels' blocks of 4 and 16."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_graphs import I8, I16, U8, add_node, codes, const, qtype, random_attrs
from cpu_kernels import ISAS

import lowbit
from lowbit.backends import cpu
from lowbit.errors import InputError
from lowbit.ir import dtypes
from lowbit.ir.attrs import REQUANT
from lowbit.ir.graph import Graph
from lowbit.ir.types import QuantParams, TensorType

SIZES = [(1, 1), (2, 3), (1, 15), (1, 16), (3, 17), (1, 33), (2, 40)]
"""(batch, sequence length) pairs every graph runs at."""


def _input(g: Graph, rng, inputs: dict, tag: str, dims: tuple, dtype=None):
    """An input of symbolic shape `dims` ("B", "S" and ints); its codes are drawn per size."""
    dtype = dtype or rng.choice([I8, U8, U8, I16])
    t = qtype(rng, dtype, dims)
    x = g.add_input(f"x_{tag}", t)
    inputs[x.name] = (dtype, dims)
    return x, t


def _output_type(rng, scale: float) -> TensorType:
    if rng.random() < 0.15:
        return TensorType(dtypes.FLOAT32, None)
    return qtype(rng, rng.choice([I8, U8, I16]), None, scale=scale * 2.0 ** rng.uniform(-6, 0))


def attention_case(g: Graph, rng, inputs: dict, tag: str, wide: bool = False):
    """Q K^T ([B, h, S, d] x [B, h, d, S]; 8- and 16-bit operands) or P V ([B, h, S, S] x
    [B, h, S, d]; 8-bit operands, or with `wide` 16-bit ones, whose integer parameters depend
    on the reduction size S), zero points, every output type, fused clamps."""
    h, d = int(rng.integers(1, 4)), int(rng.integers(1, 40))
    if not wide and rng.random() < 0.5:
        a, ta = _input(g, rng, inputs, f"{tag}a", ("B", h, "S", d))
        b, tb = _input(g, rng, inputs, f"{tag}b", ("B", h, d, "S"))
        k = d
    else:
        eight = rng.choice([I8, U8])
        a, ta = _input(g, rng, inputs, f"{tag}a", ("B", h, "S", "S"), I16 if wide else eight)
        b, tb = _input(g, rng, inputs, f"{tag}b", ("B", h, "S", d),
                       rng.choice([I8, U8, I16]) if wide else rng.choice([I8, U8]))
        k = 40
    span = float(ta.quant.scale) * float(tb.quant.scale) * 128 * 128 * np.sqrt(k)
    out = _output_type(rng, span)
    return add_node(g, "MatMul", [a, b], random_attrs(rng) if out.quant else {}, out)


def linear_case(g: Graph, rng, inputs: dict, tag: str):
    """[B, S, k] times constant per-channel int8 weights [k, n], then an Add of a constant
    bias [n] (or a MatMul alone)."""
    k, n = int(rng.integers(1, 80)), int(rng.integers(1, 40))
    x, tx = _input(g, rng, inputs, tag, ("B", "S", k), rng.choice([I8, U8]))
    wq = QuantParams(2.0 ** rng.uniform(-9, -4, n), 0, axis=1)
    w = const(g, codes(rng, I8, (k, n)), I8, wq)
    span = float(tx.quant.scale) * float(np.median(wq.scale)) * 128 * np.sqrt(k)
    out = qtype(rng, rng.choice([I8, U8, I16]), None, scale=span * 2.0 ** rng.uniform(-6, 0))
    y = add_node(g, "MatMul", [x, w], random_attrs(rng), out)
    if rng.random() < 0.5:
        return y
    bias = const(g, codes(rng, I8, (n,)), I8, qtype(rng, I8).quant)
    s = float(out.quant.scale) * 2
    return add_node(g, "Add", [y, bias], random_attrs(rng),
                    qtype(rng, rng.choice([I8, U8, I16]), None, scale=s))


def convert_case(g: Graph, rng, inputs: dict, tag: str):
    """Quantize of float [B, S, c], Requantize, a lookup table (Tanh, Sigmoid, Exp) and an Add
    of two [B, S, c] activations."""
    c = int(rng.integers(1, 50))
    kind = rng.choice(["quantize", "requantize", "table", "add"])
    if kind == "quantize":
        x = g.add_input(f"f_{tag}", TensorType(dtypes.FLOAT32, ("B", "S", c)))
        inputs[x.name] = (dtypes.FLOAT32, ("B", "S", c))
        return add_node(g, "Quantize", [x], {}, qtype(rng, rng.choice([I8, U8, I16])),
                        domain="lowbit")
    x, tx = _input(g, rng, inputs, tag, ("B", "S", c))
    new = qtype(rng, rng.choice([I8, U8, I16]), None,
                scale=float(tx.quant.scale) * 2.0 ** rng.uniform(-3, 3))
    if kind == "requantize":
        return add_node(g, "Requantize", [x], {REQUANT: random_attrs(rng)[REQUANT]}, new,
                        domain="lowbit")
    if kind == "table":
        return add_node(g, str(rng.choice(["Tanh", "Sigmoid", "Exp"])), [x], {}, new)
    y, _ = _input(g, rng, inputs, f"{tag}y", ("B", "S", c))
    return add_node(g, "Add", [x, y], random_attrs(rng), new)


def wide_case(g: Graph, rng, inputs: dict, tag: str):
    return attention_case(g, rng, inputs, tag, wide=True)


CASES = {"attention": attention_case, "linear": linear_case, "convert": convert_case,
         "wide": wide_case}


def _feeds(rng, inputs: dict, batch: int, seq: int) -> dict[str, np.ndarray]:
    feeds = {}
    for name, (dtype, dims) in inputs.items():
        shape = tuple({"B": batch, "S": seq}.get(d, d) for d in dims)
        if dtype == dtypes.FLOAT32:
            feeds[name] = rng.normal(0, 3, shape).astype(np.float32)
        else:
            feeds[name] = codes(rng, dtype, shape)
    return feeds


@pytest.mark.parametrize(("kind", "seed"), [(k, s) for k in sorted(CASES)
                                             for s in range(1 if k == "wide" else 3)])
def test_random_static_transformer_ops_at_every_length(kind, seed):
    rng = np.random.default_rng(7000 + 100 * seed + len(kind))
    g = Graph(f"static{kind}{seed}")
    inputs: dict = {}
    g.outputs = [CASES[kind](g, rng, inputs, f"{seed}_{i}") for i in range(24)]
    feeds = [_feeds(rng, inputs, b, s) for b, s in SIZES]
    refs = [lowbit.run(g, f) for f in feeds]
    for isa in ISAS:
        exe = cpu.compile(g, isa=isa, threads=2)
        for (b, s), f, ref in zip(SIZES, feeds, refs, strict=True):
            got = exe(f)
            for name, want in ref.items():
                np.testing.assert_array_equal(got[name], want, err_msg=f"{name} on {isa} at "
                                              f"batch {b}, length {s}")
        # one program for every batch and length; a product of 16-bit activations over a
        # run-time reduction size S: one per length (its integer parameters depend on S)
        lengths = len({s for _, s in SIZES})
        assert len(exe.compiled()) == (lengths if kind == "wide" else 1)


def test_a_reduction_longer_than_its_parameters_allow_is_refused():
    """A product of 8-bit activations over a run-time S: its integer parameters hold for
    S <= 65535 (no narrowing shift); a longer S is refused before anything runs, naming the
    input axis."""
    rng = np.random.default_rng(3)
    g = Graph("long")
    inputs: dict = {}
    a, _ = _input(g, rng, inputs, "a", ("B", 1, 4, "S"), I8)
    b, _ = _input(g, rng, inputs, "b", ("B", 1, "S", 3), U8)
    g.outputs = [add_node(g, "MatMul", [a, b], {}, TensorType(dtypes.FLOAT32, None))]
    exe = cpu.compile(g)
    (compiled,) = exe.compiled()
    (limit,) = [lim for lim in compiled.limits if lim.checked]
    assert limit.most == 65535
    with pytest.raises(InputError) as err:
        exe._dimension_values(compiled, [np.zeros((1, 1, 4, 65536), np.int8),
                                         np.zeros((1, 1, 65536, 3), np.uint8)])
    assert "'x_a' axis 3" in str(err.value) and "65536 is more than" in str(err.value)
    f = _feeds(rng, inputs, 2, 9)
    np.testing.assert_array_equal(exe(f)[g.outputs[0].name], lowbit.run(g, f)[g.outputs[0].name])
