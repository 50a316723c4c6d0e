"""Server-side storage: xorbs and shards as files, indexes in SQLite.

Object keys (in an ObjectStore; by default files under the data directory)::

    xorbs/<2 hex>/<xorb hash>   stored xorbs, with their CasObjectInfo footer
    shards/<shard id>.mdb       every accepted shard (upload form), kept as the audit trail

and <data>/index.sqlite: xorb registry, file reconstructions, sha256 -> file, dedup index.

Everything that is visible through the API is in SQLite and is committed in one transaction
per request, after the objects it refers to are durable on disk: a crash never exposes a file
whose xorbs are missing.
"""

from __future__ import annotations

import logging
import sqlite3
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..core import hashes
from ..core.errors import FormatError
from ..core.shard import CHUNK_FLAG_GLOBAL_DEDUP_ELIGIBLE, CasInfo, FileTerm, Shard, parse_shard
from ..core.xorb import VerifiedXorb, decode_chunk, parse_chunk_records, verify_xorb
from .errors import MISSING_XORB, RequestRefused
from .objects import DirectoryObjectStore, ObjectStore

_SCHEMA = """
CREATE TABLE IF NOT EXISTS xorbs (
    hash TEXT PRIMARY KEY,
    num_chunks INTEGER NOT NULL,
    body_size INTEGER NOT NULL,
    unpacked_size INTEGER NOT NULL,
    chunk_hashes BLOB NOT NULL,      -- 32 bytes per chunk
    byte_ends BLOB NOT NULL,         -- u32 LE per chunk: end of chunk record in the xorb
    chunk_sizes BLOB NOT NULL        -- u32 LE per chunk: uncompressed size
);
CREATE TABLE IF NOT EXISTS files (
    hash TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    sha256 TEXT,
    terms BLOB NOT NULL              -- 48-byte FileDataSequenceEntry per term
);
CREATE INDEX IF NOT EXISTS files_by_sha256 ON files(sha256);
CREATE TABLE IF NOT EXISTS dedup (
    chunk_hash BLOB NOT NULL,
    xorb TEXT NOT NULL,
    PRIMARY KEY (chunk_hash, xorb)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS shards (
    id TEXT PRIMARY KEY,
    size INTEGER NOT NULL
);
"""

_TERM = struct.Struct("<32sIIII")
log = logging.getLogger("git_xet.storage")
# Chunks a shard's files may reference in all: 512 GiB of file data at the 64 KiB average chunk.
# Checking a file costs ~3 us and ~120 bytes per referenced chunk (~25 s, ~1 GB at this bound),
# and one 48-byte term can name up to 8192 chunks: without a bound a 64 MiB shard of repeated
# terms asks for billions of them (hours, and more memory than the machine has).
MAX_SHARD_CHUNK_REFERENCES = 1 << 23


class StoreError(RequestRefused):
    """The store refuses an object or query (invalid, inconsistent, or references missing data)."""


@dataclass(frozen=True)
class XorbLayout:
    """What the server knows of a stored xorb without reading it."""

    hash: str
    chunk_hashes: tuple[bytes, ...]
    byte_ends: tuple[int, ...]
    chunk_sizes: tuple[int, ...]

    def byte_range(self, chunk_start: int, chunk_end: int) -> tuple[int, int]:
        """Inclusive byte range of chunks [chunk_start, chunk_end) in the stored xorb."""
        start = self.byte_ends[chunk_start - 1] if chunk_start else 0
        return start, self.byte_ends[chunk_end - 1] - 1


@dataclass(frozen=True)
class StoredFile:
    hash: str
    size: int
    sha256: str | None
    terms: tuple[FileTerm, ...]


def _pack_u32s(values: tuple[int, ...]) -> bytes:
    return struct.pack(f"<{len(values)}I", *values)


def _unpack_u32s(blob: bytes) -> tuple[int, ...]:
    return struct.unpack(f"<{len(blob) // 4}I", blob)


