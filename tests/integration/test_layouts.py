"""Files of every layout come back: generated from shared and repeated blocks of random sizes
(1 byte to tens of MiB, crossing the 16 MiB fetch and 64 MiB xorb boundaries), in random
orders, through the serverless local store and through `git xet serve`, written and read by our
client and by hf-xet in both directions; and a download's memory stays within its budget.

Repeated content is what broke downloads before (a range kept for a later term starved the
range the writer needed), so the strategy favours repeats and interleaving.
"""

from __future__ import annotations

import hashlib
import io
import random
import tempfile
import threading
import tracemalloc
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from git_xet.client.errors import TransferError
from git_xet.client.http_backend import HttpCasBackend
from git_xet.client.local_backend import LocalStoreBackend
from git_xet.client.retry import RetryPolicy
from git_xet.client.tokens import StaticToken
from git_xet.pipelines.download import DEFAULT_INFLIGHT_BYTES, download, download_to_path
from git_xet.pipelines.upload import Uploader
from git_xet.storage.planning import MAX_FETCH_BYTES
from tests.support import hf_xet_oracle
from tests.support.datagen import random_bytes
from tests.support.server_process import RunningServer, running_server

MIB = 1 << 20
MAX_FILE = 100 * MIB
FAST_RETRY = RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.05)


@dataclass(frozen=True)
class Block:
    size: int
    kind: str  # random | text (LZ4 shrinks it) | floats (BG4 territory)
    seed: int

    def render(self) -> bytes:
        rng = random.Random(self.seed)
        if self.kind == "text":
            lines = [b" ".join(rng.randbytes(rng.randint(2, 9)).hex().encode() for _ in range(12)) + b"\n" for _ in range(256)]
            return b"".join(rng.choices(lines, k=self.size // 60 + 1))[: self.size]
        data = bytearray(rng.randbytes(self.size))
        if self.kind == "floats":  # a near-constant exponent byte in every 4
            data[3::4] = bytes([0x3C]) * len(data[3::4])
        return bytes(data)


@dataclass(frozen=True)
class Layout:
    blocks: tuple[Block, ...]
    order: tuple[int, ...]

    def render(self) -> bytes:
        rendered = [b.render() for b in self.blocks]
        return b"".join(rendered[i] for i in self.order)

    @property
    def size(self) -> int:
        return sum(self.blocks[i].size for i in self.order)


TINY, SMALL, LARGE = st.integers(1, 4096), st.integers(4097, 2 * MIB), st.integers(4 * MIB, 28 * MIB)


@st.composite
def layouts(draw: st.DrawFn) -> Layout:
    """Half the layouts are large (mostly multi-MiB blocks, at least three placements), so every
    run crosses the 16 MiB fetch and 64 MiB xorb boundaries in several cases."""
    large = draw(st.booleans())
    tiers = st.sampled_from([SMALL, LARGE, LARGE] if large else [TINY, SMALL, LARGE])
    blocks = tuple(
        Block(draw(draw(tiers)), draw(st.sampled_from(["random", "text", "floats"])), draw(st.integers(0, 2**32)))
        for _ in range(draw(st.integers(1, 4)))
    )
    order = draw(st.lists(st.integers(0, len(blocks) - 1), min_size=3 if large else 1, max_size=8))
    while len(order) > 1 and sum(blocks[i].size for i in order) > MAX_FILE:
        order.pop()
    return Layout(blocks, tuple(order))


# The shapes that broke (blocks of 16 MiB repeated after other content), and one file spanning
# two xorbs, are always tried, whatever the random draw.
ABCAB = Layout(tuple(Block(16 * MIB, "random", s) for s in (1, 2, 3)), (0, 1, 2, 0, 1))
TWO_XORBS = Layout((Block(20 * MIB, "random", 4), Block(3 * MIB, "text", 5), Block(1, "random", 6)), (0, 1, 0, 2, 0, 1))


def _record(layout: Layout) -> None:
    """Label the case for --hypothesis-show-statistics: how big, and whether it repeats."""
    size = layout.size
    event("over 64 MiB" if size > 64 * MIB else "16-64 MiB" if size > 16 * MIB else "under 16 MiB")
    event("repeats a block" if len(set(layout.order)) < len(layout.order) else "no repeated block")


def _check_slice(backend, file_hash: str, data: bytes, rng: random.Random) -> None:
    start = rng.randrange(len(data))
    end = rng.randrange(start, len(data))
    out = io.BytesIO()
    download(backend, file_hash, out, byte_range=(start, end))
    assert out.getvalue() == data[start : end + 1], (start, end)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.data_too_large, HealthCheck.too_slow])
@example(ABCAB)
@example(TWO_XORBS)
@given(layouts())
def test_local_store_round_trips_every_layout(layout: Layout) -> None:
    _record(layout)
    data = layout.render()
    with tempfile.TemporaryDirectory() as tmp:
        backend = LocalStoreBackend(Path(tmp) / "store")
        with Uploader(backend) as up:
            result = up.add_bytes(data)
            up.finalize()
        dest = Path(tmp) / "out"
        download_to_path(backend, result.file_hex, dest, size=len(data), sha256_hex=hashlib.sha256(data).hexdigest())
        assert dest.read_bytes() == data
        _check_slice(backend, result.file_hex, data, random.Random(len(data)))


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory):
    """Two servers: one filled by our client (hf-xet reads it), one by hf-xet (we read it)."""
    root = tmp_path_factory.mktemp("layouts")
    with running_server(root / "ours" / "data") as ours, running_server(root / "theirs" / "data") as theirs:
        yield (ours, ours.token("write")), (theirs, theirs.token("write"))


