"""The MetadataIndex contract, run against every implementation (SQLite and PostgreSQL).

The main test drives an index and a plain-Python model of the contract (first writer wins
everywhere; a repeated shard is new for no repo twice; a verified sha256 fills in once) with
the same random operations and compares every query's answer. Others check what a model
cannot: concurrent writers on separate connections, a newer schema refused, and that the index
does not grow per chunk.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from git_xet.core import hashes
from git_xet.core.shard import CHUNK_FLAG_GLOBAL_DEDUP_ELIGIBLE, CasInfo, FileInfo, FileTerm, Shard, serialize_shard
from git_xet.core.compression import CompressionScheme
from git_xet.core.constants import MAX_CHUNK_SIZE
from git_xet.core.xorb import XorbLayout, verify_xorb
from git_xet.pipelines.file_hashing import hash_bytes
from git_xet.storage.cas_store import CasStore
from git_xet.storage.errors import Conflict, Misconfigured, QuotaExceeded
from git_xet.storage.index_base import (
    TABLES,
    FileRegistration,
    LockRecord,
    MetadataIndex,
    NewXorb,
    ShardRegistration,
    StoredFile,
    copy_index,
    layout_row,
    pack_terms,
)
from git_xet.storage.index_postgres import MIGRATIONS, PostgresIndex
from git_xet.storage.index_sqlite import SCHEMA_VERSION as SQLITE_VERSION
from git_xet.storage.index_sqlite import SqliteIndex
from git_xet.storage.objects import DirectoryObjectStore
from tests.support.datagen import random_bytes
from tests.support.objects import encoded_xorb, single_xorb
from tests.support.postgres_process import Postgres

_names = itertools.count()
IMPLEMENTATIONS = ["sqlite", "postgres"]


@pytest.fixture(params=IMPLEMENTATIONS)
def make_index(request, tmp_path: Path) -> Iterator[Callable[[], MetadataIndex]]:
    """A factory of empty indexes of one implementation (each call: a fresh file or database)."""
    opened: list[MetadataIndex] = []

    def make() -> MetadataIndex:
        n = next(_names)
        if request.param == "sqlite":
            index: MetadataIndex = SqliteIndex(tmp_path / f"index-{n}.sqlite")
        else:
            pg: Postgres = request.getfixturevalue("postgres")
            index = PostgresIndex(pg.create_database(f"contract_{n}"))
        opened.append(index)
        return index

    yield make
    for index in opened:
        index.close()


def _clear(index: MetadataIndex) -> None:
    """Empty every table (between hypothesis examples; a new database each time is too slow)."""
    if isinstance(index, SqliteIndex):
        with index._db() as db:
            for table in TABLES:
                db.execute(f"DELETE FROM {table}")
    else:
        with psycopg.connect(index._url, autocommit=True) as conn:
            conn.execute(f"TRUNCATE {', '.join(TABLES)}")


# ---------------------------------------------------------------------- the model

XORBS = [bytes([0xA0 + i]) * 32 for i in range(3)]
FILES = [f"{i:02x}" * 32 for i in range(4)]
OIDS = [f"{0xE0 + i:02x}" * 32 for i in range(3)]
REPOS = ["default", "ns/other"]
CHUNKS = [bytes([i]) * 32 for i in range(1, 7)]
LOCK_PATHS = ["a.bin", "dir/b.bin", "Z.bin", "é.bin"]  # byte order differs from case-folded and locale orders
OWNERS = ["alice", "bob"]
LOCK_IDS = ["id-1", "id-2", "id-3"]


def _hex(b: bytes) -> str:
    return hashes.hash_to_hex(b)


layouts = st.builds(
    lambda xorb, chunks, sizes: XorbLayout(xorb, tuple(chunks), tuple(itertools.accumulate(s + 8 for s in sizes)), tuple(sizes)),
    st.sampled_from(XORBS),
    st.lists(st.sampled_from(CHUNKS), min_size=3, max_size=3),
    st.lists(st.integers(1, 70_000), min_size=3, max_size=3),
)
terms = st.lists(
    st.builds(lambda x, s, n, flags: FileTerm(x, 100 * n, s, s + n, flags), st.sampled_from(XORBS), st.integers(0, 1), st.integers(1, 2), st.integers(0, 1)),
    max_size=3,
).map(tuple)
file_regs = st.builds(
    FileRegistration,
    st.sampled_from(FILES),
    st.integers(0, 2**40),
    terms,
    st.none() | st.sampled_from(OIDS),
    st.none() | st.sampled_from(OIDS),
)
shards = st.builds(
    ShardRegistration,
    st.sampled_from(["s1", "s2", "s3"]),
    st.integers(1, 2**26),
    st.sampled_from(REPOS),
    st.lists(file_regs, max_size=3).map(tuple),
    st.lists(st.tuples(st.sampled_from(CHUNKS), st.sampled_from(XORBS).map(_hex)), max_size=3).map(tuple),
    st.none(),
    st.lists(st.builds(NewXorb, layouts, st.integers(1, 2**26)), max_size=2).map(tuple),  # an upload bundle's xorbs
)
lock_ops = st.tuples(
    st.just("lock"),
    st.builds(LockRecord, st.sampled_from(LOCK_IDS), st.sampled_from(REPOS), st.sampled_from(LOCK_PATHS), st.sampled_from(OWNERS),
              st.none() | st.sampled_from(["refs/heads/main", "refs/heads/dev"]), st.integers(0, 2**40)),
    st.none() | st.sampled_from(OWNERS),  # a rival who then tries the same path
    st.none() | st.sampled_from([*OWNERS, "force"]),  # then someone unlocks it (force: whoever holds it)
)  # fmt: skip
operations = st.lists(
    st.one_of(
        st.tuples(st.just("xorb"), layouts, st.integers(1, 2**26)),
        st.tuples(st.just("shard"), shards),
        st.tuples(st.just("revoke"), st.sampled_from(["t1", "t2"]), st.integers(0, 2**40)),
        st.tuples(st.just("collect_unreferenced"), st.sampled_from(XORBS).map(_hex)),
        st.tuples(st.just("collect_unindexed"), st.sampled_from(XORBS).map(_hex)),
        st.tuples(st.just("correct"), st.sampled_from(FILES), st.sampled_from(OIDS), st.sampled_from(OIDS)),
        lock_ops,
        st.tuples(st.just("unlock"), st.sampled_from(REPOS), st.sampled_from(LOCK_IDS), st.none() | st.sampled_from(OWNERS)),
    ),
    max_size=14,
)


class Model:
    """The contract in plain Python."""

    def __init__(self) -> None:
        self.xorbs: dict[str, tuple[XorbLayout, int]] = {}
        self.files: dict[str, list] = {}
        self.xorb_refs: set[tuple[str, str]] = set()
        self.dedup: set[tuple[bytes, str]] = set()
        self.shards: dict[str, int] = {}
        self.repo_files: set[tuple[str, str]] = set()
        self.repo_oids: dict[tuple[str, str], str] = {}
        self.repo_shards: set[tuple[str, str]] = set()
        self.revoked: dict[str, int] = {}
        self.locks: dict[str, LockRecord] = {}  # by id

    def create_lock(self, lock: LockRecord) -> tuple[LockRecord, bool]:
        """One lock per (repo, path); ids are unique (the server's are uuid4s: a repeated id is
        taken as the same lock)."""
        held = next((h for h in self.locks.values() if (h.repo, h.path) == (lock.repo, lock.path)), None)
        if held is not None:
            return held, False
        if lock.id in self.locks:
            return lock, False
        self.locks[lock.id] = lock
        return lock, True

    def delete_lock(self, repo: str, lock_id: str, owner: str | None) -> tuple[LockRecord | None, bool]:
        lock = self.locks.get(lock_id)
        if lock is None or lock.repo != repo:
            return None, False
        if owner is not None and lock.owner != owner:
            return lock, False
        del self.locks[lock_id]
        return lock, True

    def add_xorb(self, layout: XorbLayout, body_size: int) -> bool:
        if layout.xorb_hex in self.xorbs:
            return False
        self.xorbs[layout.xorb_hex] = (layout, body_size)
        return True

    def register_shard(self, s: ShardRegistration) -> bool:
        """The new xorbs first (as add_xorb), then True, False (a repeat), or Conflict (a xorb
        its files use is not indexed: no change at all, new xorbs included)."""
        indexed = dict(self.xorbs)
        for new in s.new_xorbs:
            indexed.setdefault(new.layout.xorb_hex, (new.layout, new.body_size))
        if (s.repo, s.shard_id) not in self.repo_shards and any(_hex(t.xorb_hash) not in indexed for f in s.files for t in f.terms):
            raise Conflict("a xorb is not indexed")
        self.xorbs = indexed
        if (s.repo, s.shard_id) in self.repo_shards:
            self.shards.setdefault(s.shard_id, s.size)
            return False
        self.shards.setdefault(s.shard_id, s.size)
        self.repo_shards.add((s.repo, s.shard_id))
        for f in s.files:
            self.xorb_refs.update((_hex(t.xorb_hash), f.file_hex) for t in f.terms)
            entry = self.files.setdefault(f.file_hex, [f.size, f.computed_sha256_hex, f.terms])
            if entry[1] is None:
                entry[1] = f.computed_sha256_hex
            self.repo_files.add((s.repo, f.file_hex))
            if f.oid is not None:
                self.repo_oids.setdefault((s.repo, f.oid), f.file_hex)
        self.dedup.update(s.dedup)
        return True

    def collect_unreferenced(self, xorb: str) -> bool:
        if xorb not in self.xorbs or any(x == xorb for x, _ in self.xorb_refs):
            return False
        del self.xorbs[xorb]
        self.dedup = {(c, x) for c, x in self.dedup if x != xorb}
        return True

    def correct_sha256(self, file_hex: str, wrong: str, right: str) -> int:
        entry = self.files.get(file_hex)
        if entry is None or entry[1] != wrong:
            return 0
        entry[1] = right
        unmapped = [key for key, mapped in self.repo_oids.items() if key[1] == wrong and mapped == file_hex]
        for key in unmapped:
            del self.repo_oids[key]
        return len(unmapped)

    def stats(self) -> dict[str, int]:
        counts = (self.xorbs, self.files, self.xorb_refs, self.dedup, self.shards, self.repo_files, self.repo_oids, self.repo_shards, self.revoked, self.locks, (), ())  # trash: the model deletes nothing; quotas: it sets none
        return dict(zip(TABLES, map(len, counts)))


def _assert_same(index: MetadataIndex, model: Model) -> None:
    for xorb in map(_hex, XORBS):
        expected = model.xorbs.get(xorb)
        assert index.xorb_layout(xorb) == (expected[0] if expected else None)
    assert list(index.iter_xorbs()) == sorted((h, size) for h, (_, size) in model.xorbs.items())
    assert index.shard_ids() == frozenset(model.shards)
    for file_hex in FILES:
        entry = model.files.get(file_hex)
        assert index.get_file(file_hex) == (StoredFile(file_hex, entry[0], entry[1], entry[2]) if entry else None)
        for repo in REPOS:
            assert index.repo_has_file(repo, file_hex) == ((repo, file_hex) in model.repo_files)
    for repo, oid in itertools.product(REPOS, OIDS):
        assert index.file_for_oid(repo, oid) == model.repo_oids.get((repo, oid))
    for chunk in CHUNKS:
        assert sorted(index.dedup_xorbs(chunk)) == sorted(x for c, x in model.dedup if c == chunk)
    assert index.revoked_token_ids() == frozenset(model.revoked)
    assert list(index.unreferenced_xorbs()) == sorted(x for x in model.xorbs if not any(r == x for r, _ in model.xorb_refs))
    for repo in REPOS:
        mine = sorted((lock for lock in model.locks.values() if lock.repo == repo), key=lambda lock: lock.path.encode())
        assert index.find_locks(repo) == mine
        for ref in ("refs/heads/main", "refs/heads/dev"):
            assert index.find_locks(repo, ref=ref) == [lock for lock in mine if lock.ref in (None, ref)]
        for lock in mine:
            assert index.find_locks(repo, path=lock.path) == index.find_locks(repo, lock_id=lock.id) == [lock]
        pages, after = [], None  # one lock per page, each after the last one's path
        while page := index.find_locks(repo, after=after, limit=1):
            pages += page
            after = page[-1].path
        assert pages == mine
    assert index.stats() == model.stats()


def test_index_follows_the_contract(make_index) -> None:
    index = make_index()

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(operations)
    def check(ops) -> None:
        _clear(index)
        model = Model()
        for op in ops:
            if op[0] == "xorb":
                assert index.add_xorb(op[1], op[2]) == model.add_xorb(op[1], op[2])
            elif op[0] == "shard":
                try:
                    expected: bool | type = model.register_shard(op[1])
                except Conflict:
                    expected = Conflict
                if expected is Conflict:
                    with pytest.raises(Conflict, match="collected"):
                        index.register_shard(op[1])
                else:
                    assert index.register_shard(op[1]) == expected
            elif op[0] == "collect_unreferenced":
                xorb_hex, removed = op[1], []  # the callback runs inside the call: no late binding
                collected = model.collect_unreferenced(xorb_hex)
                assert index.remove_xorb_if_unreferenced(xorb_hex, functools.partial(removed.append, xorb_hex)) == collected
                assert removed == ([xorb_hex] if collected else [])
            elif op[0] == "collect_unindexed":
                xorb_hex, removed = op[1], []
                unindexed = xorb_hex not in model.xorbs
                assert index.remove_xorb_if_unindexed(xorb_hex, functools.partial(removed.append, xorb_hex)) == unindexed
                assert removed == ([xorb_hex] if unindexed else [])
            elif op[0] == "correct":
                assert index.correct_sha256(*op[1:]) == model.correct_sha256(*op[1:])
            elif op[0] == "lock":
                if op[1].id in model.locks and model.locks[op[1].id] != op[1]:
                    continue  # ids are unique by construction (uuid4): no reuse of one for another lock
                assert index.create_lock(op[1]) == model.create_lock(op[1])
                if op[2] is not None:
                    rival = op[1]._replace(id=op[1].id + "-rival", owner=op[2], ref=None)
                    if rival.id not in model.locks:
                        assert index.create_lock(rival) == model.create_lock(rival)
                if op[3] is not None:
                    unlocker = None if op[3] == "force" else op[3]
                    assert index.delete_lock(op[1].repo, op[1].id, unlocker) == model.delete_lock(op[1].repo, op[1].id, unlocker)
            elif op[0] == "unlock":
                assert index.delete_lock(op[1], op[2], op[3]) == model.delete_lock(op[1], op[2], op[3])
            else:
                index.revoke_token(op[1], op[2])
                model.revoked.setdefault(op[1], op[2])
        _assert_same(index, model)

    check()


def test_concurrent_registrations_of_one_shard_count_once(make_index) -> None:
    """Eight writers, each on its own connection, register the same shard for the same repo:
    exactly one sees it as new; the rows are those of one registration."""
    index = make_index()
    xorb = XorbLayout(XORBS[0], (CHUNKS[0],), (1008,), (1000,))
    index.add_xorb(xorb, 1008)
    files = tuple(FileRegistration(f, 1000, (FileTerm(XORBS[0], 1000, 0, 1),), None, OIDS[i % 3]) for i, f in enumerate(FILES))
    shard = ShardRegistration("s", 123, "default", files, ((CHUNKS[0], _hex(XORBS[0])),))
    barrier = threading.Barrier(8)
    results: list[bool] = []

    def writer() -> None:
        barrier.wait()
        results.append(index.register_shard(shard))

    threads = [threading.Thread(target=writer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(results) == [False] * 7 + [True]
    model = Model()
    model.add_xorb(xorb, 1008)
    model.register_shard(shard)
    assert index.stats() == model.stats()


def test_concurrent_lock_takers_of_one_path_one_wins(make_index) -> None:
    """Eight users, each on its own connection, lock one path at once, many rounds, with the
    winner releasing between rounds: each round exactly one wins, and every loser is shown the
    winner's lock; a path in another repo is not in the way."""
    index = make_index()
    elsewhere = LockRecord("other", "ns/other", "art/hero.psd", "user0", None, 0)
    assert index.create_lock(elsewhere) == (elsewhere, True)
    for round_ in range(5):
        barrier = threading.Barrier(8)
        results: list[tuple[LockRecord, bool]] = []

        def taker(n: int, barrier: threading.Barrier = barrier, results: list = results, round_: int = round_) -> None:
            barrier.wait()
            results.append(index.create_lock(LockRecord(f"r{round_}-{n}", "default", "art/hero.psd", f"user{n}", None, round_)))

        threads = [threading.Thread(target=taker, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        winners = [lock for lock, created in results if created]
        assert len(results) == 8 and len(winners) == 1
        assert all(lock == winners[0] for lock, _ in results)
        assert index.find_locks("default") == winners
        assert index.delete_lock("default", winners[0].id, winners[0].owner) == (winners[0], True)
    assert index.find_locks("default") == [] and index.find_locks("ns/other") == [elsewhere]


def test_gc_and_a_registration_racing_on_one_xorb_never_both_win(make_index) -> None:
    """A shard using xorb X and gc collecting X, at once, many times: either the shard
    registers and X stays, or X is collected and the shard is refused; never a file whose
    xorb is gone."""
    index = make_index()
    for round_ in range(15):
        xorb = XorbLayout(hashes.hex_to_hash(f"{round_:02x}" * 32), (CHUNKS[0],), (1008,), (1000,))
        index.add_xorb(xorb, 1008)
        file_hex = f"{0x80 + round_:02x}" * 32
        shard = ShardRegistration(f"race{round_}", 100, "default", (FileRegistration(file_hex, 1000, (FileTerm(xorb.xorb_hash, 1000, 0, 1),), None, None),))
        outcome: dict[str, object] = {}
        barrier = threading.Barrier(2)

        # This round's values are arguments, not closure cells: a thread still running after
        # its join timed out must not see the next round's.
        def register(shard: ShardRegistration, barrier: threading.Barrier, outcome: dict[str, object]) -> None:
            barrier.wait()
            try:
                outcome["registered"] = index.register_shard(shard)
            except Conflict:
                outcome["registered"] = False

        def collect(xorb_hex: str, barrier: threading.Barrier, outcome: dict[str, object]) -> None:
            barrier.wait()
            outcome["collected"] = index.remove_xorb_if_unreferenced(xorb_hex, lambda: None)

        threads = [
            threading.Thread(target=register, args=(shard, barrier, outcome)),
            threading.Thread(target=collect, args=(xorb.xorb_hex, barrier, outcome)),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
            assert not t.is_alive(), "a racer did not finish within 60 s"
        assert sorted(outcome.values()) == [False, True], outcome
        assert (index.xorb_layout(xorb.xorb_hex) is not None) == outcome["registered"]
        assert index.repo_has_file("default", file_hex) == outcome["registered"]


def test_a_damaged_xorb_is_replaced_once_under_concurrency(make_index) -> None:
    """add_xorb's before_insert runs for exactly one of many racing writers."""
    index = make_index()
    layout = XorbLayout(XORBS[1], (CHUNKS[0],), (100,), (92,))
    calls: list[int] = []
    barrier = threading.Barrier(6)
    results: list[bool] = []

    def writer() -> None:
        barrier.wait()
        results.append(index.add_xorb(layout, 100, before_insert=lambda: calls.append(1)))

    threads = [threading.Thread(target=writer) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(calls) == 1 and sorted(results) == [False] * 5 + [True]
    assert index.xorb_layout(layout.xorb_hex) == layout


_TAKE_WRITER_LOCKS = """
import sys
from git_xet.storage.index_postgres import PostgresIndex
from git_xet.storage.index_sqlite import SqliteIndex
where = sys.argv[1]
index = PostgresIndex(where) if where.startswith("postgresql://") else SqliteIndex(where)
for xorb in sys.argv[2:]:
    print("taking", xorb[:2], flush=True)
    with index.xorb_writer_lock(xorb):
        print("took", xorb[:2], flush=True)
"""


def test_a_xorbs_writer_lock_has_one_holder_among_threads_and_processes(make_index) -> None:
    """Eight threads take one xorb's lock: never two inside at once. Another process opening
    the same index waits for it while we hold it, and takes another xorb's meanwhile."""
    index = make_index()
    held, other = _hex(XORBS[0]), _hex(XORBS[1])
    inside: list[int] = []
    most: list[int] = []
    barrier = threading.Barrier(8)

    def holder() -> None:
        barrier.wait()
        for _ in range(5):
            with index.xorb_writer_lock(held):
                inside.append(1)
                most.append(len(inside))
                time.sleep(0.002)
                inside.pop()

    threads = [threading.Thread(target=holder) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(most) == 40 and max(most) == 1

    where = str(index.path) if isinstance(index, SqliteIndex) else index._url
    with index.xorb_writer_lock(held):
        child = subprocess.Popen([sys.executable, "-c", _TAKE_WRITER_LOCKS, where, other, held], stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None
        lines = [child.stdout.readline().strip() for _ in range(3)]
        assert lines == [f"taking {other[:2]}", f"took {other[:2]}", f"taking {held[:2]}"]
        time.sleep(0.5)
        assert child.poll() is None  # still waiting for the lock we hold
    out, _ = child.communicate(timeout=60)
    assert child.returncode == 0 and out.strip() == f"took {held[:2]}"


def test_held_together_xorb_writer_locks_exclude_every_other_holder_and_never_deadlock(make_index) -> None:
    """An upload bundle holds the locks of all its new xorbs at once (CasStore.put_xorbs_with_shard).
    Eight threads take random sets (repeats, hashes sharing a first byte and so a SQLite stripe,
    single locks among them), in random orders: each xorb has one holder at a time, and every
    thread finishes (a fixed order of taking: no two holders wait for each other)."""
    index = make_index()
    names = [f"{first}{fill * 62}" for first in ("00", "ab", "ff") for fill in "123"]
    inside: dict[str, int] = dict.fromkeys(names, 0)
    guard = threading.Lock()
    overlaps: list[str] = []
    done: list[int] = []

    def holder(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(25):
            chosen = [rng.choice(names) for _ in range(rng.randint(1, 4))]
            lock = index.xorb_writer_lock(chosen[0]) if len(chosen) == 1 else index.xorb_writer_locks(chosen)
            with lock:
                with guard:
                    for name in set(chosen):
                        inside[name] += 1
                        if inside[name] > 1:
                            overlaps.append(name)
                time.sleep(0.0005)
                with guard:
                    for name in set(chosen):
                        inside[name] -= 1
        done.append(seed)

    threads = [threading.Thread(target=holder, args=(seed,), daemon=True) for seed in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(done) == list(range(8)) and overlaps == []


class CheckThenWriteStore(DirectoryObjectStore):
    """A store whose conditional create checks, waits, then writes: two racing creates of one
    key can both succeed, the later replacing the earlier. SeaweedFS 4.x completes racing
    conditional multipart uploads so (the grant commit's copy_new); this makes it every time.
    Counts whole-object reads (reading back a stored xorb is what a writer that finds it avoids)."""

    reads = 0

    def read(self, key: str) -> bytes:
        self.reads += 1
        return super().read(key)

    def put_new(self, key: str, *parts: bytes | memoryview) -> bool:
        if self.exists(key):
            return False
        time.sleep(0.02)
        self.put(key, *parts)
        return True


def test_racing_uploads_of_one_xorb_leave_the_index_describing_the_stored_bytes(make_index, tmp_path: Path) -> None:
    """Two encodings of one xorb (as two clients upload it) stored at once, through a store
    whose conditional create is not atomic: one writer creates the object, the other finds it
    indexed (without reading it back), and the index's layout is the stored object's (CasStore serialises a xorb's writers
    through the index's lock, not the store's condition)."""
    data = random_bytes(200_000, 5) + b"0123456789abcdef" * 20_000  # LZ4 shrinks only the second part
    digest = hash_bytes(data)
    bodies = [encoded_xorb(data, digest, scheme) for scheme in (CompressionScheme.NONE, CompressionScheme.LZ4)]
    layouts = [verify_xorb(body).layout() for body in bodies]
    assert layouts[0] != layouts[1]
    xorb_hex = layouts[0].xorb_hex
    for round_ in range(6):
        root = tmp_path / f"store-{round_}"
        objects = CheckThenWriteStore(root)
        store = CasStore(root, objects=objects, index=make_index())
        barrier = threading.Barrier(2)
        created: list[bool] = []

        def upload(body: bytes, store: CasStore, barrier: threading.Barrier, created: list[bool]) -> None:
            barrier.wait()
            created.append(store.put_xorb(xorb_hex, body))

        threads = [threading.Thread(target=upload, args=(body, store, barrier, created)) for body in bodies]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
            assert not t.is_alive(), "an upload did not finish within 60 s"
        assert sorted(created) == [False, True] and objects.reads == 0  # the second found the first's row
        stored = verify_xorb(store.objects.read(store.xorb_key(xorb_hex)))
        assert store.xorb_layout(xorb_hex) == stored.layout() and stored.layout() in layouts


def test_an_index_from_a_newer_git_xet_is_refused(make_index) -> None:
    index = make_index()
    if isinstance(index, SqliteIndex):
        index._connection().execute("PRAGMA user_version = 99")
        reopen: Callable[[], object] = lambda: SqliteIndex(index.path)  # noqa: E731
    else:
        with psycopg.connect(index._url, autocommit=True) as conn:
            conn.execute("UPDATE schema_version SET version = 99")
        reopen = lambda: PostgresIndex(index._url)  # noqa: E731
    with pytest.raises(Misconfigured, match="newer git-xet"):
        reopen()


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.integers(1, 2**32), st.integers(MAX_CHUNK_SIZE * 3 + 1, 3_000_000))  # more than three chunks, whatever the cuts
def test_the_index_does_not_grow_per_chunk(make_index, tmp_path: Path, seed: int, size: int) -> None:
    """A file of any number of chunks is one xorb row and one file row; its dedup rows are its
    first chunk and the chunks whose hash is eligible (u64_le(hash[24:32]) % 1024 == 0), even
    when the client flags every chunk as eligible."""
    data = random_bytes(size, seed)
    built, digest = single_xorb(data)
    store = CasStore(tmp_path / f"objects-{seed}-{size}-{os.urandom(4).hex()}", index=make_index())  # a replayed example starts empty too
    assert store.put_xorb(hashes.hash_to_hex(built.xorb_hash), built.body)
    everything_flagged = [CHUNK_FLAG_GLOBAL_DEDUP_ELIGIBLE] * len(built.chunk_hashes)
    cas = CasInfo.from_chunks(built.xorb_hash, built.chunk_hashes, built.chunk_sizes, len(built.body), everything_flagged)
    term = FileTerm(built.xorb_hash, len(data), 0, len(built.chunk_hashes))
    info = FileInfo(digest.file_hash, (term,), (hashes.verification_hash(built.chunk_hashes),), hashlib.sha256(data).digest())
    assert store.register_shard(serialize_shard(Shard((info,), (cas,)), with_footer=False), verify_sha256=True)
    key_chunks = {built.chunk_hashes[0]} | {h for h in built.chunk_hashes if int.from_bytes(h[24:32], "little") % 1024 == 0}
    counts = store.stats()
    assert (counts["xorbs"], counts["files"], counts["dedup"]) == (1, 1, len(key_chunks))
    assert len(built.chunk_hashes) > 3  # the file has many chunks, and still only these rows
    assert store.file_by_sha256(hashlib.sha256(data).hexdigest()).file_hex == hashes.hash_to_hex(digest.file_hash)
    assert b"".join(store.iter_file_bytes(store.get_file(hashes.hash_to_hex(digest.file_hash)))) == data
    store.close()


def test_a_version_1_index_is_upgraded_in_place(make_index) -> None:
    """Version 1 had no xorb_refs: opening it adds the table and fills it from the files' terms,
    keeping every row; gc then sees which xorbs are in use. Nor had it shard bodies (version 3):
    its shards have none, and new ones can."""
    index = make_index()
    used, spare = (XorbLayout(x, (CHUNKS[0],), (1008,), (1000,)) for x in XORBS[:2])
    file_hex = FILES[0]
    terms = (FileTerm(XORBS[0], 1000, 0, 1), FileTerm(XORBS[0], 1000, 0, 1))
    if isinstance(index, SqliteIndex):
        for layout in (used, spare):
            index.add_xorb(layout, 1008)
        index.register_shard(ShardRegistration("s1", 10, "default", (FileRegistration(file_hex, 2000, terms, None, OIDS[0]),)))
        with index._db() as db:  # back to version 1's shape
            db.execute("DROP TABLE xorb_refs")
            db.execute("ALTER TABLE shards DROP COLUMN body")
            db.execute("PRAGMA user_version = 1")
        index.close()
        upgraded: MetadataIndex = SqliteIndex(index.path)
        assert upgraded._connection().execute("PRAGMA user_version").fetchone()[0] == SQLITE_VERSION
    else:
        # A database made by version 1's own migration, with rows written as version 1 wrote them.
        url = index._url
        index.close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
            with conn.transaction():
                for step in MIGRATIONS[0]:
                    conn.execute(step)
                conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL); INSERT INTO schema_version VALUES (1)")
                for layout in (used, spare):
                    conn.execute("INSERT INTO xorbs VALUES (%s, %s, %s, %s, %s, %s, %s)", layout_row(layout, 1008))
                conn.execute("INSERT INTO files VALUES (%s, 2000, NULL, %s)", (file_hex, pack_terms(terms)))
                conn.execute("INSERT INTO repo_files VALUES ('default', %s)", (file_hex,))
                conn.execute("INSERT INTO repo_oids VALUES ('default', %s, %s)", (OIDS[0], file_hex))
                conn.execute("INSERT INTO shards VALUES ('s1', 10); INSERT INTO repo_shards VALUES ('default', 's1')")
        upgraded = PostgresIndex(url)
        assert upgraded.schema_version() == len(MIGRATIONS) == 6
    counts = upgraded.stats()
    assert (counts["xorbs"], counts["files"], counts["xorb_refs"], counts["repo_oids"], counts["repo_shards"]) == (2, 1, 1, 1, 1)
    assert upgraded.file_for_oid("default", OIDS[0]) == file_hex and upgraded.get_file(file_hex).terms == terms
    assert list(upgraded.unreferenced_xorbs()) == [spare.xorb_hex]
    assert not upgraded.remove_xorb_if_unreferenced(used.xorb_hex, lambda: None)
    assert upgraded.shard_body("s1") is None
    assert upgraded.register_shard(ShardRegistration("s2", 5, "default", (), body=b"small"))
    assert upgraded.shard_body("s2") == b"small" and upgraded.shard_ids() == {"s1", "s2"}
    lock = LockRecord("l1", "default", "a.bin", "alice", None, 1)  # version 4: locks
    assert upgraded.find_locks("default") == [] and upgraded.create_lock(lock) == (lock, True)
    upgraded.close()


def test_a_read_only_snapshot_from_before_locks_is_served_without_locks(tmp_path: Path) -> None:
    """A version 3 SQLite index (no locks table) opened read-only, as a backup snapshot is
    served: it reads, and it has no locks; opened with write access it is migrated."""
    index = SqliteIndex(tmp_path / "index.sqlite")
    index.revoke_token("t1", 1)
    with index._db() as db:
        db.execute("DROP TABLE locks")
        db.execute("DROP TABLE trash")  # (version 5)
        db.execute("DROP TABLE quotas")  # (version 6)
        db.execute("PRAGMA user_version = 3")
    index.close()
    snapshot = SqliteIndex(tmp_path / "index.sqlite", read_only=True)
    assert snapshot.revoked_token_ids() == {"t1"} and snapshot.find_locks("default") == []
    assert snapshot.stats()["locks"] == 0 and list(snapshot.export_rows("locks")) == []
    assert snapshot.stats()["trash"] == 0 and list(snapshot.export_rows("trash")) == []
    assert snapshot.quotas() == {} and list(snapshot.export_rows("quotas")) == []
    snapshot.close()
    migrated = SqliteIndex(tmp_path / "index.sqlite")
    lock = LockRecord("l1", "default", "a.bin", "alice", None, 1)
    assert migrated.create_lock(lock) == (lock, True) and migrated.find_locks("default") == [lock]
    migrated.close()


def test_a_shard_kept_in_its_row_reads_back(make_index) -> None:
    """ShardRegistration.body is kept with the registration (first registration wins, as for
    every row); a shard registered without one has none."""
    index = make_index()
    assert index.register_shard(ShardRegistration("kept", 6, REPOS[0], (), body=b"\x00shard"))
    assert not index.register_shard(ShardRegistration("kept", 6, REPOS[0], (), body=b"other!"))
    assert index.register_shard(ShardRegistration("kept", 6, REPOS[1], (), body=b"other!"))  # another repo: its own registration
    assert index.register_shard(ShardRegistration("object", 70_000, REPOS[0], ()))
    assert index.shard_body("kept") == b"\x00shard" and index.shard_body("object") is None and index.shard_body("absent") is None
    index.close()


def test_a_quota_refuses_exactly_the_registrations_past_it(make_index) -> None:
    """Against a model: a shard registers iff the sizes of its files new to the repo fit in the
    quota beside what the repo holds (files it holds, and repeats within the shard, count once);
    a refused one changes nothing; other repos are not limited; removing the quota lifts it."""
    index = make_index()
    for i, x in enumerate(XORBS):
        index.add_xorb(XorbLayout(x, (CHUNKS[i],), (1008,), (1000,)), 1008)

    @settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        quota=st.integers(0, 6000),
        shards=st.lists(st.lists(st.tuples(st.integers(0, len(FILES) - 1), st.integers(1, 2500)), min_size=1, max_size=3), min_size=1, max_size=5),
    )
    def run(quota: int, shards: list[list[tuple[int, int]]]) -> None:
        _clear(index)
        for i, x in enumerate(XORBS):
            index.add_xorb(XorbLayout(x, (CHUNKS[i],), (1008,), (1000,)), 1008)
        index.set_quota(REPOS[0], quota)
        assert index.quotas() == {REPOS[0]: quota}
        held: dict[str, int] = {}
        sizes: dict[str, int] = {}  # a file's size is its first registration's (first writer wins)
        for n, picks in enumerate(shards):
            files = tuple(
                FileRegistration(FILES[f], sizes.setdefault(FILES[f], size), (FileTerm(XORBS[f % len(XORBS)], 1000, 0, 1),), None, None) for f, size in picks
            )
            new = {f.file_hex: f.size for f in files if f.file_hex not in held}
            fits = not new or sum(held.values()) + sum(new.values()) <= quota
            before = index.stats()
            for repo in REPOS[:2]:
                registration = ShardRegistration(f"s{n}", 10, repo, files)
                if repo == REPOS[0] and not fits:
                    with pytest.raises(QuotaExceeded) as refused:
                        index.register_shard(registration)
                    assert (refused.value.quota, refused.value.used, refused.value.adding) == (quota, sum(held.values()), sum(new.values()))
                    assert index.stats() == before
                else:
                    assert index.register_shard(registration)
            if fits:
                held.update(new)
            assert index.logical_bytes(REPOS[0]) == sum(held.values()) <= quota
        index.set_quota(REPOS[0], None)
        assert index.quotas() == {}
        big = FileRegistration(FILES[-1], 10**9, (FileTerm(XORBS[0], 1000, 0, 1),), None, None)
        assert index.register_shard(ShardRegistration("big", 10, REPOS[0], (big,)))

    run()


@pytest.mark.parametrize("writers", [2, 6])
def test_racing_registrations_never_pass_the_quota(make_index, writers: int) -> None:
    """Writers registering different files into one repo at once (threads with their own
    connections; for PostgreSQL, as replicas would): as many fit as the quota has room for,
    never more, and the refused ones record nothing."""
    index = make_index()
    index.add_xorb(XorbLayout(XORBS[0], (CHUNKS[0],), (1008,), (1000,)), 1008)
    index.set_quota(REPOS[0], 1000 * (writers // 2) + 500)
    names = [hashlib.sha256(b"racer %d" % i).hexdigest() for i in range(writers)]
    start = threading.Barrier(writers)
    outcome: dict[int, str] = {}

    def register(i: int) -> None:
        files = (FileRegistration(names[i], 1000, (FileTerm(XORBS[0], 1000, 0, 1),), None, None),)
        start.wait()
        try:
            index.register_shard(ShardRegistration(f"race{i}", 10, REPOS[0], files))
            outcome[i] = "registered"
        except QuotaExceeded:
            outcome[i] = "refused"

    threads = [threading.Thread(target=register, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert sorted(outcome.values()) == ["refused"] * (writers - writers // 2) + ["registered"] * (writers // 2)
    assert index.logical_bytes(REPOS[0]) == 1000 * (writers // 2)
    assert sorted(r[1] for r in index.export_rows("repo_files")) == sorted(names[i] for i, o in outcome.items() if o == "registered")


def test_copy_index_between_implementations(postgres: Postgres, tmp_path: Path) -> None:
    """Rows copied from SQLite into PostgreSQL and from there into a new SQLite file arrive
    unchanged, in several batches per table."""
    source = SqliteIndex(tmp_path / "source.sqlite")
    for i, x in enumerate(XORBS):
        source.add_xorb(XorbLayout(x, (CHUNKS[i], CHUNKS[i + 1]), (1008, 2016), (1000, 1000)), 2016)
    for i, file_hex in enumerate(FILES[:3]):
        files = (FileRegistration(file_hex, 2000, (FileTerm(XORBS[i], 2000, 0, 2),), OIDS[i], OIDS[i]),)
        body = b"shard %d" % i if i else None  # kept in its row, or (s0) an object
        source.register_shard(ShardRegistration(f"s{i}", 10 + i, REPOS[i % 2], files, ((CHUNKS[i], _hex(XORBS[i])),), body))
    source.revoke_token("t", 5)
    source.create_lock(LockRecord("l1", REPOS[0], "a.bin", "alice", "refs/heads/main", 7))
    source.set_quota(REPOS[1], 12345)
    source.trash_files(REPOS[0], [FILES[0]], 9)  # a trash row for the file, one for its oid
    assert all(source.stats()[t] for t in TABLES), "every table has a row to copy"
    middle = PostgresIndex(postgres.create_database(f"copy_{next(_names)}"))
    target = SqliteIndex(tmp_path / "target.sqlite")
    assert copy_index(source, middle, batch=2) == source.stats() == middle.stats()
    assert copy_index(middle, target, batch=2) == source.stats() == target.stats()
    for table in TABLES:
        rows = sorted(source.export_rows(table), key=repr)
        assert sorted(middle.export_rows(table), key=repr) == rows == sorted(target.export_rows(table), key=repr), table
    assert target.shard_body("s1") == b"shard 1" and target.shard_body("s0") is None
    for index in (source, middle, target):
        index.close()
