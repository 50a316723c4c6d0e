"""The directory store's two homes for an object: a file, or (below PACKED_BELOW bytes) a row
of `<root>/objects.sqlite`. Whatever the sequence of writes and sizes, a key reads as its last
write, lives in exactly one home, and every reader (read, read_range, exists, list, sizes)
agrees; a packed write is durable (its WAL fsynced) when it returns; writers in several
processes (the agents of a push into a local store) create a key once."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from git_xet.storage import packed_objects
from git_xet.storage.errors import Misconfigured
from git_xet.storage.objects import PACKED_BELOW, DirectoryObjectStore
from tests.support.datagen import random_bytes

KEYS = ("xorbs/aa/one", "xorbs/ab/two", "shards/three.mdb")
# Sizes on both sides of the threshold, and at it.
SIZES = st.sampled_from([0, 1, 4096, PACKED_BELOW - 1, PACKED_BELOW, PACKED_BELOW + 1, 300_000])
OPERATIONS = st.lists(st.tuples(st.sampled_from(["put", "put_new", "delete"]), st.sampled_from(KEYS), SIZES, st.integers(0, 2**16)), max_size=12)


def _homes(store: DirectoryObjectStore, key: str) -> tuple[bool, bool]:
    return (store.root / key).is_file(), store.packed.exists(key)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations=OPERATIONS)
def test_any_sequence_of_writes_reads_back_as_a_dict_would(tmp_path_factory: pytest.TempPathFactory, operations: list[tuple[str, str, int, int]]) -> None:
    store = DirectoryObjectStore(tmp_path_factory.mktemp("objects"))
    model: dict[str, bytes] = {}
    try:
        for operation, key, size, seed in operations:
            body = random_bytes(size, seed)
            if operation == "put":
                store.put(key, body[:7], memoryview(body)[7:])
                model[key] = body
            elif operation == "put_new":
                assert store.put_new(key, body) == (key not in model)
                model.setdefault(key, body)
            else:
                store.delete(key)
                model.pop(key, None)
        for key in KEYS:
            in_file, in_row = _homes(store, key)
            assert store.exists(key) == (key in model)
            if key not in model:
                assert not (in_file or in_row)
                with pytest.raises(FileNotFoundError):
                    store.read(key)
                continue
            body = model[key]
            assert (in_file, in_row) == (len(body) >= PACKED_BELOW, len(body) < PACKED_BELOW)
            assert store.read(key) == body
            assert store.read_range(key, 3, len(body) + 5) == body[3:]
        expected = sorted(k for k in model if k.startswith("xorbs/"))
        assert [k for k, _mtime in store.list("xorbs/")] == expected
        assert list(store.sizes("xorbs/")) == [(k, len(model[k])) for k in expected]
    finally:
        store.close()


def test_a_packed_object_has_no_file_to_send_and_a_large_one_has(tmp_path: Path) -> None:
    store = DirectoryObjectStore(tmp_path)
    store.put("xorbs/aa/small", b"s" * 1000)
    store.put("xorbs/aa/large", b"l" * PACKED_BELOW)
    with pytest.raises(FileNotFoundError):
        store.open_file("xorbs/aa/small")
    with store.open_file("xorbs/aa/large") as handle:
        assert handle.read() == b"l" * PACKED_BELOW
    store.close()


def test_a_row_wins_over_a_file_a_crash_left_beside_it(tmp_path: Path) -> None:
    """put() of a small object commits its row, then removes the file: a crash between the two
    leaves both, and every reader must take the row (the index describes the newer write)."""
    store = DirectoryObjectStore(tmp_path)
    store.put("xorbs/aa/k", b"old, large" * PACKED_BELOW)
    store.packed.put("xorbs/aa/k", b"new, small", replace=True)  # the crash: the file stays
    assert (tmp_path / "xorbs/aa/k").is_file()
    assert store.read("xorbs/aa/k") == b"new, small"
    assert store.read_range("xorbs/aa/k", 5, 9) == b"small"
    with pytest.raises(FileNotFoundError):
        store.open_file("xorbs/aa/k")
    store.close()


def test_list_gives_a_packed_object_the_time_it_was_stored(tmp_path: Path) -> None:
    store = DirectoryObjectStore(tmp_path)
    before = time.time()
    store.put("shards/x.mdb", b"shard")
    ((key, stored_at),) = store.list("shards/")
    assert key == "shards/x.mdb" and before <= stored_at <= time.time()
    store.close()


def test_a_packed_write_returns_after_an_fsync_of_the_wal_that_began_after_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = DirectoryObjectStore(tmp_path)
    store.put("xorbs/aa/warm", b"w")  # the file exists, its schema written
    fsyncs: list[tuple[str, float, float]] = []
    real = os.fsync

    def observed(fd: int) -> None:
        name, began = os.readlink(f"/proc/self/fd/{fd}"), time.monotonic()
        real(fd)
        fsyncs.append((name, began, time.monotonic()))

    monkeypatch.setattr(os, "fsync", observed)
    for i in range(3):
        called = time.monotonic()
        assert store.put_new(f"xorbs/aa/k{i}", b"x" * 5000)
        returned = time.monotonic()
        assert any(name.endswith(f"{packed_objects.FILE_NAME}-wal") and called <= began and ended <= returned for name, began, ended in fsyncs)
    store.close()


def test_threads_of_one_store_open_the_packed_file_once_and_all_write(tmp_path: Path) -> None:
    store = DirectoryObjectStore(tmp_path)
    start = threading.Barrier(8)
    errors: list[BaseException] = []

    def write(i: int) -> None:
        try:
            start.wait(timeout=30)
            store.put(f"xorbs/aa/t{i}", bytes([i]) * 100)
        except Exception as exc:  # noqa: BLE001 (reported below, in the test thread)
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    assert [store.read(f"xorbs/aa/t{i}") for i in range(8)] == [bytes([i]) * 100 for i in range(8)]
    store.close()


def test_a_file_written_by_a_newer_version_is_refused_with_what_to_do(tmp_path: Path) -> None:
    store = DirectoryObjectStore(tmp_path)
    store.put("xorbs/aa/k", b"k")
    store.close()
    db = sqlite3.connect(tmp_path / packed_objects.FILE_NAME)
    db.execute("PRAGMA user_version = 99")
    db.close()
    with pytest.raises(Misconfigured, match="upgrade git-xet"):
        DirectoryObjectStore(tmp_path).read("xorbs/aa/k")
