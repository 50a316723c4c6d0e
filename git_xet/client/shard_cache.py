"""Local shard cache: what this machine knows is already stored, per XET endpoint.

Holds the xorbs of our own uploads (including one per uploaded xorb, recorded as soon as the
xorb is stored, so an interrupted push resumes without resending it) and global dedup answers
(HMAC-keyed, with an expiry), in one on-disk index per store (`chunk_index.ChunkIndex`) that
every agent process opens rather than loads. Expired answers are dropped and the total size is
capped, oldest first.

Layout: <root>/shards/<sha256(endpoint)[:24]>/index.sqlite. Caches of earlier versions kept
one `<hash>.mdb` shard file per shard there; they are imported into the index on first use.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
from pathlib import Path

from ..core.errors import FormatError
from ..core.shard import Shard, parse_shard
from ..platform.private_paths import tighten_entries
from .chunk_index import INDEX_FILE, ChunkIndex

log = logging.getLogger("git_xet.cache")

DEFAULT_MAX_BYTES = 16 * 1024**3


def default_cache_root() -> Path:
    """$GIT_XET_CACHE, else the platform's user cache dir (e.g. ~/.cache/git-xet)."""
    env = os.environ.get("GIT_XET_CACHE")
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_cache_dir("git-xet"))


def cache_dir(root: Path, *parts: str) -> Path:
    """`root/parts...`, private to the user (see private_paths): every level below the root is
    git-xet's; the root itself only when it is the default one (a $GIT_XET_CACHE or a caller's
    directory may be theirs: it is created private when missing, never changed otherwise)."""
    from ..platform.private_paths import private_dirs

    own_root = "GIT_XET_CACHE" not in os.environ and Path(root) == default_cache_root()
    return Path(private_dirs(root, *parts, own_base=own_root))


class ShardCache:
    """One store's cache directory; `open()` gives its index (opened once, shared by callers)."""

    def __init__(self, root: Path, endpoint_key: str, *, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        digest = hashlib.sha256(endpoint_key.encode("utf-8")).hexdigest()[:24]
        self.dir = Path(root) / "shards" / digest
        self._root = Path(root)
        self.max_bytes = max_bytes
        self._index: ChunkIndex | None = None

    @classmethod
    def at(cls, directory: Path, *, max_bytes: int = DEFAULT_MAX_BYTES) -> ShardCache:
        """The cache kept in an existing per-store directory (for maintenance commands)."""
        cache = cls.__new__(cls)
        cache.dir = Path(directory)
        cache._root = cache.dir.parent.parent
        cache.max_bytes = max_bytes
        cache._index = None
        return cache

    def open(self) -> ChunkIndex:
        if self._index is None:
            path = self.dir / INDEX_FILE
            try:
                # Private, also what an older version left readable (index, -wal, -shm, label).
                tighten_entries(cache_dir(self._root, self.dir.parent.name, self.dir.name))
                # A damaged file (not a crash left-over: SQLite recovers those) is replaced.
                self._index = ChunkIndex(path, max_bytes=self.max_bytes, replace_damaged=True)
            except sqlite3.OperationalError as exc:
                # Locked past the timeout, or unreadable for now: other agents may be using it,
                # so it is left alone, and this process deduplicates against its own uploads only.
                log.warning("the shard cache %s cannot be opened now (%s); going on without it", path, exc)
                self._index = ChunkIndex.temporary()
                return self._index
            self._import_legacy_shards(self._index)
        return self._index

    def close(self) -> None:
        if self._index is not None:
            self._index.close()
            self._index = None

    def add(self, shard: Shard) -> None:
        """Record a shard (stored form, keeping its key and expiry)."""
        self.open().add(shard)

    def forget(self) -> None:
        """Drop everything cached about this store (it lost data we remembered it holding)."""
        self.open().forget()

    def prune(self) -> None:
        """Drop expired global dedup answers and enforce the size cap."""
        index = self.open()
        index.expire()
        index.evict(self.max_bytes)

    def usage(self) -> tuple[int, int]:
        """(cached xorbs, accounted bytes); (0, 0) without opening a cache that does not exist."""
        if self._index is None and not (self.dir / INDEX_FILE).exists():
            return 0, 0
        return self.open().usage()

    def size(self) -> int:
        return self.usage()[1]

    def _import_legacy_shards(self, index: ChunkIndex) -> None:
        """Move shard files of the per-file cache format into the index (once; any process)."""
        for path in sorted(self.dir.glob("*.mdb")):
            try:
                index.add(parse_shard(path.read_bytes()))
            except (OSError, FormatError) as exc:
                log.info("skipping unreadable cached shard %s: %s", path.name, exc)
            try:
                path.unlink()
            except FileNotFoundError:
                pass
