from __future__ import annotations

import os
from pathlib import Path

import pytest

from layerprof.errors import OutputError
from layerprof.files import write_atomic


def test_creates_parents_and_normal_mode(tmp_path: Path) -> None:
    target = write_atomic(tmp_path / "a" / "b" / "out.txt", "hello")
    assert target.read_text() == "hello"
    mask = os.umask(0)
    os.umask(mask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~mask


def test_failure_leaves_nothing(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(OutputError, match=r"out\.txt"):
        write_atomic(blocker / "out.txt", "x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_replaces_existing_whole(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    target.write_text("old")
    write_atomic(target, b"new")
    assert target.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]
