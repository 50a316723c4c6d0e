"""Download a XET file (or a byte range of it) from any backend, verified, in bounded memory.

Fetches run in parallel ahead of the writer, bounded in count and in bytes held; a xorb byte
range used by several terms is kept for its next use while the budget allows, and fetched again
otherwise (see fetch_schedule). Every term's decoded length is checked, and a whole-file
download is checked against its XET file hash (the merkle hash of every chunk) and, when
given, its sha256: corrupt or short data is never reported as success.
"""

from __future__ import annotations

import hashlib
import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO, NamedTuple

from ..client.backend import XetBackend
from ..client.errors import TransferError, UrlExpiredError
from ..core.constants import ZERO_HASH
from ..core.errors import FormatError
from ..core.hashes import chunk_hash, file_hash, hash_to_hex
from ..core.reconstruction import FetchRange, Reconstruction
from ..core.xorb import decode_chunk, parse_chunk_records
from ..platform.files import atomic_output
from ..platform.memory import xorb_range_windows
from .fetch_schedule import Load, plan_loads

log = logging.getLogger("git_xet.download")

DEFAULT_PARALLEL = 4
# Raw + decoded bytes held ahead of the writer. A range is planned at its raw bytes plus its
# decoded length, since it may all be compressed; incompressible data decodes to views and
# holds half that. 128 MiB keeps four 16 MiB ranges of such data in flight (two at 64 MiB:
# a 1 GiB download took ~7% longer, its fetch threads idle for want of budget).
DEFAULT_INFLIGHT_BYTES = 128 * 1024 * 1024
_MAX_URL_REFRESHES = 3


class IntegrityError(TransferError):
    """Downloaded data does not match what the file's hashes promise."""


class DownloadResult(NamedTuple):
    bytes_written: int
    bytes_fetched: int
    verified_file_hash: bool


Decoded = list[tuple[bytes | memoryview, bytes | None] | None]  # per chunk of a fetch range


class _Loaded:
    """A fetched range (maybe a pooled window) and its decoded chunks, which may be views
    into it: the window goes back to the pool once its last term is written."""

    __slots__ = ("chunks", "raw")

    def __init__(self, raw: bytes | bytearray | memoryview, chunks: Decoded) -> None:
        self.raw = raw
        self.chunks = chunks

    def give_back(self) -> None:
        raw, self.raw, self.chunks = self.raw, b"", []
        if isinstance(raw, memoryview):
            xorb_range_windows().give_back(raw)


class _Fetcher:
    """Fetch one xorb range and decode the chunks terms need from it, re-querying the
    reconstruction when its URL expired.

    `needed` maps each range to the chunk runs (with their promised decoded lengths) that
    terms take from it: only those are decoded, and only after the chunk headers confirm the
    promised lengths, so a server's word never makes us decompress more than the plan says.
    """

    def __init__(
        self,
        backend: XetBackend,
        file_hex: str,
        byte_range: tuple[int, int] | None,
        needed: dict[FetchRange, set[tuple[int, int, int]]],
        hash_chunks: bool,
    ) -> None:
        self.backend = backend
        self.file_hex = file_hex
        self.byte_range = byte_range
        self.needed = needed
        self.hash_chunks = hash_chunks
        self._lock = threading.Lock()
        self.bytes_fetched = 0

    def _refreshed(self, stale: FetchRange) -> FetchRange:
        with self._lock:
            plan = self.backend.reconstruction(self.file_hex, self.byte_range)
        for fetch in plan.fetches:
            if (fetch.xorb, fetch.chunk_start, fetch.chunk_end) == (stale.xorb, stale.chunk_start, stale.chunk_end):
                return fetch
        raise TransferError(f"the server no longer offers chunks [{stale.chunk_start}, {stale.chunk_end}) of xorb {stale.xorb}", retryable=True)

    def __call__(self, fetch: FetchRange) -> _Loaded:
        """The range's needed chunks, decoded, each with its hash when the file is verified
        (computed here, in a worker thread, so BLAKE3 runs beside the writer); None for
        chunks no term takes."""
        planned = fetch
        for refresh in range(_MAX_URL_REFRESHES + 1):
            try:
                raw = self.backend.fetch(fetch)
                break
            except UrlExpiredError:
                if refresh == _MAX_URL_REFRESHES:
                    raise
                log.info("xorb URL expired; querying the reconstruction again")
                fetch = self._refreshed(fetch)
        with self._lock:
            self.bytes_fetched += len(raw)
        count = fetch.chunk_end - fetch.chunk_start
        try:
            records, end = parse_chunk_records(raw)
            if end != len(raw) or len(records) != count:
                raise FormatError(f"expected {count} whole chunks")
            out: Decoded = [None] * count
            for start, stop, length in sorted(self.needed[planned]):
                run = range(start - fetch.chunk_start, stop - fetch.chunk_start)
                if sum(records[i].uncompressed_size for i in run) != length:
                    raise FormatError(f"chunks [{start}, {stop}) do not hold the {length} bytes the plan promises")
                for i in run:
                    if out[i] is None:
                        chunk = decode_chunk(raw, records[i])
                        out[i] = (chunk, chunk_hash(chunk) if self.hash_chunks else None)
        except FormatError as exc:
            raise IntegrityError(f"xorb {fetch.xorb[:12]} range is corrupt: {exc}", retryable=True) from None
        return _Loaded(raw, out)


