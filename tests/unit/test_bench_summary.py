"""The benchmark summary's ratio column agrees with its verdict: a ratio just over its bound is
not printed as the bound itself beside "no". The git benchmark's medians take every clone of
every repeat, the push and clone rows show their spread, the comparison with basic's checking
server appears only when it ran, and each tool takes each place in the running order."""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import git_e2e
import run_all


@pytest.mark.parametrize(
    ("ratio", "target", "met", "shown"),
    [
        (1.0045, "<= 1.0", False, "1.004"),  # two decimals would say 1.00: within the bound
        (1.502, "<= 1.5", False, "1.502"),
        (1.0, "<= 1.0", True, "1.00"),
        (2.32, "<= 2.0", False, "2.32"),  # clearly over: two decimals say so
        (0.66, "<= 0.8", True, "0.66"),
        (1.004, "<= 1.0 and <= 3%", False, "1.004"),
        (1.004, "", None, "1.00"),  # no target, no verdict
    ],
)
def test_a_ratio_is_shown_precisely_enough_for_its_verdict(ratio: float, target: str, met: bool | None, shown: str) -> None:
    assert run_all._shown_ratio(ratio, target, met) == shown
    row = run_all._row("x", "a", "b", ratio, target, met)
    assert f"| {shown} |" in row


def _sample(seconds: float) -> dict[str, float]:
    return {"seconds": seconds, "client_cpu": 2 * seconds, "server_cpu": seconds / 2, "bytes_in": 1.0, "bytes_out": 3.0, "agent_peak_rss_mib": float("nan")}


@given(st.lists(st.tuples(st.floats(0.1, 10), st.lists(st.floats(0.1, 10), min_size=1, max_size=5)), min_size=1, max_size=4))
def test_clone_medians_take_every_clone_of_every_repeat(runs: list[tuple[float, list[float]]]) -> None:
    """A repeat that cloned three times weighs three times one that cloned once: the median is
    of every clone, not of each repeat's median."""
    given_runs = [{"push": [_sample(push)], "clone": [_sample(c) for c in clones], "push_v2": [_sample(push)]} for push, clones in runs]
    medians = git_e2e.phase_medians(given_runs)
    every_clone = [c for _push, clones in runs for c in clones]
    assert medians["clone"]["seconds"] == statistics.median(every_clone)
    assert medians["clone"]["client_cpu"] == statistics.median([2 * c for c in every_clone])
    assert medians["clone"]["all_seconds"] == sorted(every_clone)
    assert medians["push"]["seconds"] == statistics.median([push for push, _clones in runs])


def test_a_run_without_clones_has_no_clone_figures() -> None:
    medians = git_e2e.phase_medians([{"push": [_sample(1.0)], "push_v2": [_sample(0.5)]}])
    assert math.isnan(medians["clone"]["seconds"]) and medians["clone"]["all_seconds"] == []
    assert medians["push_v2"]["seconds"] == 0.5


@pytest.mark.parametrize(("runs", "shown"), [([3.456, 4.0, 5.744], " (3.46-5.74)"), ([4.0], ""), ([], "")])
def test_the_clone_row_shows_lowest_and_highest_only_beside_several_runs(runs: list[float], shown: str) -> None:
    assert run_all._spread({"all_seconds": runs}) == shown


def _git_summary(pushes: dict[str, list[float]]) -> dict:
    """git_e2e's summary for tools that each pushed `pushes[tool]` (seconds, one per repeat)."""
    repeats = len(next(iter(pushes.values())))
    runs = {tool: [{"push": [_sample(s)], "clone": [_sample(2 * s)], "push_v2": [_sample(s / 4)]} for s in seconds] for tool, seconds in pushes.items()}
    return {"files": 3, "file_mib": 256, "repeats": repeats, "clones": 1, "tools": {tool: git_e2e.phase_medians(r) for tool, r in runs.items()}}


_PUSHES = st.lists(st.floats(0.1, 10), min_size=3, max_size=3)


@given(_PUSHES, _PUSHES, st.one_of(st.none(), _PUSHES))
def test_the_git_rows_show_each_push_spread_and_the_checked_baseline_only_when_it_ran(ours: list[float], basic: list[float], checked: list[float] | None) -> None:
    pushes = {"git-xet": ours, "git-lfs": basic} | ({"git-lfs-checked": checked} if checked is not None else {})
    rows = run_all.git_e2e_rows(_git_summary(pushes))
    push = next(r for r in rows if r.startswith("| git push 3 x 256 MiB (s"))
    o, b = statistics.median(ours), statistics.median(basic)
    assert f"| {o:.2f} ({min(ours):.2f}-{max(ours):.2f}) |" in push
    assert f"| git-lfs basic {b:.2f} ({min(basic):.2f}-{max(basic):.2f}) |" in push
    assert push.endswith("| <= 2.0 | yes |" if o <= 2 * b else "| <= 2.0 | **no** |")
    checked_rows = [r for r in rows if "basic's server checking each sha256" in r]
    if checked is None:
        assert checked_rows == []
    else:
        (row,) = checked_rows
        c = statistics.median(checked)
        assert f"| git-lfs basic {c:.2f} ({min(checked):.2f}-{max(checked):.2f}) |" in row
        assert row.endswith(f"| {o / c:.2f} |  |  |")  # a comparison: no target, no verdict


@given(st.integers(1, 5), st.integers(0, 20))
def test_over_as_many_repeats_as_tools_each_tool_runs_once_in_each_place(count: int, first: int) -> None:
    tools = tuple(f"tool-{i}" for i in range(count))
    orders = [git_e2e.turn_order(tools, r) for r in range(first, first + count)]
    assert all(sorted(order) == sorted(tools) for order in orders)
    for place in range(count):
        assert sorted(order[place] for order in orders) == sorted(tools)


def test_the_shaped_link_rows_set_model_like_clones_against_ranged_basic() -> None:
    """bench/wan.py's summary: each phase against git-lfs basic, and both clones (random and
    model-like bytes) against upstream's ranged basic GETs, the model row with what was stored."""
    phases = ("push", "clone", "push_v2", "push_model", "clone_model", "push_small", "clone_small")
    lfs = {phase: {"seconds": 6.0, "proxy_cpu_per_s": 0.05} for phase in phases}
    ours = {**lfs, "clone_ranged_basic": {"seconds": 6.0, "proxy_cpu_per_s": 0.05}, "clone_model_ranged_basic": {"seconds": 7.0, "proxy_cpu_per_s": 0.07}}
    ours["clone_model"] = {"seconds": 6.3, "proxy_cpu_per_s": 0.05}
    summary = {"mbit": 100.0, "rtt_ms": 40.0, "file_mib": 64, "model_mib": 64, "model_xorb_mib": 55.2, "small_files": 50, "tools": {"git-xet": ours, "git-lfs": lfs}}
    rows = run_all.wan_rows(summary)
    ranged = [row for row in rows if "ranged basic" in row]
    assert len(ranged) == 2
    assert "64 MiB, random" in ranged[0] and "| 1.00 |" in ranged[0]
    assert "model-like 64 MiB (55 MiB stored)" in ranged[1] and "| 0.90 | <= 0.95 | yes |" in ranged[1]
    assert any("clone model-like 64 MiB, bf16" in row and "| 1.05 | <= 1.0 | **no** |" in row for row in rows)
