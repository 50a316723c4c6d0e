"""Chunk and hash a file using both cores.

The C gearhash scan and BLAKE3 both release the GIL, so a two-stage pipeline (one thread
finds chunk boundaries in a memory-mapped file, the caller's thread hashes the chunks) runs
at the speed of the slower stage instead of the sum of both.
"""

from __future__ import annotations

import hashlib
import mmap
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

from ..core.chunking import Chunker
from ..core.hashes import XetHash, chunk_hash, file_hash
from ..platform.memory import drop_pages
from ..platform.readahead import readahead

SCAN_BLOCK = 4 * 1024 * 1024
_QUEUE_DEPTH = 4  # blocks scanned ahead of the consumer: bounds the mapped pages resident


class FileDigest(NamedTuple):
    """What hashing a file yields: its XET hash, its chunks and, if asked, its sha256."""

    file_hash: XetHash
    size: int
    chunk_hashes: tuple[XetHash, ...]
    chunk_sizes: tuple[int, ...]
    sha256: bytes | None = None

    @classmethod
    def of_chunks(cls, hashes: list[XetHash], sizes: list[int], sha256: bytes | None = None) -> FileDigest:
        return cls(file_hash(hashes, sizes), sum(sizes), tuple(hashes), tuple(sizes), sha256)


def iter_chunk_ends(view: memoryview, *, sha256_hasher: hashlib._Hash | None = None, block_size: int = SCAN_BLOCK) -> Iterator[int]:
    """Yield the chunk end offsets of `view`, scanning ahead in a background thread.

    When `sha256_hasher` is given it is updated with the whole view, in the scanning thread: each
    block is read once for both, and the consumer (BLAKE3 per chunk, plus packing during an
    upload) has about as much work, so the two threads stay balanced. A view of one block or
    less is scanned at once, in the caller's thread: there is nothing to overlap, and a thread
    per file would cost more than scanning a small file.
    """
    if len(view) <= block_size:
        chunker = Chunker()
        found = chunker.feed(view)
        if sha256_hasher is not None:
            sha256_hasher.update(view)
        last = chunker.finish()
        yield from found
        if last is not None:
            yield last
        return

    def scan() -> Iterator[list[int]]:
        chunker = Chunker()
        for start in range(0, len(view), block_size):
            block = view[start : start + block_size]
            found = chunker.feed(block)
            if sha256_hasher is not None:
                sha256_hasher.update(block)
            if found:
                yield found
        last = chunker.finish()
        if last is not None:
            yield [last]

    for found in readahead(scan(), _QUEUE_DEPTH, "git-xet-chunk-scan"):
        yield from found


class MappedFile:
    """A read-only memory map of a file that can drop the pages already consumed.

    Mapped pages count in the process's resident size even though they are page cache;
    `release_before` (madvise DONTNEED behind the reader) keeps a pass over a huge file at a
    bounded RSS. Empty files map to an empty view.
    """

    RELEASE_STEP = 8 * 1024 * 1024

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._handle = open(Path(path), "rb")  # noqa: SIM115 - owned by this object: close() or `with`
        self.size = os.fstat(self._handle.fileno()).st_size
        self._map = mmap.mmap(self._handle.fileno(), 0, access=mmap.ACCESS_READ) if self.size else None
        self.view = memoryview(self._map) if self._map is not None else memoryview(b"")
        self._released = 0

    def release_before(self, offset: int) -> None:
        if offset < self._released:  # a new pass over the file started
            self._released = 0
        if self._map is None or offset - self._released < self.RELEASE_STEP:
            return
        end = offset - offset % mmap.PAGESIZE
        if end > self._released and drop_pages(self._map, self._released, end - self._released):
            self._released = end

    def close(self) -> None:
        self.view.release()
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:
                pass  # views still out (in an unsent xorb's body, an exception's traceback): unmapped when they go
        self._handle.close()

    def __enter__(self) -> MappedFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def iter_chunk_hashes(view: memoryview, *, sha256_hasher: hashlib._Hash | None = None) -> Iterator[tuple[int, XetHash]]:
    """Yield (end offset, chunk hash) for each chunk of `view`, as soon as it is hashed."""
    prev = 0
    for end in iter_chunk_ends(view, sha256_hasher=sha256_hasher):
        yield end, chunk_hash(view[prev:end])
        prev = end


def hash_bytes(
    data: bytes | memoryview, *, with_sha256: bool = False, consumed: Callable[[int], None] | None = None
) -> FileDigest:
    """Chunk and hash an in-memory buffer; `consumed(offset)` is told how far hashing got."""
    view = memoryview(data)
    hasher = hashlib.sha256() if with_sha256 else None
    hashes: list[XetHash] = []
    sizes: list[int] = []
    prev = 0
    for end, digest in iter_chunk_hashes(view, sha256_hasher=hasher):
        hashes.append(digest)
        sizes.append(end - prev)
        prev = end
        if consumed is not None:
            consumed(end)
    return FileDigest.of_chunks(hashes, sizes, hasher.digest() if hasher else None)


def hash_file(path: str | os.PathLike[str], *, with_sha256: bool = False) -> FileDigest:
    """Chunk and hash a file on disk (memory-mapped: no copy, bounded resident memory)."""
    with MappedFile(path) as mapped:
        return hash_bytes(mapped.view, with_sha256=with_sha256, consumed=mapped.release_before)