class _HashBehind:
    """The sha256 of what the writer wrote, in a thread of its own and in order, and what must
    wait for it (giving a window back once the hash has read it).

    hashlib releases the GIL on large updates, so the hash overlaps the writes and the
    fetches instead of adding to the writer's time. The queue bounds how far it lags.
    """

    _LAG = 64  # queued chunk views (or actions)

    def __init__(self, digest: hashlib._Hash) -> None:
        self.digest = digest
        self._queue: queue.Queue[memoryview | Callable[[], None] | None] = queue.Queue(self._LAG)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="git-xet-sha256", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            if self._error is not None:
                continue  # keep draining so that the writer never blocks on a dead hash
            try:
                if callable(item):
                    item()
                else:
                    self.digest.update(item)
            except BaseException as exc:  # noqa: BLE001 - re-raised by close()
                self._error = exc

    def update(self, view: memoryview) -> None:
        self._queue.put(view)

    def then(self, action: Callable[[], None]) -> None:
        self._queue.put(action)

    def close(self) -> None:
        """Wait until everything queued is done; raise what failed in the thread."""
        self._queue.put(None)
        self._thread.join()
        if self._error is not None:
            raise self._error


def _plan_loads(plan: Reconstruction, term_fetches: list[FetchRange], budget: int) -> tuple[list[Load[FetchRange]], list[int], dict[FetchRange, set[tuple[int, int, int]]]]:
    """The fetch schedule, and per range the chunk runs terms take from it."""
    needed: dict[FetchRange, set[tuple[int, int, int]]] = {}
    for term, fetch in zip(plan.terms, term_fetches):
        needed.setdefault(fetch, set()).add((term.chunk_start, term.chunk_end, term.length))
    # What holding a range costs: its bytes, plus the decoded runs (a raw chunk decodes to a
    # view of those bytes, so this over-counts incompressible data: a safe bound).
    cost = {f: f.byte_end - f.byte_start + 1 + sum(length for _s, _e, length in runs) for f, runs in needed.items()}
    loads, serving = plan_loads(term_fetches, cost, budget)
    return loads, serving, needed


