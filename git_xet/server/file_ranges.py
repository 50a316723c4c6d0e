"""Bytes [start, end] of a stored file, read from the chunks that hold them only.

The bridge serves `basic` downloads; git-lfs resumes an interrupted one with a Range header,
and HTTP file systems read slices. Reading the whole file to skip to a late offset would cost
as much as the download that was interrupted, so the range is planned as reconstructions are
(storage/planning.py: only the chunks that cover it) and then streamed chunk-checked like a
whole file (CasStore.iter_file_bytes).
"""

from __future__ import annotations

from collections.abc import Iterator

from starlette.responses import Response

from ..core.hashes import hex_to_hash
from ..core.shard import FileTerm
from ..storage.cas_store import CasStore, StoredFile
from ..storage.planning import plan_reconstruction
from .errors import RangeNotSatisfiable
from .http_io import PacedStreamingResponse
from .http_ranges import parse_range_header


def ranged_response(store: CasStore, stored: StoredFile, range_header: str | None, idle_timeout: float, whole: Response) -> Response:
    """The answer to a GET of `stored` with `range_header`: 206 with Content-Range for a
    satisfiable range, 416 for one that starts past the end (as the reconstruction routes
    answer), else `whole` (no Range, or one this server does not serve, e.g. several ranges:
    RFC 9110 lets a server ignore a Range it does not serve)."""
    if range_header is None:
        return whole
    try:
        start, end = parse_range_header(range_header, stored.size)
    except RangeNotSatisfiable:
        return Response(status_code=416, headers={"Content-Range": f"bytes */{stored.size}"})
    except ValueError:
        return whole
    return PacedStreamingResponse(
        file_range(store, stored, start, end),
        idle_timeout,
        status_code=206,
        media_type="application/octet-stream",
        headers={"Content-Length": str(end - start + 1), "Content-Range": f"bytes {start}-{end}/{stored.size}", "Accept-Ranges": "bytes"},
    )


def file_range(store: CasStore, stored: StoredFile, start: int, end: int) -> Iterator[bytes | memoryview]:
    """Bytes [start, end] (inclusive, within the file) of `stored`, in pieces. Planning reads
    the index: iterate it in a worker thread."""
    plan = plan_reconstruction(stored.terms, store.layouts_for(stored), (start, end))
    terms = tuple(FileTerm(hex_to_hash(t.xorb), t.length, t.chunk_start, t.chunk_end) for t in plan.terms)
    covering = StoredFile(stored.file_hex, sum(t.length for t in plan.terms), None, terms)
    skip, left = plan.offset_into_first_range, end - start + 1
    for piece in store.iter_file_bytes(covering):
        if skip >= len(piece):
            skip -= len(piece)
            continue
        view = memoryview(piece)[skip : skip + left]
        skip = 0
        left -= len(view)
        yield view
        if left == 0:
            return
