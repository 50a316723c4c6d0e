"""Eight processes opening one new SQLite index at the same moment, as the eight agents git-lfs
starts do on a first push: into a new local store (its SqliteIndex) and with a new shard cache
(its ChunkIndex), and a damaged shard cache they all find damaged together. Each must open it
and find the whole schema. Without the opening lock a
round failed about one time in six ("database is locked" from the switch to WAL, or "no such
table" from a half-made schema), so forty rounds fail it almost surely."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from git_xet.client.shard_cache import ShardCache
from git_xet.storage.index_sqlite import SqliteIndex

OPENERS = 8
ROUNDS = 40


def _open_and_read(kind: str, path: str, start: multiprocessing.synchronize.Barrier, errors: multiprocessing.Queue) -> None:
    try:
        start.wait(timeout=30)
        if kind == "store":
            index = SqliteIndex(Path(path))
            index.stats()  # every table, read
        else:  # as an agent opens its shard cache
            cache = ShardCache.at(Path(path).parent).open()
            assert cache.path == Path(path)  # the shared cache, not a private stand-in
            cache._connection().execute("SELECT COUNT(*) FROM entries JOIN xorbs ON 1 = 0").fetchone()
        errors.put("")
    except Exception as exc:  # noqa: BLE001 - reported to the test, whatever it is
        errors.put(f"{type(exc).__name__}: {exc}")


@pytest.mark.parametrize("kind", ["store", "cache", "damaged cache"])
def test_processes_opening_a_new_index_together_all_succeed(tmp_path: Path, kind: str) -> None:
    context = multiprocessing.get_context("fork")  # the test's imports, not a fresh interpreter each
    failures: list[str] = []
    for round_ in range(ROUNDS):
        directory = tmp_path / f"round{round_}"
        directory.mkdir()
        if kind == "damaged cache":  # found damaged by all at once: replaced once, used by all
            (directory / "index.sqlite").write_bytes(b"not an SQLite database" * 100)
        start, errors = context.Barrier(OPENERS), context.Queue()
        openers = [context.Process(target=_open_and_read, args=(kind, str(directory / "index.sqlite"), start, errors)) for _ in range(OPENERS)]
        for opener in openers:
            opener.start()
        outcomes = [errors.get(timeout=60) for _ in openers]
        for opener in openers:
            opener.join(timeout=30)
        failures += [outcome for outcome in outcomes if outcome]
    assert failures == []
