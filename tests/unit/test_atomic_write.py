"""atomic_write: the exact concatenation of its parts, handed to the kernel WRITE_PIECE at most at a time."""

from __future__ import annotations

import io
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from git_xet import fsutil
from git_xet.fsutil import WRITE_PIECE, atomic_write


WRITES: list[int] = []  # sizes of the write() calls the file received


class _Recording(io.FileIO):
    def write(self, data) -> int:  # type: ignore[override]
        WRITES.append(len(memoryview(data)))
        return super().write(data)


def _recording_fdopen(fd: int, mode: str = "rb", *args, **kwargs):
    return io.BufferedWriter(_Recording(fd, "wb"))


sizes = st.integers(0, 3 * WRITE_PIECE + 7)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(sizes, st.booleans()), max_size=4))
def test_writes_are_bounded_and_the_file_is_exact(parts: list[tuple[int, bool]]) -> None:
    bodies = [os.urandom(n) for n, _ in parts]
    given_parts = [memoryview(b) if as_view else b for b, (_, as_view) in zip(bodies, parts)]
    WRITES.clear()
    with tempfile.TemporaryDirectory() as d, pytest.MonkeyPatch.context() as mp:
        mp.setattr(fsutil.os, "fdopen", _recording_fdopen)
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
