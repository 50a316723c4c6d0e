"""Upload files as XET: chunk, dedup (session, local shard cache, global), pack new chunks into
xorbs, upload xorbs in parallel, then one shard describing the files.

Each file is hashed first (a memory-mapped pass that also yields its sha256), then walked
chunk by chunk: a run of chunks already stored somewhere becomes one term pointing there; new
chunks go into the open xorb. `finalize()` makes everything added so far durable on the
store (all xorbs, then the shard) and records it in the local shard cache.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from ..client.backend import XetBackend
from ..client.shard_cache import ChunkIndex, ShardCache
from ..core.hashes import hash_to_hex, is_global_dedup_eligible, verification_hash
from ..core.shard import CasInfo, FileInfo, FileTerm, Shard, serialize_shard
from ..core.xorb import VerifiedXorb, XorbBuilder
from .file_hashing import FileDigest, MappedFile, hash_bytes

log = logging.getLogger("git_xet.upload")

GLOBAL_DEDUP_SPACING = 256  # chunks between two global dedup queries of one file
FRAGMENTATION_WINDOW = 128
FRAGMENTATION_ENTER = 4.0  # average chunks per term below which short matches are refused
FRAGMENTATION_LEAVE = 8.0


@dataclass(frozen=True)
class UploadedFile:
    file_hash: str
    size: int
    sha256: str
    new_bytes: int  # bytes of chunks this upload stored for the first time
    deduped_bytes: int  # bytes found already stored (this session, cache or global dedup)


@dataclass
class UploadStats:
    xorbs_uploaded: int = 0
    xorb_bytes_sent: int = 0
    shards_uploaded: int = 0
    global_queries: int = 0


class _XorbSlot:
    """A xorb being filled; once closed only its chunk list is kept (the body goes to upload)."""

    def __init__(self) -> None:
        self.builder = XorbBuilder()
        self.cas: CasInfo | None = None

    @property
    def hash(self) -> bytes:
        assert self.cas is not None, "xorb not closed yet"
        return self.cas.xorb_hash


@dataclass
class _Term:
    target: bytes | _XorbSlot  # an existing xorb hash, or one of our slots
    chunk_start: int
    chunk_end: int
    length: int
    file_chunk_start: int  # span in the file's chunk list, for the verification hash
    file_chunk_end: int


class _FragmentationGuard:
    """Refuse short dedup matches while the file is being shattered into tiny terms."""

    def __init__(self) -> None:
        self.recent: deque[int] = deque(maxlen=FRAGMENTATION_WINDOW)
        self.active = False

    def accepts(self, run_chunks: int) -> bool:
        if not self.recent:
            return True
        average = sum(self.recent) / len(self.recent)
        if self.active and average >= FRAGMENTATION_LEAVE:
            self.active = False
        elif not self.active and average < FRAGMENTATION_ENTER:
            self.active = True
        return not self.active or run_chunks >= average

    def record(self, term_chunks: int) -> None:
        self.recent.append(term_chunks)


@dataclass
class _PendingFile:
    digest: FileDigest
    terms: list[_Term]


@dataclass
class Uploader:
    backend: XetBackend
    cache: ShardCache | None = None
    global_dedup: bool = True
    max_parallel_xorbs: int = 2
    progress: Callable[[int], None] | None = None
    stats: UploadStats = field(default_factory=UploadStats)

    def __post_init__(self) -> None:
        self._index = self.cache.load() if self.cache else ChunkIndex()
        self._session: dict[bytes, tuple[_XorbSlot, int]] = {}
        self._slot = _XorbSlot()
        self._closed: list[_XorbSlot] = []
        self._uploads: list[Future[None]] = []
        self._pool = ThreadPoolExecutor(max_workers=self.max_parallel_xorbs, thread_name_prefix="git-xet-xorb-upload")
        self._pending: list[_PendingFile] = []
        self._lock = threading.Lock()
        self._failed: BaseException | None = None

    def _check_usable(self) -> None:
        if self._failed is not None:
            raise RuntimeError("this Uploader failed earlier; start a new one to retry") from self._failed

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def __enter__(self) -> Uploader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ files

    def add_file(self, path: str | os.PathLike[str]) -> UploadedFile:
        with MappedFile(path) as mapped:
            # Two passes over the mapping (hash, then pack); pages behind each pass are released.
            return self.add_bytes(mapped.view, consumed=mapped.release_before)

    def add_bytes(self, data: bytes | memoryview, consumed: Callable[[int], None] | None = None) -> UploadedFile:
        self._check_usable()
        digest = hash_bytes(data, with_sha256=True, consumed=consumed)
        if self.global_dedup:
            self._query_global(digest)
        guard = _FragmentationGuard()
        terms: list[_Term] = []
        hashes, sizes = list(digest.chunk_hashes), digest.chunk_sizes
        offsets = [0]
        for size in sizes:
            offsets.append(offsets[-1] + size)
        new_bytes = deduped = 0
        i = 0
        while i < len(hashes):
            run = self._match(hashes, i)
            if run is not None and guard.accepts(run[2]):
                target, start, count = run
                length = offsets[i + count] - offsets[i]
                self._append(terms, _Term(target, start, start + count, length, i, i + count), guard)
                deduped += length
                i += count
                if consumed is not None:
                    consumed(offsets[i])
                continue
            chunk = bytes(data[offsets[i] : offsets[i + 1]])
            slot, index = self._store_chunk(chunk, hashes[i])
            self._append(terms, _Term(slot, index, index + 1, len(chunk), i, i + 1), guard)
            new_bytes += len(chunk)
            i += 1
            if self.progress:
                self.progress(len(chunk))
            if consumed is not None:
                consumed(offsets[i])
        self._pending.append(_PendingFile(digest, terms))
        return UploadedFile(hash_to_hex(digest.file_hash), digest.size, digest.sha256.hex(), new_bytes, deduped)

    def _append(self, terms: list[_Term], term: _Term, guard: _FragmentationGuard) -> None:
        last = terms[-1] if terms else None
        if last is not None and last.target is term.target and last.chunk_end == term.chunk_start:
            last.chunk_end, last.length, last.file_chunk_end = term.chunk_end, last.length + term.length, term.file_chunk_end
            return
        if last is not None:
            guard.record(last.chunk_end - last.chunk_start)
        terms.append(term)

    def _match(self, hashes: list[bytes], i: int) -> tuple[bytes | _XorbSlot, int, int] | None:
        """A run of already-stored chunks starting at i: in this session first, then the index."""
        session = self._session.get(hashes[i])
        if session is not None:
            slot, index = session
            n = 1
            while i + n < len(hashes) and self._session.get(hashes[i + n]) == (slot, index + n):
                n += 1
            return slot, index, n
        return self._index.match_run(hashes, i)

    def _query_global(self, digest: FileDigest) -> None:
        last_query = -GLOBAL_DEDUP_SPACING
        for i, chunk in enumerate(digest.chunk_hashes):
            if i - last_query < GLOBAL_DEDUP_SPACING or not (i == 0 or is_global_dedup_eligible(chunk)):
                continue
            if chunk in self._session or self._index.locate(chunk) is not None:
                continue
            last_query = i
            self.stats.global_queries += 1
            answer = self.backend.query_dedup(chunk)
            if answer is not None and answer.cas:
                self._index.add(answer)
                if self.cache:
                    self.cache.add(answer)

    # ------------------------------------------------------------------ xorbs

    def _store_chunk(self, chunk: bytes, digest: bytes) -> tuple[_XorbSlot, int]:
        if not self._slot.builder.can_add(len(chunk)):
            self._close_slot()
        index = self._slot.builder.add(chunk, digest)
        self._session[digest] = (self._slot, index)
        return self._slot, index

    def _close_slot(self) -> None:
        slot = self._slot
        self._slot = _XorbSlot()
        if slot.builder.num_chunks == 0:
            return
        built = slot.builder.build()
        slot.builder = XorbBuilder()  # release the chunk data held by the builder
        slot.cas = _cas_info(built)
        self._closed.append(slot)
        # Bound memory: at most max_parallel_xorbs bodies in flight (each up to 64 MiB).
        while sum(not f.done() for f in self._uploads) >= self.max_parallel_xorbs:
            next(f for f in self._uploads if not f.done()).result()
        self._uploads.append(self._pool.submit(self._upload_xorb, built))

    def _upload_xorb(self, built: VerifiedXorb) -> None:
        inserted = self.backend.upload_xorb(hash_to_hex(built.xorb_hash), built.body)
        with self._lock:
            self.stats.xorbs_uploaded += 1
            if inserted:
                self.stats.xorb_bytes_sent += len(built.body)
        if self.cache:
            # Resume point: later sessions (and other processes) dedup against this xorb even
            # if this process dies before its shard is uploaded.
            self.cache.add(Shard(cas=(_cas_info(built),)))

    # ------------------------------------------------------------------ finalize

    def finalize(self) -> None:
        """Make every file added so far durable on the store: xorbs first, then one shard.

        After a failure the Uploader is unusable (its state no longer matches the store); what
        did get stored is in the shard cache, so a new Uploader resumes without resending it.
        """
        self._check_usable()
        try:
            self._finalize()
        except BaseException as exc:
            self._failed = exc
            raise

    def _finalize(self) -> None:
        self._close_slot()
        uploads, self._uploads = self._uploads, []
        for future in uploads:
            future.result()
        closed, self._closed = self._closed, []
        pending, self._pending = self._pending, []
        if not pending:
            return
        files = tuple(_file_info(p) for p in pending)
        shard = Shard(files, tuple(slot.cas for slot in closed))
        self.backend.upload_shard(serialize_shard(shard, with_footer=False))
        self.stats.shards_uploaded += 1
        # Chunks of this session's closed xorbs now live in the index (and the cache).
        self._index.add(shard)
        self._session = {}
        if self.cache:
            self.cache.add(shard)


def _cas_info(built: VerifiedXorb) -> CasInfo:
    return CasInfo.from_chunks(built.xorb_hash, built.chunk_hashes, built.chunk_sizes, len(built.body))


def _file_info(pending: _PendingFile) -> FileInfo:
    digest = pending.digest
    terms = []
    verification = []
    for t in pending.terms:
        xorb = t.target.hash if isinstance(t.target, _XorbSlot) else t.target
        terms.append(FileTerm(xorb, t.length, t.chunk_start, t.chunk_end))
        verification.append(verification_hash(digest.chunk_hashes[t.file_chunk_start : t.file_chunk_end]))
    return FileInfo(digest.file_hash, tuple(terms), tuple(verification), digest.sha256)
