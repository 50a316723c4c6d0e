"""The range-edit answer (`GET /v2/file-chunk-hashes/{file}`) and `chunk_byte_sizes`, as data.

Shapes follow xet-core's types (xet_client/src/cas_types/mod.rs: `FileChunkHashesResponse`,
`ChunkWindow`, camelCase; `XorbReconstructionTerm.chunk_byte_sizes`, a `Vec<u32>` in chunk
order); window placement follows the examples of xet-core's
xet_client/src/cas_client/chunk_window_builder.rs tests. That the gap summaries merge into the
right file hash in the clients' own code is checked against huggingface.js in
tests/integration/test_range_edits.py.
"""

from __future__ import annotations

import hashlib
import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from git_xet.core import hashes
from git_xet.core.chunk_windows import file_chunk_hashes, is_stable_chunk_size, parse_dirty_ranges
from git_xet.core.constants import MAX_CHUNK_SIZE, MIN_CHUNK_SIZE
from git_xet.core.merkle_subtree import MerkleSubtree
from git_xet.core.reconstruction import Reconstruction, Term
from git_xet.core.shard import FileTerm
from git_xet.core.xorb import XorbLayout
from git_xet.pipelines.file_hashing import hash_bytes
from git_xet.server.errors import RequestRefused
from git_xet.server.file_chunk_hashes import answer as file_chunk_hashes_answer
from git_xet.server.cas_api import wants_chunk_byte_sizes, with_chunk_byte_sizes
from git_xet.storage.cas_store import CasStore
from tests.support.datagen import random_bytes
from tests.support.objects import single_xorb, whole_xorb_file_shard

STABLE = 2 * MIN_CHUNK_SIZE  # the smallest stable chunk size, as xet-core's tests use


def digest(i: int) -> bytes:
    return hashlib.sha256(i.to_bytes(8, "little")).digest()


def one_term_file(sizes: list[int]) -> tuple[list[FileTerm], list[tuple[bytes, int]]]:
    chunks = [(digest(i), s) for i, s in enumerate(sizes)]
    return [FileTerm(hashes.XetHash(digest(999)), sum(sizes), 0, len(sizes))], chunks


def answer(
    sizes: list[int], dirty: list[tuple[int, int]], terms: list[FileTerm] | None = None
) -> dict:
    one_terms, chunks = one_term_file(sizes)
    return file_chunk_hashes(terms or one_terms, chunks, sum(sizes), dirty)


# ---------------------------------------------------------------- windows


def test_window_extends_to_the_second_stable_chunk_after_the_edit() -> None:
    body = answer([STABLE] * 6, [(1, STABLE + 1)])
    assert body["windows"] == [{"dirtyByteRange": [0, 4 * STABLE]}]
    assert len(body["hashRanges"]) == 2 and body["hashRanges"][0] is None
    assert body["hashRanges"][1]["at_start"] is False and body["hashRanges"][1]["at_end"] is True
    assert body["totalChunks"] == 6 and body["fileSize"] == 6 * STABLE


def test_ranges_that_meet_after_extension_coalesce() -> None:
    body = answer([STABLE] * 8, [(1, STABLE + 1), (3 * STABLE + 7, 3 * STABLE + 42)])
    assert body["windows"] == [{"dirtyByteRange": [0, 6 * STABLE]}]


def test_a_window_at_the_end_of_the_file_stays_there() -> None:
    body = answer([STABLE] * 6, [(4 * STABLE, 6 * STABLE)])
    assert body["windows"] == [{"dirtyByteRange": [4 * STABLE, 6 * STABLE]}]
    assert body["hashRanges"][1] is None and body["hashRanges"][0]["at_start"] is True


def test_far_apart_ranges_stay_separate() -> None:
    body = answer([STABLE] * 20, [(0, STABLE), (14 * STABLE, 15 * STABLE)])
    assert len(body["windows"]) == 2
    assert len(body["hashRanges"]) == 3


def test_without_a_stable_boundary_the_window_runs_to_the_end() -> None:
    body = answer([MAX_CHUNK_SIZE] * 4, [(0, MAX_CHUNK_SIZE)])
    assert body["windows"] == [{"dirtyByteRange": [0, 4 * MAX_CHUNK_SIZE]}]


