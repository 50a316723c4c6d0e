"""Durable file writes shared by the server store and the client caches."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write(path: Path, *parts: bytes | memoryview, mode: int = 0o644) -> None:
    """Write the concatenation of `parts` to `path` so readers see either nothing or all of it,
    even after a crash (temp file in the same directory, fsync, rename, fsync the directory).
    Several parts avoid building one big buffer (e.g. a xorb body and its footer)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                out.write(part)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
