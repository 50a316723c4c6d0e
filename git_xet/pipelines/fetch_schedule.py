"""Which xorb ranges a download fetches, in what order, and how long it keeps each one.

A reconstruction lists terms in file order; each term is served by one fetch range, and a range
may serve many terms far apart (a file that repeats itself, a xorb shared by interleaved
regions). Keeping every range until its last use would hold unbounded memory; dropping it after
each use would fetch it again for every term. The schedule keeps a fetched range for its next
use only while the bytes held stay within the budget, and fetches it again otherwise.

The plan is a list of *loads* (one fetch of one range, serving a run of terms), in the order
they are first needed. Its invariant, for every term position t: the loads whose span
[first_term, last_term] contains t cost at most `budget` together, or one load alone holds t.
That is what lets the download's executor always start the load the writer waits for: when the
writer reaches a load's first term, everything else still held spans that term too.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)  # what one fetch is keyed by (the download uses FetchRange)


class Load(Generic[K]):
    """One fetch of `key`, serving terms first_term..last_term (those that map to it)."""

    __slots__ = ("cost", "first_term", "key", "last_term")

    def __init__(self, key: K, cost: int, first_term: int, last_term: int) -> None:
        self.key = key
        self.cost = cost
        self.first_term = first_term
        self.last_term = last_term  # grows while later terms join this fetch


class _MaxTree:
    """Range add / range max over n positions (a lazy segment tree), all starting at 0."""

    def __init__(self, n: int) -> None:
        self.size = 1
        while self.size < max(1, n):
            self.size *= 2
        self.top = [0] * (2 * self.size)  # max over the node's span, its own adds included
        self.add_ = [0] * (2 * self.size)  # pending add for the whole span

    def add(self, lo: int, hi: int, value: int, node: int = 1, nlo: int = 0, nhi: int | None = None) -> None:
        """Add value to positions [lo, hi)."""
        nhi = self.size if nhi is None else nhi
        if hi <= nlo or nhi <= lo:
            return
        if lo <= nlo and nhi <= hi:
            self.top[node] += value
            self.add_[node] += value
            return
        mid = (nlo + nhi) // 2
        self.add(lo, hi, value, 2 * node, nlo, mid)
        self.add(lo, hi, value, 2 * node + 1, mid, nhi)
        self.top[node] = self.add_[node] + max(self.top[2 * node], self.top[2 * node + 1])

    def max(self, lo: int, hi: int) -> int:
        """Max over positions [lo, hi); 0 for an empty range."""
        found = self._max(lo, hi, 1, 0, self.size) if lo < hi else None
        return 0 if found is None else found

    def _max(self, lo: int, hi: int, node: int, nlo: int, nhi: int) -> int | None:
        if hi <= nlo or nhi <= lo:
            return None
        if lo <= nlo and nhi <= hi:
            return self.top[node]
        mid = (nlo + nhi) // 2
        parts = [m for m in (self._max(lo, hi, 2 * node, nlo, mid), self._max(lo, hi, 2 * node + 1, mid, nhi)) if m is not None]
        return self.add_[node] + max(parts)


def plan_loads(term_keys: Sequence[K], cost: dict[K, int], budget: int) -> tuple[list[Load[K]], list[int]]:
    """Loads in the order they are first needed, and for each term the index of its load.

    A term whose range is already loaded reuses that load when holding it until then keeps
    every position in between within the budget; otherwise the range is loaded again.
    """
    usage = _MaxTree(len(term_keys))
    loads: list[Load[K]] = []
    live: dict[K, int] = {}  # key -> index of its latest load
    serving: list[int] = []
    for t, key in enumerate(term_keys):
        c = cost[key]
        index = live.get(key)
        if index is not None:
            load = loads[index]
            gap_lo, gap_hi = load.last_term + 1, t  # positions the load would now also span
            if usage.max(gap_lo, gap_hi) + c <= budget:
                usage.add(gap_lo, t + 1, c)
                load.last_term = t
                serving.append(index)
                continue
        live[key] = len(loads)
        loads.append(Load(key, c, t, t))
        usage.add(t, t + 1, c)
        serving.append(len(loads) - 1)
    return loads, serving
