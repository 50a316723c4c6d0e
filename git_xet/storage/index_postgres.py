"""The shared index: PostgreSQL through psycopg 3, for any number of server replicas.

Concurrency comes from the database, not from a single writer: every write is an INSERT ...
ON CONFLICT (first writer wins) at READ COMMITTED, so two replicas registering the same shard
at once serialize on its unique key and exactly one sees it as new. A deadlock or
serialization failure rolls the whole transaction back and it is run again; so is a transaction
whose connection broke (PostgreSQL restarting, a network cut), for up to `retry_seconds`, on a
fresh connection. Every transaction is idempotent, so running one twice is harmless.

Schema versions live in the table `schema_version`; migrations run at start-up under an
advisory lock, so replicas starting together upgrade the database once.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any, TypeVar

import psycopg

from ..core.xorb import XorbLayout
from .errors import Conflict, Misconfigured, quota_exceeded, Unavailable
from .index_base import COLUMNS, TABLES, LockRecord, NewXorb, ShardRegistration, StoredFile, layout_from_row, layout_row, pack_terms, unpack_terms, xorbs_of

log = logging.getLogger("git_xet.storage")
T = TypeVar("T")



def _fill_xorb_refs(conn: psycopg.Connection) -> None:
    """Version 2's xorb_refs, from the terms of the files already registered."""
    after = ""
    while True:
        page = conn.execute("SELECT hash, terms FROM files WHERE hash > %s ORDER BY hash LIMIT %s", (after, _PAGE)).fetchall()
        with conn.cursor() as cur:
            rows = [(x, file_hex) for file_hex, blob in page for x in xorbs_of(unpack_terms(blob))]
            cur.executemany("INSERT INTO xorb_refs VALUES (%s, %s) ON CONFLICT DO NOTHING", rows)
        if len(page) < _PAGE:
            return
        after = page[-1][0]


# MIGRATIONS[n - 1] takes the schema from version n-1 to n: steps of SQL, or functions of the
# connection. A new database runs them all; all run in one transaction.
MIGRATIONS: tuple[tuple[str | Callable[[psycopg.Connection], None], ...], ...] = (
    ("""
    CREATE TABLE xorbs (
        hash TEXT PRIMARY KEY,
        num_chunks INTEGER NOT NULL,
        body_size BIGINT NOT NULL,
        unpacked_size BIGINT NOT NULL,
        chunk_hashes BYTEA NOT NULL,   -- 32 bytes per chunk
        byte_ends BYTEA NOT NULL,      -- u32 LE per chunk: end of chunk record in the xorb
        chunk_sizes BYTEA NOT NULL     -- u32 LE per chunk: uncompressed size
    );
    CREATE TABLE files (
        hash TEXT PRIMARY KEY,
        size BIGINT NOT NULL,
        sha256 TEXT,                   -- computed by the server from the bytes; NULL until then
        terms BYTEA NOT NULL           -- 48-byte FileDataSequenceEntry per term
    );
    CREATE TABLE dedup (chunk_hash BYTEA NOT NULL, xorb TEXT NOT NULL, PRIMARY KEY (chunk_hash, xorb));
    CREATE TABLE shards (id TEXT PRIMARY KEY, size BIGINT NOT NULL);
    CREATE TABLE repo_files (repo TEXT NOT NULL, file TEXT NOT NULL, PRIMARY KEY (repo, file));
    CREATE TABLE repo_oids (repo TEXT NOT NULL, oid TEXT NOT NULL, file TEXT NOT NULL, PRIMARY KEY (repo, oid));
    CREATE TABLE repo_shards (repo TEXT NOT NULL, id TEXT NOT NULL, PRIMARY KEY (repo, id));
    CREATE TABLE revoked_tokens (id TEXT PRIMARY KEY, revoked_at BIGINT NOT NULL);
    """,),
    # 2: which xorbs each file uses, so gc can tell a failed push's xorbs from live ones.
    ("""
    CREATE TABLE xorb_refs (xorb TEXT NOT NULL, file TEXT NOT NULL, PRIMARY KEY (xorb, file));
    CREATE INDEX dedup_by_xorb ON dedup (xorb);
    """, _fill_xorb_refs),
    # 3: small shards kept in their row instead of as objects (one write less per small push).
    ("ALTER TABLE shards ADD COLUMN body BYTEA",),
    # 4: Git LFS file locks; the unique (repo, path) decides which of racing takers wins.
    ("""
    CREATE TABLE locks (
        id TEXT PRIMARY KEY, repo TEXT NOT NULL, path TEXT NOT NULL, owner TEXT NOT NULL, ref TEXT,
        locked_at BIGINT NOT NULL, UNIQUE (repo, path)
    );
    """,),
    # 5: deleted repo_files ('' oid) and repo_oids rows, restorable until purged (retention).
    ("""
    CREATE TABLE trash (repo TEXT NOT NULL, file TEXT NOT NULL, oid TEXT NOT NULL, deleted_at BIGINT NOT NULL, PRIMARY KEY (repo, file, oid));
    CREATE INDEX trash_by_file ON trash (file);
    CREATE INDEX repo_files_by_file ON repo_files (file);
    CREATE INDEX repo_shards_by_id ON repo_shards (id);
    """,),
    # 6: per-repository quotas (logical bytes); no row, no limit.
    ("CREATE TABLE quotas (repo TEXT PRIMARY KEY, max_bytes BIGINT NOT NULL)",),
)
SCHEMA_VERSION = len(MIGRATIONS)
_MIGRATION_LOCK = 0x67697478  # advisory lock key held while migrating ("gitx")
_PAGE = 10_000
# The database rolled the transaction back to resolve a conflict with another: run it again.
_ROLLED_BACK = (psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected)
_LOCK_COLUMNS = ", ".join(COLUMNS["locks"])


