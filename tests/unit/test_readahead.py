"""readahead: the producer's items in order, its exception after them, at most `depth` items
queued ahead of the consumer, and no thread left running once the consumer stops."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from git_xet.platform.readahead import readahead

NAME = "test-readahead"


def _thread_running() -> bool:
    return any(t.name == NAME for t in threading.enumerate())


@settings(max_examples=60, deadline=None)
@given(items=st.lists(st.integers()), depth=st.integers(1, 5))
def test_yields_every_item_in_order(items: list[int], depth: int) -> None:
    assert list(readahead(iter(items), depth, NAME)) == items
    assert not _thread_running()


class Boom(Exception):
    pass


@settings(max_examples=30, deadline=None)
@given(before=st.integers(0, 20), depth=st.integers(1, 5))
def test_an_exception_comes_after_the_items_before_it(before: int, depth: int) -> None:
    raised = Boom()

    def producer() -> Iterator[int]:
        yield from range(before)
        raise raised

    got = []
    with pytest.raises(Boom) as info:
        for item in readahead(producer(), depth, NAME):
            got.append(item)
    assert got == list(range(before))
    assert info.value is raised
    assert not _thread_running()


@pytest.mark.parametrize("depth", [1, 3])
def test_the_producer_runs_at_most_depth_items_ahead(depth: int) -> None:
    """Produced minus consumed never exceeds depth + 1: `depth` queued, plus one the producer
    holds while it waits for room. A consumer that waits for the producer to fill its queue shows that the bound is reached."""
    produced = 0

    def producer() -> Iterator[int]:
        nonlocal produced
        for i in range(40):
            produced += 1
            yield i

    consumed = 0
    most_ahead = 0
    for _ in readahead(producer(), depth, NAME):
        consumed += 1
        # Give the producer its chance by waiting for it (bounded), not by sleeping: on a loaded
        # machine a fixed sleep may pass before its thread runs at all.
        deadline = time.monotonic() + 30
        while produced < min(40, consumed + depth) and time.monotonic() < deadline:
            time.sleep(0.001)
        most_ahead = max(most_ahead, produced - consumed)
    assert consumed == 40
    assert most_ahead <= depth + 1
    assert most_ahead >= depth  # it did run ahead: the bound above was reached, not avoided


def test_a_consumer_that_stops_early_stops_the_producer() -> None:
    produced = itertools.count()

    def endless() -> Iterator[int]:
        yield from produced

    items = readahead(endless(), 2, NAME)
    assert [next(items), next(items)] == [0, 1]
    items.close()  # what a `break` or an exception in the consumer's loop does
    assert not _thread_running()
    stopped_at = next(produced)
    time.sleep(0.05)
    assert next(produced) == stopped_at + 1  # nothing took items while we slept
