"""The shard cache index's levels (client/chunk_index.py): entries added go to a small level 0
and are merged down level by level into `entries`. Whatever the merges did, a lookup must find
what one flat table would have: every chunk of every cached xorb, pointing at the newest xorb
holding it, and nothing of an evicted xorb. Small level sizes make many merges happen."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from git_xet.client import chunk_index
from git_xet.client.chunk_index import INDEX_FILE, ChunkIndex
from git_xet.core.shard import CasInfo, Shard

BIG = 1 << 40


def _check(index: ChunkIndex, model: dict[bytes, tuple[bytes, int]], gone: set[bytes]) -> None:
    """Every chunk in the model is found where the model says; every chunk in `gone` is not."""
    chunks = list(model)
    for chunk, found in zip(chunks, index.probe_many(chunks), strict=True):
        assert found is not None
        assert (found[0].xorb_hash, found[1]) == model[chunk]
    assert index.probe_many(sorted(gone - set(model))) == [None] * len(gone - set(model))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(st.tuples(st.integers(1, 40), st.integers(0, 40), st.booleans()), min_size=1, max_size=40),
    st.integers(1, 64),
    st.integers(2, 4),
    st.integers(0, 2**32),
)
def test_lookups_after_any_merges_match_one_flat_table(
    tmp_path_factory, monkeypatch, adds: list[tuple[int, int, bool]], level0: int, fanout: int, seed: int
) -> None:
    """Each add is a xorb of new chunks plus some chunks of earlier xorbs (so a key lives in
    several levels, and the newest must win), sometimes followed by an eviction of the oldest."""
    monkeypatch.setattr(chunk_index, "_LEVEL0", level0)
    monkeypatch.setattr(chunk_index, "_FANOUT", fanout)
    rng = random.Random(seed)
    index = ChunkIndex(tmp_path_factory.mktemp("levels") / INDEX_FILE, max_bytes=BIG)
    live: list[tuple[bytes, list[bytes]]] = []
    seen: set[bytes] = set()
    try:
        for new, reused, evict in adds:
            old = [h for _, hashes in live for h in hashes]
            hashes = [rng.randbytes(32) for _ in range(new)] + [rng.choice(old) for _ in range(min(reused, len(old)))]
            rng.shuffle(hashes)
            info = CasInfo.from_chunks(rng.randbytes(32), hashes, [100] * len(hashes))
            index.add(Shard(cas=(info,)))
            live.append((info.xorb_hash, hashes))
            seen.update(hashes)
            if evict and len(live) > 2:
                _, total = index.usage()
                index.evict(total * 2 // 3)
                remaining = index.usage()[0]
                live = live[len(live) - remaining :]
            model = {h: (xorb_hash, i) for xorb_hash, hs in live for i, h in enumerate(hs)}  # newest, last wins
            _check(index, model, seen)
        db = index._connection()
        stored = db.execute("SELECT count(*) FROM entries").fetchone()[0] + db.execute("SELECT count(*) FROM fresh").fetchone()[0]
        level0_rows = db.execute("SELECT count(*) FROM fresh WHERE level = 0").fetchone()[0]
        assert level0_rows < level0  # a full level 0 was merged in the add that filled it
        assert stored >= len(model)  # stale rows of a key in upper levels may stay; none is missing
    finally:
        index.close()


def test_an_index_of_the_flat_version_is_upgraded_in_place(tmp_path: Path, monkeypatch) -> None:
    """An index written before levels existed (no `fresh`, no `counts`) opens, finds all it
    held, estimates its size from the accounted bytes and takes new entries in levels."""
    rng = random.Random(7)
    path = tmp_path / INDEX_FILE
    monkeypatch.setattr(chunk_index, "_LEVEL0", 1)  # every add merged straight into `entries`
    index = ChunkIndex(path, max_bytes=BIG)
    before = [CasInfo.from_chunks(rng.randbytes(32), [rng.randbytes(32) for _ in range(50)], [100] * 50) for _ in range(4)]
    for info in before:
        index.add(Shard(cas=(info,)))
    index.close()
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT count(*) FROM fresh").fetchone()[0] == 0
        db.execute("DROP TABLE fresh")
        db.execute("DROP TABLE counts")
    monkeypatch.setattr(chunk_index, "_LEVEL0", 1 << 16)
    index = ChunkIndex(path, max_bytes=BIG)
    try:
        after = CasInfo.from_chunks(rng.randbytes(32), [rng.randbytes(32) for _ in range(50)], [100] * 50)
        index.add(Shard(cas=(after,)))
        for info in [*before, after]:
            found = index.probe_many([c.chunk_hash for c in info.chunks])
            assert [(f[0].xorb_hash, f[1]) if f else None for f in found] == [(info.xorb_hash, i) for i in range(50)]
        counts = dict(index._connection().execute("SELECT level, rows FROM counts").fetchall())
        assert counts[0] == 50 and 200 <= counts[-1] <= 210  # 4 x 50 entries, from their accounted bytes
    finally:
        index.close()


@pytest.mark.parametrize("forget_after", [3, 40])
def test_forget_empties_every_level(tmp_path: Path, monkeypatch, forget_after: int) -> None:
    monkeypatch.setattr(chunk_index, "_LEVEL0", 16)
    monkeypatch.setattr(chunk_index, "_FANOUT", 2)
    rng = random.Random(forget_after)
    index = ChunkIndex(tmp_path / INDEX_FILE, max_bytes=BIG)
    try:
        added = [CasInfo.from_chunks(rng.randbytes(32), [rng.randbytes(32) for _ in range(7)], [1] * 7) for _ in range(forget_after)]
        for info in added:
            index.add(Shard(cas=(info,)))
        index.forget()
        assert index.probe_many([c.chunk_hash for info in added for c in info.chunks]) == [None] * 7 * forget_after
        db = index._connection()
        assert db.execute("SELECT count(*) FROM fresh").fetchone()[0] == db.execute("SELECT count(*) FROM entries").fetchone()[0] == 0
    finally:
        index.close()