def test_stable_sizes_are_those_of_xet_core() -> None:
    # [2 * 64 KiB / 8, 64 KiB * 2 - 64 KiB / 8), xet_core_structures/src/xorb_object/constants.rs
    assert [is_stable_chunk_size(s) for s in (16383, 16384, 122879, 122880)] == [
        False,
        True,
        True,
        False,
    ]


@given(
    sizes=st.lists(st.integers(1, MAX_CHUNK_SIZE), min_size=1, max_size=60),
    edits=st.lists(st.tuples(st.floats(0, 1), st.floats(0, 0.2)), min_size=1, max_size=5),
)
def test_windows_cover_the_edits_on_chunk_boundaries_and_gaps_cover_the_rest(
    sizes: list[int], edits: list[tuple[float, float]]
) -> None:
    size = sum(sizes)
    header = "bytes=" + ",".join(
        f"{int(a * (size - 1))}-{min(size - 1, int(a * (size - 1)) + int(b * size))}"
        for a, b in edits
    )
    dirty = parse_dirty_ranges(header, size, 16)
    body = answer(sizes, dirty)
    ends = {0}
    for s in sizes:
        ends.add(max(ends) + s)
    windows = [w["dirtyByteRange"] for w in body["windows"]]
    for start, end in windows:
        assert start in ends and end in ends and start < end
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(windows))  # disjoint, in order
    for start, end in dirty:
        assert any(w0 <= start and end <= w1 for w0, w1 in windows)
    # The gaps' summaries account for every byte outside the windows.
    gap_bytes = sum(node["size"] for gap in body["hashRanges"] if gap for node in gap["nodes"])
    assert gap_bytes == size - sum(end - start for start, end in windows)
    assert len(body["hashRanges"]) == len(windows) + 1


def test_gap_verification_names_each_untouched_term_in_order() -> None:
    sizes = [STABLE] * 30
    chunks = [(digest(i), s) for i, s in enumerate(sizes)]
    terms = [FileTerm(hashes.XetHash(digest(1000 + t)), 10 * STABLE, 0, 10) for t in range(3)]
    body = file_chunk_hashes(terms, chunks, sum(sizes), [(10 * STABLE, 11 * STABLE)])
    assert body["windows"] == [{"dirtyByteRange": [10 * STABLE, 13 * STABLE]}]
    expected = [
        hashes.hash_to_hex(hashes.verification_hash([h for h, _ in chunks[t * 10 : t * 10 + 10]]))
        for t in (0, 2)
    ]
    assert body["gapVerification"] == expected


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "items=0-1",
        "bytes=",
        "bytes=5",
        "bytes=a-b",
        "bytes=9-3",
        "bytes=-5",
        "bytes=100-200",
    ],
)
def test_malformed_or_outside_dirty_headers_are_refused_with_what_to_send(
    header: str | None,
) -> None:
    with pytest.raises(ValueError, match="X-Range-Dirty"):
        parse_dirty_ranges(header, 100, 16)


def test_too_many_dirty_ranges_are_refused() -> None:
    with pytest.raises(ValueError, match="at most 4"):
        parse_dirty_ranges("bytes=" + ",".join(f"{i}-{i}" for i in range(0, 10, 2)), 100, 4)


def test_dirty_ranges_are_sorted_merged_and_clipped() -> None:
    assert parse_dirty_ranges("bytes=50-60, 0-9,10-19,55-500", 100, 16) == [(0, 20), (50, 100)]


# ---------------------------------------------------------------- subtrees


nodes_strategy = st.lists(st.tuples(st.integers(0, 2**32), st.integers(1, 10_000)), max_size=400)


@given(leaves=nodes_strategy)
def test_a_subtree_of_the_whole_file_is_its_root(leaves: list[tuple[int, int]]) -> None:
    chunks = [(digest(seed), size) for seed, size in leaves]
    tree = MerkleSubtree.from_chunks(True, chunks, True)
    if not chunks:
        assert tree.is_empty()
        return
    assert len(tree.nodes) == 1 and tree.levels[-1] == (1, 0)
    assert all(level == (0, 0) for level in tree.levels[:-1])
    assert tree.nodes[0] == (hashes.merkle_root(chunks), sum(size for _, size in chunks))


