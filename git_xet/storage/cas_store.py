"""Server-side storage: verified objects in an ObjectStore, what exists in a MetadataIndex.

Object keys (in an ObjectStore; by default files under the data directory, those below
objects.PACKED_BELOW bytes rows of its objects.sqlite instead)::

    xorbs/<2 hex>/<xorb hash>   stored xorbs, with their CasObjectInfo footer
    shards/<shard id>.mdb       every accepted shard (upload form) of SHARD_IN_INDEX_BELOW bytes
                                or more, kept as the audit trail (smaller ones: in the index)
    uploads/<xorb>/<grant id>   in a bucket: an upload grant's PUT, staged until its commit
                                verifies it and stores it as a xorb; nothing else reads it

The index (index_base; SQLite in the data directory by default, or PostgreSQL) holds the xorb
registry, file reconstructions, the dedup index over key chunks, and per repo: the files it
registered and its Git LFS oids (sha256 -> file). Xorbs and file reconstructions are
content-addressed and shared by every repo (global dedup); what a repo may read, and what an oid
means in it, is per repo. An oid maps to a file only when the server computed that file's sha256
itself (or the caller vouches for the claim: the in-process local store), and a mapping, once
made, is never replaced.

CasStore does the verification and decides the order of writes: everything visible through the
API is in the index, committed in one transaction per request, after the objects it refers to
are durable: a crash never exposes a file whose xorbs are missing.
"""

from __future__ import annotations

import hashlib
import os
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple, Protocol

from ..core import hashes
from ..core.errors import FormatError
from ..core.shard import CasInfo, FileInfo, FileTerm, Shard, parse_shard
from ..core.xorb import VerifiedXorb, XorbLayout, decode_chunk, parse_chunk_records, verify_xorb
from .errors import Conflict, Damaged, MissingXorbs, Rejected, StorageFull, TooMuchWork, is_disk_full
from .index_base import DEFAULT_REPO, FileRegistration, MetadataIndex, NewXorb, ShardRegistration, StoredFile
from .index_factory import open_index
from .objects import DirectoryObjectStore, ObjectStore
from ..platform.readahead import readahead
from .work_budget import check_reference_budget

# How often (in bytes of file content) a sha256 verification reports progress.
PROGRESS_STEP = 8 * 1024 * 1024
# A sha256 verification of a file larger than this reads ahead in a thread (see _sha256_of),
# at most this many pieces (objects.read_piece bytes each) ahead. A smaller file costs less to
# hash than a thread to start.
READ_AHEAD_ABOVE = 4 * 1024 * 1024
READ_AHEAD_PIECES = 4

log = logging.getLogger("git_xet.storage")
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
# Chunks a shard's files may reference in all: 512 GiB of file data at the 64 KiB average chunk.
# Checking a file costs ~3 us and ~120 bytes per referenced chunk (~25 s, ~1 GB at this bound),
# and one 48-byte term can name up to 8192 chunks: without a bound a 64 MiB shard of repeated
# terms asks for billions of them (hours, and more memory than the machine has).
MAX_SHARD_CHUNK_REFERENCES = 1 << 23
# A stored xorb uploaded again is rewritten when last written longer ago than this (seconds):
# see CasStore._keep_alive. Below gc's shortest sensible grace period.
KEEP_ALIVE_AFTER = 600
# Shards smaller than this (a push of a few small files) are kept in their index row, committed
# with their registration, instead of as an object: a small push then costs the store one
# object write (its xorb) and its share of an index commit, not two object writes.
SHARD_IN_INDEX_BELOW = 64 * 1024
# A bundle's shard whose files reference at most this many chunks (8 MiB of file at the
# 128 KiB largest chunk: a few small files) is checked while its new xorb's writer lock is
# held (put_xorbs_with_shard); a larger one is checked after, as a shard on its own is.
BUNDLE_CHUNKS = 64
# Where upload grants' PUTs land in a bucket (see the layout above and server/grants.py).
STAGED_UPLOADS = "uploads/"


def _read_pieces(layout: XorbLayout, chunk_start: int, chunk_end: int, piece: int) -> Iterator[tuple[int, int]]:
    """Chunk runs [first, stop) covering [chunk_start, chunk_end), each at most `piece` bytes
    of records (or one chunk, if larger)."""
    first = chunk_start
    while first < chunk_end:
        base = layout.byte_ends[first - 1] if first else 0
        stop = first + 1
        while stop < chunk_end and layout.byte_ends[stop] - base <= piece:
            stop += 1
        yield first, stop
        first = stop


class RunningSha256(Protocol):
    """A sha256 being computed (hashlib's)."""

    def update(self, data: bytes | memoryview, /) -> None: ...

    def copy(self) -> RunningSha256: ...

    def hexdigest(self) -> str: ...


