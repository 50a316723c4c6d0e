"""Registering an uploaded shard: its validation (the sha256 of each file it names, computed
from the stored bytes) taking turns, and the answer that lists the files refused.

Shared by the XET shard routes (cas_api) and our upload bundles (extension).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from ..core import hashes
from ..core.errors import FormatError
from ..core.http_headers import REFUSED_SHA256
from ..core.shard import Shard, parse_shard
from ..storage.cas_store import CasStore, Sha256Prefix, chunks_referenced
from ..storage.history import History
from .upload_streams import StreamRef, UploadStreams
from .worker_threads import in_worker, in_worker_holding

log = logging.getLogger("git_xet.server")

T = TypeVar("T")

# Shard validations (sha256 of whole files) running at once; the others wait their turn.
MAX_CONCURRENT_VALIDATIONS = 2
# Except small ones: a shard of at most this many bytes referencing at most this many chunks
# (8 MiB of sha256 at the 128 KiB largest chunk) costs less than its wait. Eight agents pushing
# many small files send one such shard per file; two at a time, each queued behind the other's
# fsyncs, they were most of such a push. Both bounds are structural: no claim in the shard
# (sizes, lengths) can make a big validation pass for a small one.
SMALL_SHARD_BYTES = 64 * 1024
SMALL_SHARD_CHUNKS = 64


class ShardIntake:
    """Shard registrations of one store, validated in turns (see MAX_CONCURRENT_VALIDATIONS)."""

    def __init__(self, store: CasStore, history: History, upload_streams: UploadStreams) -> None:
        self.store = store
        self.history = history
        self.upload_streams = upload_streams
        self._validations: asyncio.Semaphore | None = None
        self._running = 0  # validations in a turn, running now (_counted)
        self._running_lock = threading.Lock()

    def validations(self) -> asyncio.Semaphore:
        if self._validations is None:
            self._validations = asyncio.Semaphore(MAX_CONCURRENT_VALIDATIONS)
        return self._validations

    def validated(self, small: Shard | None, fn: Callable[..., T], *args: object) -> Awaitable[T]:
        """fn(*args), a shard's validation, in a worker thread: in a turn unless the shard is
        small (`small`: what parsed_if_small gave, see SMALL_SHARD_*). The turn is kept until
        the validation ends, even if its client has gone (issue 42 §8)."""
        if small is not None:
            return in_worker(fn, *args)
        return in_worker_holding(self.validations(), self._counted, fn, *args)

    def _counted(self, fn: Callable[..., T], *args: object) -> T:
        """fn(*args), logging how many turn-taking validations run at once as one starts and
        ends (what tests/integration/test_validation_turns.py watches, and an operator may)."""
        with self._running_lock:
            self._running += 1
            running = self._running
        log.info("shard validations running: %d", running)
        try:
            return fn(*args)
        finally:
            with self._running_lock:
                self._running -= 1
                running = self._running
            log.info("shard validation ended, %d still running", running)

    def _stream_prefix(self, stream: StreamRef | None) -> Sha256Prefix | None:
        """What the shard's upload stream hashed (waits for it: call in a worker thread)."""
        return None if stream is None else self.upload_streams.prefix(stream)

    def register(self, body: bytes, repo: str, refused: list[str], progress=None, parsed: Shard | None = None, stream: StreamRef | None = None) -> bool:
        """Register a shard; files whose sha256 claim is wrong go into `refused` (see shard_result)."""
        prefix = self._stream_prefix(stream)
        alongside = self._push_alongside(repo, parsed)
        inserted = self.store.register_shard(body, repo, verify_sha256=True, progress=progress, parsed=parsed, prefix=prefix, refused=refused, alongside=alongside)
        self._pushed(inserted, alongside, repo, parsed, body)
        return inserted

    def store_bundle(
        self, xorbs: list[tuple[hashes.XetHash, memoryview]], shard: bytes, repo: str, parsed: Shard | None, stream: StreamRef | None, refused: list[str]
    ) -> bool:
        """A bundle's xorbs, then its shard, in one worker turn: per small file, the thread
        hand-offs cost more than the work."""
        prefix = self._stream_prefix(stream)
        alongside = self._push_alongside(repo, parsed)
        hexed = [(hashes.hash_to_hex(h), xorb) for h, xorb in xorbs]
        inserted = self.store.put_xorbs_with_shard(hexed, shard, repo, verify_sha256=True, parsed=parsed, prefix=prefix, refused=refused, alongside=alongside)
        self._pushed(inserted, alongside, repo, parsed, shard)
        return inserted

    def _push_alongside(self, repo: str, parsed: Shard | None) -> Callable[[Any], None] | None:
        """The history's row of this push, written in the registration's own transaction
        (History.push_alongside), when the shard is parsed already; else None (record_push)."""
        if parsed is None:
            return None
        try:
            return self.history.push_alongside(repo, *_push_figures(parsed))
        except Exception as exc:  # noqa: BLE001 - any database failure: logged, never fails the push
            log.warning("could not record a push of %s in the history: %s", repo, type(exc).__name__)
            return None

    def _pushed(self, inserted: bool, alongside: Callable[[Any], None] | None, repo: str, parsed: Shard | None, body: bytes) -> None:
        """After a registration: its history row, unless written alongside it; the totals' sample if due."""
        if not inserted:
            return
        if alongside is None:
            self.record_push(repo, parsed if parsed is not None else parse_shard(body))
            return
        try:
            self.history.sample_if_due()
        except Exception as exc:  # noqa: BLE001 - as record_push
            log.warning("could not record the store's totals in the history: %s", type(exc).__name__)

    def record_push(self, repo: str, shard: Shard) -> None:
        """A shard a repo newly registered, in the history the admin page shows (best effort:
        the push has succeeded whether or not its row is written)."""
        try:
            self.history.record_push(repo, *_push_figures(shard))
        except Exception as exc:  # noqa: BLE001 - any database failure: logged, never fails the push
            log.warning("could not record a push of %s in the history: %s", repo, type(exc).__name__)


def _push_figures(shard: Shard) -> tuple[int, int]:
    """A push's files and bytes, as the history records them."""
    return len(shard.files), sum(t.unpacked_bytes for f in shard.files for t in f.terms)


def shard_result(inserted: bool, refused: list[str]) -> dict[str, object]:
    """A shard upload's answer: hf-xet's `result`, and the files (hashes) whose sha256 claim
    was wrong, registered without that oid (REFUSED_SHA256, when there are any): the other
    files of the shard stand, and a client that sent the claim learns that it was refused."""
    answer: dict[str, object] = {"result": 1 if inserted else 0}
    if refused:
        answer[REFUSED_SHA256] = sorted(set(refused))
    return answer


def parsed_if_small(body: bytes) -> Shard | None:
    """The shard, parsed, if it is small enough to be validated without a turn (see
    SMALL_SHARD_*); its registration then uses this parse instead of making another. None for
    any other: one that does not parse is refused by its validation, in its turn."""
    if len(body) > SMALL_SHARD_BYTES:
        return None
    try:
        shard = parse_shard(body)
    except FormatError:
        return None
    return shard if chunks_referenced(shard) <= SMALL_SHARD_CHUNKS else None
