"""UploadStreams: the sha256 of a stream's xorbs, in their numbered order whatever order they
arrive in (within MAX_AHEAD), from memory or read back, whichever process of the data
directory stores them; a stream that breaks yields nothing instead of a wrong prefix; a
holder that died does not hold its shard up; bounded in streams and in what waits; keyed by
who sends it."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from git_xet.server import upload_streams
from git_xet.server.upload_streams import (
    HEADER_BYTES,
    MAX_AHEAD,
    MAX_STREAM_XORBS,
    MAX_STREAMS,
    MAX_WAITING,
    UploadStreams,
    _State,
    parse_header,
    stream_key,
)


def _key(name: str) -> str:
    return stream_key("owner", "repo", name)


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
    with tempfile.TemporaryDirectory() as data:
        streams = UploadStreams(store.content, Path(data))
        for seq in order:
            in_memory = [list(xorbs[names[seq]])] if held[seq] else None
            streams.stored(_key("k"), seq, names[seq], in_memory)
        prefix = streams.prefix(_key("k"))
    assert prefix is not None
    assert list(prefix.xorbs) == names
    assert prefix.digest.hexdigest() == _sha256(xorbs, names)
    # Held xorbs that were next in line were not read back; none was read twice.
    assert store.reads <= len(order) - (1 if held[order[0]] and order[0] == 0 else 0)


def _store_in_another_process(data: Path, seq: int, held: bool) -> None:
    """A process of its own (as `--workers` spreads a client's uploads) stores xorb `seq`."""
    xorbs = _xorbs(7, 7)
    names = list(xorbs)
    theirs = UploadStreams(Store(xorbs).content, data)
    theirs.stored(_key("k"), seq, names[seq], [list(xorbs[names[seq]])] if held else None)
    theirs._pool.shutdown(wait=True)  # its hashing done before it exits, as a server's worker lives on


@pytest.mark.parametrize("held", [False, True])
def test_processes_of_one_data_directory_share_a_stream(tmp_path: Path, held: bool) -> None:
    """Odd xorbs stored by other processes, even ones by this one: the stream's digest covers
    them all, in order."""
    xorbs = _xorbs(7, 7)
    names = list(xorbs)
    streams = UploadStreams(Store(xorbs).content, tmp_path)
    for seq in range(len(names)):
        if seq % 2:
            # spawned, not forked: a fork would inherit a descriptor this process's hashing
            # thread may hold locked, and with it the lock
            child = multiprocessing.get_context("spawn").Process(target=_store_in_another_process, args=(tmp_path, seq, held))
            child.start()
            child.join(timeout=60)
            assert child.exitcode == 0
        else:
            streams.stored(_key("k"), seq, names[seq], [list(xorbs[names[seq]])] if held else None)
    prefix = streams.prefix(_key("k"))
    assert prefix is not None and list(prefix.xorbs) == names
    assert prefix.digest.hexdigest() == _sha256(xorbs, names)


def test_a_holder_that_died_does_not_hold_up_its_shard(tmp_path: Path) -> None:
    xorbs = _xorbs(2, 8)
    names = list(xorbs)
    streams = UploadStreams(Store(xorbs).content, tmp_path)
    streams.stored(_key("k"), 1, names[1])  # waits for 0, which a process that died was hashing:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(timeout=30)
    path = tmp_path / upload_streams.DIRECTORY / _key("k")
    state = _State.decode(path.read_bytes()[:HEADER_BYTES])
    state.waiting[0], state.hashing = names[0], gone.pid
    path.write_bytes(state.encode())
    started = time.monotonic()
    assert streams.prefix(_key("k")) is None
    assert time.monotonic() - started < upload_streams.PREFIX_WAIT_SECONDS / 10


def test_without_a_resumable_sha256_there_are_no_streams(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(upload_streams.sha256_state, "available", lambda: False)
    xorbs = _xorbs(1, 9)
    (name,) = xorbs
    streams = UploadStreams(Store(xorbs).content, tmp_path)
    streams.stored(_key("k"), 0, name, [list(xorbs[name])])
    assert streams.prefix(_key("k")) is None
    assert not (tmp_path / upload_streams.DIRECTORY).exists()


def test_a_gap_leaves_the_xorbs_before_it(tmp_path: Path) -> None:
    xorbs = _xorbs(4, 1)
    names = list(xorbs)
    streams = UploadStreams(Store(xorbs).content, tmp_path)
    for seq in (0, 1, 3):
        streams.stored(_key("k"), seq, names[seq])
    prefix = streams.prefix(_key("k"))
    assert prefix is not None and list(prefix.xorbs) == names[:2]
    assert prefix.digest.hexdigest() == _sha256(xorbs, names[:2])


@pytest.mark.parametrize("arrivals", [[0, 0], [0, 1, 1], [MAX_AHEAD], [1, 0, 2 + MAX_AHEAD]])
def test_a_repeat_or_a_xorb_too_far_ahead_breaks_the_stream(tmp_path: Path, arrivals: list[int]) -> None:
    xorbs = _xorbs(3 + MAX_AHEAD, 2)
    names = list(xorbs)
    streams = UploadStreams(Store(xorbs).content, tmp_path)
    for seq in arrivals:
        streams.stored(_key("k"), seq, names[seq])
    assert streams.prefix(_key("k")) is None


def test_a_xorb_that_cannot_be_read_back_breaks_the_stream(tmp_path: Path) -> None:
    def unreadable(xorb: bytes) -> Iterable[list[bytes | memoryview]]:
        raise FileNotFoundError(xorb.hex())

    streams = UploadStreams(unreadable, tmp_path)
    streams.stored(_key("k"), 0, bytes(32))
    assert streams.prefix(_key("k")) is None


def test_a_shard_ends_its_stream(tmp_path: Path) -> None:
    xorbs = _xorbs(1, 3)
    (name,) = xorbs
    streams = UploadStreams(Store(xorbs).content, tmp_path)
    streams.stored(_key("k"), 0, name)
    assert streams.prefix(_key("k")) is not None
    assert streams.prefix(_key("k")) is None
    assert not list((tmp_path / upload_streams.DIRECTORY).iterdir())  # nothing left behind


def test_at_most_max_streams_are_kept_oldest_dropped_first(tmp_path: Path) -> None:
    xorbs = _xorbs(1, 4)
    (name,) = xorbs
    streams = UploadStreams(Store(xorbs).content, tmp_path)
    for i in range(MAX_STREAMS + 5):
        streams.stored(_key(f"k{i}"), 0, name)
    assert len(list((tmp_path / upload_streams.DIRECTORY).iterdir())) == MAX_STREAMS
    kept = [i for i in range(MAX_STREAMS + 5) if streams.prefix(_key(f"k{i}")) is not None]
    assert kept == list(range(5, MAX_STREAMS + 5))


def test_idle_streams_are_dropped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    xorbs = _xorbs(1, 5)
    (name,) = xorbs
    streams = UploadStreams(Store(xorbs).content, tmp_path)
    streams.stored(_key("old"), 0, name)
    now = time.time()
    monkeypatch.setattr(upload_streams.time, "time", lambda: now + upload_streams.IDLE_SECONDS + 1)
    streams.stored(_key("new"), 0, name)  # a new stream sweeps the idle ones
    assert streams.prefix(_key("old")) is None
    assert streams.prefix(_key("new")) is not None


def test_what_waits_is_bounded(tmp_path: Path) -> None:
    """Xorbs stored faster than they are hashed (here the holder never finishes its first)
    break the stream once MAX_WAITING wait, rather than grow its state."""
    xorbs = _xorbs(MAX_WAITING + 1, 6)
    names = list(xorbs)
    streams = UploadStreams(Store(xorbs).content, tmp_path)
    path = tmp_path / upload_streams.DIRECTORY / _key("k")
    path.write_bytes(_State(waiting={0: names[0]}, hashing=os.getpid(), used=time.time()).encode())

    def state() -> _State:
        return _State.decode(path.read_bytes()[:HEADER_BYTES])

    for seq in range(1, MAX_WAITING):
        streams.stored(_key("k"), seq, names[seq])
    assert not state().broken and len(state().waiting) == MAX_WAITING
    streams.stored(_key("k"), MAX_WAITING, names[MAX_WAITING])
    assert state().broken and not state().waiting


def test_the_largest_state_fits_its_header() -> None:
    """The header's bound: every field at its largest still fits HEADER_BYTES."""
    longest = _State(
        hashed=MAX_STREAM_XORBS - 1,
        waiting={MAX_STREAM_XORBS - 1 - i: bytes([255]) * 32 for i in range(MAX_WAITING)},
        broken=True,
        hashing=2**22,
        used=time.time() * 1000,
    )
    assert len(longest.encode()) == HEADER_BYTES
    assert _State.decode(longest.encode()) == longest


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
