"""The embedded index: one SQLite file in the data directory (WAL; reads on a connection per
thread, writes on one connection shared under the write lock).

SQLite has one writer at a time (BEGIN IMMEDIATE), which is what makes `before_insert` in
add_xorb exclusive; several processes may share the file (the agents of a push into a local
store). The schema version is `PRAGMA user_version`. Connections, the write lock and the group
commit that makes each write durable are sqlite_file's.

add_xorb skips the fsync: a xorb row only says "this durable object exists"; losing it in a
power cut leaves an orphaned object (gc collects it, a re-upload indexes it again), never a
dangling reference, and the shard commit that makes a file visible (hence `complete` to
git-lfs) fsyncs the WAL and with it the xorb rows before it.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..core.xorb import XorbLayout
from ..platform.locks import lock_range, opening_lock, unlock_range
from .errors import Conflict, Misconfigured, quota_exceeded, read_only_store
from .index_base import COLUMNS, DEFAULT_REPO, TABLES, LockRecord, NewXorb, ShardRegistration, StoredFile, layout_from_row, layout_row, pack_terms, unpack_terms, xorbs_of
from .sqlite_file import SqliteFile

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
CREATE TABLE IF NOT EXISTS xorb_refs (    -- which xorbs each file uses (gc keeps these)
    xorb TEXT NOT NULL,
    file TEXT NOT NULL,
    PRIMARY KEY (xorb, file)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS dedup (
    chunk_hash BLOB NOT NULL,
    xorb TEXT NOT NULL,
    PRIMARY KEY (chunk_hash, xorb)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS dedup_by_xorb ON dedup (xorb);
CREATE TABLE IF NOT EXISTS shards (
    id TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    body BLOB                        -- the shard, for small ones (else an object shards/<id>.mdb)
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
CREATE TABLE IF NOT EXISTS locks (        -- Git LFS file locks
    id TEXT PRIMARY KEY,
    repo TEXT NOT NULL,
    path TEXT NOT NULL,
    owner TEXT NOT NULL,
    ref TEXT,
    locked_at INTEGER NOT NULL,
    UNIQUE (repo, path)                   -- one lock per path: of racing takers one wins
);
CREATE TABLE IF NOT EXISTS trash (        -- deleted repo_files ('' oid) and repo_oids rows, restorable
    repo TEXT NOT NULL,
    file TEXT NOT NULL,
    oid TEXT NOT NULL,
    deleted_at INTEGER NOT NULL,
    PRIMARY KEY (repo, file, oid)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS trash_by_file ON trash (file);
CREATE TABLE IF NOT EXISTS quotas (       -- the most logical bytes a repo may hold (no row: no limit)
    repo TEXT PRIMARY KEY,
    max_bytes INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS repo_files_by_file ON repo_files (file);
CREATE INDEX IF NOT EXISTS repo_shards_by_id ON repo_shards (id);
"""

SCHEMA_VERSION = 6  # 4: locks; 5: the trash table (repository deletion with retention); 6: quotas
# A read-only copy of a version 3 to 5 index (a snapshot of a store from before locks, the trash
# or quotas) is served as it is: those versions only lack tables, and a read-only store has no
# locks to show, nothing in its trash and takes no pushes.
_OLDEST_READABLE = 3
# Stripes of xorb_writer_lock: writers of two xorbs wait for each other only when their
# hashes share a first byte, and then only for an object write.
XORB_LOCK_STRIPES = 256
# Version 0 had one namespace and stored every sha256 a client claimed. Its files become the
# files of the repo DEFAULT_REPO (what tokens name unless told otherwise); its claimed sha256s
# become that repo's oids, but no longer count as verified.
_MIGRATE_FROM_0 = f"""
INSERT OR IGNORE INTO repo_files SELECT '{DEFAULT_REPO}', hash FROM files;
INSERT OR IGNORE INTO repo_oids SELECT '{DEFAULT_REPO}', sha256, hash FROM files WHERE sha256 IS NOT NULL;
INSERT OR IGNORE INTO repo_shards SELECT '{DEFAULT_REPO}', id FROM shards;
UPDATE files SET sha256 = NULL;
DROP INDEX IF EXISTS files_by_sha256;
"""


