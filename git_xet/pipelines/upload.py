"""Upload files as XET: chunk, dedup (session, local shard cache, global), pack new chunks into
xorbs, upload xorbs in parallel, then one shard describing the files. This module is the file
loop and the sending; where chunks are found already stored is upload_dedup.py, and how xorbs
and the shard's entries are built is upload_objects.py.

Each file streams through one memory-mapped pass (its sha256 computed beside it, unless the
store checks the sha256 it is told: see add_file): chunks are hashed, then placed a little
behind: a run of chunks already stored somewhere becomes one term pointing there; new chunks go
into the open xorb, whose upload starts as soon as it is full. `finalize()` makes everything
added so far durable on the store (all xorbs, then the shard) and records it in the local shard
cache (`record_batch` shards at a time: an agent records a push's small files together).
"""

from __future__ import annotations

import hashlib
import logging
import mmap
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import NamedTuple

from ..client.backend import UploadStream, XetBackend, upload_in_order
from ..client.chunk_index import ChunkIndex
from ..client.errors import MissingXorbsError, TransferError
from ..client.shard_cache import ShardCache
from ..core.constants import MAX_XORB_BYTES
from ..core.hashes import XetHash, hash_to_hex
from ..core.shard import CasInfo, Shard, serialize_shard
from ..core.xorb import PackedXorb
from .file_hashing import FileDigest, MappedFile, iter_chunk_hashes
from .upload_dedup import ChunkFinder, FileState, append_term, continues
from .upload_objects import Term, XorbBuffers, XorbSlot, cas_info, explained, file_info

log = logging.getLogger("git_xet.upload")

# The last xorb of a finalize goes with the shard (GitXetExtension.upload_xorbs_with_shard) when
# smaller than this: for a small file, one request where the store allows, not two. Larger
# xorbs upload in the background as they fill.
WITH_SHARD_BELOW = 1 << 20
# Files smaller than this never ask the server's global dedup: the round trip (one per file
# of a push of many small files) costs more than the few bytes a match could save.
GLOBAL_DEDUP_MIN_FILE = 1 << 20
PLACEMENT_LAG = 128  # chunks (~8 MiB) hashed ahead of the chunk being placed
MAX_PARALLEL_XORBS = 2  # xorb uploads in flight at once, by default
# Shards waiting to be recorded in the cache (record_batch) are recorded at once when their
# xorbs hold this many chunks: their chunks wait in the session (a dict entry each), so a push
# of large files keeps what it did before, a shard recorded as soon as it is stored.
RECORD_CHUNKS = 8192


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


class _PendingFile(NamedTuple):
    """A file added since the last shard: what its shard entry and a re-upload need."""

    digest: FileDigest
    terms: list[Term]
    # Where the bytes can be read again until the shard lands: a path, or the caller's buffer.
    source: str | os.PathLike[str] | memoryview
    result: UploadedFile


