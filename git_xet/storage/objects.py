"""Where the server keeps object bytes (xorbs, shards), behind a small interface.

The SQLite index decides what exists; an ObjectStore only holds bytes under keys. A directory
is the embedded default; an object-storage backend only needs these three methods.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from ..fsutil import atomic_write


class ObjectStore(Protocol):
    def put(self, key: str, *parts: bytes) -> None:
        """Store the concatenation of `parts` durably under `key` (all or nothing)."""

    def read_range(self, key: str, start: int, end_inclusive: int) -> bytes:
        """Bytes [start, end_inclusive] of the object (shorter if the object is shorter)."""

    def exists(self, key: str) -> bool: ...


class DirectoryObjectStore:
    """Objects as files under a root directory; keys are relative paths of safe characters."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def _path(self, key: str) -> Path:
        parts = key.split("/")
        if not key or any(p in ("", ".", "..") or not p.replace(".", "").replace("-", "").isalnum() for p in parts):
            raise ValueError(f"unsafe object key {key!r}")
        return self.root.joinpath(*parts)

    def put(self, key: str, *parts: bytes) -> None:
        atomic_write(self._path(key), *parts)

    def read_range(self, key: str, start: int, end_inclusive: int) -> bytes:
        with open(self._path(key), "rb") as handle:
            handle.seek(start)
            return handle.read(end_inclusive - start + 1)

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()
