"""UploadStreams: the sha256 of a stream's xorbs, in their numbered order whatever order they
arrive in (within MAX_AHEAD), from memory or read back; a stream that breaks or ends yields
nothing instead of a wrong prefix, and a hash still running into an ended stream lands
nowhere (not in a new stream of the same id); bounded per writer in streams and in what waits,
and no writer can drop another's; keyed by who sends it."""

from __future__ import annotations

import hashlib
import random
import threading
import time
from collections.abc import Iterable, Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from git_xet.server import upload_streams
from git_xet.server.upload_streams import (
    MAX_AHEAD,
    MAX_STREAM_XORBS,
    MAX_STREAMS_PER_WRITER,
    MAX_WAITING,
    StreamRef,
    UploadStreams,
    parse_header,
    stream_ref,
)


def _ref(name: str, seq: int | None = None, owner: str = "owner") -> StreamRef:
    return stream_ref(owner, "repo", name, seq)


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


def _settled(streams: UploadStreams) -> UploadStreams:
    """Its read-backs done (a shard waits only for a running one: see prefix)."""
    streams._pool.shutdown(wait=True)
    return streams


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
        streams.stored(_ref("k", seq), names[seq], in_memory)
    prefix = _settled(streams).prefix(_ref("k"))
    assert prefix is not None
    assert list(prefix.xorbs) == names
    assert prefix.digest.hexdigest() == _sha256(xorbs, names)
    # Held xorbs that were next in line were not read back; none was read twice.
    assert store.reads <= len(order) - (1 if held[order[0]] and order[0] == 0 else 0)


class Gate:
    """Content whose reading waits until released: a hash caught running."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.started = threading.Event()
        self.release = threading.Event()

    def content(self, xorb: bytes) -> Iterable[list[bytes | memoryview]]:
        self.started.set()
        assert self.release.wait(30)
        return self.store.content(xorb)


@settings(max_examples=30, deadline=None)
@given(
    ending=st.sampled_from(["shard", "evicted", "idle"]),
    junk=st.integers(1, 5),
    honest=st.integers(1, 6),
    seed=st.integers(0, 2**32),
)
def test_a_hash_running_into_an_ended_stream_lands_nowhere(ending: str, junk: int, honest: int, seed: int) -> None:
    """The attack of git-xet issue 42: a writer's stream is hashing junk when it ends (its
    shard, the writer's own new streams dropping it, or idleness), and the writer starts a new
    stream of the same id with a file's xorbs. The new stream's digest holds exactly the
    file's xorbs, never junk before them."""
    xorbs = _xorbs(junk + honest, seed)
    names = list(xorbs)
    junk_names, file_names = names[:junk], names[junk:]
    gate = Gate(Store(xorbs))
    streams = UploadStreams(gate.content)
    for seq in range(junk):  # none held: each is read back, the first one through the gate
        streams.stored(_ref("k", seq), junk_names[seq])
    assert gate.started.wait(30)
    if ending == "shard":
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(upload_streams, "PREFIX_WAIT_SECONDS", 0.0)
            assert streams.prefix(_ref("k")) is None  # gave up on the running hash
    elif ending == "evicted":
        for i in range(MAX_STREAMS_PER_WRITER):
            streams.stored(_ref(f"other{i}", 0), junk_names[0], [list(xorbs[junk_names[0]])])
    else:
        later = time.time() + upload_streams.IDLE_SECONDS + 1
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(upload_streams.time, "time", lambda: later)
            streams.stored(_ref("sweeper", 0), junk_names[0], [list(xorbs[junk_names[0]])])
    for seq, name in enumerate(file_names):  # the same id anew: held, so hashed inline
        streams.stored(_ref("k", seq), name, [list(xorbs[name])])
    gate.release.set()
    prefix = _settled(streams).prefix(_ref("k"))
    assert prefix is not None
    assert list(prefix.xorbs) == file_names
    assert prefix.digest.hexdigest() == _sha256(xorbs, file_names)


