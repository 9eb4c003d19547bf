"""Compiler discovery, flags and the build cache of the cpu backend."""

from __future__ import annotations

import ctypes
import sys
import uuid
from pathlib import Path

import pytest

from lowbit.backends.cpu import toolchain
from lowbit.backends.cpu.toolchain import CompileError, ToolchainError


def _source(body: str = "") -> str:
    return (f"/* {uuid.uuid4()} */\n#include \"lowbit_rt.h\"\n"
            f"LB_API int answer(void) {{ {body or 'return 42;'} }}\n")


def test_flags_keep_float_rounding_and_warnings():
    flags = toolchain.flags()
    assert "-ffp-contract=off" in flags and "-Werror" in flags and "-Wall" in flags
    assert not any("fast-math" in f or f == "-Ofast" for f in flags)


def test_a_model_builds_once_and_loads():
    src = _source()
    lib = toolchain.build_model(src)
    assert ctypes.CDLL(str(lib)).answer() == 42
    assert toolchain.build_model(src) == lib


def test_corrupted_cache_entry_is_rebuilt():
    src = _source()
    lib = toolchain.build_model(src)
    lib.write_bytes(lib.read_bytes()[:100])  # truncated by a crash or a full disk
    again = toolchain.build_model(src)
    assert again == lib and ctypes.CDLL(str(again)).answer() == 42


def test_compiler_failure_names_the_log_file():
    with pytest.raises(CompileError, match=r"its output is in (\S+\.log)") as err:
        toolchain.build_model(_source("return undeclared_name;"))
    log = str(err.value).rsplit(" ", 1)[-1]
    text = Path(log).read_text()
    assert "undeclared_name" in text and "-ffp-contract=off" in text


def test_warnings_are_errors():
    with pytest.raises(CompileError):
        toolchain.build_model(_source("int unused_variable; return 1;"))


def test_no_compiler_says_how_to_get_one(monkeypatch, tmp_path):
    toolchain.find_compiler.cache_clear()
    try:
        monkeypatch.delenv("CC", raising=False)
        monkeypatch.setenv("PATH", str(tmp_path))
        monkeypatch.setitem(sys.modules, "ziglang", None)
        with pytest.raises(ToolchainError, match=r"apt-get install gcc.*pip install lowbit\[zig\]"):
            toolchain.find_compiler()
        monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
        toolchain.find_compiler.cache_clear()
        with pytest.raises(ToolchainError, match="does not run as a C compiler"):
            toolchain.find_compiler()
    finally:
        toolchain.find_compiler.cache_clear()


def test_a_cached_program_loads_without_generating_code_and_survives_corruption():
    """A second compile of the same graph reads the generated program's blob and plan from the
    cache (no code generation); a corrupted cached blob is generated again."""
    import numpy as np

    import lowbit
    from lowbit.backends import cpu
    from lowbit.cli.demo import bundled

    graph = lowbit.load(bundled("mnistnet.onnx"))
    x = np.random.default_rng(0).random((2, 1, 28, 28)).astype(np.float32)
    name = f"m{uuid.uuid4().hex}"  # a program no earlier run cached
    first = cpu.compile(graph, name=name)
    want = first({"input": x})["logits"]
    assert first.compiled()[0].source  # generated
    again = cpu.compile(graph, name=name)
    assert again.compiled()[0].source == ""  # loaded
    np.testing.assert_array_equal(again({"input": x})["logits"], want)
    key = again._artifact_key(())
    blob = toolchain.cache_root() / "cpu" / ("art-" + key[:32]) / "blob.bin"
    blob.write_bytes(blob.read_bytes()[:10])
    third = cpu.compile(graph, name=name)
    assert third.compiled()[0].source
    np.testing.assert_array_equal(third({"input": x})["logits"], want)


