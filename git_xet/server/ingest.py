"""Store a whole file the server received (a `basic` Git LFS upload) as XET, in-process.

The file is chunked, deduplicated and packed by the same Uploader our agent uses
(pipelines/upload.py), talking to this server's own store through StoreBackend instead of
HTTP: its new chunks become xorbs, chunks the store already holds (found by the store's
global dedup, whoever pushed them) become references, and one shard registers the file for the
repo. So a later push by an agent dedups against a stock client's upload, and the other way
round. The caller has checked the file's sha256 against its oid; the Uploader hashes it again
while chunking, and the file is registered only if both agree.

Memory is bounded whatever the file's size: the file is mapped and read once, front to back,
with pages behind the reader dropped, and at most two 64 MiB xorb buffers are filled at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..client.backend import GitXetExtension, UploadStream
from ..client.errors import NotFoundError
from ..core.errors import XetError
from ..core.reconstruction import FetchRange, Reconstruction
from ..core.scattered import OutgoingBytes, contiguous
from ..core.shard import Shard
from ..pipelines.upload import Uploader
from ..storage.cas_store import CasStore


class IngestError(XetError):
    """The received file is not the object it claims to be; nothing was registered."""


class StoreBackend:
    """XetBackend over this server's CasStore, writing for one repo (upload side only)."""

    def __init__(self, store: CasStore, repo: str) -> None:
        self.store = store
        self.repo = repo

    @property
    def cache_key(self) -> str:
        return f"server:{self.repo}"

    @property
    def extension(self) -> GitXetExtension:
        """The backend itself: the store's own one-transaction bundle (put_xorbs_with_shard)."""
        return self

    @property
    def checks_sha256_claims(self) -> bool:
        return False  # the Uploader computes the sha256 it claims; ingest_file compares it to the oid

    def close(self) -> None:
        """Nothing to release: the store is the server's."""

    def upload_xorb(self, xorb_hex: str, body: OutgoingBytes, stream: UploadStream | None = None) -> bool:
        return self.store.put_xorb(xorb_hex, contiguous(body))  # verified like any uploaded xorb

    def upload_shard(self, body: bytes) -> bool:
        return self.store.register_shard(body, self.repo)

    def upload_xorbs_with_shard(self, xorbs: Sequence[tuple[str, bytes | memoryview]], shard: bytes, stream_id: str | None = None) -> bool:
        return self.store.put_xorbs_with_shard(xorbs, shard, self.repo)

    def query_dedup(self, chunk_hash: bytes) -> Shard | None:
        return self.store.dedup_shard(chunk_hash)

    def file_for_sha256(self, oid: str, size: int) -> str | None:
        found = self.store.file_by_sha256(oid, self.repo)
        return found.file_hex if found is not None else None

    def lfs_object(self, oid: str, size: int) -> None:
        return None  # upload side only

    def reconstruction(self, file_hex: str, byte_range: tuple[int, int] | None = None) -> Reconstruction:
        raise NotFoundError("the server's ingest backend only uploads")

    def fetch(self, fetch: FetchRange) -> bytes:
        raise NotFoundError("the server's ingest backend only uploads")


def ingest_file(store: CasStore, repo: str, path: Path, oid: str) -> str:
    """Store the file at `path`, whose sha256 the caller found to be `oid`, as XET in `repo`;
    its XET file hash. Blocking: call in a worker thread."""
    with Uploader(StoreBackend(store, repo), cache=None, max_parallel_xorbs=1) as uploader:
        added = uploader.add_file(path)
        if added.sha256_hex != oid:  # the file changed under us: register nothing
            raise IngestError(f"the received object does not hash to {oid} any more; upload it again")
        uploader.finalize()
    return added.file_hex
