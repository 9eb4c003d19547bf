"""Profiling: which values are observed, save/load keyed by graph hash, refusal of bad data,
flat memory."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pytest

import lowbit
from lowbit.errors import InputError
from lowbit.ir import Graph, TensorType, dtypes
from lowbit.ops import infer_graph
from lowbit.quant.profile import Profile, profile

X = TensorType(dtypes.FLOAT32, ("n", 3, 4))


def small_graph(weight_offset: float = 5.0) -> Graph:
    """x -> Identity -> Dropout -> (y, mask); a float constant w -> Identity -> wy;
    an int constant that is not profiled."""
    g = Graph("small")
    x = g.add_input("x", X)
    w = g.add_constant(np.arange(12, dtype=np.float32).reshape(3, 4) - weight_offset, "w")
    idx = g.add_constant(np.arange(3, dtype=np.int64), "idx")
    a = g.make_node("Identity", [x], name="id").output
    drop = g.make_node("Dropout", [a], name="drop", num_outputs=2,
                      output_names=["y", "mask"])
    wy = g.make_node("Identity", [w], name="wid", output_names=["wy"]).output
    iy = g.make_node("Identity", [idx], name="iid", output_names=["iy"]).output
    g.outputs = [drop.outputs[0], drop.outputs[1], wy, iy]
    infer_graph(g)
    return g


def batches(n: int, shape=(2, 3, 4), seed: int = 0, scale: float = 1.0):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        yield {"x": (rng.normal(size=shape) * scale).astype(np.float32)}


def test_profile_observes_inputs_float_outputs_and_float_constants():
    g = small_graph()
    data = list(batches(5))
    p = profile(g, data, progress=False)
    assert set(p) == {"x", "id_out", "y", "w", "wy"}  # no bool mask, no int constant
    everything = np.concatenate([b["x"] for b in data])
    for name in ("x", "id_out", "y"):
        assert p[name].min == float(everything.min()) and p[name].max == float(everything.max())
        assert p[name].count == everything.size
    assert (p["w"].min, p["w"].max, p["w"].count) == (-5.0, 6.0, 12)
    np.testing.assert_array_equal(p["w"].channel_range(0).min, [-5, -1, 3])
    np.testing.assert_array_equal(p["w"].channel_range(1).max, [3, 4, 5, 6])
    assert p.batches == 5 and p.samples == 10
    assert p.graph_hash == lowbit.ir.hashing.graph_hash(g)


def test_public_entry_point_and_activation_channels():
    g = small_graph()
    p = lowbit.profile(g, batches(3), progress=False, channel_axis=1)
    assert isinstance(p, lowbit.Profile)
    assert p["y"].channel_range(1).min.shape == (3,)


def test_missing_value_is_named():
    p = profile(small_graph(), batches(1), progress=False)
    with pytest.raises(InputError, match="no statistics for value 'conv9'"):
        p["conv9"]


def test_progress_bar_is_drawn(capsys):
    profile(small_graph(), list(batches(3)), progress=True)
    err = capsys.readouterr().err
    assert "profiling" in err and "3/3" in err


def test_save_load_round_trip(tmp_path: Path):
    g = small_graph()
    p = profile(g, batches(4, scale=3.0), progress=False, channel_axis=2)
    path = tmp_path / "profile.yaml"
    p.save(path)
    assert [f.name for f in tmp_path.iterdir()] == ["profile.yaml"]  # no temporary left over
    text = path.read_text()
    assert text.startswith("format: lowbit-profile") and "graph_hash: sha256:" in text
    q = Profile.load(path, g)
    assert (q.graph_hash, q.batches, q.samples, list(q), q.constants) == (
        p.graph_hash, p.batches, p.samples, list(p), {"w"})
    for name in p:
        a, b = p[name], q[name]
        assert (a.count, a.zeros, a.nan, a.posinf, a.neginf, a.min, a.max) == (
            b.count, b.zeros, b.nan, b.posinf, b.neginf, b.min, b.max)
        ha, hb = a.histogram, b.histogram
        assert (ha.exponent, ha.offset) == (hb.exponent, hb.offset)
        np.testing.assert_array_equal(ha.counts, hb.counts)
        assert a.channels.keys() == b.channels.keys()
        for axis in a.channels:
            np.testing.assert_array_equal(a.channels[axis].min, b.channels[axis].min)
            np.testing.assert_array_equal(a.channels[axis].max, b.channels[axis].max)
    # a loaded profile keeps streaming: observing more data re-bins as usual
    q["x"].observe(np.float32([100.0]))
    assert q["x"].histogram.total == p["x"].count + 1


def test_profile_of_another_graph_is_refused(tmp_path: Path):
    path = tmp_path / "p.yaml"
    profile(small_graph(), batches(2), progress=False).save(path)
    other = small_graph(weight_offset=4.0)  # same structure, other weights
    with pytest.raises(InputError, match=r"profile .*p\.yaml was taken on a different graph"):
        Profile.load(path, other)
    loaded = Profile.load(path)
    with pytest.raises(InputError, match="different graph"):
        loaded.check(other)
    loaded.check(small_graph())


def test_load_refuses_files_that_are_not_profiles(tmp_path: Path):
    with pytest.raises(InputError, match="cannot read profile"):
        Profile.load(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("format: [unclosed\n")
    with pytest.raises(InputError, match="not a lowbit profile"):
        Profile.load(bad)
    bad.write_text("a: 1\n")
    with pytest.raises(InputError, match="not a lowbit profile"):
        Profile.load(bad)
    good = tmp_path / "good.yaml"
    profile(small_graph(), batches(1), progress=False).save(good)
    damaged = good.read_text().replace("counts: ", "counts: AAAA", 1)
    bad.write_text(damaged)
    with pytest.raises(InputError, match="damaged lowbit profile"):
        Profile.load(bad)
    bad.write_text(good.read_text().replace("version: 2", "version: 7"))
    with pytest.raises(InputError, match="version 7"):
        Profile.load(bad)


def test_save_into_missing_folder_is_a_clear_error(tmp_path: Path):
    p = profile(small_graph(), batches(1), progress=False)
    with pytest.raises(InputError, match="cannot write"):
        p.save(tmp_path / "nope" / "p.yaml")


# -- bad calibration data -------------------------------------------------------------------------
def good(n: int = 2) -> dict[str, np.ndarray]:
    return {"x": np.zeros((n, 3, 4), np.float32)}


@pytest.mark.parametrize("bad,message", [
    ({"x": np.full((2, 3, 4), np.nan, np.float32)},
     r"calibration batch 1: input 'x' contains 24 NaN and 0 infinite value\(s\) "
     r"\(first at index \(0, 0, 0\)\)"),
    ({"x": np.where(np.arange(24).reshape(2, 3, 4) == 7, np.inf, 0).astype(np.float32)},
     r"calibration batch 1: input 'x' contains 0 NaN and 1 infinite value\(s\) "
     r"\(first at index \(0, 1, 3\)\)"),
    ({"x": np.zeros((2, 3, 5), np.float32)},
     r"calibration batch 1: input 'x' has shape \(2, 3, 5\); the model expects \(n, 3, 4\)"),
    ({"x": np.zeros((2, 3, 4), np.float64)},
     r"calibration batch 1: input 'x' has dtype float64; the model expects float32"),
    ({"x": np.zeros((3, 4), np.float32)}, r"calibration batch 1: input 'x' has shape \(3, 4\)"),
    ({"x": np.zeros((0, 3, 4), np.float32)}, r"calibration batch 1: input 'x' is empty"),
    ({"y": np.zeros((2, 3, 4), np.float32)}, r"calibration batch 1: unknown input\(s\) y"),
    ({}, r"calibration batch 1: missing input\(s\) x"),
    ([np.zeros((2, 3, 4), np.float32)], r"calibration batch 1 is a list; each batch must be a"),
])
def test_bad_batches_are_refused_naming_batch_and_input(bad, message):
    with pytest.raises(InputError, match=message):
        profile(small_graph(), [good(), bad, good()], progress=False)


@pytest.mark.parametrize("empty", [[], (), iter([])])
def test_empty_calibration_set_is_refused(empty):
    with pytest.raises(InputError, match="the calibration set is empty"):
        profile(small_graph(), empty, progress=False)


def test_nonfinite_intermediate_values_are_counted_not_refused():
    """Only the data is refused; a value that becomes non-finite inside the model is recorded
    for the quantizer to report."""
    g = Graph("g")
    x = g.add_input("x", X)
    g.outputs = [g.make_node("Identity", [x], name="id").output]
    infer_graph(g)
    p = profile(g, batches(2), progress=False)
    assert p["id_out"].nonfinite == 0 and p["id_out"].count == 48


# -- memory ---------------------------------------------------------------------------------------
def peak_memory(n_batches: int) -> int:
    g = small_graph()
    tracemalloc.start()
    tracemalloc.reset_peak()
    profile(g, batches(n_batches, shape=(4096, 3, 4), seed=n_batches), progress=False)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


def test_ten_times_more_batches_raise_peak_memory_by_less_than_20_percent():
    peak_memory(2)  # warm up lazy imports and caches
    few, many = peak_memory(8), peak_memory(80)
    assert many < 1.2 * few, (few, many)


def test_merging_profiles_equals_profiling_all_batches():
    g = small_graph()
    data = list(batches(6, scale=2.0))
    first = profile(g, data[:2], progress=False)
    first.merge(profile(g, data[2:], progress=False))
    whole = profile(g, data, progress=False)
    assert (first.batches, first.samples) == (whole.batches, whole.samples)
    assert first.constants == whole.constants == {"w"}
    for name in ("x", "y", "w"):
        np.testing.assert_array_equal(first[name].histogram.counts, whole[name].histogram.counts)
        assert first[name].count == whole[name].count
    with pytest.raises(InputError, match="different graphs"):
        first.merge(profile(small_graph(weight_offset=1.0), data[:1], progress=False))


@pytest.mark.parametrize("failing", [1, 3])
@pytest.mark.parametrize("backend", ["cpu", "reference"])
def test_an_observer_error_names_its_own_batch(monkeypatch, backend, failing):
    """On the cpu backend a batch's statistics are updated while the next batch runs: an
    error of that update must still name its batch (the last one's surfaces after the loop)."""
    from lowbit.quant import observers

    g = Graph("conv")
    x = g.add_input("x", TensorType(dtypes.FLOAT32, ("n", 2, 5, 5)))
    w = g.add_constant(np.ones((3, 2, 1, 1), np.float32), "w")
    g.outputs = [g.make_node("Conv", [x, w], {"group": 1}, name="conv").output]
    infer_graph(g)
    seen: list[int] = []
    original = observers.StatsObserver.observe

    def observe(self, array):
        if self.name == g.outputs[0].name:
            seen.append(1)
            if len(seen) == failing + 1:
                raise InputError("the observer failed")
        return original(self, array)

    monkeypatch.setattr(observers.StatsObserver, "observe", observe)
    monkeypatch.setenv("LOWBIT_THREADS", "2")  # the updates overlap the next batch's run
    with pytest.raises(InputError, match=f"^calibration batch {failing}: the observer failed$"):
        profile(g, batches(4, shape=(2, 2, 5, 5)), progress=False, backend=backend)
