"""Durable file writes shared by the server store, the client caches and downloads."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO


TEMP_SUFFIX = ".tmp"  # what a writer killed mid-write leaves behind: `.<name>.<random>.tmp`
# atomic_write hands the kernel at most this much per write(). One write of a whole 64 MiB
# xorb let the page cache take it in large folios, and on a VM (this project's reference
# machine) those came from memory the host had never backed, each page faulted in on first
# touch: a server's system time for a 768 MiB push fell from 2.0-2.6 s to 1.6-1.8 s with
# 64 KiB writes. On other machines the extra system calls cost nothing measurable.
WRITE_PIECE = 64 << 10


@contextmanager
def atomic_output(path: Path, *, mode: int = 0o644, replace: bool = True, durable: bool = True) -> Iterator[BinaryIO]:
    """A file to write that appears at `path` whole, or not at all, even after a crash.

    Writes go to a temp file in the same directory; on success it is fsynced, given `mode`,
    renamed over `path` and the directory fsynced. On any error the temp file is removed.
    With replace=False an existing `path` wins: FileExistsError is raised and it is left
    untouched (the temp file is hard-linked into place, which fails atomically if `path`
    exists: of racing writers exactly one succeeds). durable=False skips the fsyncs, for files
    whose loss in a crash costs nothing (a download git-lfs will verify and move anyway): the
    file still appears whole or not at all to every reader.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TEMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as out:
            yield out
            out.flush()
            if durable:
                os.fsync(out.fileno())
        os.chmod(tmp, mode)
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
            os.unlink(tmp)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    if not durable:
        return
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def atomic_write(path: Path, *parts: bytes | memoryview, mode: int = 0o644, replace: bool = True) -> None:
    """Write the concatenation of `parts` atomically (see atomic_output), in WRITE_PIECE
    writes. Several parts avoid building one big buffer (e.g. a xorb body and its footer)."""
    with atomic_output(path, mode=mode, replace=replace) as out:
        for part in parts:
            view = memoryview(part).cast("B")
            for start in range(0, len(view), WRITE_PIECE):
                out.write(view[start : start + WRITE_PIECE])
