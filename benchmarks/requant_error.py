"""Measure the error and the overflow edges of the two integer requantization encodings.

For M log-spaced over [1e-6, 1e2] (plus the powers of two in that range) and accumulators drawn
over the whole int32 range (uniformly, around every output value, next to rounding ties, and the
extremes), compare `lowbit.numerics.fixed_point.requantize` with exact real rescaling and print
markdown tables, one per output width. The tables in docs/requantization.md come from this script:

    PYTHONPATH=src python benchmarks/requant_error.py
"""

from __future__ import annotations

import argparse

import numpy as np

from lowbit.numerics import fixed_point as fp

OUTPUTS = {"int8": (-128, 127, 8), "int16": (-32768, 32767, 16)}
EDGES = np.array([fp.INT32_MIN, fp.INT32_MIN + 1, -2, -1, 0, 1, 2, fp.INT32_MAX - 1, fp.INT32_MAX])


def multipliers(count: int) -> np.ndarray:
    powers = np.exp2(np.arange(np.ceil(np.log2(1e-6)), np.floor(np.log2(1e2)) + 1))
    return np.unique(np.concatenate([np.geomspace(1e-6, 1e2, count), powers]))


def accumulators(M: np.ndarray, qmin: int, qmax: int, per_kind: int, rng) -> np.ndarray:
    """One row of int32 accumulators per multiplier."""
    n = len(M)
    col = M[:, None]
    targets = rng.uniform(qmin - 2, qmax + 2, (n, per_kind))
    around = np.rint(targets / col) + rng.integers(-2, 3, (n, per_kind))
    halves = rng.integers(qmin, qmax, (n, per_kind)) + 0.5
    near_ties = np.rint(halves / col) + rng.integers(-1, 2, (n, per_kind))
    uniform = rng.integers(fp.INT32_MIN, fp.INT32_MAX, (n, per_kind), endpoint=True)
    edges = np.broadcast_to(EDGES, (n, EDGES.size))
    rows = np.concatenate([around, near_ties, uniform, edges], axis=1)
    return np.clip(rows, fp.INT32_MIN, fp.INT32_MAX).astype(np.int64)


def measure(
    M: np.ndarray, acc: np.ndarray, method: str, qmin: int, qmax: int, bits: int, random: int
) -> dict:
    """Worst errors over all accumulators; the mismatch rate over the first `random` columns
    (accumulators around uniformly drawn real outputs, i.e. without the deliberate near-ties)."""
    params = fp.encode(M, method, output_bits=bits)
    got = fp.requantize(acc, params, 0, qmin, qmax, axis=0)
    want = fp.requantize_reference(acc, M, 0, qmin, qmax, axis=0)
    exact = acc.astype(np.float64) * M[:, None]
    inside = (exact >= qmin) & (exact <= qmax)
    outside = (exact < qmin - 0.5) | (exact > qmax + 0.5)
    error = np.where(inside, np.abs(got - exact), 0.0)
    return {
        "rel": float(np.max(np.abs(params.effective_multiplier() / M - 1))),
        "ulp": float(np.max(error)),
        "mismatch": float(np.sum((inside & (got != want))[:, :random])
                          / max(np.sum(inside[:, :random]), 1)),
        "wrong_saturation": int(np.sum(outside & (got != want))),
        "wrap": float(np.min(_unguarded_overflow(params, M, qmax))),
    }


def _unguarded_overflow(params: fp.RequantParams, M: np.ndarray, qmax: int) -> np.ndarray:
    """The smallest |acc| at which the expression without lowbit's guard would leave int32
    (TFLite's unsaturated `x * 2**L`, Glow's unclamped product), as a multiple of the |acc| at
    which the output saturates; inf where it cannot happen."""
    saturating = (qmax + 1) / M
    if isinstance(params, fp.Q31Params):
        wraps = np.where(params.left_shift > 0, np.exp2(31.0 - params.left_shift), np.inf)
    else:
        room = 2.0**31 - np.exp2(params.post - 1.0)
        wraps = np.where(params.scale > 0, np.ceil(room / np.maximum(params.scale, 1)), np.inf)
        wraps = wraps * np.exp2(params.pre.astype(np.float64))
    return np.where(wraps > 2.0**31, np.inf, wraps / saturating)


def table(name: str, qmin: int, qmax: int, bits: int, count: int, per_kind: int, seed: int) -> str:
    rng = np.random.default_rng(seed)
    M_all = multipliers(count)
    decades = np.arange(-6, 2)
    head = (
        f"### {name} outputs [{qmin}, {qmax}]\n\n"
        "| M in | method | worst \\|M^/M-1\\| | worst \\|y-xM\\| (ulp) | ≠ half-even (random) | "
        "wrong saturations | unguarded wrap at |\n"
        "|---|---|---|---|---|---|---|\n"
    )
    totals: dict[str, list[dict]] = {m: [] for m in fp.METHODS}
    lines = []
    for d in decades:
        upper = 10.0 ** (d + 1)
        M = M_all[(M_all >= 10.0**d) & ((M_all < upper) | (d == decades[-1]))]
        acc = accumulators(M, qmin, qmax, per_kind, rng)
        for method in fp.METHODS:
            r = measure(M, acc, method, qmin, qmax, bits, per_kind)
            totals[method].append(r)
            lines.append(_row(f"[1e{d}, 1e{d + 1}{']' if d == decades[-1] else ')'}", method, r))
    for method in fp.METHODS:
        rows = totals[method]
        summary = {
            "rel": max(r["rel"] for r in rows),
            "ulp": max(r["ulp"] for r in rows),
            "mismatch": float(np.mean([r["mismatch"] for r in rows])),
            "wrong_saturation": sum(r["wrong_saturation"] for r in rows),
            "wrap": min(r["wrap"] for r in rows),
        }
        lines.append(_row("**all**", method, summary))
    return head + "\n".join(lines) + "\n"


def _row(label: str, method: str, r: dict) -> str:
    wrap = "never" if np.isinf(r["wrap"]) else f"{r['wrap']:.3g}× saturation"
    return (
        f"| {label} | {method} | {r['rel']:.2e} | {r['ulp']:.4f} | {100 * r['mismatch']:.3f} % | "
        f"{r['wrong_saturation']} | {wrap} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--multipliers", type=int, default=801, help="log-spaced M values")
    parser.add_argument("--samples", type=int, default=1500,
                        help="accumulators per kind (around outputs, near ties, uniform) per M")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for name, (qmin, qmax, bits) in OUTPUTS.items():
        print(table(name, qmin, qmax, bits, args.multipliers, args.samples, args.seed))


if __name__ == "__main__":
    main()
