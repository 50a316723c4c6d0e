"""The serverless bucket store: the agent keeps XET objects straight in an S3-compatible bucket,
with chunk-level dedup, and no server.

Bucket layout under `s3://BUCKET[/PREFIX]` (format 1; stable: later versions only add keys):

    git-xet-store.json        marker written by `git xet install --standalone s3://...`
    xorbs/{h[:2]}/{h}         a xorb: chunk records + footer (the footer gives its layout)
    shards/{id}.mdb           an upload shard (files + CAS blocks); id = its keyed BLAKE3 hash
    files/{file hash}         text: the id of a shard that describes this file
    lfs/{sha256}              text: the XET file hash of the file with this sha256 (the LFS oid)
    dedup/{chunk hash}        text: the id of a shard whose CAS blocks hold this key chunk

Every key is content-addressed, written once with `If-None-Match: *`, and never changed, so any
number of machines can push at once: two writers of one key write equivalent content and the
first wins. A push writes xorbs, then its shard, then the files/ and lfs/ entries that point at
it, then dedup/ entries: a reader never finds a name whose target is missing or half-written
(S3 PUTs are atomic), whenever a pusher dies.

A xorb stored by another machine may be encoded differently from ours (compression is a
choice), so downloads plan from the stored xorb's own footer, read with one ranged GET and
checked against the xorb hash, never from a shard's description. Dedup only needs chunk
hashes and indices, which do not depend on the encoding.
"""

from __future__ import annotations

import json
import logging
import struct
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from ..core import hashes
from ..core.errors import FormatError
from ..core.reconstruction import FetchRange, Reconstruction
from ..core.scattered import OutgoingBytes, contiguous
from ..core.shard import FileInfo, Shard, parse_shard
from ..core.xorb import XorbFooter, XorbLayout, verify_xorb
from ..fsutil import atomic_write
from ..storage.cas_store import CasStore
from ..storage.planning import plan_reconstruction
from ..storage.s3 import S3Error, S3ObjectStore
from .backend import UploadStream, upload_in_order
from .errors import MissingXorbsError, NotFoundError, RangeNotSatisfiableError, RejectedError, StoreDamagedError, TransferError, from_storage_error

log = logging.getLogger("git_xet.bucket")

MARKER = "git-xet-store.json"
MARKER_CONTENT = {"format": "git-xet bucket store", "version": 1, "layout": "xorbs/ shards/ files/ lfs/ dedup/"}
FOOTER_GUESS = 256 * 1024  # one suffix GET holds the footer of a xorb of up to ~5000 chunks
T = TypeVar("T")


class BucketStoreError(TransferError):
    """The bucket cannot be used as it is; the message says what to do."""


def _shard_id(body: bytes) -> str:
    return hashes.hash_to_hex(hashes.keyed_hash(bytes(32), body))


def open_bucket_objects(location: str) -> S3ObjectStore:
    """The bucket's ObjectStore, configured by the AWS SDK's environment."""
    from ..storage.s3 import parse_s3_url

    return S3ObjectStore(parse_s3_url(location))


def create_bucket_store(objects: S3ObjectStore) -> bool:
    """Make the bucket prefix a store (True) or accept the existing one (False); the bucket must
    exist and the credentials must be able to write it."""
    try:
        created = objects.put_new(MARKER, json.dumps(MARKER_CONTENT, indent=1).encode() + b"\n")
    except S3Error as exc:
        raise BucketStoreError(exc.message) from None
    if not created:
        _check_marker(objects)
    return created


def _check_marker(objects: S3ObjectStore) -> None:
    try:
        marker = json.loads(objects.read(MARKER))
    except FileNotFoundError:
        raise BucketStoreError(
            f"{objects.location} is not a git-xet store; create it with `git xet install --standalone {objects.location}`"
        ) from None
    except S3Error as exc:
        raise BucketStoreError(exc.message) from None
    except ValueError:
        raise BucketStoreError(f"{objects.location}/{MARKER} is not a git-xet store marker; is the prefix right?") from None
    if not isinstance(marker, dict) or marker.get("format") != MARKER_CONTENT["format"] or marker.get("version") != 1:
        raise BucketStoreError(f"{objects.location}/{MARKER} is not a format-1 git-xet bucket store; upgrade git-xet")