def download(
    backend: XetBackend,
    file_hex: str,
    out: BinaryIO,
    *,
    byte_range: tuple[int, int] | None = None,
    size: int | None = None,
    sha256_hex: str | None = None,
    max_parallel: int = DEFAULT_PARALLEL,
    max_inflight_bytes: int = DEFAULT_INFLIGHT_BYTES,
    progress: Callable[[int], None] | None = None,
) -> DownloadResult:
    """Write the file (or the inclusive byte range) to `out`; raises on any mismatch.

    Memory: fetched and decoded bytes held at once stay within `max_inflight_bytes`, or one
    fetch range when a single range is larger than that (see fetch_schedule).
    """
    whole = byte_range is None
    digest = hashlib.sha256() if sha256_hex and whole else None
    if whole and file_hex == hash_to_hex(ZERO_HASH):
        plan = Reconstruction(0, ())
    else:
        plan = backend.reconstruction(file_hex, byte_range)
    want = None if byte_range is None else byte_range[1] - byte_range[0] + 1
    try:
        term_fetches = plan.term_fetches()
    except FormatError as exc:
        raise TransferError(f"malformed reconstruction of {file_hex}: {exc}", retryable=True) from None
    loads, serving, needed = _plan_loads(plan, term_fetches, max_inflight_bytes)

    fetcher = _Fetcher(backend, file_hex, byte_range, needed, hash_chunks=whole)
    futures: dict[int, Future[_Loaded]] = {}  # load index -> its fetch, until its last term
    submitted = 0  # loads are started in order: loads[:submitted] have been
    held = 0  # cost of the loads in `futures`
    hashes_seen: list[bytes] = []
    sizes_seen: list[int] = []
    written = 0
    skip = plan.offset_into_first_range

    with ThreadPoolExecutor(max_workers=max(1, max_parallel), thread_name_prefix="git-xet-fetch") as pool:

        def top_up(position: int) -> None:
            """Start the load the writer needs at `position`, and read ahead within the budget.

            The needed load always starts: the schedule guarantees that what is still held
            at its first term leaves room for it."""
            nonlocal submitted, held
            while submitted < len(loads):
                load = loads[submitted]
                if load.first_term > position:
                    running = sum(1 for f in futures.values() if not f.done())
                    if running >= 2 * max_parallel or (held and held + load.cost > max_inflight_bytes):
                        return
                futures[submitted] = pool.submit(fetcher, load.key)
                held += load.cost
                submitted += 1

        def write_term(chunks: Decoded) -> None:
            """Write (and hash) one term's chunks; no view of them outlives the call."""
            nonlocal written, skip
            for entry in chunks:
                assert entry is not None, "the fetcher decodes every chunk a term takes"
                chunk, hashed = entry
                if hashed is not None:
                    hashes_seen.append(hashed)
                    sizes_seen.append(len(chunk))
                view = memoryview(chunk)[skip:]
                skip = max(0, skip - len(chunk))
                if want is not None:
                    view = view[: want - written]
                if view:
                    out.write(view)
                    if behind is not None:
                        behind.update(view)
                    written += len(view)
                    if progress:
                        progress(len(view))

        behind = _HashBehind(digest) if digest is not None else None
        try:
            for position, term in enumerate(plan.terms):
                top_up(position)
                index = serving[position]
                load = loads[index]
                loaded = futures[index].result()
                first = term.chunk_start - term_fetches[position].chunk_start
                write_term(loaded.chunks[first : first + term.chunk_end - term.chunk_start])
                if load.last_term == position:
                    del futures[index]
                    held -= load.cost
                    if behind is not None:
                        behind.then(loaded.give_back)  # once the hash has read the window
                    else:
                        loaded.give_back()
                del loaded
        finally:
            for future in futures.values():
                future.cancel()
            if behind is not None:
                behind.close()

    verified = False
    if whole:
        # No chunks hash to ZERO_HASH, so a non-empty file served as empty fails here too.
        if hash_to_hex(file_hash(hashes_seen, sizes_seen)) != file_hex.lower():
            raise IntegrityError(f"downloaded data does not hash to {file_hex}", retryable=True)
        verified = True
        if size is not None and written != size:
            raise IntegrityError(f"downloaded {written} bytes of {file_hex}, expected {size}")
        if digest is not None and sha256_hex is not None and digest.hexdigest() != sha256_hex.lower():
            raise IntegrityError(f"downloaded data does not match sha256 {sha256_hex}")
    elif written != want:
        raise IntegrityError(f"byte range {byte_range} of {file_hex}: got {written} of {want} bytes", retryable=True)
    return DownloadResult(written, fetcher.bytes_fetched, verified)


def download_to_path(backend: XetBackend, file_hex: str, dest: Path, *, mode: int = 0o644, durable: bool = True, **kwargs) -> DownloadResult:
    """Download and verify into a temp file beside `dest`, then rename: all or nothing.
    durable=False skips the fsyncs (see platform.files.atomic_output)."""
    with atomic_output(Path(dest), mode=mode, durable=durable) as out:
        return download(backend, file_hex, out, **kwargs)
