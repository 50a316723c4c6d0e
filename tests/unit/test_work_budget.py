"""The shard work budget (storage/work_budget.py) against a brute-force count of references."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from git_xet.core.shard import FileTerm
from git_xet.storage import work_budget
from git_xet.storage.work_budget import WorkBudgetExceeded, check_reference_budget


@st.composite
def _shards(draw):
    """Xorbs (chunk sizes) and terms over them, with plenty of overlap and repetition."""
    xorbs = {bytes([i]) * 32: draw(st.lists(st.integers(1, 5000), min_size=1, max_size=12)) for i in range(draw(st.integers(1, 3)))}
    terms = []
    for _ in range(draw(st.integers(0, 30))):
        xorb = draw(st.sampled_from(sorted(xorbs)))
        start = draw(st.integers(0, len(xorbs[xorb]) - 1))
        end = draw(st.integers(start + 1, len(xorbs[xorb])))
        terms.append(FileTerm(xorb, sum(xorbs[xorb][start:end]), start, end))
    return xorbs, terms, draw(st.integers(0, 2000))


@settings(max_examples=300, deadline=None)
@given(case=_shards(), chunk_floor=st.integers(0, 40), byte_floor=st.integers(0, 60_000))
def test_refuses_exactly_when_repeated_references_exceed_the_budget(case, chunk_floor: int, byte_floor: int, monkeypatch_module) -> None:
    xorbs, terms, shard_size = case
    monkeypatch_module.setattr(work_budget, "REPEATED_CHUNKS_FLOOR", chunk_floor)
    monkeypatch_module.setattr(work_budget, "REPEATED_BYTES_FLOOR", byte_floor)
    seen = Counter((t.xorb_hash, i) for t in terms for i in range(t.chunk_start, t.chunk_end))
    repeated_chunks = sum(n - 1 for n in seen.values())
    repeated_bytes = sum((n - 1) * xorbs[x][i] for (x, i), n in seen.items())
    over = repeated_chunks > max(chunk_floor, int(shard_size * work_budget.REPEATED_CHUNKS_PER_SHARD_BYTE)) or repeated_bytes > max(
        byte_floor, shard_size * work_budget.REPEATED_BYTES_PER_SHARD_BYTE
    )
    if over:
        with pytest.raises(WorkBudgetExceeded):
            check_reference_budget(shard_size, terms, xorbs)
    else:
        check_reference_budget(shard_size, terms, xorbs)


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


@pytest.mark.parametrize("gib", [1, 10, 100])
def test_a_file_of_zeros_stays_inside_the_budget(gib: int) -> None:
    """hf-xet's shard for N GiB of zeros: one 128 KiB chunk, named once per term (96 bytes each)."""
    xorb = b"z" * 32
    terms = [FileTerm(xorb, 128 * 1024, 0, 1)] * (gib * 8192)
    check_reference_budget(96 * len(terms), terms, {xorb: [128 * 1024]})
