"""agent/prefetch.py: download answers asked a window of pointers at a time, for generated
pointer lists split over several trees (HEAD's and the refs' the guess widens to), request
orders (as git-lfs spreads objects over agents), objects outside every tree and per-object
errors; and the refs read from generated git-lfs command lines."""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Iterator, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from git_xet.agent import lineage
from git_xet.agent.prefetch import WINDOW, BatchPrefetch, PointerGuess, named_refs
from git_xet.client.lfs_batch import BatchObject
from git_xet.platform.processes import read_process


def _oid(n: int) -> str:
    return f"{n:064x}"


@st.composite
def _scenarios(draw: st.DrawFn) -> tuple[list[list[tuple[str, int]]], list[str], set[str]]:
    count = draw(st.integers(0, 350))
    pointers = [(_oid(n), n + 1) for n in range(count)]
    # The trees: consecutive slices of the pointers, each tree also holding some of the
    # pointers before it (a branch shares most files with HEAD).
    cuts = sorted(draw(st.lists(st.integers(0, count), max_size=4)))
    bounds = [0, *cuts, count]
    trees = [pointers[max(0, lo - draw(st.integers(0, 30))) : hi] for lo, hi in itertools.pairwise(bounds)]
    outside = [_oid(10_000 + n) for n in range(draw(st.integers(0, 5)))]
    requested = draw(st.permutations([o for o, _ in pointers] + outside))
    requested = requested[: draw(st.integers(0, len(requested)))]
    errors = set(draw(st.lists(st.sampled_from(requested), max_size=5))) if requested else set()
    return trees, requested, errors


@settings(max_examples=150)
@given(_scenarios(), st.sampled_from(["download", "upload"]))
def test_each_answer_is_its_own_and_windows_cover_the_pointers(scenario: tuple[list[list[tuple[str, int]]], list[str], set[str]], operation: str) -> None:
    """Uploads keep "already stored" answers (no action) too: half the objects here."""
    trees, requested, errors = scenario
    pointers = list(dict.fromkeys(p for tree in trees for p in tree))
    calls: list[list[str]] = []
    listed: list[int] = []

    def lazy_trees() -> Iterator[list[tuple[str, int]]]:
        for n, tree in enumerate(trees):
            listed.append(n)
            yield tree

    def ask(objects: Sequence[tuple[str, int]]) -> list[BatchObject]:
        calls.append([o for o, _ in objects])
        return [BatchObject("basic", _entry(o)) for o, _ in objects]

    def _entry(o: str) -> dict:
        if o in errors:
            return {"oid": o, "error": {"code": 404, "message": "gone"}}
        if operation == "upload" and int(o, 16) % 2:
            return {"oid": o}  # already stored
        return {"oid": o, "actions": {operation: {"href": f"x/{o}"}}}

    prefetch = BatchPrefetch(operation, ask, lazy_trees)
    for oid in requested:
        answer = prefetch.answer(oid, 1)
        assert answer.entry == _entry(oid)
    for call in calls:
        assert len(call) == len(set(call)) <= WINDOW
    asked = [o for call in calls for o in call]
    # A pointer with a good answer is asked once; a call is needed only when a window runs
    # out (once more per tree the guess widened to), or for an object outside every tree or
    # one whose answer was an error.
    good = [o for o in asked if o not in errors]
    assert len(good) == len(set(good))
    pointer_oids = {o for o, _ in pointers}
    special = sum(1 for o in requested if o in errors or o not in pointer_oids)
    assert len(calls) <= math.ceil(len(pointers) / WINDOW) + len(listed) + special
    assert prefetch.calls == len(calls)
    # A tree is listed only when an object asked for was in none before it.
    if len(listed) > 1:
        last = len(listed) - 1
        earlier = {o for tree in trees[:last] for o, _ in tree}
        assert any(o not in earlier for o in requested)


@settings(max_examples=100)
@given(
    st.sampled_from(["fetch", "pull", "push"]),
    st.lists(st.sampled_from(["--all", "--recent", "--dry-run", "-I", "--exclude", "--include=*.bin", "--prune"]), max_size=3),
    st.lists(st.from_regex(r"[a-z][a-z0-9/_.]{0,12}", fullmatch=True), min_size=1, max_size=4),
)
def test_named_refs_are_the_arguments_after_the_remote(command: str, options: list[str], positional: list[str]) -> None:
    """Options (and the values of -I/--exclude) are never taken for refs; the remote is not
    one; each named ref is tried as given, then under the remote."""
    argv = ["git-lfs", command]
    for option in options:
        argv += [option, "*.psd"] if option in ("-I", "--exclude") else [option]
    argv += positional
    remote, names = positional[0], positional[1:]
    assert named_refs(argv) == [*names, *(f"{remote}/{n}" for n in names)]
    assert named_refs([*argv[:2], "--stdin", *argv[2:]]) == []
    assert named_refs(["git-lfs", "checkout", *argv[2:]]) == []


def test_an_adopted_git_lfs_process_gives_its_command_line_only_while_it_is_the_same_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker forked for an agent reads the command line of the git-lfs process it adopted
    (lineage.lfs_argv); a pid reused by another process (another start time) gives nothing."""
    me = read_process(os.getpid())
    if me is None:
        pytest.skip("this OS does not say which process is which without starting one")
    monkeypatch.setattr(lineage, "_adopted", f"{me.pid}-{me.start}")
    assert lineage.lfs_argv() == me.argv and me.argv
    monkeypatch.setattr(lineage, "_adopted", f"{me.pid}-{me.start}0")
    assert lineage.lfs_argv() is None


@settings(max_examples=100)
@given(st.lists(st.lists(st.integers(0, 60), max_size=40), min_size=1, max_size=5), st.data())
def test_a_window_follows_the_batch_of_the_object_it_starts_from(batches: list[list[int]], data: st.DataObject) -> None:
    """After the object asked for come the rest of its batch (from there on, then from the
    batch's start), then every other guessed pointer, each once; batches past the one that
    holds the object are not read."""
    guess = PointerGuess(iter([[(_oid(n), n) for n in batch] for batch in batches]))
    wanted = data.draw(st.sampled_from([n for batch in batches for n in batch] or [999]))
    position = guess.find(_oid(wanted))
    around = [o for o, _ in guess.around(position)]
    order = [o for o, _ in guess.order]
    if position is None:
        assert around == order == list(dict.fromkeys(_oid(n) for batch in batches for n in batch))
        return
    k = next(k for k, batch in enumerate(batches) if wanted in batch)
    earlier = {n for batch in batches[:k] for n in batch}
    assert set(order) == {_oid(n) for batch in batches[: k + 1] for n in batch}
    new = [_oid(n) for n in dict.fromkeys(batches[k]) if n not in earlier]
    at = new.index(_oid(wanted))
    assert around[: len(new) - 1] == new[at + 1 :] + new[:at]
    assert sorted(around) == sorted(o for o in order if o != _oid(wanted))
