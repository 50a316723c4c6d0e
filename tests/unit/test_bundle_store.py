"""CasStore.put_xorbs_with_shard (an upload bundle: a small file's xorb and its shard) against
put_xorb of each xorb then register_shard, on twin stores: the same results, the same
refusals, the same index and objects afterwards, whatever the bundle holds. And what it
promises beyond that: one index write for a small file's bundle instead of two, and a xorb
that gc took meanwhile stored again before it is indexed."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from git_xet.core import hashes
from git_xet.core.shard import CasInfo, FileInfo, FileTerm, Shard, serialize_shard
from git_xet.core.xorb import XorbBuilder
from git_xet.pipelines.file_hashing import hash_bytes
from git_xet.storage.cas_store import BUNDLE_CHUNKS, CasStore
from git_xet.storage.errors import Rejected, StorageError
from git_xet.storage.history import open_history
from git_xet.storage.index_base import COLUMNS, ShardRegistration
from tests.support.datagen import random_bytes
from tests.support.objects import bundle_parts

Bundle = tuple[list[tuple[str, bytes]], bytes]


def _outcome(action: Callable[[], bool]) -> bool | type[StorageError]:
    try:
        return action()
    except StorageError as exc:  # a refusal (Rejected, MissingXorbs, ...): the same one both ways
        return type(exc)


def _separately(store: CasStore, bundle: Bundle, verify_sha256: bool) -> bool:
    xorbs, shard = bundle
    for xorb_hex, body in xorbs:
        store.put_xorb(xorb_hex, body)
    return store.register_shard(shard, verify_sha256=verify_sha256)


def _state(store: CasStore) -> dict[str, object]:
    """Every index row and every object, as comparable values."""
    state: dict[str, object] = {table: sorted(store.index.export_rows(table)) for table in COLUMNS}
    state["objects"] = sorted([*store.objects.sizes("xorbs/"), *store.objects.sizes("shards/")])
    return state


@settings(max_examples=25, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 200_000), min_size=1, max_size=3),
    seed=st.integers(0, 2**32),
    one_xorb=st.booleans(),
    stored_before=st.sets(st.integers(0, 2), max_size=2),
    claim=st.sampled_from(["right", "wrong", "none"]),
    verify_sha256=st.booleans(),
    again=st.booleans(),
)
def test_a_bundle_is_stored_as_its_parts_sent_separately(
    tmp_path_factory: pytest.TempPathFactory, sizes: list[int], seed: int, one_xorb: bool, stored_before: set[int], claim: str, verify_sha256: bool, again: bool
) -> None:
    files = [random_bytes(size, seed + i) for i, size in enumerate(sizes)]
    claims: list[bytes | None] = [hashlib.sha256(f).digest() for f in files]
    if claim == "wrong":
        claims[0] = hashlib.sha256(files[0] + b"!").digest()
    elif claim == "none":
        claims[0] = None
    bundle = bundle_parts(files, one_xorb, claims)
    twins = [CasStore(tmp_path_factory.mktemp("separate")), CasStore(tmp_path_factory.mktemp("bundled"))]
    try:
        for store in twins:
            for i, (xorb_hex, body) in enumerate(bundle[0]):
                if i in stored_before:
                    store.put_xorb(xorb_hex, body)
        separate, bundled = twins
        rounds = 2 if again else 1  # a repeat: everything stored, the shard registered
        for _ in range(rounds):
            expected = _outcome(lambda: _separately(separate, bundle, verify_sha256))
            assert _outcome(lambda: bundled.put_xorbs_with_shard(*bundle, verify_sha256=verify_sha256)) == expected
            assert _state(bundled) == _state(separate)
        if expected is True:
            for data, info_hex in zip(files, (hashes.hash_to_hex(hash_bytes(f).file_hash) for f in files)):
                stored = bundled.get_file(info_hex)
                assert stored is not None and b"".join(bytes(c) for c in bundled.iter_file_bytes(stored)) == data
    finally:
        for store in twins:
            store.close()


class _CountedIndexWrites:
    """Counts the index writes a store makes (each one transaction, one commit)."""

    def __init__(self, store: CasStore, before_registering: Callable[[], None] | None = None) -> None:
        self.calls: list[str] = []
        index = store.index
        add_xorb, register_shard = index.add_xorb, index.register_shard

        def counted_add_xorb(*args, **kwargs) -> bool:
            self.calls.append("add_xorb")
            return add_xorb(*args, **kwargs)

        def counted_register_shard(registration: ShardRegistration, alongside=None) -> bool:
            self.calls.append("register_shard")
            if before_registering is not None:
                before_registering()
            return register_shard(registration, alongside)

        index.add_xorb = counted_add_xorb  # type: ignore[method-assign]
        index.register_shard = counted_register_shard  # type: ignore[method-assign]


def test_a_small_files_bundle_is_one_index_write(tmp_path: Path) -> None:
    data = random_bytes(40_000, 1)
    bundle = bundle_parts([data], True, [hashlib.sha256(data).digest()])
    store = CasStore(tmp_path / "store")
    try:
        writes = _CountedIndexWrites(store)
        assert store.put_xorbs_with_shard(*bundle, verify_sha256=True)
        assert writes.calls == ["register_shard"]
        assert store.xorb_layout(bundle[0][0][0]) is not None
        # Several small files' bundle (a group's, client/group_send.py), a new xorb each: still
        # one index write, the xorbs in the shard's.
        files = [random_bytes(30_000, 2), random_bytes(30_000, 3), random_bytes(20_000, 4)]
        writes.calls.clear()
        parts = bundle_parts(files, False, [hashlib.sha256(f).digest() for f in files])
        assert store.put_xorbs_with_shard(*parts, verify_sha256=True)
        assert writes.calls == ["register_shard"]
        assert all(store.xorb_layout(xorb_hex) is not None for xorb_hex, _ in parts[0])
        # One of them does not verify: the ones before it go as separate requests would, and the
        # bundle is refused
        more = [random_bytes(30_000, 5), random_bytes(30_000, 6)]
        xorbs, shard = bundle_parts(more, False, [hashlib.sha256(f).digest() for f in more])
        damaged = [xorbs[0], (xorbs[1][0], xorbs[1][1][:-1] + bytes([xorbs[1][1][-1] ^ 1]))]
        writes.calls.clear()
        with pytest.raises(Rejected):
            store.put_xorbs_with_shard(damaged, shard, verify_sha256=True)
        assert writes.calls == ["add_xorb"] and store.xorb_layout(xorbs[0][0]) is not None and store.xorb_layout(xorbs[1][0]) is None
    finally:
        store.close()


def test_a_small_files_push_row_is_written_in_its_registrations_commit(tmp_path: Path) -> None:
    """The history's row of a push (History.push_alongside) costs the index no commit of its
    own, is written only when the shard is new for the repo, and is best effort: with its
    table gone the registration still stands."""
    data = random_bytes(40_000, 7)
    bundle = bundle_parts([data], True, [hashlib.sha256(data).digest()])
    store = CasStore(tmp_path / "store")
    history = open_history(None, tmp_path / "store", index=store.index)
    try:
        commits = store.index._file._commits  # type: ignore[attr-defined]
        assert store.put_xorbs_with_shard(*bundle, verify_sha256=True, alongside=history.push_alongside("team/a", 1, len(data)))
        assert store.index._file._commits == commits + 1  # type: ignore[attr-defined]
        assert [(p.repo, p.files, p.bytes) for p in history.recent_pushes()] == [("team/a", 1, len(data))]
        assert not store.put_xorbs_with_shard(*bundle, verify_sha256=True, alongside=history.push_alongside("team/a", 1, len(data)))
        assert len(history.recent_pushes()) == 1
        other = random_bytes(30_000, 8)
        alongside = history.push_alongside("team/a", 1, len(other))
        with sqlite3.connect(tmp_path / "store" / "index.sqlite") as db:
            db.execute("DROP TABLE history_pushes")
        assert store.put_xorbs_with_shard(*bundle_parts([other], True, [hashlib.sha256(other).digest()]), verify_sha256=True, alongside=alongside)
        assert store.stats()["files"] == 2
    finally:
        store.close()


def test_a_refused_shard_leaves_its_xorb_stored_and_indexed(tmp_path: Path) -> None:
    """As after two requests: the xorb was good, only the shard's claim was wrong."""
    data = random_bytes(20_000, 6)
    bundle = bundle_parts([data], True, [hashlib.sha256(data + b"!").digest()])
    store = CasStore(tmp_path / "store")
    try:
        with pytest.raises(Rejected, match="does not match its content"):
            store.put_xorbs_with_shard(*bundle, verify_sha256=True)
        assert store.xorb_layout(bundle[0][0][0]) is not None and store.stats()["files"] == 0
    finally:
        store.close()