class Uploader:
    """Uploads files to one store in sessions: `add_file` (or `add_bytes`) each, then
    `finalize()`, as often as wanted; a context manager (closing waits for the upload threads
    and releases the xorb buffers and the chunk index)."""

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
        # Shards recorded in the cache in one write transaction (see _record). 1: each at once.
        record_batch: int = 1,
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
        self.record_batch = record_batch
        self.stats = UploadStats()
        # Opened, not loaded: constant cost whatever the history (a private one without cache).
        self._index = self.cache.open() if self.cache else ChunkIndex.temporary()
        self._finder = ChunkFinder(self._index, self.backend)
        self._buffers = XorbBuffers(self.xorb_buffers)
        self._slot: XorbSlot | None = None  # opened on the first new chunk
        self._closed: list[XorbSlot] = []
        self._deferred: list[tuple[PackedXorb, mmap.mmap]] = []  # small last xorbs, sent with the shard
        self._uploads: list[Future[None]] = []
        self._pool = ThreadPoolExecutor(max_workers=self.max_parallel_xorbs, thread_name_prefix="git-xet-xorb-upload")
        self._pending: list[_PendingFile] = []
        self._unrecorded: list[Shard] = []  # stored shards not in the cache yet (see _record)
        self._unrecorded_chunks = 0
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
        try:
            self._record()  # what was stored, even if a later finalize failed
        finally:
            self._buffers = XorbBuffers(self.xorb_buffers)  # drop the 64 MiB maps
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
        sha256 is: a store that computes it anyway (GitXetExtension.checks_sha256_claims) is sent
        the claim and refuses the shard if it is wrong, so the file is not hashed twice; for
        any other store it is computed here, and the result reports it for the caller to check."""
        self._check_usable()
        checks = (ext := self.backend.extension) is not None and ext.checks_sha256_claims
        claimed = bytes.fromhex(sha256_hex) if sha256_hex is not None and checks else None
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
        state = FileState()
        query_global = self.global_dedup and len(view) >= GLOBAL_DEDUP_MIN_FILE
        for end, chunk_digest in iter_chunk_hashes(view, sha256_hasher=hasher):
            state.hashes.append(chunk_digest)
            state.offsets.append(end)
            self._finder.note_chunk(state)
            if query_global and self._finder.maybe_query_global(state):
                self.stats.global_queries += 1
            while len(state.hashes) - state.placed > PLACEMENT_LAG:
                self._place_next(state, view)
            if consumed is not None:
                consumed(state.offsets[state.placed] - self._unsent_span)
        self._finder.probe(state)
        while state.placed < len(state.hashes):
            self._place_next(state, view)
        sha_digest = hasher.digest() if hasher is not None else claimed_sha256
        assert sha_digest is not None
        sizes = [b - a for a, b in zip(state.offsets, state.offsets[1:])]
        file_digest = FileDigest.of_chunks(state.hashes, sizes, sha_digest)
        result = UploadedFile(hash_to_hex(file_digest.file_hash), file_digest.size, sha_digest.hex(), state.new_bytes, state.deduped_bytes)
        self._pending.append(_PendingFile(file_digest, state.terms, source, result))
        return result

    def _place_next(self, state: FileState, view: memoryview) -> None:
        """Place the next chunk(s): a run already stored becomes one term, else one new chunk."""
        i, offsets = state.placed, state.offsets
        run = self._finder.match(state, i)
        if run is not None and (continues(state.terms, run[0], run[1]) or state.guard.accepts(run[2])):
            target, start, count = run
            length = offsets[i + count] - offsets[i]
            append_term(state.terms, Term(target, start, start + count, length, i, i + count), state.guard)
            state.deduped_bytes += length
            state.placed += count
            return
        chunk = view[offsets[i] : offsets[i + 1]]
        slot, index = self._store_chunk(chunk, state.hashes[i])
        append_term(state.terms, Term(slot, index, index + 1, len(chunk), i, i + 1), state.guard)
        state.new_bytes += len(chunk)
        state.placed += 1
        if self.progress:
            self.progress(len(chunk))

    # ------------------------------------------------------------------ xorbs

    def _store_chunk(self, chunk: memoryview, digest: XetHash) -> tuple[XorbSlot, int]:
        if self._slot is not None and not self._slot.builder.can_add(len(chunk)):
            self._close_slot()
        if self._slot is None:
            self._slot = self._open_slot()
        index = self._slot.builder.add(chunk, digest)
        self._finder.packed(digest, self._slot, index)
        return self._slot, index

    def _open_slot(self) -> XorbSlot:
        # Waits for a free buffer: at most xorb_buffers bodies in memory (each <= 64 MiB).
        # Uploads give their buffer back before their future completes.
        while (buffer := self._buffers.try_take()) is None:
            busy = [f for f in self._uploads if not f.done()]
            if not busy:
                raise RuntimeError("no xorb buffer free although no upload is running")
            busy[0].result()  # an upload failure surfaces here, not in a silent wait
        return XorbSlot(buffer)

    def _close_slot(self, last: bool = False) -> None:
        """Close the open xorb and start its upload; the `last` of a finalize, when small, is
        kept to go with the shard instead (see _commit)."""
        slot, self._slot = self._slot, None
        if slot is None:
            return
        built = slot.builder.pack()
        del slot.builder  # its chunk lists; the body stays in the buffer until uploaded
        slot.cas = cas_info(built)
        self._closed.append(slot)
        if last and len(built.body) < WITH_SHARD_BELOW:
            self._deferred.append((built, slot.buffer))
            return
        stream = UploadStream(self._stream_id, self._stream_seq)
        self._stream_seq += 1
        self._uploads.append(self._pool.submit(self._upload_xorb, built, slot.cas, slot.buffer, stream))

    def _upload_xorb(self, built: PackedXorb, cas: CasInfo, buffer: mmap.mmap, stream: UploadStream) -> None:
        try:
            ext = self.backend.extension
            xorb_hex = hash_to_hex(built.xorb_hash)
            inserted = ext.upload_xorb(xorb_hex, built.body, stream) if ext is not None else self.backend.upload_xorb(xorb_hex, built.body)
        except TransferError as exc:
            raise explained(exc, [built]) from None
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

    def _drain(self) -> tuple[list[XorbSlot], list[_PendingFile]]:
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
        self._unrecorded, self._unrecorded_chunks = [], 0
        self._index.forget()
        self._finder.forget_session()
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

    def _commit(self, closed: list[XorbSlot], pending: list[_PendingFile]) -> None:
        """Upload one shard describing the pending files and the closed xorbs; record it."""
        files = tuple(file_info(p.digest, p.terms) for p in pending)
        shard = Shard(files, tuple(slot.closed_cas for slot in closed))
        deferred, self._deferred = self._deferred, []
        sent_with_shard = sum(len(built.body) for built, _ in deferred)
        try:
            with_shard = [(hash_to_hex(built.xorb_hash), built.body.joined()) for built, _ in deferred]
            body = serialize_shard(shard, with_footer=False)
            ext = self.backend.extension
            if ext is not None:
                ext.upload_xorbs_with_shard(with_shard, body, self._stream_id)
            else:
                upload_in_order(self.backend, with_shard, body)
        except TransferError as exc:
            raise explained(exc, [built for built, _ in deferred]) from None
        finally:
            self._new_stream()
            for built, buffer in deferred:
                built.body.release()
                self._buffers.give_back(buffer)
        with self._lock:  # bytes sent with the shard (counted whether or not the store had them)
            self.stats.xorbs_uploaded += len(deferred)
            self.stats.xorb_bytes_sent += sent_with_shard
        self.stats.shards_uploaded += 1
        self._unrecorded.append(shard)
        self._unrecorded_chunks += sum(len(cas.chunks) for cas in shard.cas)
        if len(self._unrecorded) >= self.record_batch or self._unrecorded_chunks >= RECORD_CHUNKS:
            self._record()

    def _record(self) -> None:
        """Put the stored shards not recorded yet into the index (the cache, if any), in one
        write transaction, and from then on find their chunks there rather than in the session.

        Until then their chunks stay in the session (ChunkFinder.session), so this Uploader
        deduplicates against them as before; other processes see them only once recorded. The
        cache only saves work: shards lost with the process (killed before this) cost a later
        upload the bytes of those files again, never a file (the store has them)."""
        shards, self._unrecorded, self._unrecorded_chunks = self._unrecorded, [], 0
        if shards:
            self._index.add_many(shards)
            self._finder.forget_session()
