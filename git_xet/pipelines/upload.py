"""Upload files as XET: chunk, dedup (session, local shard cache, global), pack new chunks into
xorbs, upload xorbs in parallel, then one shard describing the files.

Each file streams through one memory-mapped pass (its sha256 computed beside it, unless the
store checks the sha256 it is told: see add_file): chunks are
hashed, then placed a little behind: a run of chunks already stored somewhere becomes one term
pointing there; new chunks go into the open xorb, whose upload starts as soon as it is full. A chunk stored raw
is not copied into the xorb: the xorb's body references it in the file's map, and is sent from
there (XorbBuilder, core/scattered.py). `finalize()`
makes everything added so far durable on the store (all xorbs, then the shard) and records it
in the local shard cache.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import mmap
import os
import queue
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import NamedTuple

from ..client.backend import UploadStream, XetBackend
from ..client.chunk_index import CachedXorb, ChunkIndex
from ..client.errors import MissingXorbsError, TransferError
from ..client.shard_cache import ShardCache
from ..core.constants import MAX_XORB_BYTES
from ..core.errors import HashMismatchError
from ..core.hashes import XetHash, hash_to_hex, is_global_dedup_eligible, verification_hash
from ..core.shard import CasInfo, FileInfo, FileTerm, Shard, serialize_shard
from ..core.xorb import MAX_XORB_BODY_BYTES, PackedXorb, XorbBuilder, verify_xorb
from ..platform.memory import anonymous_buffer
from .file_hashing import FileDigest, MappedFile, iter_chunk_hashes

log = logging.getLogger("git_xet.upload")

# The last xorb of a finalize goes with the shard (XetBackend.upload_xorbs_with_shard) when
# smaller than this: for a small file, one request where the store allows, not two. Larger
# xorbs upload in the background as they fill.
WITH_SHARD_BELOW = 1 << 20
GLOBAL_DEDUP_SPACING = 256  # chunks between two global dedup queries of one file
# Files smaller than this never ask the server's global dedup: the round trip (one per file
# of a push of many small files) costs more than the few bytes a match could save.
GLOBAL_DEDUP_MIN_FILE = 1 << 20
PLACEMENT_LAG = 128  # chunks (~8 MiB) hashed ahead of the chunk being placed
# Chunks are looked up in the cache index in batches (one query each), at the latest this
# many chunks after being hashed: a hit still reaches PLACEMENT_LAG - PROBE_SPAN chunks back.
PROBE_SPAN = 64
# The fragmentation guard, with hf-xet's parameters (its DefragPrevention defaults): over the
# last FRAGMENTATION_WINDOW terms, once there are that many, the average chunks per term must
# stay at FRAGMENTATION_TARGET (or FRAGMENTATION_TARGET * FRAGMENTATION_HYSTERESIS while
# matches are being taken), or matches shorter than the average are stored again.
FRAGMENTATION_WINDOW = 128
FRAGMENTATION_TARGET = 8.0
FRAGMENTATION_HYSTERESIS = 0.5
MAX_PARALLEL_XORBS = 2  # xorb uploads in flight at once, by default


class UploadedFile(NamedTuple):
    """What an upload stored, in the text forms callers pass on (to downloads, URLs, JSON)."""

    file_hex: str  # the XET file hash (core.hashes.hash_to_hex)
    size: int
    sha256_hex: str  # the Git LFS oid
    new_bytes: int  # bytes of chunks this upload stored for the first time
    deduped_bytes: int  # bytes found already stored (this session, cache or global dedup)


class UploadStats:
    """Counters of what an Uploader sent and asked."""

    def __init__(self) -> None:
        self.xorbs_uploaded = 0
        self.xorb_bytes_sent = 0
        self.shards_uploaded = 0
        self.global_queries = 0
        self.store_resets = 0  # shards refused for missing xorbs, then re-uploaded without the cache


class _XorbBuffers:
    """A fixed number of reusable xorb-sized buffers, shared by the xorb being filled and the
    uploads in flight.

    A buffer holds its xorb's record headers and compressed payloads (raw chunks stay in the
    file's map). Anonymous maps cost resident memory only for the pages written, and reusing
    them spares the page faults of a fresh allocation per xorb (on this kind of VM,
    first-touching 64 MiB costs ~0.1 s). No free buffer means packing waits: that bounds memory.
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


