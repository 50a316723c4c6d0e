"""Local shard cache: what this machine knows is already stored, per XET endpoint.

Holds the shards of our own uploads (including one per uploaded xorb, written as soon as the
xorb is stored, so an interrupted push resumes without resending it) and global dedup
answers (HMAC-keyed, with an expiry). Files are written by atomic rename under a name that
is their content hash, so any number of processes can add and read at once; readers skip
files that fail to parse. Expired shards are removed and the total size is capped, oldest
first.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import FormatError
from ..core.hashes import hash_to_hex, hmac_chunk_hash, keyed_hash
from ..core.shard import Shard, parse_shard, serialize_shard
from ..fsutil import atomic_write

log = logging.getLogger("git_xet.cache")

DEFAULT_MAX_BYTES = 16 * 1024**3


def default_cache_root() -> Path:
    """$GIT_XET_CACHE, else the platform's user cache dir (e.g. ~/.cache/git-xet)."""
    env = os.environ.get("GIT_XET_CACHE")
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_cache_dir("git-xet"))


@dataclass
class _XorbEntry:
    """One xorb's chunk list as a cached shard describes it (chunk hashes maybe keyed)."""

    chunk_hashes: tuple[bytes, ...]
    chunk_sizes: tuple[int, ...]
    key: bytes | None


@dataclass
class ChunkIndex:
    """Chunk hash -> (xorb hash, chunk index), over plain and HMAC-keyed shards."""

    plain: dict[bytes, tuple[bytes, int]] = field(default_factory=dict)
    keyed: dict[bytes, dict[bytes, tuple[bytes, int]]] = field(default_factory=dict)
    xorbs: dict[bytes, _XorbEntry] = field(default_factory=dict)

    def add(self, shard: Shard) -> None:
        key = shard.chunk_hash_key
        table = self.plain if key is None else self.keyed.setdefault(key, {})
        for info in shard.cas:
            hashes = tuple(c.chunk_hash for c in info.chunks)
            self.xorbs.setdefault(info.xorb_hash, _XorbEntry(hashes, tuple(c.unpacked_bytes for c in info.chunks), key))
            for i, digest in enumerate(hashes):
                table.setdefault(digest, (info.xorb_hash, i))

    def locate(self, chunk: bytes) -> tuple[bytes, int] | None:
        found = self.plain.get(chunk)
        if found is not None:
            return found
        for key, table in self.keyed.items():
            found = table.get(hmac_chunk_hash(chunk, key))
            if found is not None:
                return found
        return None

    def match_run(self, chunks: list[bytes], start: int) -> tuple[bytes, int, int] | None:
        """The longest run of chunks[start:] stored consecutively in one known xorb:
        (xorb hash, first chunk index in it, number of chunks matched)."""
        found = self.locate(chunks[start])
        if found is None:
            return None
        xorb, index = found
        entry = self.xorbs[xorb]
        n = 1
        while start + n < len(chunks) and index + n < len(entry.chunk_hashes):
            mine = chunks[start + n]
            if entry.key is not None:
                mine = hmac_chunk_hash(mine, entry.key)
            if entry.chunk_hashes[index + n] != mine:
                break
            n += 1
        return xorb, index, n


class ShardCache:
    def __init__(self, root: Path, endpoint_key: str, *, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        digest = hashlib.sha256(endpoint_key.encode("utf-8")).hexdigest()[:24]
        self.dir = Path(root) / "shards" / digest
        self.max_bytes = max_bytes

    @classmethod
    def at(cls, directory: Path, *, max_bytes: int = DEFAULT_MAX_BYTES) -> ShardCache:
        """The cache kept in an existing per-store directory (for maintenance commands)."""
        cache = cls.__new__(cls)
        cache.dir = Path(directory)
        cache.max_bytes = max_bytes
        return cache

    def add(self, shard: Shard) -> Path:
        """Persist a shard (stored form, keeping its key and expiry)."""
        blob = serialize_shard(shard, with_footer=True)
        path = self.dir / f"{hash_to_hex(keyed_hash(bytes(32), blob))}.mdb"
        if not path.exists():
            atomic_write(path, blob)
        return path

    def load(self, now: float | None = None) -> ChunkIndex:
        """Index every valid, unexpired cached shard; prune expired ones and enforce the size cap."""
        now = time.time() if now is None else now
        index = ChunkIndex()
        if not self.dir.is_dir():
            return index
        entries = []
        for path in self.dir.glob("*.mdb"):
            try:
                stat = path.stat()
                shard = parse_shard(path.read_bytes())
            except (OSError, FormatError) as exc:
                log.info("skipping unreadable cached shard %s: %s", path.name, exc)
                continue
            if shard.is_expired(now):
                _remove(path)
                continue
            entries.append((stat.st_mtime, stat.st_size, path, shard))
        entries.sort(key=lambda e: e[0], reverse=True)  # newest first
        total = 0
        for _mtime, size, path, shard in entries:
            total += size
            if total > self.max_bytes:
                _remove(path)
                continue
            index.add(shard)
        return index

    def forget(self) -> None:
        """Drop everything cached about this store (it lost data we remembered it holding)."""
        if self.dir.is_dir():
            for path in self.dir.glob("*.mdb"):
                _remove(path)

    def size(self) -> int:
        return sum(p.stat().st_size for p in self.dir.glob("*.mdb")) if self.dir.is_dir() else 0


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
