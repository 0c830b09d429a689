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


# ---- what the output path names is never harmed (symlinks, FIFOs, links, modes)


def test_dash_is_standard_output(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    assert write_atomic("-", b'{"a": 1}\n') == Path("-")
    assert capsysbinary.readouterr().out == b'{"a": 1}\n'


def test_symlink_is_followed_and_stays_a_link(tmp_path: Path) -> None:
    real_dir = tmp_path / "real"
    real_dir.mkdir()
    real = real_dir / "out.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    write_atomic(link, "new")
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_text() == "new"
    # the temporary file lived next to the target, and is gone
    assert sorted(p.name for p in real_dir.iterdir()) == ["out.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "real"]


def test_dangling_symlink_creates_its_target(tmp_path: Path) -> None:
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "target.json")
    write_atomic(link, "x")
    assert link.is_symlink() and (tmp_path / "target.json").read_text() == "x"


def test_existing_file_keeps_its_mode(tmp_path: Path) -> None:
    target = tmp_path / "secret.json"
    target.write_text("old")
    target.chmod(0o600)
    write_atomic(target, "new")
    assert target.read_text() == "new"
    assert target.stat().st_mode & 0o7777 == 0o600


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_existing_file_keeps_its_owner(tmp_path: Path) -> None:
    target = tmp_path / "theirs.json"
    target.write_text("old")
    os.chown(target, 4321, 4321)
    write_atomic(target, "new")
    st = target.stat()
    assert (st.st_uid, st.st_gid) == (4321, 4321) and target.read_text() == "new"


def test_owner_that_cannot_be_kept_means_writing_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "theirs.json"
    target.write_text("old")
    inode = target.stat().st_ino
    real_stat = os.stat

    def other_owner(path: object, *args: object, **kwargs: object) -> os.stat_result:
        st = real_stat(path, *args, **kwargs)  # type: ignore[arg-type]
        if Path(str(path)) == target:  # as if another user owned it (group-writable)
            return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, 4321, 4321,
                                   st.st_size, 0, 0, 0))  # fmt: skip
        return st

    def refuse(*args: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "stat", other_owner)
    monkeypatch.setattr(os, "chown", refuse)
    write_atomic(target, "new")
    monkeypatch.undo()
    assert target.read_text() == "new" and target.stat().st_ino == inode
    assert [p.name for p in tmp_path.iterdir()] == ["theirs.json"]


def test_hard_linked_file_is_written_in_place(tmp_path: Path) -> None:
    target = tmp_path / "a.json"
    target.write_text("old")
    other = tmp_path / "b.json"
    os.link(target, other)
    write_atomic(target, "new")
    assert other.read_text() == "new"  # the link is not broken
    assert target.stat().st_ino == other.stat().st_ino


def test_fifo_is_written_in_place(tmp_path: Path) -> None:
    import stat
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    write_atomic(fifo, b"through the pipe")
    reader.join(timeout=10)
    assert got == [b"through the pipe"]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # still a FIFO, not a regular file
    assert [p.name for p in tmp_path.iterdir()] == ["pipe"]


def _fake_stat(kind: int) -> os.stat_result:
    return os.stat_result((kind | 0o666, 1, 1, 1, 0, 0, 0, 0, 0, 0))


def test_character_device_is_written_in_place(tmp_path: Path) -> None:
    import stat

    from layerprof.files import plan_existing

    # A regular file stands in for the device (tests never touch a real one):
    # the plan is what decides that nothing is renamed over it.
    stand_in = tmp_path / "tty"
    stand_in.write_text("")
    assert plan_existing(stand_in, _fake_stat(stat.S_IFCHR)).how == "in-place"


@pytest.mark.parametrize(("kind", "word"), [(0o060000, "block device"), (0o140000, "socket")])
def test_block_devices_and_sockets_are_refused(tmp_path: Path, kind: int, word: str) -> None:
    from layerprof.files import plan_existing

    with pytest.raises(OutputError, match=word):
        plan_existing(tmp_path / "dev", _fake_stat(kind))


def test_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(OutputError, match="it is a directory"):
        write_atomic(tmp_path, "x")


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write read-only files")
def test_read_only_file_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "ro.json"
    target.write_text("old")
    target.chmod(0o444)
    with pytest.raises(OutputError, match="permission denied"):
        write_atomic(target, "new")
    assert target.read_text() == "old"


def test_read_only_file_is_refused_for_everyone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "ro.json"
    target.write_text("old")
    monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != target)
    with pytest.raises(OutputError, match="permission denied"):
        write_atomic(target, "new")
    assert target.read_text() == "old"


def test_file_replaced_while_writing_is_not_renamed_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import layerprof.files as files

    target = tmp_path / "out.json"
    target.write_text("old")
    real_take = files._take_attributes

    def swap(tmp: str, existing: os.stat_result | None) -> bool:
        target.unlink()
        os.mkfifo(target)  # someone put something else there meanwhile
        return real_take(tmp, existing)

    monkeypatch.setattr(files, "_take_attributes", swap)
    with pytest.raises(OutputError, match="changed while"):
        write_atomic(target, "new")
    import stat

    assert stat.S_ISFIFO(os.lstat(target).st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]
