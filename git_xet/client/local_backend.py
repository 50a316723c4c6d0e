"""The serverless local store: the server's own storage (objects + SQLite index) in a
directory, used in-process. Same on-disk format as `git xet serve --data`, so a local store
can later be served as is."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..core.reconstruction import FetchRange, Reconstruction
from ..core.scattered import OutgoingBytes, contiguous
from ..core.shard import Shard
from ..storage.cas_store import CasStore
from .backend import GitXetExtension, UploadStream
from ..storage.errors import StorageError
from ..storage.planning import plan_reconstruction
from .errors import NotFoundError, RangeNotSatisfiableError, StoreDamagedError, TransferError, from_storage_error


class LocalStoreBackend:
    def __init__(self, root: Path) -> None:
        self.root = Path(root).resolve()
        try:
            self.store = CasStore(self.root)
        except OSError as exc:
            raise TransferError(f"cannot open the local XET store at {self.root}: {exc.strerror or exc}") from None

    @property
    def cache_key(self) -> str:
        return f"local:{self.root}"

    @property
    def extension(self) -> GitXetExtension:
        """The store itself: it answers our extension's questions from its own index."""
        return self

    @property
    def checks_sha256_claims(self) -> bool:
        return False  # the writer owns the store: register_shard takes its claim as given

    def close(self) -> None:
        """Close the store's index (its database connections)."""
        self.store.close()

    # An UploadStream is ignored: this store takes a shard's sha256 claim as given (nothing to hash).
    def upload_xorb(self, xorb_hex: str, body: OutgoingBytes, stream: UploadStream | None = None) -> bool:
        try:
            return self.store.put_xorb(xorb_hex, contiguous(body))  # verified in one buffer
        except StorageError as exc:
            raise from_storage_error(exc, str(self.root)) from None

    def upload_shard(self, body: bytes) -> bool:
        try:
            return self.store.register_shard(body)
        except StorageError as exc:
            raise from_storage_error(exc, str(self.root)) from None

    def upload_xorbs_with_shard(self, xorbs: Sequence[tuple[str, bytes | memoryview]], shard: bytes, stream_id: str | None = None) -> bool:
        """One index transaction for a small file's xorb and its shard (CasStore.put_xorbs_with_shard)."""
        try:
            return self.store.put_xorbs_with_shard(xorbs, shard)
        except StorageError as exc:
            raise from_storage_error(exc, str(self.root)) from None

    def query_dedup(self, chunk_hash: bytes) -> Shard | None:
        return self.store.dedup_shard(chunk_hash)

    def file_for_sha256(self, oid: str, size: int | None = None) -> str | None:
        try:
            found = self.store.file_by_sha256(oid)
        except StorageError as exc:
            raise from_storage_error(exc, str(self.root)) from None
        return found.file_hex if found else None

    def lfs_object(self, oid: str, size: int) -> None:
        """Not offered: a read from a directory costs no round trips, so the XET way (with each
        chunk verified) is as quick."""
        return None

    def reconstruction(self, file_hex: str, byte_range: tuple[int, int] | None = None) -> Reconstruction:
        try:
            stored = self.store.get_file(file_hex)
        except StorageError as exc:
            raise from_storage_error(exc, str(self.root)) from None
        if stored is None:
            raise NotFoundError(f"file {file_hex} is not in the local store {self.root}")
        if byte_range is None:
            byte_range = (0, stored.size - 1)
        start, end = byte_range
        if start >= stored.size and stored.size:
            raise RangeNotSatisfiableError(f"byte {start} is past the end of file {file_hex} ({stored.size} bytes)")
        try:
            layouts = self.store.layouts_for(stored)
        except StorageError as exc:
            raise from_storage_error(exc, str(self.root)) from None
        return plan_reconstruction(stored.terms, layouts, (start, min(end, stored.size - 1)))

    def fetch(self, fetch: FetchRange) -> bytes:
        try:
            return self.store.read_xorb_range(fetch.xorb, fetch.byte_start, fetch.byte_end)
        except FileNotFoundError:
            raise StoreDamagedError(f"the store {self.root} is damaged: xorb {fetch.xorb[:12]}… is missing") from None
        except OSError as exc:
            raise TransferError(f"cannot read xorb {fetch.xorb[:12]}… from {self.root}: {exc.strerror or exc}") from None
