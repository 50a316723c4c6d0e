"""UploadStreams: the sha256 of a stream's xorbs, in their numbered order whatever order they
arrive in (within MAX_AHEAD), from memory or read back; a stream that breaks yields nothing
instead of a wrong prefix; bounded in streams; keyed by who sends it."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from git_xet.server import upload_streams
from git_xet.server.upload_streams import MAX_AHEAD, MAX_STREAMS, MAX_STREAM_XORBS, UploadStreams, parse_header, stream_key


def _xorbs(count: int, seed: int) -> dict[bytes, list[bytes]]:
    """`count` fake xorbs: a 32-byte name -> its content as chunks."""
    rng = random.Random(seed)
    return {rng.randbytes(32): [rng.randbytes(rng.randint(1, 300)) for _ in range(rng.randint(1, 4))] for _ in range(count)}


class Store:
    """What UploadStreams reads xorbs back from; counts the reads."""

    def __init__(self, xorbs: dict[bytes, list[bytes]]) -> None:
        self.xorbs = xorbs
        self.reads = 0

    def content(self, xorb: bytes) -> Iterable[list[bytes | memoryview]]:
        self.reads += 1
        chunks = self.xorbs[xorb]
        return [list(chunks[:1]), list(chunks[1:])]  # in two pieces, as the store reads


def _sha256(xorbs: dict[bytes, list[bytes]], names: list[bytes]) -> str:
    return hashlib.sha256(b"".join(b"".join(xorbs[n]) for n in names)).hexdigest()


@st.composite
def _arrivals(draw: st.DrawFn) -> list[int]:
    """An arrival order of xorbs 0..n-1 in which none comes MAX_AHEAD or more places early."""
    n = draw(st.integers(1, 30))
    order: list[int] = []
    pending = list(range(n))
    while pending:
        missing = min(pending)
        choices = [s for s in pending if s < missing + MAX_AHEAD]
        pick = draw(st.sampled_from(choices))
        order.append(pick)
        pending.remove(pick)
    return order


@settings(max_examples=60, deadline=None)
@given(order=_arrivals(), held=st.lists(st.booleans(), min_size=30, max_size=30), seed=st.integers(0, 2**32))
def test_a_stream_hashes_its_xorbs_in_their_order(order: list[int], held: list[bool], seed: int) -> None:
    xorbs = _xorbs(len(order), seed)
    names = list(xorbs)
    store = Store(xorbs)
    streams = UploadStreams(store.content)
    for seq in order:
        in_memory = [list(xorbs[names[seq]])] if held[seq] else None
        streams.stored("k", seq, names[seq], in_memory)
    prefix = streams.prefix("k")
    assert prefix is not None
    assert list(prefix.xorbs) == names
    assert prefix.digest.hexdigest() == _sha256(xorbs, names)
    # Held xorbs that were next in line were not read back; none was read twice.
    assert store.reads <= len(order) - (1 if held[order[0]] and order[0] == 0 else 0)


def test_a_gap_leaves_the_xorbs_before_it() -> None:
    xorbs = _xorbs(4, 1)
    names = list(xorbs)
    streams = UploadStreams(Store(xorbs).content)
    for seq in (0, 1, 3):
        streams.stored("k", seq, names[seq])
    prefix = streams.prefix("k")
    assert prefix is not None and list(prefix.xorbs) == names[:2]
    assert prefix.digest.hexdigest() == _sha256(xorbs, names[:2])


@pytest.mark.parametrize("arrivals", [[0, 0], [0, 1, 1], [MAX_AHEAD], [1, 0, 2 + MAX_AHEAD]])
def test_a_repeat_or_a_xorb_too_far_ahead_breaks_the_stream(arrivals: list[int]) -> None:
    xorbs = _xorbs(3 + MAX_AHEAD, 2)
    names = list(xorbs)
    streams = UploadStreams(Store(xorbs).content)
    for seq in arrivals:
        streams.stored("k", seq, names[seq])
    assert streams.prefix("k") is None


def test_a_xorb_that_cannot_be_read_back_breaks_the_stream() -> None:
    def unreadable(xorb: bytes) -> Iterable[list[bytes | memoryview]]:
        raise FileNotFoundError(xorb.hex())

    streams = UploadStreams(unreadable)
    streams.stored("k", 0, bytes(32))
    assert streams.prefix("k") is None


def test_a_shard_ends_its_stream() -> None:
    xorbs = _xorbs(1, 3)
    (name,) = xorbs
    streams = UploadStreams(Store(xorbs).content)
    streams.stored("k", 0, name)
    assert streams.prefix("k") is not None
    assert streams.prefix("k") is None


def test_at_most_max_streams_are_kept_oldest_dropped_first() -> None:
    xorbs = _xorbs(1, 4)
    (name,) = xorbs
    streams = UploadStreams(Store(xorbs).content)
    for i in range(MAX_STREAMS + 5):
        streams.stored(f"k{i}", 0, name)
    kept = [i for i in range(MAX_STREAMS + 5) if streams.prefix(f"k{i}") is not None]
    assert kept == list(range(5, MAX_STREAMS + 5))


def test_idle_streams_are_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    xorbs = _xorbs(1, 5)
    (name,) = xorbs
    streams = UploadStreams(Store(xorbs).content)
    streams.stored("old", 0, name)
    now = upload_streams.time.monotonic()
    monkeypatch.setattr(upload_streams.time, "monotonic", lambda: now + upload_streams.IDLE_SECONDS + 1)
    streams.stored("new", 0, name)  # a new stream sweeps the idle ones
    assert streams.prefix("old") is None
    assert streams.prefix("new") is not None


def test_keys_keep_owners_repos_and_streams_apart() -> None:
    keys = {stream_key(owner, repo, sid) for owner in ("u1", "u2") for repo in ("a/b", "a/c") for sid in ("0123456789abcdef", "fedcba9876543210")}
    assert len(keys) == 8
    assert stream_key("u1", "a/b", "0123456789abcdef") == stream_key("u1", "a/b", "0123456789abcdef")
    # The parts are not recoverable from the key (it travels in signed grant URLs).
    assert all("u1" not in k and "a/b" not in k for k in keys)


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("0123456789abcdef0123456789abcdef 7", ("0123456789abcdef0123456789abcdef", 7)),
        ("0123456789abcdef0123456789abcdef", ("0123456789abcdef0123456789abcdef", None)),
        (None, None),
        ("", None),
        ("short 1", None),
        ("0123456789ABCDEF 1", None),  # upper case: not ours
        ("0123456789abcdef -1", None),
        ("0123456789abcdef 1 2", None),
        (f"0123456789abcdef {MAX_STREAM_XORBS}", None),
        ("0123456789abcdef x", None),
        ("a" * 65, None),
    ],
)
def test_header_values(value: str | None, parsed: tuple[str, int | None] | None) -> None:
    assert parse_header(value) == parsed
