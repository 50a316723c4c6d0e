"""Usage per repository against chunk-by-chunk accounting, and deleting/pruning/restoring
repositories with gc giving the space back: generated histories (shared and private chunks
pushed into several repositories), SQLite and PostgreSQL indexes, directory store."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from git_xet.storage.admin import collect_garbage, fsck
from git_xet.storage.cas_store import CasStore
from git_xet.storage.index_postgres import PostgresIndex
from git_xet.storage.retention import delete_repo, parse_oids, prune_repo, purge, purge_preview, restore_repo
from git_xet.storage.usage import usage
from tests.support.histories import History, build, expected_usage, histories, push_all
from tests.support.objects import stored_objects

FIGURES = ("files", "logical_bytes", "unique_bytes", "shared_bytes", "reclaimable_bytes")


@pytest.fixture(params=["sqlite", "postgres"])
def new_store(request, tmp_path: Path) -> Iterator[Callable[[], CasStore]]:
    opened: list[CasStore] = []
    pg = request.getfixturevalue("postgres") if request.param == "postgres" else None

    def fresh() -> CasStore:
        name = secrets.token_hex(6)
        index = PostgresIndex(pg.create_database(f"use_{name}")) if pg is not None else None
        store = CasStore(tmp_path / name, index=index)
        opened.append(store)
        return store

    yield fresh
    for store in opened:
        store.close()


def _figures(store: CasStore) -> dict[str, dict[str, int]]:
    return {r.repo: {k: getattr(r, k) for k in FIGURES if getattr(r, k)} for r in usage(store.index).repos}


def _xorb_bytes(store: CasStore) -> int:
    return sum(stored_objects(store.root).values())


def _reads_back(store: CasStore, history: History, live: set[tuple[str, int]]) -> None:
    for repo, n in live:
        found = store.file_by_sha256(history.oid(n), repo)
        assert found is not None, f"{repo} lost file {n}"
        assert b"".join(store.iter_file_bytes(found)) == history.content(n)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=histories())
def test_usage_matches_chunk_accounting(new_store: Callable[[], CasStore], history: History) -> None:
    store = new_store()
    push_all(store, history)
    assert _figures(store) == expected_usage(history)
    report = usage(store.index)
    assert report.total.logical_bytes == sum(r.logical_bytes for r in report.repos)
    assert report.total.stored_bytes == _xorb_bytes(store)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=histories(), victim=st.sampled_from(("a", "b", "c")), restore_first=st.booleans())
def test_delete_then_gc_frees_what_usage_said(new_store: Callable[[], CasStore], history: History, victim: str, restore_first: bool) -> None:
    """Deleting a repository keeps everything until the retention ends (restore brings it all
    back); then gc frees exactly its reclaimable bytes, and every other file reads back."""
    store = new_store()
    push_all(store, history)
    everything = {(r, n) for n, repos in enumerate(history.repos_of) for r in repos}
    collect_garbage(store, grace_seconds=0)  # xorbs no file ever used (generated ones): gone first
    before_bytes = _xorb_bytes(store)
    reclaimable = next((r.reclaimable_bytes for r in usage(store.index).repos if r.repo == victim), 0)
    delete_repo(store.index, victim, now=1000)
    assert victim not in _figures(store)
    assert purge(store.index, retention_seconds=100, now=1050) == 0  # within retention: nothing unregistered
    collect_garbage(store, grace_seconds=0)
    assert _xorb_bytes(store) == before_bytes
    if restore_first:
        restore_repo(store.index, victim)
        assert _figures(store) == expected_usage(history)
        _reads_back(store, history, everything)
        return
    purge(store.index, retention_seconds=100, now=2000)
    collect_garbage(store, grace_seconds=0)
    live = {(r, n) for r, n in everything if r != victim}
    assert before_bytes - _xorb_bytes(store) == reclaimable
    assert _figures(store) == expected_usage(history, live)
    _reads_back(store, history, live)
    assert restore_repo(store.index, victim) == 0  # past retention: gone for good
    assert fsck(store).ok


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=histories(), victim=st.sampled_from(("a", "b", "c")), later=st.booleans())
def test_purge_preview_is_what_purge_then_does(new_store: Callable[[], CasStore], history: History, victim: str, later: bool) -> None:
    """gc --dry-run's preview: nothing within the retention; past it, the victim's files, and as
    many unregistered files as purge then unregisters; the preview changes nothing."""
    store = new_store()
    push_all(store, history)
    delete_repo(store.index, victim, now=1000)
    if later:
        restore_repo(store.index, victim)
        delete_repo(store.index, victim, now=1950)  # deleted again, within the retention at 2000
    assert purge_preview(store.index, retention_seconds=100, now=1050) == ([], [])
    ending, gone = purge_preview(store.index, retention_seconds=100, now=2000)
    build(history)
    victims = {(victim, history.file_hex(n)) for n, repos in enumerate(history.repos_of) if victim in repos}
    assert set(ending) == (set() if later else victims)
    assert restore_repo(store.index, victim) == len({f for _, f in victims})  # the preview removed nothing
    delete_repo(store.index, victim, now=1950 if later else 1000)  # as before the preview
    assert purge(store.index, retention_seconds=100, now=2000) == len(gone)


def test_gc_dry_run_lists_the_purge_and_changes_nothing(tmp_path: Path) -> None:
    """`git xet gc --dry-run --retention 0` names the deletion it would end, and a restore after
    it still brings the file back."""
    from tests.support.datagen import random_bytes
    from tests.support.gitenv import run_git_xet

    history = History([random_bytes(5000, 3)], [[0]], [[(0, 0, 1)]], [["acme/old"]])
    store = CasStore(tmp_path / "srv")
    push_all(store, history)
    build(history)
    delete_repo(store.index, "acme/old")
    store.close()
    dry = run_git_xet("gc", "--dry-run", "--retention", "0", "--grace", "0", "--data", str(tmp_path / "srv"), timeout=120)
    assert dry.returncode == 0 and "would end the retention of: acme/old file" in dry.stdout and "1 files would be unregistered" in dry.stdout, dry.stdout + dry.stderr
    store = CasStore(tmp_path / "srv")
    try:
        assert restore_repo(store.index, "acme/old") == 1
        _reads_back(store, history, {("acme/old", 0)})
    finally:
        store.close()


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=histories(repos=("a", "b")), keep=st.sets(st.integers(0, 5)))
def test_prune_keeps_exactly_the_listed_oids(new_store: Callable[[], CasStore], history: History, keep: set[int]) -> None:
    """`repo prune a --keep` (as `git lfs ls-files --all --long` lists them) removes the rest of
    a's files, and gc frees the xorbs nothing else uses."""
    store = new_store()
    push_all(store, history)
    listing = "".join(f"{history.oid(n)} * file{n}.bin\n" for n in keep if n < len(history.files))
    kept_oids = parse_oids(listing)
    if not kept_oids:
        return  # the command refuses an empty list (tested by the CLI test)
    prune_repo(store.index, "a", keep=kept_oids, now=1000)
    purge(store.index, retention_seconds=0, now=1000)
    collect_garbage(store, grace_seconds=0)
    everything = {(r, n) for n, repos in enumerate(history.repos_of) for r in repos}
    live = {(r, n) for r, n in everything if r != "a" or history.oid(n) in kept_oids}
    _reads_back(store, history, live)
    for r, n in everything - live:
        assert store.file_by_sha256(history.oid(n), r) is None
    assert _figures(store) == expected_usage(history, live)
    assert fsck(store).ok


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=histories(repos=("a", "b")), order=st.permutations(range(4)))
def test_pushes_racing_deletion_and_gc_lose_nothing(new_store: Callable[[], CasStore], history: History, order: list[int]) -> None:
    """Repository a is deleted, its retention ended and gc run (each on its own store client)
    in threads while b pushes files that dedup against a's xorbs: b's pushes either register
    (keeping the xorbs alive) or are refused with a Conflict and pushed again; at the end every
    b file reads back, fsck is clean, and the disk holds exactly what usage accounts for."""
    import threading

    from git_xet.storage.errors import Conflict, MissingXorbs
    from tests.support.histories import build, push_shard, xorb_object
    from git_xet.core import hashes

    store = new_store()
    push_all(store, History(history.blocks, history.xorbs, history.files, [["a"] for _ in history.files]))
    build(history)
    other = CasStore(store.root, index=store.index)  # a second client of the same store
    refused: list[int] = []

    def push_b() -> None:
        for n in range(len(history.files)):
            for _attempt in range(3):
                try:
                    other.register_shard(push_shard(history, n), "b", verify_sha256=True)
                    break
                except (Conflict, MissingXorbs):  # a xorb went under it: the client uploads it again
                    refused.append(n)
                    for x, _s, _e in history.files[n]:
                        other.put_xorb(hashes.hash_to_hex(history.built[x].xorb_hash), xorb_object(history.built[x]))

    steps = [push_b, lambda: delete_repo(store.index, "a", now=1000), lambda: purge(store.index, 0, now=2000), lambda: collect_garbage(store, grace_seconds=0)]
    failed: list[BaseException] = []

    def run(step: Callable[[], object]) -> None:
        try:
            step()
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            failed.append(exc)

    threads = [threading.Thread(target=run, args=(steps[i],)) for i in order]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not failed, failed
    delete_repo(store.index, "a", now=1000)
    purge(store.index, 0, now=2000)
    collect_garbage(store, grace_seconds=0)
    _reads_back(store, history, {("b", n) for n in range(len(history.files))})
    assert fsck(store).ok
    report = usage(store.index)
    assert [r.repo for r in report.repos] == ["b"]
    assert report.total.stored_bytes == _xorb_bytes(store)
    assert report.total.reclaimable_bytes == 0