_LOCK_COLUMNS = ", ".join(COLUMNS["locks"])


def _insert_xorb(db: sqlite3.Connection, xorb: NewXorb) -> bool:
    """add_xorb's work inside a write transaction: True if this recorded the xorb."""
    if db.execute("SELECT 1 FROM xorbs WHERE hash = ?", (xorb.layout.xorb_hex,)).fetchone() is not None:
        return False
    if xorb.before_insert is not None:
        xorb.before_insert()
    db.execute("INSERT INTO xorbs VALUES (?, ?, ?, ?, ?, ?, ?)", layout_row(xorb.layout, xorb.body_size))
    return True


def _logical_bytes(db: sqlite3.Connection, repo: str) -> int:
    return int(db.execute("SELECT coalesce(sum(f.size), 0) FROM repo_files r JOIN files f ON f.hash = r.file WHERE r.repo = ?", (repo,)).fetchone()[0])


def _check_quota(db: sqlite3.Connection, shard: ShardRegistration) -> None:
    """QuotaExceeded if the shard's files new to its repo take it past its quota (O(files of
    the repo) when it has one, nothing otherwise)."""
    row = db.execute("SELECT max_bytes FROM quotas WHERE repo = ?", (shard.repo,)).fetchone()
    if row is None:
        return
    new = {f.file_hex: f.size for f in shard.files}
    held = "SELECT 1 FROM repo_files WHERE repo = ? AND file = ?"
    adding = sum(size for file_hex, size in new.items() if db.execute(held, (shard.repo, file_hex)).fetchone() is None)
    used = _logical_bytes(db, shard.repo)
    if adding and used + adding > row[0]:
        raise quota_exceeded(shard.repo, row[0], used, adding)


def _stripe(xorb_hex: str) -> int:
    """The xorb's stripe of xorb_writer_lock (XORB_LOCK_STRIPES)."""
    return int(xorb_hex[:2], 16) % XORB_LOCK_STRIPES


