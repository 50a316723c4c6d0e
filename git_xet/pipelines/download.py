"""Download a XET file (or a byte range of it) from any backend, verified, in bounded memory.

Fetches run in parallel ahead of the writer, bounded in count and in bytes held; each xorb
byte range is fetched once however many terms use it. Every term's decoded length is checked,
and a whole-file download is checked against its XET file hash (the merkle hash of every
chunk) and, when given, its sha256: corrupt or short data is never reported as success.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ..client.backend import XetBackend
from ..client.errors import TransferError, UrlExpiredError
from ..core.constants import ZERO_HASH
from ..core.errors import FormatError
from ..core.hashes import chunk_hash, file_hash, hash_to_hex
from ..core.reconstruction import FetchRange, Reconstruction
from ..core.xorb import decode_chunk, parse_chunk_records
from ..fsutil import atomic_output

log = logging.getLogger("git_xet.download")

DEFAULT_PARALLEL = 4
DEFAULT_INFLIGHT_BYTES = 64 * 1024 * 1024  # raw + decoded bytes held ahead of the writer
_MAX_URL_REFRESHES = 3


class IntegrityError(TransferError):
    """Downloaded data does not match what the file's hashes promise."""


@dataclass(frozen=True)
class DownloadResult:
    bytes_written: int
    bytes_fetched: int
    verified_file_hash: bool


class _Fetcher:
    """Fetch + decode one xorb range, re-querying the reconstruction when its URL expired."""

    def __init__(self, backend: XetBackend, file_hex: str, byte_range: tuple[int, int] | None) -> None:
        self.backend = backend
        self.file_hex = file_hex
        self.byte_range = byte_range
        self._lock = threading.Lock()
        self.bytes_fetched = 0

    def _refreshed(self, stale: FetchRange) -> FetchRange:
        with self._lock:
            plan = self.backend.reconstruction(self.file_hex, self.byte_range)
        for fetch in plan.fetches:
            if (fetch.xorb, fetch.chunk_start, fetch.chunk_end) == (stale.xorb, stale.chunk_start, stale.chunk_end):
                return fetch
        raise TransferError(f"the server no longer offers chunks [{stale.chunk_start}, {stale.chunk_end}) of xorb {stale.xorb}", retryable=True)

    def __call__(self, fetch: FetchRange) -> list[tuple[bytes | memoryview, bytes]]:
        """The range's chunks, decoded, each with its hash (computed here, in a worker thread,
        so BLAKE3 runs beside the writer instead of in front of it)."""
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
        try:
            records, end = parse_chunk_records(raw)
            if end != len(raw) or len(records) != fetch.chunk_end - fetch.chunk_start:
                raise FormatError(f"expected {fetch.chunk_end - fetch.chunk_start} whole chunks")
            chunks = [decode_chunk(raw, r) for r in records]
        except FormatError as exc:
            raise IntegrityError(f"xorb {fetch.xorb[:12]} range is corrupt: {exc}", retryable=True) from None
        return [(chunk, chunk_hash(chunk)) for chunk in chunks]


def download(
    backend: XetBackend,
    file_hex: str,
    out: BinaryIO,
    *,
    byte_range: tuple[int, int] | None = None,
    size: int | None = None,
    sha256: str | None = None,
    max_parallel: int = DEFAULT_PARALLEL,
    max_inflight_bytes: int = DEFAULT_INFLIGHT_BYTES,
    progress: Callable[[int], None] | None = None,
) -> DownloadResult:
    """Write the file (or the inclusive byte range) to `out`; raises on any mismatch."""
    whole = byte_range is None
    digest = hashlib.sha256() if sha256 and whole else None
    if whole and file_hex == hash_to_hex(ZERO_HASH):
        plan = Reconstruction(0, ())
    else:
        plan = backend.reconstruction(file_hex, byte_range)
    want = None if whole else byte_range[1] - byte_range[0] + 1

    order: list[FetchRange] = []
    uses: dict[FetchRange, int] = {}
    decoded: dict[FetchRange, int] = {}
    term_fetch = []
    for term in plan.terms:
        fetch = plan.fetch_for(term)
        if fetch not in uses:
            order.append(fetch)
            uses[fetch] = 0
            decoded[fetch] = 0
        uses[fetch] += 1
        decoded[fetch] += term.length
        term_fetch.append(fetch)

    fetcher = _Fetcher(backend, file_hex, byte_range)
    pending: deque[FetchRange] = deque(order)
    futures: dict[FetchRange, Future[list[tuple[bytes | memoryview, bytes]]]] = {}
    inflight = 0
    hashes_seen: list[bytes] = []
    sizes_seen: list[int] = []
    written = 0
    skip = plan.offset_into_first_range

    def cost(f: FetchRange) -> int:
        return f.byte_end - f.byte_start + 1 + decoded[f]

    with ThreadPoolExecutor(max_workers=max(1, max_parallel), thread_name_prefix="git-xet-fetch") as pool:

        def top_up() -> None:
            nonlocal inflight
            while pending and (not futures or (len(futures) < 2 * max_parallel and inflight + cost(pending[0]) <= max_inflight_bytes)):
                f = pending.popleft()
                futures[f] = pool.submit(fetcher, f)
                inflight += cost(f)

        try:
            for term, fetch in zip(plan.terms, term_fetch):
                top_up()
                chunks = futures[fetch].result()
                part = chunks[term.chunk_start - fetch.chunk_start : term.chunk_end - fetch.chunk_start]
                if sum(len(c) for c, _ in part) != term.length:
                    raise IntegrityError(f"a term of xorb {term.xorb[:12]} decodes to the wrong length", retryable=True)
                for chunk, hashed in part:
                    if whole:
                        hashes_seen.append(hashed)
                        sizes_seen.append(len(chunk))
                    view = memoryview(chunk)[skip:]
                    skip = max(0, skip - len(chunk))
                    if want is not None:
                        view = view[: want - written]
                    if view:
                        out.write(view)
                        if digest is not None:
                            digest.update(view)
                        written += len(view)
                        if progress:
                            progress(len(view))
                uses[fetch] -= 1
                if uses[fetch] == 0:
                    del futures[fetch]
                    inflight -= cost(fetch)
        finally:
            for future in futures.values():
                future.cancel()

    verified = False
    if whole:
        # No chunks hash to ZERO_HASH, so a non-empty file served as empty fails here too.
        if hash_to_hex(file_hash(hashes_seen, sizes_seen)) != file_hex.lower():
            raise IntegrityError(f"downloaded data does not hash to {file_hex}", retryable=True)
        verified = True
        if size is not None and written != size:
            raise IntegrityError(f"downloaded {written} bytes of {file_hex}, expected {size}")
        if digest is not None and digest.hexdigest() != sha256.lower():
            raise IntegrityError(f"downloaded data does not match sha256 {sha256}")
    elif written != want:
        raise IntegrityError(f"byte range {byte_range} of {file_hex}: got {written} of {want} bytes", retryable=True)
    return DownloadResult(written, fetcher.bytes_fetched, verified)


def download_to_path(backend: XetBackend, file_hex: str, dest: Path, *, mode: int = 0o644, **kwargs) -> DownloadResult:
    """Download and verify into a temp file beside `dest`, then rename: all or nothing."""
    with atomic_output(Path(dest), mode=mode) as out:
        return download(backend, file_hex, out, **kwargs)
