"""Atomic writes: whole files with ordinary permissions, nothing left behind on error."""

from __future__ import annotations

import os
import stat

import pytest

from lowbit.errors import InputError
from lowbit.fileio import atomic_path, write_atomically


def test_written_files_get_ordinary_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        write_atomically(tmp_path / "a.txt", b"hello")
    finally:
        os.umask(old)
    assert (tmp_path / "a.txt").read_bytes() == b"hello"
    assert stat.S_IMODE((tmp_path / "a.txt").stat().st_mode) == 0o644


def test_an_error_leaves_neither_output_nor_temporary(tmp_path):
    (tmp_path / "keep.txt").write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_path(tmp_path / "keep.txt") as tmp:
        tmp.write_bytes(b"partial")
        raise RuntimeError("interrupted")
    assert (tmp_path / "keep.txt").read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]


def test_a_missing_folder_is_named(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        write_atomically(tmp_path / "no" / "a.txt", b"x")
