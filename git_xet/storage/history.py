"""What happened to the store, for operators: recent pushes, stored bytes over time, gc runs.

Kept in the index's own database (the SQLite file in the data directory, or the PostgreSQL
database replicas share), in tables of its own that the index never reads:

    history_pushes   one row per shard a repo registered: repo, files, bytes, time
    history_samples  the store's totals at a moment: one row per hour with pushes, one per gc run
                     (with the bytes it freed)

Recording is best effort: a push never fails because its history row could not be written (the
failure is logged and counted as an index error). Nor does it cost a push a sync: on SQLite the
row is written in the shard registration's own transaction (push_alongside), or else through
the index's own writer without an fsync of its own (durable with the index's next synced
commit), on PostgreSQL with `synchronous_commit = off`. A separate SQLite
connection cost each small-file push a commit, an fsync and, when it met the index's writer,
SQLite's busy sleeps: a third of the server's time on a push of 300 small files. The store's totals are computed from the
index tables on demand (StoreTotals), so every replica reports the same figures.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, NamedTuple

from ..core.xorb import stored_size
from .index_sqlite import SqliteIndex

log = logging.getLogger("git_xet.server")

_INSERT_PUSH = "INSERT INTO history_pushes VALUES (?, ?, ?, ?)"
# A sample of the store's totals is recorded with a push at most this often.
SAMPLE_INTERVAL = 3600
RECENT_PUSHES = 50

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS history_pushes (at DOUBLE PRECISION NOT NULL, repo TEXT NOT NULL, files BIGINT NOT NULL, bytes BIGINT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS history_samples (at DOUBLE PRECISION NOT NULL, kind TEXT NOT NULL, stored_bytes BIGINT NOT NULL, xorbs BIGINT NOT NULL, freed_bytes BIGINT NOT NULL)",
)


# Each history table's columns, in the order export_rows gives and import_rows takes them.
COLUMNS = {
    "history_pushes": ("at", "repo", "files", "bytes"),
    "history_samples": ("at", "kind", "stored_bytes", "xorbs", "freed_bytes"),
}


class Push(NamedTuple):
    at: float
    repo: str
    files: int
    bytes: int


class Sample(NamedTuple):
    at: float
    kind: str  # "push" (hourly, with pushes) or "gc"
    stored_bytes: int
    xorbs: int
    freed_bytes: int


class StoreTotals(NamedTuple):
    """The whole store now: xorbs and their stored (objects: compressed chunks and footer) and unpacked bytes, shards,
    and the logical bytes of every repo's files (a file in two repos counts twice)."""

    xorbs: int
    stored_bytes: int
    unpacked_bytes: int
    shards: int
    logical_bytes: int

    @property
    def dedup_saved_bytes(self) -> int:
        """Bytes the repos' files would take without chunk dedup, less what their chunks take."""
        return max(0, self.logical_bytes - self.unpacked_bytes)


class GcTotals(NamedTuple):
    runs: int
    freed_bytes: int


