"""Build reconstruction answers (v1 `fetch_info` and v2 `xorbs` shapes) for a byte range.

Pure: the caller passes the file's terms, the layouts of the xorbs they use and a function
that turns (xorb, inclusive byte range) into a signed URL.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ..core.hashes import hash_to_hex
from ..core.shard import FileTerm
from ..storage.cas_store import XorbLayout

UrlMaker = Callable[[str, int, int], str]


class RangeNotSatisfiable(Exception):
    """The requested range starts at or past the end of the file (HTTP 416)."""


@dataclass(frozen=True)
class _Piece:
    xorb: str
    chunk_start: int
    chunk_end: int
    length: int


def parse_range_header(value: str | None, size: int) -> tuple[int, int]:
    """`bytes=a-b` (inclusive, b clamped to the file) -> (a, b); no header -> whole file."""
    if size == 0:
        if value:
            raise RangeNotSatisfiable()
        return 0, -1
    if not value:
        return 0, size - 1
    unit, _, spec = value.strip().partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        raise ValueError(f"unsupported Range header {value!r}")
    first, _, last = spec.strip().partition("-")
    if not first:  # suffix form: the last N bytes
        n = int(last)
        if n <= 0:
            raise RangeNotSatisfiable()
        return max(0, size - n), size - 1
    start = int(first)
    end = int(last) if last else size - 1
    if start >= size:
        raise RangeNotSatisfiable()
    if end < start:
        raise ValueError(f"invalid Range header {value!r}")
    return start, min(end, size - 1)


def _select(terms: Sequence[FileTerm], layouts: Mapping[str, XorbLayout], start: int, end: int) -> tuple[list[_Piece], int]:
    """The chunk runs covering file bytes [start, end] and the offset of `start` in the first."""
    pieces: list[_Piece] = []
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
                    if not pieces:
                        offset_into_first = start - pos
                last = idx
                length += size
            pos += size
        if first is not None:
            pieces.append(_Piece(xorb, first, last + 1, length))
    return pieces, offset_into_first


def _merged_ranges(pieces: Sequence[_Piece]) -> dict[str, list[tuple[int, int]]]:
    """Per xorb, the union of needed chunk ranges (overlapping or adjacent ones merged)."""
    by_xorb: dict[str, list[tuple[int, int]]] = {}
    for piece in pieces:
        by_xorb.setdefault(piece.xorb, []).append((piece.chunk_start, piece.chunk_end))
    merged: dict[str, list[tuple[int, int]]] = {}
    for xorb, ranges in by_xorb.items():
        out: list[tuple[int, int]] = []
        for s, e in sorted(ranges):
            if out and s <= out[-1][1]:
                out[-1] = (out[-1][0], max(out[-1][1], e))
            else:
                out.append((s, e))
        merged[xorb] = out
    return merged


def build_reconstruction(
    terms: Sequence[FileTerm],
    layouts: Mapping[str, XorbLayout],
    byte_range: tuple[int, int],
    make_url: UrlMaker,
    version: int,
) -> dict:
    """The JSON body of GET /v{version}/reconstructions/{file} for an inclusive byte range."""
    pieces, offset = _select(terms, layouts, *byte_range)
    body: dict = {
        "offset_into_first_range": offset,
        "terms": [
            {"hash": p.xorb, "unpacked_length": p.length, "range": {"start": p.chunk_start, "end": p.chunk_end}} for p in pieces
        ],
    }
    merged = _merged_ranges(pieces)
    if version == 1:
        fetch_info = {}
        for xorb, ranges in merged.items():
            entries = []
            for s, e in ranges:
                b0, b1 = layouts[xorb].byte_range(s, e)
                entries.append({"range": {"start": s, "end": e}, "url": make_url(xorb, b0, b1), "url_range": {"start": b0, "end": b1}})
            fetch_info[xorb] = entries
        body["fetch_info"] = fetch_info
    else:
        xorbs = {}
        for xorb, ranges in merged.items():
            entries = []
            for s, e in ranges:
                b0, b1 = layouts[xorb].byte_range(s, e)
                entries.append({"url": make_url(xorb, b0, b1), "ranges": [{"chunks": {"start": s, "end": e}, "bytes": {"start": b0, "end": b1}}]})
            xorbs[xorb] = entries
        body["xorbs"] = xorbs
    return body
