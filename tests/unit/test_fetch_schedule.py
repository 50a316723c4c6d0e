"""Unit tests of the download's fetch schedule (pure logic), against its documented invariant."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from git_xet.pipelines.fetch_schedule import _MaxTree, plan_loads


def _spans(loads, n: int) -> list[list[int]]:
    """For each term position, the indices of the loads held there."""
    at: list[list[int]] = [[] for _ in range(n)]
    for i, load in enumerate(loads):
        for t in range(load.first_term, load.last_term + 1):
            at[t].append(i)
    return at


cases = st.integers(1, 12).flatmap(
    lambda keys: st.tuples(
        st.lists(st.integers(0, keys - 1), min_size=1, max_size=200),
        st.lists(st.integers(1, 100), min_size=keys, max_size=keys),
        st.integers(1, 400),
    )
)


@settings(max_examples=500, deadline=None)
@given(cases)
def test_schedule_keeps_its_invariant(case) -> None:
    sequence, costs, budget = case
    cost = dict(enumerate(costs))
    loads, serving = plan_loads(sequence, cost, budget)
    # Each term is served by a load of its own range that spans it.
    for t, key in enumerate(sequence):
        load = loads[serving[t]]
        assert load.key == key and load.first_term <= t <= load.last_term
    # Loads start in the order they are first needed, one per start position.
    firsts = [load.first_term for load in loads]
    assert firsts == sorted(set(firsts))
    # What is held at any term fits the budget, or one load is held alone.
    for held in _spans(loads, len(sequence)):
        assert len(held) == 1 or sum(loads[i].cost for i in held) <= budget
    # A load never spans a term of its range that another load serves.
    for t, key in enumerate(sequence):
        for i in _spans(loads, len(sequence))[t]:
            assert loads[i].key != key or i == serving[t]


@settings(max_examples=200, deadline=None)
@given(cases)
def test_schedule_fetches_each_range_once_when_everything_fits(case) -> None:
    sequence, costs, _ = case
    cost = dict(enumerate(costs))
    loads, _ = plan_loads(sequence, cost, sum(costs))
    assert sorted(load.key for load in loads) == sorted(set(sequence))


def test_repeats_beyond_the_budget_are_fetched_again() -> None:
    """A B C A B: what is kept depends on how many ranges fit at once."""
    cost = dict.fromkeys("ABC", 32)
    # Room for one: nothing is kept across another range.
    assert [load.key for load in plan_loads(list("ABCAB"), cost, 48)[0]] == list("ABCAB")
    # Room for two: A is kept beside B and then C; B would make three beside A and C.
    assert [load.key for load in plan_loads(list("ABCAB"), cost, 64)[0]] == list("ABCB")
    # Room for three: each once.
    assert [load.key for load in plan_loads(list("ABCAB"), cost, 96)[0]] == list("ABC")


def test_one_range_referenced_hundreds_of_times() -> None:
    sequence = [k for i in range(300) for k in ("shared", f"other{i}")]
    cost = dict.fromkeys(sequence, 10)
    loads, _ = plan_loads(sequence, cost, 25)
    assert sum(1 for load in loads if load.key == "shared") == 1  # kept: it and one other fit


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 70), st.lists(st.tuples(st.integers(0, 69), st.integers(0, 70), st.integers(-5, 20)), max_size=60))
def test_max_tree_matches_a_list(n, operations) -> None:
    tree, model = _MaxTree(n), [0] * n
    for lo, hi, value in operations:
        lo, hi = min(lo, n), min(hi, n)
        tree.add(lo, hi, value)
        for i in range(lo, hi):
            model[i] += value
        assert tree.max(lo, hi) == (max(model[lo:hi]) if lo < hi else 0)
        assert tree.max(0, n) == max(model)
