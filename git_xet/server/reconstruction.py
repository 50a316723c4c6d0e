"""HTTP side of reconstructions: the Range header, and signing a plan's fetch URLs."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ..core.reconstruction import Reconstruction
from ..core.xorb import XorbLayout
from .errors import RangeNotSatisfiable


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


def with_signed_urls(plan: Reconstruction, make_url: Callable[[str, int, int], str]) -> Reconstruction:
    """The plan with each fetch range given its signed URL."""
    return plan._replace(fetches=tuple(f._replace(url=make_url(f.xorb, f.byte_start, f.byte_end)) for f in plan.fetches))


def wants_chunk_byte_sizes(query: Mapping[str, str]) -> bool:
    """`?chunk_byte_sizes=true`: the client (hf-xet's newer clients) wants each term's chunk sizes.
    Other query parameters are ignored, as before."""
    return query.get("chunk_byte_sizes", "").lower() in ("true", "1")


def with_chunk_byte_sizes(body: dict, plan: Reconstruction, layouts: Mapping[str, XorbLayout]) -> dict:
    """The reconstruction JSON with `chunk_byte_sizes` on every term: the decoded size of each
    chunk of the term's range, in order (xet-core's `XorbReconstructionTerm.chunk_byte_sizes`,
    a `Vec<u32>`), so a client can cut a later range read to whole chunks without asking again."""
    for term_json, term in zip(body["terms"], plan.terms, strict=True):
        term_json["chunk_byte_sizes"] = list(layouts[term.xorb].chunk_sizes[term.chunk_start : term.chunk_end])
    return body