@given(leaves=nodes_strategy, at_start=st.booleans(), at_end=st.booleans())
def test_a_subtree_keeps_every_byte_and_few_nodes(
    leaves: list[tuple[int, int]], at_start: bool, at_end: bool
) -> None:
    chunks = [(digest(seed), size) for seed, size in leaves]
    tree = MerkleSubtree.from_chunks(at_start, chunks, at_end)
    assert sum(size for _, size in tree.nodes) == sum(size for _, size in chunks)
    assert sum(left + right for left, right in tree.levels) == len(tree.nodes)
    body = tree.to_json()
    assert set(body) == {"nodes", "levels", "at_start", "at_end"}
    assert all(
        set(node) == {"hash", "size"} and hashes.is_hash_hex(node["hash"]) for node in body["nodes"]
    )
    if len(chunks) >= 200:  # O(log n): a fringe per level, far fewer nodes than chunks
        assert len(tree.nodes) < len(chunks) // 2


# ---------------------------------------------------------------- chunk_byte_sizes


def test_chunk_byte_sizes_are_each_terms_chunk_sizes_in_order() -> None:
    layout = XorbLayout(
        hashes.XetHash(digest(1)),
        tuple(hashes.XetHash(digest(i)) for i in range(5)),
        (10, 20, 30, 40, 50),
        (100, 200, 300, 400, 500),
    )
    xorb = layout.xorb_hex
    plan = Reconstruction(0, (Term(xorb, 1, 3, 500), Term(xorb, 4, 5, 500)))
    body = with_chunk_byte_sizes(plan.to_json(2), plan, {xorb: layout})
    assert [t["chunk_byte_sizes"] for t in body["terms"]] == [[200, 300], [500]]
    assert all(sum(t["chunk_byte_sizes"]) == t["unpacked_length"] for t in body["terms"])


@pytest.mark.parametrize(
    ("query", "wanted"),
    [
        ({}, False),
        ({"chunk_byte_sizes": "true"}, True),
        ({"chunk_byte_sizes": "false"}, False),
        ({"x": "1"}, False),
    ],
)
def test_chunk_byte_sizes_only_when_asked(query: dict[str, str], wanted: bool) -> None:
    assert wants_chunk_byte_sizes(query) is wanted


# ---------------------------------------------------------------- against a store


@pytest.fixture
def stored_file(tmp_path):
    """A 600 KB file stored in a real CasStore for repo `a/one`: (store, file hex, data)."""
    store = CasStore(tmp_path / "store")
    data = random_bytes(600_000, 5)
    built, digest = single_xorb(data)
    store.put_xorb(built.layout().xorb_hex, built.body)
    digest = hash_bytes(data, with_sha256=True)
    store.register_shard(whole_xorb_file_shard(digest, built.xorb_hash), repo="a/one")
    try:
        yield store, hashes.hash_to_hex(digest.file_hash), data
    finally:
        store.close()


def test_the_answer_covers_the_stored_file_and_only_its_repo_sees_it(stored_file) -> None:
    store, file_hex, data = stored_file
    before = store.stats()
    body = file_chunk_hashes_answer(store, "a/one", file_hex, "bytes=1000-2000")
    assert body["fileSize"] == len(data) and body["totalChunks"] == len(hash_bytes(data).chunk_hashes)
    assert body["windows"][0]["dirtyByteRange"][0] == 0 and len(body["hashRanges"]) == 2
    for repo, name in (("b/two", file_hex), ("a/one", "ab" * 32)):
        with pytest.raises(RequestRefused) as refused:
            file_chunk_hashes_answer(store, repo, name, "bytes=1000-2000")
        assert refused.value.status == 404
    assert store.stats() == before


def test_a_file_over_the_chunk_cap_is_refused_with_what_to_do(stored_file) -> None:
    store, file_hex, data = stored_file
    chunks = len(hash_bytes(data).chunk_hashes)
    assert file_chunk_hashes_answer(store, "a/one", file_hex, "bytes=0-0", max_chunks=chunks)["totalChunks"] == chunks
    with pytest.raises(RequestRefused) as refused:
        file_chunk_hashes_answer(store, "a/one", file_hex, "bytes=0-0", max_chunks=chunks - 1)
    assert refused.value.status == 413 and "upload the edited file whole" in refused.value.message
    with pytest.raises(RequestRefused) as refused:
        file_chunk_hashes_answer(store, "a/one", file_hex, None)
    assert refused.value.status == 400 and "X-Range-Dirty" in refused.value.message
