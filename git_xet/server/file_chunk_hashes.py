"""`GET /v2/file-chunk-hashes/{file}` with `X-Range-Dirty`: what a client needs to upload a
range edit of a stored file without re-reading or re-chunking the rest of it.

huggingface.js (2.17.5, `commit` with an "edit" operation) and xet-core (`range_upload.rs`)
ask this before editing or appending to a file; without it they re-chunk the whole new file.
The answer (core/chunk_windows.py) holds windows to re-chunk, hash summaries of the gaps and
verification hashes of the untouched terms, never a per-chunk hash list, so its size grows
with the number of edits, not with the file.

Read access as every CAS read: a read token of the repo that registered the file (a file of
another repo is a 404, the same answer as a file that does not exist). Bounded: the walk holds
the file's chunk list (as a reconstruction does), so files of more than MAX_FILE_CHUNKS chunks
are refused with 413, after which both clients upload the file whole.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..core.chunk_windows import file_chunk_hashes, parse_dirty_ranges
from ..core.hashes import hash_to_hex, is_hash_hex
from ..storage.cas_store import CasStore
from .auth import Claims
from .errors import RequestRefused
from .worker_threads import in_worker

if TYPE_CHECKING:
    from .state import ServerState

X_RANGE_DIRTY = "X-Range-Dirty"
# 2**20 chunks: a file of about 64 GiB. The walk keeps a (hash, size) pair per chunk.
MAX_FILE_CHUNKS = 1 << 20
MAX_DIRTY_RANGES = 1024


def answer(
    store: CasStore,
    repo: str,
    file_hex: str,
    dirty_header: str | None,
    max_chunks: int = MAX_FILE_CHUNKS,
) -> dict:
    """The response body for `file_hex` in `repo` (blocking: run in a worker thread)."""
    stored = store.get_file(file_hex) if store.repo_has_file(repo, file_hex) else None
    if stored is None:  # the same answer whether the file is elsewhere or nowhere
        raise RequestRefused(404, f"file {file_hex} not found")
    n_chunks = sum(term.chunk_end - term.chunk_start for term in stored.terms)
    if n_chunks > max_chunks:
        raise RequestRefused(
            413,
            f"file {file_hex} has {n_chunks} chunks; range edits are served for files of at most {max_chunks}: upload the edited file whole",
        )
    try:
        dirty = parse_dirty_ranges(dirty_header, stored.size, MAX_DIRTY_RANGES)
    except ValueError as exc:
        raise RequestRefused(400, str(exc)) from None
    layouts = store.layouts_for(stored)

    def chunks() -> Iterator[tuple[bytes, int]]:
        for term in stored.terms:
            layout = layouts[hash_to_hex(term.xorb_hash)]
            for index in range(term.chunk_start, term.chunk_end):
                yield layout.chunk_hashes[index], layout.chunk_sizes[index]

    try:
        return file_chunk_hashes(stored.terms, chunks(), stored.size, dirty)
    except ValueError as exc:
        raise RequestRefused(400, str(exc)) from None


class FileChunkHashes:
    """The route's handler, bound to the server's ServerState (its store and token checks)."""

    def __init__(self, app: ServerState) -> None:
        self.app = app

    async def get(self, request: Request) -> Response:
        claims: Claims = await self.app.authorize(request, "read")
        file_hex = request.path_params["file"]
        if not is_hash_hex(file_hex):
            raise RequestRefused(400, "invalid file hash")
        body = await in_worker(
            answer,
            self.app.store,
            claims.repo,
            file_hex.lower(),
            request.headers.get(X_RANGE_DIRTY),
        )
        return JSONResponse(body, headers={"Cache-Control": "private, no-store"})


def file_chunk_hashes_routes(app: ServerState) -> list[Route]:
    return [Route("/v2/file-chunk-hashes/{file}", FileChunkHashes(app).get)]
