"""git-xet stores no more new bytes than hf-xet on real-shaped data (git-xet issue 41 §6).

Each class of data (tests/support/real_shaped.py: Parquet with and without content-defined
chunking, a checkpoint sequence, a GGUF quantization family) is generated small, from
generated seeds and sizes, and its versions pushed in order by both clients, each to its own
`git xet serve` (tests/support/dedup_compare.py). On every version, the chunk bytes git-xet's
push added to the store must not exceed hf-xet's: both see every chunk they stored before,
and git-xet refuses a match only where hf-xet's fragmentation guard would.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.dedup_compare import push_versions
from tests.support.real_shaped import Version, checkpoint_versions, parquet_versions, quantization_family

slow = settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _assert_no_more_than_hf_xet(versions: list[Version]) -> None:
    with tempfile.TemporaryDirectory(prefix="git-xet-dedup-real-") as tmp:
        ours = push_versions("git-xet", versions, Path(tmp) / "git-xet")
        theirs = push_versions("hf-xet", versions, Path(tmp) / "hf-xet")
    assert [p.version for p in ours] == [v.name for v in versions]
    for mine, hf in zip(ours, theirs):
        assert mine.new_bytes <= hf.new_bytes, (mine.version, mine.new_bytes, hf.new_bytes)
    # Not vacuous: some version deduplicated against an earlier one.
    assert any(p.new_bytes < p.size for p in ours[1:])


@slow
@given(seed=st.integers(0, 2**16), scale=st.floats(0.3, 1.0))
def test_parquet_edits_with_content_defined_chunking(seed: int, scale: float) -> None:
    _assert_no_more_than_hf_xet(parquet_versions(True, scale, seed))


@slow
@given(seed=st.integers(0, 2**16), scale=st.floats(0.3, 1.0))
def test_parquet_edits_without_content_defined_chunking(seed: int, scale: float) -> None:
    _assert_no_more_than_hf_xet(parquet_versions(False, scale, seed))


@slow
@given(seed=st.integers(0, 2**16), layers=st.integers(2, 4))
def test_a_checkpoint_sequence(seed: int, layers: int) -> None:
    _assert_no_more_than_hf_xet(checkpoint_versions(1.0, seed, layers))


@slow
@given(seed=st.integers(0, 2**16), layers=st.integers(1, 3))
def test_a_quantization_family(seed: int, layers: int) -> None:
    _assert_no_more_than_hf_xet(quantization_family(0.25, seed, layers))