def _only_value(row: tuple[Any, ...] | None) -> Any:
    """The one column of a query that always returns one row (an aggregate, the schema row)."""
    assert row is not None, "a single-row query returned no row"
    return row[0]


def _lock_xorb(conn: psycopg.Connection, xorb_hex: str) -> None:
    """Hold, until the transaction ends, the lock that writers and the collector of this xorb share."""
    conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (xorb_hex,))


def _insert_xorb(conn: psycopg.Connection, xorb: NewXorb) -> bool:
    """add_xorb's work inside a transaction: True if this recorded the xorb."""
    if xorb.before_insert is not None:
        # Writers (and the collector) of this xorb queue here: one runs before_insert.
        _lock_xorb(conn, xorb.layout.xorb_hex)
        if conn.execute("SELECT 1 FROM xorbs WHERE hash = %s", (xorb.layout.xorb_hex,)).fetchone() is not None:
            return False
        xorb.before_insert()
    cur = conn.execute("INSERT INTO xorbs VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING 1", layout_row(xorb.layout, xorb.body_size))
    return cur.fetchone() is not None


def _unregister_file(conn: psycopg.Connection, file_hex: str, used: list[str]) -> int:
    """purge_trash's removal of one file no repo holds: 1 if removed, 0 if a registration holds
    it again. The xorbs it uses are locked FOR UPDATE first: a registration of it holds them FOR
    SHARE until it commits, so the check after sees its repo_files row, and one that comes later
    waits and then inserts the file anew."""
    with conn.transaction():
        conn.execute("SELECT 1 FROM xorbs WHERE hash = ANY(%s) ORDER BY hash FOR UPDATE", (used,))
        removed = conn.execute(
            "DELETE FROM files WHERE hash = %s AND NOT EXISTS (SELECT 1 FROM repo_files WHERE file = %s) AND NOT EXISTS (SELECT 1 FROM trash WHERE file = %s)",
            (file_hex, file_hex, file_hex),
        ).rowcount
        if removed:
            conn.execute("DELETE FROM xorb_refs WHERE xorb = ANY(%s) AND file = %s", (used, file_hex))
        return removed


def _logical_bytes(conn: psycopg.Connection, repo: str) -> int:
    row = conn.execute("SELECT coalesce(sum(f.size), 0) FROM repo_files r JOIN files f ON f.hash = r.file WHERE r.repo = %s", (repo,)).fetchone()
    return int(_only_value(row))


