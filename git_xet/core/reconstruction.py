"""File reconstructions as data: which chunk runs of which xorbs make a file (or a byte range
of it), and which xorb byte ranges to fetch for them.

Pure and shared: the server builds one and serializes it (v1 ``fetch_info`` or v2 ``xorbs``
JSON), the HTTP client parses either JSON shape back (rejecting anything inconsistent), and the
serverless local store builds one directly. Chunk ranges are end-exclusive; byte ranges are
end-INCLUSIVE (they go verbatim into HTTP Range headers).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from .constants import MAX_CHUNK_SIZE, MAX_XORB_BYTES, MAX_XORB_CHUNKS
from .errors import FormatError
from .hashes import is_hash_hex

# The most bytes one fetch range can hold: a whole xorb of raw chunks (64 MiB of data plus a
# header per chunk). Anything a server declares beyond this is refused before a byte is
# allocated for it.
MAX_FETCH_RANGE_BYTES = MAX_XORB_BYTES + 8 * MAX_XORB_CHUNKS


class Term(NamedTuple):
    """Chunks [chunk_start, chunk_end) of a xorb, `length` bytes once decoded."""

    xorb: str
    chunk_start: int
    chunk_end: int
    length: int


class FetchRange(NamedTuple):
    """Chunks [chunk_start, chunk_end) of a xorb stored at bytes [byte_start, byte_end]."""

    xorb: str
    chunk_start: int
    chunk_end: int
    byte_start: int
    byte_end: int
    url: str | None = None  # None: the backend reads the range itself (local store)

    def covers(self, term: Term) -> bool:
        return self.xorb == term.xorb and self.chunk_start <= term.chunk_start and term.chunk_end <= self.chunk_end


class Reconstruction(NamedTuple):
    offset_into_first_range: int
    terms: tuple[Term, ...]
    fetches: tuple[FetchRange, ...] = ()

    def term_fetches(self) -> list[FetchRange]:
        """For each term, a fetch range that covers it.

        Indexed per xorb by start chunk, with the furthest-reaching range among those starting
        at or before each point: O(n log n) for n terms and ranges, so a hostile answer cannot
        make this quadratic.
        """
        by_xorb: dict[str, list[FetchRange]] = {}
        for f in self.fetches:
            by_xorb.setdefault(f.xorb, []).append(f)
        index: dict[str, tuple[list[int], list[FetchRange]]] = {}
        for xorb, ranges in by_xorb.items():
            ranges.sort(key=lambda f: f.chunk_start)
            reach: list[FetchRange] = []  # reach[i]: the range ending furthest among ranges[:i + 1]
            for f in ranges:
                reach.append(f if not reach or f.chunk_end > reach[-1].chunk_end else reach[-1])
            index[xorb] = ([f.chunk_start for f in ranges], reach)
        out = []
        for term in self.terms:
            starts, reach = index.get(term.xorb, ([], []))
            i = bisect_right(starts, term.chunk_start) - 1
            if i < 0 or not reach[i].covers(term):
                raise FormatError(f"no fetch range covers chunks [{term.chunk_start}, {term.chunk_end}) of xorb {term.xorb}")
            out.append(reach[i])
        return out

    def validate(self) -> Reconstruction:
        """Every term covered by a fetch range, every range and length within what one xorb can
        hold (so no size a server declares makes a client allocate more); returns self."""
        if self.offset_into_first_range < 0 or (self.terms and self.offset_into_first_range >= self.terms[0].length):
            raise FormatError("offset_into_first_range outside the first term")
        for f in self.fetches:
            if not (0 <= f.chunk_start < f.chunk_end <= MAX_XORB_CHUNKS and 0 <= f.byte_start <= f.byte_end):
                raise FormatError(f"malformed fetch range for xorb {f.xorb}")
            if f.byte_end - f.byte_start + 1 > MAX_FETCH_RANGE_BYTES:
                raise FormatError(f"fetch range of xorb {f.xorb} is larger than a xorb can be")
        for t in self.terms:
            if not (0 <= t.chunk_start < t.chunk_end <= MAX_XORB_CHUNKS and 0 < t.length <= (t.chunk_end - t.chunk_start) * MAX_CHUNK_SIZE):
                raise FormatError(f"malformed term for xorb {t.xorb}")
        self.term_fetches()
        return self

    # ------------------------------------------------------------------ JSON

    def to_json(self, version: int) -> dict:
        body: dict = {
            "offset_into_first_range": self.offset_into_first_range,
            "terms": [{"hash": t.xorb, "unpacked_length": t.length, "range": {"start": t.chunk_start, "end": t.chunk_end}} for t in self.terms],
        }
        grouped: dict[str, list[FetchRange]] = {}
        for f in self.fetches:
            grouped.setdefault(f.xorb, []).append(f)
        if version == 1:
            body["fetch_info"] = {
                x: [{"range": {"start": f.chunk_start, "end": f.chunk_end}, "url": f.url, "url_range": {"start": f.byte_start, "end": f.byte_end}} for f in fs]
                for x, fs in grouped.items()
            }
        else:
            # One range per entry: a multi-range entry would make clients send one Range header
            # with several ranges and expect multipart/byteranges.
            body["xorbs"] = {
                x: [{"url": f.url, "ranges": [{"chunks": {"start": f.chunk_start, "end": f.chunk_end}, "bytes": {"start": f.byte_start, "end": f.byte_end}}]} for f in fs]
                for x, fs in grouped.items()
            }
        return body

    @classmethod
    def from_json(cls, body: object) -> Reconstruction:
        """Parse a v1 or v2 reconstruction answer; FormatError on anything malformed."""
        try:
            if not isinstance(body, Mapping):
                raise TypeError
            offset = _int(body["offset_into_first_range"])
            terms = tuple(
                Term(_hash(t["hash"]), _int(t["range"]["start"]), _int(t["range"]["end"]), _int(t["unpacked_length"])) for t in _list(body["terms"])
            )
            fetches: list[FetchRange] = []
            if "xorbs" in body:
                for xorb, entries in _map(body["xorbs"]).items():
                    for entry in _list(entries):
                        url = _str(entry["url"])
                        for r in _list(entry["ranges"]):
                            fetches.append(FetchRange(_hash(xorb), _int(r["chunks"]["start"]), _int(r["chunks"]["end"]), _int(r["bytes"]["start"]), _int(r["bytes"]["end"]), url))
            else:
                for xorb, entries in _map(body["fetch_info"]).items():
                    for e in _list(entries):
                        fetches.append(FetchRange(_hash(xorb), _int(e["range"]["start"]), _int(e["range"]["end"]), _int(e["url_range"]["start"]), _int(e["url_range"]["end"]), _str(e["url"])))
        except (KeyError, TypeError, ValueError) as exc:
            raise FormatError(f"malformed reconstruction answer ({type(exc).__name__}: {exc})") from None
        return cls(offset, terms, tuple(fetches)).validate()


def _int(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"expected a non-negative integer, got {value!r}")
    return value


def _str(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError("expected a string")
    return value


def _hash(value: object) -> str:
    if not isinstance(value, str) or not is_hash_hex(value):
        raise ValueError("expected a hash string")
    return value.lower()


def _list(value: object) -> Sequence:
    if not isinstance(value, list):
        raise TypeError("expected a list")
    return value


def _map(value: object) -> Mapping:
    if not isinstance(value, Mapping):
        raise TypeError("expected an object")
    return value
