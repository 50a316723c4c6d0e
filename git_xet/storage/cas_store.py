"""Server-side storage: xorbs and shards as files, indexes in SQLite.

Object keys (in an ObjectStore; by default files under the data directory)::

    xorbs/<2 hex>/<xorb hash>   stored xorbs, with their CasObjectInfo footer
    shards/<shard id>.mdb       every accepted shard (upload form), kept as the audit trail

and <data>/index.sqlite: xorb registry, file reconstructions, dedup index, and per repo: the
files it registered and its Git LFS oids (sha256 -> file). Xorbs and file reconstructions are
content-addressed and shared by every repo (global dedup); what a repo may read, and what an oid
means in it, is per repo. An oid maps to a file only when the server computed that file's sha256
itself (or the caller vouches for the claim: the in-process local store), and a mapping, once
made, is never replaced.

Everything that is visible through the API is in SQLite and is committed in one transaction
per request, after the objects it refers to are durable on disk: a crash never exposes a file
whose xorbs are missing.
"""

from __future__ import annotations

import hashlib
import logging
import sqlite3
import struct
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..core import hashes
from ..core.errors import FormatError
from ..core.shard import CHUNK_FLAG_GLOBAL_DEDUP_ELIGIBLE, CasInfo, FileTerm, Shard, parse_shard
from ..core.xorb import VerifiedXorb, decode_chunk, parse_chunk_records, verify_xorb
from .errors import MISSING_XORB, RequestRefused
from .objects import DirectoryObjectStore, ObjectStore
from .work_budget import check_reference_budget

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
    sha256 TEXT,                     -- computed by the server from the bytes; NULL until then
    terms BLOB NOT NULL              -- 48-byte FileDataSequenceEntry per term
);
CREATE TABLE IF NOT EXISTS dedup (
    chunk_hash BLOB NOT NULL,
    xorb TEXT NOT NULL,
    PRIMARY KEY (chunk_hash, xorb)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS shards (
    id TEXT PRIMARY KEY,
    size INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS repo_files (   -- a repo reads only the files it registered
    repo TEXT NOT NULL,
    file TEXT NOT NULL,
    PRIMARY KEY (repo, file)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS repo_oids (    -- Git LFS oid -> file, per repo; first mapping wins
    repo TEXT NOT NULL,
    oid TEXT NOT NULL,
    file TEXT NOT NULL,
    PRIMARY KEY (repo, oid)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS repo_shards (  -- shards each repo has registered (result 0 on repeats)
    repo TEXT NOT NULL,
    id TEXT NOT NULL,
    PRIMARY KEY (repo, id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS revoked_tokens (
    id TEXT PRIMARY KEY,
    revoked_at INTEGER NOT NULL
);
"""

SCHEMA_VERSION = 1
# Version 0 had one namespace and stored every sha256 a client claimed. Its files become the
# files of the repo DEFAULT_REPO (what tokens name unless told otherwise); its claimed sha256s
# become that repo's oids, but no longer count as verified.
_MIGRATE_FROM_0 = """
INSERT OR IGNORE INTO repo_files SELECT 'default', hash FROM files;
INSERT OR IGNORE INTO repo_oids SELECT 'default', sha256, hash FROM files WHERE sha256 IS NOT NULL;
INSERT OR IGNORE INTO repo_shards SELECT 'default', id FROM shards;
UPDATE files SET sha256 = NULL;
DROP INDEX IF EXISTS files_by_sha256;
"""

DEFAULT_REPO = "default"
# How often (in bytes of file content) a sha256 verification reports progress.
PROGRESS_STEP = 8 * 1024 * 1024

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

    def __init__(self, root: Path, objects: ObjectStore | None = None, private: bool = False) -> None:
        """`private`: the data directory is for this process's user only (0700 directories,
        0600 files), as a server's must be; a serverless local store follows the umask."""
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700 if private else 0o777)
        if private:
            self.root.chmod(0o700)
        self.objects: ObjectStore = objects or DirectoryObjectStore(self.root, file_mode=0o600 if private else 0o644)
        self._local = threading.local()
        self._migrate()

    def _migrate(self) -> None:
        conn = self._connection()
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise StoreError(500, f"{self.root} was written by a newer git-xet (index version {version}); upgrade git-xet")
        had_files = conn.execute("SELECT name FROM sqlite_master WHERE name = 'files'").fetchone() is not None
        conn.executescript(_SCHEMA)  # idempotent; executescript commits itself
        if version < SCHEMA_VERSION:
            with self._db() as db:
                if had_files and version == 0:
                    for statement in _MIGRATE_FROM_0.strip().split(";\n"):
                        db.execute(statement)
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

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

    def _check_terms_in_range(self, info, layouts: dict[bytes, XorbLayout]) -> None:
        """Every term names an existing xorb and a non-empty chunk range inside it (cheap: no
        per-chunk work), so the work budget can be computed before anything is hashed."""
        name = hashes.hash_to_hex(info.file_hash)
        if info.verification is None:
            raise StoreError(400, f"file {name} has no verification entries")
        for term in info.terms:
            layout = layouts.get(term.xorb_hash)
            if layout is None:
                layout = self.xorb_layout(hashes.hash_to_hex(term.xorb_hash))
                if layout is None:
                    raise StoreError(400, f"file {name} references missing xorb {hashes.hash_to_hex(term.xorb_hash)}", MISSING_XORB)
                layouts[term.xorb_hash] = layout
            if not term.chunk_start < term.chunk_end <= len(layout.chunk_hashes):
                raise StoreError(400, f"file {name} references chunks [{term.chunk_start}, {term.chunk_end}) outside xorb {layout.hash}")

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
                raise StoreError(400, f"file {name}: a verification hash does not match xorb {layout.hash}")
            if length != term.unpacked_bytes:
                raise StoreError(400, f"file {name}: a term's length does not match xorb {layout.hash}")
            all_hashes += term_hashes
            all_sizes += term_sizes
        if hashes.file_hash(all_hashes, all_sizes) != info.file_hash:
            raise StoreError(400, f"file {name}: its hash does not match the chunks it references")

    def _sha256_of(self, stored: StoredFile, progress: Callable[[int], None] | None) -> str:
        """The sha256 of a registered-to-be file, computed from the stored chunks."""
        digest = hashlib.sha256()
        since = 0
        for chunk in self.iter_file_bytes(stored):
            digest.update(chunk)
            since += len(chunk)
            if progress is not None and since >= PROGRESS_STEP:
                progress(since)
                since = 0
        if progress is not None and since:
            progress(since)
        return digest.hexdigest()

    def register_shard(
        self,
        body: bytes,
        repo: str = DEFAULT_REPO,
        verify_sha256: bool = False,
        progress: Callable[[int, int], None] | None = None,
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

        Returns True when the shard was new for this repo (result 1), False for a repeat.
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
            claim = info.sha256.hex() if info.sha256 else None
            known = self._verified_sha256(name)
            if known is not None:
                if claim is not None and claim != known:
                    raise StoreError(400, f"file {name}: its sha256 metadata {claim} does not match its content (sha256 {known})")
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
            actual = self._sha256_of(stored, advance)
            if actual != claim:
                raise StoreError(400, f"file {stored.hash}: its sha256 metadata {claim} does not match its content (sha256 {actual})")
            oids[stored.hash] = computed[stored.hash] = actual

        self.objects.put(f"shards/{shard_id}.mdb", body)
        with self._db() as db:
            db.execute("INSERT OR IGNORE INTO shards VALUES (?, ?)", (shard_id, len(body)))
            if db.execute("SELECT 1 FROM repo_shards WHERE repo = ? AND id = ?", (repo, shard_id)).fetchone():
                return False
            db.execute("INSERT INTO repo_shards VALUES (?, ?)", (repo, shard_id))
            for info in shard.files:
                name = hashes.hash_to_hex(info.file_hash)
                db.execute(
                    "INSERT OR IGNORE INTO files VALUES (?, ?, ?, ?)",
                    (
                        name,
                        info.size,
                        computed.get(name),
                        b"".join(_TERM.pack(t.xorb_hash, t.cas_flags, t.unpacked_bytes, t.chunk_start, t.chunk_end) for t in info.terms),
                    ),
                )
                if name in computed:
                    db.execute("UPDATE files SET sha256 = ? WHERE hash = ? AND sha256 IS NULL", (computed[name], name))
                db.execute("INSERT OR IGNORE INTO repo_files VALUES (?, ?)", (repo, name))
                if name in oids:
                    db.execute("INSERT OR IGNORE INTO repo_oids VALUES (?, ?, ?)", (repo, oids[name], name))
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

    def _verified_sha256(self, file_hex: str) -> str | None:
        row = self._connection().execute("SELECT sha256 FROM files WHERE hash = ?", (file_hex,)).fetchone()
        return row[0] if row else None

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

    def file_by_sha256(self, oid: str, repo: str = DEFAULT_REPO) -> StoredFile | None:
        """The XET file that this Git LFS oid (sha256) names in `repo`, if any."""
        row = self._connection().execute("SELECT file FROM repo_oids WHERE repo = ? AND oid = ?", (repo, oid.lower())).fetchone()
        return self.get_file(row[0]) if row else None

    def repo_has_file(self, repo: str, file_hex: str) -> bool:
        """Whether `repo` registered this file (and so may read it)."""
        row = self._connection().execute("SELECT 1 FROM repo_files WHERE repo = ? AND file = ?", (repo, file_hex.lower())).fetchone()
        return row is not None

    def stats(self) -> dict[str, int]:
        """How many of each thing the index holds (for operators, and tests that must show an
        attack changed nothing)."""
        conn = self._connection()
        tables = ("xorbs", "files", "dedup", "shards", "repo_files", "repo_oids", "repo_shards", "revoked_tokens")
        return {t: conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in tables}

    # ------------------------------------------------------------------ token revocation

    def revoke_token(self, token_id: str, now: int) -> None:
        """Put a user token's id on the revocation list (tokens minted from it die with it)."""
        with self._db() as db:
            db.execute("INSERT OR IGNORE INTO revoked_tokens VALUES (?, ?)", (token_id, now))

    def revoked_token_ids(self) -> frozenset[str]:
        return frozenset(r[0] for r in self._connection().execute("SELECT id FROM revoked_tokens"))

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
