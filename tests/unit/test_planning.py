"""Unit tests of reconstruction planning (pure logic: synthetic xorb layouts, no data).

Each generated case is checked against an independent model: the file expanded into its list
of (xorb, chunk) pairs with offsets, from which the chunks covering a byte range follow directly.
"""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from git_xet.core import hashes
from git_xet.core.constants import MAX_CHUNK_SIZE
from git_xet.core.reconstruction import Reconstruction
from git_xet.core.shard import FileTerm
from git_xet.core.xorb import XorbLayout
from git_xet.storage.planning import MAX_FETCH_BYTES, plan_reconstruction

KIB = 1024


def _layout(index: int, sizes: list[int], ratios: list[float]) -> XorbLayout:
    """A xorb whose chunk i decodes to sizes[i] bytes and is stored in 8 + ratio * size bytes."""
    ends, pos = [], 0
    for size, ratio in zip(sizes, ratios):
        pos += 8 + max(1, int(size * ratio))
        ends.append(pos)
    return XorbLayout(hashes.XetHash(bytes([index]) * 32), tuple(bytes([index, i % 256]) * 16 for i in range(len(sizes))), tuple(ends), tuple(sizes))


@st.composite
def stored_files(draw: st.DrawFn) -> tuple[list[FileTerm], dict[str, XorbLayout]]:
    """A few xorbs of random chunk sizes (some big enough to need several fetch ranges) and a
    file made of runs from them, repeated and interleaved at will."""
    layouts = {}
    for i in range(draw(st.integers(1, 4))):
        n = draw(st.integers(1, 400))
        big = draw(st.booleans())
        size = st.integers(MAX_CHUNK_SIZE // 2, MAX_CHUNK_SIZE) if big else st.integers(1, 96 * KIB)
        sizes = draw(st.lists(size, min_size=n, max_size=n))
        ratios = draw(st.lists(st.sampled_from([0.1, 0.5, 1.0]), min_size=n, max_size=n))
        layout = _layout(i + 1, sizes, ratios)
        layouts[layout.xorb_hex] = layout
    names = sorted(layouts)
    terms = []
    for _ in range(draw(st.integers(1, 12))):
        layout = layouts[draw(st.sampled_from(names))]
        n = len(layout.chunk_sizes)
        start = draw(st.integers(0, n - 1))
        end = draw(st.integers(start + 1, n))
        terms.append(FileTerm(hashes.hex_to_hash(layout.xorb_hex), sum(layout.chunk_sizes[start:end]), start, end))
    return terms, layouts


def _expand(terms: list[FileTerm], layouts: dict[str, XorbLayout]) -> list[tuple[str, int, int]]:
    """The file as (xorb, chunk index, file offset) per chunk."""
    out, pos = [], 0
    for term in terms:
        xorb = hashes.hash_to_hex(term.xorb_hash)
        for idx in range(term.chunk_start, term.chunk_end):
            out.append((xorb, idx, pos))
            pos += layouts[xorb].chunk_sizes[idx]
    return out


@settings(max_examples=300, deadline=None)
@given(stored_files(), st.data())
def test_plan_covers_exactly_the_range_with_bounded_disjoint_fetches(case, data) -> None:
    terms, layouts = case
    size = sum(t.unpacked_bytes for t in terms)
    start = data.draw(st.integers(0, size - 1))
    end = data.draw(st.integers(start, size - 1))
    plan = plan_reconstruction(terms, layouts, (start, end))

    # The terms list exactly the chunks overlapping [start, end], in file order.
    expected = [(x, i) for x, i, pos in _expand(terms, layouts) if pos + layouts[x].chunk_sizes[i] > start and pos <= end]
    got = [(t.xorb, i) for t in plan.terms for i in range(t.chunk_start, t.chunk_end)]
    assert got == expected
    first_offset = next(pos for x, i, pos in _expand(terms, layouts) if pos + layouts[x].chunk_sizes[i] > start)
    assert first_offset + plan.offset_into_first_range == start
    for term in plan.terms:
        assert term.length == sum(layouts[term.xorb].chunk_sizes[term.chunk_start : term.chunk_end])

    # Every fetch range: its layout's bytes, within the bound, disjoint from its xorb's others.
    by_xorb: dict[str, list[tuple[int, int]]] = {}
    for f in plan.fetches:
        layout = layouts[f.xorb]
        assert (f.byte_start, f.byte_end) == layout.byte_range(f.chunk_start, f.chunk_end)
        if f.chunk_end - f.chunk_start > 1:  # one chunk always fits; more must respect the bound
            assert f.byte_end - f.byte_start + 1 <= MAX_FETCH_BYTES
            assert sum(layout.chunk_sizes[f.chunk_start : f.chunk_end]) <= MAX_FETCH_BYTES
        by_xorb.setdefault(f.xorb, []).append((f.chunk_start, f.chunk_end))
    for ranges in by_xorb.values():
        ranges.sort()
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(ranges)), "fetch ranges of one xorb overlap"

    # Each term in one range, every range used, and the plan survives the client's validation.
    covering = plan.term_fetches()
    assert all(f.covers(t) for f, t in zip(covering, plan.terms))
    assert set(covering) == set(plan.fetches)
    Reconstruction(plan.offset_into_first_range, plan.terms, plan.fetches).validate()


def test_repeated_region_is_fetched_once() -> None:
    """A B A: the second A reuses the first A's ranges (no second fetch of the same bytes)."""
    a = _layout(1, [MAX_CHUNK_SIZE] * 300, [1.0] * 300)  # ~37.5 MiB: three fetch ranges
    b = _layout(2, [64 * KIB] * 10, [1.0] * 10)
    layouts = {a.xorb_hex: a, b.xorb_hex: b}
    terms = [
        FileTerm(hashes.hex_to_hash(a.xorb_hex), 300 * MAX_CHUNK_SIZE, 0, 300),
        FileTerm(hashes.hex_to_hash(b.xorb_hex), 640 * KIB, 0, 10),
        FileTerm(hashes.hex_to_hash(a.xorb_hex), 100 * MAX_CHUNK_SIZE, 50, 150),
    ]
    plan = plan_reconstruction(terms, layouts, (0, 300 * MAX_CHUNK_SIZE + 640 * KIB + 100 * MAX_CHUNK_SIZE - 1))
    fetched = sum(f.byte_end - f.byte_start + 1 for f in plan.fetches)
    assert fetched == a.byte_ends[-1] + b.byte_ends[-1]
    assert len([f for f in plan.fetches if f.xorb == a.xorb_hex]) == -(-a.byte_ends[-1] // MAX_FETCH_BYTES)
