"""The MetadataIndex contract, run against every implementation (SQLite and PostgreSQL).

The main test drives an index and a plain-Python model of the contract (first writer wins
everywhere; a repeated shard is new for no repo twice; a verified sha256 fills in once) with
the same random operations and compares every query's answer. Others check what a model
cannot: concurrent writers on separate connections, a newer schema refused, and that the index
does not grow per chunk.
"""

from __future__ import annotations

import hashlib
import itertools
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from git_xet.core import hashes
from git_xet.core.shard import CHUNK_FLAG_GLOBAL_DEDUP_ELIGIBLE, CasInfo, FileInfo, FileTerm, Shard, serialize_shard
from git_xet.storage.cas_store import CasStore
from git_xet.storage.index_base import TABLES, FileRegistration, MetadataIndex, ShardRegistration, StoredFile, StoreError, XorbLayout
from git_xet.storage.index_postgres import PostgresIndex
from git_xet.storage.index_sqlite import SqliteIndex
from tests.datagen import random_bytes
from tests.objects import single_xorb
from tests.postgres_process import Postgres

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


def _hex(b: bytes) -> str:
    return b.hex()


layouts = st.builds(
    lambda xorb, chunks, sizes: XorbLayout(_hex(xorb), tuple(chunks), tuple(itertools.accumulate(s + 8 for s in sizes)), tuple(sizes)),
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
)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("xorb"), layouts, st.integers(1, 2**26)),
        st.tuples(st.just("shard"), shards),
        st.tuples(st.just("revoke"), st.sampled_from(["t1", "t2"]), st.integers(0, 2**40)),
    ),
    max_size=12,
)


class Model:
    """The contract in plain Python."""

    def __init__(self) -> None:
        self.xorbs: dict[str, tuple[XorbLayout, int]] = {}
        self.files: dict[str, list] = {}
        self.dedup: set[tuple[bytes, str]] = set()
        self.shards: dict[str, int] = {}
        self.repo_files: set[tuple[str, str]] = set()
        self.repo_oids: dict[tuple[str, str], str] = {}
        self.repo_shards: set[tuple[str, str]] = set()
        self.revoked: dict[str, int] = {}

    def add_xorb(self, layout: XorbLayout, body_size: int) -> bool:
        if layout.hash in self.xorbs:
            return False
        self.xorbs[layout.hash] = (layout, body_size)
        return True

    def register_shard(self, s: ShardRegistration) -> bool:
        self.shards.setdefault(s.shard_id, s.size)
        if (s.repo, s.shard_id) in self.repo_shards:
            return False
        self.repo_shards.add((s.repo, s.shard_id))
        for f in s.files:
            entry = self.files.setdefault(f.hash, [f.size, f.computed_sha256, f.terms])
            if entry[1] is None:
                entry[1] = f.computed_sha256
            self.repo_files.add((s.repo, f.hash))
            if f.oid is not None:
                self.repo_oids.setdefault((s.repo, f.oid), f.hash)
        self.dedup.update(s.dedup)
        return True

    def stats(self) -> dict[str, int]:
        counts = (self.xorbs, self.files, self.dedup, self.shards, self.repo_files, self.repo_oids, self.repo_shards, self.revoked)
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
                assert index.register_shard(op[1]) == model.register_shard(op[1])
            else:
                index.revoke_token(op[1], op[2])
                model.revoked.setdefault(op[1], op[2])
        _assert_same(index, model)

    check()


def test_concurrent_registrations_of_one_shard_count_once(make_index) -> None:
    """Eight writers, each on its own connection, register the same shard for the same repo:
    exactly one sees it as new; the rows are those of one registration."""
    index = make_index()
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
    model.register_shard(shard)
    assert index.stats() == model.stats()


def test_a_damaged_xorb_is_replaced_once_under_concurrency(make_index) -> None:
    """add_xorb's before_insert runs for exactly one of many racing writers."""
    index = make_index()
    layout = XorbLayout(_hex(XORBS[1]), (CHUNKS[0],), (100,), (92,))
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
    assert index.xorb_layout(layout.hash) == layout


def test_an_index_from_a_newer_git_xet_is_refused(make_index) -> None:
    index = make_index()
    if isinstance(index, SqliteIndex):
        index._connection().execute("PRAGMA user_version = 99")
        reopen: Callable[[], object] = lambda: SqliteIndex(index.path)  # noqa: E731
    else:
        with psycopg.connect(index._url, autocommit=True) as conn:
            conn.execute("UPDATE schema_version SET version = 99")
        reopen = lambda: PostgresIndex(index._url)  # noqa: E731
    with pytest.raises(StoreError, match="newer git-xet"):
        reopen()


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.integers(1, 2**32), st.integers(300_000, 3_000_000))
def test_the_index_does_not_grow_per_chunk(make_index, tmp_path: Path, seed: int, size: int) -> None:
    """A file of any number of chunks is one xorb row and one file row; its dedup rows are its
    first chunk and the chunks whose hash is eligible (u64_le(hash[24:32]) % 1024 == 0), even
    when the client flags every chunk as eligible."""
    data = random_bytes(size, seed)
    built, digest = single_xorb(data)
    store = CasStore(tmp_path / f"objects-{seed}-{size}", index=make_index())
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
    assert store.file_by_sha256(hashlib.sha256(data).hexdigest()).hash == hashes.hash_to_hex(digest.file_hash)
    assert b"".join(store.iter_file_bytes(store.get_file(hashes.hash_to_hex(digest.file_hash)))) == data
    store.close()
