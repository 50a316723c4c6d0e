"""The benchmark summary's ratio column agrees with its verdict: a ratio just over its bound is
not printed as the bound itself beside "no"."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
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
