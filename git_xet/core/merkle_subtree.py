"""A summary of a contiguous run of a file's chunks that clients merge into the file hash.

A range edit (`GET /v2/file-chunk-hashes/{file}`, see server/file_chunk_hashes.py) lets a client
re-chunk only the edited windows of a stored file. It still has to compute the new file hash,
which is the aggregated hash tree over ALL chunks: the server hands it, for each untouched gap,
this summary (xet-core's `MerkleHashSubtree`, huggingface.js's `MerkleHashSubtreeJson`). It
keeps, per tree level, only the nodes whose grouping could still change when other chunks are
put before or after the run (a "hump": a left and a right fringe per level) and merges
everything in between into parent nodes, so it holds O(log n) nodes instead of n chunks.

Byte-exact with the clients' merge: the same content-defined groups as hashes.merkle_root
(a group ends after a node whose last lane is a multiple of 4, 2..9 nodes per group), and a
boundary counts as stable (no prefix or suffix can move it) when it follows three natural cuts
whose two gaps both lie in (2, 8) nodes. The server only builds summaries; clients merge them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from .constants import MAX_CHILDREN, MEAN_BRANCHING_FACTOR
from .hashes import hash_to_hex, last_lane, merged_node_hash

Node = tuple[bytes, int]  # (hash, bytes it covers)

MIN_GROUP = 2


def _is_natural_cut(digest: bytes) -> bool:
    return last_lane(digest) % MEAN_BRANCHING_FACTOR == 0


def _valid_gap(gap: int) -> bool:
    return MIN_GROUP < gap < MAX_CHILDREN - 1


def _group_length(nodes: Sequence[Node], start: int, stop: int) -> int:
    """How many nodes from `start` (before `stop`) form the next parent group."""
    remaining = stop - start
    if remaining <= MIN_GROUP:
        return remaining
    end = min(MAX_CHILDREN, remaining)
    for i in range(MIN_GROUP, end):
        if _is_natural_cut(nodes[start + i][0]):
            return i + 1
    return end


def stable_start(nodes: Sequence[Node]) -> int | None:
    """The first index at which a group starts whatever nodes come before; None if none is sure."""
    if len(nodes) < MIN_GROUP + 1:
        return None
    cuts: list[int] = []
    for pos, (digest, _) in enumerate(nodes):
        if not _is_natural_cut(digest):
            continue
        if len(cuts) >= 2 and _valid_gap(pos - cuts[-1]) and _valid_gap(cuts[-1] - cuts[-2]):
            return cuts[-1] + 1
        cuts.append(pos)
    return None


def stable_end(nodes: Sequence[Node]) -> int | None:
    """The last index at which a group starts whatever nodes come after; None if none is sure."""
    if len(nodes) < MIN_GROUP + 1:
        return None
    cuts: list[int] = []  # natural cuts seen so far, scanning from the end
    for pos in range(len(nodes) - 1, -1, -1):
        if not _is_natural_cut(nodes[pos][0]):
            continue
        if len(cuts) >= 2 and _valid_gap(cuts[-1] - pos) and _valid_gap(cuts[-2] - cuts[-1]):
            return cuts[-1] + 1
        cuts.append(pos)
    return None


def _split_and_promote(
    nodes: Sequence[Node], at_start: bool, at_end: bool
) -> tuple[int, int, list[Node]]:
    """(left fringe length, right fringe length, parents of the nodes between them)."""
    if len(nodes) <= 1:
        return len(nodes), 0, []
    first = 0 if at_start else stable_start(nodes)
    if first is None:
        return len(nodes), 0, []
    if at_end:
        stop: int | None = len(nodes)
    else:
        tail = stable_end(nodes[first:])
        stop = None if tail is None else first + tail
    if stop is None or first >= stop:
        return len(nodes), 0, []
    parents: list[Node] = []
    pos = first
    while pos < stop:
        n = _group_length(nodes, pos, stop)
        parents.append(merged_node_hash(nodes[pos : pos + n]))
        pos += n
    return first, len(nodes) - stop, parents


class MerkleSubtree(NamedTuple):
    """`nodes`: every level's left fringe (bottom up), then every level's right fringe (top down);
    `levels`: (left count, right count) per level; `at_start`/`at_end`: whether the run begins
    or ends the file (then that side needs no fringe)."""

    nodes: tuple[Node, ...]
    levels: tuple[tuple[int, int], ...]
    at_start: bool
    at_end: bool

    @classmethod
    def from_chunks(cls, at_start: bool, chunks: Sequence[Node], at_end: bool) -> MerkleSubtree:
        lefts: list[Node] = []
        rights: list[list[Node]] = []
        levels: list[tuple[int, int]] = []
        current: Sequence[Node] = chunks
        while True:
            # A side is at the file's edge on this level only while no lower level kept a fringe there.
            left_len, right_len, parents = _split_and_promote(
                current, at_start and not lefts, at_end and not any(rights)
            )
            lefts.extend(current[:left_len])
            rights.append(list(current[len(current) - right_len :]))
            levels.append((left_len, right_len))
            if len(parents) == 1:
                lefts.append(parents[0])
                levels.append((1, 0))
                rights.append([])
            if len(parents) <= 1:
                break
            current = parents
        nodes = lefts + [node for fringe in reversed(rights) for node in fringe]
        return cls(tuple(nodes), tuple(levels), at_start, at_end)

    def is_empty(self) -> bool:
        return not self.nodes

    def to_json(self) -> dict:
        """The serde form both upstream clients parse (hashes in the XET hex form)."""
        return {
            "nodes": [{"hash": hash_to_hex(h), "size": size} for h, size in self.nodes],
            "levels": [[left, right] for left, right in self.levels],
            "at_start": self.at_start,
            "at_end": self.at_end,
        }