class Held:
    """A request's held content whose reading waits until released (an inline hash caught
    running in the request's own thread)."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.started = threading.Event()
        self.release = threading.Event()

    def __iter__(self) -> Iterator[list[bytes]]:
        self.started.set()
        assert self.release.wait(30)
        return iter([list(self.chunks)])


@settings(max_examples=20, deadline=None)
@given(evicted=st.booleans(), seed=st.integers(0, 2**32))
def test_a_file_xorb_hashed_onto_junk_in_an_ended_stream_lands_nowhere(evicted: bool, seed: int) -> None:
    """The interleaving that poisoned the cross-process streams (one run of the old code on this
    exact sequence gave a prefix of [file] with sha256(junk || file)): junk is xorb 0, the
    file's xorb is number 1 and is being hashed onto the junk when the stream ends (evicted by
    the writer's own new streams, or by its shard) and a new stream of the same id gets
    another xorb as number 0. Whatever the new stream holds, it is never [file] with junk in
    its digest."""
    xorbs = _xorbs(3, seed)
    junk, file, other = list(xorbs)
    streams = UploadStreams(Store(xorbs).content)
    streams.stored(_ref("k", 0), junk, [list(xorbs[junk])])
    in_flight = Held(xorbs[file])
    hashing = threading.Thread(target=streams.stored, args=(_ref("k", 1), file, in_flight))
    hashing.start()
    assert in_flight.started.wait(30)
    if evicted:
        for i in range(MAX_STREAMS_PER_WRITER):
            streams.stored(_ref(f"other{i}", 0), other, [list(xorbs[other])])
    else:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(upload_streams, "PREFIX_WAIT_SECONDS", 0.0)
            assert streams.prefix(_ref("k")) is None  # gave up on the running hash
    streams.stored(_ref("k", 0), other, [list(xorbs[other])])
    in_flight.release.set()
    hashing.join(30)
    prefix = _settled(streams).prefix(_ref("k"))
    assert prefix is not None and list(prefix.xorbs) == [other]
    assert prefix.digest.hexdigest() == _sha256(xorbs, [other])


def test_a_shard_waits_for_its_streams_running_hash_only(monkeypatch: pytest.MonkeyPatch) -> None:
    xorbs = _xorbs(2, 11)
    names = list(xorbs)
    gate = Gate(Store(xorbs))
    streams = UploadStreams(gate.content)
    streams.stored(_ref("k", 0), names[0])
    assert gate.started.wait(30)
    threading.Timer(0.05, gate.release.set).start()
    prefix = streams.prefix(_ref("k"))  # waits for the running hash
    assert prefix is not None and list(prefix.xorbs) == names[:1]
    assert prefix.digest.hexdigest() == _sha256(xorbs, names[:1])


def test_a_gap_leaves_the_xorbs_before_it() -> None:
    xorbs = _xorbs(4, 1)
    names = list(xorbs)
    streams = UploadStreams(Store(xorbs).content)
    for seq in (0, 1, 3):
        streams.stored(_ref("k", seq), names[seq])
    prefix = _settled(streams).prefix(_ref("k"))
    assert prefix is not None and list(prefix.xorbs) == names[:2]
    assert prefix.digest.hexdigest() == _sha256(xorbs, names[:2])


@pytest.mark.parametrize("arrivals", [[0, 0], [0, 1, 1], [MAX_AHEAD], [1, 0, 2 + MAX_AHEAD]])
def test_a_repeat_or_a_xorb_too_far_ahead_breaks_the_stream(arrivals: list[int]) -> None:
    xorbs = _xorbs(3 + MAX_AHEAD, 2)
    names = list(xorbs)
    streams = UploadStreams(Store(xorbs).content)
    for seq in arrivals:
        streams.stored(_ref("k", seq), names[seq])
    assert _settled(streams).prefix(_ref("k")) is None


def test_a_xorb_that_cannot_be_read_back_breaks_the_stream() -> None:
    def unreadable(xorb: bytes) -> Iterable[list[bytes | memoryview]]:
        raise FileNotFoundError(xorb.hex())

    streams = UploadStreams(unreadable)
    streams.stored(_ref("k", 0), bytes(32))
    assert _settled(streams).prefix(_ref("k")) is None


def test_a_shard_ends_its_stream() -> None:
    xorbs = _xorbs(1, 3)
    (name,) = xorbs
    streams = UploadStreams(Store(xorbs).content)
    streams.stored(_ref("k", 0), name, [list(xorbs[name])])
    assert streams.prefix(_ref("k")) is not None
    assert streams.prefix(_ref("k")) is None
    assert not streams._writers  # nothing left behind


@settings(max_examples=20, deadline=None)
@given(extra=st.integers(1, 40), writers=st.integers(1, 5))
def test_a_writer_drops_only_its_own_oldest_streams(extra: int, writers: int) -> None:
    """Each writer keeps its newest MAX_STREAMS_PER_WRITER; however many streams others open
    (the eviction half of issue 42), a victim's stream stays."""
    xorbs = _xorbs(1, 4)
    (name,) = xorbs
    held = [list(xorbs[name])]
    streams = UploadStreams(Store(xorbs).content)
    streams.stored(_ref("victim", 0, owner="victim"), name, held)
    for w in range(writers):
        for i in range(MAX_STREAMS_PER_WRITER + extra):
            streams.stored(_ref(f"k{i}", 0, owner=f"attacker{w}"), name, held)
    assert streams.prefix(_ref("victim", owner="victim")) is not None
    for w in range(writers):
        kept = [i for i in range(MAX_STREAMS_PER_WRITER + extra) if streams.prefix(_ref(f"k{i}", owner=f"attacker{w}")) is not None]
        assert kept == list(range(extra, MAX_STREAMS_PER_WRITER + extra))


