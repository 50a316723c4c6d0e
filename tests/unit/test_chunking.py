"""Chunking: xet-core vectors, C == pure-Python reference, streaming == one-shot, boundary rules."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from git_xet.core import chunking
from git_xet.core.constants import MAX_CHUNK_SIZE, MIN_CHUNK_SIZE
from git_xet.core.gearhash_table import GEARHASH_TABLE
from git_xet.core.hashes import chunk_hash, file_hash, hash_to_hex
from tests.support.datagen import planted, random_bytes, splitmix64_bytes

XET_CORE_1MB_ENDS = [
    84493, 134421, 144853, 243318, 271793, 336457, 467529, 494581, 582000, 596735,
    616815, 653164, 678202, 724510, 815591, 827760, 958832, 991092, 1000000,
]  # fmt: skip


def _file_hash_of(data: bytes, ends: list[int]) -> str:
    starts = [0, *ends[:-1]]
    return hash_to_hex(file_hash([chunk_hash(data[s:e]) for s, e in zip(starts, ends)], [e - s for s, e in zip(starts, ends)]))


def test_native_extension_is_built() -> None:
    """CI builds the C extension; a silent fallback to pure Python would be a 200x slowdown."""
    assert chunking.NATIVE_AVAILABLE


def test_native_table_matches_python_table() -> None:
    from git_xet.core import _gearhash

    assert _gearhash.table() == GEARHASH_TABLE


def test_splitmix64_generator_matches_xet_core() -> None:
    data = splitmix64_bytes(1_000_000, 0)
    assert (data[0], data[127], data[111111]) == (175, 132, 118)


@pytest.mark.parametrize("scan_fn", [chunking.scan, chunking.scan_reference], ids=["native", "reference"])
def test_xet_core_1mb_vector(scan_fn) -> None:
    data = splitmix64_bytes(1_000_000, 0)
    ends = chunking.chunk_boundaries(data, scan_fn)
    assert ends == XET_CORE_1MB_ENDS
    assert _file_hash_of(data, ends) == "3d17b2d7d64a0e011b6717a52d9a16bd2c3f05b743fa8adf52a7d75dafab6d89"


def test_constant_data_cuts_at_max_chunk_size() -> None:
    assert chunking.chunk_boundaries(bytes([59]) * 1_000_000) == [131072 * k for k in range(1, 8)] + [1_000_000]


def test_empty_and_tiny_inputs() -> None:
    assert chunking.chunk_boundaries(b"") == []
    assert chunking.chunk_boundaries(b"x") == [1]
    assert chunking.chunk_boundaries(bytes(MIN_CHUNK_SIZE - 1)) == [MIN_CHUNK_SIZE - 1]


@pytest.mark.parametrize("hit_end", [MIN_CHUNK_SIZE - 1, MIN_CHUNK_SIZE, MIN_CHUNK_SIZE + 1, 100_000, MAX_CHUNK_SIZE - 1, MAX_CHUNK_SIZE])
def test_planted_hash_hits_respect_min_and_max(hit_end: int) -> None:
    data = planted(300_000, [hit_end])
    native = chunking.chunk_boundaries(data)
    assert native == chunking.chunk_boundaries(data, chunking.scan_reference)
    starts = [0, *native[:-1]]
    sizes = [e - s for s, e in zip(starts, native)]
    assert all(size >= MIN_CHUNK_SIZE for size in sizes[:-1])
    assert all(size <= MAX_CHUNK_SIZE for size in sizes)
    assert (hit_end in native) == (hit_end >= MIN_CHUNK_SIZE)


@settings(max_examples=25, deadline=None)
@given(st.binary(min_size=0, max_size=40_000), st.integers(0, 2**32))
def test_native_matches_reference(prefix: bytes, seed: int) -> None:
    # Random bytes alone rarely cut below 128 KiB in a short input; a repeated mask-hit-rich
    # prefix plus a random tail exercises cuts, skips and the final partial chunk.
    data = prefix * 3 + random_bytes(seed % 200_000, seed)
    assert chunking.chunk_boundaries(data) == chunking.chunk_boundaries(data, chunking.scan_reference)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 600_000), st.lists(st.integers(1, 300_000), max_size=12), st.integers(0, 2**32))
def test_streaming_equals_one_shot(size: int, splits: list[int], seed: int) -> None:
    data = random_bytes(size, seed)
    expected = chunking.chunk_boundaries(data)
    chunker = chunking.Chunker()
    got: list[int] = []
    pos = 0
    for step in splits:
        got += chunker.feed(data[pos : pos + step])
        pos = min(pos + step, size)
    got += chunker.feed(data[pos:])
    last = chunker.finish()
    if last is not None:
        got.append(last)
    assert got == expected
    blocks = [data[i : i + (splits[0] if splits else 65536)] for i in range(0, size, splits[0] if splits else 65536)]
    chunks = list(chunking.iter_chunks(blocks))
    assert b"".join(chunks) == data
    assert [len(c) for c in chunks] == [e - s for s, e in zip([0, *expected[:-1]], expected)]


def test_streaming_state_survives_tiny_blocks_with_reference() -> None:
    data = planted(200_000, [MIN_CHUNK_SIZE + 10, 50_000])
    chunker = chunking.Chunker(chunking.scan_reference)
    got = []
    for i in range(0, len(data), 4093):
        got += chunker.feed(data[i : i + 4093])
    got.append(chunker.finish())
    assert got == chunking.chunk_boundaries(data)


def test_native_scan_rejects_bad_state() -> None:
    with pytest.raises(ValueError):
        chunking.scan(b"abc", 0, MAX_CHUNK_SIZE)
    with pytest.raises(ValueError):
        chunking.scan(b"abc", 0, -1)


@settings(max_examples=25, deadline=None)
@given(size=st.integers(0, 300_000), block=st.sampled_from([8192, 65536, 131072, 1 << 22]), seed=st.integers(0, 1 << 30))
def test_file_scan_in_one_pass_or_in_blocks_agrees(size: int, block: int, seed: int) -> None:
    """iter_chunk_ends scans a view of at most one block in the caller's thread and a larger one
    in blocks from a scanning thread: same chunk ends and sha256 either way, as one-shot chunking."""
    import hashlib

    from git_xet.pipelines.file_hashing import iter_chunk_ends

    data = random_bytes(size, seed)
    expected = chunking.chunk_boundaries(data)
    hasher = hashlib.sha256()
    assert list(iter_chunk_ends(memoryview(data), sha256_hasher=hasher, block_size=block)) == expected
    assert hasher.digest() == hashlib.sha256(data).digest()
