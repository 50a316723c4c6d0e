"""The C fast paths agree with their pure-Python references, on generated inputs.

Each C function has a reference in Python that states what it computes; these tests hold the
two to the same answers over classes of inputs (lengths around the fast paths' block sizes,
continued checksums, skewed byte distributions), so a fast path can never drift silently.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from git_xet.core import _bg4, _crc64, compression  # type: ignore[attr-defined]  # built by install/test.sh
from git_xet.core.checksums import crc64nvme, crc64nvme_reference

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
