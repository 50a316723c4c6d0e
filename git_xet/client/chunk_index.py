"""The shard cache's dedup index: one SQLite file per store, opened (never loaded) by every
agent process, so start-up cost and memory do not grow with the history it covers.

What it holds, per cached xorb: its full chunk hash list (to extend a match chunk by chunk and
to verify every hit), plus an index entry for every chunk. The uploader looks every chunk up
as it is hashed, ahead of placement (`pipelines/upload.py`), so a chunk stored before is found
wherever it occurs, however short the unchanged stretch around it: as hf-xet, whose shard
chunk tables hold every chunk. (An index of one chunk in eight found only runs holding a
sampled chunk, and sent short stretches again: up to 1.42x hf-xet's bytes on real data,
docs/benchmarks.md.) Entries of HMAC-keyed global dedup answers are looked up by the HMAC of
each plain chunk hash and expire with the answer.

Why SQLite: a lookup reads one leaf page per level (below), so the cost per agent stays flat at
1 TiB of history (bench/cache_scale.py). SQLite in WAL mode gives many concurrent readers and
writers (agents, pushes) and crash safety: a writer killed mid-transaction leaves nothing
behind but a rolled-back journal.

Why levels (an LSM tree, as LevelDB's): a random insert per chunk straight into one big table
dirtied a leaf page per chunk once the table outgrew the page cache, so an add cost more as the
history grew (4 -> 22 ms CPU per 1024-chunk xorb over 2,000 xorbs; now 4 -> 5). New entries go
to level 0 of the `fresh` table, merged in key order into the next, eight times larger, level when
full, and so on down to `entries` (the bulk), which takes the deepest level once that holds an
eighth of it. A merge in key order writes each leaf of its target once, so an entry costs a few
page writes per level it passes (one more level per 8x more history), whatever the history.

Entries are keyed by the first 8 bytes of the chunk hash; a hit is accepted only if the full
32-byte hash in the xorb's list matches, so prefix collisions cost a miss, never a wrong match.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.hashes import XetHash, hmac_chunk_hash
from ..core.shard import NO_EXPIRY, Shard
from ..platform.locks import opening_lock

if TYPE_CHECKING:
    import tempfile

log = logging.getLogger("git_xet.cache")

INDEX_FILE = "index.sqlite"
_INDEX_BITS = 13  # chunk index within a xorb (< 8192 chunks per xorb)
_ENTRY_BYTES = 24  # accounted size of one entry (B-tree cell and slack)
_XORB_BYTES = 96  # accounted size of one xorb row besides its chunk list
_XORB_CACHE = 32  # xorb chunk lists kept in memory per process (<= 256 KiB each)
_KEYS_REFRESH = 30.0  # seconds between re-reads of the active global dedup keys
_LEVEL0 = 1 << 15  # entries level 0 holds before its merge (32 xorbs of 1024 chunks, < 1 MiB)
_FANOUT = 8  # each level holds this many times the one above; `entries` at least as much
_MERGED = -1  # the `counts` row of `entries`
_CACHE_KIB = 8192  # page cache per connection, filled only as pages are used: holds level 0
_PLAIN = b""  # the `key` column of plainly hashed xorbs (not NULL: NULLs are never UNIQUE)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS xorbs (
    id INTEGER PRIMARY KEY,          -- insertion order: eviction drops the smallest first
    hash BLOB NOT NULL,
    key BLOB NOT NULL,               -- HMAC key of its chunk hashes, or empty
    expiry INTEGER,                  -- unix seconds; NULL = never
    chunks BLOB NOT NULL,            -- 32 bytes per chunk, as the shard gave them
    bytes INTEGER NOT NULL,          -- accounted size, for the cap
    UNIQUE (hash, key)
);
CREATE INDEX IF NOT EXISTS xorbs_expiring ON xorbs (expiry) WHERE expiry IS NOT NULL;
CREATE TABLE IF NOT EXISTS entries (
    k INTEGER PRIMARY KEY,           -- chunk hash bytes 0..8, little-endian, signed
    loc INTEGER NOT NULL             -- xorb id << 13 | chunk index
);
CREATE TABLE IF NOT EXISTS fresh (   -- the levels above `entries`: a lower level is newer
    level INTEGER NOT NULL,
    k INTEGER NOT NULL,
    loc INTEGER NOT NULL,
    PRIMARY KEY (level, k)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS counts (
    level INTEGER PRIMARY KEY,       -- a level of `fresh`, or -1: `entries`
    rows INTEGER NOT NULL            -- rows put there (an upper bound: replaced rows count too)
);
CREATE TABLE IF NOT EXISTS keys (
    key BLOB PRIMARY KEY,
    expiry INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (
    one INTEGER PRIMARY KEY CHECK (one = 1),
    total INTEGER NOT NULL           -- sum of xorbs.bytes
);
INSERT OR IGNORE INTO meta VALUES (1, 0);
-- In an index of an earlier version, `entries` holds about this many rows (accounted bytes / 56).
INSERT OR IGNORE INTO counts SELECT -1, total / (32 + 24) FROM meta;
"""