def _insert_layout(db: sqlite3.Connection, xorb_hex: str, verified: VerifiedXorb) -> None:
    """Index a stored xorb's layout (first one wins: it describes the object first stored)."""
    db.execute(
        "INSERT OR IGNORE INTO xorbs VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            xorb_hex.lower(),
            len(verified.chunk_hashes),
            len(verified.body),
            sum(verified.chunk_sizes),
            b"".join(verified.chunk_hashes),
            _pack_u32s(verified.byte_ends),
            _pack_u32s(verified.chunk_sizes),
        ),
    )


class CasStore:
    """The server's objects and indexes. Thread-safe: one SQLite connection per thread."""

    def __init__(self, root: Path, objects: ObjectStore | None = None) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.objects: ObjectStore = objects or DirectoryObjectStore(self.root)
        self._local = threading.local()
        self._connection().executescript(_SCHEMA)  # idempotent; executescript commits itself

    # ------------------------------------------------------------------ plumbing

    def _connection(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.root / "index.sqlite", timeout=60, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            self._local.conn = conn
        return conn

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        """A transaction: committed on success, rolled back on any error."""
        conn = self._connection()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    @staticmethod
    def xorb_key(xorb_hex: str) -> str:
        if not hashes.is_hash_hex(xorb_hex):
            raise StoreError(400, f"invalid xorb hash {xorb_hex[:80]!r}")
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
        key = self.xorb_key(xorb_hex)
        expected = hashes.hex_to_hash(xorb_hex)
        if self.xorb_layout(xorb_hex) is not None:
            return False
        try:
            verified = verify_xorb(body, expected)
        except FormatError as exc:
            raise StoreError(400, f"rejected xorb {xorb_hex}: {exc}") from None
        created = self.objects.put_new(key, verified.body, verified.footer().serialize())
        if created:
            self._index_xorb(xorb_hex, verified)
        else:
            self._index_stored_xorb(xorb_hex, verified)
        return created

    def _index_xorb(self, xorb_hex: str, verified: VerifiedXorb) -> None:
        with self._db() as db:
            _insert_layout(db, xorb_hex, verified)

    def _index_stored_xorb(self, xorb_hex: str, ours: VerifiedXorb) -> None:
        """Another writer created this xorb's object first: index what it stored.

        An object that no longer verifies (damaged on disk) is replaced by ours, under the
        index's write lock so that no second replacement can slip in between.
        """
        key = self.xorb_key(xorb_hex)
        try:
            verified = verify_xorb(self.objects.read(key), hashes.hex_to_hash(xorb_hex))
        except FormatError:
            with self._db() as db:
                if db.execute("SELECT 1 FROM xorbs WHERE hash = ?", (xorb_hex.lower(),)).fetchone() is None:
                    log.warning("xorb %s was damaged on disk; replacing it with a verified upload", xorb_hex)
                    self.objects.put(key, ours.body, ours.footer().serialize())
                    _insert_layout(db, xorb_hex, ours)
            return
        self._index_xorb(xorb_hex, verified)

    def xorb_layout(self, xorb_hex: str) -> XorbLayout | None:
        row = self._connection().execute(
            "SELECT chunk_hashes, byte_ends, chunk_sizes FROM xorbs WHERE hash = ?", (xorb_hex.lower(),)
        ).fetchone()
        if row is None:
            return None
        blob, ends, sizes = row
        chunk_hashes = tuple(blob[i : i + 32] for i in range(0, len(blob), 32))
        return XorbLayout(xorb_hex.lower(), chunk_hashes, _unpack_u32s(ends), _unpack_u32s(sizes))

    def layouts_for(self, stored: StoredFile) -> dict[str, XorbLayout]:
        """The layout of every xorb a stored file uses; StoreError 500 if one is missing."""
        layouts: dict[str, XorbLayout] = {}
        for term in stored.terms:
            name = hashes.hash_to_hex(term.xorb_hash)
            if name not in layouts:
                layout = self.xorb_layout(name)
                if layout is None:
                    raise StoreError(500, f"xorb {name} of file {stored.hash} is missing from the store")
                layouts[name] = layout
        return layouts

    def read_xorb_range(self, xorb_hex: str, start: int, end_inclusive: int) -> bytes:
        return self.objects.read_range(self.xorb_key(xorb_hex), start, end_inclusive)

    # ------------------------------------------------------------------ shards

    def _check_cas_block(self, info: CasInfo) -> XorbLayout:
        name = hashes.hash_to_hex(info.xorb_hash)
        layout = self.xorb_layout(name)
        if layout is None:
            raise StoreError(400, f"shard describes xorb {name}, which was never uploaded", MISSING_XORB)
        if tuple(c.chunk_hash for c in info.chunks) != layout.chunk_hashes:
            raise StoreError(400, f"shard's chunk list for xorb {name} does not match the stored xorb")
        return layout

    @staticmethod
    def _check_work_bound(shard: Shard) -> None:
        """Refuse, before any per-chunk work, a shard whose files reference too many chunks."""
        referenced = sum(t.chunk_end - t.chunk_start for info in shard.files for t in info.terms)
        if referenced > MAX_SHARD_CHUNK_REFERENCES:
            raise StoreError(
                413,
                f"shard's files reference {referenced} chunks, more than the {MAX_SHARD_CHUNK_REFERENCES} one shard "
                "may reference: split the upload into several shards",
            )

    def _check_file(self, info, layouts: dict[bytes, XorbLayout]) -> None:
        name = hashes.hash_to_hex(info.file_hash)
        if info.verification is None:
            raise StoreError(400, f"file {name} has no verification entries")
        all_hashes: list[bytes] = []
        all_sizes: list[int] = []
        for term, verification in zip(info.terms, info.verification):
            layout = layouts.get(term.xorb_hash)
            if layout is None:
                layout = self.xorb_layout(hashes.hash_to_hex(term.xorb_hash))
                if layout is None:
                    raise StoreError(400, f"file {name} references missing xorb {hashes.hash_to_hex(term.xorb_hash)}", MISSING_XORB)
                layouts[term.xorb_hash] = layout
            if term.chunk_end > len(layout.chunk_hashes):
                raise StoreError(400, f"file {name} references chunks beyond the end of xorb {layout.hash}")
            term_hashes = layout.chunk_hashes[term.chunk_start : term.chunk_end]
            term_sizes = layout.chunk_sizes[term.chunk_start : term.chunk_end]
            if hashes.verification_hash(term_hashes) != verification:
                raise StoreError(400, f"file {name}: a verification hash does not match xorb {layout.hash}")
            if sum(term_sizes) != term.unpacked_bytes:
                raise StoreError(400, f"file {name}: a term's length does not match xorb {layout.hash}")
            all_hashes += term_hashes
            all_sizes += term_sizes
        if hashes.file_hash(all_hashes, all_sizes) != info.file_hash:
            raise StoreError(400, f"file {name}: its hash does not match the chunks it references")

    def register_shard(self, body: bytes) -> bool:
        """Validate an uploaded shard and register its files and xorbs, all or nothing.

        Returns True when the shard was new (result 1), False when it was already registered.
        """
        try:
            shard = parse_shard(body)
        except FormatError as exc:
            raise StoreError(400, f"invalid shard: {exc}") from None
        self._check_work_bound(shard)
        shard_id = hashes.hash_to_hex(hashes.keyed_hash(bytes(32), body))
        layouts: dict[bytes, XorbLayout] = {}
        for info in shard.cas:
            layouts[info.xorb_hash] = self._check_cas_block(info)
        for info in shard.files:
            self._check_file(info, layouts)

        self.objects.put(f"shards/{shard_id}.mdb", body)
        with self._db() as db:
            if db.execute("SELECT 1 FROM shards WHERE id = ?", (shard_id,)).fetchone():
                return False
            db.execute("INSERT INTO shards VALUES (?, ?)", (shard_id, len(body)))
            for info in shard.files:
                db.execute(
                    "INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?)",
                    (
                        hashes.hash_to_hex(info.file_hash),
                        info.size,
                        info.sha256.hex() if info.sha256 else None,
                        b"".join(_TERM.pack(t.xorb_hash, t.cas_flags, t.unpacked_bytes, t.chunk_start, t.chunk_end) for t in info.terms),
                    ),
                )
                if info.terms:  # the first chunk of every file is a dedup entry point
                    first = info.terms[0]
                    digest = layouts[first.xorb_hash].chunk_hashes[first.chunk_start]
                    db.execute("INSERT OR IGNORE INTO dedup VALUES (?, ?)", (digest, hashes.hash_to_hex(first.xorb_hash)))
            for info in shard.cas:
                xorb_hex = hashes.hash_to_hex(info.xorb_hash)
                for chunk in info.chunks:
                    if chunk.flags & CHUNK_FLAG_GLOBAL_DEDUP_ELIGIBLE or hashes.is_global_dedup_eligible(chunk.chunk_hash):
                        db.execute("INSERT OR IGNORE INTO dedup VALUES (?, ?)", (chunk.chunk_hash, xorb_hex))
        return True

    # ------------------------------------------------------------------ queries

    def get_file(self, file_hex: str) -> StoredFile | None:
        if not hashes.is_hash_hex(file_hex):
            raise StoreError(400, f"invalid file hash {file_hex[:80]!r}")
        row = self._connection().execute("SELECT size, sha256, terms FROM files WHERE hash = ?", (file_hex.lower(),)).fetchone()
        if row is None:
            return None
        size, sha256, blob = row
        terms = tuple(FileTerm(x, u, s, e, f) for x, f, u, s, e in _TERM.iter_unpack(blob))
        return StoredFile(file_hex.lower(), size, sha256, terms)

    def iter_file_bytes(self, stored: StoredFile) -> Iterator[bytes | memoryview]:
        """The file's bytes, term by term, each chunk checked against its stored hash."""
        for term in stored.terms:
            xorb_hex = hashes.hash_to_hex(term.xorb_hash)
            layout = self.xorb_layout(xorb_hex)
            if layout is None:
                raise StoreError(500, f"xorb {xorb_hex} of file {stored.hash} is missing")
            start, end = layout.byte_range(term.chunk_start, term.chunk_end)
            data = self.read_xorb_range(xorb_hex, start, end)
            records, _ = parse_chunk_records(data)
            if len(records) != term.chunk_end - term.chunk_start:
                raise StoreError(500, f"xorb {xorb_hex} is damaged on disk")
            for index, record in zip(range(term.chunk_start, term.chunk_end), records):
                chunk = decode_chunk(data, record)
                if hashes.chunk_hash(chunk) != layout.chunk_hashes[index]:
                    raise StoreError(500, f"xorb {xorb_hex} is damaged on disk")
                yield chunk

    def file_by_sha256(self, oid: str) -> StoredFile | None:
        """The XET file registered with this sha256 (the Git LFS oid), if any."""
        row = self._connection().execute("SELECT hash FROM files WHERE sha256 = ?", (oid.lower(),)).fetchone()
        return self.get_file(row[0]) if row else None

    def dedup_xorbs(self, chunk: bytes, limit: int = 8) -> list[str]:
        rows = self._connection().execute("SELECT xorb FROM dedup WHERE chunk_hash = ? LIMIT ?", (chunk, limit)).fetchall()
        return [r[0] for r in rows]

    def dedup_shard(self, chunk: bytes) -> Shard | None:
        """The CAS blocks of the xorbs holding `chunk` (unkeyed; the caller keys them)."""
        cas = []
        for xorb_hex in self.dedup_xorbs(chunk):
            layout = self.xorb_layout(xorb_hex)
            if layout is not None:
                cas.append(CasInfo.from_chunks(hashes.hex_to_hash(xorb_hex), layout.chunk_hashes, layout.chunk_sizes, layout.byte_ends[-1]))
        return Shard(cas=tuple(cas)) if cas else None
