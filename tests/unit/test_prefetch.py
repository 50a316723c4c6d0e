"""agent/prefetch.py: download answers asked a window of pointers at a time, for generated
pointer lists, request orders (as git-lfs spreads objects over agents), objects outside the
checkout and per-object errors."""

from __future__ import annotations

import math
from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from git_xet.agent.prefetch import WINDOW, BatchPrefetch
from git_xet.client.lfs_batch import BatchObject


def _oid(n: int) -> str:
    return f"{n:064x}"


@st.composite
def _scenarios(draw: st.DrawFn) -> tuple[list[tuple[str, int]], list[str], set[str]]:
    count = draw(st.integers(0, 350))
    pointers = [(_oid(n), n + 1) for n in range(count)]
    outside = [_oid(10_000 + n) for n in range(draw(st.integers(0, 5)))]
    requested = draw(st.permutations([o for o, _ in pointers] + outside))
    requested = requested[: draw(st.integers(0, len(requested)))]
    errors = set(draw(st.lists(st.sampled_from(requested), max_size=5))) if requested else set()
    return pointers, requested, errors


@settings(max_examples=150)
@given(_scenarios(), st.sampled_from(["download", "upload"]))
def test_each_answer_is_its_own_and_windows_cover_the_pointers(scenario: tuple[list[tuple[str, int]], list[str], set[str]], operation: str) -> None:
    """Uploads keep "already stored" answers (no action) too: half the objects here."""
    pointers, requested, errors = scenario
    calls: list[list[str]] = []

    def ask(objects: Sequence[tuple[str, int]]) -> list[BatchObject]:
        calls.append([o for o, _ in objects])
        return [BatchObject("basic", _entry(o)) for o, _ in objects]

    def _entry(o: str) -> dict:
        if o in errors:
            return {"oid": o, "error": {"code": 404, "message": "gone"}}
        if operation == "upload" and int(o, 16) % 2:
            return {"oid": o}  # already stored
        return {"oid": o, "actions": {operation: {"href": f"x/{o}"}}}

    prefetch = BatchPrefetch(operation, ask, lambda: list(pointers))
    for oid in requested:
        answer = prefetch.answer(oid, 1)
        assert answer.entry == _entry(oid)
    for call in calls:
        assert len(call) == len(set(call)) <= WINDOW
    asked = [o for call in calls for o in call]
    # A pointer with a good answer is asked once; a call is needed only when a window runs
    # out, or for an object outside the checkout or one whose answer was an error.
    good = [o for o in asked if o not in errors]
    assert len(good) == len(set(good))
    pointer_oids = {o for o, _ in pointers}
    special = sum(1 for o in requested if o in errors or o not in pointer_oids)
    assert len(calls) <= math.ceil(len(pointers) / WINDOW) + special
    assert prefetch.calls == len(calls)
