"""The SQLite index's group commit: a write returns only after an fsync of the WAL that began
after it was called; concurrent writers share fsyncs; a xorb row waits for the next one.

A power cut cannot be made here, so the WAL fsyncs themselves are observed (wrapped, still
performed) rather than simulated; the kill -9 test in test_reliability covers the request path.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from git_xet.core.hashes import XetHash, hex_to_hash
from git_xet.core.xorb import XorbLayout
from git_xet.storage import index_sqlite
from git_xet.storage.index_sqlite import SqliteIndex


class FsyncLog:
    """Every fsync's file and [start, end] time; each one also takes `delay` seconds more, so
    that concurrent writers overlap as they would on a slow disk."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.calls: list[tuple[str, float, float]] = []
        self._lock = threading.Lock()
        self._real = os.fsync

    def __call__(self, fd: int) -> None:
        name = os.readlink(f"/proc/self/fd/{fd}")
        start = time.monotonic()
        self._real(fd)
        time.sleep(self.delay)
        with self._lock:
            self.calls.append((name, start, time.monotonic()))

    def of(self, suffix: str) -> list[tuple[str, float, float]]:
        with self._lock:
            return [c for c in self.calls if c[0].endswith(suffix)]


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> FsyncLog:
    log = FsyncLog(delay=0.02)
    monkeypatch.setattr(index_sqlite.os, "fsync", log)
    return log


def test_concurrent_writes_share_wal_fsyncs_and_each_returns_after_one_that_began_after_it(tmp_path: Path, fsyncs: FsyncLog) -> None:
    index = SqliteIndex(tmp_path / "index.sqlite")
    threads, per_thread = 16, 5
    spans: list[tuple[str, float, float]] = []
    spans_lock = threading.Lock()
    start = threading.Barrier(threads)

    def writer(t: int) -> None:
        start.wait()
        for i in range(per_thread):
            token_id = f"t{t}-{i}"
            called = time.monotonic()
            index.revoke_token(token_id, now=1)
            returned = time.monotonic()
            with spans_lock:
                spans.append((token_id, called, returned))

    workers = [threading.Thread(target=writer, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=120)
    assert not any(w.is_alive() for w in workers)

    wal = fsyncs.of(".sqlite-wal")
    assert len(spans) == threads * per_thread
    for token_id, called, returned in spans:
        assert any(called < began and ended <= returned for _, began, ended in wal), f"write {token_id} returned before a WAL fsync covered it"
    assert len(wal) < len(spans), f"{len(wal)} WAL fsyncs for {len(spans)} concurrent writes: no group commit"
    index.close()
    # Every acknowledged write is in the file, as another process opening it sees it.
    assert SqliteIndex(tmp_path / "index.sqlite").revoked_token_ids() == {s[0] for s in spans}


def test_a_xorb_row_does_not_fsync_the_wal_and_the_next_synced_write_does(tmp_path: Path, fsyncs: FsyncLog) -> None:
    index = SqliteIndex(tmp_path / "index.sqlite")
    before = len(fsyncs.of(".sqlite-wal"))
    for n in range(3):
        layout = XorbLayout(hex_to_hash(f"{n:02x}" * 32), (XetHash(bytes([n]) * 32),), (100,), (64,))
        assert index.add_xorb(layout, 100)
    assert len(fsyncs.of(".sqlite-wal")) == before
    index.revoke_token("after-the-xorbs", now=1)
    assert len(fsyncs.of(".sqlite-wal")) == before + 1
    index.close()
    reopened = SqliteIndex(tmp_path / "index.sqlite")
    assert [h for h, _ in reopened.iter_xorbs()] == [f"{n:02x}" * 32 for n in range(3)]