def test_idle_streams_are_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    xorbs = _xorbs(1, 5)
    (name,) = xorbs
    held = [list(xorbs[name])]
    streams = UploadStreams(Store(xorbs).content)
    streams.stored(_ref("old", 0), name, held)
    now = time.time()
    monkeypatch.setattr(upload_streams.time, "time", lambda: now + upload_streams.IDLE_SECONDS + 1)
    streams.stored(_ref("new", 0), name, held)  # any use sweeps the idle ones
    assert streams.prefix(_ref("old")) is None
    assert streams.prefix(_ref("new")) is not None


def test_what_waits_is_bounded() -> None:
    """Xorbs stored faster than they are hashed (here the holder is stuck on its first) break
    the stream once MAX_WAITING wait, rather than grow it."""
    xorbs = _xorbs(MAX_WAITING + 1, 6)
    names = list(xorbs)
    gate = Gate(Store(xorbs))
    streams = UploadStreams(gate.content)
    streams.stored(_ref("k", 0), names[0])
    assert gate.started.wait(30)
    for seq in range(1, MAX_WAITING):
        streams.stored(_ref("k", seq), names[seq])
    (stream,) = streams._writers[_ref("k").writer].values()
    assert not stream.broken and len(stream.waiting) == MAX_WAITING
    streams.stored(_ref("k", MAX_WAITING), names[MAX_WAITING])
    assert stream.broken and not stream.waiting
    gate.release.set()
    assert _settled(streams).prefix(_ref("k")) is None


def test_refs_keep_owners_repos_and_streams_apart() -> None:
    refs = {stream_ref(owner, repo, sid, None) for owner in ("u1", "u2") for repo in ("a/b", "a/c") for sid in ("0123456789abcdef", "fedcba9876543210")}
    assert len({r.key for r in refs}) == 8 and len({r.writer for r in refs}) == 4
    assert stream_ref("u1", "a/b", "0123456789abcdef", 3) == stream_ref("u1", "a/b", "0123456789abcdef", 3)
    # The parts are not recoverable from the ref (it travels in signed grant URLs), and it travels whole.
    assert all("u1" not in r.to_param() and "a/b" not in r.to_param() for r in refs)
    for ref in (*refs, stream_ref("u1", "a/b", "0123456789abcdef", 5)):
        assert StreamRef.from_param(ref.to_param()) == ref
    assert StreamRef.from_param("") is None


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