class _XorbSlot:
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


class _Term:
    """Chunks [chunk_start, chunk_end) of a xorb, as file chunks [file_chunk_start,
    file_chunk_end) (the span the verification hash covers); extended in place when the next
    term continues it."""

    __slots__ = ("chunk_end", "chunk_start", "file_chunk_end", "file_chunk_start", "length", "target")

    def __init__(self, target: XetHash | _XorbSlot, chunk_start: int, chunk_end: int, length: int, file_chunk_start: int, file_chunk_end: int) -> None:
        self.target = target  # an existing xorb hash, or one of our slots
        self.chunk_start = chunk_start
        self.chunk_end = chunk_end
        self.length = length
        self.file_chunk_start = file_chunk_start
        self.file_chunk_end = file_chunk_end


class _FragmentationGuard:
    """Refuse short dedup matches while the file is being shattered into tiny terms: a file of
    many short terms downloads as many small ranges (docs/benchmarks.md has the figure).

    hf-xet's rule exactly (xet-core's DefragPrevention), so that on any data both clients
    dedup the same chunks: sending no more than hf-xet means refusing no match it takes. The
    average counts the term being built; a match continuing the last term is always taken
    (the caller checks that)."""

    def __init__(self) -> None:
        self.terms: deque[int] = deque()  # chunks in each of the last FRAGMENTATION_WINDOW terms
        self.chunks = 0  # their sum
        self.low_threshold = True  # hysteresis: lowered while matches are taken

    def accepts(self, run_chunks: int) -> bool:
        if len(self.terms) < FRAGMENTATION_WINDOW:
            return True  # too few terms for an estimate
        average = self.chunks / len(self.terms)
        target = FRAGMENTATION_TARGET * FRAGMENTATION_HYSTERESIS if self.low_threshold else FRAGMENTATION_TARGET
        if average >= target:
            self.low_threshold = True
        elif run_chunks < average:
            self.low_threshold = False  # refusing: take matches again only at the full target
            return False
        return True

    def new_term(self, chunks: int) -> None:
        self.terms.append(chunks)
        self.chunks += chunks
        if len(self.terms) > FRAGMENTATION_WINDOW:
            self.chunks -= self.terms.popleft()

    def grow_term(self, chunks: int) -> None:
        if self.terms:
            self.terms[-1] += chunks
            self.chunks += chunks


class _FileState:
    """One file being streamed through add_bytes: chunks hashed so far, and how many placed."""

    def __init__(self) -> None:
        self.hashes: list[XetHash] = []
        self.offsets: list[int] = [0]  # chunk i spans offsets[i]:offsets[i + 1]
        self.placed = 0
        self.terms: list[_Term] = []
        self.guard = _FragmentationGuard()
        self.new_bytes = 0
        self.deduped_bytes = 0
        self.last_global_query = -GLOBAL_DEDUP_SPACING
        self.unprobed: list[int] = []  # chunks not looked up yet
        # Cached xorbs found by probing chunks ahead of placement: (file chunk j, xorb,
        # index of chunk j in it). A run through chunk j may start before it.
        self.anchors: deque[tuple[int, CachedXorb, int]] = deque()
        # The xorb of the last cached run, and how its chunk numbers relate to the file's
        # (index in xorb = file chunk + offset): after a small edit the run usually resumes there.
        self.hint: tuple[CachedXorb, int] | None = None


class _PendingFile(NamedTuple):
    digest: FileDigest
    terms: list[_Term]
    # Where the bytes can be read again until the shard lands: a path, or the caller's buffer.
    source: str | os.PathLike[str] | memoryview
    result: UploadedFile