def _http(server: RunningServer, token: str) -> HttpCasBackend:
    return HttpCasBackend(server.url, StaticToken(token), policy=FAST_RETRY)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.data_too_large, HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@example(ABCAB)
@example(TWO_XORBS)
@given(layouts())
def test_server_round_trips_every_layout_with_hf_xet_both_ways(servers, layout: Layout) -> None:
    (ours, our_token), (theirs, their_token) = servers
    _record(layout)
    data = layout.render()
    sha256 = hashlib.sha256(data).hexdigest()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        source = tmp / "source"
        source.write_bytes(data)

        # Ours up, ours and hf-xet down.
        backend = _http(ours, our_token)
        with Uploader(backend) as up:
            result = up.add_file(source)
            up.finalize()
        download_to_path(backend, result.file_hex, tmp / "ours-ours", size=len(data), sha256_hex=sha256)
        assert (tmp / "ours-ours").read_bytes() == data
        _check_slice(backend, result.file_hex, data, random.Random(len(data)))
        hf_xet_oracle.remote_download([(tmp / "ours-hf", result.file_hex, len(data))], ours.url, our_token, tmp / "hf1")
        assert (tmp / "ours-hf").read_bytes() == data

        # hf-xet up, ours down.
        (uploaded,) = hf_xet_oracle.remote_upload([source], theirs.url, their_token, tmp / "hf2")
        assert uploaded["hash"] == result.file_hex  # same chunking, same file hash
        backend = _http(theirs, their_token)
        download_to_path(backend, uploaded["hash"], tmp / "hf-ours", size=len(data), sha256_hex=sha256)
        assert (tmp / "hf-ours").read_bytes() == data
        _check_slice(backend, uploaded["hash"], data, random.Random(len(data) + 1))


@pytest.mark.parametrize("budget_mib", [1, 40, 64])
def test_download_memory_stays_within_its_budget(tmp_path: Path, budget_mib: int) -> None:
    """Peak Python allocations while downloading A B C A B (16 MiB blocks) stay within the
    budget, or within one fetch range (at most 16 MiB, counted twice) when the budget is
    smaller than a range."""
    data = ABCAB.render()
    backend = LocalStoreBackend(tmp_path / "store")
    with Uploader(backend) as up:
        result = up.add_bytes(data)
        up.finalize()
    del data
    budget = budget_mib * MIB
    bound = max(budget, 32 * MIB) + 4 * MIB  # + chunk hash lists and interpreter noise
    tracemalloc.start()
    try:
        download_to_path(backend, result.file_hex, tmp_path / "out", max_inflight_bytes=budget)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= bound, f"peak {peak / MIB:.1f} MiB over {bound / MIB:.0f} MiB"
    assert (tmp_path / "out").read_bytes() == ABCAB.render()


class _FirstFetchWaitsForTheSecond(LocalStoreBackend):
    """The first range's fetch returns only once a second fetch has started (bounded wait):
    a download that fetches one range at a time fails here instead of overlapping."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self._lock = threading.Lock()
        self._started = 0
        self.second_started = threading.Event()

    def fetch(self, fetch):
        with self._lock:
            self._started += 1
            first = self._started == 1
        if first:
            if not self.second_started.wait(timeout=30):
                raise TransferError("no second range was fetched while the first was outstanding")
        else:
            self.second_started.set()
        return super().fetch(fetch)


def test_default_budget_fetches_the_next_range_during_the_current_one(tmp_path: Path) -> None:
    """With the default budget the range after the one being written is already being fetched
    (the server cuts ranges at 16 MiB, so several fit), so fetching overlaps decoding and writing;
    the data comes back whole and Python allocations stay within the default bound."""
    data = random_bytes(2 * 64 * MIB + 3 * MIB, 11)
    sha256 = hashlib.sha256(data).hexdigest()
    store = tmp_path / "store"
    with Uploader(LocalStoreBackend(store)) as up:
        result = up.add_bytes(data)
        up.finalize()
    backend = _FirstFetchWaitsForTheSecond(store)
    plan = backend.reconstruction(result.file_hex, None)
    assert len(plan.fetches) >= 2 and max(f.byte_end - f.byte_start + 1 for f in plan.fetches) <= MAX_FETCH_BYTES
    tracemalloc.start()
    try:
        download_to_path(backend, result.file_hex, tmp_path / "out", size=len(data), sha256_hex=sha256)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert backend.second_started.is_set()
    assert peak <= DEFAULT_INFLIGHT_BYTES + 4 * MIB, f"peak {peak / MIB:.1f} MiB over the default bound"
    assert hashlib.sha256((tmp_path / "out").read_bytes()).hexdigest() == sha256
