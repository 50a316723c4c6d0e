"""The interface the upload and download pipelines use to reach a XET store: the XET operations
(XetBackend), plus, where the store offers it, our extension (GitXetExtension)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol

from ..core.reconstruction import FetchRange, Reconstruction
from ..core.scattered import OutgoingBytes
from ..core.shard import Shard


class UploadStream(NamedTuple):
    """A xorb's place among those an Uploader sends before its next shard: the stream's id
    (the shard names it too) and the xorb's number in it. A server that hashes a file's
    sha256 as its xorbs arrive uses it (server/upload_streams.py); other stores ignore it."""

    id: str
    seq: int


class GitXetExtension(Protocol):
    """What a store offers beyond the XET API (core/extension.py): a `git xet serve` the
    capabilities it answers with, an in-process store (a directory, a bucket, the server's
    ingest) its own direct equivalents. A store without it (the Hub's CAS, a server that does
    not list the extension) has XetBackend.extension None, and is used through XET alone."""

    @property
    def checks_sha256_claims(self) -> bool:
        """Whether the store computes a file's sha256 from its bytes before it maps that oid to
        the file (a `git xet serve` does, and refuses a wrong claim). Then an uploader may send
        the oid git-lfs gave it without hashing the file again; a local directory, a bucket and
        the Hub take a shard's claim as given, so for them the uploader computes it."""

    def upload_xorb(self, xorb_hex: str, body: OutgoingBytes, stream: UploadStream) -> bool:
        """XetBackend.upload_xorb, naming the upload stream the xorb belongs to."""

    def upload_xorbs_with_shard(self, xorbs: Sequence[tuple[str, bytes | memoryview]], shard: bytes, stream_id: str) -> bool:
        """Store these (small) xorbs, then register the shard that closes upload stream
        `stream_id`: upload_xorb for each, then upload_shard, in one exchange where the store
        allows (upload_in_order otherwise); the shard's result."""

    def file_for_sha256(self, oid: str, size: int) -> str | None:
        """The XET file hash of the Git LFS object `oid` (its sha256 hex, `size` bytes) in this
        store, or None when the store does not hold it: how standalone mode finds an object
        git-lfs names only by oid, and skips uploading one already stored."""

    def lfs_object(self, oid: str, size: int) -> bytes | None:
        """The whole LFS object `oid` of `size` bytes in one request, or None where the store
        does not offer that (or has no such object): the caller then asks the XET way, which
        gives the definitive answer. The caller checks the sha256."""


class XetBackend(Protocol):
    @property
    def cache_key(self) -> str:
        """Identifies the store, so caches (shards, resume state) are kept per store."""

    @property
    def extension(self) -> GitXetExtension | None:
        """Our extension where this store offers it, else None (see GitXetExtension)."""

    def close(self) -> None:
        """Release what the backend holds (its connections, or its index's)."""

    def upload_xorb(self, xorb_hex: str, body: OutgoingBytes) -> bool:
        """Store a footerless xorb; True if it was new. Idempotent. A scattered body
        (core/scattered.py) is sent as it lies where the store allows."""

    def upload_shard(self, body: bytes) -> bool:
        """Register the files of an upload-form shard; True if new. All xorbs must be stored."""

    def query_dedup(self, chunk_hash: bytes) -> Shard | None:
        """Global dedup: a shard of xorbs holding this chunk (maybe HMAC-keyed), or None."""

    def reconstruction(self, file_hex: str, byte_range: tuple[int, int] | None = None) -> Reconstruction:
        """How to rebuild the file or inclusive byte range; NotFoundError / RangeNotSatisfiableError."""

    def fetch(self, fetch: FetchRange) -> bytes | bytearray | memoryview:
        """Exactly the bytes [byte_start, byte_end] of the xorb; UrlExpiredError if refused.

        A memoryview may be a pooled window (memory.xorb_range_windows) that the caller gives
        back once nothing looks into it any more."""


def upload_in_order(backend: XetBackend, xorbs: Sequence[tuple[str, bytes | memoryview]], shard: bytes) -> bool:
    """GitXetExtension.upload_xorbs_with_shard as XET calls: every xorb, then the shard."""
    for xorb_hex, body in xorbs:
        backend.upload_xorb(xorb_hex, body)
    return backend.upload_shard(shard)