def test_a_shard_over_the_bound_is_checked_apart_from_its_xorb(tmp_path: Path) -> None:
    """A file naming its xorb's one chunk BUNDLE_CHUNKS + 1 times: past the bound on chunks
    checked under the xorb's writer lock, so the xorb is indexed first, on its own."""
    chunk = random_bytes(9_000, 4)
    digest = hash_bytes(chunk)
    builder = XorbBuilder()
    builder.add(chunk, digest.chunk_hashes[0])
    built = builder.build()
    repeats = BUNDLE_CHUNKS + 1
    data = chunk * repeats
    term = FileTerm(built.xorb_hash, len(chunk), 0, 1)
    info = FileInfo(
        hashes.file_hash(list(digest.chunk_hashes) * repeats, list(digest.chunk_sizes) * repeats),
        (term,) * repeats,
        (hashes.verification_hash(digest.chunk_hashes),) * repeats,
        hashlib.sha256(data).digest(),
    )
    shard = serialize_shard(Shard((info,), (CasInfo.from_chunks(built.xorb_hash, built.chunk_hashes, built.chunk_sizes),)), with_footer=False)
    store = CasStore(tmp_path / "store")
    try:
        writes = _CountedIndexWrites(store)
        assert store.put_xorbs_with_shard([(hashes.hash_to_hex(built.xorb_hash), bytes(built.body))], shard, verify_sha256=True)
        assert writes.calls == ["add_xorb", "register_shard"]
        stored = store.get_file(hashes.hash_to_hex(info.file_hash))
        assert stored is not None and b"".join(bytes(c) for c in store.iter_file_bytes(stored)) == data
    finally:
        store.close()


def test_a_xorb_collected_before_its_shard_commits_is_stored_again(tmp_path: Path) -> None:
    """gc removes an unindexed object after its grace period (with a short one, at any time):
    the bundle's xorb, stored but not indexed until the shard's commit, is written back then."""
    data = random_bytes(50_000, 5)
    bundle = bundle_parts([data], True, [hashlib.sha256(data).digest()])
    key = CasStore.xorb_key(bundle[0][0][0])
    store = CasStore(tmp_path / "store")
    try:
        _CountedIndexWrites(store, before_registering=lambda: store.objects.delete(key))
        assert store.put_xorbs_with_shard(*bundle, verify_sha256=True)
        assert store.objects.exists(key)
        stored = store.file_by_sha256(hashlib.sha256(data).hexdigest())
        assert stored is not None and b"".join(bytes(c) for c in store.iter_file_bytes(stored)) == data
    finally:
        store.close()
