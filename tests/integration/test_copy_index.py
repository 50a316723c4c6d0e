"""`git xet copy-index` copies every table: the index's (files, shards, locks, trash, quotas,
revocations...) and the history the admin page and /metrics read (pushes, samples, gc runs).
SQLite -> PostgreSQL -> a new SQLite directory, each run twice (a rerun adds nothing)."""

from __future__ import annotations

import secrets
from pathlib import Path

from git_xet.storage.cas_store import CasStore
from git_xet.storage.history import COLUMNS as HISTORY_COLUMNS
from git_xet.storage.history import open_history
from git_xet.storage.index_base import TABLES, LockRecord
from git_xet.storage.index_factory import open_index
from tests.integration.test_admin import _register
from tests.support.datagen import random_bytes
from tests.support.gitenv import run_git_xet
from tests.support.postgres_process import Postgres


def _rows(index_url: str | None, data: Path) -> dict[str, list[tuple]]:
    index = open_index(index_url, data)
    try:
        rows = {t: sorted(index.export_rows(t), key=repr) for t in TABLES}
    finally:
        index.close()
    history = open_history(index_url, data)
    return rows | {t: sorted(history.export_rows(t), key=repr) for t in HISTORY_COLUMNS}


def test_copy_index_copies_every_table(tmp_path: Path, postgres: Postgres) -> None:
    data = tmp_path / "data"
    store = CasStore(data)
    for i in range(3):
        _register(store, random_bytes(120_000 + i, 700 + i))
    store.revoke_token("tok1", 1234)
    store.index.create_lock(LockRecord("l1", "default", "a.bin", "alice", "refs/heads/main", 99))
    store.index.set_quota("default", 10**9)
    files = [row[1] for row in store.index.export_rows("repo_files")]
    store.index.trash_files("default", files[:1], 1000)  # one file deleted, restorable
    _register(store, random_bytes(90_000, 710))  # a shard the repo registered since
    store.close()
    history = open_history(None, data)
    history.record_push("default", 3, 360_003, now=1000.0)
    history.record_sample("gc", 4096, now=2000.0)
    source = _rows(None, data)
    assert all(source[t] for t in (*TABLES, *HISTORY_COLUMNS)), {t: len(r) for t, r in source.items()}

    url = postgres.create_database(f"copyall_{secrets.token_hex(6)}")
    target = tmp_path / "copied"
    for _ in range(2):
        for args in (("--data", str(data), "--to", url), ("--data", str(data), "--index", url, "--to", str(target))):
            copied = run_git_xet("copy-index", *args, timeout=120)
            assert copied.returncode == 0, copied.stdout + copied.stderr
    assert "1 quotas" in copied.stdout and "1 history_pushes" in copied.stdout
    assert _rows(url, data) == source
    assert _rows(None, target) == source
