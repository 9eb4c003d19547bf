"""Comparing profiles field by field, bit for bit."""

from __future__ import annotations

import numpy as np

from lowbit.quant.profile import Profile


def differences(a: Profile, b: Profile) -> list[str]:
    """Where two profiles differ (empty when they are equal bit for bit)."""
    out = []
    for key in ("graph_hash", "batches", "samples", "constants"):
        if getattr(a, key) != getattr(b, key):
            out.append(key)
    if set(a.stats) != set(b.stats):
        out.append("values")
    for name in set(a.stats) & set(b.stats):
        x, y = a.stats[name], b.stats[name]
        for key in ("count", "zeros", "nan", "posinf", "neginf", "min", "max"):
            if getattr(x, key) != getattr(y, key):
                out.append(f"{name}.{key}")
        if not _same_histogram(x.histogram, y.histogram):
            out.append(f"{name}.histogram")
        if set(x.channels) != set(y.channels):
            out.append(f"{name}.channels")
        for axis in set(x.channels) & set(y.channels):
            cx, cy = x.channels[axis], y.channels[axis]
            for key in ("min", "max", "sum", "count", "mean"):
                u, v = getattr(cx, key), getattr(cy, key)
                if not np.array_equal(u, v, equal_nan=True):
                    out.append(f"{name}.channels[{axis}].{key}")
    if set(a.moments) != set(b.moments):
        out.append("moments")
    for name in set(a.moments) & set(b.moments):
        if a.moments[name].count != b.moments[name].count or not np.array_equal(
                a.moments[name].correlation(), b.moments[name].correlation()):
            out.append(f"moments[{name}]")
    return out


def _same_histogram(x, y) -> bool:
    if x is None or y is None:
        return x is y
    return (x.offset, x.exponent) == (y.offset, y.exponent) and np.array_equal(x.counts,
                                                                             y.counts)


def same(a: Profile, b: Profile, tmp_path) -> bool:
    """Equal in memory, and saved to the same bytes."""
    assert differences(a, b) == []
    a.save(tmp_path / "a.yaml")
    b.save(tmp_path / "b.yaml")
    return (tmp_path / "a.yaml").read_bytes() == (tmp_path / "b.yaml").read_bytes()
