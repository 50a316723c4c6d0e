"""Several small files' upload bundles as one: the pure part of sending a command's small files
together (issue 44 §2), one request where each file cost one.

An upload bundle (upload_bundle.py) is a shard in upload form and the xorbs it needs. The
server's CPU per small file is mostly per request (`bench/bundle_batching.py`: ~1.75 ms per
request + ~0.25 ms per file), so files sent together cost it a fraction. Merging keeps every
per-file check the server makes: the merged shard names each file with its own terms,
verification hashes and sha256 claim, exactly as its own shard did (a shard built from all the
files at once serializes to the same bytes), and the server answers refusals per file.

What fits one bundle is bounded here (MAX_GROUP_FILES, MAX_BUNDLE_XORBS, MAX_GROUP_BYTES), so a
group never makes a body the server refuses for its size.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from .hashes import hash_to_hex
from .shard import Shard, parse_shard, serialize_shard
from .upload_bundle import MAX_BUNDLE_XORBS

# Files per merged bundle: past ~8 the server's saving per file is small (bench/bundle_batching.py:
# 0.63 ms/file at 4, 0.45 at 8) and one refusal sends more files back to their own requests.
MAX_GROUP_FILES = 8
# Bytes of xorbs and shards per merged bundle: well under the server's MAX_BUNDLE_BODY (32 MiB,
# server/extension.py), which a client must not need to know exactly.
MAX_GROUP_BYTES = 16 * 1024 * 1024
# The merged shard stays one the server validates at once (server/shard_intake.py SMALL_SHARD_BYTES,
# SMALL_SHARD_CHUNKS): a bigger one waits for one of its two validation turns, and the group would
# then cost its files more than their own small bundles.
MAX_GROUP_SHARD_BYTES = 64 * 1024
MAX_GROUP_CHUNKS = 64


class BundleParts(NamedTuple):
    """One upload bundle before packing: its xorbs ((hex hash, footerless body) pairs), its
    shard in upload form, how many chunks the shard's files name (referenced_chunks), and the
    shard parsed (merging and answering a group read it, not the bytes again)."""

    xorbs: tuple[tuple[str, bytes], ...]
    shard: bytes
    chunks: int
    parsed: Shard

    @classmethod
    def of(cls, xorbs: Sequence[tuple[str, bytes]], shard: bytes, parsed: Shard | None = None) -> BundleParts:
        """`xorbs` and `shard` (`parsed`: the shard already parsed, if the caller has it)."""
        parsed = parse_shard(shard) if parsed is None else parsed
        return cls(tuple(xorbs), shard, referenced_chunks(parsed), parsed)

    @property
    def size(self) -> int:
        return len(self.shard) + sum(len(body) for _, body in self.xorbs)


def referenced_chunks(shard: Shard) -> int:
    """How many chunks `shard`'s files name in all, as the server counts them for its bound."""
    return sum(max(t.chunk_end - t.chunk_start, 0) for info in shard.files for t in info.terms)


def fits_with(group: Sequence[BundleParts], more: BundleParts) -> bool:
    """Whether `more` can join `group` in one bundle (an empty group takes anything: a bundle
    too big for a group is sent alone, as it was before grouping)."""
    if not group:
        return True
    xorbs = {h for parts in (*group, more) for h, _ in parts.xorbs}
    return (
        len(group) < MAX_GROUP_FILES
        and len(xorbs) <= MAX_BUNDLE_XORBS
        and sum(parts.size for parts in group) + more.size <= MAX_GROUP_BYTES
        # sums of the parts: bounds of the merged shard (its header and bookends are written once)
        and sum(len(parts.shard) for parts in group) + len(more.shard) <= MAX_GROUP_SHARD_BYTES
        and sum(parts.chunks for parts in group) + more.chunks <= MAX_GROUP_CHUNKS
    )


def merge_bundles(group: Sequence[BundleParts]) -> BundleParts:
    """One bundle holding every file and xorb of `group`: the shards' file and CAS infos
    concatenated (serialize_shard orders them and keeps one entry per hash, as the server
    would have stored them from separate shards), each xorb once."""
    if not group:
        raise ValueError("a merged bundle needs at least one bundle")
    if len(group) == 1:
        return group[0]
    shards = [parts.parsed for parts in group]
    merged = Shard(
        tuple(info for shard in shards for info in shard.files),
        tuple(info for shard in shards for info in shard.cas),
    )
    xorbs: dict[str, bytes] = {}
    for parts in group:
        for xorb_hex, body in parts.xorbs:
            xorbs.setdefault(xorb_hex, body)
    return BundleParts.of(tuple(xorbs.items()), serialize_shard(merged, with_footer=False), merged)


def groupable(xorbs: Sequence[tuple[str, bytes | memoryview]], shard: bytes) -> BundleParts | None:
    """`xorbs` and `shard` as BundleParts when they may go with other files: every xorb the
    shard's CAS infos name is in the bundle (none went earlier in an upload stream, whose
    header a merged bundle cannot carry), and the bundle alone is within a group's bounds.
    None: it goes alone, as before grouping."""
    if len(shard) > MAX_GROUP_SHARD_BYTES or not 0 < len(xorbs) <= MAX_BUNDLE_XORBS:
        return None
    parsed = parse_shard(shard)
    held = {xorb_hex for xorb_hex, _ in xorbs}
    if any(hash_to_hex(info.xorb_hash) not in held for info in parsed.cas):
        return None
    parts = BundleParts.of([(xorb_hex, bytes(body)) for xorb_hex, body in xorbs], shard, parsed)
    return parts if parts.size <= MAX_GROUP_BYTES and parts.chunks <= MAX_GROUP_CHUNKS else None