def _prefix(digest: bytes) -> int:
    return int.from_bytes(digest[:8], "little", signed=True)


class CachedXorb:
    """A cached xorb's chunk hashes (HMAC-keyed when `key` is set), to extend and verify matches."""

    __slots__ = ("expiry", "hashes", "key", "xorb_hash")

    def __init__(self, xorb_hash: XetHash, hashes: bytes, key: bytes | None, expiry: float | None) -> None:
        self.xorb_hash = xorb_hash
        self.hashes = hashes  # 32 bytes per chunk
        self.key = key
        self.expiry = expiry

    def __len__(self) -> int:
        return len(self.hashes) // 32

    def has(self, index: int, chunk: bytes) -> bool:
        """Whether chunk number `index` of this xorb is the plain chunk hash `chunk`."""
        if index < 0 or index >= len(self):
            return False
        mine = chunk if self.key is None else hmac_chunk_hash(chunk, self.key)
        return self.hashes.startswith(mine, 32 * index)


class ChunkIndex:
    """One store's dedup index. Thread-safe (a SQLite connection per thread); any number of
    processes may open the same file and read and write at once."""

    def __init__(self, path: Path, *, max_bytes: int, replace_damaged: bool = False) -> None:
        """Open (or create) the index at `path`. With `replace_damaged`, a file SQLite finds
        damaged (not a database, malformed) is deleted and a new index made in its place, under
        the same opening lock, so that agents finding it damaged together replace it once."""
        self.path = Path(path)
        self.max_bytes = max_bytes
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._xorbs: OrderedDict[int, CachedXorb] = OrderedDict()
        self._keys: list[bytes] = []
        self._keys_read = float("-inf")
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        # git-lfs starts eight agents at once: on a fresh cache they all open it together.
        with opening_lock(self.path):
            try:
                self._open_schema()
            except sqlite3.OperationalError:
                raise  # locked, busy, unreadable for now: not damage
            except sqlite3.DatabaseError as exc:
                if not replace_damaged:
                    raise
                log.warning("the shard cache %s is unreadable (%s); starting an empty one", self.path, exc)
                self._close_connections()
                for damaged in (self.path, self.path.with_name(self.path.name + "-wal"), self.path.with_name(self.path.name + "-shm")):
                    damaged.unlink(missing_ok=True)
                self._open_schema()

    def _open_schema(self) -> None:
        from ..platform.private_paths import create_private_file

        # Private before SQLite opens it: its -wal and -shm files get the database's mode.
        create_private_file(self.path)
        conn = self._connection()
        # Opening an existing index only reads: it never waits for a writer.
        # An index of an earlier version gains the `fresh` and `counts` tables here, once.
        if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'counts'").fetchone() is None:
            conn.executescript(_SCHEMA)  # idempotent; commits itself

    @classmethod
    def temporary(cls) -> ChunkIndex:
        """A private index in a temporary directory, removed by close() (no shard cache)."""
        import tempfile  # only here: not imported by every agent

        tmp = tempfile.TemporaryDirectory(prefix="git-xet-index-")
        index = cls(Path(tmp.name) / INDEX_FILE, max_bytes=1 << 62)
        index._tmp = tmp
        return index

    def _close_connections(self) -> None:
        with self._lock:
            connections, self._connections = self._connections, []
        for conn in connections:
            conn.close()
        self._local = threading.local()

    def close(self) -> None:
        self._close_connections()
        if self._tmp is not None:
            self._tmp.cleanup()

    # ------------------------------------------------------------------ plumbing

    def _connection(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            # No mmap: pages are read into SQLite's per-connection cache (_CACHE_KIB), so resident
            # memory does not grow with the index however many lookups touch it.
            conn = sqlite3.connect(self.path, timeout=60, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")  # a cache: atomic and consistent is enough
            conn.execute(f"PRAGMA cache_size=-{_CACHE_KIB}")  # filled only as pages are used
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        return conn

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (other writers wait for it; readers never do)."""
        conn = self._connection()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            if conn.in_transaction:  # SQLite may have rolled back itself (e.g. disk full)
                conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    # ------------------------------------------------------------------ writing

    def add(self, shard: Shard, now: float | None = None) -> None:
        """Record a shard's xorbs and index all their chunks; expired answers are ignored.

        The cache only saves uploads work: when it cannot be written (disk full, I/O error, a
        writer holding it for over a minute) the upload goes on without recording this shard.
        """
        self.add_many([shard], now)

    def add_many(self, shards: list[Shard], now: float | None = None) -> None:
        """add() of each shard, in one write transaction: an agent uploading many small files
        records them together (pipelines/upload.py), one commit and one level update for all."""
        now = time.time() if now is None else now
        live = [shard for shard in shards if not shard.is_expired(now)]
        if not live:
            return
        try:
            self._add(live)
        except sqlite3.OperationalError as exc:
            what = "a shard" if len(live) == 1 else f"{len(live)} shards"
            log.warning("could not record %s in the shard cache %s (%s); continuing without it", what, self.path, exc)

    def _add(self, shards: list[Shard]) -> None:
        added = entries = 0
        with self._write() as db:
            for shard in shards:
                key = shard.chunk_hash_key
                expiry = None if shard.footer is None or shard.footer.key_expiry >= NO_EXPIRY else min(shard.footer.key_expiry, 2**62)
                for info in shard.cas:
                    if db.execute("SELECT 1 FROM xorbs WHERE hash = ? AND key = ?", (info.xorb_hash, key or _PLAIN)).fetchone():
                        continue
                    hashes = [c.chunk_hash for c in info.chunks]
                    if not hashes or len(hashes) > 1 << _INDEX_BITS:
                        continue
                    size = 32 * len(hashes) + _XORB_BYTES + _ENTRY_BYTES * len(hashes)
                    xid = db.execute(
                        "INSERT INTO xorbs (hash, key, expiry, chunks, bytes) VALUES (?, ?, ?, ?, ?)",
                        (info.xorb_hash, key or _PLAIN, expiry, b"".join(hashes), size),
                    ).lastrowid
                    assert xid is not None  # an INSERT always sets it
                    # Newest wins: the oldest xorbs are evicted first, so this entry lives longest.
                    db.executemany("INSERT OR REPLACE INTO fresh VALUES (0, ?, ?)", ((_prefix(h), xid << _INDEX_BITS | i) for i, h in enumerate(hashes)))
                    added += size
                    entries += len(hashes)
                if key is not None:
                    db.execute("INSERT INTO keys VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET expiry = max(expiry, excluded.expiry)", (key, expiry or 2**62))
                    self._keys_read = float("-inf")
            if added:
                total = db.execute("UPDATE meta SET total = total + ? RETURNING total", (added,)).fetchone()[0]
                self._settle(db, entries)
        if added and total > self.max_bytes:
            self.evict(self.max_bytes * 9 // 10)

    @staticmethod
    def _settle(db: sqlite3.Connection, added: int) -> None:
        """Count `added` new rows of level 0, and merge every level that is full into the next.

        Done inside the add's transaction: a crash leaves the add and its merges, or neither.
        """
        counts = dict(db.execute("SELECT level, rows FROM counts").fetchall())
        counts[0] = counts.get(0, 0) + added
        level = 0
        while counts.get(level, 0) >= _LEVEL0 * _FANOUT**level:
            rows = counts.pop(level)
            # A level's rows are read in key order, so each leaf of the target is written once.
            # Only the deepest level goes into `entries`: a newer row never passes an older one.
            deepest = max(counts, default=_MERGED) <= level
            if deepest and rows * _FANOUT >= counts.get(_MERGED, 0):
                db.execute("INSERT OR REPLACE INTO entries SELECT k, loc FROM fresh WHERE level = ? ORDER BY k", (level,))
                counts[_MERGED] = counts.get(_MERGED, 0) + rows
            else:
                db.execute("INSERT OR REPLACE INTO fresh SELECT level + 1, k, loc FROM fresh WHERE level = ? ORDER BY k", (level,))
                counts[level + 1] = counts.get(level + 1, 0) + rows
            db.execute("DELETE FROM fresh WHERE level = ?", (level,))
            db.execute("DELETE FROM counts WHERE level = ?", (level,))
            level += 1
        db.executemany("INSERT OR REPLACE INTO counts VALUES (?, ?)", counts.items())

    @staticmethod
    def _levels(db: sqlite3.Connection) -> list[int]:
        """The levels of `fresh` that may hold rows, newest first."""
        return [row[0] for row in db.execute("SELECT level FROM counts WHERE level >= 0 ORDER BY level")]

    def _drop_xorbs(self, db: sqlite3.Connection, rows: list[tuple[int, bytes, int]]) -> int:
        """Delete xorbs (id, chunks, bytes) and every entry pointing into them; bytes freed."""
        freed = 0
        for xid, chunks, size in rows:
            doomed = [(_prefix(chunks[i : i + 8]), xid << _INDEX_BITS | i // 32) for i in range(0, len(chunks), 32)]
            for level in self._levels(db):  # each a seek: `fresh` is keyed by (level, k)
                db.executemany("DELETE FROM fresh WHERE level = ? AND k = ? AND loc = ?", ((level, k, loc) for k, loc in doomed))
            db.executemany("DELETE FROM entries WHERE k = ? AND loc = ?", doomed)
            db.execute("DELETE FROM xorbs WHERE id = ?", (xid,))
            freed += size
        db.execute("UPDATE meta SET total = max(0, total - ?)", (freed,))
        with self._lock:
            for xid, _, _ in rows:
                self._xorbs.pop(xid, None)
        return freed

    def evict(self, target: int) -> None:
        """Drop the oldest xorbs until the accounted size is at most `target`."""
        while True:
            with self._write() as db:
                total = db.execute("SELECT total FROM meta").fetchone()[0]
                if total <= target:
                    return
                rows = db.execute("SELECT id, chunks, bytes FROM xorbs ORDER BY id LIMIT 64").fetchall()
                if not rows:
                    db.execute("UPDATE meta SET total = 0")
                    return
                doomed = []
                for row in rows:
                    doomed.append(row)
                    total -= row[2]
                    if total <= target:
                        break
                self._drop_xorbs(db, doomed)

    def expire(self, now: float | None = None) -> int:
        """Drop expired global dedup answers; how many xorbs went."""
        now = int(time.time() if now is None else now)
        with self._write() as db:
            rows = db.execute("SELECT id, chunks, bytes FROM xorbs WHERE expiry IS NOT NULL AND expiry < ?", (now,)).fetchall()
            self._drop_xorbs(db, rows)
            db.execute("DELETE FROM keys WHERE expiry < ?", (now,))
        return len(rows)

    def forget(self) -> None:
        """Drop everything (the store lost data this index says it holds)."""
        with self._write() as db:
            db.execute("DELETE FROM entries")
            db.execute("DELETE FROM fresh")
            db.execute("DELETE FROM counts")
            db.execute("INSERT INTO counts VALUES (?, 0)", (_MERGED,))
            db.execute("DELETE FROM xorbs")
            db.execute("DELETE FROM keys")
            db.execute("UPDATE meta SET total = 0")
        with self._lock:
            self._xorbs.clear()
        self._keys, self._keys_read = [], float("-inf")

    # ------------------------------------------------------------------ reading

    def probe(self, chunk: bytes) -> tuple[CachedXorb, int] | None:
        """A cached xorb holding this chunk (plainly hashed, or in a keyed answer), and its index there."""
        return self.probe_many([chunk])[0]

    def probe_many(self, chunks: list[bytes]) -> list[tuple[CachedXorb, int] | None]:
        """probe() of each chunk, in one query."""
        keys = self._active_keys()
        wanted: dict[int, list[tuple[int, bytes, bytes | None]]] = {}  # entry key -> (position, digest, hmac key)
        for n, chunk in enumerate(chunks):
            for digest, key in [(chunk, None)] + [(hmac_chunk_hash(chunk, k), k) for k in keys]:
                wanted.setdefault(_prefix(digest), []).append((n, digest, key))
        found: list[tuple[CachedXorb, int] | None] = [None] * len(chunks)
        prefixes = list(wanted)
        conn = self._connection()
        rows: list[tuple[int, int]] = []
        # One read transaction: a merge by another writer moves rows between levels, and a
        # lookup that saw the levels before it and the rows after it would miss them.
        conn.execute("BEGIN")
        try:
            levels = self._levels(conn)
            for start in range(0, len(prefixes), 500):  # SQLite's bound-parameter limit is far above
                part = prefixes[start : start + 500]
                marks = ",".join("?" * len(part))
                # Newest first: a key in several levels takes the entry of the lowest one.
                rows += conn.execute(f"SELECT k, loc FROM fresh WHERE level IN ({','.join('?' * len(levels))}) AND k IN ({marks}) ORDER BY level", levels + part).fetchall()
                rows += conn.execute(f"SELECT k, loc FROM entries WHERE k IN ({marks})", part).fetchall()
        finally:
            conn.execute("COMMIT")
        for prefix, loc in rows:
            xorb = self._xorb(loc >> _INDEX_BITS)
            index = loc & ((1 << _INDEX_BITS) - 1)
            for n, digest, key in wanted[prefix]:
                if found[n] is None and xorb is not None and xorb.key == key and xorb.hashes.startswith(digest, 32 * index):
                    found[n] = (xorb, index)
        return found

    def _xorb(self, xid: int) -> CachedXorb | None:
        with self._lock:
            found = self._xorbs.get(xid)
            if found is not None:
                self._xorbs.move_to_end(xid)
        if found is None:
            row = self._connection().execute("SELECT hash, key, expiry, chunks FROM xorbs WHERE id = ?", (xid,)).fetchone()
            if row is None:
                return None  # evicted since the entry was read
            found = CachedXorb(row[0], row[3], row[1] or None, row[2])
            with self._lock:
                self._xorbs[xid] = found
                while len(self._xorbs) > _XORB_CACHE:
                    self._xorbs.popitem(last=False)
        if found.expiry is not None and found.expiry < time.time():
            return None
        return found

    def _active_keys(self) -> list[bytes]:
        now = time.monotonic()
        if now - self._keys_read > _KEYS_REFRESH:
            rows = self._connection().execute("SELECT key FROM keys WHERE expiry >= ?", (int(time.time()),)).fetchall()
            self._keys, self._keys_read = [r[0] for r in rows], now
        return self._keys

    def usage(self) -> tuple[int, int]:
        """(cached xorbs, accounted bytes)."""
        conn = self._connection()
        return conn.execute("SELECT count(*) FROM xorbs").fetchone()[0], conn.execute("SELECT total FROM meta").fetchone()[0]
