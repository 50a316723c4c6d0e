"""`git xet fsck` and `git xet gc` over a real store (SQLite or PostgreSQL index), run as commands.

Orphans are made the ways they arise: an object written whose index row never came (a crash
between the two, or a grant's PUT never committed) and a shard file whose registration never
committed. Damage is made by truncating and by deleting indexed objects."""

from __future__ import annotations

import hashlib
import os
import secrets
import sqlite3
import time
from pathlib import Path

import pytest

from git_xet.core import hashes, shard
from git_xet.storage import cas_store
from git_xet.storage.cas_store import CasStore
from git_xet.storage.errors import Rejected
from git_xet.storage.index_base import FileRegistration, ShardRegistration
from git_xet.storage.index_postgres import PostgresIndex
from git_xet.storage.objects import DirectoryObjectStore
from git_xet.storage.packed_objects import FILE_NAME as PACKED_FILE
from tests.support.datagen import random_bytes
from tests.support.gitenv import run_git_xet
from tests.support.objects import single_xorb
from tests.support.postgres_process import Postgres


@pytest.fixture(params=["sqlite", "postgres"])
def store_args(request, tmp_path: Path) -> tuple[CasStore, list[str]]:
    """A store, and the command-line flags that name it."""
    data = tmp_path / "data"
    if request.param == "sqlite":
        return CasStore(data), ["--data", str(data)]
    pg: Postgres = request.getfixturevalue("postgres")
    url = pg.create_database(f"admin_{secrets.token_hex(6)}")
    return CasStore(data, index=PostgresIndex(url)), ["--data", str(data), "--index", url]


def _register(store: CasStore, data: bytes) -> str:
    """Upload `data` as one xorb and register a shard naming it; returns the xorb hex."""
    built, digest = single_xorb(data)
    xorb_hex = hashes.hash_to_hex(built.xorb_hash)
    store.put_xorb(xorb_hex, built.body)
    term = shard.FileTerm(built.xorb_hash, len(data), 0, len(built.chunk_hashes))
    info = shard.FileInfo(digest.file_hash, (term,), (hashes.verification_hash(built.chunk_hashes),), hashlib.sha256(data).digest())
    assert store.register_shard(shard.serialize_shard(shard.Shard((info,)), with_footer=False), verify_sha256=True)
    return xorb_hex


def _age(store: CasStore, key: str, seconds: float) -> None:
    """Make the object look `seconds` old to gc: its file's mtime, or a packed row's stored_at."""
    path = store.root / key
    past = time.time() - seconds
    if path.is_file():
        os.utime(path, (past, past))
        return
    db = sqlite3.connect(store.root / PACKED_FILE)
    try:
        with db:
            assert db.execute("UPDATE objects SET stored_at = ? WHERE key = ?", (past, key)).rowcount == 1
    finally:
        db.close()