def test_docs_usage_and_deletion_block(tmp_path: Path) -> None:
    """docs/operations.md's block, word for word, on a store where acme/models holds a kept and
    a dropped file (the clone's `git lfs ls-files` names the kept one) and acme/old one file."""
    import json

    from tests.support.docs_blocks import run_block
    from tests.support.gitenv import make_git_env
    from tests.support.histories import History, build
    from tests.support.datagen import random_bytes

    blocks = [random_bytes(3000 + i, 40 + i) for i in range(3)]
    history = History(blocks, [[0], [1], [2]], [[(0, 0, 1)], [(1, 0, 1)], [(2, 0, 1)]], [["acme/models"], ["acme/models"], ["acme/old"]])
    data = tmp_path / "srv"
    store = CasStore(data)
    push_all(store, history)
    build(history)
    store.close()
    genv = make_git_env(tmp_path / "env")
    clone = genv.root / "clone"
    clone.mkdir()
    genv.git("init", "-q", cwd=clone)
    genv.git("lfs", "install", "--local", "--skip-smudge", cwd=clone)
    genv.git("lfs", "track", "*.bin", cwd=clone)
    (clone / "kept.bin").write_bytes(history.content(0))
    genv.git("add", ".", cwd=clone)
    genv.git("commit", "-qm", "kept", cwd=clone)
    run_block("operations.md", "usage-delete", {"/srv/xet": str(data)}, cwd=clone, env=genv.env)
    before = {r["repo"]: r for r in json.loads((clone / "usage.json").read_text())["repos"]}
    assert before["acme/models"]["files"] == 2 and before["acme/old"]["files"] == 1
    store = CasStore(data)
    try:
        after = {r.repo: r for r in usage(store.index).repos}
        assert after["acme/models"].files == 1 and after["acme/old"].files == 1  # pruned; deleted then restored
        assert store.file_by_sha256(history.oid(0), "acme/models") is not None
        assert store.file_by_sha256(history.oid(1), "acme/models") is None
    finally:
        store.close()
