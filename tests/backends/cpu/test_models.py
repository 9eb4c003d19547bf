"""Whole models on the cpu backend against the reference interpreter: integer outputs equal to
the bit, float outputs within float rounding, on every ISA path this CPU has, at several batch
sizes of one compiled program."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_kernels import ISAS
from shared_profiles import shared_profile

import lowbit
from lowbit.backends import cpu
from lowbit.cli.demo import bundled
from lowbit.errors import InputError, UnsupportedError
from lowbit.ir import dtypes
from lowbit.ir.graph import Graph
from lowbit.ir.types import TensorType
from lowbit.quant.static import quantize


@pytest.fixture(scope="module")
def mnist():
    """MNISTNet float and int8, calibrated as `lowbit demo` does, and held-out digits."""
    graph = lowbit.load(bundled("mnistnet.onnx"))
    with np.load(bundled("digits.npz")) as data:
        images = data["images"]
    prof = shared_profile(graph, [{"input": images[i:i + 50]} for i in range(0, 200, 50)])
    return graph, quantize(graph, prof).graph, images[200:]


@pytest.mark.parametrize("isa", ISAS)
def test_mnistnet_int8_is_bit_exact_on_every_path(mnist, isa):
    _, q, images = mnist
    exe = cpu.compile(q, isa=isa, threads=2)
    assert exe.isa == isa
    for batch in (1, 3, 64):
        x = images[:batch]
        ref = lowbit.run(q, {"input": x})["logits"]
        got = exe({"input": x})["logits"]
        assert got.dtype == ref.dtype and got.shape == ref.shape
        np.testing.assert_array_equal(got, ref)
    assert len(exe.compiled()) == 1  # one program for every batch size
    # the flattened NHWC image feeds the Gemm as it is (its weights reordered)
    assert not any("layout" in s for s in exe.compiled()[0].steps)


@pytest.mark.parametrize("isa", ISAS)
def test_mnistnet_float_matches_the_reference(mnist, isa):
    graph, _, images = mnist
    exe = cpu.compile(graph, isa=isa)
    x = images[:16]
    ref = lowbit.run(graph, {"input": x})["logits"]
    np.testing.assert_allclose(exe({"input": x})["logits"], ref, rtol=1e-5, atol=1e-6)


def test_lowbit_compile_and_run_take_the_cpu_backend(mnist):
    _, q, images = mnist
    x = images[:5]
    ref = lowbit.run(q, {"input": x})
    exe = lowbit.compile(q, backend="cpu")
    assert isinstance(exe, cpu.CpuExecutable)
    np.testing.assert_array_equal(lowbit.run(q, {"input": x}, backend="cpu")["logits"],
                                  ref["logits"])


def test_bad_inputs_name_the_input(mnist):
    _, q, images = mnist
    exe = cpu.compile(q)
    exe({"input": images[:2]})  # a good call first: later calls of its shapes take a short cut
    with pytest.raises(InputError, match="input 'input' has dtype float64"):
        exe({"input": images[:2].astype(np.float64)})
    with pytest.raises(InputError, match="input 'input' has shape"):
        exe({"input": images[:2, :, :27]})
    with pytest.raises(InputError, match="missing input"):
        exe({})
    with pytest.raises(InputError, match="unknown input"):
        exe({"input": images[:2], "other": images[:2]})


def test_repeated_calls_return_new_arrays_and_follow_their_inputs(mnist):
    """Calls with the previous call's input shapes reuse its plan (executable._FastCall): each
    returns its own output arrays, reads the arrays it is given (strided ones too), and a
    call of another shape in between changes nothing."""
    _, q, images = mnist
    exe = cpu.compile(q)
    refs = [lowbit.run(q, {"input": images[i:i + 2]})["logits"] for i in range(3)]
    first = exe({"input": images[0:2]})["logits"]
    second = exe({"input": images[1:3]})["logits"]
    assert first is not second
    np.testing.assert_array_equal(first, refs[0])
    np.testing.assert_array_equal(second, refs[1])
    exe({"input": images[:5]})
    strided = np.repeat(images[2:4], 2, axis=3)[:, :, :, ::2]
    assert not strided.flags.c_contiguous
    np.testing.assert_array_equal(exe({"input": strided})["logits"], refs[2])
    np.testing.assert_array_equal(exe({"input": images[2:4]})["logits"], refs[2])
    np.testing.assert_array_equal(first, refs[0])


def test_a_short_cut_call_survives_the_arena_growing_under_it(mnist):
    """`profile` of a larger batch grows the arena without replacing the short cut of the
    last call; the short cut holds its own arena, so it never writes into freed memory."""
    _, q, images = mnist
    exe = cpu.compile(q)
    ref = lowbit.run(q, {"input": images[0:1]})["logits"]
    exe({"input": images[0:1]})
    before = exe._fast
    exe.profile({"input": np.repeat(images[:8], 64, axis=0)}, runs=1)
    assert exe._fast is before and exe._fast.arena is not exe._arena
    np.testing.assert_array_equal(exe({"input": images[0:1]})["logits"], ref)


def test_an_op_without_a_kernel_is_refused_at_compile_time():
    g = Graph("g")
    x = g.add_input("x", TensorType(dtypes.FLOAT32, (2, 3)))
    node = g.make_node("Hardmax", [x], {"axis": -1}, name="the_hardmax")
    node.output.type = TensorType(dtypes.FLOAT32, (2, 3))
    g.outputs = [node.output]
    with pytest.raises(UnsupportedError, match="no kernel for: Hardmax"):
        cpu.compile(g)


def test_many_inferences_on_shared_threads_stay_exact(mnist):
    """Consecutive jobs of different sizes on one thread pool (a worker that read the state
    of a finished job must not claim a task of the next one: that once let a call return
    while a worker still ran an im2col task, and crashed)."""
    _, q, images = mnist
    refs = {b: lowbit.run(q, {"input": images[:b]})["logits"] for b in (1, 3, 64)}
    for threads in (2, 3):
        exe = cpu.compile(q, threads=threads)
        for _ in range(40):
            for b, ref in refs.items():
                np.testing.assert_array_equal(exe({"input": images[:b]})["logits"], ref)


def test_profile_on_the_cpu_backend_observes_the_same_values(mnist):
    """lowbit.profile(backend="cpu"): every float value observed from one compiled program,
    counts equal and ranges within float rounding of the interpreter's; the models quantized
    from either profile agree on held-out digits."""
    graph, _, images = mnist
    batches = [{"input": images[i:i + 50]} for i in range(0, 150, 50)]
    ref = lowbit.profile(graph, batches, progress=False)
    got = lowbit.profile(graph, batches, progress=False, backend="cpu")
    auto = lowbit.profile(graph, batches, progress=False, backend="auto")
    assert set(got.stats) == set(ref.stats) == set(auto.stats) and len(ref.stats) > 5
    assert set(got.moments) == set(ref.moments)
    for name, want in ref.stats.items():
        have = got.stats[name]
        assert (have.count, have.zeros, have.nan) == (want.count, want.zeros, want.nan), name
        for a, b in ((have.min, want.min), (have.max, want.max)):
            assert abs(a - b) <= 1e-5 * max(abs(want.min), abs(want.max), 1e-30), name
    for name, want in ref.moments.items():
        np.testing.assert_allclose(got.moments[name].second, want.second, rtol=1e-4,
                                   atol=1e-6 * float(np.abs(want.second).max()), err_msg=name)
    x = {"input": images[150:250]}
    a = next(iter(lowbit.run(quantize(graph, ref).graph, x).values())).argmax(1)
    b = next(iter(lowbit.run(quantize(graph, got).graph, x).values())).argmax(1)
    assert (a == b).mean() >= 0.98
    with pytest.raises(ValueError, match="profile backend"):
        lowbit.profile(graph, batches, progress=False, backend="gpu")


def test_profile_is_the_same_with_nhwc_outputs_and_observer_threads(mnist, monkeypatch,
                                                                    tmp_path):
    """The default cpu profile (NHWC arrays handed to the observers, the observers of a batch
    on a pool of threads) equals, bit for bit, one taken from plain arrays on one thread."""
    from lowbit.backends import cpu
    from lowbit.quant import profile as profile_module

    graph, _, images = mnist
    batches = [{"input": images[i:i + 30]} for i in range(0, 120, 30)]
    fast = lowbit.profile(graph, batches, progress=False, backend="cpu")
    compile_plain = cpu.compile
    monkeypatch.setattr(cpu, "compile", lambda g, **kw: compile_plain(
        g, **{**kw, "nhwc_outputs": False}))
    monkeypatch.setattr(profile_module, "_observer_threads", lambda threads: None)
    plain = lowbit.profile(graph, batches, progress=False, backend="cpu")
    fast.save(tmp_path / "fast.yaml")
    plain.save(tmp_path / "plain.yaml")
    assert (tmp_path / "fast.yaml").read_text() == (tmp_path / "plain.yaml").read_text()
    for name, m in fast.moments.items():
        np.testing.assert_array_equal(m.second, plain.moments[name].second, err_msg=name)


def test_profile_is_the_same_on_every_isa_and_thread_count(mnist, monkeypatch, tmp_path):
    """The cpu profile's float model (float32 fused multiply-add chains, `fma_floats`) and its
    observers give the same profile bit for bit on every ISA path and with 1 or 2 threads; and
    the float model is not the default double sums (its values differ in the last bits)."""
    from lowbit.backends.cpu import library

    graph, _, images = mnist
    batches = [{"input": images[i:i + 20]} for i in range(0, 60, 20)]
    compile_with = cpu.compile
    texts = {}
    for isa in ISAS:
        for threads in (1, 2):
            monkeypatch.setenv(library.ISA_ENV, isa)
            monkeypatch.setattr(cpu, "compile", lambda g, t=threads, **kw: compile_with(
                g, **{**kw, "threads": t}))
            prof = lowbit.profile(graph, batches, progress=False, backend="cpu")
            prof.save(tmp_path / "p.yaml")
            texts[isa, threads] = (tmp_path / "p.yaml").read_text()
            for name, m in prof.moments.items():
                texts[isa, threads, name] = m.second.tobytes()
    isa0, threads0 = ISAS[0], 1
    assert len(texts) > 2 * len(ISAS)
    for key, value in texts.items():
        assert value == texts[(isa0, threads0, *key[2:])], key
    monkeypatch.setattr(cpu, "compile", compile_with)
    observed = graph.copy()
    observed.outputs = [v for n in observed.nodes for v in n.outputs
                        if v.type is not None and v.type.dtype.is_float]
    x = {"input": images[:20]}
    fma = cpu.compile(observed, fma_floats=True)(x)
    double = cpu.compile(observed)(x)
    assert any((fma[n] != double[n]).any() for n in fma)


def test_nhwc_outputs_are_views_of_the_same_values(mnist):
    graph, _, images = mnist
    x = {"input": images[:7]}
    observed = graph.copy()
    observed.outputs = [v for n in observed.nodes for v in n.outputs
                        if v.type is not None and v.type.dtype.is_float]
    from lowbit.backends import cpu

    plain = cpu.compile(observed)(x)
    nhwc = cpu.compile(observed, nhwc_outputs=True)(x)
    assert any(not a.flags.c_contiguous for a in nhwc.values())
    for name, a in plain.items():
        assert nhwc[name].shape == a.shape
        np.testing.assert_array_equal(nhwc[name], a, err_msg=name)


def test_profile_auto_falls_back_to_the_interpreter_only_for_auto():
    """A graph the cpu backend cannot compile: "auto" profiles on the interpreter, "cpu" raises
    the backend's error naming the op."""
    g = Graph("g")
    x = g.add_input("x", TensorType(dtypes.FLOAT32, (2, 3)))
    node = g.make_node("Hardmax", [x], {"axis": -1}, name="the_hardmax")
    node.output.type = TensorType(dtypes.FLOAT32, (2, 3))
    g.outputs = [node.output]
    batches = [{"x": np.arange(6, dtype=np.float32).reshape(2, 3)}]
    prof = lowbit.profile(g, batches, progress=False, backend="auto")
    assert prof.stats[node.output.name].max == 1.0
    with pytest.raises(UnsupportedError, match="Hardmax"):
        lowbit.profile(g, batches, progress=False, backend="cpu")
