"""bench/ranged_basic_agent.py (upstream's git-xet download design as a git-lfs agent, the clone
baseline) cuts objects as upstream describes: up to 8 ranged GETs of at least 16 MiB each,
covering every byte once; and its clone row reaches the summary (bench/run_all.py)."""

from __future__ import annotations

import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import git_e2e
import ranged_basic_agent
import run_all

MIB = 1 << 20


@given(st.one_of(st.integers(0, 40 * MIB), st.integers(0, 1 << 40)))
def test_parts_are_at_most_8_of_at_least_16_mib_covering_every_byte_once(size: int) -> None:
    parts = ranged_basic_agent.parts(size)
    assert len(parts) <= 8
    covered = 0
    for first, last in parts:
        assert first == covered and last >= first
        covered = last + 1
    assert covered == size
    if len(parts) > 1:
        assert all(last - first + 1 >= 16 * MIB for first, last in parts)
    if size >= 8 * 16 * MIB:
        assert len(parts) == 8


def _sample(seconds: float) -> dict[str, float]:
    return {"seconds": seconds, "client_cpu": 1.0, "server_cpu": 1.0, "bytes_in": 1.0, "bytes_out": 1.0, "agent_peak_rss_mib": float("nan")}


def test_the_ranged_basic_clone_is_a_row_of_the_summary() -> None:
    run = {"push": [_sample(2.0)], "clone": [_sample(3.0)], "push_v2": [_sample(1.0)], git_e2e.RANGED_CLONE: [_sample(4.0), _sample(5.0)]}
    lfs = {"push": [_sample(2.0)], "clone": [_sample(3.0)], "push_v2": [_sample(1.0)]}
    summary = {"files": 2, "file_mib": 32, "repeats": 1, "clones": 2, "tools": {"git-xet": git_e2e.phase_medians([run]), "git-lfs": git_e2e.phase_medians([lfs])}}
    rows = [row for row in run_all.git_e2e_rows(summary) if "ranged basic" in row]
    assert len(rows) == 1 and "ranged basic 4.50 (4.00-5.00)" in rows[0] and "| 0.67 |" in rows[0]
    assert git_e2e.RANGED_CLONE not in summary["tools"]["git-lfs"]
