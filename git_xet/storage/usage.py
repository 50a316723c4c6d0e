"""Usage and dedup per repository and for the whole store, from the index alone.

Computed from each file's terms (chunk ranges of xorbs) and each xorb's chunk sizes, without
reading an object: a chunk range a file uses counts once per repository however many of its
files use it. For each repository:

    files              files it holds (its repo_files rows)
    logical_bytes      the sum of their sizes: what its users see
    unique_bytes       uncompressed bytes of the chunks only this repository uses
    shared_bytes       uncompressed bytes of the chunks it uses that another repository uses too
    dedup_ratio        logical_bytes / (unique_bytes + shared_bytes): 3.0 = each byte stored
                       serves three bytes of its files
    stored_bytes       stored bytes of the xorbs it uses, whole (objects: compressed chunks and footer)
    reclaimable_bytes  stored bytes of the xorbs only it uses: what deleting it and a gc after
                       the retention period give back (a xorb is removed whole or not at all)

The total (repo "*") has distinct files, the repositories' logical bytes summed, the bytes of
chunks one repository uses (unique) and of chunks several use (shared, counted once), every
indexed xorb's stored bytes, and as reclaimable the stored bytes of xorbs no repository uses
(failed pushes, deleted repositories' data; gc removes them once past their grace or
retention).

Cost: one pass over repo_files, files and xorbs (export_rows, streamed by both index kinds);
O(F + T log T + X) time for F (repository, file) pairs, T terms and X xorbs, and O(F + T)
memory: chunk ranges are swept per xorb (interval ends sorted), never expanded per chunk.
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass

from ..core.hashes import hash_to_hex
from ..core.xorb import stored_size
from .index_base import MetadataIndex, unpack_terms, unpack_u32s

TOTAL = "*"  # the repo name of the store-wide row


@dataclass(frozen=True)
class RepoUsage:
    """One repository's figures (see the module docstring), or the store's (repo TOTAL)."""

    repo: str
    files: int
    logical_bytes: int
    unique_bytes: int
    shared_bytes: int
    dedup_ratio: float
    stored_bytes: int = 0
    reclaimable_bytes: int = 0

    def as_json(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class Usage:
    repos: list[RepoUsage]  # sorted by name
    total: RepoUsage


def _ratio(logical: int, stored: int) -> float:
    return round(logical / stored, 3) if stored else 1.0


def usage(index: MetadataIndex) -> Usage:
    """Every repository's usage and the store's (one pass over the index: see the module docstring)."""
    repos_of: dict[str, set[str]] = defaultdict(set)
    for repo, file_hex in index.export_rows("repo_files"):
        repos_of[file_hex].add(repo)
    files = Counter[str]()
    logical = Counter[str]()
    distinct_files = 0
    # xorb hex -> (chunk_start, chunk_end, repos of the file) of every term using it
    ranges: dict[str, list[tuple[int, int, frozenset[str]]]] = defaultdict(list)
    for file_hex, size, _sha256, blob in index.export_rows("files"):
        repos = repos_of.get(file_hex)
        if not repos:
            continue
        holders = frozenset(repos)
        distinct_files += 1
        for repo in holders:
            files[repo] += 1
            logical[repo] += size
        for term in unpack_terms(blob):
            ranges[hash_to_hex(term.xorb_hash)].append((term.chunk_start, term.chunk_end, holders))
    unique = Counter[str]()
    shared = Counter[str]()
    stored = Counter[str]()
    reclaimable = Counter[str]()
    total_unique = total_shared = total_stored = total_unused = 0
    for xorb_hex, num_chunks, body, _unpacked, _hashes, _ends, sizes in index.export_rows("xorbs"):
        body_size = stored_size(body, num_chunks)
        total_stored += body_size
        terms = ranges.pop(xorb_hex, None)
        if terms is None:
            total_unused += body_size
            continue
        users = frozenset().union(*(holders for _, _, holders in terms))
        for repo in users:
            stored[repo] += body_size
        if len(users) == 1:
            reclaimable[next(iter(users))] += body_size
        offsets = [0, *itertools.accumulate(unpack_u32s(bytes(sizes)))]
        for start, end, holders in _segments(terms):
            nbytes = offsets[min(end, len(offsets) - 1)] - offsets[min(start, len(offsets) - 1)]
            if len(holders) == 1:
                unique[next(iter(holders))] += nbytes
                total_unique += nbytes
            else:
                for repo in holders:
                    shared[repo] += nbytes
                total_shared += nbytes
    rows = [
        RepoUsage(r, files[r], logical[r], unique[r], shared[r], _ratio(logical[r], unique[r] + shared[r]), stored[r], reclaimable[r])
        for r in sorted(files)
    ]
    total_logical = sum(logical.values())
    total = RepoUsage(TOTAL, distinct_files, total_logical, total_unique, total_shared, _ratio(total_logical, total_unique + total_shared), total_stored, total_unused)
    return Usage(rows, total)


def repo_usage(index: MetadataIndex, repo: str | None = None) -> list[RepoUsage]:
    """Usage of every repository (or of `repo` alone: empty if it holds nothing). Sharing is a
    property of the whole store, so one repository costs the same pass as all."""
    rows = usage(index).repos
    return rows if repo is None else [r for r in rows if r.repo == repo]


def _segments(terms: list[tuple[int, int, frozenset[str]]]) -> list[tuple[int, int, frozenset[str]]]:
    """Split a xorb's chunk ranges into disjoint [start, end) pieces, each with the repositories
    using it (pieces nobody uses left out): a sweep over the sorted range ends, O(k log k) for
    k ranges plus the repositories active at each piece."""
    events: list[tuple[int, int, frozenset[str]]] = []
    for start, end, holders in terms:
        if end > start:
            events.append((start, 1, holders))
            events.append((end, -1, holders))
    events.sort(key=lambda e: (e[0], e[1]))
    active = Counter[str]()
    pieces: list[tuple[int, int, frozenset[str]]] = []
    previous = 0
    for position, step, holders in events:
        if position > previous and active:
            pieces.append((previous, position, frozenset(active)))
        previous = position
        for repo in holders:
            active[repo] += step
            if not active[repo]:
                del active[repo]
    return pieces
