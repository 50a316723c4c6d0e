"""gc racing pushes: gc never removes what a push under way (or just finished) references.

A push stores its xorbs (indexed, unused until its shard comes) and then registers its shard;
gc lists objects, reads the index and removes old orphans and old unused xorbs. The push's
steps are run at generated points among gc's own calls (directory store + SQLite, a SeaweedFS
bucket + SQLite, a bucket + PostgreSQL), and uploads through the real upload pipeline race
`git xet gc` processes. Every push's shard registers, every file reads back, fsck stays clean,
and gc still removes a real orphan older than its grace period."""

from __future__ import annotations

import hashlib
import io
import secrets
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from git_xet.client.local_backend import LocalStoreBackend
from git_xet.core import hashes, shard
from git_xet.pipelines.download import download
from git_xet.pipelines.upload import Uploader
from git_xet.storage.admin import collect_garbage, fsck
from git_xet.storage.cas_store import CasStore
from git_xet.storage.index_postgres import PostgresIndex
from git_xet.storage.s3 import S3Config, S3Location, S3ObjectStore
from tests.support.datagen import random_bytes
from tests.support.gitenv import run_git_xet
from tests.support.objects import single_xorb

# gc's calls into the store; a push step runs right after one of them.
GC_CALLS = ("objects.list", "index.iter_xorbs", "index.unreferenced_xorbs", "index.shard_ids", "objects.modified")


@pytest.fixture(params=["directory", pytest.param("bucket", marks=pytest.mark.seaweedfs), pytest.param("bucket+postgres", marks=[pytest.mark.seaweedfs, pytest.mark.postgres])])
def new_store(request, tmp_path: Path) -> Iterator[Callable[[], Callable[[], CasStore]]]:
    """A fresh store (one per call: one per generated example) as a function that opens it
    anew, as the pusher and gc, separate clients of one store, do."""
    opened: list[CasStore] = []
    s3 = request.getfixturevalue("seaweed") if request.param.startswith("bucket") else None
    pg = request.getfixturevalue("postgres") if request.param.endswith("postgres") else None
    bucket = s3.new_bucket() if s3 is not None else ""

    def fresh() -> Callable[[], CasStore]:
        name = secrets.token_hex(6)
        url = pg.create_database(f"gc_{name}") if pg is not None else None

        def open_store() -> CasStore:
            objects = S3ObjectStore(S3Location(bucket, name), S3Config.from_env(s3.env())) if s3 is not None else None
            store = CasStore(tmp_path / name, objects=objects, index=PostgresIndex(url) if url else None)
            opened.append(store)
            return store

        return open_store

    yield fresh
    for store in opened:
        store.close()


def _shard_of(data: bytes) -> tuple[str, bytes, bytes]:
    """(xorb hex, xorb body, shard naming it) of a one-file push of `data`."""
    built, digest = single_xorb(data)
    term = shard.FileTerm(built.xorb_hash, len(data), 0, len(built.chunk_hashes))
    info = shard.FileInfo(digest.file_hash, (term,), (hashes.verification_hash(built.chunk_hashes),), hashlib.sha256(data).digest())
    body = shard.serialize_shard(shard.Shard((info,)), with_footer=False)
    return hashes.hash_to_hex(built.xorb_hash), bytes(built.body) + built.footer().serialize(), body


def _interleave(store: CasStore, steps: dict[int, Callable[[], None]]) -> None:
    """Run steps[k] right after gc's k-th call (counting from 1) into `store` returns."""
    calls = [0]

    def wrapped(real: Callable, materialize: bool) -> Callable:
        def then_step(*args, **kwargs):
            result = real(*args, **kwargs)
            if materialize:
                result = list(result)  # the call's work is done when it returns
            calls[0] += 1
            step = steps.pop(calls[0], None)
            if step is not None:
                step()
            return result

        return then_step

    for call in GC_CALLS:
        owner_name, method = call.split(".")
        owner = getattr(store, owner_name)
        # The interleaving: a push step between two of gc's calls.
        setattr(owner, method, wrapped(getattr(owner, method), method in ("list", "iter_xorbs", "unreferenced_xorbs")))


# 12 schedules per store kind: each example on the bucket kinds costs ~3-4 s of SeaweedFS requests
# (25 took 57 s and 84 s of CI); test_gc_processes.py races real processes on top of this.
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sizes=st.lists(st.integers(1, 300_000), min_size=1, max_size=3),
    upload_after=st.integers(1, 8),
    register_later=st.integers(0, 8),
    seed=st.integers(0, 2**16),
)
def test_a_push_interleaved_with_gc_keeps_every_xorb(
    new_store: Callable[[], Callable[[], CasStore]], sizes: list[int], upload_after: int, register_later: int, seed: int
) -> None:
    """The push uploads its xorbs after gc's `upload_after`-th call into the store and registers
    its shard `register_later` calls after that (or after gc, when gc makes fewer calls)."""
    open_store = new_store()
    pusher, gc = open_store(), open_store()
    pushes = [_shard_of(random_bytes(size, seed + i)) for i, size in enumerate(sizes)]
    registered: list[bool] = []

    def upload() -> None:
        for xorb_hex, body, _ in pushes:
            pusher.put_xorb(xorb_hex, body)

    def register() -> None:
        registered.extend(pusher.register_shard(body, verify_sha256=True) for _, _, body in pushes)

    steps = {upload_after: upload}
    steps[upload_after + register_later] = (lambda: (upload(), register())) if register_later == 0 else register
    _interleave(gc, steps)
    collect_garbage(gc)  # the default grace period: the push is seconds old
    if not registered:  # gc made fewer calls: the steps it did not reach run now
        upload()
        register()
    assert registered == [True] * len(pushes)  # none refused
    for xorb_hex, _, _ in pushes:
        assert pusher.objects.exists(pusher.xorb_key(xorb_hex)) and pusher.xorb_layout(xorb_hex) is not None
    report = fsck(open_store())
    assert report.ok and not report.orphans and not report.unused, report


