"""The C fast paths agree with their pure-Python references, on generated inputs.

Each C function has a reference in Python that states what it computes; these tests hold the
two to the same answers over classes of inputs (lengths around the fast paths' block sizes,
continued checksums, skewed byte distributions, merkle levels cut at every place a cut can fall),
so a fast path can never drift silently.
"""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from git_xet.core import _bg4, _crc64, _merkle, compression, hashes  # type: ignore[attr-defined]  # built by install/test.sh
from git_xet.core.checksums import crc64nvme, crc64nvme_of_parts, crc64nvme_reference

# Lengths that straddle the folding path's 64-byte steps and 128-byte minimum.
_lengths = st.one_of(st.integers(0, 300), st.integers(0, 5000), st.sampled_from([127, 128, 129, 191, 192, 193, 65535, 65536, 65537]))


@st.composite
def _buffers(draw: st.DrawFn) -> bytes:
    n = draw(_lengths)
    return draw(st.one_of(st.binary(min_size=n, max_size=n), st.builds(lambda b, k: b * k, st.binary(min_size=1, max_size=8), st.just(max(1, n // 4)))))


def test_crc64_check_value_and_path() -> None:
    assert crc64nvme is not None
    assert crc64nvme(b"123456789") == crc64nvme_reference(b"123456789") == 0xAE8B14860A799888
    assert crc64nvme(bytes(4096)) == _crc64.crc64nvme_table(bytes(4096)) == crc64nvme_reference(bytes(4096))


@settings(max_examples=300, deadline=None)
@given(_buffers(), st.integers(0, 2**64 - 1))
def test_crc64_fast_paths_match_reference(data: bytes, start: int) -> None:
    expected = crc64nvme_reference(data, start)
    assert _crc64.crc64nvme(data, start) == expected
    assert _crc64.crc64nvme_table(data, start) == expected
    assert _crc64.crc64nvme(memoryview(data), start) == expected


@settings(max_examples=100, deadline=None)
@given(_buffers(), st.data())
def test_crc64_continues_across_any_split(data: bytes, draw: st.DataObject) -> None:
    cut = draw.draw(st.integers(0, len(data)))
    assert _crc64.crc64nvme(data[cut:], _crc64.crc64nvme(data[:cut])) == crc64nvme_reference(data)


@settings(max_examples=100, deadline=None)
@given(_buffers(), st.lists(st.integers(0, 1 << 20), max_size=12))
def test_crc64_of_parts_is_the_crc_of_their_concatenation(data: bytes, cuts: list[int]) -> None:
    bounds = [0, *sorted(min(c, len(data)) for c in cuts), len(data)]
    parts = [memoryview(data)[a:b] for a, b in itertools.pairwise(bounds)]
    assert crc64nvme_of_parts(parts) == crc64nvme_reference(data)


def test_crc64_of_a_large_unaligned_view() -> None:
    data = bytes(range(256)) * 4099
    view = memoryview(data)[3:-5]
    assert _crc64.crc64nvme(view) == _crc64.crc64nvme_table(view) == crc64nvme_reference(view)


@settings(max_examples=300, deadline=None)
@given(_buffers())
def test_bg4_histograms_match_reference(data: bytes) -> None:
    fast = _bg4.lane_popcount_histograms(data)
    assert fast == compression.lane_popcount_histograms_reference(data)
    assert sum(fast) == len(data)
    # Lane k holds the bytes at i % 4 == k: its count is derived from the length alone.
    assert [sum(fast[9 * k : 9 * k + 9]) for k in range(4)] == [len(range(k, len(data), 4)) for k in range(4)]


def test_predictor_uses_the_fast_histograms() -> None:
    assert compression.lane_popcount_histograms is _bg4.lane_popcount_histograms


@st.composite
def _nodes(draw: st.DrawFn) -> list[tuple[bytes, int]]:
    """Merkle leaves whose last lanes are multiples of MEAN_BRANCHING_FACTOR as often as not, so
    groups end at every length from 2 to MAX_CHILDREN; sizes from 0 to the largest u64."""
    count = draw(st.one_of(st.integers(0, 40), st.integers(0, 300)))
    nodes = []
    for _ in range(count):
        head = draw(st.binary(min_size=24, max_size=24))
        last = draw(st.integers(0, 2**64 - 1))
        if draw(st.booleans()):
            last -= last % 4
        size = draw(st.one_of(st.integers(0, 1 << 17), st.integers(0, 2**64 - 1), st.just(0)))
        nodes.append((head + last.to_bytes(8, "little"), size))
    return nodes


@settings(max_examples=150, deadline=None)
@given(_nodes())
def test_merkle_root_matches_reference(nodes: list[tuple[bytes, int]]) -> None:
    """Whole trees; sizes near 2**64 overflow a parent, where the C path leaves it to the reference."""
    assert hashes.merkle_root(nodes) == hashes.merkle_root_reference(nodes)


@settings(max_examples=150, deadline=None)
@given(_nodes())
def test_merge_level_matches_the_reference_groups(nodes: list[tuple[bytes, int]]) -> None:
    """One level: the same groups, each node's text line for line, the same parent sizes."""
    expected_texts, expected_sizes = [], []
    start = 0
    while start < len(nodes):
        cut = hashes._next_merge_cut(nodes, start)
        group = nodes[start : start + cut]
        expected_texts.append("".join(f"{hashes.hash_to_hex(h)} : {size}\n" for h, size in group).encode("ascii"))
        expected_sizes.append(sum(size for _, size in group))
        start += cut
    try:
        texts, sizes = _merkle.merge_level(b"".join(h for h, _ in nodes), [size for _, size in nodes])
    except OverflowError:
        assert max(expected_sizes) >= 2**64
        return
    assert texts == expected_texts
    assert sizes == expected_sizes


def test_merkle_root_uses_the_fast_level() -> None:
    assert hashes._merge_level is _merkle.merge_level
