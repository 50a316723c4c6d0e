"""Which shard validations skip the queue (server/shard_intake.py `parsed_if_small`): only shards that are
small by structure: a few chunks referenced in all, in a small body. Claimed sizes and lengths
must not matter, or one request could pass a large validation off as a small one. A small one
comes back parsed, as parse_shard parses it (its registration uses that parse)."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from git_xet.core.shard import FileInfo, FileTerm, Shard, parse_shard, serialize_shard
from git_xet.server.shard_intake import SMALL_SHARD_BYTES, SMALL_SHARD_CHUNKS, parsed_if_small


def _shard(ranges: list[tuple[int, int]], claimed_bytes: int, seed: int) -> bytes:
    rng = random.Random(seed)
    terms = tuple(FileTerm(rng.randbytes(32), claimed_bytes, start, end) for start, end in ranges)
    info = FileInfo(rng.randbytes(32), terms, tuple(rng.randbytes(32) for _ in terms), rng.randbytes(32))
    return serialize_shard(Shard(files=(info,)), with_footer=False)


@settings(max_examples=200, deadline=None)
@given(
    ranges=st.lists(st.tuples(st.integers(0, 8000), st.integers(1, 8192)).map(lambda r: (r[0], r[0] + r[1])), min_size=1, max_size=40),
    claimed=st.integers(0, (1 << 32) - 1),
    seed=st.integers(0, 1 << 16),
)
def test_a_shard_is_small_exactly_when_it_references_few_chunks_whatever_it_claims(ranges: list[tuple[int, int]], claimed: int, seed: int) -> None:
    body = _shard(ranges, claimed, seed)
    referenced = sum(end - start for start, end in ranges)
    small = parsed_if_small(body)
    assert (small is not None) == (referenced <= SMALL_SHARD_CHUNKS and len(body) <= SMALL_SHARD_BYTES)
    assert small is None or small == parse_shard(body)


def test_a_big_body_or_an_unreadable_one_takes_a_turn() -> None:
    big = _shard([(0, 1)] * (SMALL_SHARD_BYTES // 48 + 1), 10, 2)  # one chunk per term, too many bytes in all
    assert len(big) > SMALL_SHARD_BYTES and parsed_if_small(big) is None
    assert parsed_if_small(b"not a shard") is None
    one_file = _shard([(0, 3)], 150_000, 3)
    assert parsed_if_small(one_file) is not None  # what an agent sends per small file