def test_gc_still_removes_an_old_orphan_and_keeps_a_new_one(new_store: Callable[[], Callable[[], CasStore]]) -> None:
    """The positive case: gc is not disabled. An orphaned xorb (stored, never indexed) and an
    unused one (indexed, no shard) are removed once older than the grace; fresh ones are kept."""
    store = new_store()()
    orphan, unused, fresh = (_shard_of(random_bytes(100_000 + i, 900 + i)) for i in range(3))
    store.objects.put(store.xorb_key(orphan[0]), orphan[1])
    store.put_xorb(unused[0], unused[1])
    written = store.objects.modified(store.xorb_key(unused[0]))
    assert written is not None
    assert collect_garbage(store, grace_seconds=3600, now=written + 600) == []  # younger than the grace
    store.objects.put(store.xorb_key(fresh[0]), fresh[1])
    removed = collect_garbage(store, grace_seconds=3600, now=written + 7200)  # as if 2 h later
    assert sorted(removed) == sorted(store.xorb_key(x) for x, _, _ in (orphan, unused, fresh))
    assert not any(store.objects.exists(store.xorb_key(x)) for x, _, _ in (orphan, unused, fresh))
    assert store.xorb_layout(unused[0]) is None
    store.objects.put(store.xorb_key(fresh[0]), fresh[1])
    assert collect_garbage(store) == [] and store.objects.exists(store.xorb_key(fresh[0]))  # the default grace: kept


def test_uploads_racing_gc_processes_never_reset_the_store(tmp_path: Path) -> None:
    """Pushes through the real upload pipeline in threads (a directory store), while gc runs
    again and again, in another process (`git xet gc`) and in a thread, with its default grace:
    no push's shard is refused (store_resets stays 0), every file reads back byte-identical, and
    fsck is clean."""
    data = tmp_path / "data"
    files = {i: random_bytes((1 + i) * 1_500_000, 950 + i) for i in range(12)}
    stop = threading.Event()
    runs = [0]

    def gc_loop() -> None:
        while not stop.is_set():
            done = run_git_xet("gc", "--data", str(data), timeout=120)
            if done.returncode != 0:
                failures.append(done.stderr)
            runs[0] += 1

    def gc_thread() -> None:
        store = CasStore(data)
        while not stop.is_set():
            collect_garbage(store)
        store.close()

    def push(names: list[int]) -> None:
        for i in names:  # one push per file: more xorb-then-shard windows
            try:
                with Uploader(LocalStoreBackend(data)) as up:
                    up.add_bytes(files[i])
                    up.finalize()
                    results.append(up.stats.store_resets)
            except Exception as exc:  # noqa: BLE001 - reported by the test's assertion
                failures.append(f"push of file {i}: {exc}")

    results: list[int] = []
    failures: list[str] = []
    CasStore(data).close()
    collectors = [threading.Thread(target=gc_loop), threading.Thread(target=gc_thread)]
    for t in collectors:
        t.start()
    try:
        while runs[0] < 1:
            stop.wait(0.05)
        pushers = [threading.Thread(target=push, args=(list(range(k, 12, 3)),)) for k in range(3)]
        for t in pushers:
            t.start()
        for t in pushers:
            t.join(timeout=300)
    finally:
        stop.set()
        for t in collectors:
            t.join(timeout=300)
    assert not failures and results == [0] * len(files) and runs[0] >= 1, failures
    backend = LocalStoreBackend(data)
    for content in files.values():
        out = io.BytesIO()
        file_hex = backend.file_for_sha256(hashlib.sha256(content).hexdigest())
        assert file_hex is not None
        download(backend, file_hex, out)
        assert out.getvalue() == content
    store = CasStore(data)
    report = fsck(store)
    store.close()
    assert report.ok and not report.orphans and not report.unused, report


def test_an_old_unused_xorb_uploaded_again_outlives_gc_until_its_shard(tmp_path: Path) -> None:
    """A push that uploads a xorb the store holds unused since long ago (a push that died before
    its shard) gets "already stored"; its shard comes later. The upload wrote the object again
    (CasStore._keep_alive), so gc with its grace keeps it and the shard registers, where before
    gc removed it and the shard was refused. A xorb not uploaded again is still removed."""
    import os
    import time

    store = CasStore(tmp_path / "data")
    try:
        (reused, body, shard_body), (dead, dead_body, _) = (_shard_of(random_bytes(300_000 + i, 970 + i)) for i in range(2))
        long_ago = time.time() - 7200
        for xorb_hex, xorb_body in ((reused, body), (dead, dead_body)):
            assert store.put_xorb(xorb_hex, xorb_body) is True
            os.utime(tmp_path / "data" / store.xorb_key(xorb_hex), (long_ago, long_ago))  # a file: above the packed size
        assert store.put_xorb(reused, body) is False  # the new push: already stored
        assert collect_garbage(store, grace_seconds=3600) == [store.xorb_key(dead)]
        assert store.register_shard(shard_body, verify_sha256=True) is True
        assert fsck(store).ok and not fsck(store).unused
    finally:
        store.close()
