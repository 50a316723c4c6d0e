"""Plan a reconstruction from stored file terms: the chunk runs covering a byte range, and
the merged xorb byte ranges to fetch for them (without URLs; the server signs those)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..core.hashes import hash_to_hex
from ..core.reconstruction import FetchRange, Reconstruction, Term
from ..core.shard import FileTerm
from .cas_store import XorbLayout

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
        if first is not None:
            out.append(Term(xorb, first, last + 1, length))
    return out, offset_into_first


def _split(terms: Sequence[Term], layouts: Mapping[str, XorbLayout]) -> list[Term]:
    """Cut terms so no piece exceeds MAX_FETCH_BYTES serialized or decoded.

    Bounded fetches let clients download in parallel with bounded memory (a whole 64 MiB xorb
    in one signed range would be neither), and a term must lie within one fetch range.
    """
    out: list[Term] = []
    for term in terms:
        layout = layouts[term.xorb]
        start = term.chunk_start
        while start < term.chunk_end:
            end = start
            raw = unpacked = 0
            while end < term.chunk_end:
                size = layout.chunk_sizes[end]
                record = layout.byte_ends[end] - (layout.byte_ends[end - 1] if end else 0)
                if end > start and (raw + record > MAX_FETCH_BYTES or unpacked + size > MAX_FETCH_BYTES):
                    break
                raw += record
                unpacked += size
                end += 1
            out.append(Term(term.xorb, start, end, unpacked))
            start = end
    # The first piece keeps offset_into_first_range valid: splitting only moves later bytes.
    return out


def _merged(terms: Sequence[Term]) -> dict[str, list[tuple[int, int]]]:
    """Per xorb, the union of needed chunk ranges (overlapping ones merged)."""
    by_xorb: dict[str, list[tuple[int, int]]] = {}
    for term in terms:
        by_xorb.setdefault(term.xorb, []).append((term.chunk_start, term.chunk_end))
    merged: dict[str, list[tuple[int, int]]] = {}
    for xorb, ranges in by_xorb.items():
        out: list[tuple[int, int]] = []
        for s, e in sorted(ranges):
            if out and s < out[-1][1]:
                out[-1] = (out[-1][0], max(out[-1][1], e))
            else:
                out.append((s, e))
        merged[xorb] = out
    return merged


def plan_reconstruction(terms: Sequence[FileTerm], layouts: Mapping[str, XorbLayout], byte_range: tuple[int, int]) -> Reconstruction:
    """Reconstruction of file bytes [start, end] (inclusive); each xorb range fetched once."""
    selected, offset = _select(terms, layouts, *byte_range)
    selected = _split(selected, layouts)
    fetches = []
    for xorb, ranges in _merged(selected).items():
        for s, e in ranges:
            b0, b1 = layouts[xorb].byte_range(s, e)
            fetches.append(FetchRange(xorb, s, e, b0, b1))
    return Reconstruction(offset, tuple(selected), tuple(fetches))
