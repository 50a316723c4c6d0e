"""Upload placement (pipelines/upload.py, upload_dedup.py) on generated layouts, in-process on a local store.

Expectations are derived independently of the uploader: the files are cut with the core
chunker and their distinct chunks counted here; what was stored is read back by parsing the
xorb bodies the backend received.
"""

from __future__ import annotations

import hashlib
import io
import tempfile
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from git_xet.client.local_backend import LocalStoreBackend
from git_xet.client.backend import UploadStream
from git_xet.client.shard_cache import ShardCache
from git_xet.core.chunking import chunk_boundaries
from git_xet.core.hashes import chunk_hash
from git_xet.core.scattered import OutgoingBytes, contiguous
from git_xet.core.xorb import verify_xorb
from git_xet.pipelines import upload, upload_dedup
from git_xet.pipelines.download import download
from git_xet.pipelines.upload import Uploader
from git_xet.pipelines.upload_dedup import FRAGMENTATION_HYSTERESIS, FRAGMENTATION_TARGET, FRAGMENTATION_WINDOW

KIB = 1024


class _RecordingStore(LocalStoreBackend):
    """A local store that keeps the chunk hashes of every xorb it is sent."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.stored_chunks: list[bytes] = []

    def upload_xorb(self, xorb_hex: str, body: OutgoingBytes, stream: UploadStream | None = None) -> bool:
        # The uploader may hand a ScatteredBytes (header records between views of the file):
        # joined as the product's own stores join it, never with bytes(), which it does not define.
        self.stored_chunks += verify_xorb(bytes(contiguous(body))).chunk_hashes
        return super().upload_xorb(xorb_hex, body)

    def upload_xorbs_with_shard(self, xorbs: Sequence[tuple[str, bytes | memoryview]], shard: bytes, stream_id: str | None = None) -> bool:
        for _, body in xorbs:
            self.stored_chunks += verify_xorb(bytes(contiguous(body))).chunk_hashes
        return super().upload_xorbs_with_shard(xorbs, shard)


def _chunks(data: bytes) -> list[bytes]:
    ends = chunk_boundaries(data)
    return [data[start:end] for start, end in zip([0, *ends[:-1]], ends)]


# Files built from a few random blocks (from a few bytes to a few hundred KiB, i.e. from part
# of one chunk to several), each file a sequence of block numbers, so blocks repeat within a
# file and across the files of one session.
layouts = st.tuples(
    st.lists(st.integers(1, 400 * KIB), min_size=1, max_size=4),  # block sizes
    st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=6), min_size=1, max_size=4),  # files
    st.integers(0, 2**32),  # seed
)


def _files(layout: tuple[list[int], list[list[int]], int]) -> list[bytes]:
    sizes, files, seed = layout
    blocks = [hashlib.shake_256(f"{seed}/{i}".encode()).digest(size) for i, size in enumerate(sizes)]
    return [b"".join(blocks[i % len(blocks)] for i in order) for order in files]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(layout=layouts)
def test_each_distinct_chunk_is_stored_once_and_every_file_comes_back(layout, monkeypatch: pytest.MonkeyPatch) -> None:
    # The fragmentation guard may store a short repeat again on purpose; it is tested on its
    # own below. Without it, a session stores every distinct chunk exactly once.
    monkeypatch.setattr(upload_dedup, "FRAGMENTATION_TARGET", 0.0)
    files = _files(layout)
    distinct: dict[bytes, int] = {}
    for data in files:
        for chunk in _chunks(data):
            distinct.setdefault(chunk_hash(chunk), len(chunk))
    with tempfile.TemporaryDirectory() as root:
        store = _RecordingStore(Path(root) / "store")
        with Uploader(store) as up:
            results = [up.add_bytes(data) for data in files]
            up.finalize()
        assert sorted(store.stored_chunks) == sorted(distinct)
        assert sum(r.new_bytes for r in results) == sum(distinct.values())
        for data, result in zip(files, results):
            assert result.new_bytes + result.deduped_bytes == len(data)
            terms = store.reconstruction(result.file_hex).terms
            # Adjacent runs of one xorb are one term (the data here is far below a fetch range's
            # 16 MiB, where the store would cut a term).
            assert all(not (a.xorb == b.xorb and a.chunk_end == b.chunk_start) for a, b in pairwise(terms))
            out = io.BytesIO()
            download(store, result.file_hex, out)
            assert out.getvalue() == data


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(layout=layouts)
def test_files_given_again_in_a_later_session_store_nothing(layout, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the shard cache, which indexes every chunk: any files (repeating blocks inside
    and across them, runs down to part of one chunk) are found whole in a later session."""
    monkeypatch.setattr(upload_dedup, "FRAGMENTATION_TARGET", 0.0)  # its own tests are below
    files = _files(layout)
    with tempfile.TemporaryDirectory() as root:
        store = _RecordingStore(Path(root) / "store")
        cache = Path(root) / "cache"
        with Uploader(store, ShardCache(cache, store.cache_key)) as up:
            first = [up.add_bytes(data) for data in files]
            up.finalize()
        stored_before = len(store.stored_chunks)
        with Uploader(store, ShardCache(cache, store.cache_key)) as up:
            again = [up.add_bytes(data) for data in files]
            up.finalize()
        assert [r.file_hex for r in again] == [r.file_hex for r in first]
        assert len(store.stored_chunks) == stored_before
        assert all(r.new_bytes == 0 for r in again)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(layout=layouts, batch=st.integers(1, 5))