def test_fsck_and_gc(store_args: tuple[CasStore, list[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    store, flags = store_args
    # Small shards (these two) live in their index row; one kept as an object, as large ones are.
    kept = [_register(store, random_bytes(200_000 + 1000 * i, 400 + i)) for i in range(2)]
    monkeypatch.setattr(cas_store, "SHARD_IN_INDEX_BELOW", 0)
    kept.append(_register(store, random_bytes(202_000, 402)))
    monkeypatch.undo()
    shard_keys = [k for k, _ in store.objects.list("shards/")]
    assert len(shard_keys) == 1 and len(store.index.shard_ids()) == 3

    clean = run_git_xet("fsck", *flags)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "3 xorbs, 3 shards and 3 files' sha256 checked, 0 problems, 0 orphaned objects, 0 unused xorbs" in clean.stdout

    # Orphans: a xorb object never indexed, a shard file never registered; one old, one new each.
    orphans = {}
    for i, age in enumerate((3 * 3600, 60)):
        built, _ = single_xorb(random_bytes(150_000, 450 + i))
        key = store.xorb_key(hashes.hash_to_hex(built.xorb_hash))
        store.objects.put(key, built.body, built.footer().serialize())
        _age(store, key, age)
        orphans[key] = age
        body = random_bytes(4096, 460 + i)
        key = f"shards/{hashes.hash_to_hex(hashes.keyed_hash(bytes(32), body))}.mdb"
        store.objects.put(key, body)
        _age(store, key, age)
        orphans[key] = age
    # Unused: xorbs uploaded (indexed) whose shard never came; one old, one new.
    unused = {}
    for i, age in enumerate((3 * 3600, 60)):
        built, _ = single_xorb(random_bytes(120_000, 480 + i))
        xorb_hex = hashes.hash_to_hex(built.xorb_hash)
        assert store.put_xorb(xorb_hex, built.body)
        _age(store, store.xorb_key(xorb_hex), age)
        unused[xorb_hex] = age
    # Both kinds of directory object are among them: files, and rows of the packed objects.
    assert isinstance(store.objects, DirectoryObjectStore)
    packed = {key for key, _ in store.objects.packed.list("")}
    assert packed and set(orphans) - packed and {store.xorb_key(x) for x in unused} <= packed
    listed = run_git_xet("fsck", *flags)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert sorted(line.split(" ", 1)[1] for line in listed.stdout.splitlines() if line.startswith("orphan: ")) == sorted(orphans)
    assert sorted(line.split(" ", 1)[1] for line in listed.stdout.splitlines() if line.startswith("unused: ")) == sorted(unused)

    # gc with a 1 h grace: the 3 h old orphans and unused xorb go, the 1 min old ones and
    # everything in use stay.
    dry = run_git_xet("gc", *flags, "--grace", "3600", "--dry-run")
    old = sorted([k for k, age in orphans.items() if age > 3600] + [store.xorb_key(x) for x, age in unused.items() if age > 3600])
    assert sorted(line.split(": ", 1)[1] for line in dry.stdout.splitlines() if line.startswith("would remove")) == old
    assert all(store.objects.exists(k) for k in orphans)
    gc = run_git_xet("gc", *flags, "--grace", "3600")
    assert gc.returncode == 0, gc.stdout + gc.stderr
    assert sorted(line.split(": ", 1)[1] for line in gc.stdout.splitlines() if line.startswith("removed")) == old
    assert [store.objects.exists(k) for k in sorted(orphans)] == [orphans[k] <= 3600 for k in sorted(orphans)]
    for xorb_hex, age in unused.items():
        assert store.objects.exists(store.xorb_key(xorb_hex)) == (age <= 3600)
        assert (store.xorb_layout(xorb_hex) is not None) == (age <= 3600)
    assert all(store.objects.exists(store.xorb_key(x)) for x in kept) and all(store.objects.exists(k) for k in shard_keys)

    # Damage: one indexed xorb truncated, one deleted, one shard file deleted.
    damaged, missing = store.xorb_key(kept[0]), store.xorb_key(kept[1])  # (and the one shard object)
    store.objects.put(damaged, store.objects.read(damaged)[:-5000])
    store.objects.delete(missing)
    store.objects.delete(shard_keys[0])
    broken = run_git_xet("fsck", *flags)
    assert broken.returncode == 1
    errors = sorted(line for line in broken.stdout.splitlines() if line.startswith("error: "))
    assert len(errors) == 3, broken.stdout  # the files of those xorbs are not rehashed: those are the problems
    assert any(kept[0] in e and "damaged" in e for e in errors)
    assert any(kept[1] in e and "missing" in e for e in errors)
    assert any(shard_keys[0].split("/")[1].removesuffix(".mdb") in e and "missing" in e for e in errors)
    store.close()


@pytest.mark.parametrize("gc_after", ["put_new", "read"])
def test_an_orphan_collected_while_it_is_reuploaded_is_never_indexed_missing(store_args: tuple[CasStore, list[str]], gc_after: str) -> None:
    """The race gc must not lose: an old orphan is uploaded again (put_new finds the object,
    so the uploader reads and indexes what is there) while gc removes it. gc runs right after
    the uploader's put_new (the read then fails: a 500 the client retries) or right after its
    read (the uploader writes the verified bytes back before indexing). Either way the xorb is
    never indexed while missing, and a retry leaves it indexed and present."""
    store, _ = store_args
    built, _ = single_xorb(random_bytes(150_000, 470))
    xorb_hex = hashes.hash_to_hex(built.xorb_hash)
    key = store.xorb_key(xorb_hex)
    store.objects.put(key, built.body, built.footer().serialize())
    real = getattr(store.objects, gc_after)

    def then_collected(*args):
        result = real(*args)
        assert store.index.remove_xorb_if_unindexed(xorb_hex, lambda: store.objects.delete(key))
        return result

    setattr(store.objects, gc_after, then_collected)  # the fault: an interleaving we cannot time otherwise
    if gc_after == "put_new":
        with pytest.raises(FileNotFoundError):
            store.put_xorb(xorb_hex, built.body)
        assert not store.objects.exists(key) and store.xorb_layout(xorb_hex) is None
        setattr(store.objects, gc_after, real)
        assert store.put_xorb(xorb_hex, built.body)  # the client's retry stores it anew
    else:
        assert not store.put_xorb(xorb_hex, built.body)  # indexed what was there, written back
        setattr(store.objects, gc_after, real)
    assert store.objects.exists(key) and store.xorb_layout(xorb_hex) is not None
    assert store.objects.read(key)[: len(built.body)] == bytes(built.body)
    # An indexed xorb is never collected.
    assert not store.index.remove_xorb_if_unindexed(xorb_hex, lambda: store.objects.delete(key))
    assert store.objects.exists(key)
    store.close()


def test_copy_index_moves_a_sqlite_store_onto_postgres(tmp_path: Path, postgres: Postgres) -> None:
    """`git xet copy-index` from the embedded SQLite index into PostgreSQL: every row arrives, the
    copied store answers the same queries and passes fsck, and running the copy again changes nothing."""
    data = tmp_path / "data"
    store = CasStore(data)
    inputs = [random_bytes(150_000 + i, 490 + i) for i in range(3)]
    for data_bytes in inputs:
        _register(store, data_bytes)
    store.revoke_token("tok1", 1234)
    before = store.stats()
    store.close()
    url = postgres.create_database(f"copy_{secrets.token_hex(6)}")
    for _ in range(2):
        copy = run_git_xet("copy-index", "--data", str(data), "--to", url)
        assert copy.returncode == 0, copy.stdout + copy.stderr
    moved = CasStore(data, index=PostgresIndex(url))
    assert moved.stats() == before
    for data_bytes in inputs:
        stored = moved.file_by_sha256(hashlib.sha256(data_bytes).hexdigest())
        assert stored is not None and b"".join(moved.iter_file_bytes(stored)) == data_bytes
    assert moved.revoked_token_ids() == {"tok1"}
    moved.close()
    checked = run_git_xet("fsck", "--data", str(data), "--index", url)
    assert checked.returncode == 0 and "3 xorbs, 3 shards and 3 files' sha256 checked, 0 problems" in checked.stdout, checked.stdout + checked.stderr


@pytest.mark.parametrize("size", [1, 300_000, 5_000_000])
def test_fsck_finds_a_wrong_recorded_sha256_and_repair_lets_honest_pushes_register(store_args: tuple[CasStore, list[str]], size: int) -> None:
    """A wrong sha256 planted through the index (as the issue 42 §1 race recorded one, first
    writer wins, with the wrong oid mapped in the attacker's repo): honest registrations of the
    file are refused; fsck reports it (exit 1), --repair replaces it by the computed one and
    removes the wrong mapping; the honest registration then succeeds and fsck is clean."""
    store, flags = store_args
    data = random_bytes(size, size)
    built, digest = single_xorb(data)
    store.put_xorb(hashes.hash_to_hex(built.xorb_hash), built.body)
    file_hex, right = hashes.hash_to_hex(digest.file_hash), hashlib.sha256(data).hexdigest()
    wrong = hashlib.sha256(b"junk" + data).hexdigest()
    term = shard.FileTerm(built.xorb_hash, len(data), 0, len(built.chunk_hashes))
    verification = (hashes.verification_hash(built.chunk_hashes),)

    def shard_body(claim: str) -> bytes:
        return shard.serialize_shard(shard.Shard((shard.FileInfo(digest.file_hash, (term,), verification, bytes.fromhex(claim)),)), with_footer=False)

    poisoned, honest = shard_body(wrong), shard_body(right)
    planted = FileRegistration(file_hex, len(data), (term,), wrong, wrong)
    shard_id = hashes.hash_to_hex(hashes.keyed_hash(bytes(32), poisoned))
    assert store.index.register_shard(ShardRegistration(shard_id, len(poisoned), "mallory/evil", (planted,), body=poisoned))
    with pytest.raises(Rejected, match="does not match its content"):
        store.register_shard(honest, "alice/model", verify_sha256=True)

    found = run_git_xet("fsck", *flags)
    assert found.returncode == 1
    assert f"file {file_hex}: recorded sha256 {wrong} is not that of its bytes ({right})" in found.stdout
    assert store.get_file(file_hex).sha256_hex == wrong  # type: ignore[union-attr] - fsck alone changes nothing

    repaired = run_git_xet("fsck", "--repair", *flags)
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert f"repaired: file {file_hex}: sha256 {wrong} -> {right}" in repaired.stdout
    assert "1 oid mappings of them removed" in repaired.stdout
    assert store.get_file(file_hex).sha256_hex == right  # type: ignore[union-attr]
    assert store.file_by_sha256(wrong, "mallory/evil") is None

    assert store.register_shard(honest, "alice/model", verify_sha256=True)
    mapped = store.file_by_sha256(right, "alice/model")
    assert mapped is not None and mapped.file_hex == file_hex
    clean = run_git_xet("fsck", *flags)
    assert clean.returncode == 0 and "0 problems" in clean.stdout, clean.stdout
