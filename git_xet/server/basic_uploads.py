"""`basic` Git LFS uploads: a stock git-lfs client PUTs a whole object; it is stored as XET.

The batch API (hub.py) answers a client that offers no `xet` transfer with a `basic` upload
action: an href here and a header carrying a CAS write token for the repo. The PUT's body is
streamed to a temp file beside the store while its sha256 is computed, so memory does not grow
with the object's size; an object whose bytes do not hash to its oid is refused (422) before
anything is stored. Then ingest.py chunks it into the store, deduplicated against everything
stored, and registers it for the repo: only then can a batch or a download see it.

A server killed mid-upload leaves its spool behind; the next server to start on the directory
removes it (remove_abandoned_spools).

Chunking holds up to two 64 MiB xorb buffers, so at most INGEST_TURNS objects are chunked at
once, whatever the number of uploads in flight; receiving (network and disk only) is not
limited beyond the server's connection limits.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import tempfile
from pathlib import Path
from typing import IO

from starlette.requests import Request
from starlette.responses import Response

from ..core import hashes
from ..platform.locks import lock_file
from ..storage.cas_store import CasStore
from ..storage.errors import QuotaExceeded
from .errors import RequestRefused, lfs_error_response
from .http_io import body_parts
from .ingest import IngestError, ingest_file
from .worker_threads import in_worker

log = logging.getLogger(__name__)

INGEST_TURNS = 2
# The largest object a basic upload may carry (it is held on the server's disk while chunked).
MAX_BASIC_OBJECT = 1 << 40
# Received bytes are written to the temp file in pieces of about this size (one worker hand-off each).
WRITE_BATCH = 4 << 20
UPLOAD_DIR = "lfs-uploads"


def upload_href(base: str, repo: str, oid: str) -> str:
    """Where the batch API sends a basic upload of `oid` to `repo` (see upload_route)."""
    return f"{base}/{repo}.git/info/lfs/basic/{oid}"


def remove_abandoned_spools(directory: Path) -> int:
    """Delete the spools of uploads whose server died mid-upload (one could be as large as the
    object); how many. A live upload holds a lock on its spool (see BasicUploads.put), so a
    server starting beside others that share the directory removes only the dead ones."""
    removed = 0
    for path in directory.glob("basic-*.part") if directory.is_dir() else ():
        try:
            with open(path, "rb") as spool:
                lock_file(spool.fileno(), wait=False)
                path.unlink()
                removed += 1
        except (BlockingIOError, FileNotFoundError):  # in use, or removed by another server
            continue
    return removed


class BasicUploads:
    def __init__(self, store: CasStore, idle_timeout: float) -> None:
        self.store = store
        self.idle_timeout = idle_timeout
        self._turns = asyncio.Semaphore(INGEST_TURNS)
        if not store.read_only and (removed := remove_abandoned_spools(store.root / UPLOAD_DIR)):
            log.info("removed %d basic-upload spools left by an interrupted server", removed)

    async def put(self, request: Request, repo: str) -> Response:
        """Store the PUT body as the object its path names, for `repo` (the caller checked that
        the request's token may write it)."""
        oid = request.path_params["oid"].lower()
        if len(oid) != 64 or not hashes.is_hash_hex(oid):
            return lfs_error_response(400, "an LFS oid is 64 hex digits (the object's sha256)")
        if "content-length" not in request.headers:
            return lfs_error_response(411, "a basic upload needs a Content-Length")
        directory = self.store.root / UPLOAD_DIR
        await in_worker(lambda: directory.mkdir(mode=0o700, exist_ok=True))
        with tempfile.NamedTemporaryFile(dir=directory, prefix="basic-", suffix=".part") as spool:
            lock_file(spool.fileno())  # ours while it exists: see remove_abandoned_spools
            try:
                digest = await self._receive(request, spool)
            except RequestRefused as exc:
                return lfs_error_response(exc.status, exc.message)
            if digest != oid:
                return lfs_error_response(422, f"the uploaded bytes do not hash to {oid}; nothing was stored (send the object itself)")
            async with self._turns:
                try:
                    await in_worker(ingest_file, self.store, repo, Path(spool.name), oid)
                except IngestError as exc:
                    return lfs_error_response(422, str(exc))
                except QuotaExceeded as exc:  # git-lfs shows an LFS-shaped answer's message, else only "Insufficient server storage"
                    return lfs_error_response(507, exc.message)
        return Response(status_code=200)

    async def _receive(self, request: Request, spool: IO[bytes]) -> str:
        """Write the body into `spool`; the sha256 hex of what arrived."""
        hasher = hashlib.sha256()
        pending = bytearray()

        def flush(data: bytes) -> None:
            hasher.update(data)
            spool.write(data)

        async for part in body_parts(request, MAX_BASIC_OBJECT, self.idle_timeout):
            pending += part
            if len(pending) >= WRITE_BATCH:
                await in_worker(flush, bytes(pending))
                pending.clear()
        await in_worker(flush, bytes(pending))
        await in_worker(spool.flush)
        return hasher.hexdigest()