class SqliteIndex:
    """MetadataIndex in one SQLite file. Thread-safe: reads on one connection per thread,
    writes on one shared by all (under the write lock)."""

    def __init__(self, path: Path, read_only: bool = False) -> None:
        """`read_only`: open for reading only (see SqliteFile); an index that would need a
        migration is then refused, since migrating writes."""
        self.path = Path(path)
        self._file = SqliteFile(self.path, read_only=read_only)
        self._xorb_stripes = [threading.Lock() for _ in range(XORB_LOCK_STRIPES)]
        self._xorb_lock_fd: int | None = None
        self._xorb_lock_file_opening = threading.Lock()
        self._has_locks = self._has_quotas = True
        if read_only:
            self._check_current()
            return
        with opening_lock(self.path):  # the agents of a first push into a new local store open it together
            self._migrate()

    def __repr__(self) -> str:
        return f"SqliteIndex({str(self.path)!r})"

    def _check_current(self) -> None:
        version = self._connection().execute("PRAGMA user_version").fetchone()[0]
        self._has_locks = version >= 4
        self._has_quotas = version >= 6
        if not _OLDEST_READABLE <= version <= SCHEMA_VERSION:
            newer = "a newer git-xet: upgrade git-xet" if version > SCHEMA_VERSION else "an older git-xet: open it once with write access to migrate it"
            raise Misconfigured(f"{self.path} (index version {version}) is read-only here and was written by {newer}")

    def _migrate(self) -> None:
        conn = self._connection()
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise Misconfigured(f"{self.path} was written by a newer git-xet (index version {version}); upgrade git-xet")
        if version == SCHEMA_VERSION:
            # Current: opening only reads. The idempotent schema script takes SQLite's locks, and
            # 8 agents opening at once while others write met its busy handler's sleeps (a
            # profiled 300-file push spent 2.9 s of agent time in it).
            return
        had_files = conn.execute("SELECT name FROM sqlite_master WHERE name = 'files'").fetchone() is not None
        conn.executescript(_SCHEMA)  # idempotent; executescript commits itself
        if version < SCHEMA_VERSION:
            with self._db() as db:
                if had_files and version == 0:
                    for statement in _MIGRATE_FROM_0.strip().split(";\n"):
                        db.execute(statement)
                columns = {row[1] for row in db.execute("PRAGMA table_info(shards)")}
                if "body" not in columns:  # version 3 keeps small shards in their row
                    db.execute("ALTER TABLE shards ADD COLUMN body BLOB")
                if had_files and version < 2:  # version 2 added xorb_refs: fill it from the files' terms
                    for file_hex, blob in db.execute("SELECT hash, terms FROM files").fetchall():
                        db.executemany("INSERT OR IGNORE INTO xorb_refs VALUES (?, ?)", [(x, file_hex) for x in xorbs_of(unpack_terms(blob))])
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _connection(self) -> sqlite3.Connection:
        return self._file.reader()

    def _db(self, synced: bool = True) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        """A write transaction (SqliteFile.transaction)."""
        return self._file.transaction(synced)

    def unsynced_transaction(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        """A write transaction on this index's own writer, durable with the next synced commit:
        for best-effort rows in tables of others that share this database (storage/history.py)."""
        return self._file.transaction(synced=False)

    def close(self) -> None:
        self._file.close()
        if self._xorb_lock_fd is not None:
            os.close(self._xorb_lock_fd)
            self._xorb_lock_fd = None

    # ------------------------------------------------------------------ xorbs

    def add_xorb(self, layout: XorbLayout, body_size: int, before_insert: Callable[[], None] | None = None) -> bool:
        with self._db(synced=False) as db:
            return _insert_xorb(db, NewXorb(layout, body_size, before_insert))

    @contextmanager
    def xorb_writer_lock(self, xorb_hex: str) -> Iterator[None]:
        """One of XORB_LOCK_STRIPES stripes: a thread lock (POSIX record locks do not exclude
        threads of one process), then a one-byte range lock (platform/locks.py) of `<index>.xorbs.lock` (across
        processes). Not the write lock: an object write can take a while, and every other
        index write would wait for it."""
        with self._stripe_lock(_stripe(xorb_hex)):
            yield

    @contextmanager
    def xorb_writer_locks(self, xorb_hexes: Collection[str]) -> Iterator[None]:
        """Each stripe the xorbs fall in once, in ascending order (xorb_writer_lock takes one)."""
        with contextlib.ExitStack() as held:
            for stripe in sorted({_stripe(xorb_hex) for xorb_hex in xorb_hexes}):
                held.enter_context(self._stripe_lock(stripe))
            yield

    @contextmanager
    def _stripe_lock(self, stripe: int) -> Iterator[None]:
        with self._xorb_stripes[stripe]:
            fd = self._xorb_lock_file()
            lock_range(fd, stripe)
            try:
                yield
            finally:
                unlock_range(fd, stripe)

    def _xorb_lock_file(self) -> int:
        """The descriptor xorb_writer_lock's ranges are on, opened once (closing any descriptor
        of the file would drop every record lock this process holds on it)."""
        if self._file.read_only:
            raise read_only_store(self.path.parent)  # the lock guards a write
        with self._xorb_lock_file_opening:
            if self._xorb_lock_fd is None:
                self._xorb_lock_fd = os.open(f"{self.path}.xorbs.lock", os.O_RDWR | os.O_CREAT, 0o600)
            return self._xorb_lock_fd

    def remove_xorb_if_unindexed(self, xorb_hex: str, remove: Callable[[], None]) -> bool:
        with self._db() as db:
            if db.execute("SELECT 1 FROM xorbs WHERE hash = ?", (xorb_hex,)).fetchone() is not None:
                return False
            remove()
        return True

    def unreferenced_xorbs(self) -> Iterator[str]:
        rows = self._connection().execute("SELECT hash FROM xorbs WHERE NOT EXISTS (SELECT 1 FROM xorb_refs WHERE xorb = hash) ORDER BY hash")
        yield from (r[0] for r in rows.fetchall())

    def remove_xorb_if_unreferenced(self, xorb_hex: str, remove: Callable[[], None]) -> bool:
        with self._db() as db:
            if db.execute("SELECT 1 FROM xorb_refs WHERE xorb = ? LIMIT 1", (xorb_hex,)).fetchone() is not None:
                return False
            if db.execute("DELETE FROM xorbs WHERE hash = ?", (xorb_hex,)).rowcount == 0:
                return False
            db.execute("DELETE FROM dedup WHERE xorb = ?", (xorb_hex,))
            remove()
        return True

    def xorb_layout(self, xorb_hex: str) -> XorbLayout | None:
        row = self._connection().execute("SELECT chunk_hashes, byte_ends, chunk_sizes FROM xorbs WHERE hash = ?", (xorb_hex,)).fetchone()
        return None if row is None else layout_from_row(xorb_hex, *row)

    def iter_xorbs(self) -> Iterator[tuple[str, int]]:
        yield from self._connection().execute("SELECT hash, body_size FROM xorbs ORDER BY hash").fetchall()

    def shard_ids(self) -> frozenset[str]:
        return frozenset(r[0] for r in self._connection().execute("SELECT id FROM shards"))

    def shard_body(self, shard_id: str) -> bytes | None:
        row = self._connection().execute("SELECT body FROM shards WHERE id = ?", (shard_id,)).fetchone()
        return bytes(row[0]) if row and row[0] is not None else None

    # ------------------------------------------------------------------ files and shards

    def get_file(self, file_hex: str) -> StoredFile | None:
        row = self._connection().execute("SELECT size, sha256, terms FROM files WHERE hash = ?", (file_hex,)).fetchone()
        if row is None:
            return None
        size, sha256, blob = row
        return StoredFile(file_hex, size, sha256, unpack_terms(blob))

    def register_shard(self, shard: ShardRegistration, alongside: Callable[[Any], None] | None = None) -> bool:
        with self._db() as db:
            for xorb in shard.new_xorbs:
                _insert_xorb(db, xorb)
            db.execute("INSERT OR IGNORE INTO shards (id, size, body) VALUES (?, ?, ?)", (shard.shard_id, shard.size, shard.body))
            if db.execute("SELECT 1 FROM repo_shards WHERE repo = ? AND id = ?", (shard.repo, shard.shard_id)).fetchone():
                return False
            db.execute("INSERT INTO repo_shards VALUES (?, ?)", (shard.repo, shard.shard_id))
            _check_quota(db, shard)  # under the write lock: no other registration between check and insert
            used = sorted({x for f in shard.files for x in xorbs_of(f.terms)})
            for xorb_hex in used:  # gc may have collected one since CasStore checked (we hold the write lock now)
                if db.execute("SELECT 1 FROM xorbs WHERE hash = ?", (xorb_hex,)).fetchone() is None:
                    raise Conflict(f"xorb {xorb_hex} was collected as unused before this shard arrived; upload it again")
            for f in shard.files:
                db.executemany("INSERT OR IGNORE INTO xorb_refs VALUES (?, ?)", [(x, f.file_hex) for x in xorbs_of(f.terms)])
                db.execute("INSERT OR IGNORE INTO files VALUES (?, ?, ?, ?)", (f.file_hex, f.size, f.computed_sha256_hex, pack_terms(f.terms)))
                if f.computed_sha256_hex is not None:
                    db.execute("UPDATE files SET sha256 = ? WHERE hash = ? AND sha256 IS NULL", (f.computed_sha256_hex, f.file_hex))
                db.execute("INSERT OR IGNORE INTO repo_files VALUES (?, ?)", (shard.repo, f.file_hex))
                if f.oid is not None:
                    db.execute("INSERT OR IGNORE INTO repo_oids VALUES (?, ?, ?)", (shard.repo, f.oid, f.file_hex))
            db.executemany("INSERT OR IGNORE INTO dedup VALUES (?, ?)", shard.dedup)
            if alongside is not None:
                alongside(db)
        return True

    def file_for_oid(self, repo: str, oid: str) -> str | None:
        row = self._connection().execute("SELECT file FROM repo_oids WHERE repo = ? AND oid = ?", (repo, oid)).fetchone()
        return row[0] if row else None

    def repo_has_file(self, repo: str, file_hex: str) -> bool:
        return self._connection().execute("SELECT 1 FROM repo_files WHERE repo = ? AND file = ?", (repo, file_hex)).fetchone() is not None

    def dedup_xorbs(self, chunk: bytes, limit: int = 8) -> list[str]:
        rows = self._connection().execute("SELECT xorb FROM dedup WHERE chunk_hash = ? LIMIT ?", (chunk, limit)).fetchall()
        return [r[0] for r in rows]

    # ------------------------------------------------------------------ tokens, stats

    def correct_sha256(self, file_hex: str, wrong: str, right: str) -> int:
        with self._db() as db:
            if not db.execute("UPDATE files SET sha256 = ? WHERE hash = ? AND sha256 = ?", (right, file_hex, wrong)).rowcount:
                return 0
            return db.execute("DELETE FROM repo_oids WHERE file = ? AND oid = ?", (file_hex, wrong)).rowcount

    def revoke_token(self, token_id: str, now: int) -> None:
        with self._db() as db:
            db.execute("INSERT OR IGNORE INTO revoked_tokens VALUES (?, ?)", (token_id, now))

    def revoked_token_ids(self) -> frozenset[str]:
        return frozenset(r[0] for r in self._connection().execute("SELECT id FROM revoked_tokens"))

    # ------------------------------------------------------------------ locks

    def create_lock(self, lock: LockRecord) -> tuple[LockRecord, bool]:
        with self._db() as db:
            if db.execute("INSERT OR IGNORE INTO locks VALUES (?, ?, ?, ?, ?, ?)", lock).rowcount == 1:
                return lock, True
            row = db.execute(f"SELECT {_LOCK_COLUMNS} FROM locks WHERE repo = ? AND path = ?", (lock.repo, lock.path)).fetchone()
        return LockRecord(*row), False

    def find_locks(
        self, repo: str, *, path: str | None = None, lock_id: str | None = None, ref: str | None = None, after: str | None = None, limit: int = 100
    ) -> list[LockRecord]:
        if not self._has_locks:
            return []
        query, args = f"SELECT {_LOCK_COLUMNS} FROM locks WHERE repo = ?", [repo]
        for clause, value in (("path = ?", path), ("id = ?", lock_id), ("(ref = ? OR ref IS NULL)", ref), ("path > ?", after)):
            if value is not None:
                query, args = f"{query} AND {clause}", [*args, value]
        rows = self._connection().execute(f"{query} ORDER BY path LIMIT ?", (*args, limit)).fetchall()
        return [LockRecord(*r) for r in rows]

    def delete_lock(self, repo: str, lock_id: str, owner: str | None) -> tuple[LockRecord | None, bool]:
        with self._db() as db:
            row = db.execute(f"SELECT {_LOCK_COLUMNS} FROM locks WHERE repo = ? AND id = ?", (repo, lock_id)).fetchone()
            if row is None:
                return None, False
            lock = LockRecord(*row)
            if owner is not None and lock.owner != owner:
                return lock, False
            db.execute("DELETE FROM locks WHERE id = ?", (lock_id,))
        return lock, True

    # ------------------------------------------------------------------ quotas

    def set_quota(self, repo: str, max_bytes: int | None) -> None:
        with self._db() as db:
            if max_bytes is None:
                db.execute("DELETE FROM quotas WHERE repo = ?", (repo,))
            else:
                db.execute("INSERT INTO quotas VALUES (?, ?) ON CONFLICT (repo) DO UPDATE SET max_bytes = excluded.max_bytes", (repo, max_bytes))

    def quotas(self) -> dict[str, int]:
        if not self._has_quotas:
            return {}
        return dict(self._connection().execute("SELECT repo, max_bytes FROM quotas ORDER BY repo").fetchall())

    def logical_bytes(self, repo: str) -> int:
        return _logical_bytes(self._connection(), repo)

    # ------------------------------------------------------------------ deletion with retention

    def trash_files(self, repo: str, files: list[str] | None, now: int) -> int:
        with self._db() as db:
            if files is None:
                files = [r[0] for r in db.execute("SELECT file FROM repo_files WHERE repo = ?", (repo,))]
            moved = 0
            for file_hex in files:
                if not db.execute("DELETE FROM repo_files WHERE repo = ? AND file = ?", (repo, file_hex)).rowcount:
                    continue
                moved += 1
                db.execute("INSERT OR IGNORE INTO trash VALUES (?, ?, '', ?)", (repo, file_hex, now))
                db.execute("INSERT OR IGNORE INTO trash SELECT repo, file, oid, ? FROM repo_oids WHERE repo = ? AND file = ?", (now, repo, file_hex))
                db.execute("DELETE FROM repo_oids WHERE repo = ? AND file = ?", (repo, file_hex))
            db.execute("DELETE FROM repo_shards WHERE repo = ?", (repo,))
            return moved

    def restore_files(self, repo: str) -> int:
        with self._db() as db:
            restored = db.execute("INSERT OR IGNORE INTO repo_files SELECT repo, file FROM trash WHERE repo = ? AND oid = ''", (repo,)).rowcount
            db.execute("INSERT OR IGNORE INTO repo_oids SELECT repo, oid, file FROM trash WHERE repo = ? AND oid != ''", (repo,))
            db.execute("DELETE FROM trash WHERE repo = ?", (repo,))
            return restored

    def purge_trash(self, before: int) -> int:
        # One writer at a time: no registration runs between the check and the removal.
        with self._db() as db:
            db.execute("DELETE FROM trash WHERE deleted_at <= ?", (before,))
            gone = db.execute(
                "SELECT hash, terms FROM files WHERE NOT EXISTS (SELECT 1 FROM repo_files WHERE file = hash) AND NOT EXISTS (SELECT 1 FROM trash WHERE file = hash)"
            ).fetchall()
            for file_hex, blob in gone:
                db.executemany("DELETE FROM xorb_refs WHERE xorb = ? AND file = ?", [(x, file_hex) for x in xorbs_of(unpack_terms(blob))])
                db.execute("DELETE FROM files WHERE hash = ?", (file_hex,))
            db.execute("DELETE FROM shards WHERE NOT EXISTS (SELECT 1 FROM repo_shards WHERE repo_shards.id = shards.id)")
            return len(gone)

    def stats(self) -> dict[str, int]:
        conn = self._connection()
        present = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        return {t: conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] if t in present else 0 for t in TABLES}

    def export_rows(self, table: str) -> Iterator[tuple]:
        columns = COLUMNS[table]  # a KeyError for anything else: never SQL from a caller
        if not self._connection().execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).fetchone():
            return  # a read-only snapshot from before the table existed
        yield from self._connection().execute(f"SELECT {', '.join(columns)} FROM {table}")

    def import_rows(self, table: str, rows: list[tuple]) -> None:
        columns = COLUMNS[table]
        with self._db() as db:
            db.executemany(f"INSERT OR IGNORE INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})", rows)
