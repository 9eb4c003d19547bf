"""Standalone C bundles of MNISTNet: built with a C compiler alone, their outputs equal the cpu
backend's bit for bit (float outputs within 1e-5) on every x86-64 target this CPU runs; the
Makefile, CMakeLists.txt, embedded weights, `lowbit compile`, and every refusal."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from bundle_tools import build, compiler, run, runner
from shared_profiles import shared_profile

import lowbit
from lowbit.backends import cpu
from lowbit.backends.cpu import library
from lowbit.backends.cpu.bundle import TARGETS, BundleError, export_bundle
from lowbit.cli.demo import bundled
from lowbit.ir import dtypes
from lowbit.ir.graph import Graph
from lowbit.ir.types import TensorType
from lowbit.quant.static import quantize

X86_TARGETS = [name for name, t in TARGETS.items()
               if t.arch == "x86_64" and t.isa in library.supported_isas()]
ARM_TARGETS = [name for name, t in TARGETS.items() if t.arch == "aarch64"]


@pytest.fixture(scope="module")
def mnist():
    """MNISTNet float and int8 (calibrated as `lowbit demo` does) and held-out digits."""
    graph = lowbit.load(bundled("mnistnet.onnx"))
    with np.load(bundled("digits.npz")) as data:
        images = data["images"]
    prof = shared_profile(graph, [{"input": images[i:i + 50]} for i in range(0, 200, 50)])
    return graph, quantize(graph, prof).graph, images[200:]


@pytest.mark.parametrize("target", X86_TARGETS + ARM_TARGETS)
def test_mnistnet_int8_bundle_equals_the_cpu_backend(mnist, tmp_path, target):
    """x86-64 natively; 64-bit ARM cross-compiled and run under qemu-user."""
    _, q, images = mnist
    bundle = export_bundle(q, tmp_path / "b", target=target, name="mnist")
    program = build(bundle)
    exe = cpu.compile(q, threads=2)
    for batch, threads in ((1, 1), (9, 2)):
        x = images[:batch]
        (got,) = run(bundle, program, [x], args=("--threads", str(threads)))
        ref = exe({"input": x})["logits"]
        assert got.dtype == ref.dtype and got.shape == ref.shape == (batch, 10)
        np.testing.assert_array_equal(got, ref)


def test_arm_bundles_on_a_cpu_without_dotprod(mnist, tmp_path):
    """qemu's Cortex-A53 (ARMv8.0) runs the aarch64 bundle; the aarch64-dotprod program refuses
    to start there, naming what the CPU lacks, instead of dying on an illegal instruction."""
    _, q, images = mnist
    x = images[:2]
    ref = cpu.compile(q)({"input": x})["logits"]
    plain = export_bundle(q, tmp_path / "plain", target="aarch64", name="mnist")
    (got,) = run(plain, build(plain), [x], cpu="cortex-a53")
    np.testing.assert_array_equal(got, ref)
    dot = export_bundle(q, tmp_path / "dot", target="aarch64-dotprod", name="mnist")
    done = run(dot, build(dot), [x], cpu="cortex-a53", check=False)
    assert done.returncode == 1, done.stderr
    assert "built for target aarch64-dotprod, which needs a 64-bit ARM CPU with the " \
           "dot-product instructions" in done.stderr


def test_float_model_with_embedded_weights_built_by_cmake(mnist, tmp_path):
    graph, _, images = mnist
    bundle = export_bundle(graph, tmp_path / "b", target="x86-64", weights="embed", name="net")
    assert not (tmp_path / "b" / "net.weights").exists()
    assert (tmp_path / "b" / "net_weights.c").stat().st_size > bundle.weights_bytes
    build_dir = tmp_path / "cmake"
    for step in (["cmake", "-S", str(bundle.directory), "-B", str(build_dir),
                  "-DLOWBIT_THREADS=OFF", "-DCMAKE_C_FLAGS=-Werror"],
                 ["cmake", "--build", str(build_dir), "-j2"]):
        done = subprocess.run(step, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
    x = images[:4]
    (got,) = run(bundle, build_dir / "net", [x])
    ref = cpu.compile(graph)({"input": x})["logits"]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def test_one_thread_build_without_pthread(mnist, tmp_path):
    """make THREADS=0: no thread pool compiled (microcontroller-like targets); --threads is
    then capped at one, with the same results. The library's objects may come from the object
    cache: they were compiled by this Makefile with THREADS=0 (the key holds both)."""
    _, q, images = mnist
    bundle = export_bundle(q, tmp_path / "b", target="x86-64", name="mnist")
    program = build(bundle, threads=False)
    symbols = subprocess.run(["nm", str(program)], capture_output=True, text=True).stdout
    assert "pthread_create" not in symbols
    x = images[:3]
    (got,) = run(bundle, program, [x], args=("--threads", "4"))
    np.testing.assert_array_equal(got, cpu.compile(q)({"input": x})["logits"])


def test_lowbit_compile_cli(mnist, tmp_path):
    """`lowbit compile` quantizes with --calib as `lowbit quantize` does: the same weights as
    export_bundle of the same quantized graph, byte for byte."""
    _, q, _ = mnist
    np.save(tmp_path / "calib.npy", np.load(bundled("digits.npz"))["images"][:200])
    out = tmp_path / "cli"
    done = subprocess.run([sys.executable, "-m", "lowbit", "compile", bundled("mnistnet.onnx"),
                           "-o", str(out), "--calib", str(tmp_path / "calib.npy"),
                           "--batch-size", "50", "--target", "x86-64", "--name", "digits",
                           "--build"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "weights" in done.stdout and "int8 parameters" in done.stdout
    assert "code      model function" in done.stdout and (out / "digits").is_file()
    for f in ("digits.h", "digits.c", "digits.weights", "Makefile", "CMakeLists.txt",
              "example_main.c", "lowbit_rt.h", "rt_qgemm.c"):
        assert (out / f).is_file(), f
    assert not list(out.glob("*avx*")), "the x86-64 target holds the portable kernels alone"
    same = export_bundle(q, tmp_path / "api", target="x86-64", name="digits")
    assert (out / "digits.weights").read_bytes() == (same.directory / "digits.weights").read_bytes()
    # -o names a folder: an existing one takes a second bundle beside the first
    done = subprocess.run([sys.executable, "-m", "lowbit", "compile", bundled("mnistnet.onnx"),
                           "-o", str(out), "--target", "x86-64", "--name", "digits_float"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert (out / "digits_float.weights").is_file() and (out / "digits.weights").is_file()


def test_program_refuses_bad_inputs_naming_them(mnist, tmp_path):
    _, q, images = mnist
    bundle = export_bundle(q, tmp_path / "b", target=X86_TARGETS[-1], name="mnist")
    program = build(bundle)
    done = run(bundle, program, [images[:2].astype(np.float64)], check=False)
    assert done.returncode == 1 and "input 0 'input' takes float32" in done.stderr
    assert "holds float64" in done.stderr
    done = run(bundle, program, [images[:2, :, :27]], check=False)
    assert done.returncode == 1
    assert "takes shape [batch, 1, 28, 28]" in done.stderr and "[2, 1, 27, 28]" in done.stderr
    (bundle.directory / "mnist.weights").write_bytes(b"\0" * bundle.weights_bytes)
    done = run(bundle, program, [images[:2]], check=False)
    assert done.returncode == 1 and "is not the weights of mnist" in done.stderr
    done = subprocess.run([str(program), "only-one-argument.npy"], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 1 and "usage: mnist" in done.stderr


def _hardmax_graph() -> Graph:
    g = Graph("g")
    x = g.add_input("x", TensorType(dtypes.FLOAT32, ("N", 3)))
    node = g.make_node("Hardmax", [x], name="the_hardmax")
    node.output.type = TensorType(dtypes.FLOAT32, ("N", 3))
    g.outputs = [node.output]
    return g


def test_refusals_come_before_any_file(mnist, tmp_path):
    _, q, _ = mnist
    out = tmp_path / "never"
    with pytest.raises(BundleError,
                       match=r"no bundle kernel implements Hardmax \(node 'the_hardmax'\)"):
        export_bundle(_hardmax_graph(), out, target="x86-64")
    with pytest.raises(BundleError, match="unknown bundle target 'riscv64'; choose one of "
                                          "x86-64, x86-64-avx2"):
        export_bundle(q, out, target="riscv64")
    with pytest.raises(BundleError, match="bundle name '2fast'"):
        export_bundle(q, out, target="x86-64", name="2fast")
    with pytest.raises(BundleError, match="weights must be one of file, embed"):
        export_bundle(q, out, target="x86-64", weights="zip")
    with pytest.raises(BundleError, match="no input dimension is named 'S'"):
        export_bundle(q, out, target="x86-64", dims={"S": 4})
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".never")]


def test_cli_refusals_exit_1_before_writing(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    model = tmp_path / "hardmax.onnx"
    node = helper.make_node("Hardmax", ["x"], ["y"], name="the_hardmax")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                      [1, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), model)
    out = tmp_path / "out"
    for extra, message in ((["--target", "x86-64"], "no bundle kernel implements Hardmax"),
                           (["--target", "arm7"], "unknown bundle target 'arm7'"),
                           (["--name", "int"], "bundle name 'int'")):
        done = subprocess.run([sys.executable, "-m", "lowbit", "compile", str(model), "-o",
                               str(out), *extra], capture_output=True, text=True, check=False)
        assert done.returncode == 1 and message in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
        assert not out.exists()


def test_symbolic_dimension_needs_a_size(tmp_path):
    g = Graph("g")
    x = g.add_input("x", TensorType(dtypes.FLOAT32, ("B", "S")))
    node = g.make_node("Identity", [x], name="r")
    node.output.type = TensorType(dtypes.FLOAT32, ("B", "S"))
    g.outputs = [node.output]
    with pytest.raises(BundleError, match=r"symbolic dimension 'S'.*--dim S=128"):
        export_bundle(g, tmp_path / "b", target="x86-64")
    bundle = export_bundle(g, tmp_path / "b", target="x86-64", dims={"S": 5}, name="relu")
    header = (bundle.directory / "relu.h").read_text()
    assert "#define RELU_INPUT0_SHAPE {-1, 5}" in header and "#define RELU_HAS_BATCH 1" in header


def test_summary_reports_weights_and_arena(mnist, tmp_path):
    _, q, _ = mnist
    bundle = export_bundle(q, tmp_path / "b", target="aarch64", name="mnist")
    text = bundle.summary()
    assert f"weights   {bundle.weights_bytes} bytes" in text and "arena" in text
    assert bundle.weights_bytes == (bundle.directory / "mnist.weights").stat().st_size
    assert bundle.int8_parameter_bytes == 421408  # MNISTNet's int8 weights
    assert bundle.weight_data_bytes <= 1.1 * bundle.int8_parameter_bytes


TWO_INSTANCES = Path(__file__).resolve().parent / "bundle_two_instances.c"


@pytest.mark.parametrize("target", [X86_TARGETS[-1], "aarch64-dotprod"])
def test_two_instances_run_concurrently_without_allocating(mnist, tmp_path, target):
    """Two instances of one bundle in one process, from two threads (one with a pool of two,
    one alone), on different inputs: every run gives the cpu backend's output, and malloc,
    calloc and realloc are not called while they run."""
    _, q, images = mnist
    bundle = export_bundle(q, tmp_path / "b", target=target, name="model")
    build(bundle)
    cc = compiler(bundle)
    make = subprocess.run(["make", "-s", "libmodel.a", f"CC={cc}"], cwd=bundle.directory,
                          capture_output=True, text=True, check=False)
    assert make.returncode == 0, make.stderr
    program = tmp_path / "two"
    done = subprocess.run([cc, "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-pthread",
                           "-I", str(bundle.directory), str(TWO_INSTANCES),
                           str(bundle.directory / "libmodel.a"), "-lm", "-o", str(program)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    exe = cpu.compile(q)
    args = [str(bundle.directory / "model.weights"), "4",
            "30" if bundle.target.arch == "aarch64" else "300"]
    for i, x in enumerate((images[:4], images[50:54])):
        (tmp_path / f"in{i}").write_bytes(x.tobytes())
        (tmp_path / f"out{i}").write_bytes(exe({"input": x})["logits"].tobytes())
        args += [str(tmp_path / f"in{i}"), str(tmp_path / f"out{i}")]
    assert (tmp_path / "out0").read_bytes() != (tmp_path / "out1").read_bytes()
    done = subprocess.run([*runner(bundle), str(program), *args], capture_output=True,
                          text=True, timeout=1800, check=False)
    runs = 60 if bundle.target.arch == "aarch64" else 600
    assert done.stdout.strip() == f"runs={runs} mismatches=0 allocations=0", done.stderr
    assert done.returncode == 0


def test_two_models_in_one_program(mnist, tmp_path):
    """Two bundles (MNISTNet int8 and float) linked into one program with one copy of the
    kernel library: their names do not clash and each gives its own model's results."""
    graph, q, images = mnist
    target = X86_TARGETS[-1]
    a = export_bundle(q, tmp_path / "a", target=target, name="digits_int8")
    b = export_bundle(graph, tmp_path / "b", target=target, name="digits_float")
    main = tmp_path / "main.c"
    main.write_text("""#include <stdio.h>
#include <stdlib.h>
#include "digits_int8.h"
#include "digits_float.h"
static void *load(const char *path, size_t n) {
    void *p = aligned_alloc(64, (n + 64) / 64 * 64);
    FILE *f = fopen(path, "rb");
    if (!p || !f || fread(p, 1, n, f) != n) exit(2);
    fclose(f);
    return p;
}
int main(int argc, char **argv) {
    (void)argc;
    float x[2 * 784], ya[20], yb[20];
    FILE *f = fopen(argv[3], "rb");
    if (!f || fread(x, sizeof(float), 2 * 784, f) != 2 * 784) return 2;
    fclose(f);
    lb_ctx ctx_a = {DIGITS_INT8_ISA, 1, NULL, 0}, ctx_b = {DIGITS_FLOAT_ISA, 1, NULL, 0};
    void *wa = load(argv[1], DIGITS_INT8_WEIGHTS_BYTES);
    void *wb = load(argv[2], DIGITS_FLOAT_WEIGHTS_BYTES);
    void *ra = aligned_alloc(64, DIGITS_INT8_ARENA_BYTES(2) + 64);
    void *rb = aligned_alloc(64, DIGITS_FLOAT_ARENA_BYTES(2) + 64);
    const void *in[1] = {x};
    void *oa[1] = {ya}, *ob[1] = {yb};
    if (digits_int8_run(&ctx_a, wa, ra, 2, in, oa) || digits_float_run(&ctx_b, wb, rb, 2, in, ob))
        return 3;
    fwrite(ya, sizeof(float), 20, stdout);
    fwrite(yb, sizeof(float), 20, stdout);
    return 0;
}
""")
    # one copy of the kernel library: bundle a's objects, as its Makefile compiles them (kept
    # by lowbit's object cache between runs: compiling the library is most of this time)
    build(a)
    library = [str(a.directory / Path(f).with_suffix(".o").name) for f in a.files
               if f.startswith("rt_") and f.endswith(".c")]
    defines = [f"-D{d}" for d in TARGETS[target].defines]
    program = tmp_path / "both"
    done = subprocess.run(["cc", "-std=c11", "-O2", "-ffp-contract=off", "-Wall", "-Wextra",
                           "-Werror", "-pthread", *defines, "-I", str(a.directory), "-I",
                           str(b.directory), str(main), str(a.directory / "digits_int8.c"),
                           str(b.directory / "digits_float.c"), *library, "-lm", "-o",
                           str(program)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    x = images[:2]
    (tmp_path / "x").write_bytes(x.tobytes())
    done = subprocess.run([str(program), str(a.directory / "digits_int8.weights"),
                           str(b.directory / "digits_float.weights"), str(tmp_path / "x")],
                          capture_output=True, check=False)
    assert done.returncode == 0
    out = np.frombuffer(done.stdout, np.float32).reshape(2, 2, 10)
    np.testing.assert_array_equal(out[0], cpu.compile(q)({"input": x})["logits"])
    np.testing.assert_allclose(out[1], cpu.compile(graph)({"input": x})["logits"], rtol=1e-5,
                               atol=1e-6)