class Sha256Prefix(NamedTuple):
    """A sha256 computed ahead of a shard: `digest` holds the decoded content of `xorbs`, whole
    and in this order (the server's upload streams compute it while a client's xorbs arrive,
    from the stored objects). A file whose terms begin with exactly these whole xorbs needs
    only the rest of its content hashed when its shard comes."""

    xorbs: tuple[bytes, ...]
    digest: RunningSha256


def _begins_with_whole(terms: Sequence[FileTerm], xorbs: Sequence[bytes], layouts: Mapping[bytes, XorbLayout]) -> bool:
    """True when the first terms are exactly `xorbs`, each whole, in order (and there is one)."""
    if not xorbs or len(terms) < len(xorbs):
        return False
    for term, xorb in zip(terms, xorbs):
        layout = layouts.get(term.xorb_hash)
        if term.xorb_hash != xorb or layout is None or term.chunk_start != 0 or term.chunk_end != len(layout.chunk_hashes):
            return False
    return True


def chunks_referenced(shard: Shard) -> int:
    """How many chunks a shard's files name in all (what checking them costs)."""
    return sum(max(t.chunk_end - t.chunk_start, 0) for info in shard.files for t in info.terms)


def _claimed_sha256(info: FileInfo) -> str | None:
    """The sha256 a shard claims for a file, as hex; None when it claims none. hf-xet 1.8.0
    writes 32 zero bytes for a 0-byte file it uploads by path: for such a file that claim means
    the empty sha256 (the Hub accepts it), never the all-zero digest, which no content has."""
    if info.sha256 is None:
        return None
    if info.size == 0 and info.sha256 == bytes(32):
        return EMPTY_SHA256
    return info.sha256.hex()


def _wrong_claim(file_hex: str, claim: str, actual: str, refused: list[str] | None) -> None:
    """A file's sha256 claim is not its content's: refuse the shard (no `refused` list), or
    note the file there for the caller to report (see register_shard)."""
    message = f"file {file_hex}: its sha256 metadata {claim} does not match its content (sha256 {actual})"
    if refused is None:
        raise Rejected(message)
    log.warning("%s; registered without that oid", message)
    refused.append(file_hex)