def test_shards_recorded_in_batches_lose_no_dedup_and_reach_the_cache_by_close(layout, batch: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A shard per file, as the agent commits them, recorded in the cache `batch` at a time
    (Uploader record_batch): until recorded, their chunks are still found in the session (each
    distinct chunk stored once); other readers of the cache see them no later than the batch
    fills or the Uploader closes (a later session then stores nothing)."""
    monkeypatch.setattr(upload_dedup, "FRAGMENTATION_TARGET", 0.0)  # its own tests are below
    files = _files(layout)
    distinct = {chunk_hash(chunk) for data in files for chunk in _chunks(data)}
    with tempfile.TemporaryDirectory() as root:
        store = _RecordingStore(Path(root) / "store")
        cache = Path(root) / "cache"
        reader = ShardCache(cache, store.cache_key)  # another process's view of the cache
        recorded = []
        with Uploader(store, ShardCache(cache, store.cache_key), record_batch=batch) as up:
            for data in files:
                up.add_bytes(data)
                up.finalize()
                recorded.append(reader.usage()[0])
        first_batch = min(batch, len(files))
        assert recorded[: first_batch - 1] == [0] * (first_batch - 1)  # nothing before a batch is full
        assert sorted(store.stored_chunks) == sorted(distinct)
        xorbs = up.stats.xorbs_uploaded
        assert reader.usage()[0] == xorbs
        reader.close()
        stored_before = len(store.stored_chunks)
        with Uploader(store, ShardCache(cache, store.cache_key)) as up:
            again = [up.add_bytes(data) for data in files]
            up.finalize()
        assert len(store.stored_chunks) == stored_before
        assert all(r.new_bytes == 0 for r in again)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(layout=layouts, bound=st.integers(1, 6))
def test_shards_holding_many_chunks_are_recorded_at_once(layout, bound: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Shards waiting to be recorded are recorded as soon as their xorbs hold RECORD_CHUNKS
    chunks (their chunks wait in memory, in the session), whatever record_batch says."""
    monkeypatch.setattr(upload, "RECORD_CHUNKS", bound)
    files = _files(layout)
    with tempfile.TemporaryDirectory() as root:
        store = _RecordingStore(Path(root) / "store")
        cache = Path(root) / "cache"
        reader = ShardCache(cache, store.cache_key)
        with Uploader(store, ShardCache(cache, store.cache_key), record_batch=1000) as up:
            waiting = 0  # chunks of the stored xorbs not recorded yet
            for data in files:
                before = len(store.stored_chunks)
                up.add_bytes(data)
                up.finalize()
                waiting += len(store.stored_chunks) - before
                if waiting >= bound:
                    waiting = 0  # recorded now
                assert (reader.usage()[0] == up.stats.xorbs_uploaded) == (waiting == 0)
        reader.close()


# A term's events: a new term of n chunks (True) or n more chunks in the last one (False).
term_events = st.lists(st.tuples(st.booleans(), st.integers(1, 40)), max_size=400)


@settings(max_examples=300)
@given(events=term_events, runs=st.lists(st.integers(1, 40), min_size=1, max_size=5))
def test_the_fragmentation_guard_is_hf_xets(events: list[tuple[bool, int]], runs: list[int]) -> None:
    """hf-xet's DefragPrevention, restated: every match is taken until FRAGMENTATION_WINDOW terms
    exist. Then, with `average` the chunks per term over the last FRAGMENTATION_WINDOW terms
    (the open one counted) and a threshold that starts low (TARGET * HYSTERESIS): at or above
    the threshold a match is taken and the threshold goes (back) low; below it, a match shorter
    than the average is refused and the threshold goes up to TARGET; a longer one is taken."""
    guard = upload_dedup.FragmentationGuard()
    terms: list[int] = []
    low = True
    for new, chunks in events:
        for run in runs:
            if len(terms) < FRAGMENTATION_WINDOW:
                expected = True
            else:
                window = terms[-FRAGMENTATION_WINDOW:]
                average = sum(window) / len(window)
                threshold = FRAGMENTATION_TARGET * FRAGMENTATION_HYSTERESIS if low else FRAGMENTATION_TARGET
                expected = average >= threshold or run >= average
                low = average >= threshold or (low and expected)
            assert guard.accepts(run) == expected
        if new:
            terms.append(chunks)
            guard.new_term(chunks)
        elif terms:
            terms[-1] += chunks
            guard.grow_term(chunks)
