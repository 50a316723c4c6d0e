"""Small objects of a directory store, as rows of one SQLite file (`<root>/objects.sqlite`).

A push of a thousand small files stores a thousand small xorbs. As files, each one cost a temp
file created, written and fsynced, hard-linked into place, unlinked, and its directory fsynced
(a new directory, too, for the first 256): in a profiled push into a local store, ~40% of the
agents' time. As rows, each is one INSERT whose commit concurrent writers share a WAL fsync
for (sqlite_file's group commit); SQLite reads and writes blobs of this size faster than the
file system does separate files.

DirectoryObjectStore decides which objects come here (PACKED_BELOW) and looks here first.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from ..platform.locks import opening_lock
from .errors import Misconfigured
from .sqlite_file import SqliteFile

FILE_NAME = "objects.sqlite"
SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS objects (
    key TEXT PRIMARY KEY,
    data BLOB NOT NULL,
    stored_at REAL NOT NULL          -- seconds since the epoch: what gc's grace period reads
);
"""


class PackedObjects:
    """Objects as (key, bytes) rows; every write durable when it returns. Opened on first use:
    a store that never holds a small object never has the file."""

    def __init__(self, root: Path, read_only: bool = False) -> None:
        self.path = Path(root) / FILE_NAME
        self.read_only = read_only  # see SqliteFile
        self._file: SqliteFile | None = None
        self._opening = threading.Lock()

    def _opened(self) -> SqliteFile:
        with self._opening:
            if self._file is None:
                self._file = self._open()
            return self._file

    def _open(self) -> SqliteFile:
        if self.read_only:
            file = SqliteFile(self.path, read_only=True)
            version = file.reader().execute("PRAGMA user_version").fetchone()[0]
            if version != SCHEMA_VERSION:
                raise Misconfigured(f"{self.path} (version {version}) is read-only here and needs git-xet of its own version to be read")
            return file
        self.path.parent.mkdir(parents=True, exist_ok=True)
        file = SqliteFile(self.path)
        with opening_lock(self.path):  # several agents of a first push open it together
            conn = file.reader()
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise Misconfigured(f"{self.path} was written by a newer git-xet (version {version}); upgrade git-xet")
            if version < SCHEMA_VERSION:
                conn.executescript(_SCHEMA)
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        return file

    def _reader(self) -> sqlite3.Connection | None:
        """A reader, or None when the file does not exist (nothing was ever packed)."""
        if self._file is None and not self.path.exists():
            return None
        return self._opened().reader()

    def put(self, key: str, data: bytes, *, replace: bool) -> bool:
        """Store `data` under `key`; with replace=False only if `key` is absent. True if written."""
        verb = "INSERT OR REPLACE" if replace else "INSERT OR IGNORE"
        with self._opened().transaction() as db:
            return db.execute(f"{verb} INTO objects VALUES (?, ?, ?)", (key, data, time.time())).rowcount == 1

    def put_new_rows(self, rows: Sequence[tuple[str, bytes]]) -> list[bool]:
        """put(key, data, replace=False) of each row, in one transaction: which were written."""
        if not rows:
            return []
        now = time.time()
        with self._opened().transaction() as db:
            return [db.execute("INSERT OR IGNORE INTO objects VALUES (?, ?, ?)", (key, data, now)).rowcount == 1 for key, data in rows]

    def get(self, key: str) -> bytes | None:
        conn = self._reader()
        row = None if conn is None else conn.execute("SELECT data FROM objects WHERE key = ?", (key,)).fetchone()
        return None if row is None else bytes(row[0])

    def get_range(self, key: str, start: int, length: int) -> bytes | None:
        """`length` bytes from `start` (fewer at the end), or None if `key` is absent."""
        conn = self._reader()
        row = None if conn is None else conn.execute("SELECT substr(data, ?, ?) FROM objects WHERE key = ?", (start + 1, length, key)).fetchone()
        return None if row is None else bytes(row[0] or b"")  # (substr of an empty blob is NULL)

    def exists(self, key: str) -> bool:
        conn = self._reader()
        return conn is not None and conn.execute("SELECT 1 FROM objects WHERE key = ?", (key,)).fetchone() is not None

    def stored_at(self, key: str) -> float | None:
        """When the row was written, or None if `key` is absent."""
        conn = self._reader()
        row = None if conn is None else conn.execute("SELECT stored_at FROM objects WHERE key = ?", (key,)).fetchone()
        return None if row is None else float(row[0])

    def list(self, prefix: str) -> Iterator[tuple[str, float]]:
        """(key, stored_at) of every object whose key starts with `prefix`, by key."""
        return self._under(prefix, "stored_at")

    def sizes(self, prefix: str) -> Iterator[tuple[str, int]]:
        """(key, size) of every object whose key starts with `prefix`, by key."""
        return self._under(prefix, "length(data)")

    def _under(self, prefix: str, column: str) -> Iterator:
        conn = self._reader()
        if conn is None:
            return
        # A range on the primary key, not LIKE (whose wildcards a key could contain).
        rows = conn.execute(f"SELECT key, {column} FROM objects WHERE key >= ? AND key < ? ORDER BY key", (prefix, prefix + "\U0010ffff"))
        yield from rows.fetchall()

    def delete(self, key: str) -> None:
        if self.exists(key):
            with self._opened().transaction() as db:
                db.execute("DELETE FROM objects WHERE key = ?", (key,))

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
