"""Merging small files' upload bundles (core/bundle_merge.py): the merged bundle is the one built
from all the files at once, each file keeps its own claim, and a group never outgrows a bundle."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from git_xet.core.bundle_merge import (
    MAX_GROUP_BYTES,
    MAX_GROUP_CHUNKS,
    MAX_GROUP_FILES,
    MAX_GROUP_SHARD_BYTES,
    BundleParts,
    fits_with,
    groupable,
    merge_bundles,
)
from git_xet.server.shard_intake import SMALL_SHARD_BYTES, SMALL_SHARD_CHUNKS
from git_xet.storage.cas_store import chunks_referenced
from git_xet.core.shard import Shard, parse_shard
from git_xet.core.upload_bundle import MAX_BUNDLE_XORBS
from tests.support.objects import bundle_parts

small_files = st.lists(st.binary(min_size=1, max_size=3000), min_size=1, max_size=MAX_GROUP_FILES, unique=True)


def _parts(data: bytes, claim: bytes | None) -> BundleParts:
    xorbs, shard = bundle_parts([data], True, [claim])
    return BundleParts.of(xorbs, shard)


@given(small_files, st.data())
def test_merged_bundle_is_the_one_built_from_all_files(files: list[bytes], data: st.DataObject) -> None:
    # Some claims wrong: a merged shard must carry each file's claim as sent, not fix or drop it.
    claims: list[bytes | None] = [
        data.draw(st.sampled_from([hashlib.sha256(f).digest(), None, hashlib.sha256(f + b"x").digest()])) for f in files
    ]
    merged = merge_bundles([_parts(f, c) for f, c in zip(files, claims)])
    all_xorbs, all_shard = bundle_parts(files, False, claims)
    assert merged.shard == all_shard
    assert merged.chunks == chunks_referenced(parse_shard(all_shard))
    assert sorted(merged.xorbs) == sorted(all_xorbs)
    by_hash = {info.file_hash: info for info in parse_shard(merged.shard).files}
    for f, claim in zip(files, claims):
        (own,) = parse_shard(_parts(f, claim).shard).files
        assert by_hash[own.file_hash] == own
        assert own.sha256 == claim


@given(st.binary(min_size=1, max_size=2000))
def test_the_same_file_twice_is_named_once(data: bytes) -> None:
    parts = _parts(data, hashlib.sha256(data).digest())
    assert merge_bundles([parts, parts]).shard == parts.shard
    assert len(merge_bundles([parts, parts]).xorbs) == 1


def test_an_empty_group_is_refused() -> None:
    with pytest.raises(ValueError):
        merge_bundles([])


def test_a_merged_shard_stays_one_the_server_validates_at_once() -> None:
    assert (MAX_GROUP_SHARD_BYTES, MAX_GROUP_CHUNKS) == (SMALL_SHARD_BYTES, SMALL_SHARD_CHUNKS)


@given(
    st.lists(
        st.tuples(st.integers(1, MAX_BUNDLE_XORBS), st.integers(1, 6 * 1024 * 1024), st.integers(1, 40 * 1024), st.integers(1, 40)),
        min_size=1,
        max_size=20,
    )
)
def test_a_group_built_with_fits_with_stays_within_every_bound(bundles: list[tuple[int, int, int, int]]) -> None:
    group: list[BundleParts] = []
    made = 0
    for count, size, shard_size, chunks in bundles:
        xorbs = tuple((f"{made + i:064x}", bytes(size // count)) for i in range(count))
        made += count
        more = BundleParts(xorbs, bytes(shard_size), chunks, Shard((), ()))  # sizes only: what fits_with reads
        if fits_with(group, more):
            group.append(more)
    assert group  # the first always fits
    if len(group) > 1:
        assert len(group) <= MAX_GROUP_FILES
        assert sum(len(p.xorbs) for p in group) <= MAX_BUNDLE_XORBS
        assert sum(p.size for p in group) <= MAX_GROUP_BYTES
        assert sum(len(p.shard) for p in group) <= MAX_GROUP_SHARD_BYTES
        assert sum(p.chunks for p in group) <= MAX_GROUP_CHUNKS


@given(st.lists(st.binary(min_size=1, max_size=3000), min_size=1, max_size=4, unique=True), st.data())
def test_a_bundle_is_groupable_only_with_every_xorb_its_shard_names(files: list[bytes], data: st.DataObject) -> None:
    """A bundle whose shard names a xorb sent earlier (in an upload stream) must go alone with
    its stream header; one holding all its xorbs goes as the same parts it was given."""
    xorbs, shard = bundle_parts(files, data.draw(st.booleans()), [None] * len(files))
    parts = groupable(xorbs, shard)
    assert parts == BundleParts.of(xorbs, shard)
    dropped = data.draw(st.integers(0, len(xorbs) - 1))
    assert groupable(xorbs[:dropped] + xorbs[dropped + 1 :], shard) is None
