"""The bundles' cache of kernel-library objects (`object_cache`): what its key holds, that a
restored object is newer than its sources, and that a damaged entry is never used."""

from __future__ import annotations

import os

import pytest

from lowbit.backends.cpu.bundle import object_cache

MAKEFILE = """# Builds net
NAME = net
MODEL_SRCS = net.c
LIB_SRCS = rt_a.c
OPT ?= -O3
%.o: %.c
\t$(CC) $(OPT) -c -o $@ $<
"""


@pytest.fixture
def bundle(tmp_path, monkeypatch):
    """A bundle-like folder (a Makefile, a library source and header) and an empty cache."""
    monkeypatch.setenv("LOWBIT_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "b"
    folder.mkdir()
    (folder / "Makefile").write_text(MAKEFILE)
    (folder / "rt_a.c").write_text("int a(void) { return 1; }\n")
    (folder / "lowbit_rt.h").write_text("int a(void);\n")
    (folder / "net.c").write_text("int net(void) { return 2; }\n")
    return folder


FILES = ["Makefile", "rt_a.c", "lowbit_rt.h", "net.c"]


def _key(folder, cc="cc", threads=True, env=None, extra=None):
    return object_cache.library_key(folder, FILES, cc, threads, env or {}, extra or {})


def test_the_key_holds_what_decides_the_objects(bundle):
    key = _key(bundle)
    assert key == _key(bundle)
    changed = {_key(bundle, cc="gcc"), _key(bundle, threads=False),
               _key(bundle, env={"CFLAGS": "-g"}), _key(bundle, env={"OPT": "-O0"}),
               _key(bundle, env={"MAKEFLAGS": "OPT=-O1"}), _key(bundle, extra={"OPT": "-O1"})}
    assert key not in changed and len(changed) == 6
    # the model's name and sources, the comments and other variables do not count
    assert _key(bundle, env={"HOME": "/elsewhere"}) == key
    (bundle / "Makefile").write_text(MAKEFILE.replace("net", "other"))
    (bundle / "net.c").write_text("int net(void) { return 3; }\n")
    assert _key(bundle) == key
    for name, text in (("Makefile", MAKEFILE.replace("-c -o", "-fPIC -c -o")),
                       ("rt_a.c", "int a(void) { return 4; }\n"),
                       ("lowbit_rt.h", "int a(void); int b;\n")):
        before = (bundle / name).read_text()
        (bundle / name).write_text(text)
        assert _key(bundle) != key, name
        (bundle / name).write_text(before)
    assert _key(bundle) == key


def test_stored_objects_come_back_newer_than_the_sources(bundle, tmp_path):
    key = _key(bundle)
    assert not object_cache.restore(key, ["rt_a.o"], bundle)
    (bundle / "rt_a.o").write_bytes(b"object a")
    object_cache.store(key, ["rt_a.o"], bundle)
    os.utime(object_cache.root() / key / "rt_a.o", (1e9, 1e9))  # kept since 2001
    other = tmp_path / "other"
    other.mkdir()
    (other / "rt_a.c").write_text("int a(void) { return 1; }\n")
    os.utime(other / "rt_a.c", (1.5e9, 1.5e9))
    assert object_cache.restore(key, ["rt_a.o"], other)
    assert (other / "rt_a.o").read_bytes() == b"object a"
    # make keeps it: newer than its source
    assert (other / "rt_a.o").stat().st_mtime > (other / "rt_a.c").stat().st_mtime
    assert not object_cache.restore(_key(bundle, cc="gcc"), ["rt_a.o"], other)


def test_a_damaged_entry_is_not_used_and_is_replaced(bundle, tmp_path):
    key = _key(bundle)
    (bundle / "rt_a.o").write_bytes(b"object a")
    object_cache.store(key, ["rt_a.o"], bundle)
    entry = object_cache.root() / key
    (entry / "rt_a.o").write_bytes(b"object b")  # edited, or half written
    other = tmp_path / "other"
    other.mkdir()
    assert not object_cache.restore(key, ["rt_a.o"], other)
    assert not (other / "rt_a.o").exists()
    object_cache.store(key, ["rt_a.o"], bundle)
    assert object_cache.restore(key, ["rt_a.o"], other)
    assert (other / "rt_a.o").read_bytes() == b"object a"
    (entry / "rt_a.o").unlink()
    assert not object_cache.restore(key, ["rt_a.o"], tmp_path)
