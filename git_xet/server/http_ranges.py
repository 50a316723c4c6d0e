"""The HTTP Range header, as the reconstruction routes and `basic` downloads (file_ranges) read it."""

from __future__ import annotations

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

