"""cas_store._read_pieces: how a term of a stored xorb is cut into bounded reads."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from git_xet.storage.cas_store import _read_pieces
from git_xet.storage.objects import DirectoryObjectStore
from git_xet.storage.s3 import S3ObjectStore
from git_xet.core.xorb import XorbLayout


@settings(max_examples=200, deadline=None)
@given(
    piece=st.sampled_from([DirectoryObjectStore.read_piece, S3ObjectStore.read_piece]),
    record_fractions=st.lists(st.floats(0.001, 1.5), min_size=1, max_size=60),
    data=st.data(),
)
def test_pieces_tile_the_term_and_stay_within_the_bound(piece: int, record_fractions: list[float], data: st.DataObject) -> None:
    record_sizes = [max(1, int(f * piece)) for f in record_fractions]
    ends, total = [], 0
    for size in record_sizes:
        total += size
        ends.append(total)
    n = len(ends)
    layout = XorbLayout(bytes(32), tuple(bytes(32) for _ in range(n)), tuple(ends), tuple(record_sizes))
    start = data.draw(st.integers(0, n - 1))
    end = data.draw(st.integers(start + 1, n))
    pieces = list(_read_pieces(layout, start, end, piece))
    assert pieces[0][0] == start and pieces[-1][1] == end
    assert all(a[1] == b[0] for a, b in itertools.pairwise(pieces)), "contiguous, in order"
    for first, stop in pieces:
        assert stop > first
        low, high = layout.byte_range(first, stop)
        assert high - low + 1 <= piece or stop == first + 1, "over the bound only for one large chunk"
        if stop < end:  # a piece ends early only when the next chunk would not fit
            next_low, next_high = layout.byte_range(first, stop + 1)
            assert next_high - next_low + 1 > piece