def test_processes_wanting_one_library_build_it_once(tmp_path, monkeypatch):
    """Two builds of the same entry at the same time (test workers, cluster workers): the
    second waits for the first's lock and takes its library; the build command runs once."""
    import threading

    monkeypatch.setenv("LOWBIT_CACHE_DIR", str(tmp_path / "cache"))
    runs = tmp_path / "runs.txt"
    script = ("import sys, time; open(sys.argv[1], 'a').write('x'); time.sleep(0.5); "
              "open(sys.argv[2], 'w').write('library')")

    def command(out: Path) -> list[str]:
        return [sys.executable, "-c", script, str(runs), str(out)]

    got: list[Path] = []

    def build() -> None:
        got.append(toolchain._cached_build("k" * 64, "lib.so", command, what="a test"))

    threads = [threading.Thread(target=build) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert runs.read_text() == "x"
    assert got[0] == got[1] and got[0].read_text() == "library"


def _python_build(size: int):
    """A build command writing a `size`-byte library (no compiler needed)."""
    def command(out: Path) -> list[str]:
        return [sys.executable, "-c",
                f"import sys; open(sys.argv[1], 'wb').write(bytes({size}))", str(out)]
    return command


def _entries(root: Path) -> set[str]:
    return {p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")}


@pytest.fixture
def small_cache(tmp_path, monkeypatch):
    from lowbit.backends.cpu import cache_limit

    monkeypatch.setenv("LOWBIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("LOWBIT_CACHE_MAX_MB", "1")
    monkeypatch.setattr(cache_limit, "CHECK_INTERVAL", 0.0)
    return tmp_path / "cache" / "cpu"


def test_the_cache_stays_under_its_limit_dropping_least_recently_used(small_cache):
    """Entries of ~0.3 MB under a 1 MB limit: the fourth makes the cache too large, and it
    shrinks to 3/4 of the limit by dropping the two entries used longest ago."""
    keys = [f"{i:02d}" * 32 for i in range(4)]
    build = _python_build(300_000)
    for key in keys[:3]:
        toolchain._cached_build(key, "lib.so", build, what="a test")
    assert len(_entries(small_cache)) == 3
    toolchain._cached_build(keys[0], "lib.so", build, what="a test")  # used again
    toolchain._cached_build(keys[3], "lib.so", build, what="a test")
    assert _entries(small_cache) == {keys[0][:32], keys[3][:32]}
    # an evicted entry is simply built again
    again = toolchain._cached_build(keys[1], "lib.so", build, what="a test")
    assert again.stat().st_size == 300_000


def test_lock_files_are_bounded_and_old_ones_removed(small_cache):
    small_cache.mkdir(parents=True)
    legacy = small_cache / f".{'ab' * 16}.lock"  # one per entry, as older versions left them
    legacy.write_text("")
    for i in range(5):
        toolchain._cached_build(f"{i:x}0" * 32, "lib.so", _python_build(10), what="a test")
    locks = sorted(p.name for p in small_cache.iterdir() if "lock" in p.name)
    assert locks == [f".lock-{i:x}0" for i in range(5)] and not legacy.exists()


@pytest.mark.parametrize("value", ["lots", "-5", "nan"])
def test_a_malformed_cache_limit_is_refused_by_name(small_cache, monkeypatch, value):
    monkeypatch.setenv("LOWBIT_CACHE_MAX_MB", value)
    with pytest.raises(toolchain.LowbitError, match="LOWBIT_CACHE_MAX_MB"):
        toolchain._cached_build("cd" * 32, "lib.so", _python_build(10), what="a test")


def test_a_zero_cache_limit_keeps_everything(small_cache, monkeypatch):
    monkeypatch.setenv("LOWBIT_CACHE_MAX_MB", "0")
    for i in range(4):
        toolchain._cached_build(f"{i:x}1" * 32, "lib.so", _python_build(400_000), what="a test")
    assert len(_entries(small_cache)) == 4


def test_an_artifact_blob_reads_into_the_callers_buffer(tmp_path, monkeypatch):
    """`load_artifact(key, buffer)` reads the blob into `buffer(size)` and returns that
    buffer (the same bytes as without it); a blob whose bytes changed is refused either way."""
    import numpy as np

    monkeypatch.setenv("LOWBIT_CACHE_DIR", str(tmp_path / "cache"))
    data = bytes(range(256)) * 41 + b"end"
    toolchain.store_artifact("a" * 64, {"x": 1}, data)
    asked: list[int] = []

    def buffer(size: int) -> np.ndarray:
        asked.append(size)
        return np.full(size + 7, 255, np.uint8)

    meta, plain = toolchain.load_artifact("a" * 64)
    assert plain == data and meta["x"] == 1
    meta, into = toolchain.load_artifact("a" * 64, buffer)
    assert asked == [len(data)] and meta["x"] == 1
    assert isinstance(into, np.ndarray) and into[:len(data)].tobytes() == data
    blob = toolchain.cache_root() / "cpu" / ("art-" + "a" * 32) / "blob.bin"
    blob.write_bytes(data[:-1] + b"E")
    assert toolchain.load_artifact("a" * 64) is None
    assert toolchain.load_artifact("a" * 64, buffer) is None
