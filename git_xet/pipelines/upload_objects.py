"""What an upload sends, built: xorbs packed into a fixed number of reusable buffers, and each
file's entry in the shard that makes them durable (pipelines/upload.py drives both).

A buffer holds its xorb's record headers and compressed payloads; a chunk stored raw is not
copied into it: the xorb's body references the chunk where the file lies (its map), and is sent
from there (XorbBuilder, core/scattered.py).
"""

from __future__ import annotations

import mmap
import queue
import threading

from ..client.errors import TransferError
from ..core.errors import HashMismatchError
from ..core.hashes import XetHash, hash_to_hex, verification_hash
from ..core.shard import CasInfo, FileInfo, FileTerm
from ..core.xorb import MAX_XORB_BODY_BYTES, PackedXorb, XorbBuilder, verify_xorb
from ..platform.memory import anonymous_buffer
from .file_hashing import FileDigest


class XorbBuffers:
    """A fixed number of reusable xorb-sized buffers, shared by the xorb being filled and the
    uploads in flight.

    Anonymous maps cost resident memory only for the pages written, and reusing them spares the
    page faults of a fresh allocation per xorb (on this kind of VM, first-touching 64 MiB costs
    ~0.1 s). No free buffer means packing waits: that bounds memory.
    """

    def __init__(self, count: int) -> None:
        self._free: queue.Queue[mmap.mmap] = queue.Queue()
        self._unmade = count
        self._lock = threading.Lock()

    def try_take(self) -> mmap.mmap | None:
        with self._lock:
            if self._free.empty() and self._unmade:
                self._unmade -= 1
                return anonymous_buffer(MAX_XORB_BODY_BYTES)
        try:
            return self._free.get_nowait()
        except queue.Empty:
            return None

    def give_back(self, buffer: mmap.mmap) -> None:
        self._free.put(buffer)


class XorbSlot:
    """A xorb being filled; once closed only its chunk list is kept (the body goes to upload)."""

    def __init__(self, buffer: mmap.mmap) -> None:
        self.buffer = buffer
        self.builder = XorbBuilder(buffer)
        self.cas: CasInfo | None = None

    @property
    def closed_cas(self) -> CasInfo:
        assert self.cas is not None, "xorb not closed yet"
        return self.cas

    @property
    def hash(self) -> XetHash:
        return self.closed_cas.xorb_hash


class Term:
    """Chunks [chunk_start, chunk_end) of a xorb, as file chunks [file_chunk_start,
    file_chunk_end) (the span the verification hash covers); extended in place when the next
    term continues it."""

    __slots__ = ("chunk_end", "chunk_start", "file_chunk_end", "file_chunk_start", "length", "target")

    def __init__(self, target: XetHash | XorbSlot, chunk_start: int, chunk_end: int, length: int, file_chunk_start: int, file_chunk_end: int) -> None:
        self.target = target  # an existing xorb hash, or one of our slots
        self.chunk_start = chunk_start
        self.chunk_end = chunk_end
        self.length = length
        self.file_chunk_start = file_chunk_start
        self.file_chunk_end = file_chunk_end


def cas_info(built: PackedXorb) -> CasInfo:
    """The shard's description of a packed xorb."""
    return CasInfo.from_chunks(built.xorb_hash, built.chunk_hashes, built.chunk_sizes, len(built.body))


def file_info(digest: FileDigest, terms: list[Term]) -> FileInfo:
    """The shard's entry for a file: its terms (our xorbs by their now-known hashes) and each
    term's verification hash."""
    entries = []
    verification = []
    for t in terms:
        xorb = t.target.hash if isinstance(t.target, XorbSlot) else t.target
        entries.append(FileTerm(xorb, t.length, t.chunk_start, t.chunk_end))
        verification.append(verification_hash(digest.chunk_hashes[t.file_chunk_start : t.file_chunk_end]))
    return FileInfo(digest.file_hash, tuple(entries), tuple(verification), digest.sha256)


def explained(exc: TransferError, sent: list[PackedXorb]) -> TransferError:
    """`exc`, or, when the store refused a xorb whose bytes no longer hash as they did when
    packed, an error that says why: a raw chunk is read where the file lies when its xorb is
    sent, so a file rewritten meanwhile sends other bytes (checked only on a refusal)."""
    if exc.retryable:
        return exc
    for built in sent:
        try:
            verify_xorb(built.body.joined(), built.xorb_hash)
        except HashMismatchError:
            return TransferError(
                f"a file changed while it was being uploaded (xorb {hash_to_hex(built.xorb_hash)[:12]} no longer holds "
                "the bytes read from it); push again once nothing is writing to it",
                retryable=False,
            )
    return exc