class BucketBackend:
    """XetBackend on a bucket store (see the module docstring for the layout)."""

    def __init__(self, objects: S3ObjectStore, cache_root: Path | None = None) -> None:
        self.objects = objects
        self._cache_root = cache_root
        self._cache_private = False
        self._shard_dir = cache_root / "bucket-shards" if cache_root else None
        self._shards: dict[str, Shard] = {}
        self._layouts: dict[str, XorbLayout] = {}
        self._lock = threading.Lock()
        self._checked = False

    @property
    def cache_key(self) -> str:
        return f"s3:{self.objects.client.meta.endpoint_url}/{self.objects.location}"

    @property
    def checks_sha256_claims(self) -> bool:
        return False  # nothing runs beside the bucket to check a claim

    def close(self) -> None:
        """Close the S3 client's connection pool."""
        self.objects.client.close()

    def check(self) -> None:
        """The bucket is reachable and is a store (once per backend)."""
        if not self._checked:
            _check_marker(self.objects)
            self._checked = True

    def _call(self, what: Callable[..., T], *args: object) -> T:
        """Run an object-store call; S3 failures become transfer errors with their message
        (retryable when the store itself failed or could not be reached)."""
        try:
            return what(*args)
        except S3Error as exc:
            raise from_storage_error(exc, str(self.objects.location)) from None

    # ------------------------------------------------------------------ uploads

    # An UploadStream is ignored: a bucket takes a shard's sha256 claim as given (nothing to hash).
    def upload_xorb(self, xorb_hex: str, body: OutgoingBytes, stream: UploadStream | None = None) -> bool:
        self.check()
        key = CasStore.xorb_key(xorb_hex)
        if self._call(self.objects.exists, key):
            return False
        try:
            verified = verify_xorb(contiguous(body), hashes.hex_to_hash(xorb_hex))
        except FormatError as exc:
            raise RejectedError(f"refusing to store xorb {xorb_hex[:12]}…: {exc}") from None
        return self._call(self.objects.put_new, key, verified.body, verified.footer().serialize())

    def upload_xorbs_with_shard(self, xorbs: Sequence[tuple[str, bytes | memoryview]], shard: bytes, stream_id: str | None = None) -> bool:
        return upload_in_order(self, xorbs, shard, stream_id)

    def upload_shard(self, body: bytes, stream_id: str | None = None) -> bool:
        """Store the shard after checking its xorbs are in the bucket, then the names that
        point at it (files/, lfs/, dedup/), each only once its target exists."""
        self.check()
        try:
            shard = parse_shard(body)
        except FormatError as exc:
            raise RejectedError(f"refusing to store an invalid shard: {exc}") from None
        named = {t.xorb_hash for f in shard.files for t in f.terms} | {c.xorb_hash for c in shard.cas}
        for xorb in named:
            if not self._call(self.objects.exists, CasStore.xorb_key(hashes.hash_to_hex(xorb))):
                raise MissingXorbsError(f"shard references xorb {hashes.hash_to_hex(xorb)[:12]}…, which is not in {self.objects.location}")
        shard_id = _shard_id(body)
        created = self._call(self.objects.put_new, f"shards/{shard_id}.mdb", body)
        self._remember_shard(shard_id, body, shard)
        for info in shard.files:
            file_hex = hashes.hash_to_hex(info.file_hash)
            self._call(self.objects.put_new, f"files/{file_hex}", shard_id.encode())
            if info.sha256 is not None:
                self._call(self.objects.put_new, f"lfs/{info.sha256.hex()}", file_hex.encode())
        for chunk in _key_chunks(shard):
            self._call(self.objects.put_new, f"dedup/{hashes.hash_to_hex(chunk)}", shard_id.encode())
        return created

    def query_dedup(self, chunk_hash: bytes) -> Shard | None:
        try:
            shard_id = self._call(self.objects.read, f"dedup/{hashes.hash_to_hex(chunk_hash)}").decode().strip()
        except FileNotFoundError:
            return None
        shard = self._shard(shard_id)
        return Shard(cas=shard.cas) if shard.cas else None

    # ------------------------------------------------------------------ downloads

    def file_for_sha256(self, oid: str, size: int | None = None) -> str | None:
        """The XET file hash of the LFS object `oid`, or None when the bucket does not hold it."""
        self.check()
        try:
            value = self._call(self.objects.read, f"lfs/{oid.lower()}").decode().strip()
        except FileNotFoundError:
            return None
        return value if hashes.is_hash_hex(value) else None

    def _file(self, file_hex: str) -> FileInfo:
        try:
            shard_id = self._call(self.objects.read, f"files/{file_hex.lower()}").decode().strip()
        except FileNotFoundError:
            raise NotFoundError(f"file {file_hex} is not in {self.objects.location}") from None
        wanted = hashes.hex_to_hash(file_hex)
        for info in self._shard(shard_id).files:
            if info.file_hash == wanted:
                return info
        raise StoreDamagedError(f"{self.objects.location} is damaged: shard {shard_id} does not describe file {file_hex}")

    def reconstruction(self, file_hex: str, byte_range: tuple[int, int] | None = None) -> Reconstruction:
        info = self._file(file_hex)
        size = info.size
        start, end = byte_range if byte_range is not None else (0, size - 1)
        if start >= size and size:
            raise RangeNotSatisfiableError(f"byte {start} is past the end of file {file_hex} ({size} bytes)")
        layouts = {}
        for term in info.terms:
            name = hashes.hash_to_hex(term.xorb_hash)
            if name not in layouts:
                layouts[name] = self._layout(name)
        return plan_reconstruction(info.terms, layouts, (start, min(end, size - 1)))

    def fetch(self, fetch: FetchRange) -> bytes:
        try:
            return self._call(self.objects.read_range, CasStore.xorb_key(fetch.xorb), fetch.byte_start, fetch.byte_end)
        except FileNotFoundError:
            raise StoreDamagedError(f"{self.objects.location} is damaged: xorb {fetch.xorb[:12]}… is missing") from None

    # ------------------------------------------------------------------ shards and layouts

    def _remember_shard(self, shard_id: str, body: bytes, shard: Shard) -> None:
        with self._lock:
            self._shards[shard_id] = shard
        if self._cache_root is not None and self._shard_dir is not None:
            from ..private_paths import tighten_entries
            from .shard_cache import cache_dir

            try:
                if not self._cache_private:  # private: shards name content (once: it may hold many)
                    tighten_entries(cache_dir(self._cache_root, self._shard_dir.name))
                    self._cache_private = True
                atomic_write(self._shard_dir / f"{shard_id}.mdb", body, mode=0o600)
            except OSError as exc:
                log.info("could not cache shard %s: %s", shard_id, exc)

    def _shard(self, shard_id: str) -> Shard:
        """A shard by id: from memory, the local cache, or the bucket; checked against its id."""
        if not hashes.is_hash_hex(shard_id):
            raise StoreDamagedError(f"{self.objects.location} is damaged: {shard_id[:80]!r} is not a shard id")
        with self._lock:
            found = self._shards.get(shard_id)
        if found is not None:
            return found
        body = None
        cached = self._shard_dir / f"{shard_id}.mdb" if self._shard_dir else None
        if cached is not None and cached.is_file():
            body = cached.read_bytes()
        if body is None or _shard_id(body) != shard_id:
            try:
                body = self._call(self.objects.read, f"shards/{shard_id}.mdb")
            except FileNotFoundError:
                raise StoreDamagedError(f"{self.objects.location} is damaged: shard {shard_id} is missing") from None
            if _shard_id(body) != shard_id:
                raise StoreDamagedError(f"{self.objects.location} is damaged: shard {shard_id} does not match its name")
        try:
            shard = parse_shard(body)
        except FormatError as exc:
            raise StoreDamagedError(f"{self.objects.location} is damaged: shard {shard_id}: {exc}") from None
        self._remember_shard(shard_id, body, shard)
        return shard

    def _layout(self, xorb_hex: str) -> XorbLayout:
        """The stored xorb's layout, from its footer (one or two ranged GETs), checked against its hash."""
        with self._lock:
            found = self._layouts.get(xorb_hex)
        if found is not None:
            return found
        key = CasStore.xorb_key(xorb_hex)
        try:
            tail, size = self._call(self.objects.read_tail, key, FOOTER_GUESS)
        except FileNotFoundError:
            raise StoreDamagedError(f"{self.objects.location} is damaged: xorb {xorb_hex[:12]}… is missing") from None
        damaged = f"{self.objects.location} is damaged: xorb {xorb_hex} has no valid footer"
        if len(tail) < 4:
            raise StoreDamagedError(damaged)
        (info_len,) = struct.unpack_from("<I", tail, len(tail) - 4)
        if info_len + 4 > size:
            raise StoreDamagedError(damaged)
        if info_len + 4 > len(tail):
            tail = self._call(self.objects.read_range, key, size - info_len - 4, size - 1)
        try:
            footer = XorbFooter.parse(tail[len(tail) - 4 - info_len : len(tail) - 4])
        except FormatError:
            raise StoreDamagedError(damaged) from None
        sizes = tuple(b - a for a, b in zip((0, *footer.unpacked_ends), footer.unpacked_ends))
        if footer.xorb_hash != hashes.hex_to_hash(xorb_hex) or hashes.xorb_hash(footer.chunk_hashes, sizes) != footer.xorb_hash:
            raise StoreDamagedError(damaged)
        layout = XorbLayout(footer.xorb_hash, footer.chunk_hashes, footer.byte_ends, sizes)
        with self._lock:
            self._layouts[xorb_hex] = layout
        return layout


def _key_chunks(shard: Shard) -> set[bytes]:
    """Chunks that get a dedup/ entry: each file's first chunk and the globally eligible ones
    (~1 in 1000), as the Hub indexes them; nothing grows one-to-one with chunks."""
    cas = {info.xorb_hash: info for info in shard.cas}
    out: set[bytes] = set()
    for info in shard.files:
        if info.terms:
            first = info.terms[0]
            block = cas.get(first.xorb_hash)
            if block is not None and first.chunk_start < len(block.chunks):
                out.add(block.chunks[first.chunk_start].chunk_hash)
    for block in shard.cas:
        out.update(c.chunk_hash for c in block.chunks if hashes.is_global_dedup_eligible(c.chunk_hash))
    return out