class Uploader:
    def __init__(
        self,
        backend: XetBackend,
        cache: ShardCache | None = None,
        global_dedup: bool = True,
        max_parallel_xorbs: int = MAX_PARALLEL_XORBS,
        # Xorb bodies held at once, the one being filled included (64 MiB each at most). With
        # two, one fills while one uploads, or both upload while packing waits: the server
        # always has work, and a 4 GiB push stays under 300 MB resident (buffers, plus the
        # mapped pages the unsent raw chunks are in).
        xorb_buffers: int = 2,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        self.backend = backend
        self.cache = cache
        self.global_dedup = global_dedup
        self.max_parallel_xorbs = max_parallel_xorbs
        self.xorb_buffers = xorb_buffers
        # How far behind placement the raw chunks of unsent xorbs reach when the file's new
        # bytes are contiguous: its pages stay mapped for the send. Pages dropped sooner (a
        # file whose new chunks lie between deduplicated stretches) are only faulted back in.
        self._unsent_span = xorb_buffers * MAX_XORB_BYTES
        self.progress = progress
        self.stats = UploadStats()
        # Opened, not loaded: constant cost whatever the history (a private one without cache).
        self._index = self.cache.open() if self.cache else ChunkIndex.temporary()
        self._session: dict[XetHash, tuple[_XorbSlot, int]] = {}
        self._buffers = _XorbBuffers(self.xorb_buffers)
        self._slot: _XorbSlot | None = None  # opened on the first new chunk
        self._closed: list[_XorbSlot] = []
        self._deferred: list[tuple[PackedXorb, mmap.mmap]] = []  # small last xorbs, sent with the shard
        self._uploads: list[Future[None]] = []
        self._pool = ThreadPoolExecutor(max_workers=self.max_parallel_xorbs, thread_name_prefix="git-xet-xorb-upload")
        self._pending: list[_PendingFile] = []
        self._lock = threading.Lock()
        self._failed: BaseException | None = None
        self._new_stream()

    def _new_stream(self) -> None:
        """Number the xorbs sent before the next shard afresh (backend.UploadStream): a server
        that hashes a file's sha256 as its xorbs arrive then has it when the shard comes."""
        self._stream_id = os.urandom(16).hex()
        self._stream_seq = 0

    def _check_usable(self) -> None:
        if self._failed is not None:
            raise RuntimeError("this Uploader failed earlier; start a new one to retry") from self._failed

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self._buffers = _XorbBuffers(self.xorb_buffers)  # drop the 64 MiB maps
        if self.cache:
            self.cache.close()
        else:
            self._index.close()

    def __enter__(self) -> Uploader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ files

    def add_file(self, path: str | os.PathLike[str], sha256_hex: str | None = None) -> UploadedFile:
        """Add one file on disk. `sha256_hex` (a Git LFS oid) is what the caller says the file's
        sha256 is: a store that computes it anyway (XetBackend.checks_sha256_claims) is sent
        the claim and refuses the shard if it is wrong, so the file is not hashed twice; for
        any other store it is computed here, and the result reports it for the caller to check."""
        self._check_usable()
        claimed = bytes.fromhex(sha256_hex) if sha256_hex is not None and self.backend.checks_sha256_claims else None
        with MappedFile(path) as mapped:
            return self._add(mapped.view, mapped.release_before, path, claimed)

    def add_bytes(self, data: bytes | memoryview, consumed: Callable[[int], None] | None = None) -> UploadedFile:
        """Upload one file held in memory (see `_add`); the buffer is referenced until finalize."""
        self._check_usable()
        view = memoryview(data)
        return self._add(view, consumed, view)

    def _add(
        self, view: memoryview, consumed: Callable[[int], None] | None, source: str | os.PathLike[str] | memoryview, claimed_sha256: bytes | None = None
    ) -> UploadedFile:
        """Chunk, hash, dedup and pack one file in a single streaming pass.

        Chunks are placed (deduplicated or packed into the open xorb) PLACEMENT_LAG chunks
        behind hashing, so a dedup run can be matched past the chunk being placed, a global
        dedup answer arrives before the chunks it covers are placed, and xorb uploads start
        while the rest of the file is still being read. `consumed(offset)` is told how far
        every reader got, less _unsent_span, so a mapped file can drop the pages behind them.
        """
        hasher = hashlib.sha256() if claimed_sha256 is None else None
        state = _FileState()
        query_global = self.global_dedup and len(view) >= GLOBAL_DEDUP_MIN_FILE
        for end, chunk_digest in iter_chunk_hashes(view, sha256_hasher=hasher):
            state.hashes.append(chunk_digest)
            state.offsets.append(end)
            self._note_chunk(state)
            if query_global:
                self._maybe_query_global(state)
            while len(state.hashes) - state.placed > PLACEMENT_LAG:
                self._place_next(state, view)
            if consumed is not None:
                consumed(state.offsets[state.placed] - self._unsent_span)
        self._probe(state)
        while state.placed < len(state.hashes):
            self._place_next(state, view)
        sha_digest = hasher.digest() if hasher is not None else claimed_sha256
        assert sha_digest is not None
        sizes = [b - a for a, b in zip(state.offsets, state.offsets[1:])]
        file_digest = FileDigest.of_chunks(state.hashes, sizes, sha_digest)
        result = UploadedFile(hash_to_hex(file_digest.file_hash), file_digest.size, sha_digest.hex(), state.new_bytes, state.deduped_bytes)
        self._pending.append(_PendingFile(file_digest, state.terms, source, result))
        return result

    def _place_next(self, state: _FileState, view: memoryview) -> None:
        """Place the next chunk(s): a run already stored becomes one term, else one new chunk."""
        i, offsets = state.placed, state.offsets
        run = self._match(state, i)
        if run is not None and (self._continues(state.terms, run[0], run[1]) or state.guard.accepts(run[2])):
            target, start, count = run
            length = offsets[i + count] - offsets[i]
            self._append(state.terms, _Term(target, start, start + count, length, i, i + count), state.guard)
            state.deduped_bytes += length
            state.placed += count
            return
        chunk = view[offsets[i] : offsets[i + 1]]
        slot, index = self._store_chunk(chunk, state.hashes[i])
        self._append(state.terms, _Term(slot, index, index + 1, len(chunk), i, i + 1), state.guard)
        state.new_bytes += len(chunk)
        state.placed += 1
        if self.progress:
            self.progress(len(chunk))

    @staticmethod
    def _continues(terms: list[_Term], target: XetHash | _XorbSlot, chunk_start: int) -> bool:
        """Whether chunks of `target` from `chunk_start` on would extend the file's last term."""
        return bool(terms) and terms[-1].target == target and terms[-1].chunk_end == chunk_start

    def _append(self, terms: list[_Term], term: _Term, guard: _FragmentationGuard) -> None:
        if self._continues(terms, term.target, term.chunk_start):
            last = terms[-1]
            last.chunk_end, last.length, last.file_chunk_end = term.chunk_end, last.length + term.length, term.file_chunk_end
            guard.grow_term(term.chunk_end - term.chunk_start)
            return
        guard.new_term(term.chunk_end - term.chunk_start)
        terms.append(term)

    def _match(self, state: _FileState, i: int) -> tuple[XetHash | _XorbSlot, int, int] | None:
        """A run of already-stored chunks starting at i: in this session first, then the index."""
        hashes = state.hashes
        session = self._session.get(hashes[i])
        if session is not None:
            slot, index = session
            n = 1
            while i + n < len(hashes) and self._session.get(hashes[i + n]) == (slot, index + n):
                n += 1
            return slot, index, n
        return self._cached_run(state, i)

    def _note_chunk(self, state: _FileState) -> None:
        """Queue the newest chunk for an index lookup unless this session stored it; look the
        queue up once its oldest has waited PROBE_SPAN chunks."""
        j = len(state.hashes) - 1
        if state.hashes[j] not in self._session:
            state.unprobed.append(j)
        if state.unprobed and j - state.unprobed[0] >= PROBE_SPAN:
            self._probe(state)

    def _probe(self, state: _FileState) -> None:
        """Look the queued chunks up in the index (one query); hits become anchors.

        One query per batch rather than per chunk: each query releases the GIL, and with the
        xorb upload threads busy, getting it back costs far more than the lookup itself."""
        if not state.unprobed:
            return
        found = self._index.probe_many([state.hashes[j] for j in state.unprobed])
        for j, hit in zip(state.unprobed, found):
            if hit is not None:
                state.anchors.append((j, *hit))
        state.unprobed.clear()

    def _cached_run(self, state: _FileState, i: int) -> tuple[XetHash, int, int] | None:
        """The run of chunks from i stored consecutively in one cached xorb: in the last run's
        xorb if it goes on there (one term, not two), else where the index found chunk i, or a
        later chunk whose xorb holds chunk i too (a global dedup answer that arrived after
        chunk i was looked up)."""
        hashes, anchors = state.hashes, state.anchors
        while anchors and anchors[0][0] < i:
            anchors.popleft()
        hint = [state.hint] if state.hint is not None else []
        for xorb, offset in itertools.chain(hint, ((xorb, index - j) for j, xorb, index in anchors)):
            start = i + offset
            if xorb.has(start, hashes[i]):
                state.hint = (xorb, offset)
                n = 1
                while i + n < len(hashes) and xorb.has(start + n, hashes[i + n]):
                    n += 1
                return xorb.xorb_hash, start, n
        return None

    def _maybe_query_global(self, state: _FileState) -> None:
        """Ask the server about the newest chunk when it is a spaced, eligible, unknown one."""
        i = len(state.hashes) - 1
        chunk = state.hashes[i]
        if i - state.last_global_query < GLOBAL_DEDUP_SPACING or not (i == 0 or is_global_dedup_eligible(chunk)):
            return
        if chunk in self._session:
            return
        self._probe(state)  # is this one cached?
        if state.anchors and state.anchors[-1][0] == i:
            return
        state.last_global_query = i
        self.stats.global_queries += 1
        answer = self.backend.query_dedup(chunk)
        if answer is not None and answer.cas:
            self._index.add(answer)
            found = self._index.probe(chunk)
            if found is not None:
                state.anchors.append((i, *found))

    # ------------------------------------------------------------------ xorbs

    def _store_chunk(self, chunk: memoryview, digest: XetHash) -> tuple[_XorbSlot, int]:
        if self._slot is not None and not self._slot.builder.can_add(len(chunk)):
            self._close_slot()
        if self._slot is None:
            self._slot = self._open_slot()
        index = self._slot.builder.add(chunk, digest)
        self._session[digest] = (self._slot, index)
        return self._slot, index

    def _open_slot(self) -> _XorbSlot:
        # Waits for a free buffer: at most xorb_buffers bodies in memory (each <= 64 MiB).
        # Uploads give their buffer back before their future completes.
        while (buffer := self._buffers.try_take()) is None:
            busy = [f for f in self._uploads if not f.done()]
            if not busy:
                raise RuntimeError("no xorb buffer free although no upload is running")
            busy[0].result()  # an upload failure surfaces here, not in a silent wait
        return _XorbSlot(buffer)

    def _close_slot(self, last: bool = False) -> None:
        """Close the open xorb and start its upload; the `last` of a finalize, when small, is
        kept to go with the shard instead (see _commit)."""
        slot, self._slot = self._slot, None
        if slot is None:
            return
        built = slot.builder.pack()
        del slot.builder  # its chunk lists; the body stays in the buffer until uploaded
        slot.cas = _cas_info(built)
        self._closed.append(slot)
        if last and len(built.body) < WITH_SHARD_BELOW:
            self._deferred.append((built, slot.buffer))
            return
        stream = UploadStream(self._stream_id, self._stream_seq)
        self._stream_seq += 1
        self._uploads.append(self._pool.submit(self._upload_xorb, built, slot.cas, slot.buffer, stream))

    def _upload_xorb(self, built: PackedXorb, cas: CasInfo, buffer: mmap.mmap, stream: UploadStream) -> None:
        try:
            inserted = self.backend.upload_xorb(hash_to_hex(built.xorb_hash), built.body, stream)
        except TransferError as exc:
            raise _explained(exc, [built]) from None
        finally:
            body_size = len(built.body)
            built.body.release()  # any later use of this body now fails loudly
            self._buffers.give_back(buffer)
        with self._lock:
            self.stats.xorbs_uploaded += 1
            if inserted:
                self.stats.xorb_bytes_sent += body_size
        # Resume point: later sessions (and other processes) dedup against this xorb even if
        # this process dies before its shard is uploaded.
        self._index.add(Shard(cas=(cas,)))

    # ------------------------------------------------------------------ finalize

    def finalize(self) -> list[UploadedFile]:
        """Make every file added so far durable on the store: xorbs first, then one shard.
        Returns those files, as finally uploaded (after a store reset, everything went again).

        After a failure the Uploader is unusable (its state no longer matches the store); what
        did get stored is in the shard cache, so a new Uploader resumes without resending it.
        """
        self._check_usable()
        try:
            return self._finalize()
        except BaseException as exc:
            self._failed = exc
            raise

    def _finalize(self) -> list[UploadedFile]:
        closed, pending = self._drain()
        if not pending:
            return []
        try:
            self._commit(closed, pending)
        except MissingXorbsError as exc:
            pending = self._redo_without_cache(pending, exc)
        return [file.result for file in pending]

    def _drain(self) -> tuple[list[_XorbSlot], list[_PendingFile]]:
        """Close the open xorb, wait for every xorb upload; the closed xorbs and pending files."""
        self._close_slot(last=True)
        uploads, self._uploads = self._uploads, []
        for future in uploads:
            future.result()
        closed, self._closed = self._closed, []
        pending, self._pending = self._pending, []
        return closed, pending

    def _redo_without_cache(self, pending: list[_PendingFile], refusal: MissingXorbsError) -> list[_PendingFile]:
        """The store lacks xorbs we deduplicated against: it was reset or restored from an older
        backup since this machine cached them. Forget everything cached about it and upload the
        pending files again (chunks it still holds are found by global dedup or answered
        "already stored"), so this push succeeds instead of failing until the cache is pruned."""
        log.warning(
            "the store refused the shard because it lacks xorbs this machine's shard cache says it holds (%s); "
            "it was probably reset or restored from an older backup: forgetting the cache for it and re-uploading %d file(s)",
            refusal,
            len(pending),
        )
        self.stats.store_resets += 1
        self._index.forget()
        self._session = {}
        for file in pending:
            self._add_again(file)
        closed, again = self._drain()
        try:
            self._commit(closed, again)
        except MissingXorbsError as exc:
            raise MissingXorbsError(
                f"{exc} (even after re-uploading every file without the shard cache: the store itself is inconsistent; check its data directory)",
                status=exc.status,
            ) from None
        log.warning("re-uploaded %d file(s) to the reset store", len(again))
        return again

    def _add_again(self, file: _PendingFile) -> None:
        if isinstance(file.source, memoryview):
            again = self._add(file.source, None, file.source)
        else:
            with MappedFile(file.source) as mapped:
                again = self._add(mapped.view, mapped.release_before, file.source)
        if again.file_hex != hash_to_hex(file.digest.file_hash):
            raise TransferError(f"{file.source} changed while it was being uploaded; push again")

    def _commit(self, closed: list[_XorbSlot], pending: list[_PendingFile]) -> None:
        """Upload one shard describing the pending files and the closed xorbs; record it."""
        files = tuple(_file_info(p) for p in pending)
        shard = Shard(files, tuple(slot.closed_cas for slot in closed))
        deferred, self._deferred = self._deferred, []
        sent_with_shard = sum(len(built.body) for built, _ in deferred)
        try:
            with_shard = [(hash_to_hex(built.xorb_hash), built.body.joined()) for built, _ in deferred]
            self.backend.upload_xorbs_with_shard(with_shard, serialize_shard(shard, with_footer=False), self._stream_id)
        except TransferError as exc:
            raise _explained(exc, [built for built, _ in deferred]) from None
        finally:
            self._new_stream()
            for built, buffer in deferred:
                built.body.release()
                self._buffers.give_back(buffer)
        with self._lock:  # bytes sent with the shard (counted whether or not the store had them)
            self.stats.xorbs_uploaded += len(deferred)
            self.stats.xorb_bytes_sent += sent_with_shard
        self.stats.shards_uploaded += 1
        # Chunks of this session's closed xorbs now live in the index (the cache, if any).
        self._index.add(shard)
        self._session = {}


def _explained(exc: TransferError, sent: list[PackedXorb]) -> TransferError:
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


def _cas_info(built: PackedXorb) -> CasInfo:
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
