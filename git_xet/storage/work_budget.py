"""How much work validating a shard may cost, decided before any per-chunk work is done.

A shard is small, but each 48-byte term may name up to 8192 chunks of a stored xorb, and a
term may name the same range again and again. Checking a file costs time and memory per chunk
it references (verification hashes, the file's merkle hash, its sha256), so a 75 KiB shard
naming one 8192-chunk xorb 780 times cost 17 s of CPU and 755 MiB before it could be refused,
although its 6.4M references are within the absolute per-shard cap (cas_store). Chunks referenced for the first time in a shard are paid for by whoever uploaded them;
references repeated within the shard are paid for by nothing, so they get a budget proportional
to the shard's own size. Legitimate repetition (a file of zeros: one 128 KiB chunk per 96 bytes of
shard, a term and its verification entry) stays inside it with room to spare.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from ..core.shard import FileTerm
from .errors import Rejected

# Repeated references allowed per byte of shard: chunks (a term of 1-byte chunks costs per chunk)
# and uncompressed bytes (what hashing the sha256 of a repeated range costs).
REPEATED_CHUNKS_PER_SHARD_BYTE = 1 / 8
REPEATED_BYTES_PER_SHARD_BYTE = 2048
# Floors: what any shard may repeat (65536 more merkle leaves cost ~0.2 s; 1 GiB more of sha256
# about 1-2 s), so that small legitimate shards of periodic files are never refused.
REPEATED_CHUNKS_FLOOR = 65536
REPEATED_BYTES_FLOOR = 1 << 30


class WorkBudgetExceeded(Rejected):
    """The shard asks for far more repeated validation work than its size can justify (a hostile
    shard, not a big upload: unlike TooMuchWork, splitting it would not help)."""


def _merged_length(ranges: list[tuple[int, int]], prefix: Sequence[int]) -> tuple[int, int]:
    """(chunks, bytes) covered by the union of [start, end) chunk ranges; `prefix[i]` is the
    number of uncompressed bytes before chunk i."""
    chunks = size = 0
    cur_start = cur_end = -1
    for start, end in sorted(ranges):
        if start >= cur_end:
            if cur_end > cur_start:
                chunks += cur_end - cur_start
                size += prefix[cur_end] - prefix[cur_start]
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    if cur_end > cur_start:
        chunks += cur_end - cur_start
        size += prefix[cur_end] - prefix[cur_start]
    return chunks, size


def check_reference_budget(shard_size: int, terms: Iterable[FileTerm], chunk_sizes: Mapping[bytes, Sequence[int]]) -> None:
    """Refuse (WorkBudgetExceeded) a shard whose terms repeat far more chunks than it may.

    `chunk_sizes` maps each referenced xorb hash to its chunk sizes; terms must already be
    known to lie within their xorbs. Costs O(terms log terms), never per chunk.
    """
    by_xorb: dict[bytes, list[tuple[int, int]]] = {}
    for term in terms:
        by_xorb.setdefault(term.xorb_hash, []).append((term.chunk_start, term.chunk_end))
    total_chunks = total_bytes = unique_chunks = unique_bytes = 0
    for xorb, ranges in by_xorb.items():
        sizes = chunk_sizes[xorb]
        prefix = [0]
        for size in sizes:
            prefix.append(prefix[-1] + size)
        for start, end in ranges:
            total_chunks += end - start
            total_bytes += prefix[end] - prefix[start]
        chunks, size = _merged_length(ranges, prefix)
        unique_chunks += chunks
        unique_bytes += size
    repeated_chunks, repeated_bytes = total_chunks - unique_chunks, total_bytes - unique_bytes
    chunk_limit = max(REPEATED_CHUNKS_FLOOR, int(shard_size * REPEATED_CHUNKS_PER_SHARD_BYTE))
    byte_limit = max(REPEATED_BYTES_FLOOR, shard_size * REPEATED_BYTES_PER_SHARD_BYTE)
    if repeated_chunks > chunk_limit or repeated_bytes > byte_limit:
        raise WorkBudgetExceeded(
            f"shard of {shard_size} bytes references {repeated_chunks} chunks ({repeated_bytes} bytes) more than once; "
            f"at most {chunk_limit} chunks and {byte_limit} bytes of repeated references are accepted per shard of this size",
        )
