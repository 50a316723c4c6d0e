"""`git xet cache show|prune`: the local shard cache (dedup knowledge of what stores hold)."""

from __future__ import annotations

import shutil
from pathlib import Path

from ..client.shard_cache import ShardCache, default_cache_root


def _store_dirs(root: Path) -> list[Path]:
    shards = root / "shards"
    return sorted(p for p in shards.iterdir() if p.is_dir()) if shards.is_dir() else []


def show() -> list[str]:
    root = default_cache_root()
    lines = [f"cache root: {root}"]
    total = 0
    for directory in _store_dirs(root):
        files = list(directory.glob("*.mdb"))
        size = sum(f.stat().st_size for f in files)
        total += size
        lines.append(f"  {directory.name}: {len(files)} shards, {size / 2**20:.1f} MiB")
    lines.append(f"total: {total / 2**20:.1f} MiB")
    return lines


def prune(max_bytes: int | None, everything: bool) -> list[str]:
    root = default_cache_root()
    if everything:
        if (root / "shards").exists():
            shutil.rmtree(root / "shards")
        return [f"removed every cached shard under {root}"]
    out = []
    for directory in _store_dirs(root):
        cache = ShardCache.at(directory, max_bytes=max_bytes) if max_bytes is not None else ShardCache.at(directory)
        before = cache.size()
        cache.load()  # drops expired shards and enforces the size cap
        out.append(f"{directory.name}: {before / 2**20:.1f} -> {cache.size() / 2**20:.1f} MiB")
    return out or ["nothing cached"]
