"""GrantLimits over generated interleavings of grants, commits and time (an injected clock):
no token ever gets more than its burst plus its rate over any stretch of time, no repo ever has
more bytes granted and uncommitted than its allowance, a refusal is a 429 with a Retry-After
after which the same request is granted, and a refused request counts nothing."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from git_xet.server.errors import RequestRefused
from git_xet.server.grant_limits import GrantLimits

RATE, BURST, REPO_BYTES, HOLD = 2.0, 5, 1000, 30.0

steps = st.lists(
    st.one_of(
        st.tuples(st.just("grant"), st.sampled_from("ab"), st.sampled_from("xy"), st.integers(1, 400)),
        st.tuples(st.just("commit"), st.integers(0, 50)),
        st.tuples(st.just("wait"), st.sampled_from([0.0, 0.1, 0.5, 1.0, 2.5, 40.0])),
    ),
    min_size=10,
    max_size=80,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@given(steps)
def test_bounds_hold_over_any_interleaving(plan: list[tuple]) -> None:
    clock = Clock()
    limits = GrantLimits(HOLD, RATE, BURST, REPO_BYTES, clock)
    granted: list[tuple[str, str, str, int, float]] = []  # (grant id, token, repo, bytes, when)
    committed: set[str] = set()
    for step in plan:
        if step[0] == "wait":
            clock.now += step[1]
        elif step[0] == "commit":
            if granted:
                grant_id = granted[step[1] % len(granted)][0]
                limits.release(grant_id)
                committed.add(grant_id)
        else:
            _, token, repo, length = step
            grant_id = f"g{len(granted)}"
            try:
                limits.reserve(token, repo, grant_id, length)
            except RequestRefused as exc:
                assert exc.status == 429 and exc.retry_after is not None and exc.retry_after >= 1
                continue
            granted.append((grant_id, token, repo, length, clock.now))
        for repo in "xy":
            held = sum(n for g, _t, r, n, when in granted if r == repo and g not in committed and clock.now < when + HOLD)
            assert held <= REPO_BYTES
        for token in "ab":
            times = [when for _g, t, _r, _n, when in granted if t == token]
            for i, start in enumerate(times):  # in any stretch of time: at most the burst and the rate
                assert len(times[i:]) <= BURST + RATE * (times[-1] - start) + 1e-9


def test_a_refusal_says_when_the_same_request_is_granted() -> None:
    clock = Clock()
    limits = GrantLimits(HOLD, RATE, BURST, REPO_BYTES, clock)
    for i in range(BURST):
        limits.reserve("a", "x", f"g{i}", 1)
    with pytest.raises(RequestRefused) as refused:
        limits.reserve("a", "x", "late", 1)
    limits.reserve("b", "x", "other token", 1)  # another token is not held back
    assert refused.value.retry_after is not None
    clock.now += refused.value.retry_after
    limits.reserve("a", "x", "late", 1)
    limits.reserve("b", "x", "big", REPO_BYTES - BURST - 2)
    with pytest.raises(RequestRefused) as full:
        limits.reserve("b", "x", "too much", 1)  # the repo's allowance is spent
    limits.reserve("b", "y", "elsewhere", 1)
    limits.release("big")
    limits.reserve("b", "x", "too much", 1)
    assert full.value.retry_after is not None and full.value.retry_after >= 1
