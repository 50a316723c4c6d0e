"""ResumableSha256: hashlib's sha256, whatever the pieces, buffers and saved-and-resumed states
in between (the state is what travels between server processes)."""

from __future__ import annotations

import hashlib
import itertools
import mmap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from git_xet.server.sha256_state import STATE_BYTES, ResumableSha256, available


def test_available_where_hashlib_uses_openssl() -> None:
    """On Linux, the libcrypto that hashlib loaded has SHA256_Init: the server's upload streams
    then work across its worker processes."""
    assert available()


def _as(kind: str, data: bytes) -> bytes | bytearray | memoryview:
    if kind == "bytes":
        return data
    if kind == "bytearray":
        return bytearray(data)
    if kind == "view of bytes":  # read-only: hashed through a copy
        return memoryview(b"." + data + b".")[1:-1]
    buffer = mmap.mmap(-1, max(1, len(data)), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    buffer[: len(data)] = data
    return memoryview(buffer)[: len(data)]  # writable: hashed in place, as a receive buffer is


@settings(max_examples=80, deadline=None)
@given(
    data=st.binary(max_size=5000),
    cuts=st.lists(st.integers(0, 5000), max_size=8),
    kinds=st.lists(st.sampled_from(["bytes", "bytearray", "view of bytes", "mapped"]), min_size=9, max_size=9),
    resumes=st.lists(st.booleans(), min_size=9, max_size=9),
)
def test_any_pieces_and_resumes_give_hashlibs_digest(data: bytes, cuts: list[int], kinds: list[str], resumes: list[bool]) -> None:
    bounds = [0, *sorted(min(c, len(data)) for c in cuts), len(data)]
    running = ResumableSha256()
    for i, (start, stop) in enumerate(itertools.pairwise(bounds)):
        running.update(_as(kinds[i], data[start:stop]))
        if resumes[i]:
            saved = running.state
            assert len(saved) == STATE_BYTES
            running = ResumableSha256.from_state(bytes(saved))
        assert running.hexdigest() == hashlib.sha256(data[:stop]).hexdigest()  # digest() leaves it running
    assert running.digest() == hashlib.sha256(data).digest()


def test_a_copy_runs_on_its_own() -> None:
    first = ResumableSha256()
    first.update(b"shared ")
    second = first.copy()
    first.update(b"one")
    second.update(b"two")
    assert (first.hexdigest(), second.hexdigest()) == (hashlib.sha256(b"shared one").hexdigest(), hashlib.sha256(b"shared two").hexdigest())


def test_a_state_of_another_size_is_refused() -> None:
    with pytest.raises(ValueError, match="112 bytes"):
        ResumableSha256.from_state(bytes(STATE_BYTES - 1))