def _check_quota(conn: psycopg.Connection, shard: ShardRegistration) -> None:
    """QuotaExceeded if the shard's files new to its repo take it past its quota. Registrations
    into a repo with a quota queue on a transaction advisory lock of the repo (seed 2), so two
    replicas cannot both pass the check with room for one."""
    row = conn.execute("SELECT max_bytes FROM quotas WHERE repo = %s", (shard.repo,)).fetchone()
    if row is None:
        return
    conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 2))", (shard.repo,))
    new = {f.file_hex: f.size for f in shard.files}
    held = {r[0] for r in conn.execute("SELECT file FROM repo_files WHERE repo = %s AND file = ANY(%s)", (shard.repo, list(new))).fetchall()}
    adding = sum(size for file_hex, size in new.items() if file_hex not in held)
    used = _logical_bytes(conn, shard.repo)
    if adding and used + adding > row[0]:
        raise quota_exceeded(shard.repo, row[0], used, adding)


class PostgresIndex:
    """MetadataIndex in a PostgreSQL database. Thread-safe: one connection per thread."""

    def __init__(self, url: str, retry_seconds: float = 30.0, connect_timeout: int = 10) -> None:
        self._url = url  # may hold a password: never logged, never in repr or errors
        self.retry_seconds = retry_seconds
        self.connect_timeout = connect_timeout
        self._local = threading.local()
        self._run(self._migrate)

    def __repr__(self) -> str:
        return "PostgresIndex(<url hidden>)"

    # ------------------------------------------------------------------ plumbing

    def _connection(self) -> psycopg.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None or conn.closed or conn.broken:
            conn = psycopg.connect(self._url, autocommit=True, connect_timeout=self.connect_timeout, application_name="git-xet")
            self._local.conn = conn
        return conn

    def _drop_connection(self) -> None:
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            try:
                conn.close()
            except psycopg.Error:
                pass

    def _run(self, work: Callable[[psycopg.Connection], T]) -> T:
        """Run `work` (one transaction at most) until it succeeds, retrying what the database
        says to retry and broken connections, for up to retry_seconds; then Unavailable."""
        deadline = time.monotonic() + self.retry_seconds
        delay = 0.05
        while True:
            try:
                return work(self._connection())
            except psycopg.OperationalError as exc:
                if not isinstance(exc, _ROLLED_BACK):  # else the connection is fine: run it again
                    self._drop_connection()
                if time.monotonic() >= deadline:
                    log.error("PostgreSQL index unavailable: %s", str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
                    raise Unavailable("the server's index database is unavailable; retry shortly") from None
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    def _migrate(self, conn: psycopg.Connection) -> None:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            row = conn.execute("SELECT version FROM schema_version").fetchone()
            version = 0 if row is None else row[0]
            if version > SCHEMA_VERSION:
                raise Misconfigured(f"the index database was written by a newer git-xet (schema version {version}); upgrade git-xet")
            for step in (step for steps in MIGRATIONS[version:] for step in steps):
                if callable(step):
                    step(conn)
                else:
                    conn.execute(step)
            if version < SCHEMA_VERSION:
                log.info("index database upgraded from schema version %d to %d", version, SCHEMA_VERSION)
            if row is None:
                conn.execute("INSERT INTO schema_version VALUES (%s)", (SCHEMA_VERSION,))
            elif version < SCHEMA_VERSION:
                conn.execute("UPDATE schema_version SET version = %s", (SCHEMA_VERSION,))

    def schema_version(self) -> int:
        return self._run(lambda conn: _only_value(conn.execute("SELECT version FROM schema_version").fetchone()))

    def close(self) -> None:
        self._drop_connection()

    # ------------------------------------------------------------------ xorbs

    def add_xorb(self, layout: XorbLayout, body_size: int, before_insert: Callable[[], None] | None = None) -> bool:
        def work(conn: psycopg.Connection) -> bool:
            with conn.transaction():
                return _insert_xorb(conn, NewXorb(layout, body_size, before_insert))

        return self._run(work)

    @contextmanager
    def xorb_writer_lock(self, xorb_hex: str) -> Iterator[None]:
        """A session advisory lock (seed 1: not _lock_xorb's, which add_xorb takes inside it),
        on this thread's connection. If that connection breaks meanwhile, PostgreSQL has
        released the lock with the session; closing it is how a failed unlock releases it."""

        def take(conn: psycopg.Connection) -> psycopg.Connection:
            conn.execute("SELECT pg_advisory_lock(hashtextextended(%s, 1))", (xorb_hex,))
            return conn

        conn = self._run(take)
        try:
            yield
        finally:
            try:
                conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 1))", (xorb_hex,))
            except psycopg.Error:
                conn.close()

    @contextmanager
    def xorb_writer_locks(self, xorb_hexes: Collection[str]) -> Iterator[None]:
        """Each xorb's lock once, in ascending order of the hashes."""
        with ExitStack() as held:
            for xorb_hex in sorted(set(xorb_hexes)):
                held.enter_context(self.xorb_writer_lock(xorb_hex))
            yield

    def remove_xorb_if_unindexed(self, xorb_hex: str, remove: Callable[[], None]) -> bool:
        def work(conn: psycopg.Connection) -> bool:
            with conn.transaction():
                _lock_xorb(conn, xorb_hex)
                if conn.execute("SELECT 1 FROM xorbs WHERE hash = %s", (xorb_hex,)).fetchone() is not None:
                    return False
                remove()
                return True

        return self._run(work)

    def unreferenced_xorbs(self) -> Iterator[str]:
        after = ""
        while True:
            page = self._run(
                lambda conn: conn.execute(
                    "SELECT hash FROM xorbs WHERE hash > %s AND NOT EXISTS (SELECT 1 FROM xorb_refs WHERE xorb = hash) ORDER BY hash LIMIT %s",
                    (after, _PAGE),  # noqa: B023 - _run calls it before `after` moves on
                ).fetchall()
            )
            yield from (r[0] for r in page)
            if len(page) < _PAGE:
                return
            after = page[-1][0]

    def remove_xorb_if_unreferenced(self, xorb_hex: str, remove: Callable[[], None]) -> bool:
        def work(conn: psycopg.Connection) -> bool:
            with conn.transaction():
                _lock_xorb(conn, xorb_hex)
                # The row lock waits for registrations holding this xorb FOR SHARE; the next
                # statement's snapshot then sees the references they committed.
                if conn.execute("SELECT 1 FROM xorbs WHERE hash = %s FOR UPDATE", (xorb_hex,)).fetchone() is None:
                    return False
                if conn.execute("SELECT 1 FROM xorb_refs WHERE xorb = %s LIMIT 1", (xorb_hex,)).fetchone() is not None:
                    return False
                conn.execute("DELETE FROM dedup WHERE xorb = %s", (xorb_hex,))
                conn.execute("DELETE FROM xorbs WHERE hash = %s", (xorb_hex,))
                remove()
                return True

        return self._run(work)

    def xorb_layout(self, xorb_hex: str) -> XorbLayout | None:
        row = self._run(lambda conn: conn.execute("SELECT chunk_hashes, byte_ends, chunk_sizes FROM xorbs WHERE hash = %s", (xorb_hex,)).fetchone())
        return None if row is None else layout_from_row(xorb_hex, *row)

    def iter_xorbs(self) -> Iterator[tuple[str, int]]:
        after = ""
        while True:
            page = self._run(
                lambda conn: conn.execute("SELECT hash, body_size FROM xorbs WHERE hash > %s ORDER BY hash LIMIT %s", (after, _PAGE)).fetchall()  # noqa: B023 - called at once
            )
            yield from page
            if len(page) < _PAGE:
                return
            after = page[-1][0]

    def shard_ids(self) -> frozenset[str]:
        return frozenset(r[0] for r in self._run(lambda conn: conn.execute("SELECT id FROM shards").fetchall()))

    def shard_body(self, shard_id: str) -> bytes | None:
        row = self._run(lambda conn: conn.execute("SELECT body FROM shards WHERE id = %s", (shard_id,)).fetchone())
        return bytes(row[0]) if row and row[0] is not None else None

    # ------------------------------------------------------------------ files and shards

    def get_file(self, file_hex: str) -> StoredFile | None:
        row = self._run(lambda conn: conn.execute("SELECT size, sha256, terms FROM files WHERE hash = %s", (file_hex,)).fetchone())
        if row is None:
            return None
        size, sha256, blob = row
        return StoredFile(file_hex, size, sha256, unpack_terms(blob))

    def register_shard(self, shard: ShardRegistration, alongside: Callable[[Any], None] | None = None) -> bool:
        # Files in shard order (within a shard the first file wins an oid, as with SQLite); a
        # deadlock between registrations locking rows in other orders is retried by _run.
        file_rows = [(f.file_hex, f.size, f.computed_sha256_hex, pack_terms(f.terms)) for f in shard.files]
        oid_rows = [(shard.repo, f.oid, f.file_hex) for f in shard.files if f.oid is not None]
        repo_file_rows = sorted({(shard.repo, f.file_hex) for f in shard.files})
        ref_rows = sorted({(x, f.file_hex) for f in shard.files for x in xorbs_of(f.terms)})
        used = sorted({x for x, _ in ref_rows})

        def work(conn: psycopg.Connection) -> bool:
            with conn.transaction():
                for xorb in shard.new_xorbs:
                    _insert_xorb(conn, xorb)
                conn.execute("INSERT INTO shards (id, size, body) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING", (shard.shard_id, shard.size, shard.body))
                cur = conn.execute("INSERT INTO repo_shards VALUES (%s, %s) ON CONFLICT DO NOTHING RETURNING 1", (shard.repo, shard.shard_id))
                if cur.fetchone() is None:
                    return False  # this repo registered the shard before (or a racing replica just did)
                _check_quota(conn, shard)
                # Hold the xorbs the files use against gc until we commit (and see that none went).
                present = conn.execute("SELECT hash FROM xorbs WHERE hash = ANY(%s) ORDER BY hash FOR SHARE", (used,)).fetchall()
                if len(present) != len(used):
                    gone = sorted(set(used) - {r[0] for r in present})[0]
                    raise Conflict(f"xorb {gone} was collected as unused before this shard arrived; upload it again")
                with conn.cursor() as cur:
                    cur.executemany("INSERT INTO xorb_refs VALUES (%s, %s) ON CONFLICT DO NOTHING", ref_rows)
                    cur.executemany(
                        "INSERT INTO files VALUES (%s, %s, %s, %s) ON CONFLICT (hash) DO UPDATE SET sha256 = EXCLUDED.sha256 "
                        "WHERE files.sha256 IS NULL AND EXCLUDED.sha256 IS NOT NULL",
                        file_rows,
                    )
                    cur.executemany("INSERT INTO repo_files VALUES (%s, %s) ON CONFLICT DO NOTHING", repo_file_rows)
                    cur.executemany("INSERT INTO repo_oids VALUES (%s, %s, %s) ON CONFLICT DO NOTHING", oid_rows)
                    cur.executemany("INSERT INTO dedup VALUES (%s, %s) ON CONFLICT DO NOTHING", sorted(shard.dedup))
                if alongside is not None:
                    alongside(conn)
                return True

        return self._run(work)

    def file_for_oid(self, repo: str, oid: str) -> str | None:
        row = self._run(lambda conn: conn.execute("SELECT file FROM repo_oids WHERE repo = %s AND oid = %s", (repo, oid)).fetchone())
        return row[0] if row else None

    def repo_has_file(self, repo: str, file_hex: str) -> bool:
        row = self._run(lambda conn: conn.execute("SELECT 1 FROM repo_files WHERE repo = %s AND file = %s", (repo, file_hex)).fetchone())
        return row is not None

    def dedup_xorbs(self, chunk: bytes, limit: int = 8) -> list[str]:
        rows = self._run(lambda conn: conn.execute("SELECT xorb FROM dedup WHERE chunk_hash = %s LIMIT %s", (chunk, limit)).fetchall())
        return [r[0] for r in rows]

    # ------------------------------------------------------------------ tokens, stats

    def correct_sha256(self, file_hex: str, wrong: str, right: str) -> int:
        def work(conn: psycopg.Connection) -> int:
            with conn.transaction():
                if not conn.execute("UPDATE files SET sha256 = %s WHERE hash = %s AND sha256 = %s", (right, file_hex, wrong)).rowcount:
                    return 0
                return conn.execute("DELETE FROM repo_oids WHERE file = %s AND oid = %s", (file_hex, wrong)).rowcount

        return self._run(work)

    def revoke_token(self, token_id: str, now: int) -> None:
        self._run(lambda conn: conn.execute("INSERT INTO revoked_tokens VALUES (%s, %s) ON CONFLICT DO NOTHING", (token_id, now)))

    def revoked_token_ids(self) -> frozenset[str]:
        return frozenset(r[0] for r in self._run(lambda conn: conn.execute("SELECT id FROM revoked_tokens").fetchall()))

    # ------------------------------------------------------------------ locks

    def create_lock(self, lock: LockRecord) -> tuple[LockRecord, bool]:
        def work(conn: psycopg.Connection) -> tuple[LockRecord, bool]:
            # The unique (repo, path) decides: a taker that loses reads the winner's row (in a
            # statement of its own, whose snapshot sees the winner's commit). A lock released
            # between the two is retried.
            while True:
                if conn.execute("INSERT INTO locks VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING 1", lock).fetchone():
                    return lock, True
                row = conn.execute(f"SELECT {_LOCK_COLUMNS} FROM locks WHERE repo = %s AND path = %s", (lock.repo, lock.path)).fetchone()
                if row is not None:
                    return LockRecord(*row), False

        return self._run(work)

    def find_locks(
        self, repo: str, *, path: str | None = None, lock_id: str | None = None, ref: str | None = None, after: str | None = None, limit: int = 100
    ) -> list[LockRecord]:
        query, args = f"SELECT {_LOCK_COLUMNS} FROM locks WHERE repo = %s", [repo]
        for clause, value in (("path = %s", path), ("id = %s", lock_id), ("(ref = %s OR ref IS NULL)", ref), ('path COLLATE "C" > %s', after)):
            if value is not None:
                query, args = f"{query} AND {clause}", [*args, value]
        # COLLATE "C": the same byte order as SQLite, so pages and cursors agree across indexes.
        rows = self._run(lambda conn: conn.execute(f'{query} ORDER BY path COLLATE "C" LIMIT %s', (*args, limit)).fetchall())
        return [LockRecord(*r) for r in rows]

    def delete_lock(self, repo: str, lock_id: str, owner: str | None) -> tuple[LockRecord | None, bool]:
        def work(conn: psycopg.Connection) -> tuple[LockRecord | None, bool]:
            with conn.transaction():
                row = conn.execute(f"SELECT {_LOCK_COLUMNS} FROM locks WHERE repo = %s AND id = %s FOR UPDATE", (repo, lock_id)).fetchone()
                if row is None:
                    return None, False
                lock = LockRecord(*row)
                if owner is not None and lock.owner != owner:
                    return lock, False
                conn.execute("DELETE FROM locks WHERE id = %s", (lock_id,))
                return lock, True

        return self._run(work)


    # ------------------------------------------------------------------ quotas

    def set_quota(self, repo: str, max_bytes: int | None) -> None:
        if max_bytes is None:
            self._run(lambda conn: conn.execute("DELETE FROM quotas WHERE repo = %s", (repo,)))
        else:
            self._run(lambda conn: conn.execute("INSERT INTO quotas VALUES (%s, %s) ON CONFLICT (repo) DO UPDATE SET max_bytes = EXCLUDED.max_bytes", (repo, max_bytes)))

    def quotas(self) -> dict[str, int]:
        return {r: int(b) for r, b in self._run(lambda conn: conn.execute("SELECT repo, max_bytes FROM quotas ORDER BY repo").fetchall())}

    def logical_bytes(self, repo: str) -> int:
        return self._run(lambda conn: _logical_bytes(conn, repo))

    # ------------------------------------------------------------------ deletion with retention

    def trash_files(self, repo: str, files: list[str] | None, now: int) -> int:
        def work(conn: psycopg.Connection) -> int:
            with conn.transaction():
                chosen = files if files is not None else [r[0] for r in conn.execute("SELECT file FROM repo_files WHERE repo = %s", (repo,)).fetchall()]
                moved = conn.execute("DELETE FROM repo_files WHERE repo = %s AND file = ANY(%s) RETURNING file", (repo, chosen)).fetchall()
                names = [r[0] for r in moved]
                with conn.cursor() as cur:
                    cur.executemany("INSERT INTO trash VALUES (%s, %s, '', %s) ON CONFLICT DO NOTHING", [(repo, f, now) for f in names])
                conn.execute(
                    "WITH gone AS (DELETE FROM repo_oids WHERE repo = %s AND file = ANY(%s) RETURNING repo, file, oid) "
                    "INSERT INTO trash SELECT repo, file, oid, %s FROM gone ON CONFLICT DO NOTHING",
                    (repo, names, now),
                )
                conn.execute("DELETE FROM repo_shards WHERE repo = %s", (repo,))
                return len(names)

        return self._run(work)

    def restore_files(self, repo: str) -> int:
        def work(conn: psycopg.Connection) -> int:
            with conn.transaction():
                restored = conn.execute("INSERT INTO repo_files SELECT repo, file FROM trash WHERE repo = %s AND oid = '' ON CONFLICT DO NOTHING", (repo,)).rowcount
                conn.execute("INSERT INTO repo_oids SELECT repo, oid, file FROM trash WHERE repo = %s AND oid <> '' ON CONFLICT DO NOTHING", (repo,))
                conn.execute("DELETE FROM trash WHERE repo = %s", (repo,))
                return restored

        return self._run(work)

    def purge_trash(self, before: int) -> int:
        self._run(lambda conn: conn.execute("DELETE FROM trash WHERE deleted_at <= %s", (before,)))
        candidates = self._run(
            lambda conn: conn.execute(
                "SELECT hash, terms FROM files WHERE NOT EXISTS (SELECT 1 FROM repo_files WHERE file = hash) AND NOT EXISTS (SELECT 1 FROM trash WHERE file = hash)"
            ).fetchall()
        )
        gone = sum(self._run(functools.partial(_unregister_file, file_hex=f, used=sorted(xorbs_of(unpack_terms(bytes(b)))))) for f, b in candidates)
        self._run(lambda conn: conn.execute("DELETE FROM shards WHERE NOT EXISTS (SELECT 1 FROM repo_shards WHERE repo_shards.id = shards.id)"))
        return gone

    def stats(self) -> dict[str, int]:
        def work(conn: psycopg.Connection) -> dict[str, int]:
            return {t: _only_value(conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()) for t in TABLES}

        return self._run(work)

    def export_rows(self, table: str) -> Iterator[tuple]:
        columns = COLUMNS[table]  # a KeyError for anything else: never SQL from a caller
        key = ", ".join(columns)  # every column together is unique: pages ordered by all of them
        last: tuple | None = None
        while True:
            where = f"WHERE ({key}) > ({', '.join(['%s'] * len(columns))})" if last else ""
            query = f"SELECT {key} FROM {table} {where} ORDER BY {key} LIMIT {_PAGE}"
            page = self._run(lambda conn: conn.execute(query, last or ()).fetchall())  # noqa: B023 - called at once
            yield from (tuple(bytes(v) if isinstance(v, memoryview) else v for v in row) for row in page)
            if len(page) < _PAGE:
                return
            last = page[-1]

    def import_rows(self, table: str, rows: list[tuple]) -> None:
        columns = COLUMNS[table]
        query = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))}) ON CONFLICT DO NOTHING"

        def work(conn: psycopg.Connection) -> None:
            with conn.transaction(), conn.cursor() as cur:
                cur.executemany(query, rows)

        self._run(work)
