"""Plan a reconstruction from stored file terms: the chunk runs covering a byte range, and
the xorb byte ranges to fetch for them (without URLs; the server signs those).

Guarantees, whatever the layout of the file (repeated regions, interleaved xorbs, one xorb
referenced hundreds of times):

- every fetch range holds at most MAX_FETCH_BYTES, both serialized and decoded, so clients can
  download in parallel in bounded memory (a whole 64 MiB xorb in one signed range is neither);
- the fetch ranges of one xorb are disjoint: each stored byte is fetched once per plan, however
  many terms use it;
- every term lies within exactly one fetch range (terms are cut where a fetch range ends).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence

from ..core.hashes import hash_to_hex
from ..core.reconstruction import FetchRange, Reconstruction, Term
from ..core.shard import FileTerm
from ..core.xorb import XorbLayout

MAX_FETCH_BYTES = 16 * 1024 * 1024


def _select(terms: Sequence[FileTerm], layouts: Mapping[str, XorbLayout], start: int, end: int) -> tuple[list[Term], int]:
    """The chunk runs covering file bytes [start, end] and the offset of `start` in the first."""
    out: list[Term] = []
    offset_into_first = 0
    pos = 0  # file offset of the current chunk
    for term in terms:
        if pos + term.unpacked_bytes <= start:
            pos += term.unpacked_bytes
            continue
        if pos > end:
            break
        xorb = hash_to_hex(term.xorb_hash)
        sizes = layouts[xorb].chunk_sizes
        first = last = None
        length = 0
        for idx in range(term.chunk_start, term.chunk_end):
            size = sizes[idx]
            if pos + size > start and pos <= end:
                if first is None:
                    first = idx
                    if not out:
                        offset_into_first = start - pos
                last = idx
                length += size
            pos += size
        if first is not None and last is not None:
            out.append(Term(xorb, first, last + 1, length))
    return out, offset_into_first


def _union(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted union of half-open chunk ranges; touching ranges join (one request, not two)."""
    out: list[tuple[int, int]] = []
    for s, e in sorted(ranges):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def _cut(layout: XorbLayout, start: int, end: int) -> list[int]:
    """Chunk indices that cut chunks [start, end) into pieces of at most MAX_FETCH_BYTES
    serialized and decoded (a piece always holds at least one chunk), ends included."""
    cuts = []
    piece_start = start
    raw = unpacked = 0
    for idx in range(start, end):
        record = layout.byte_ends[idx] - (layout.byte_ends[idx - 1] if idx else 0)
        size = layout.chunk_sizes[idx]
        if idx > piece_start and (raw + record > MAX_FETCH_BYTES or unpacked + size > MAX_FETCH_BYTES):
            cuts.append(idx)
            piece_start, raw, unpacked = idx, 0, 0
        raw += record
        unpacked += size
    cuts.append(end)
    return cuts


def _fetch_bounds(terms: Sequence[Term], layouts: Mapping[str, XorbLayout]) -> dict[str, list[int]]:
    """Per xorb, the sorted chunk indices where one fetch range ends and the next may begin:
    the union of the chunks the terms need, cut into bounded pieces."""
    needed: dict[str, list[tuple[int, int]]] = {}
    for term in terms:
        needed.setdefault(term.xorb, []).append((term.chunk_start, term.chunk_end))
    bounds: dict[str, list[int]] = {}
    for xorb, ranges in needed.items():
        points: list[int] = []
        for s, e in _union(ranges):
            points.append(s)
            points += _cut(layouts[xorb], s, e)
        bounds[xorb] = points
    return bounds


def _piece_length(layout: XorbLayout, start: int, end: int) -> int:
    return sum(layout.chunk_sizes[start:end])


def plan_reconstruction(terms: Sequence[FileTerm], layouts: Mapping[str, XorbLayout], byte_range: tuple[int, int]) -> Reconstruction:
    """Reconstruction of file bytes [start, end] (inclusive) with the guarantees above."""
    selected, offset = _select(terms, layouts, *byte_range)
    bounds = _fetch_bounds(selected, layouts)
    pieces: list[Term] = []
    fetches: dict[tuple[str, int], FetchRange] = {}
    for term in selected:
        layout = layouts[term.xorb]
        points = bounds[term.xorb]
        start = term.chunk_start
        while start < term.chunk_end:
            # points holds (start, cuts..., end) per union interval; the next point after
            # `start` ends the fetch range that contains it.
            at = bisect_right(points, start)
            range_start, range_end = points[at - 1], points[at]
            end = min(term.chunk_end, range_end)
            length = term.length if (start, end) == (term.chunk_start, term.chunk_end) else _piece_length(layout, start, end)
            pieces.append(Term(term.xorb, start, end, length))
            if (term.xorb, range_start) not in fetches:
                b0, b1 = layout.byte_range(range_start, range_end)
                fetches[(term.xorb, range_start)] = FetchRange(term.xorb, range_start, range_end, b0, b1)
            start = end
    # Cutting the first term keeps offset_into_first_range valid: the offset lies within the
    # first chunk, and every piece holds at least one chunk.
    return Reconstruction(offset, tuple(pieces), tuple(fetches.values()))
