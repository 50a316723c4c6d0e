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

Anyone who can write the bucket can put anything under any key, so nothing read from it is
trusted: an existing xorb counts as stored only if its bytes verify against its hash, a dedup
match is used only once the stored xorb's footer lists those chunks, a shard's file terms are
checked against the stored footers before its names are written, and a key that does not hold
what its name says is replaced (`put`) with the verified content. Every read is bounded by what
its kind of object can be, checked before the body is read.

A xorb stored by another machine may be encoded differently from ours (compression is a
choice), so downloads plan from the stored xorb's own footer, read with one ranged GET and
checked against the xorb hash, never from a shard's description. Dedup only needs chunk
hashes and indices, which do not depend on the encoding.
"""

from __future__ import annotations

import functools
import json
import logging
import struct
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from ..core import hashes
from ..core.constants import MAX_XORB_CHUNKS
from ..core.errors import FormatError
from ..core.reconstruction import FetchRange, Reconstruction
from ..core.scattered import OutgoingBytes, contiguous
from ..core.shard import CasInfo, FileInfo, Shard, parse_shard
from ..core.xorb import MAX_XORB_BODY_BYTES, XorbFooter, XorbLayout, verify_xorb
from ..platform.files import atomic_write
from ..storage.cas_store import CasStore
from ..storage.planning import plan_reconstruction
from ..storage.s3 import ObjectTooLarge, S3Error, S3ObjectStore
from .backend import GitXetExtension, UploadStream, upload_in_order
from .errors import MissingXorbsError, NotFoundError, RangeNotSatisfiableError, RejectedError, StoreDamagedError, TransferError, from_storage_error

log = logging.getLogger("git_xet.bucket")

MARKER = "git-xet-store.json"
MARKER_CONTENT = {"format": "git-xet bucket store", "version": 1, "layout": "xorbs/ shards/ files/ lfs/ dedup/"}
FOOTER_GUESS = 256 * 1024  # one suffix GET holds the footer of a xorb of up to ~5000 chunks
# The most a reader allocates for each kind of object: anyone who can write the bucket can
# store anything under any key, so a length is checked against what the format allows first.
MAX_NAME_BYTES = 1024  # lfs/, files/, dedup/ values: one 64-hex hash
MAX_SHARD_BYTES = 64 * 1024 * 1024  # as a server takes (server/cas_api.py MAX_SHARD_BODY)
MAX_FOOTER_BYTES = 1024 + 48 * MAX_XORB_CHUNKS  # 40 bytes per chunk, plus headers
MAX_STORED_XORB_BYTES = MAX_XORB_BODY_BYTES + MAX_FOOTER_BYTES
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
        # After gc removed a xorb under this push: store every xorb again, even one the bucket
        # holds, so each is freshly written (gc keeps what is younger than its grace).
        self._rewrite_stored = False

    @property
    def cache_key(self) -> str:
        return f"s3:{self.objects.client.meta.endpoint_url}/{self.objects.location}"

    @property
    def extension(self) -> GitXetExtension:
        """The store itself: it answers our extension's questions from the bucket's names."""
        return self

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
        """Store the xorb unless the bucket holds it already: an object under its key counts only
        once its bytes verify against the xorb hash (read back, bounded by the format's size).
        An object that does not is replaced: the key is content-addressed, so the verified
        bytes are the only ones that belong there."""
        self.check()
        key = CasStore.xorb_key(xorb_hex)
        if not self._rewrite_stored and self._stored_xorb_verifies(xorb_hex):
            return False
        try:
            verified = verify_xorb(contiguous(body), hashes.hex_to_hash(xorb_hex))
        except FormatError as exc:
            raise RejectedError(f"refusing to store xorb {xorb_hex[:12]}…: {exc}") from None
        if self._rewrite_stored:  # written anew, stored or not: see __init__
            self._call(self.objects.put, key, verified.body, verified.footer().serialize())
            return True
        if self._call(self.objects.put_new, key, verified.body, verified.footer().serialize()):
            return True
        if self._stored_xorb_verifies(xorb_hex):  # a racing writer stored it first
            return False
        log.warning("%s/%s does not hold the xorb its name says (someone else wrote it): replacing it", self.objects.location, key)
        self._call(self.objects.put, key, verified.body, verified.footer().serialize())
        with self._lock:
            self._layouts.pop(xorb_hex, None)
        return True

    def _stored_xorb_verifies(self, xorb_hex: str) -> bool:
        """Whether the bucket holds this xorb: an object under its key that verifies against its hash."""
        key = CasStore.xorb_key(xorb_hex)
        try:
            stored = self._call(self.objects.read_bounded, key, MAX_STORED_XORB_BYTES)
        except (FileNotFoundError, ObjectTooLarge):
            return False
        try:
            verify_xorb(stored, hashes.hex_to_hash(xorb_hex))
        except FormatError:
            return False
        return True

    def upload_xorbs_with_shard(self, xorbs: Sequence[tuple[str, bytes | memoryview]], shard: bytes, stream_id: str | None = None) -> bool:
        return upload_in_order(self, xorbs, shard)  # a bucket has no multi-key write

    def upload_shard(self, body: bytes) -> bool:
        """Store the shard after checking its xorbs are in the bucket, check them again (a gc
        may have removed one in between: client/bucket_gc.py), then write the names that point
        at it (files/, lfs/, dedup/), each only once its target exists."""
        self.check()
        try:
            shard = parse_shard(body)
        except FormatError as exc:
            raise RejectedError(f"refusing to store an invalid shard: {exc}") from None
        named = {t.xorb_hash for f in shard.files for t in f.terms} | {c.xorb_hash for c in shard.cas}
        for xorb in named:
            if not self._call(self.objects.exists, CasStore.xorb_key(hashes.hash_to_hex(xorb))):
                raise MissingXorbsError(f"shard references xorb {hashes.hash_to_hex(xorb)[:12]}…, which is not in {self.objects.location}")
        for info in shard.files:
            if not self._terms_hold(info):
                raise MissingXorbsError(
                    f"file {hashes.hash_to_hex(info.file_hash)} references chunks that the stored xorbs in {self.objects.location} do not hold"
                )
        shard_id = _shard_id(body)
        created = self._call(self.objects.put_new, f"shards/{shard_id}.mdb", body)
        for xorb in named:  # again, AFTER the shard is stored: a gc that removed one meanwhile (bucket_gc.py)
            if not self._call(self.objects.exists, CasStore.xorb_key(hashes.hash_to_hex(xorb))):
                with self._lock:
                    self._layouts.pop(hashes.hash_to_hex(xorb), None)
                self._rewrite_stored = True
                raise MissingXorbsError(f"xorb {hashes.hash_to_hex(xorb)[:12]}… was removed from {self.objects.location} by gc during this push; upload it again")
        self._remember_shard(shard_id, body, shard)
        for info in shard.files:
            file_hex = hashes.hash_to_hex(info.file_hash)
            self._name(f"files/{file_hex}", shard_id, functools.partial(self._describes, file_hex=file_hex))
            if info.sha256 is not None:
                self._name(f"lfs/{info.sha256.hex()}", file_hex, lambda _existing: False)
        for chunk in _key_chunks(shard):
            self._call(self.objects.put_new, f"dedup/{hashes.hash_to_hex(chunk)}", shard_id.encode())  # checked when used: query_dedup
        return created

    def _name(self, key: str, value: str, also_right: Callable[[str], bool]) -> None:
        """Point `key` at `value`, unless it names `value` already or what it names is right too
        (`also_right`). A name someone else wrote that points elsewhere is replaced: a file's
        sha256 determines its XET hash, so any other lfs/ value is a lie."""
        if self._call(self.objects.put_new, key, value.encode()):
            return
        existing = self._read_name(key)
        if existing == value or (existing is not None and also_right(existing)):
            return
        log.warning("%s/%s named something else (someone else wrote it): replacing it", self.objects.location, key)
        self._call(self.objects.put, key, value.encode())

    def _read_name(self, key: str) -> str | None:
        """The hash a name entry (lfs/, files/, dedup/) holds, or None: absent, too long or not a hash."""
        try:
            value = self._call(self.objects.read_bounded, key, MAX_NAME_BYTES).decode(errors="replace").strip()
        except (FileNotFoundError, ObjectTooLarge):
            return None
        return value if hashes.is_hash_hex(value) else None

    def _describes(self, shard_id: str, file_hex: str) -> bool:
        """Whether the stored shard `shard_id` describes this file with chunks its xorbs hold."""
        try:
            shard = self._shard(shard_id)
        except StoreDamagedError:
            return False
        wanted = hashes.hex_to_hash(file_hex)
        return any(info.file_hash == wanted and self._terms_hold(info) for info in shard.files)

    def _terms_hold(self, info: FileInfo) -> bool:
        """Whether every term's chunk range is in its stored xorb (footer read back and checked
        against the xorb hash) and hashes to the term's verification hash, and the chunks make
        up the file hash: the layout a reader will rely on."""
        chunks: list[bytes] = []
        sizes: list[int] = []
        for i, term in enumerate(info.terms):
            try:
                layout = self._layout(hashes.hash_to_hex(term.xorb_hash))
            except StoreDamagedError:
                return False
            if not term.chunk_start < term.chunk_end <= len(layout.chunk_hashes):
                return False
            chunk_range = layout.chunk_hashes[term.chunk_start : term.chunk_end]
            if info.verification and (i >= len(info.verification) or hashes.verification_hash(chunk_range) != info.verification[i]):
                return False
            chunks.extend(chunk_range)
            sizes.extend(layout.chunk_sizes[term.chunk_start : term.chunk_end])
        return hashes.file_hash(chunks, sizes) == info.file_hash

    def query_dedup(self, chunk_hash: bytes) -> Shard | None:
        try:
            shard_id = self._call(self.objects.read_bounded, f"dedup/{hashes.hash_to_hex(chunk_hash)}", MAX_NAME_BYTES).decode(errors="replace")
        except (FileNotFoundError, ObjectTooLarge):
            return None
        try:
            shard = self._shard(shard_id.strip())
        except StoreDamagedError as exc:
            log.warning("ignoring a dedup entry: %s", exc)
            return None
        held = tuple(block for block in shard.cas if self._holds(block))
        return Shard(cas=held) if held else None

    def _holds(self, block: CasInfo) -> bool:
        """Whether the stored xorb holds the chunks a shard's CAS block says (its footer read back
        and checked against its hash): what a dedup match from a shard someone else wrote relies on."""
        xorb_hex = hashes.hash_to_hex(block.xorb_hash)
        try:
            layout = self._layout(xorb_hex)
        except StoreDamagedError:
            return False
        if [c.chunk_hash for c in block.chunks] != list(layout.chunk_hashes):
            log.warning("ignoring a dedup shard in %s: its chunks of xorb %s are not the stored xorb's", self.objects.location, xorb_hex)
            return False
        return True

    # ------------------------------------------------------------------ downloads

    def file_for_sha256(self, oid: str, size: int | None = None) -> str | None:
        """The XET file hash of the LFS object `oid`, or None when the bucket does not hold it."""
        self.check()
        try:
            value = self._call(self.objects.read_bounded, f"lfs/{oid.lower()}", MAX_NAME_BYTES).decode(errors="replace").strip()
        except (FileNotFoundError, ObjectTooLarge):
            return None
        return value if hashes.is_hash_hex(value) else None

    def lfs_object(self, oid: str, size: int) -> None:
        """Not offered: the bucket holds no whole objects, only xorbs (read the XET way)."""
        return None

    def _file(self, file_hex: str) -> FileInfo:
        try:
            shard_id = self._call(self.objects.read_bounded, f"files/{file_hex.lower()}", MAX_NAME_BYTES).decode(errors="replace").strip()
        except FileNotFoundError:
            raise NotFoundError(f"file {file_hex} is not in {self.objects.location}") from None
        except ObjectTooLarge:
            raise StoreDamagedError(f"{self.objects.location} is damaged: files/{file_hex} is not a shard id") from None
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
            from ..platform.private_paths import tighten_entries
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
                body = self._call(self.objects.read_bounded, f"shards/{shard_id}.mdb", MAX_SHARD_BYTES)
            except FileNotFoundError:
                raise StoreDamagedError(f"{self.objects.location} is damaged: shard {shard_id} is missing") from None
            except ObjectTooLarge:
                raise StoreDamagedError(f"{self.objects.location} is damaged: shard {shard_id} is larger than a shard can be") from None
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
        if info_len + 4 > min(size, MAX_FOOTER_BYTES):
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

