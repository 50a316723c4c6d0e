"""One SQLite file that threads and processes share: reads on a connection per thread, writes
one at a time through one shared connection, each commit durable by group commit.

Writers queue on a lock of ours first (a thread lock, then `flock` on `<file>.lock` across
processes): SQLite's own busy handler waits by sleeping in steps of up to 100 ms, which made
eight agents pushing many small files spend most of their time asleep.

Durability, with group commit: a write transaction returns only once the WAL holding its
commit is fsynced, as with synchronous=FULL, but the fsync is ours, after the write lock is
released (SQLite itself runs with synchronous=NORMAL: it syncs the WAL before each checkpoint
and the database after it). The WAL is one file: an fsync covers every commit written before
it, so concurrent writers share one (a writer whose commit an fsync that began after it
already covered returns at once), and the lock that serialises all writers is never held
across an fsync.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..platform.locks import lock_file, unlock_file


class SqliteFile:
    """The connections, the write lock and the group commit of one SQLite file (WAL).

    `read_only`: the file (or the directory it is in) cannot be written here: a backup
    snapshot, a read-only share for CI, another user's store. Reads need no lock file, no
    journal-mode switch and no write access; a write transaction is refused with what to do."""

    def __init__(self, path: Path, read_only: bool = False) -> None:
        self.path = Path(path)
        self.read_only = read_only
        self._local = threading.local()
        self._write_lock = threading.Lock()
        self._lock_fd: int | None = None
        self._shared_writer: sqlite3.Connection | None = None
        self._sync_lock = threading.Lock()  # one WAL fsync at a time in this process
        self._commits = 0  # commits of this process so far
        self._synced = 0  # how many of them an fsync has covered

    def _connect(self, *, shared: bool = False) -> sqlite3.Connection:
        if self.read_only:
            return self._connect_read_only()
        conn = sqlite3.connect(self.path, timeout=60, isolation_level=None, check_same_thread=not shared)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")  # the WAL fsync at commit is ours: see sync_wal
        return conn

    def _connect_read_only(self) -> sqlite3.Connection:
        """`mode=ro` reads a WAL database whose -shm and -wal files exist, while others may
        still write it. On a read-only mount where they do not (a snapshot taken after a clean
        close), only `immutable=1` opens it: nobody can be writing a read-only mount."""
        uri = self.path.resolve().as_uri()
        conn = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=60, isolation_level=None)
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.OperationalError:
            conn.close()
            conn = sqlite3.connect(f"{uri}?immutable=1", uri=True, timeout=60, isolation_level=None)
        return conn

    def reader(self) -> sqlite3.Connection:
        """This thread's connection (for reads; autocommit)."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._connect()
        return conn

    def _writer_connection(self) -> sqlite3.Connection:
        """The one connection this process writes through (under the write lock), whichever
        thread writes: its page cache stays valid from one transaction to the next, where a
        connection per thread reloads the pages another one changed meanwhile."""
        if self._shared_writer is None:
            self._shared_writer = self._connect(shared=True)
        return self._shared_writer

    @contextmanager
    def _writer(self) -> Iterator[None]:
        """This process's and every other process's writers, one at a time, woken at once."""
        with self._write_lock:
            if self._lock_fd is None:
                self._lock_fd = os.open(f"{self.path}.lock", os.O_RDWR | os.O_CREAT, 0o600)
            lock_file(self._lock_fd)
            try:
                yield
            finally:
                unlock_file(self._lock_fd)

    @contextmanager
    def transaction(self, synced: bool = True) -> Iterator[sqlite3.Connection]:
        """A write transaction: committed on success (durable when this returns), rolled back
        on any error. `synced=False` skips the WAL fsync: that commit is durable only once a
        later synced one (or a checkpoint) is."""
        if self.read_only:
            from .errors import read_only_store

            raise read_only_store(self.path.parent)
        with self._writer():
            conn = self._writer_connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            self._commits += 1
            mine = self._commits
        if synced:
            self.sync_wal(mine)

    def sync_wal(self, commit: int) -> None:
        """Return once an fsync of the WAL that began after commit number `commit` has ended.

        One writer at a time fsyncs, for every commit written so far; the others wait for it
        and find their commit covered. The WAL is opened afresh (not a kept descriptor): this
        process's open connection keeps SQLite from deleting it, but a descriptor kept across
        a close() could name a WAL that is gone. If there is no WAL, a checkpoint has moved
        every commit into the database and synced it (synchronous=NORMAL does that)."""
        with self._sync_lock:
            if self._synced >= commit:
                return
            covered = self._commits  # written before the fsync below begins
            try:
                fd = os.open(f"{self.path}-wal", os.O_RDONLY)
            except FileNotFoundError:
                pass
            else:
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            self._synced = covered

    def close(self) -> None:
        """Close this thread's reader, the shared writer and the lock file."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
        with self._write_lock:
            if self._shared_writer is not None:
                self._shared_writer.close()
                self._shared_writer = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
