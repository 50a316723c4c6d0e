"""atomic_write: the exact concatenation of its parts, handed to the kernel WRITE_PIECE at most at a time."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from git_xet.platform import files
from git_xet.platform.files import WRITE_PIECE, atomic_write


WRITES: list[int] = []  # sizes of the write() calls the kernel was handed
_real_write = os.write


def _recording_write(fd: int, data) -> int:
    WRITES.append(len(memoryview(data)))
    return _real_write(fd, data)


sizes = st.integers(0, 3 * WRITE_PIECE + 7)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(sizes, st.booleans()), max_size=4))
def test_writes_are_bounded_and_the_file_is_exact(parts: list[tuple[int, bool]]) -> None:
    bodies = [os.urandom(n) for n, _ in parts]
    given_parts = [memoryview(b) if as_view else b for b, (_, as_view) in zip(bodies, parts)]
    WRITES.clear()
    with tempfile.TemporaryDirectory() as d, pytest.MonkeyPatch.context() as mp:
        mp.setattr(files.os, "write", _recording_write)
        path = Path(d) / "sub" / "object"
        atomic_write(path, *given_parts)
        assert path.read_bytes() == b"".join(bodies)
        assert [p.name for p in path.parent.iterdir()] == ["object"]  # no temp file left
    assert sum(WRITES) == sum(map(len, bodies))
    assert all(size <= WRITE_PIECE for size in WRITES)


def test_an_existing_object_wins_without_replace(tmp_path: Path) -> None:
    path = tmp_path / "object"
    atomic_write(path, b"first")
    with pytest.raises(FileExistsError):
        atomic_write(path, os.urandom(2 * WRITE_PIECE), replace=False)
    assert path.read_bytes() == b"first" and [p.name for p in tmp_path.iterdir()] == ["object"]


def test_a_directory_removed_after_a_write_is_made_again(tmp_path: Path) -> None:
    """The process remembers directories it wrote into; one deleted since (gc emptied it) is
    not a failure."""
    first = tmp_path / "shelf" / "one"
    atomic_write(first, b"1")
    first.unlink()
    first.parent.rmdir()
    atomic_write(tmp_path / "shelf" / "two", b"2")
    assert (tmp_path / "shelf" / "two").read_bytes() == b"2"


def test_a_failed_write_leaves_nothing_behind(tmp_path: Path) -> None:
    with pytest.raises(TypeError):  # the second part is no buffer: found after the first is written
        atomic_write(tmp_path / "object", b"start", 12345)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_temp_files_are_new_private_and_named_for_the_abandoned_file_sweep(tmp_path: Path) -> None:
    made = [files._new_private_file(str(tmp_path), "obj") for _ in range(50)]
    try:
        paths = {path for _, path in made}
        assert len(paths) == 50  # each call made its own file
        for path in paths:
            name = os.path.basename(path)
            assert name.startswith(".obj.") and name.endswith(files.TEMP_SUFFIX)  # what remove_abandoned_temp_files matches
            assert os.stat(path).st_mode & 0o777 == 0o600
    finally:
        for fd, _ in made:
            os.close(fd)


def test_temp_file_names_that_keep_colliding_give_up_after_the_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = 0

    def same_bytes(n: int) -> bytes:
        nonlocal calls
        calls += 1
        return bytes(n)

    monkeypatch.setattr(files.os, "urandom", same_bytes)
    fd, path = files._new_private_file(str(tmp_path), "obj")
    os.close(fd)
    calls = 0
    with pytest.raises(FileExistsError):
        files._new_private_file(str(tmp_path), "obj")
    assert calls == files._NAME_ATTEMPTS
    assert os.listdir(tmp_path) == [os.path.basename(path)]  # nothing else made, the first untouched
