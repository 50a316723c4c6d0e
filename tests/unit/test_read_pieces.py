"""cas_store._read_pieces: how a term of a stored xorb is cut into bounded reads."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from git_xet.storage.cas_store import READ_PIECE, _read_pieces
from git_xet.core.xorb import XorbLayout


@settings(max_examples=200, deadline=None)
@given(
    record_sizes=st.lists(st.integers(1, READ_PIECE + READ_PIECE // 2), min_size=1, max_size=60),
    data=st.data(),
)
def test_pieces_tile_the_term_and_stay_within_the_bound(record_sizes: list[int], data: st.DataObject) -> None:
    ends, total = [], 0
    for size in record_sizes:
        total += size
        ends.append(total)
    n = len(ends)
    layout = XorbLayout(bytes(32), tuple(bytes(32) for _ in range(n)), tuple(ends), tuple(record_sizes))
    start = data.draw(st.integers(0, n - 1))
    end = data.draw(st.integers(start + 1, n))
    pieces = list(_read_pieces(layout, start, end))
    assert pieces[0][0] == start and pieces[-1][1] == end
    assert all(a[1] == b[0] for a, b in itertools.pairwise(pieces)), "contiguous, in order"
    for first, stop in pieces:
        assert stop > first
        low, high = layout.byte_range(first, stop)
        assert high - low + 1 <= READ_PIECE or stop == first + 1, "over the bound only for one large chunk"
        if stop < end:  # a piece ends early only when the next chunk would not fit
            next_low, next_high = layout.byte_range(first, stop + 1)
            assert next_high - next_low + 1 > READ_PIECE
