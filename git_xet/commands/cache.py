"""`git xet cache show|prune`: the local shard cache (dedup knowledge of what stores hold)."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from ..client.location import CACHE_LABEL
from ..platform.gitcmd import run_git
from ..client.shard_cache import ShardCache, default_cache_root


def _store_dirs(root: Path) -> list[Path]:
    shards = root / "shards"
    return sorted(p for p in shards.iterdir() if p.is_dir()) if shards.is_dir() else []


def _configured_keys() -> list[str]:
    """Cache keys of the stores configured here, for directories made before they were labelled."""
    from ..client.location import LocationError, parse_store_location

    proc = run_git("config", "--get-all", "xet.endpoint")
    keys = []
    for text in [os.environ.get("GIT_XET_ENDPOINT", ""), *proc.stdout.splitlines()]:
        try:
            where = parse_store_location(text)
        except LocationError:
            continue
        keys.append(f"local:{where.location}" if where.kind == "local" else where.location)
    return keys


def _store_name(directory: Path, known: dict[str, str]) -> str:
    """The store a cache directory describes: a directory path or a URL."""
    try:
        key = (directory / CACHE_LABEL).read_text(encoding="utf-8").strip()
    except OSError:
        key = known.get(directory.name, "")
    if not key:
        return "(unknown store)"
    return key.removeprefix("local:")


def show() -> list[str]:
    root = default_cache_root()
    known = {hashlib.sha256(k.encode("utf-8")).hexdigest()[:24]: k for k in _configured_keys()}
    lines = [f"cache root: {root}"]
    total = 0
    for directory in _store_dirs(root):
        cache = ShardCache.at(directory)
        try:
            xorbs, size = cache.usage()
        finally:
            cache.close()
        total += size
        lines.append(f"  {_store_name(directory, known)}: {xorbs} xorbs cached, {size / 2**20:.1f} MiB  ({directory.name})")
    lines.append(f"total: {total / 2**20:.1f} MiB")
    return lines


def prune(max_bytes: int | None, everything: bool) -> list[str]:
    root = default_cache_root()
    if everything:
        if (root / "shards").exists():
            shutil.rmtree(root / "shards")
        return [f"removed every cached shard under {root}"]
    known = {hashlib.sha256(k.encode("utf-8")).hexdigest()[:24]: k for k in _configured_keys()}
    out = []
    for directory in _store_dirs(root):
        cache = ShardCache.at(directory, max_bytes=max_bytes) if max_bytes is not None else ShardCache.at(directory)
        try:
            before = cache.size()
            cache.prune()  # drops expired dedup answers and enforces the size cap, oldest first
            out.append(f"{_store_name(directory, known)}: {before / 2**20:.1f} -> {cache.size() / 2**20:.1f} MiB")
        finally:
            cache.close()
    return out or ["nothing cached"]
