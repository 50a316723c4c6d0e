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
from git_xet.storage.retention import delete_repo, parse_oids, prune_repo, purge, restore_repo
from git_xet.storage.usage import usage
from tests.support.histories import History, expected_usage, histories, push_all
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
