"""Where the server keeps object bytes (xorbs, shards), behind a small interface.

The SQLite index decides what exists; an ObjectStore only holds bytes under keys. A directory
is the embedded default (small objects packed in one SQLite file in it: packed_objects); an
object-storage backend maps `put_new` to a conditional write (`If-None-Match: *`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO, Protocol, TypeVar

from ..platform.files import TEMP_SUFFIX, atomic_write
from ..platform.locks import held_lock
from .errors import read_only_store
from .packed_objects import PackedObjects

log = logging.getLogger("git_xet.storage")
T = TypeVar("T")

WRITERS_LOCK = ".writers.lock"
# Objects smaller than this are rows of packed_objects, larger ones files: a small file's xorb
# (most of a push of many small files) is one row, a large file's 64 MiB xorbs stay files that
# a server sends with sendfile(2).
PACKED_BELOW = 128 * 1024


def _size(parts: tuple[bytes | memoryview, ...]) -> int:
    return sum(memoryview(part).nbytes for part in parts)


class ObjectStore(Protocol):
    # The most bytes a reader should ask read_range for at once (what one read costs differs:
    # a system call on a directory, a request to a bucket).
    read_piece: int

    def put(self, key: str, *parts: bytes | memoryview) -> None:
        """Store the concatenation of `parts` durably under `key` (all or nothing), replacing
        what was there."""

    def put_new(self, key: str, *parts: bytes | memoryview) -> bool:
        """Like put, but only if `key` does not exist yet: False (and nothing changed) if it
        does. Of writers racing on one key, exactly one gets True."""

    def put_new_many(self, items: Sequence[tuple[str, tuple[bytes | memoryview, ...]]]) -> list[bool]:
        """put_new of each (key, parts), in order: what each returned. A store may make them
        one durable write (a directory store's small objects: one transaction)."""

    def read(self, key: str) -> bytes:
        """The whole object (FileNotFoundError if absent)."""

    def read_range(self, key: str, start: int, end_inclusive: int) -> bytes:
        """Bytes [start, end_inclusive] of the object (shorter if the object is shorter)."""

    def exists(self, key: str) -> bool: ...

    def list(self, prefix: str) -> Iterator[tuple[str, float]]:
        """(key, last-modified time) of every complete object whose key starts with `prefix`
        (for fsck and gc; never a writer's temp file)."""

    def modified(self, key: str) -> float | None:
        """The object's current last-modified time, or None when it is absent: what gc reads
        again just before removing it (a listing is stale by then)."""

    def delete(self, key: str) -> None:
        """Remove an object (no error if it is absent)."""


class DirectoryObjectStore:
    """Objects as files under a root directory, keys being relative paths of safe characters;
    objects below PACKED_BELOW bytes as rows of `<root>/objects.sqlite` instead. A key is looked
    up there first (a write of either kind removes the other copy once it is durable).

    Every write holds a shared lock on `<root>/.writers.lock`, so that a cleaner holding it
    exclusively knows no write is under way (see remove_abandoned_temp_files). Several
    processes may write at once: the agents of a push into a local store, or a server.
    """

    # Below the allocator's mmap threshold (1 MiB, platform.memory.tune_allocator), with room for the
    # bytes object's header: a larger read is a fresh map whose every page faults in (the
    # server's sha256 pass over a stored 256 MiB file took 0.32 s in 16 MiB reads, 0.19 s in
    # these); smaller ones reuse the heap. As large as that allows: a served xorb range costs
    # the server per piece (a worker-thread hop, the ASGI send chain).
    read_piece = 960 * 1024

    def __init__(self, root: Path, file_mode: int = 0o644, read_only: bool = False) -> None:
        """`read_only`: reads only (a snapshot, a read-only share): no lock file is made, and a
        write is refused with what to do instead of the operating system's bare error."""
        self.root = Path(root)
        self.file_mode = file_mode  # 0600 for a server's private data directory
        self.read_only = read_only
        self._root_made = False
        self.packed = PackedObjects(self.root, read_only=read_only)

    def _path(self, key: str) -> Path:
        parts = key.split("/")
        if not key or any(p in ("", ".", "..") or not p.replace(".", "").replace("-", "").isalnum() for p in parts):
            raise ValueError(f"unsafe object key {key!r}")
        return self.root.joinpath(*parts)

    def _writing(self) -> contextlib.AbstractContextManager[int]:
        if self.read_only:
            raise read_only_store(self.root)
        if not self._root_made:  # once per store object, not per write
            self.root.mkdir(parents=True, exist_ok=True)
            self._root_made = True
        return held_lock(self.root / WRITERS_LOCK, shared=True, mode=0o644)

    def put(self, key: str, *parts: bytes | memoryview) -> None:
        path = self._path(key)
        if _size(parts) < PACKED_BELOW:
            self.packed.put(key, b"".join(parts), replace=True)
            path.unlink(missing_ok=True)
            return
        with self._writing():
            atomic_write(path, *parts, mode=self.file_mode)
        self.packed.delete(key)

    def put_new(self, key: str, *parts: bytes | memoryview) -> bool:
        """(Of racing writers of one key, one wins when both are small or both large; CasStore
        holds its lock on a xorb while creating it, whatever the sizes.)"""
        path = self._path(key)
        if _size(parts) < PACKED_BELOW:
            return not path.is_file() and self.packed.put(key, b"".join(parts), replace=False)
        if self.packed.exists(key):
            return False
        with self._writing():
            try:
                atomic_write(path, *parts, mode=self.file_mode, replace=False)
            except FileExistsError:
                return False
        return True

    def put_new_many(self, items: Sequence[tuple[str, tuple[bytes | memoryview, ...]]]) -> list[bool]:
        """The small ones as rows written in one transaction (one commit and sync for a bundle
        of small files' xorbs), the large ones as put_new writes them."""
        written: list[bool] = []
        rows: list[tuple[int, str, bytes]] = []
        for key, parts in items:
            if _size(parts) >= PACKED_BELOW:
                written.append(self.put_new(key, *parts))
                continue
            if not self._path(key).is_file():
                rows.append((len(written), key, b"".join(parts)))
            written.append(False)
        for (at, _, _), new in zip(rows, self.packed.put_new_rows([(key, data) for _, key, data in rows])):
            written[at] = new
        return written

    def read(self, key: str) -> bytes:
        path = self._path(key)
        data = self.packed.get(key)
        return path.read_bytes() if data is None else data

    def read_range(self, key: str, start: int, end_inclusive: int) -> bytes:
        path = self._path(key)
        data = self.packed.get_range(key, start, end_inclusive - start + 1)
        if data is not None:
            return data
        with open(path, "rb") as handle:
            handle.seek(start)
            return handle.read(end_inclusive - start + 1)

    def open_file(self, key: str) -> BinaryIO:
        """The object's file, open for reading (a server sends ranges of it with sendfile);
        FileNotFoundError for a packed object, which has none (and whose row wins over a file
        left beside it by a crash between a write and its removal of the other copy)."""
        path = self._path(key)
        if self.packed.exists(key):
            raise FileNotFoundError(f"{key} is packed: it has no file")
        return open(path, "rb")

    def exists(self, key: str) -> bool:
        return self._path(key).is_file() or self.packed.exists(key)

    def list(self, prefix: str) -> Iterator[tuple[str, float]]:
        yield from sorted([*self._files(prefix, lambda path: path.stat().st_mtime), *self.packed.list(prefix)])

    def sizes(self, prefix: str) -> Iterator[tuple[str, int]]:
        """(key, size) of every object whose key starts with `prefix`, by key (as S3ObjectStore's)."""
        yield from sorted([*self._files(prefix, lambda path: path.stat().st_size), *self.packed.sizes(prefix)])

    def _files(self, prefix: str, measure: Callable[[Path], T]) -> Iterator[tuple[str, T]]:
        """(key, measure(path)) of every complete object file under `prefix`."""
        top = self._path(prefix.rstrip("/"))
        if not top.is_dir():
            return
        for path in top.rglob("*"):
            if path.name.startswith("."):
                continue
            try:
                value = measure(path)
            except FileNotFoundError:  # deleted since the directory was read
                continue
            if path.is_file():
                yield path.relative_to(self.root).as_posix(), value

    def modified(self, key: str) -> float | None:
        path = self._path(key)
        stored_at = self.packed.stored_at(key)
        if stored_at is not None:
            return stored_at
        try:
            return path.stat().st_mtime
        except FileNotFoundError:
            return None

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)
        self.packed.delete(key)

    def close(self) -> None:
        self.packed.close()

    def remove_abandoned_temp_files(self) -> int:
        """Delete the temp files of writers that died mid-write; returns how many.

        Only while no write is under way (the writers' lock is free): a temp file being
        written is never removed. When some process is writing, nothing is removed now.
        """
        try:
            with held_lock(self.root / WRITERS_LOCK, wait=False, mode=0o644):
                removed = 0
                for path in self.root.rglob(f".*{TEMP_SUFFIX}"):
                    if path.is_file():
                        path.unlink(missing_ok=True)
                        removed += 1
                return removed
        except BlockingIOError:  # from the lock: a writer holds it
            log.info("not removing temp files in %s: a write is under way", self.root)
            return 0