class History:
    """The history tables of one index database (`connect` opens a DB-API connection to it;
    `placeholder` is its parameter marker). One connection per thread. `transaction`, if given,
    opens a write transaction on the index's own writer (SQLite), which writes go through."""

    def __init__(
        self, connect: Callable[[], Any], placeholder: str, writable: bool = True, transaction: Callable[[], AbstractContextManager[Any]] | None = None
    ) -> None:
        self._connect = connect
        self._mark = placeholder
        self.writable = writable
        self._transaction = transaction
        self._local = threading.local()
        self._made = False
        self._last_sample = float("-inf")  # of kind "push", as this process last saw it

    def _conn(self) -> Any:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
        return conn

    def _sql(self, text: str) -> str:
        return text.replace("?", self._mark)

    def _query(self, text: str, args: Sequence[object] = ()) -> list[tuple]:
        try:
            self._ensure_tables()
            return list(self._conn().execute(self._sql(text), args).fetchall())
        except Exception:
            self._local.conn = None  # a broken connection is opened again next time
            raise

    def _write(self, text: str, args: Sequence[object]) -> None:
        if not self.writable:
            return
        self._ensure_tables()
        if self._transaction is not None:
            with self._transaction() as db:
                db.execute(self._sql(text), args)
            return
        conn = self._conn()
        try:
            conn.execute(self._sql(text), args)
            conn.commit()
        except Exception:
            self._local.conn = None
            raise

    def _ensure_tables(self) -> None:
        if self._made or not self.writable:
            return
        conn = self._conn()
        for statement in _SCHEMA:
            conn.execute(statement)
        conn.commit()
        self._made = True

    # ------------------------------------------------------------------ writes

    def record_push(self, repo: str, files: int, size: int, now: float | None = None) -> None:
        """A shard newly registered by `repo`; and, at most once per SAMPLE_INTERVAL, the totals."""
        at = time.time() if now is None else now
        self._write(_INSERT_PUSH, (at, repo, files, size))
        self.sample_if_due(at)

    def push_alongside(self, repo: str, files: int, size: int) -> Callable[[Any], None] | None:
        """record_push's row, as a write for the shard registration's own transaction (the
        `alongside` of CasStore.register_shard), when this history writes through the index's
        SQLite writer: a small file's push then commits once, not twice (a BEGIN, a COMMIT and
        its WAL frames less per small file). None otherwise (PostgreSQL, a read-only store):
        record_push after the registration instead. Either way, sample_if_due after it."""
        if self._transaction is None or not self.writable:
            return None
        self._ensure_tables()
        insert = self._sql(_INSERT_PUSH)

        def write(db: Any) -> None:
            try:
                db.execute(insert, (time.time(), repo, files, size))
            except sqlite3.Error as exc:  # best effort: the registration stands without its row
                log.warning("could not record a push of %s in the history: %s", repo, type(exc).__name__)

        return write

    def sample_if_due(self, at: float | None = None) -> None:
        """The store's totals, if this process has seen no sample for SAMPLE_INTERVAL."""
        at = time.time() if at is None else at
        if not self.writable or at - self._last_sample < SAMPLE_INTERVAL:
            return  # this process saw a sample recent enough: no query per push
        last = self._query("SELECT max(at) FROM history_samples WHERE kind = 'push'")
        if last and last[0][0] is not None and at - float(last[0][0]) < SAMPLE_INTERVAL:
            self._last_sample = float(last[0][0])  # another process (replica, worker) sampled
            return
        self.record_sample("push", 0, at)
        self._last_sample = at

    def record_sample(self, kind: str, freed_bytes: int = 0, now: float | None = None) -> None:
        """The store's stored bytes now (kind "gc" with the bytes a gc run freed)."""
        totals = self.totals()
        self._write("INSERT INTO history_samples VALUES (?, ?, ?, ?, ?)", (time.time() if now is None else now, kind, totals.stored_bytes, totals.xorbs, freed_bytes))

    # ------------------------------------------------------------------ reads

    def recent_pushes(self, limit: int = RECENT_PUSHES) -> list[Push]:
        rows = self._query("SELECT at, repo, files, bytes FROM history_pushes ORDER BY at DESC LIMIT ?", (limit,))
        return [Push(float(a), str(r), int(f), int(b)) for a, r, f, b in rows]

    def samples(self, since: float = 0.0) -> list[Sample]:
        rows = self._query("SELECT at, kind, stored_bytes, xorbs, freed_bytes FROM history_samples WHERE at >= ? ORDER BY at", (since,))
        return [Sample(float(a), str(k), int(s), int(x), int(f)) for a, k, s, x, f in rows]

    def gc_totals(self) -> GcTotals:
        rows = self._query("SELECT count(*), coalesce(sum(freed_bytes), 0) FROM history_samples WHERE kind = 'gc'")
        return GcTotals(int(rows[0][0]), int(rows[0][1]))

    def totals(self) -> StoreTotals:
        xorbs, body, chunks, unpacked = self._query(
            "SELECT count(*), coalesce(sum(body_size), 0), coalesce(sum(num_chunks), 0), coalesce(sum(unpacked_size), 0) FROM xorbs"
        )[0]
        # A stored object is its body and a footer rebuilt per xorb (core.xorb.stored_size, linear
        # in both): the sum over xorbs, as usage's stored bytes and the objects on disk add up.
        footer, per_chunk = stored_size(0, 0), stored_size(0, 1) - stored_size(0, 0)
        stored = int(body) + int(xorbs) * footer + int(chunks) * per_chunk
        shards = self._query("SELECT count(*) FROM shards")[0][0]
        logical = self._query("SELECT coalesce(sum(f.size), 0) FROM repo_files r JOIN files f ON f.hash = r.file")[0][0]
        return StoreTotals(int(xorbs), int(stored), int(unpacked), int(shards), int(logical))

    # ------------------------------------------------------------------ copying (git xet copy-index)

    def export_rows(self, table: str) -> list[tuple]:
        """Every row of a history table (COLUMNS order)."""
        columns = ", ".join(COLUMNS[table])  # a KeyError for anything else: never SQL from a caller
        return self._query(f"SELECT {columns} FROM {table} ORDER BY {columns}")

    def import_rows(self, table: str, rows: list[tuple]) -> int:
        """Add the rows not already there (the same values in every column): a copy run again
        adds nothing. One pass over each side, the target's rows held as a set. The number added."""
        columns = COLUMNS[table]
        present = {tuple(row) for row in self.export_rows(table)}
        new = [tuple(row) for row in rows if tuple(row) not in present]
        conn = self._conn()
        try:
            conn.cursor().executemany(self._sql(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"), new)
            conn.commit()
        except Exception:
            self._local.conn = None
            raise
        return len(new)

    def ping(self) -> None:
        """Fail unless the index database answers (readiness)."""
        self._query("SELECT 1")


def copy_history(source: History, target: History) -> dict[str, int]:
    """Copy every history row of `source` into `target` (git xet copy-index, after the index's
    own tables); the rows read per table."""
    copied = {}
    for table in COLUMNS:
        rows = source.export_rows(table)
        target.import_rows(table, rows)
        copied[table] = len(rows)
    return copied


def open_history(index_url: str | None, data_dir: Path, writable: bool = True, index: object = None) -> History:
    """The history of the index `index_url` names, or of the SQLite index in `data_dir` (written
    through `index`'s own writer when that is the open SqliteIndex of the same file)."""
    if index_url is None:
        path = Path(data_dir) / "index.sqlite"
        if writable:
            transaction = index.unsynced_transaction if isinstance(index, SqliteIndex) and index.path.resolve() == path.resolve() else None
            return History(lambda: sqlite3.connect(path, timeout=30, check_same_thread=False), "?", transaction=transaction)
        return History(lambda: sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, timeout=30, check_same_thread=False), "?", writable=False)
    import psycopg

    # autocommit: a read must not leave a transaction open. connect_timeout: a readiness probe must answer while the database is down, not hang.
    # synchronous_commit off: a history row is best effort, and a push must not wait for its WAL flush.
    def connect() -> Any:
        conn = psycopg.connect(index_url, autocommit=True, connect_timeout=5, application_name="git-xet-history")
        conn.execute("SET synchronous_commit = off")
        return conn

    return History(connect, "%s", writable)