class CasStore:
    """The server's objects and index. Thread-safe (the index keeps a connection per thread)."""

    def __init__(self, root: Path, objects: ObjectStore | None = None, private: bool = False, index: MetadataIndex | None = None) -> None:
        """`root`: the data directory (objects, unless `objects` is given; the SQLite index,
        unless `index` is given). `private`: it is for this process's user only (0700
        directories, 0600 files), as a server's must be; a serverless local store follows the umask."""
        self.root = Path(root)
        existed = self.root.is_dir()
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700 if private else 0o777)
        if private:
            self._make_private(existed)
        # Reads must not need write access (a backup snapshot, a read-only share for CI).
        self.read_only = not os.access(self.root, os.W_OK)
        self.objects: ObjectStore = objects or DirectoryObjectStore(self.root, file_mode=0o600 if private else 0o644, read_only=self.read_only)
        self.index: MetadataIndex = index if index is not None else open_index(None, self.root, read_only=self.read_only)

    def _make_private(self, existed: bool) -> None:
        """A directory made here is made 0700 (mkdir's mode passes through the umask). One that
        already existed is never chmodded: it may be shared or a parent of others' files (`/`,
        from a unit file whose variable was unset); if others can read it, the operator is told."""
        if not existed:
            self.root.chmod(0o700)
        elif os.name == "posix" and (mode := self.root.stat().st_mode & 0o777) & 0o077:
            logging.getLogger(__name__).warning(
                "git-xet: the data directory %s is open to other users (mode %o); its files are created 0600, "
                "but to keep what it lists private run: chmod 700 %s", self.root, mode, self.root
            )

    def close(self) -> None:
        self.index.close()
        if isinstance(self.objects, DirectoryObjectStore):
            self.objects.close()

    @staticmethod
    def xorb_key(xorb_hex: str) -> str:
        if not hashes.is_hash_hex(xorb_hex):
            raise Rejected(f"invalid xorb hash {xorb_hex[:80]!r}")
        xorb_hex = xorb_hex.lower()
        return f"xorbs/{xorb_hex[:2]}/{xorb_hex}"

    # ------------------------------------------------------------------ xorbs

    def put_xorb(self, xorb_hex: str, body: bytes | memoryview) -> bool:
        """Verify and store an uploaded xorb; True if it was new.

        The chunks are decoded and hashed; the xorb is accepted only if they hash to
        `xorb_hex`. The footer is rebuilt from what we computed, never trusted from the client.

        Clients encode the same chunks differently (raw, LZ4, BG4; hf-xet's LZ4 frames differ
        from ours), so racing uploads of one xorb carry different bytes. The first to create
        the object wins; the index always describes the bytes actually stored, so a loser (or
        a writer that died between the object and the index) indexes the winner's layout.
        """
        return self.put_verified_xorb(xorb_hex, lambda expected: verify_xorb(body, expected))

    def put_verified_xorb(
        self, xorb_hex: str, verify: Callable[[bytes], VerifiedXorb], create: Callable[[str, VerifiedXorb], bool] | None = None
    ) -> bool:
        """put_xorb for a body whose verification is `verify(expected hash)` (which raises
        FormatError when it fails), e.g. a StreamingXorbVerifier's finish: called only when
        the xorb is not stored yet, so a repeated upload costs no verification.

        `create(key, verified)` writes the object if it does not exist yet, True if it did (by
        default objects.put_new of the body and its rebuilt footer); an upload grant's commit
        passes one that copies the staged body inside the bucket instead. Either way the
        object holds exactly the verified body and its footer."""
        key = self.xorb_key(xorb_hex)
        if self._is_stored(xorb_hex, key):
            self._keep_alive(key)
            return False
        verified = self._verified(xorb_hex, verify)
        # One writer of this xorb at a time, whatever the store's conditional create does; the
        # second finds what the first stored and indexed.
        with self.index.xorb_writer_lock(xorb_hex.lower()), self._full_disk_reported():
            created = self._created_unindexed(xorb_hex, key, verified, create)
            if created:
                self._index_xorb(xorb_hex, verified)
        return created

    def _created_unindexed(self, xorb_hex: str, key: str, verified: VerifiedXorb, create: Callable[[str, VerifiedXorb], bool] | None = None) -> bool:
        """Under the xorb's writer lock: True if this call created the object, which its caller
        then indexes; False if the xorb was stored already, or another writer created the
        object first (indexed here, as what it stored)."""
        if self._is_stored(xorb_hex, key):
            return False
        if create is None:
            created = self.objects.put_new(key, verified.body, verified.footer().serialize())
        else:
            created = create(key, verified)
        if not created:
            self._index_stored_xorb(xorb_hex, verified)
        return created

    def _created_unindexed_many(self, verified: Sequence[tuple[str, str, VerifiedXorb]]) -> list[tuple[str, str, VerifiedXorb]]:
        """_created_unindexed of each (hash, key, verified), their writer locks held, the objects
        written together (objects.put_new_many): those this call created."""
        absent = [(xorb_hex, key, xorb) for xorb_hex, key, xorb in verified if not self._is_stored(xorb_hex, key)]
        written = self.objects.put_new_many([(key, (xorb.body, xorb.footer().serialize())) for _, key, xorb in absent])
        created = []
        for (xorb_hex, key, xorb), new in zip(absent, written):
            if new:
                created.append((xorb_hex, key, xorb))
            else:
                self._index_stored_xorb(xorb_hex, xorb)
        return created

    @staticmethod
    def _verified(xorb_hex: str, verify: Callable[[bytes], VerifiedXorb]) -> VerifiedXorb:
        try:
            return verify(hashes.hex_to_hash(xorb_hex))
        except FormatError as exc:
            raise Rejected(f"rejected xorb {xorb_hex}: {exc}") from None

    def put_xorbs_with_shard(
        self,
        xorbs: Sequence[tuple[str, bytes | memoryview]],
        shard_body: bytes,
        repo: str = DEFAULT_REPO,
        verify_sha256: bool = False,
        parsed: Shard | None = None,
        prefix: Sha256Prefix | None = None,
        refused: list[str] | None = None,
        alongside: Callable[[Any], None] | None = None,
    ) -> bool:
        """put_xorb of each xorb, then register_shard: an upload bundle (a small file's xorb
        and its shard; or a large file's last xorb, and its shard), with the same checks,
        results and order of writes.

        When the shard is small (see BUNDLE_CHUNKS), the xorbs not stored yet are written in one
        objects.put_new_many and indexed in the shard's transaction, and the shard's checks read
        them from memory instead of from the store: one index commit per bundle instead of one
        per xorb and one for the shard (a bundle of several small files, client/group_send.py,
        has a xorb per file), and no read back of bytes just verified. Their writer locks are
        held from their creation to that commit, as put_xorb holds one. Otherwise, or when one
        of them does not verify, each xorb is stored on its own (one writer lock at a time),
        then the shard. Either way a xorb stored before the shard is refused stays stored and
        indexed, as after separate requests."""
        pending: dict[str, bytes | memoryview] = {}  # (a xorb named twice is stored once)
        for xorb_hex, body in xorbs:
            if xorb_hex not in pending and not self._is_stored(xorb_hex, self.xorb_key(xorb_hex)):
                pending[xorb_hex] = body
        try:
            shard = parsed if parsed is not None else parse_shard(shard_body)
        except FormatError:
            shard = None  # register_shard refuses it, after the xorbs (as separate requests would)
        verified = self._all_verified(pending) if pending and shard is not None and chunks_referenced(shard) <= BUNDLE_CHUNKS else None
        if verified is None or shard is None:
            for xorb_hex, body in pending.items():
                self.put_xorb(xorb_hex, body)
            return self.register_shard(shard_body, repo, verify_sha256, parsed=shard, prefix=prefix, refused=refused, alongside=alongside)
        with self.index.xorb_writer_locks([xorb_hex.lower() for xorb_hex, _, _ in verified]), self._full_disk_reported():
            created = self._created_unindexed_many(verified)
            try:
                registration = self._checked_registration(shard_body, shard, repo, verify_sha256, fresh={xorb.xorb_hash: xorb for _, _, xorb in created}, prefix=prefix, refused=refused)
            except Exception:
                for xorb_hex, _, xorb in created:
                    self._index_xorb(xorb_hex, xorb)  # refused: the xorbs stay, as after separate requests
                raise
            new_xorbs = tuple(NewXorb(xorb.layout(), len(xorb.body), self._restorer(key, xorb)) for _, key, xorb in created)
            return self._record(registration._replace(new_xorbs=new_xorbs), shard_body, alongside)

    def _all_verified(self, xorbs: Mapping[str, bytes | memoryview]) -> list[tuple[str, str, VerifiedXorb]] | None:
        """(hash, key, verified) of each of `xorbs`; None if one does not verify (put_xorb then
        stores those before it, and refuses it, as separate requests would)."""
        try:
            return [(xorb_hex, self.xorb_key(xorb_hex), self._verified(xorb_hex, partial(verify_xorb, body))) for xorb_hex, body in xorbs.items()]
        except Rejected:
            return None

    def _keep_alive(self, key: str) -> None:
        """A push uploads a xorb the store holds, and names it in a shard soon. If the object was
        last written more than KEEP_ALIVE_AFTER ago (maybe an unused one, which gc removes once
        older than its grace), write it again: gc reads an object's time just before removing
        it, so its grace now covers this push too (at most one rewrite per xorb per interval)."""
        mtime = self.objects.modified(key)
        if mtime is None or mtime >= time.time() - KEEP_ALIVE_AFTER:
            return
        try:
            self.objects.put(key, self.objects.read(key))
        except FileNotFoundError:
            pass  # gc removed it this moment: the shard is refused, and the client uploads it again

    def _is_stored(self, xorb_hex: str, key: str) -> bool:
        return self.xorb_layout(xorb_hex) is not None and self.objects.exists(key)

    @contextmanager
    def _full_disk_reported(self) -> Iterator[None]:
        """A write that ran out of space (objects or index) raises StorageFull, which says so,
        instead of an OSError or a database error whose meaning depends on the backend."""
        try:
            yield
        except Exception as exc:
            if is_disk_full(exc):
                raise StorageFull(f"no space left for the store at {self.root}: free space or grow its volume, then push again") from exc
            raise

    def _index_xorb(self, xorb_hex: str, verified: VerifiedXorb) -> None:
        """Index a stored xorb's layout (first one wins: it describes the object first stored).

        The object is checked (and restored from `verified` if gone) under the index's lock on
        this xorb, which gc also takes: an orphan that gc removed just before a re-upload indexes
        it again is written back, never indexed while missing."""
        key = self.xorb_key(xorb_hex)
        self.index.add_xorb(verified.layout(), len(verified.body), before_insert=self._restorer(key, verified))

    def _restorer(self, key: str, verified: VerifiedXorb) -> Callable[[], None]:
        """What runs just before a xorb is indexed: its object stored again if gc took it."""

        def ensure_stored() -> None:
            if not self.objects.exists(key):
                log.info("xorb %s was collected while being indexed; storing it again", verified.layout().xorb_hex)
                self.objects.put(key, verified.body, verified.footer().serialize())

        return ensure_stored

    def _index_stored_xorb(self, xorb_hex: str, ours: VerifiedXorb) -> None:
        """Another writer created this xorb's object first: index what it stored.

        An object that no longer verifies (damaged on disk) is replaced by ours, while the
        index lets no other writer record this xorb, so that no second replacement can slip in.
        """
        key = self.xorb_key(xorb_hex)
        try:
            verified = verify_xorb(self.objects.read(key), hashes.hex_to_hash(xorb_hex))
        except FormatError:

            def replace() -> None:
                log.warning("xorb %s was damaged on disk; replacing it with a verified upload", xorb_hex)
                self.objects.put(key, ours.body, ours.footer().serialize())

            self.index.add_xorb(ours.layout(), len(ours.body), before_insert=replace)
            return
        self._index_xorb(xorb_hex, verified)

    def xorb_layout(self, xorb_hex: str) -> XorbLayout | None:
        return self.index.xorb_layout(xorb_hex.lower())

    def layouts_for(self, stored: StoredFile) -> dict[str, XorbLayout]:
        """The layout of every xorb a stored file uses; Damaged if one is missing."""
        layouts: dict[str, XorbLayout] = {}
        for term in stored.terms:
            name = hashes.hash_to_hex(term.xorb_hash)
            if name not in layouts:
                layout = self.xorb_layout(name)
                if layout is None:
                    raise Damaged(f"xorb {name} of file {stored.file_hex} is missing from the store")
                layouts[name] = layout
        return layouts

    def read_xorb_range(self, xorb_hex: str, start: int, end_inclusive: int) -> bytes:
        return self.objects.read_range(self.xorb_key(xorb_hex), start, end_inclusive)

    def open_xorb_file(self, xorb_hex: str) -> BinaryIO | None:
        """The stored xorb's file, open for reading, where objects are files; None where they
        are not (a bucket) or it is missing."""
        if not isinstance(self.objects, DirectoryObjectStore):
            return None
        try:
            return self.objects.open_file(self.xorb_key(xorb_hex))
        except FileNotFoundError:
            return None

    # ------------------------------------------------------------------ shards

    def _check_cas_block(self, info: CasInfo, layouts: dict[bytes, XorbLayout]) -> XorbLayout:
        name = hashes.hash_to_hex(info.xorb_hash)
        layout = layouts.get(info.xorb_hash) or self.xorb_layout(name)
        if layout is None:
            raise MissingXorbs(f"shard describes xorb {name}, which was never uploaded")
        if tuple(c.chunk_hash for c in info.chunks) != layout.chunk_hashes:
            raise Rejected(f"shard's chunk list for xorb {name} does not match the stored xorb")
        return layout

    @staticmethod
    def _check_work_bound(shard: Shard) -> None:
        """Refuse, before any per-chunk work, a shard whose files reference too many chunks."""
        referenced = chunks_referenced(shard)
        if referenced > MAX_SHARD_CHUNK_REFERENCES:
            raise TooMuchWork(
                f"shard's files reference {referenced} chunks, more than the {MAX_SHARD_CHUNK_REFERENCES} one shard "
                "may reference: split the upload into several shards",
            )

    def _check_terms_in_range(self, info, layouts: dict[bytes, XorbLayout]) -> None:
        """Every term names an existing xorb and a non-empty chunk range inside it (cheap: no
        per-chunk work), so the work budget can be computed before anything is hashed."""
        name = hashes.hash_to_hex(info.file_hash)
        if info.verification is None:
            raise Rejected(f"file {name} has no verification entries")
        for term in info.terms:
            layout = layouts.get(term.xorb_hash)
            if layout is None:
                layout = self.xorb_layout(hashes.hash_to_hex(term.xorb_hash))
                if layout is None:
                    raise MissingXorbs(f"file {name} references missing xorb {hashes.hash_to_hex(term.xorb_hash)}")
                layouts[term.xorb_hash] = layout
            if not term.chunk_start < term.chunk_end <= len(layout.chunk_hashes):
                raise Rejected(f"file {name} references chunks [{term.chunk_start}, {term.chunk_end}) outside xorb {layout.xorb_hex}")

    def _check_file(self, info, layouts: dict[bytes, XorbLayout], checked: dict[tuple[bytes, int, int], tuple[bytes, int]]) -> None:
        """Verification hashes, term lengths and the file hash against the stored xorbs.
        `checked` remembers (verification hash, length) per term range across the shard, so a
        range named again costs no more hashing."""
        name = hashes.hash_to_hex(info.file_hash)
        all_hashes: list[bytes] = []
        all_sizes: list[int] = []
        for term, verification in zip(info.terms, info.verification):
            layout = layouts[term.xorb_hash]
            term_hashes = layout.chunk_hashes[term.chunk_start : term.chunk_end]
            term_sizes = layout.chunk_sizes[term.chunk_start : term.chunk_end]
            key = (term.xorb_hash, term.chunk_start, term.chunk_end)
            if key not in checked:
                checked[key] = (hashes.verification_hash(term_hashes), sum(term_sizes))
            expected, length = checked[key]
            if expected != verification:
                raise Rejected(f"file {name}: a verification hash does not match xorb {layout.xorb_hex}")
            if length != term.unpacked_bytes:
                raise Rejected(f"file {name}: a term's length does not match xorb {layout.xorb_hex}")
            all_hashes += term_hashes
            all_sizes += term_sizes
        if hashes.file_hash(all_hashes, all_sizes) != info.file_hash:
            raise Rejected(f"file {name}: its hash does not match the chunks it references")

    def _sha256_of(
        self,
        stored: StoredFile,
        progress: Callable[[int], None] | None,
        fresh: Mapping[bytes, VerifiedXorb],
        layouts: Mapping[bytes, XorbLayout],
        prefix: Sha256Prefix | None = None,
    ) -> str:
        """The sha256 of a registered-to-be file, computed from the stored chunks (`layouts`:
        of every xorb it references), from where `prefix` leaves off when the file begins
        with its xorbs.

        The chunks are not hashed again on this pass (BLAKE3 over every byte of every push):
        each was verified when its xorb was stored, and a byte changed since then changes the
        sha256 too, so the claim is refused either way; register_shard then re-reads the file
        with verification, to blame the store rather than the claim when the store is at fault.

        A large file is read a few pieces ahead, in a thread of its own: the client waits for
        this pass (after its last xorb, before its `complete`), and reads and sha256 both
        release the GIL, so it then takes about as long as the sha256 alone."""
        digest: RunningSha256 = hashlib.sha256()
        rest = stored
        if prefix is not None and _begins_with_whole(stored.terms, prefix.xorbs, layouts):
            digest = prefix.digest.copy()
            covered = stored.terms[: len(prefix.xorbs)]
            rest = stored._replace(terms=stored.terms[len(prefix.xorbs) :])
            log.info("sha256 of file %s: %d of its %d bytes hashed as they were uploaded", stored.file_hex[:12], sum(t.unpacked_bytes for t in covered), stored.size)
            if progress is not None:
                progress(sum(t.unpacked_bytes for t in covered))
        pieces = self._file_pieces(rest, False, fresh, layouts)
        if stored.size > READ_AHEAD_ABOVE:
            pieces = readahead(pieces, READ_AHEAD_PIECES, "git-xet-sha256-read")
        since = 0
        try:
            for piece in pieces:
                for chunk in piece:
                    digest.update(chunk)
                    since += len(chunk)
                if progress is not None and since >= PROGRESS_STEP:
                    progress(since)
                    since = 0
        except FileNotFoundError:
            # gc removed a xorb the file uses since the checks found it indexed (its repository
            # deleted): the same answer as register_shard's own check gives, not a server error.
            raise Conflict(f"file {stored.file_hex}: a xorb it uses was collected as unused while this shard was checked; upload it again") from None
        if progress is not None and since:
            progress(since)
        return digest.hexdigest()

    def xorb_pieces(self, xorb_hash: bytes, held: VerifiedXorb | None = None) -> Iterator[list[bytes | memoryview]]:
        """A stored xorb's decoded content, whole, a list of chunks per piece (not checked
        against their hashes again: see _sha256_of), from `held` (the xorb as just verified)
        or else read from the store; Damaged if it is missing."""
        xorb_hex = hashes.hash_to_hex(xorb_hash)
        layout = held.layout() if held is not None else self.xorb_layout(xorb_hex)
        if layout is None:
            raise Damaged(f"xorb {xorb_hex} is missing")
        whole = FileTerm(hashes.XetHash(xorb_hash), sum(layout.chunk_sizes), 0, len(layout.chunk_hashes))
        fresh = {xorb_hash: held} if held is not None else None
        return self._file_pieces(StoredFile(xorb_hex, whole.unpacked_bytes, None, (whole,)), False, fresh, {xorb_hash: layout})

    def register_shard(
        self,
        body: bytes,
        repo: str = DEFAULT_REPO,
        verify_sha256: bool = False,
        progress: Callable[[int, int], None] | None = None,
        parsed: Shard | None = None,
        prefix: Sha256Prefix | None = None,
        refused: list[str] | None = None,
        alongside: Callable[[Any], None] | None = None,
    ) -> bool:
        """Validate an uploaded shard and register its files for `repo`, all or nothing.

        Every file is checked against the stored xorbs (verification hashes, file hash) within
        a work budget decided before any per-chunk work (see work_budget). A file's sha256
        (its Git LFS oid) becomes an oid of `repo` only when known to be right: with
        `verify_sha256` (the server) it is computed from the bytes, and a shard whose claim is
        wrong is refused; without it (the in-process local store, whose writer is its owner)
        the claim is taken as given. A sha256 the server once computed for a file also maps
        uploads that carry none (hf-xet's skip_sha256). Existing oid mappings are never
        replaced. `progress(done, total)` reports bytes of sha256 verification.

        `refused`: where a wrong sha256 claim does not refuse the whole shard. Given a list,
        a file whose claim is wrong is still registered (its bytes checked out) under the
        sha256 computed here, the claimed oid is not mapped, and the file's hash is appended
        to `refused` for the caller to report: one file's metadata no longer fails every file
        of a commit. Without one, such a shard is refused (Rejected), as a caller that cannot
        report a refused claim needs. A 0-byte file's all-zero claim is not wrong: hf-xet
        (1.8.0) sends it for empty files, and it stands for the empty sha256 (EMPTY_SHA256).

        `parsed`: what parse_shard(body) gave, when the caller has parsed it already.
        `prefix`: a sha256 computed while the xorbs arrived (see Sha256Prefix), continued
        instead of starting over for a file that begins with its xorbs.
        `alongside`: rows of the index's database written in the registration's transaction
        when the shard is new for the repo (see MetadataIndex.register_shard).

        Returns True when the shard was new for this repo (result 1), False for a repeat.
        """
        try:
            shard = parsed if parsed is not None else parse_shard(body)
        except FormatError as exc:
            raise Rejected(f"invalid shard: {exc}") from None
        return self._record(self._checked_registration(body, shard, repo, verify_sha256, progress, prefix=prefix, refused=refused), body, alongside)

    def _checked_registration(
        self,
        body: bytes,
        shard: Shard,
        repo: str,
        verify_sha256: bool,
        progress: Callable[[int, int], None] | None = None,
        fresh: Mapping[bytes, VerifiedXorb] | None = None,
        prefix: Sha256Prefix | None = None,
        refused: list[str] | None = None,
    ) -> ShardRegistration:
        """register_shard's checks (nothing is written): what to record. `fresh`: xorbs
        verified and stored but not indexed yet (put_xorbs_with_shard), read from memory.
        `refused`: see register_shard."""
        fresh = fresh or {}
        self._check_work_bound(shard)
        shard_id = hashes.hash_to_hex(hashes.keyed_hash(bytes(32), body))
        layouts: dict[bytes, XorbLayout] = {xorb_hash: verified.layout() for xorb_hash, verified in fresh.items()}
        for cas in shard.cas:
            layouts[cas.xorb_hash] = self._check_cas_block(cas, layouts)
        for info in shard.files:
            self._check_terms_in_range(info, layouts)
        check_reference_budget(len(body), (t for info in shard.files for t in info.terms), {x: layout.chunk_sizes for x, layout in layouts.items()})
        checked: dict[tuple[bytes, int, int], tuple[bytes, int]] = {}
        for info in shard.files:
            self._check_file(info, layouts, checked)

        oids: dict[str, str] = {}  # file hash -> sha256 to map in this repo
        computed: dict[str, str] = {}  # file hash -> sha256 computed here, for the files table
        to_verify: list[tuple[StoredFile, str]] = []
        for info in shard.files:
            name = hashes.hash_to_hex(info.file_hash)
            claim = _claimed_sha256(info)
            known = self._verified_sha256(name)
            if known is not None:
                if claim is not None and claim != known:
                    _wrong_claim(name, claim, known, refused)
                oids[name] = known
            elif claim is not None and verify_sha256:
                to_verify.append((StoredFile(name, info.size, None, info.terms), claim))
            elif claim is not None:
                oids[name] = claim
        total = sum(stored.size for stored, _ in to_verify)
        done = 0

        def advance(step: int) -> None:
            nonlocal done
            done += step
            if progress is not None:
                progress(done, total)

        for stored, claim in to_verify:
            actual = self._sha256_of(stored, advance, fresh, layouts, prefix)
            if actual != claim:
                for _ in self.iter_file_bytes(stored, fresh=fresh):  # Damaged if the stored bytes are at fault
                    pass
                _wrong_claim(stored.file_hex, claim, actual, refused)
            oids[stored.file_hex] = computed[stored.file_hex] = actual

        files = []
        for info in shard.files:
            name = hashes.hash_to_hex(info.file_hash)
            files.append(FileRegistration(name, info.size, info.terms, computed.get(name), oids.get(name)))
        in_index = len(body) < SHARD_IN_INDEX_BELOW
        return ShardRegistration(shard_id, len(body), repo, tuple(files), self._dedup_entries(shard, layouts), body if in_index else None)

    def _record(self, registration: ShardRegistration, body: bytes, alongside: Callable[[Any], None] | None = None) -> bool:
        """Write what _checked_registration decided: the shard's object (unless its index row
        keeps it), then the index."""
        with self._full_disk_reported():
            if registration.body is None:
                self.objects.put(f"shards/{registration.shard_id}.mdb", body)
            return self.index.register_shard(registration, alongside)

    def shard_bytes(self, shard_id: str) -> bytes:
        """A registered shard's bytes, from its index row or its object; FileNotFoundError if gone."""
        body = self.index.shard_body(shard_id)
        return body if body is not None else self.objects.read(f"shards/{shard_id}.mdb")

    @staticmethod
    def _dedup_entries(shard: Shard, layouts: dict[bytes, XorbLayout]) -> tuple[tuple[bytes, str], ...]:
        """Key chunks only: each file's first chunk, and the shard's chunks whose hash makes them
        eligible for global dedup (~1 in 1024). The client's eligibility flag is not trusted:
        honouring it would let a client put one dedup row per chunk into the index."""
        entries: set[tuple[bytes, str]] = set()
        for info in shard.files:
            if info.terms:
                first = info.terms[0]
                entries.add((layouts[first.xorb_hash].chunk_hashes[first.chunk_start], hashes.hash_to_hex(first.xorb_hash)))
        for cas in shard.cas:
            xorb_hex = hashes.hash_to_hex(cas.xorb_hash)
            entries.update((c.chunk_hash, xorb_hex) for c in cas.chunks if hashes.is_global_dedup_eligible(c.chunk_hash))
        return tuple(sorted(entries))

    def _verified_sha256(self, file_hex: str) -> str | None:
        stored = self.index.get_file(file_hex)
        return stored.sha256_hex if stored else None

    # ------------------------------------------------------------------ queries

    def get_file(self, file_hex: str) -> StoredFile | None:
        if not hashes.is_hash_hex(file_hex):
            raise Rejected(f"invalid file hash {file_hex[:80]!r}")
        return self.index.get_file(file_hex.lower())

    def iter_file_bytes(self, stored: StoredFile, verify: bool = True, fresh: Mapping[bytes, VerifiedXorb] | None = None) -> Iterator[bytes | memoryview]:
        """The file's bytes, term by term, each chunk checked against its stored hash (unless
        not `verify`: see _sha256_of). A term is read in pieces of at most the object store's
        read_piece bytes, never whole: a 64 MiB read is a fresh allocation every time (the
        allocator maps and unmaps blocks that large, and each page faults in again). Xorbs in
        `fresh` (verified, not indexed yet) are read from their verified bodies."""
        for piece in self._file_pieces(stored, verify, fresh):
            yield from piece

    def _file_pieces(
        self, stored: StoredFile, verify: bool, fresh: Mapping[bytes, VerifiedXorb] | None, layouts: Mapping[bytes, XorbLayout] | None = None
    ) -> Iterator[list[bytes | memoryview]]:
        """iter_file_bytes's chunks, a list per piece read. `layouts` (by xorb hash): those of
        the file's xorbs, when the caller has them (otherwise each is read from the index)."""
        for term in stored.terms:
            xorb_hex = hashes.hash_to_hex(term.xorb_hash)
            in_memory = fresh.get(term.xorb_hash) if fresh else None
            if in_memory is not None:
                layout: XorbLayout | None = in_memory.layout()
            else:
                layout = layouts.get(term.xorb_hash) if layouts is not None else self.xorb_layout(xorb_hex)
            if layout is None:
                raise Damaged(f"xorb {xorb_hex} of file {stored.file_hex} is missing")
            for first, stop in _read_pieces(layout, term.chunk_start, term.chunk_end, self.objects.read_piece):
                start, end = layout.byte_range(first, stop)
                data = in_memory.body[start : end + 1] if in_memory is not None else self.read_xorb_range(xorb_hex, start, end)
                chunks: list[bytes | memoryview] = []
                try:
                    records, _ = parse_chunk_records(data)
                    if len(records) != stop - first:
                        raise FormatError(f"{len(records)} whole chunk records where the index has {stop - first}")
                    for index, record in zip(range(first, stop), records):
                        chunk = decode_chunk(data, record)
                        if verify and hashes.chunk_hash(chunk) != layout.chunk_hashes[index]:
                            raise FormatError(f"chunk {index} does not hash to the index's chunk hash")
                        chunks.append(chunk)
                except FormatError as exc:  # the stored bytes are not what was verified and indexed
                    raise Damaged(f"xorb {xorb_hex} is damaged on disk ({exc})") from None
                yield chunks

    def file_by_sha256(self, oid: str, repo: str = DEFAULT_REPO) -> StoredFile | None:
        """The XET file that this Git LFS oid (sha256) names in `repo`, if any."""
        file_hex = self.index.file_for_oid(repo, oid.lower())
        return self.get_file(file_hex) if file_hex else None

    def repo_has_file(self, repo: str, file_hex: str) -> bool:
        """Whether `repo` registered this file (and so may read it)."""
        return self.index.repo_has_file(repo, file_hex.lower())

    def stats(self) -> dict[str, int]:
        """How many of each thing the index holds (for operators, and tests that must show an
        attack changed nothing)."""
        return self.index.stats()

    # ------------------------------------------------------------------ token revocation

    def revoke_token(self, token_id: str, now: int) -> None:
        """Put a user token's id on the revocation list (tokens minted from it die with it)."""
        self.index.revoke_token(token_id, now)

    def revoked_token_ids(self) -> frozenset[str]:
        return self.index.revoked_token_ids()

    def dedup_xorbs(self, chunk: bytes, limit: int = 8) -> list[str]:
        return self.index.dedup_xorbs(chunk, limit)

    def dedup_shard(self, chunk: bytes) -> Shard | None:
        """The CAS blocks of the xorbs holding `chunk` (unkeyed; the caller keys them)."""
        cas = []
        for xorb_hex in self.dedup_xorbs(chunk):
            layout = self.xorb_layout(xorb_hex)
            if layout is not None:
                cas.append(CasInfo.from_chunks(hashes.hex_to_hash(xorb_hex), layout.chunk_hashes, layout.chunk_sizes, layout.byte_ends[-1]))
        return Shard(cas=tuple(cas)) if cas else None
